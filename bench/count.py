"""One backlog count in a fresh process: the tailer reads a file from its start and the event counter counts it.

Printed as one JSON object: wall and CPU seconds of the count (imports excluded), bytes, the count of every
reported kind, which needle scanner ran, and the peak RSS. Run as ``python -m bench.count FILE``; set
``RLWATCH_SCANNER=re`` to force the pure-Python scanner.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from rlwatch.clock import SystemClock
from rlwatch.config import EventsConfig
from rlwatch.events import EventCounter, build_kinds
from rlwatch.patterns import Matcher
from rlwatch.tailer import Tailer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.count")
    p.add_argument("path")
    args = p.parse_args(argv)
    kinds = build_kinds(EventsConfig())
    t0 = time.perf_counter()
    c0 = time.process_time()
    tailer = Tailer([args.path])
    counter = EventCounter(kinds, SystemClock())
    size = 0
    while True:
        chunks = tailer.poll()
        if not chunks:
            break
        for chunk in chunks:
            size += len(chunk.data)
            counter.feed(chunk)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    tailer.close()
    out = {
        "wall_s": wall,
        "cpu_s": cpu,
        "bytes": size,
        "counts": {name: s.count for name, s in counter.summaries().items()},
        "incidents": len(counter.incidents()),
        "scanner": Matcher(kinds).scanner,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
