"""Dump Ray's State API (ray.util.state.list_actors / list_workers / list_nodes, detail=True) as JSON.

python dump_state.py OUT_DIR [--prefix state]   (the cluster must still be alive)
"""

import argparse
import dataclasses
import json
import os

from ray.util.state import list_actors, list_nodes, list_workers


def rows(items):
    return [dataclasses.asdict(x) if dataclasses.is_dataclass(x) else dict(x) for x in items]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--prefix", default="state")
    ap.add_argument("--workers", action="store_true", help="also dump list_workers(detail=True)")
    a = ap.parse_args()
    dumps = {"actors": lambda: list_actors(detail=True, limit=1000)}
    if a.workers:
        dumps["workers"] = lambda: list_workers(detail=True, limit=1000)
        dumps["nodes"] = lambda: list_nodes(detail=True, limit=1000)
    for name, fn in dumps.items():
        with open(os.path.join(a.out_dir, f"{a.prefix}_{name}.json"), "w") as f:
            json.dump(rows(fn()), f, indent=2, sort_keys=True, default=str)
            f.write("\n")


if __name__ == "__main__":
    main()
