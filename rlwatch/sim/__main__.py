"""``python -m rlwatch.sim SCENARIO DIR [--speed X] [--seed N]``."""

from __future__ import annotations

import argparse
import sys

from rlwatch.sim.scenarios import SCENARIOS
from rlwatch.sim.supervisor import run_supervised


def main(argv: list[str] | None = None) -> int:
    listing = "\n".join(f"  {name:<14} {text}" for name, text in SCENARIOS.items())
    p = argparse.ArgumentParser(
        prog="python -m rlwatch.sim",
        description="Run a simulated training host into DIR until interrupted.",
        epilog=f"scenarios:\n{listing}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", metavar="SCENARIO", choices=list(SCENARIOS))
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--speed", type=float, default=1.0, help="speed-up of every interval (default 1: a step every ~2 s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random parts (rewards, durations)")
    args = p.parse_args(argv)
    if not args.speed > 0:
        p.error(f"--speed must be greater than 0, got {args.speed}")
    return run_supervised(args.scenario, args.dir, speed=args.speed, seed=args.seed)


if __name__ == "__main__":
    sys.exit(main())
