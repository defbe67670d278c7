"""Planning: what each action would do, built from a fresh look at the host. Planning never signals anything.

A plan lists every target with what a person needs to judge it (pid, user, age, command line, GPU memory, why it
is a target) and the processes that will be started. It is refused, with the reason, when it must not run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlwatch.state import ActionPlan, ActionTarget, GpuHolder, ProcessInfo, Snapshot

RESTART_WORKERS = "restart-workers"
KILL_ZOMBIES = "kill-zombies"
RESUME = "resume"
RESTART_SERVER = "restart-server"
ACTION_NAMES = (RESTART_WORKERS, KILL_ZOMBIES, RESUME, RESTART_SERVER)


@dataclass(frozen=True)
class Launch:
    """How to start one process: an argv list (never a shell string), where, with what environment, logging where."""

    name: str
    role: str
    argv: tuple[str, ...]
    cwd: str | None
    env: dict[str, str] | None = None
    log: str | None = None
    source: str = "configured"  # "configured" | "recorded when first seen"


@dataclass(frozen=True)
class Stop:
    pid: int
    create_time: float
    name: str
    role: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Prepared:
    """A plan plus the machine-readable parts the executor needs (kept out of the display record)."""

    plan: ActionPlan
    stops: tuple[Stop, ...] = ()
    launches: tuple[Launch, ...] = ()
    resume_step: int | None = None
    extra: dict[str, object] = field(default_factory=dict)


def refused(action: str, why: str) -> Prepared:
    return Prepared(ActionPlan(action=action, targets=(), steps=(), refused=why))


def target_of_process(p: ProcessInfo, now: float, reason: str | None = None) -> ActionTarget:
    return ActionTarget(
        pid=p.pid,
        create_time=p.create_time,
        user=p.user,
        age_s=max(0.0, now - p.started_at),
        cmdline=p.cmdline,
        role=p.name,
        reason=reason,
    )


def target_of_holder(h: GpuHolder, now: float) -> ActionTarget:
    return ActionTarget(
        pid=h.pid,
        create_time=h.create_time,
        user=h.user,
        age_s=max(0.0, now - h.create_time),
        cmdline=h.cmdline,
        gpu_mem_bytes=h.gpu_mem_bytes,
        role="stray GPU holder",
        reason=f"stray: {h.reason}; holds {', '.join(h.devices)}",
    )


def target_of_launch(launch: Launch) -> ActionTarget:
    return ActionTarget(
        pid=None,
        create_time=None,
        user=None,
        age_s=None,
        cmdline=launch.argv,
        role=launch.name,
        reason=f"start ({launch.source}) in {launch.cwd or '.'}" + (f", output to {launch.log}" if launch.log else ""),
    )


def stop_words(grace_s: float) -> str:
    return (
        f"SIGTERM (and SIGCONT) to each target and its process group, wait up to {grace_s:g}s, SIGKILL what is left, "
        "then check it is gone — every signal through a pidfd after re-checking (pid, start time)"
    )


def describe_snapshot_run(s: Snapshot) -> dict[str, list[ProcessInfo]]:
    roles: dict[str, list[ProcessInfo]] = {}
    for p in s.processes:
        if p.alive:
            roles.setdefault(p.role, []).append(p)
    return roles
