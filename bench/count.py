"""One backlog count in a fresh process, as ``rlwatch watch`` and the dashboard count one: the engine's log path
(tailer, event counter, training tracker, log-view tags and deferred tail) over a file from its start.

Printed as one JSON object: wall and CPU seconds of the count (imports and set-up excluded), bytes, the count of
every reported kind, which needle scanner ran, and the peak RSS. Run as ``python -m bench.count FILE``; set
``RLWATCH_SCANNER=re`` to force the pure-Python scanner. ``--span START:END`` counts only those bytes (both at
line starts), read in the tailer's 1 MiB blocks: two such processes on two halves of a file show what a parallel
backlog scan could at best gain on this machine. ``--counter-only`` leaves the tracker and the log view out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rlwatch.common.clock import SystemClock
from rlwatch.config.models import Config, EventsConfig
from rlwatch.engine.engine import Engine
from rlwatch.logs.events import EventCounter, build_kinds
from rlwatch.logs.matcher import Matcher
from rlwatch.logs.newlines import count_lines
from rlwatch.logs.tailer import Chunk, Tailer

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
    p.add_argument("--counter-only", action="store_true", help="the event counter alone, no tracker or log view")
    args = p.parse_args(argv)
    path = os.path.abspath(args.path)
    kinds = build_kinds(EventsConfig())
    counter: EventCounter
    feed: Callable[[Chunk], None]
    if args.counter_only:
        counter = EventCounter(kinds, SystemClock())
        feed = counter.feed
    else:
        cfg = Config.model_validate({"training": {"logs": [path]}, "gpu": {"backend": "none"}})
        engine = Engine(cfg, Path(path).parent)
        counter = engine.counter
        feed = engine.feed_chunk
    t0 = time.perf_counter()
    c0 = time.process_time()
    size = 0
    if args.span:
        start, end = (int(v) for v in args.span.split(":"))
        chunks: Iterator[Chunk] = _span_chunks(path, start, end)
    else:
        chunks = _tail(path)
    for chunk in chunks:
        size += len(chunk.data)
        feed(chunk)
    if not args.counter_only:
        engine.build()  # what a snapshot then reads (the tracker's queued lines, the summaries)
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


def _tail(path: str) -> Iterator[Chunk]:
    tailer = Tailer([path])
    try:
        while chunks := tailer.poll():
            yield from chunks
    finally:
        tailer.close()


if __name__ == "__main__":
    sys.exit(main())
