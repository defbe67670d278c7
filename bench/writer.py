"""Logs that grow while rlwatch watches them: a separate process appending whole lines at a steady pace.

Each log gets the text of an AReaL trainer, step after step with the current time, about ``lines`` lines every
``period`` seconds (a rank logging a 14 KB step every ten seconds writes about 1.4 KB/s). Runs until killed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.datagen import LiveStream


class GrowingLog:
    def __init__(self, path: Path, seed: int, rare_every: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.stream = LiveStream(seed=seed, rare_every=rare_every)
        self.pending: list[bytes] = []

    def append(self, lines: int) -> int:
        while len(self.pending) < lines:
            self.pending.extend(self.stream.next_step().splitlines(keepends=True))
        out, self.pending = b"".join(self.pending[:lines]), self.pending[lines:]
        os.write(self.fd, out)
        return len(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.writer")
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--period", type=float, default=1.0)
    p.add_argument("--lines", type=int, default=4, help="lines per log per period")
    p.add_argument("--rare-every", type=int, default=25, help="a rare event every N steps (0: none)")
    args = p.parse_args(argv)
    logs = [GrowingLog(path, seed=i, rare_every=args.rare_every) for i, path in enumerate(args.paths)]
    next_at = time.monotonic()
    while True:
        for log in logs:
            log.append(args.lines)
        next_at += args.period
        time.sleep(max(0.0, next_at - time.monotonic()))


if __name__ == "__main__":
    sys.exit(main())
