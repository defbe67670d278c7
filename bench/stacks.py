"""What sampling the run's stacks costs, and how soon a hang and a straggler are named from them.

``python -m bench.stacks`` (``--quick``: shorter windows) runs, on this machine:

1. **cost**: 8 rank processes stepping through a barrier (bench/stack_ranks.py); one ``py-spy dump --nonblocking``
   of each, many times, against ``py-spy record --nonblocking --rate 1`` per rank for 3 s and for 20 s (its start
   and each further sample): CPU seconds per sample (the children's rusage). Then rlwatch's sampler itself
   (sources/sampler) over the 8 ranks at its default budget, with each ``stacks.method``: its CPU (this process's
   and its children's) as a share of one core, and how many reads it made.
2. **hang**: 2 ranks; rank 1 waits for ever on a socket after 150 steps (seconds into the reads, at no particular
   moment of their cadence) while rank 0 logs a heartbeat: the seconds from the last logged step until the stacks
   declare the run hung (window: the default ``hang_floor_s``, 60 s; ``--quick``: 10 s), and what it says.
3. **straggler**: 2 ranks, rank 1 spending 0.6 s more per step in ``decode_and_augment``: the seconds until it is
   named (window: the default ``straggler_window_s``, 90 s; ``--quick``: 20 s), and what it says.

Writes ``bench/RESULTS-stacks.md`` (a part or ``--quick``: ``bench/data/stacks.md``) and prints it. Timings are
evidence to read, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlwatch.common.clock import SystemClock
from rlwatch.common.state import RunState, Snapshot
from rlwatch.config.models import StacksConfig, Thresholds
from rlwatch.engine.diagnosis.base import Context
from rlwatch.engine.diagnosis.stacks import stack_run_state, stragglers
from rlwatch.sources.sampler import StackSampler
from rlwatch.sources.stacks import StackTarget, py_spy

ROOT = Path(__file__).resolve().parent.parent
RANKS = ROOT / "bench" / "stack_ranks.py"
OUT = ROOT / "bench" / "RESULTS-stacks.md"


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@contextmanager
def ranks(n: int, mode: str, folder: Path, **extra: float) -> Iterator[list[int]]:
    argv = [sys.executable, str(RANKS), "--ranks", str(n), "--mode", mode, "--log", str(folder / "train.log")]
    for key, value in extra.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        pids = list(json.loads(proc.stdout.readline())["ranks"])
        time.sleep(1.0)  # every rank connected and stepping
        yield pids
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def cost(exe: str, seconds: float) -> list[str]:
    lines = ["## 1. cost: 8 ranks on this machine", ""]
    with tempfile.TemporaryDirectory() as tmp, ranks(8, "steady", Path(tmp), step_s=0.02) as pids:
        rounds = 5
        before, wall = _children_cpu(), time.monotonic()
        for _ in range(rounds):
            for pid in pids:
                subprocess.run(
                    [exe, "dump", "--pid", str(pid), "--json", "--nonblocking"], capture_output=True, check=False
                )
        dump_cpu = (_children_cpu() - before) / (rounds * len(pids))
        dump_wall = (time.monotonic() - wall) / (rounds * len(pids))
        record = {}
        for duration in (3, 20):  # the start-up and the cost of each further sample, from two lengths
            before = _children_cpu()
            recorders = [
                subprocess.Popen(
                    [
                        exe,
                        "record",
                        "--pid",
                        str(pid),
                        "--rate",
                        "1",
                        "--nonblocking",
                        "--idle",
                        "--duration",
                        str(duration),
                        "--format",
                        "raw",
                        "--output",
                        os.devnull,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for pid in pids
            ]
            for r in recorders:
                r.wait()
            record[duration] = (_children_cpu() - before) / len(pids)
        per_sample = (record[20] - record[3]) / 17
        start_up = record[3] - 3 * per_sample
        targets = [StackTarget(pid, f"rank {i}") for i, pid in enumerate(pids)]
        runs = []
        for method in ("dump", "record"):
            sampler = StackSampler(lambda: targets, SystemClock(), interval_s=StacksConfig().interval_s, method=method)
            cpu0, t0 = _self_cpu() + _children_cpu(), time.monotonic()
            sampler.start()
            time.sleep(seconds)
            sampler.stop()
            used = _self_cpu() + _children_cpu() - cpu0
            runs.append((method, used, time.monotonic() - t0, sampler.state()))
    budget = StacksConfig().cpu_budget
    lines += [
        "| reading | CPU per sample | wall per sample | cadence for 8 ranks at 1 % of a core |",
        "| --- | --- | --- | --- |",
        f"| `py-spy dump --nonblocking --json` | {dump_cpu * 1000:.1f} ms | {dump_wall * 1000:.1f} ms | "
        f"every {8 * dump_cpu / budget:.0f} s |",
        f"| `py-spy record --rate 1 --nonblocking`, resident | {per_sample * 1000:.2f} ms (+ {start_up * 1000:.1f} ms "
        f"to start) | — | every {8 * per_sample / budget:.1f} s, but its samples come out only when it ends |",
        f"| `py-spy record --rate 1` in 30 s windows | {(start_up / 30 + per_sample) * 1000:.2f} ms | — | "
        f"every {8 * (start_up / 30 + per_sample) / budget:.1f} s, aggregated per window |",
        "",
        *(
            f"rlwatch's sampler (`stacks.method: {method}`) over the 8 ranks for {elapsed:.0f} s: {used:.2f} CPU s "
            f"= {100 * used / elapsed:.2f} % of one core (its own measure, py-spy's CPU and its thread's: "
            f"{100 * (st.cpu_fraction or 0):.2f} %); {sum(len(p.samples) for p in st.processes)} reads.\n"
            for method, used, elapsed, st in runs
        ),
        "",
    ]
    return lines


def _snapshot(sampler: StackSampler) -> Snapshot:
    return Snapshot(host="bench", time=time.time(), profile="generic", run_dir=".", sampling=sampler.state())


def _last_step_at(log: Path) -> float | None:
    stamps = [line[:23] for line in log.read_text().splitlines() if " step " in line]
    if not stamps:
        return None
    return time.mktime(time.strptime(stamps[-1][:19], "%Y-%m-%d %H:%M:%S")) + int(stamps[-1][20:23]) / 1000


def hang(window: float, interval: float) -> list[str]:
    title = f"## 2. hang: 2 ranks, rank 1 waits on a socket after 150 steps (window {window:g} s, reads every "
    lines = [f"{title}{interval:g} s)", ""]
    ctx = Context(thresholds=Thresholds(hang_floor_s=window), stacks=StacksConfig(interval_s=interval))
    with tempfile.TemporaryDirectory() as tmp, ranks(2, "hang", Path(tmp), hang_after=150) as pids:
        targets = [StackTarget(pid, f"rank {i}") for i, pid in enumerate(pids)]
        sampler = StackSampler(lambda: targets, SystemClock(), interval_s=interval)
        sampler.start()
        try:
            deadline = time.monotonic() + window + 300
            while time.monotonic() < deadline:
                snap = _snapshot(sampler)
                rs = stack_run_state(snap, ctx, RunState("unknown", "no progress seen yet"))
                if rs.state == "hung":
                    last = _last_step_at(Path(tmp) / "train.log")
                    after = time.time() - last if last else float("nan")
                    lines += [f"declared hung {after:.1f} s after the last logged step: {rs.why}", ""]
                    return lines
                time.sleep(0.5)
        finally:
            sampler.stop()
    return [*lines, "not declared", ""]


def straggler(window: float, interval: float) -> list[str]:
    lines = [
        f"## 3. straggler: rank 1 spends 0.6 s more per step (window {window:g} s, reads every {interval:g} s)",
        "",
    ]
    ctx = Context(stacks=StacksConfig(interval_s=interval, straggler_window_s=window))
    with tempfile.TemporaryDirectory() as tmp, ranks(2, "straggler", Path(tmp)) as pids:
        targets = [StackTarget(pid, f"rank {i}") for i, pid in enumerate(pids)]
        sampler = StackSampler(lambda: targets, SystemClock(), interval_s=interval)
        started = time.monotonic()
        sampler.start()
        try:
            while time.monotonic() < started + window + 300:
                report = stragglers(_snapshot(sampler), ctx)
                if report is not None:
                    lines += [f"named {time.monotonic() - started:.1f} s after it appeared: {report.message}", ""]
                    return lines
                time.sleep(0.5)
        finally:
            sampler.stop()
    return [*lines, "not named", ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="short windows (10 s hang, 20 s straggler)")
    p.add_argument("--only", default="cost,hang,straggler")
    args = p.parse_args(argv)
    exe = py_spy()
    if exe is None:
        print("py-spy is not installed", file=sys.stderr)
        return 1
    only = set(args.only.split(","))
    defaults = StacksConfig()
    interval = 2.0 if args.quick else defaults.interval_s
    out = [f"# Stacks sampled while the run lives ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)", ""]
    if "cost" in only:
        out += cost(exe, 30 if args.quick else 120)
    if "hang" in only:
        out += hang(10.0 if args.quick else Thresholds().hang_floor_s, interval)
    if "straggler" in only:
        out += straggler(20.0 if args.quick else defaults.straggler_window_s, interval)
    text = "\n".join(out)
    print(text)
    # Only a whole run (every section, full windows) replaces the results; a part or a quick run goes under data/.
    path = OUT if only >= {"cost", "hang", "straggler"} and not args.quick else ROOT / "bench" / "data" / "stacks.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
