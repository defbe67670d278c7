"""Issue 7, part 5: how long until there is something to read, and what a big backlog costs a fresh process.

- The dashboard's first frame: from starting ``rlwatch RUN_DIR`` in a pseudo-terminal to the first time the
  trainer's log name is drawn (the screen is filled from the engine's first snapshot).
- ``rlwatch report`` over the 1 GiB backlog: wall time and peak RSS.
- ``rlwatch watch`` over the 1 GiB backlog: time until its stream starts (the backlog is counted by then) and its
  RSS afterwards, which the memory target is about.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.common import PtyProcess, Timed, fmt, median, rlwatch_argv, run_timed, started, wait_until
from bench.datagen import Dataset
from bench.rundirs import backlog_run, live_run


@dataclass(slots=True)
class StartupResult:
    first_frame: list[float]  # seconds, trial of 8 logs
    first_frame_backlog: list[float]  # seconds, the 1 GiB backlog
    report: list[Timed]
    watch_ready_s: float | None
    watch_rss_mb: float | None
    live_backlog_mb: float
    notes: list[str] = field(default_factory=list)


def first_frame(run_dir: Path, timeout: float) -> float | None:
    p = PtyProcess(rlwatch_argv(str(run_dir), "--readonly"))
    mark = b"trainer.log"
    p.watch_for(mark)
    try:
        wait_until(lambda: p.seen(mark) is not None or p.proc.poll() is not None, timeout, step=0.005)
        return p.seen(mark)
    finally:
        p.stop()


def _watch_backlog(run_dir: Path, out_path: Path, timeout: float) -> tuple[float | None, float | None]:
    with out_path.open("wb") as out, started(rlwatch_argv("watch", str(run_dir), "--interval", "1"), stdout=out) as p:
        t0 = time.perf_counter()
        # Its stream starts once the backlog is counted ("HH:MM:SS watching RUN_DIR ..."); the watchdog's own line
        # ("HH:MM:SS watchdog: acting on ...") comes at once, before it.
        if not wait_until(lambda: b" watching " in out_path.read_bytes() or p.poll() is not None, timeout, step=0.02):
            return None, None
        ready = time.perf_counter() - t0
        time.sleep(3)  # a few sampling rounds on top of the counted backlog
        try:
            rss = sum(q.memory_info().rss for q in [psutil.Process(p.pid)]) / 2**20
        except psutil.Error:
            rss = None
        return ready, rss


def run(data_dir: Path, ds: Dataset, *, frames: int, reports: int, big: bool) -> StartupResult:
    notes: list[str] = []
    live = data_dir / "startup-run"
    paths = live_run(live, logs=8, backlog_steps=50)
    live_mb = sum(p.stat().st_size for p in paths) / 1e6
    frames_s = [f for f in (first_frame(live, 30) for _ in range(frames)) if f is not None]
    if len(frames_s) < frames:
        notes.append(f"{frames - len(frames_s)} dashboard start(s) drew no frame within 30 s")
    backlog = data_dir / "backlog-run"
    backlog_run(backlog, ds)
    reports_t = []
    for _ in range(reports):
        t = run_timed(rlwatch_argv("report", str(backlog)))
        if t.returncode not in (0, 1):
            notes.append(f"rlwatch report failed ({t.returncode}): {t.output[-300:]!r}")
        reports_t.append(t)
    big_frames: list[float] = []
    ready: float | None = None
    rss: float | None = None
    if big:
        with contextlib.suppress(Exception):
            f = first_frame(backlog, 300)
            if f is not None:
                big_frames.append(f)
        ready, rss = _watch_backlog(backlog, data_dir / "startup-watch.out", 300)
    subprocess.run(["sync"], check=False)
    return StartupResult(frames_s, big_frames, reports_t, ready, rss, live_mb, notes)


def markdown(r: StartupResult, ds: Dataset) -> list[str]:
    gib = ds.size / 2**30
    out = [
        "| what | runs | median | min | max | peak RSS |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| dashboard first frame, trial of 8 logs ({r.live_backlog_mb:.1f} MB of backlog) | {len(r.first_frame)} | "
        f"{fmt(median(r.first_frame), 2, ' s')} | {fmt(min(r.first_frame, default=None), 2, ' s')} | "
        f"{fmt(max(r.first_frame, default=None), 2, ' s')} | — |",
    ]
    if r.first_frame_backlog:
        f = r.first_frame_backlog
        out.append(
            f"| dashboard first frame, {gib:.2f} GiB backlog | {len(f)} | {fmt(median(f), 2, ' s')} | "
            f"{fmt(min(f), 2, ' s')} | {fmt(max(f), 2, ' s')} | — |"
        )
    if r.report:
        times = [t.seconds for t in r.report]
        out.append(
            f"| `rlwatch report` over the {gib:.2f} GiB backlog | {len(times)} | {fmt(median(times), 2, ' s')} | "
            f"{fmt(min(times), 2, ' s')} | {fmt(max(times), 2, ' s')} | "
            f"{fmt(max(t.max_rss_mb for t in r.report), 0, ' MB')} |"
        )
    if r.watch_ready_s is not None:
        out.append(
            f"| `rlwatch watch` over the {gib:.2f} GiB backlog: until its stream starts (the backlog counted) | 1 | "
            f"{fmt(r.watch_ready_s, 2, ' s')} | — | — | {fmt(r.watch_rss_mb, 0, ' MB')} (3 s after) |"
        )
    out += [f"- {n}" for n in r.notes]
    return out


# ---------------------------------------------------------------------------------------- the start alone (issue 35)


def _cpu_of(argv: list[str], env: dict[str, str] | None, cwd: str) -> tuple[float, float]:
    """(wall, CPU of the process and its children) of one command run to its end."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, cwd=cwd, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:5]} failed ({done.returncode}): {done.stderr.decode(errors='replace')[-400:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def start_alone(data_dir: Path, runs: int, before: str | None = None) -> list[str]:
    """CPU of `rlwatch report` over a run whose one log is empty (the start: interpreter, imports, set-up, one
    sampling round, the report), beside the interpreter's own start (`python -c pass`) and `grep -c` over the same
    empty file; every contender once per round, the order turned each round, medians. ``before``: another checkout
    of rlwatch, run from its own folder in the same rounds. The sources are compiled to bytecode first (an install
    has it)."""
    import os
    import sys

    from bench.common import PYTHON, ROOT, compile_bytecode

    run_dir = data_dir / "start-empty-run"
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "trainer.log"
    log.write_bytes(b"")
    compile_bytecode(*([before] if before else []))
    contenders: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "`python -c pass`": ([PYTHON, "-c", "pass"], None),
        "`grep -c x` over the empty log": (["grep", "-c", "x", str(log)], None),
        "`rlwatch report RUN_DIR`": (rlwatch_argv("report", str(run_dir)), None),
        "`rlwatch report --json RUN_DIR`": (rlwatch_argv("report", "--json", str(run_dir)), None),
    }
    if before:
        env = {**os.environ, "PYTHONPATH": before}
        contenders["`rlwatch report RUN_DIR`, before"] = (rlwatch_argv("report", str(run_dir)), env)
        contenders["`rlwatch report --json RUN_DIR`, before"] = (rlwatch_argv("report", "--json", str(run_dir)), env)
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    wall: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for i in range(runs):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            # `python -c` puts its working directory first on the path: each checkout runs from its own folder
            w, c = _cpu_of(*contenders[name], cwd=before if name.endswith(", before") and before else str(ROOT))
            wall[name].append(w)
            cpu[name].append(c)
        print(f"  round {i + 1}/{runs}: " + ", ".join(f"{n} {cpu[n][-1]:.2f}" for n in names), file=sys.stderr)
    peer = median(cpu["`python -c pass`"])
    out = [
        "| contender | CPU (median) | runs (CPU) | wall (median) | CPU − the interpreter's start |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for name in names:
        c = median(cpu[name])
        out.append(
            f"| {name} | {c:.3f} s | {', '.join(f'{v:.2f}' for v in cpu[name])} | {median(wall[name]):.3f} s | "
            f"{c - peer:.3f} s |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    from bench.common import DATA

    p = argparse.ArgumentParser(prog="python -m bench.startup", description="the start of `rlwatch report` alone")
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--before", default=None, help="another checkout of rlwatch, timed in the same rounds")
    args = p.parse_args(argv)
    print("\n".join(start_alone(DATA, args.runs, args.before)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
