"""The machine under the run: what the kernel killed, and the pod's limits before they bite (/dev/shm, locked memory,
disk against the checkpoints still to come, inodes).

A kernel event is tied to the run by evidence, strongest first: its pid is one of the run's processes, or the pid
torchrun names for a rank; else (a container sees other pids than the kernel prints) a rank torchrun reports killed
by SIGKILL within two minutes of it, or a run process of the same program that is gone since. Untied events are only
information: on a shared machine the OOM killer may well have killed someone else's process.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import dataclass

from rlwatch.common.state import ChildFailure, Finding, HostEvent, Snapshot
from rlwatch.common.vocab import FindingCode
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import CRIT, INFO, WARN, Context, count_of
from rlwatch.engine.diagnosis.wording import exact_first, hhmm, human_bytes, last_text
from rlwatch.sources.limits import SHM_NEEDS

TIE_WINDOW_S = 120.0
_LIVE = ("kmsg", "journalctl", "dmesg", "nvml")  # an event's source when it was not read from a saved file
# Command names the kernel prints for a Python process: PyTorch >= 2.0 renames the main thread "pt_main_thread",
# and the kernel prints the thread's name.
_PYTHON_COMMS = ("python", "pt_main_thread", "pt_autograd", "torchrun")


@dataclass(frozen=True)
class Tie:
    who: str  # "the run's trainer (pid 4242)", "rank 3 (pid 812917)"
    exact: bool  # by pid; False: by time and name (probably)


def run_started(s: Snapshot) -> float | None:
    """When the run began, as far as rlwatch saw: its oldest process, or the live run's start."""
    starts = [p.started_at for p in s.processes if math.isfinite(p.started_at)]
    if s.live_run is not None and s.live_run.started_at is not None:
        starts.append(s.live_run.started_at)
    return min(starts) if starts else None


def _failures(s: Snapshot) -> list[ChildFailure]:
    out: list[ChildFailure] = []
    for i in s.incidents:
        if i.root_cause is not None:
            out.append(i.root_cause)
        out.extend(i.victims)
    return out


def _torchrun_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%d_%H:%M:%S").timestamp()
    except ValueError:
        return None


def _pythonish(name: str | None) -> bool:
    return bool(name) and any(str(name).startswith(p) for p in _PYTHON_COMMS)


def tie(s: Snapshot, event: HostEvent) -> Tie | None:
    """Which of the run's processes the event is about, and how sure that is."""
    pid, when = event.pid, event.time
    if pid is not None:
        for p in s.processes:
            if p.pid == pid:
                return Tie(f"the run's {p.name} (pid {pid})", True)
        for f in _failures(s):
            if f.pid == pid:
                return Tie(
                    f"rank {f.rank} (pid {pid})" if f.rank is not None else f"a torchrun worker (pid {pid})", True
                )
    if when is None:
        return None
    for f in _failures(s):
        died = _torchrun_time(f.time)
        if f.signal == "SIGKILL" and died is not None and abs(died - when) <= TIE_WINDOW_S:
            rank = f"rank {f.rank}" if f.rank is not None else "a torchrun worker"
            return Tie(f"{rank} (pid {f.pid} in this container, killed by SIGKILL at {hhmm(died, s.time)})", False)
    if _pythonish(event.process):
        gone = [
            p
            for p in s.processes
            if not p.alive and p.started_at <= when and p.cmdline and _pythonish(p.cmdline[0].rsplit("/", 1)[-1])
        ]
        if len(gone) == 1:
            return Tie(f"the run's {gone[0].name} (pid {gone[0].pid} here; it is gone)", False)
    return None


def resume_text(s: Snapshot) -> str:
    """Where a resume starts, as an instruction: the recover info's step, else the latest checkpoint, else none."""
    if s.recover is not None:
        return f"resume from the recover info (global step {s.recover.resume_global_step})"
    latest = s.checkpoint.latest if s.checkpoint else None
    if latest is not None:
        step = f" (step {latest.global_step})" if latest.global_step is not None else ""
        return f"resume from {latest.path.rsplit('/', 1)[-1]}{step}"
    return "start the run again (no checkpoint to resume from was found)"


def log_stopped(s: Snapshot, when: float | None) -> str:
    """ "; the run's last step was logged at 10:14:01" when its logs went quiet within two minutes before the
    event (a line after it, such as torchrun's own report of the death, says nothing of when the run stopped)."""
    tr = s.training
    if tr is None or when is None:
        return ""
    for last, what in ((tr.last_step_at, "last step was logged"), (tr.last_line_at, "logs stopped")):
        if last is not None and math.isfinite(last) and when - TIE_WINDOW_S <= last <= when + 1.0:
            return f"; the run's {what} at {hhmm(last, s.time)}"
    return ""


def current_event(s: Snapshot, event: HostEvent, since: float | None) -> bool:
    """The event happened during this run (or its time is not known: a saved log judged as it is)."""
    return event.time is None or since is None or event.time >= since - 5.0


def kernel_kills(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """OOM kills, segfaults, general protection faults and bus errors the kernel reported: each one of the run's a
    finding of its own (a root cause), the others one line of information per kind."""
    k = s.kernel
    if k is None or not k.events:
        return
    since = run_started(s)
    told: set[tuple[str, int | None]] = set()
    others: dict[str, list[HostEvent]] = {}
    for event in reversed(k.events):
        if event.kind not in ("oom_kill", "segfault", "gpf", "sigbus") or not current_event(s, event, since):
            continue
        if (event.kind, event.pid) in told:
            continue
        told.add((event.kind, event.pid))
        found = tie(s, event)
        if found is None:
            others.setdefault(event.kind, []).append(event)
            continue
        when = f" at {hhmm(event.time, s.time)}" if event.time is not None else ""
        if event.kind == "oom_kill":
            yield _oom(s, event, found, when)
            continue
        sure = "" if found.exact else " (matched by time and program, not by pid)"
        hint = " /dev/shm may be full (see the shared-memory finding)." if event.kind == "sigbus" else ""
        msg = (
            f"{found.who[0].upper()}{found.who[1:]} {_WHAT[event.kind]}{when}{_where(event)}{sure}"
            f"{log_stopped(s, event.time)}.{hint} Once the cause is fixed, {resume_text(s)}."
        )
        yield Finding(CRIT, _CODE[event.kind], msg, event.time)
    for kind, events in others.items():
        yield _untied(s, kind, events)


_WHAT = {
    "oom_kill": "was killed by the kernel OOM killer",
    "segfault": "crashed with a segmentation fault",
    "gpf": "crashed with a general protection fault",
    "sigbus": "died of a bus error (SIGBUS)",
}
# The finding's code for each kind of the kernel's events (the kinds _WHAT says).
_CODE: dict[str, FindingCode] = {
    "oom_kill": "kernel_oom_kill",
    "segfault": "kernel_segfault",
    "gpf": "kernel_gpf",
    "sigbus": "kernel_sigbus",
}


def _where(event: HostEvent) -> str:
    """ " (in libfoo.so)" for a crash the kernel placed in a library."""
    if " in " not in event.text or event.kind == "oom_kill":
        return ""
    return f" (in {event.text.rsplit(' in ', 1)[1].split('[', 1)[0].strip()})"


def _name(event: HostEvent) -> str:
    return f"pid {event.pid} ({event.process})" if event.pid is not None else str(event.process or "a process")


def _untied(s: Snapshot, kind: str, events: list[HostEvent]) -> Finding:
    """The kernel's events of one kind that are none of the run's processes, told once: the machine is in trouble,
    the run is not shown to be."""
    newest = max(events, key=lambda e: e.time if e.time is not None else -math.inf)
    when = f" at {hhmm(newest.time, s.time)}" if newest.time is not None else ""
    if kind == "oom_kill":
        biggest = max(events, key=lambda e: e.rss_bytes or 0)
        rss = f", RSS {human_bytes(biggest.rss_bytes)}" if biggest.rss_bytes else ""
        cause = "a memory cgroup hit its limit" if biggest.memcg is not None else "the machine ran out of memory"
        what = (
            f"killed {_name(biggest)}{when}{rss}"
            if len(events) == 1
            else f"killed {len(events)} processes, the largest {_name(biggest)}{rss}, the last{when}"
        )
        saved = [e for e in events if e.source not in _LIVE and _pythonish(e.process)]
        if saved:
            # A kernel log saved beside the run was put there to be judged: a Python process it says the OOM
            # killer took is most likely the run's, though no pid ties it (the processes are long gone).
            victim = max(saved, key=lambda e: e.rss_bytes or 0)
            msg = (
                f"The kernel log saved beside the run says the OOM killer killed {_name(victim)}"
                f"{', RSS ' + human_bytes(victim.rss_bytes) if victim.rss_bytes else ''}: {cause}. No process "
                "rlwatch sees ties it to this run, but a Python process killed for memory is most likely its "
                f"trainer or a worker: make the run hold less or give it more memory; then {resume_text(s)}."
            )
            return Finding(WARN, "kernel_oom_kill", msg, victim.time)
        msg = (
            f"The kernel OOM killer {what}: {cause}. None is one of this run's processes as far as rlwatch can "
            "tell, but memory is short here."
        )
    else:
        what = f"{_name(newest)} {_WHAT[kind]}{when}{_where(newest)}"
        more = f" ({len(events)} such crashes)" if len(events) > 1 else ""
        msg = f"The kernel reports {what}{more}; it is not one of this run's processes."
    return Finding(INFO, _CODE[kind], msg, newest.time)


def _oom(s: Snapshot, event: HostEvent, found: Tie, when: str) -> Finding:
    rss = f", RSS {human_bytes(event.rss_bytes)}" if event.rss_bytes else ""
    mem = s.memory
    if event.memcg is not None:
        limit = mem.cgroup_limit_bytes if mem is not None else None
        of = f" ({human_bytes(limit)})" if limit else ""
        cause = f"its memory cgroup {event.memcg} hit its limit{of}"
        fix = "raise the pod's or container's memory limit, or make the run hold less"
    else:
        cause = "the machine ran out of memory"
        fix = (
            "make the run hold less (fewer DataLoader workers, smaller rollout batches, no CPU offload) or use a "
            "larger machine"
        )
    sure = "" if found.exact else " (matched by time and program, not by pid)"
    who = found.who[0].upper() + found.who[1:]
    msg = (
        f"{who} was killed by the kernel OOM killer{when}{rss}{sure}: {cause}{log_stopped(s, event.time)}. "
        f"The root cause is memory, not the code: {fix}; then {resume_text(s)}."
    )
    return Finding(CRIT, "kernel_oom_kill", msg, event.time)


# ------------------------------------------------------------------------------------------------ pod limits
def shared_memory(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """/dev/shm against what the run's frameworks need; critical once their shared-memory error is in the logs."""
    lim = s.limits
    errors = count_of(s, "shm_error")
    size = ""
    if lim is not None and lim.shm_total_bytes is not None:
        size = f"{lim.shm_path} is {human_bytes(lim.shm_total_bytes)} ({human_bytes(lim.shm_free_bytes)} free)"
    fix = (
        "give the container more shared memory: docker run --shm-size=16g (or --ipc=host); Kubernetes: mount an "
        "emptyDir with medium: Memory at /dev/shm; or free stale segments in /dev/shm"
    )
    if errors:
        ev = s.events["shm_error"]
        line = ev.recent[-1].text.strip() if ev.recent else ""
        quoted = f" — '{line[:160]}'" if line else ""
        msg = (
            f"The run died of shared memory: {plural(errors, 'shared-memory error')} in its logs, last "
            f"{last_text(ev, s.time)}{quoted}. {size + '. ' if size else ''}Fix: {fix}; then {resume_text(s)}."
        )
        yield Finding(CRIT, "shm_exhausted", msg, exact_first(ev))
        return
    if lim is None or lim.shm_total_bytes is None or not lim.frameworks:
        return
    small = lim.shm_total_bytes < ctx.host.shm_min_bytes
    nearly_full = (
        lim.shm_free_bytes is not None and lim.shm_total_bytes > 0 and lim.shm_free_bytes < 0.1 * lim.shm_total_bytes
    )
    if not small and not nearly_full:
        return
    needs = "; ".join(SHM_NEEDS[f] for f in lim.frameworks if f in SHM_NEEDS)
    state = "small" if small else "nearly full"
    sim = " (simulated)" if lim.simulated else ""
    msg = (
        f"Shared memory is {state}: {size}{sim}, beside {', '.join(lim.frameworks)}. They die of it with SIGBUS "
        f"('Bus error') or 'No space left on device'. {needs}. Fix before it bites: {fix}."
    )
    yield Finding(WARN, "shm_small", msg, None)


def memlock(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """RLIMIT_MEMLOCK where RDMA is in use: NCCL's InfiniBand transport registers (pins) memory with the NIC."""
    lim = s.limits
    if lim is None or lim.rdma is None:
        return
    low = [m for m in lim.memlock if m.soft_bytes is not None and m.soft_bytes < ctx.host.memlock_min_bytes]
    if not low:
        return
    first = low[0]
    names = ", ".join(f"{m.name} (pid {m.pid})" for m in low[:4])
    msg = (
        f"RDMA is in use ({lim.rdma}) but {names} may lock only {human_bytes(first.soft_bytes)} of memory "
        "(ulimit -l): NCCL's InfiniBand transport pins its buffers and fails or falls back to sockets. Run with "
        "`ulimit -l unlimited` (Docker: --ulimit memlock=-1; Kubernetes: the container runtime's default memlock)."
    )
    yield Finding(WARN, "memlock_low", msg, None)


def checkpoint_space(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """Free disk against the next checkpoint and the saves still to come; inodes."""
    d = s.disk
    if d is None:
        return
    if d.inodes_free is not None and d.inodes_total:
        share = d.inodes_free / d.inodes_total
        if share < ctx.host.inodes_min_fraction:
            yield Finding(
                CRIT if d.inodes_free == 0 else WARN,
                "inodes_low",
                f"Only {d.inodes_free} of {d.inodes_total} inodes ({share:.1%}) are free on {d.path}: new files "
                "(checkpoint shards, logs) fail with 'No space left on device' whatever the free bytes. Delete old "
                "checkpoints or caches, or move the output to another volume.",
                None,
            )
    ckpt = s.checkpoint
    latest = ckpt.latest if ckpt else None
    if ckpt is None or latest is None or not latest.size_bytes or d.free_bytes is None:
        return
    size = latest.size_bytes
    if d.free_bytes < size:
        yield Finding(
            CRIT,
            "checkpoint_wont_fit",
            f"The next checkpoint will not fit: a checkpoint takes {human_bytes(size)}, {d.path} has "
            f"{human_bytes(d.free_bytes)} free. Free space or keep fewer checkpoints (save_total_limit) before the "
            "next save fails and takes the run down.",
            None,
        )
        return
    steps = ckpt.steps
    total = s.training.total_steps if s.training else None
    if len(steps) < 2 or total is None or latest.global_step is None:
        return
    every = steps[-1] - steps[-2]
    if every <= 0:
        return
    left = max(0, (total - latest.global_step) // every)
    need = left * size
    if left > 1 and need > d.free_bytes:
        yield Finding(
            WARN,
            "checkpoint_space",
            f"At {human_bytes(size)} a checkpoint and one every {plural(every, 'step')}, the {left} saves left need "
            f"{human_bytes(need)}; {d.path} has {human_bytes(d.free_bytes)} free and the run keeps {ckpt.count} so "
            f"far. The save near step {latest.global_step + every * (d.free_bytes // size + 1)} would fail unless old "
            "checkpoints are deleted (save_total_limit) or the volume grows.",
            None,
        )
