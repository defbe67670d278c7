"""Issue 7, part 3: what watching costs. CPU (% of one core) and RSS of ``rlwatch watch`` and of the dashboard,
beside glances (and nvitop where there is an NVIDIA GPU), all at a 1 s interval, in the same run, on the same host.

Eight logs grow while they run (a separate writer process). Full-screen programs run in a pseudo-terminal whose
output is drained as a terminal would; nobody presses a key. After the growing window the writer stops and a
second, shorter window measures them idle.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import peers
from bench.common import (
    PYTHON,
    PtyProcess,
    Usage,
    compile_bytecode,
    fmt,
    measure,
    median,
    rlwatch_argv,
    started,
    wait_until,
)
from bench.rundirs import live_run


@dataclass(slots=True)
class OverheadResult:
    growing: dict[str, Usage]
    idle: dict[str, Usage]
    seconds: tuple[float, float]
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _has_nvidia_gpu() -> bool:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def run(data_dir: Path, seconds: float, idle_seconds: float) -> OverheadResult:
    root = data_dir / "overhead-run"
    paths = live_run(root, logs=8, backlog_steps=50)
    missing: list[str] = []
    notes: list[str] = []
    watch_path = data_dir / "overhead-watch.out"
    watch_out = watch_path.open("wb")
    writer_argv = [PYTHON, "-m", "bench.writer", *map(str, paths), "--period", "1", "--lines", "4"]
    ptys: dict[str, PtyProcess] = {}
    with contextlib.ExitStack() as stack:
        writer = stack.enter_context(started(writer_argv, stdout=subprocess.DEVNULL))
        watch = stack.enter_context(
            started(rlwatch_argv("watch", str(root), "--interval", "1"), stdout=watch_out, stderr=subprocess.STDOUT)
        )
        ptys["rlwatch dashboard"] = PtyProcess(rlwatch_argv(str(root), "--interval", "1", "--readonly"))
        ptys["rlwatch dashboard"].watch_for(b"trainer.log")
        glances = peers.glances_argv(1.0)
        if glances is None:
            missing.append("glances: not installed (apt-get install glances)")
        else:
            ptys["glances"] = PtyProcess(glances)
        nvitop = peers.nvitop_argv(1.0)
        if nvitop is not None and _has_nvidia_gpu():
            ptys["nvitop"] = PtyProcess(nvitop)
        elif nvitop is None:
            missing.append("nvitop: not installed (pip install nvitop; it needs an NVIDIA GPU)")
        else:
            missing.append("nvitop: no NVIDIA GPU on this machine")
        for p in ptys.values():
            stack.callback(p.stop)
        # Warm-up: the backlogs read, the first frames drawn, a few samples taken.
        wait_until(lambda: watch_path.stat().st_size > 0, 60, step=0.1)
        wait_until(lambda: ptys["rlwatch dashboard"].seen(b"trainer.log") is not None, 60, step=0.1)
        time.sleep(5)
        pids = {"rlwatch watch": watch.pid, **{name: p.pid for name, p in ptys.items()}}
        growing = measure(pids, seconds)
        writer.terminate()
        writer.wait(timeout=10)
        time.sleep(3)
        idle = measure(pids, idle_seconds)
        for name, p in ptys.items():
            if p.proc.poll() is not None:
                notes.append(f"{name} exited early: {p.tail()[-300:]!r}")
    watch_out.close()
    return OverheadResult(growing, idle, (seconds, idle_seconds), missing, notes)


def markdown(r: OverheadResult) -> list[str]:
    out = [
        f"All at a 1 s interval, measured together: {r.seconds[0]:.0f} s while 8 logs grow (about 1.4 KB/s each, "
        f"whole AReaL steps with a rare event every 25 steps), then {r.seconds[1]:.0f} s with nothing changing. "
        "CPU is user + system time of the process and its children over the window, in % of one core.",
        "",
        "| process | CPU, logs growing | CPU, idle | RSS at end | RSS max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, g in r.growing.items():
        i = r.idle.get(name)
        out.append(
            f"| {name} | {fmt(g.cpu_pct, 2, ' %')} | {fmt(i.cpu_pct if i else None, 2, ' %')} | "
            f"{fmt(g.rss_mb, 0, ' MB')} | {fmt(max(g.rss_max_mb, i.rss_max_mb if i else 0), 0, ' MB')} |"
        )
    out += [f"- {m}" for m in r.missing + r.notes]
    return out


# ------------------------------------------------------------------------------------------------- idle (issue 35)
# The dashboard idling on a run where nothing changes, with the stack sampler running, beside peers that idle too.
_PEER_TEXTUAL = """
import sys, time
from textual.app import App
from textual.widgets import Static
class Peer(App[None]):
    def compose(self):
        yield Static("a minimal Textual app: one static widget" if sys.argv[1] == "static" else "", id="w")
    def on_mount(self):
        if sys.argv[1] == "clock":  # what a 1 s refresh costs at Textual's floor: one line set every second
            self.set_interval(1.0, lambda: self.query_one("#w", Static).update(time.strftime("%H:%M:%S")))
Peer().run()
"""


_AWAKE = "import sys, time\nlogs = [open(p, 'a') for p in sys.argv[1:]]\nwhile True:\n    time.sleep(1)\n"


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{t}/children") as fh:
            out += [int(c) for c in fh.read().split()]
    return out


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = _children(pid)
    while todo:
        c = todo.pop()
        out.append(c)
        todo += _children(c)
    return out


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().decode(errors="replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants from ``/proc/PID/stat``: its own user + system time, what its
    reaped children spent (cutime + cstime: every py-spy the stack sampler ran and waited for) and what the
    descendants alive now have spent so far."""
    own = _stat_fields(pid)
    if own is None:
        return float("nan")
    total = sum(int(x) for x in own[11:15])  # utime stime cutime cstime (fields 14-17)
    for c in _descendants(pid):
        f = _stat_fields(c)
        if f is not None:
            total += sum(int(x) for x in f[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def _py_spies(pid: int) -> set[int]:
    out = set()
    for c in _descendants(pid):
        with contextlib.suppress(OSError), open(f"/proc/{c}/comm") as fh:
            if fh.read().strip() == "py-spy":
                out.add(c)
    return out


@dataclass(slots=True)
class IdleResult:
    cases: dict[str, dict[str, list[float]]]  # case -> contender -> CPU % of a core, one per run
    py_spy: dict[str, dict[str, list[int]]]  # case -> contender -> py-spy processes seen during each window
    seconds: float
    size: tuple[int, int]
    notes: list[str] = field(default_factory=list)


def idle(
    data_dir: Path,
    *,
    seconds: float = 30.0,
    runs: int = 3,
    settle_s: float = 12.0,
    size: tuple[int, int] = (120, 40),
    contenders: dict[str, tuple[list[str], dict[str, str]]] | None = None,
) -> IdleResult:
    """Each contender in a pseudo-terminal of ``size``, all at once, ``settle_s`` to settle, then CPU over
    ``seconds``; three cases: (a) a stopped run (8 logs, no process), (b) a live run whose process exists (a Python
    process holding the logs open for writing: the run's member, and the stack sampler's target) but writes
    nothing and sleeps, (c) the same process waking every second (a rank in a long step, or a heartbeat: its stack
    is read by py-spy every round). The order in which
    contenders start alternates from run to run."""
    cols, rows = size
    if contenders is None:
        contenders = {"rlwatch": (rlwatch_argv("{run}", "--interval", "1", "--readonly"), {})}
    peer_argv: dict[str, list[str]] = {
        "textual, one static widget": [PYTHON, "-c", _PEER_TEXTUAL, "static"],
        "textual, a clock set every 1 s": [PYTHON, "-c", _PEER_TEXTUAL, "clock"],
    }
    if shutil.which("top"):
        peer_argv["top -d 1"] = ["top", "-d", "1"]
    notes = ["nvitop: cannot run without NVML here (no NVIDIA driver): it prints its NVML error and exits"]
    cases: dict[str, dict[str, list[float]]] = {}
    spies: dict[str, dict[str, list[int]]] = {}
    for run_no in range(runs):
        for case in ("stopped", "live, quiet", "live, awake"):
            # A run directory per contender: a dashboard reads the logs of its run, and one reading another's run
            # would be taken for a process of that run (and have its stacks sampled).
            roots = {n: data_dir / f"idle-{case.split(',')[0]}-{i}" for i, n in enumerate(contenders)}
            paths = [p for root in roots.values() for p in live_run(root, logs=8, backlog_steps=50)]
            with contextlib.ExitStack() as stack:
                if case == "live, quiet":  # writes one block, then holds the logs open and sleeps
                    argv = [PYTHON, "-m", "bench.writer", *map(str, paths), "--period", "1e9", "--lines", "4"]
                    stack.enter_context(started(argv, stdout=subprocess.DEVNULL))
                elif case == "live, awake":  # holds the logs open, its main thread wakes every second, writes nothing
                    stack.enter_context(started([PYTHON, "-c", _AWAKE, *map(str, paths)], stdout=subprocess.DEVNULL))
                order = list(contenders.items()) + [(n, (a, {})) for n, a in peer_argv.items()]
                if run_no % 2:
                    order.reverse()
                ptys: dict[str, PtyProcess] = {}
                for name, (argv, env) in order:
                    run = str(roots.get(name, ""))
                    p = PtyProcess([a.replace("{run}", run) for a in argv], cols=cols, rows=rows, env=env)
                    stack.callback(p.stop)
                    ptys[name] = p
                time.sleep(settle_s)
                seen: dict[str, set[int]] = {n: set() for n in ptys}
                before = {n: tree_cpu_s(p.pid) for n, p in ptys.items()}
                t0 = time.monotonic()
                while time.monotonic() - t0 < seconds:
                    for n, p in ptys.items():
                        if n in contenders:
                            seen[n] |= _py_spies(p.pid)
                    time.sleep(0.02)
                wall = time.monotonic() - t0
                for n, p in ptys.items():
                    pct = 100.0 * (tree_cpu_s(p.pid) - before[n]) / wall
                    if p.proc.poll() is not None:
                        notes.append(f"{n} exited early ({case}): {p.tail()[-200:]!r}")
                        pct = float("nan")
                    cases.setdefault(case, {}).setdefault(n, []).append(pct)
                    if n in contenders:
                        spies.setdefault(case, {}).setdefault(n, []).append(len(seen[n]))
    return IdleResult(cases, spies, seconds, size, notes)


def idle_markdown(r: IdleResult) -> list[str]:
    out = [
        f"Idle, {r.seconds:.0f} s windows at {r.size[0]}×{r.size[1]}, all contenders at once, medians of "
        f"{max(len(v) for c in r.cases.values() for v in c.values())} "
        "alternated runs; CPU from /proc/PID/stat of the process and its children (reaped ones included), in % of "
        "one core.",
        "",
        "| contender | " + " | ".join(r.cases) + " | runs |",
        "| --- | " + " | ".join("---:" for _ in r.cases) + " | --- |",
    ]
    names = list(dict.fromkeys(n for c in r.cases.values() for n in c))
    for n in names:
        cells = [fmt(median(r.cases[c][n]), 2, " %") if n in r.cases[c] else "n/a" for c in r.cases]
        runs = "; ".join(", ".join(f"{v:.2f}" for v in r.cases[c].get(n, [])) for c in r.cases)
        out.append(f"| {n} | " + " | ".join(cells) + f" | {runs} |")
    for case, per in r.py_spy.items():
        out.append("")
        out.append(
            f"py-spy processes seen during each window ({case}): " + "; ".join(f"{n} {v}" for n, v in per.items())
        )
    out += [f"- {m}" for m in r.notes]
    return out


def split(run_dir: Path, rounds: int = 30, snapshots: int = 20) -> list[str]:
    """Where an idle dashboard's CPU goes, in-process, on ``run_dir``: a whole round of the sources, the GPU-holder
    scan, the build, a look between rounds (thread CPU time, averaged); and what the screen spends on a tick with
    the same snapshot and on a new one 5 s on with another memory reading (process CPU time over ``snapshots``
    refreshes of a headless 120x40 dashboard, the event loop's own idle cost over as long subtracted)."""
    import asyncio
    import dataclasses

    from rlwatch.discover.load import resolve_config
    from rlwatch.engine.engine import Engine
    from rlwatch.engine.feed import StaticFeed
    from rlwatch.tui.app import RlwatchApp

    cfg, _ = resolve_config(run_dir, None, "auto")
    eng = Engine(cfg, run_dir)
    eng.drain_logs()
    eng.sample()
    eng.build()

    def per_call_ms(fn: Callable[[], object], n: int) -> float:
        t = time.thread_time()
        for _ in range(n):
            fn()
        return (time.thread_time() - t) / n * 1000

    sample_ms = per_call_ms(eng.sample, rounds)  # the holder scan cached (it runs every 5 s, or 30 s while quiet)

    def holders() -> None:
        eng.rescan_holders()
        eng.sample()  # a round with the holder scan in it, less a round without it below

    holders_ms = per_call_ms(holders, 3) - sample_ms
    build_ms = per_call_ms(eng.build, rounds)
    look_ms = per_call_ms(eng._alive_marks, rounds)
    base = eng.build()
    feed = StaticFeed(base, eng.lines_after(0))
    out = [
        f"a whole round of the sources {sample_ms:.2f} ms, the GPU-holder scan {holders_ms:.2f} ms, the build "
        f"{build_ms:.2f} ms, a look between rounds {look_ms:.3f} ms ({len(eng._procs)} processes in the table)"
    ]

    async def screen() -> None:
        app = RlwatchApp(feed, refresh_s=1e6)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(1.0)
            for label, step in (("a tick, the same snapshot", 0.0), ("a new snapshot 5 s on", 5.0)):
                c0 = time.process_time()
                for i in range(snapshots):
                    if step and base.memory is not None:
                        mem = dataclasses.replace(base.memory, available_bytes=(base.memory.available_bytes or 0) - i)
                        feed._snapshot = dataclasses.replace(base, time=base.time + step * (i + 1), memory=mem)
                    app.main.refresh_data()
                    await pilot.pause(0.05)
                c1 = time.process_time()
                for _ in range(snapshots):
                    await pilot.pause(0.05)
                idle = time.process_time() - c1
                ms = max(0.0, ((c1 - c0) - idle) / snapshots * 1000)  # below the load's noise: 0
                out.append(f"{label}: {ms:.2f} ms of CPU on the screen")

    asyncio.run(screen())
    eng.stop()
    return out


def threads(
    run_dir: Path, seconds: float = 30.0, settle_s: float = 12.0, size: tuple[int, int] = (120, 40)
) -> list[str]:
    """Where an idle dashboard's CPU goes, by thread: the dashboard on ``run_dir`` in a pseudo-terminal, each
    thread's user + system time over ``seconds`` from ``/proc/PID/task/TID/stat``, named by ``py-spy dump`` (the
    screen is MainThread; the engine's loops and the file watcher are rlwatch-*; Textual's input and output)."""
    import sys

    proc = PtyProcess(rlwatch_argv(str(run_dir), "--interval", "1", "--readonly"), cols=size[0], rows=size[1])

    def per_thread() -> dict[int, float]:
        out: dict[int, float] = {}
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            with contextlib.suppress(OSError, IndexError), open(f"/proc/{proc.pid}/task/{tid}/stat", "rb") as fh:
                f = fh.read().decode(errors="replace").rsplit(")", 1)[1].split()
                out[int(tid)] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        return out

    try:
        time.sleep(settle_s)
        before, t0 = per_thread(), time.monotonic()
        time.sleep(seconds)
        after, wall = per_thread(), time.monotonic() - t0
        spy = Path(sys.executable).parent / "py-spy"
        dump = subprocess.run(
            [str(spy if spy.exists() else "py-spy"), "dump", "-p", str(proc.pid)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    finally:
        proc.stop()
    names: dict[int, str] = {}
    for line in dump.splitlines():  # Thread 12064 (idle): "MainThread"
        if line.startswith("Thread ") and '"' in line:
            with contextlib.suppress(ValueError):
                names[int(line.split()[1], 0)] = line.split('"')[1]
    total = sum(after.values()) - sum(before.get(t, 0.0) for t in after)
    out = [
        f"{size[0]}x{size[1]}, {seconds:.0f} s after {settle_s:.0f} s to settle: {100 * total / wall:.2f} % of a core"
    ]
    for tid in sorted(after, key=lambda t: before.get(t, 0.0) - after[t]):
        out.append(f"  {names.get(tid, str(tid)):16s} {100 * (after[tid] - before.get(tid, 0.0)) / wall:.2f} %")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.overhead --idle``: the idle dashboard against its peers (and, with ``--base DIR``, a
    checkout of the code before, run from that directory by the same interpreter); ``--split RUN_DIR``: where its
    CPU goes, in-process; ``--threads RUN_DIR``: its CPU by thread."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.overhead")
    p.add_argument("--idle", action="store_true", help="the dashboards and their peers idle (RESULTS.md §9)")
    p.add_argument("--split", type=Path, default=None, metavar="RUN_DIR", help="where idle CPU goes, in-process")
    p.add_argument("--threads", type=Path, default=None, metavar="RUN_DIR", help="an idle dashboard's CPU by thread")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--base", type=Path, default=None, help="a checkout of the code before, measured beside")
    p.add_argument("--data", type=Path, default=Path(__file__).parent / "data")
    args = p.parse_args(argv)
    compile_bytecode(*([args.base] if args.base else []))
    if args.split is not None:
        print("\n".join(split(args.split)))
        return 0
    if args.threads is not None:
        print("\n".join(threads(args.threads, args.seconds)))
        return 0
    if not args.idle:
        p.error("say --idle, --split RUN_DIR or --threads RUN_DIR")
    here = Path(__file__).resolve().parent.parent
    # -P: the code is imported from PYTHONPATH, never from the working directory (the checkout the bench runs in)
    dash = [PYTHON, "-P", *rlwatch_argv("{run}", "--interval", "1", "--readonly")[1:]]
    contenders = {"rlwatch": (dash, {"PYTHONPATH": str(here)})}
    if args.base is not None:
        contenders = {"rlwatch before": (dash, {"PYTHONPATH": str(args.base)}), **contenders}
    args.data.mkdir(parents=True, exist_ok=True)
    r = idle(args.data, seconds=args.seconds, runs=args.runs, contenders=contenders)
    print("\n".join(idle_markdown(r)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
