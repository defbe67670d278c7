"""Issue 7, part 2: from a line appended to a log to that line counted by the engine, with inotify and polling.

The engine runs as ``rlwatch watch`` runs it (its own threads: file watcher, log loop, sampling loop, server
probe) on a trial of eight logs, configured by discovery. One process appends step lines to the trainer's log at
random intervals; a subscriber to the ``step`` kind notes when each is counted. The appends are spaced out so
each one is a separate change, as lines of a live run are.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import fmt, percentile
from bench.rundirs import live_run
from rlwatch.config_load import resolve_config
from rlwatch.engine import Engine
from rlwatch.sim import formats
from rlwatch.state import LogLine

_MARK = re.compile(r"Train step (\d+)/(\d+) done")


@dataclass(slots=True)
class LatencyResult:
    mode: str
    samples: list[float]  # seconds
    lost: int
    note: str = ""

    def p(self, q: float) -> float:
        return percentile(self.samples, q) * 1000


def _measure(run_dir: Path, log: Path, *, polling: bool, samples: int, seed: int) -> LatencyResult:
    cfg, _ = resolve_config(run_dir, None, "auto")
    engine = Engine(cfg, run_dir, force_polling=polling)
    counted: dict[int, float] = {}
    arrived = threading.Condition()

    total = 700_000 + seed  # lines of an earlier measurement, counted from the backlog, carry another total

    def on_step(line: LogLine) -> None:
        m = _MARK.search(line.text)
        if m and int(m.group(2)) == total:
            with arrived:
                counted[int(m.group(1))] = time.perf_counter()
                arrived.notify_all()

    engine.counter.subscribe("step", on_step)
    engine.drain_logs()
    engine.start()
    rng = random.Random(seed)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    took: list[float] = []
    lost = 0
    note = ""
    try:
        if not polling:
            deadline = time.monotonic() + 10
            while engine.waker.mode != "inotify" and time.monotonic() < deadline:
                time.sleep(0.01)
            if engine.waker.mode != "inotify":
                note = f"inotify not in use ({engine.waker.error or 'watcher not ready'}): these are polling figures"
        for i in range(samples):
            time.sleep(rng.uniform(0.02, 0.12))  # pacing between appends, not synchronisation
            line = formats.areal(
                "StatsLogger", "INFO", f"Epoch 1/1 Step {i + 1}/{total} Train step {i + 1}/{total} done."
            )
            t0 = time.perf_counter()
            os.write(fd, (line + "\n").encode())
            with arrived:
                ok = arrived.wait_for(lambda i=i: i + 1 in counted, timeout=3.0)  # type: ignore[misc]
            if ok:
                took.append(counted[i + 1] - t0)
            else:
                lost += 1
    finally:
        os.close(fd)
        engine.stop()
    return LatencyResult("polling (forced)" if polling else "inotify", took, lost, note)


def run(data_dir: Path, samples: int) -> list[LatencyResult]:
    root = data_dir / "latency-run"
    logs = live_run(root, logs=8, backlog_steps=20)
    results = [
        _measure(root, logs[0], polling=False, samples=samples, seed=1),
        _measure(root, logs[0], polling=True, samples=samples, seed=2),
    ]
    return results


def markdown(results: list[LatencyResult]) -> list[str]:
    out = [
        "| file change noticed by | samples | p50 | p90 | p99 | max | not counted within 3 s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        out.append(
            f"| {r.mode} | {len(r.samples)} | {fmt(r.p(50), 1, ' ms')} | {fmt(r.p(90), 1, ' ms')} | "
            f"{fmt(r.p(99), 1, ' ms')} | {fmt(max(r.samples, default=float('nan')) * 1000, 1, ' ms')} | {r.lost} |"
        )
    out += [f"- {r.mode}: {r.note}" for r in results if r.note]
    return out
