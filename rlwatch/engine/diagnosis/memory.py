"""Host memory running out, processes over their limits, and the emergency brake that fires when it does."""

from __future__ import annotations

from collections.abc import Iterator

from rlwatch.common.state import (
    Finding,
    Snapshot,
)
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import (
    CRIT,
    INFO,
    WARN,
    Context,
)
from rlwatch.engine.diagnosis.wording import (
    exact_first,
    hhmm,
    human_bytes,
)
from rlwatch.sources.processes import GROWTH_WINDOW_S


def memory(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    th = ctx.thresholds
    mem = s.memory
    if mem and mem.cgroup_limit_bytes and (mem.cgroup_working_set_bytes or mem.cgroup_usage_bytes) is not None:
        # A Kubernetes or Docker memory limit is what the OOM killer enforces here, not the host's RAM.
        held = mem.cgroup_working_set_bytes if mem.cgroup_working_set_bytes is not None else mem.cgroup_usage_bytes
        assert held is not None
        used = held / mem.cgroup_limit_bytes
        if used >= th.memory_warn_fraction:
            host = f" (the host has {human_bytes(mem.total_bytes)})" if mem.total_bytes else ""
            yield Finding(
                CRIT if used >= 0.97 else WARN,
                "memory_high",
                f"Container memory at {used:.1%} of its limit: {human_bytes(held)} of "
                f"{human_bytes(mem.cgroup_limit_bytes)}{host}. Past the limit the kernel OOM-kills the run's "
                "largest process; raise the pod's memory limit or make the run hold less.",
                s.time,
            )
    elif mem and mem.total_bytes and mem.available_bytes is not None:
        used = 1 - mem.available_bytes / mem.total_bytes
        if used >= th.memory_warn_fraction:
            yield Finding(
                CRIT if used >= 0.97 else WARN,
                "memory_high",
                f"Host RAM at {used:.1%} ({human_bytes(mem.total_bytes - mem.available_bytes)} of "
                f"{human_bytes(mem.total_bytes)}); {human_bytes(mem.available_bytes)} available.",
                s.time,
            )
    if mem and mem.oom_kills:
        killed = plural(mem.oom_kills, "process")
        yield Finding(CRIT, "oom_kill", f"The kernel OOM killer has killed {killed} here.", None)
    for p in s.processes:
        limit = ctx.memory_limits.get(p.name)
        if p.alive and limit and p.rss_bytes and p.rss_bytes > limit:
            yield Finding(
                CRIT,
                "over_memory_limit",
                f"{p.name} (pid {p.pid}) uses {human_bytes(p.rss_bytes)}, over its {human_bytes(limit)} limit.",
                None,
                action=_restart(p.role),
            )
        growth = p.rss_growth_bytes_per_hour
        if p.alive and growth is not None and growth >= th.leak_bytes_per_hour and _past_start_up(s, p.started_at):
            when = ""
            if mem and mem.forecast_exhausted_at:
                when = f"; at this rate RAM runs out at {hhmm(mem.forecast_exhausted_at, s.time)}"
            yield Finding(
                WARN,
                "memory_leak",
                f"{p.name} (pid {p.pid}) grows {human_bytes(growth)}/h, now {human_bytes(p.rss_bytes)}{when}. "
                "Only restarting it frees leaked memory.",
                p.started_at,
                action=_restart(p.role),
            )


# The start-up a process's growth window (sources/processes.GROWTH_WINDOW_S) must lie past:
# torch's imports, CUDA's context, the model's load, the data loader's workers and the allocator's first steps grow a
# trainer's RSS by hundreds of MB in its first minutes (live on the GPU host: torchrun "grows 919 MB/h" 63 s after it
# started, its ranks' first steps 6 to 13 s in). A leak is growth sustained across the run's steps, not that.
LEAK_START_UP_S = 120.0


def _past_start_up(s: Snapshot, started_at: float) -> bool:
    """The process's growth rests on a window that lies past its start-up (it has lived the start-up and a whole
    window since), and, where the run logs steps, the run steps across it: a hung or starting run's growth is no
    leak to restart for."""
    if s.time - started_at < LEAK_START_UP_S + GROWTH_WINDOW_S:
        return False
    tr, rs = s.training, s.run_state
    if tr is not None and tr.last_step is not None:
        return rs is None or rs.state == "progressing"
    return True


def brake(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    ev = s.events.get("emergency_brake")
    if not ev or not ev.count:
        return
    th = ctx.thresholds
    workers = [p.started_at for p in s.processes if p.alive and p.role == "worker"]
    last = ev.last_by if ev.approximate else ev.last
    if workers and last is not None and last < min(workers):
        # Every firing came before the workers now alive started (a restart, `w`): history, not a thing to fix.
        yield Finding(
            INFO,
            "brake",
            f"Emergency brake fired {plural(ev.count, 'time')}, the last at {hhmm(last, s.time)}, before the workers "
            f"now running started ({hhmm(min(workers), s.time)}); it has not fired since.",
            exact_first(ev),
        )
        return
    if ev.streak >= th.brake_streak:
        yield Finding(
            CRIT,
            "brake_no_relief",
            f"Emergency brake fired {plural(ev.streak, 'time')} in a row ({ev.count} in all, "
            f"{ev.rate_per_min:.1f}/min) and memory is not coming back: the brake cannot free leaked memory, only "
            "restarting the worker does.",
            exact_first(ev),
            action="restart-workers",
        )
    else:
        yield Finding(
            WARN,
            "brake",
            f"Emergency brake fired {plural(ev.count, 'time')} (streak {ev.streak}).",
            exact_first(ev),
            action="restart-workers",
        )


def _restart(role: str) -> str | None:
    """The action that restarts a process of ``role``: workers have one; a trainer or server is another matter."""
    return "restart-workers" if role == "worker" else None
