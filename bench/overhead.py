"""Issue 7, part 3: what watching costs. CPU (% of one core) and RSS of ``rlwatch watch`` and of the dashboard,
beside glances (and nvitop where there is an NVIDIA GPU), all at a 1 s interval, in the same run, on the same host.

Eight logs grow while they run (a separate writer process). Full-screen programs run in a pseudo-terminal whose
output is drained as a terminal would; nobody presses a key. After the growing window the writer stops and a
second, shorter window measures them idle.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import peers
from bench.common import PYTHON, PtyProcess, Usage, fmt, measure, rlwatch_argv, started, wait_until
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
