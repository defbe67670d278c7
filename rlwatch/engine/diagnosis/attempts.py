"""An earlier attempt still running beside the live run, and a run that lost its launcher.

The incident behind ``z``: torchrun's agent is SIGKILLed (a killed tmux pane, a container restart, Ctrl-\\), its
ranks live on re-parented to init, still training and holding their GPU memory, and the person starts a new run in
the same directory — which then fails "busy or unavailable" on a GPU the old ranks hold. The finding names the
earlier attempt with its numbers before that happens, and gives the exact command that stops it; rlwatch itself
never chooses an earlier attempt that still writes (only strays, with reasons, are chosen on its own).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from rlwatch.common.state import Attempt, Finding, Snapshot
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import CRIT, INFO, WARN, Context, count_of, only_history
from rlwatch.engine.diagnosis.wording import hhmm, human_bytes

__all__ = ["attempts", "gpu_range", "launcher_words"]


def gpu_range(gpus: tuple[int, ...]) -> str:
    """ "GPU 0", a range "GPUs 0-1" (with an en dash, as printed), or a list "GPUs 0, 2"."""
    if len(gpus) == 1:
        return f"GPU {gpus[0]}"
    if list(gpus) == list(range(gpus[0], gpus[-1] + 1)):
        return f"GPUs {gpus[0]}–{gpus[-1]}"
    return "GPUs " + ", ".join(map(str, gpus))


def launcher_words(a: Attempt, now: float) -> str:
    """ "their launcher torchrun, pid 837, is gone since 12:58:10" — the time only where rlwatch saw it go."""
    if a.launcher_pid is not None and a.launcher:
        who = f"their launcher {a.launcher}, pid {a.launcher_pid},"
    elif a.launcher_pid is not None:
        who = f"their launcher (pid {a.launcher_pid})"
    else:
        who = f"their launcher {a.launcher}" if a.launcher else "their launcher"
    when = f" since {hhmm(a.launcher_gone_at, now)}" if a.launcher_gone_at is not None else ""
    return f"{who} is gone{when}"


def _name(s: Snapshot, pid: int) -> str:
    """A process as a person knows it: its script (``live.py``) or program, from the processes table."""
    p = next((p for p in s.processes if p.pid == pid), None)
    if p is None or not p.cmdline:
        return f"pid {pid}"
    words = [w for w in p.cmdline[1:] if not w.startswith("-")]
    script = next((w for w in words if w.endswith(".py") or "/" in w), None)
    return f"{os.path.basename(script or p.cmdline[0])}, pid {pid}"


def attempts(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    run = s.live_run
    if run is None or not run.attempts:
        return
    earlier = [a for a in run.attempts if not a.current and a.pids]
    live = [a for a in run.attempts if a.current and a.pids]
    if not earlier:
        for a in live:
            if a.orphaned:
                listed = ", ".join(map(str, a.pids[:6]))
                since = f" (gone since {hhmm(a.launcher_gone_at, s.time)})" if a.launcher_gone_at is not None else ""
                yield Finding(
                    INFO,
                    "run_lost_launcher",
                    f"The run has lost its launcher: {a.orphaned}{since}; its {plural(len(a.pids), 'process')} (pid "
                    f"{listed}) run on. A resume or restart cannot rely on it: stop these processes before starting "
                    "the run again.",
                    a.launcher_gone_at,
                )
        return
    busy_now = bool(count_of(s, "cuda_busy")) and not only_history(s, "cuda_busy")
    new_gpus = {g for a in live for g in a.gpus}
    for a in earlier:
        pids = a.pids
        what = plural(len(pids), "process")
        holds = ""
        if a.gpus:
            mem = f"hold {human_bytes(a.gpu_mem_bytes)} on" if a.gpu_mem_bytes else "hold"
            holds = f" and {mem} {gpu_range(a.gpus)}"
        still = "still run"
        if a.writes:
            wrote = f", last seen writing at {hhmm(a.last_write_at, s.time)}" if a.last_write_at is not None else ""
            still = f"still run (writing {', '.join(a.writes[:2])}{wrote})"
        new = ""
        if live:
            head = live[-1]
            # The new run as a person knows it: the process that writes (its trainer), not whatever started it.
            writer = next((pid for pid, why in run.members if why.startswith("writes")), None)
            lead = writer if writer is not None else (head.launcher_pid or head.pids[0])
            shared = sorted(new_gpus & set(a.gpus))
            beside = f"shares {gpu_range(tuple(shared))} with them" if shared else "runs beside them"
            new = f"; the new run ({_name(s, lead)}) {beside}"
        command = "rlwatch act kill-zombies " + " ".join(f"--pid {pid}" for pid in pids)
        lost = launcher_words(a, s.time)
        message = f"{what} of an earlier attempt (pid {', '.join(map(str, pids[:8]))}; {lost}) {still}{holds}{new}."
        if a.stray:
            message += f" They are strays now: {a.stray}."
            yield Finding(CRIT if busy_now else WARN, "earlier_attempt", message, a.started_at, action="kill-zombies")
        else:
            message += " rlwatch does not stop an attempt that still writes on its own; to stop it: " + command + "."
            yield Finding(CRIT if busy_now else WARN, "earlier_attempt", message, a.started_at, command=command)
