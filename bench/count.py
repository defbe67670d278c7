"""One backlog count in a fresh process: the tailer reads a file from its start and the event counter counts it.

Printed as one JSON object: wall and CPU seconds of the count (imports excluded), bytes, the count of every
reported kind, which needle scanner ran, and the peak RSS. Run as ``python -m bench.count FILE``; set
``RLWATCH_SCANNER=re`` to force the pure-Python scanner. ``--span START:END`` counts only those bytes (both at
line starts), read in the tailer's 1 MiB blocks: two such processes on two halves of a file show what a parallel
backlog scan could at best gain on this machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Iterator

from rlwatch.clock import SystemClock
from rlwatch.config import EventsConfig
from rlwatch.events import EventCounter, build_kinds
from rlwatch.patterns import Matcher
from rlwatch.tailer import Chunk, Tailer, count_lines

BLOCK = 1 << 20


def _span_chunks(path: str, start: int, end: int) -> Iterator[Chunk]:
    """The complete lines of ``path[start:end]`` in chunks cut as the tailer cuts them."""
    with open(path, "rb", buffering=0) as fh:
        fh.seek(start)
        pos, lineno, pending = start, 1, b""
        while pos < end:
            block = pending + fh.read(min(BLOCK, end - pos))
            pos = fh.tell()
            cut = block.rfind(b"\n") + 1 if pos < end else len(block)
            data, pending = block[:cut], block[cut:]
            if data:
                n = count_lines(data)
                yield Chunk(path, data, lineno, n)
                lineno += n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.count")
    p.add_argument("path")
    p.add_argument("--span", default=None, metavar="START:END", help="count only these bytes")
    args = p.parse_args(argv)
    kinds = build_kinds(EventsConfig())
    t0 = time.perf_counter()
    c0 = time.process_time()
    counter = EventCounter(kinds, SystemClock())
    size = 0
    if args.span:
        start, end = (int(v) for v in args.span.split(":"))
        for chunk in _span_chunks(args.path, start, end):
            size += len(chunk.data)
            counter.feed(chunk)
    else:
        tailer = Tailer([args.path])
        while chunks := tailer.poll():
            for chunk in chunks:
                size += len(chunk.data)
                counter.feed(chunk)
        tailer.close()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
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
