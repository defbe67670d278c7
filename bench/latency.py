"""Issue 7, part 2: from a line appended to a log to that line counted by the engine, with inotify and polling,
and to that line on the dashboard's screen.

The engine runs as ``rlwatch watch`` runs it (its own threads: file watcher, log loop, sampling loop, server
probe) on a trial of eight logs, configured by discovery. One process appends step lines to the trainer's log at
random intervals; a subscriber to the ``step`` kind notes when each is counted. The appends are spaced out so
each one is a separate change, as lines of a live run are. For the screen, the dashboard runs in a terminal of its
own (a pty of 160 by 48) and each appended line carries a word of letters that is looked for in what it draws.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import PtyProcess, fmt, percentile, rlwatch_argv, wait_until
from bench.rundirs import live_run
from rlwatch.common.state import LogLine
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.sim import formats

_MARK = re.compile(r"Train step (\d+)/(\d+) done")


@dataclass(slots=True)
class LatencyResult:
    mode: str
    samples: list[float]  # seconds
    lost: int
    note: str = ""
    target_ms: float = 100.0  # the target: counted within 100 ms, on screen within 250 ms
    until: str = "counted"

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


def _word(i: int) -> str:
    """A mark of letters only (digits may be styled apart from their neighbours on screen)."""
    out = ""
    for _ in range(5):
        i, r = divmod(i, 26)
        out += chr(ord("a") + r)
    return "mk" + out  # short: the log view cuts long lines at the panel's edge


def _screen(run_dir: Path, log: Path, *, samples: int, seed: int) -> LatencyResult:
    """Appended line → drawn by the dashboard, read off its terminal."""
    dash = PtyProcess(rlwatch_argv(str(run_dir), "--interval", "1", "--readonly"))
    rng = random.Random(seed)
    took: list[float] = []
    lost = 0
    note = ""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        ready = b"trainer.log"
        dash.watch_for(ready)
        if not wait_until(lambda: dash.seen(ready) is not None or dash.proc.poll() is not None, 60, step=0.01):
            return LatencyResult("inotify", [], samples, "the dashboard drew no frame", 250.0, "on screen")
        time.sleep(3)  # let the first frames and the first sampling round pass: not synchronisation
        for i in range(samples):
            time.sleep(rng.uniform(0.05, 0.25))  # pacing between appends
            word = _word(seed * 100_000 + i)
            mark = word.encode()
            dash.watch_for(mark)
            line = formats.areal("StatsLogger", "INFO", f"{word} Train step {i + 1}/900000 done.")
            t0 = time.monotonic() - dash.started
            os.write(fd, (line + "\n").encode())
            if wait_until(lambda m=mark: dash.seen(m) is not None, 3.0, step=0.01):  # type: ignore[misc]
                took.append((dash.seen(mark) or 0.0) - t0)
            else:
                lost += 1
        if dash.proc.poll() is not None:
            note = f"the dashboard exited: {dash.tail()[-300:]!r}"
    finally:
        os.close(fd)
        dash.stop()
    return LatencyResult("inotify", took, lost, note, 250.0, "on screen")


def run(data_dir: Path, samples: int) -> list[LatencyResult]:
    root = data_dir / "latency-run"
    logs = live_run(root, logs=8, backlog_steps=20)
    results = [
        _measure(root, logs[0], polling=False, samples=samples, seed=1),
        _measure(root, logs[0], polling=True, samples=samples, seed=2),
        _screen(root, logs[0], samples=min(samples, 100), seed=3),
    ]
    return results


def markdown(results: list[LatencyResult]) -> list[str]:
    out = [
        "| until the line is | file change noticed by | samples | p50 | p90 | p99 | max | missed within 3 s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        out.append(
            f"| {_until(r)} | {r.mode} | {len(r.samples)} | {fmt(r.p(50), 1, ' ms')} | {fmt(r.p(90), 1, ' ms')} | "
            f"{fmt(r.p(99), 1, ' ms')} | {fmt(max(r.samples, default=float('nan')) * 1000, 1, ' ms')} | {r.lost} |"
        )
    out += [f"- {_until(r)}, {r.mode}: {r.note}" for r in results if r.note]
    return out


def _until(r: LatencyResult) -> str:
    # getattr: results pickled before the screen measurement existed have no such field
    return "on the dashboard's screen" if getattr(r, "until", "counted") == "on screen" else "counted by the engine"
