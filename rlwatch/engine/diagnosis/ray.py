"""A Ray-based run (verl, OpenRLHF): which actor, worker or node died, its pid and node, why, at which step, and
where a resume starts — said as the root cause, not as the driver's last exception.

The driver of a Ray run only relays: when a worker is SIGKILLed, its last exception is ``ray.exceptions.
ActorDiedError`` at the line that waited on it. What matters is in Ray's words around it (the tab-indented actor
block, the raylet's "Worker PID … Worker exit type …", the memory monitor's numbers) and in Ray's own logs and State
API, which :mod:`rlwatch.sources.ray` reads into ``s.ray``.

The driver's stdout is usually a pipe, so the actors' last lines reach the log after the driver's traceback: the
health model would read them as progress after the failure. When Ray says the run's latest attempt ended in a
failure and no driver lives on, :func:`ray_run_state` says the run crashed, with Ray's cause.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from rlwatch.common.state import Finding, RayFailure, RunState, Snapshot
from rlwatch.common.vocab import FindingCode
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import CRIT, INFO, WARN, Context
from rlwatch.engine.diagnosis.wording import hhmm
from rlwatch.logs.foreign.kernel import killed_pids
from rlwatch.logs.ray import task_actor

__all__ = ["RAY_CODES", "ray", "ray_run_state", "resume_words"]

_CODES: dict[str, FindingCode] = {
    "actor_died": "ray_actor_died",
    "task_error": "ray_actor_died",
    "creation_failed": "ray_actor_died",
    "memory_monitor": "ray_memory_monitor",
    "node_died": "ray_node_died",
    "actor_unavailable": "ray_node_died",
    "cluster_unreachable": "ray_cluster_unreachable",
    "job_failed": "ray_job_failed",
}
# Findings that name the failure a Ray run ended in (rlwatch.engine.diagnosis NAMED_FAILURES).
RAY_CODES: frozenset[FindingCode] = frozenset(_CODES.values())
# The processes whose life means the run's driver still runs.
_DRIVER_ROLES = ("trainer", "launcher", "task-runner", "controller")


def _head(f: RayFailure) -> str:
    if f.kind == "memory_monitor":
        head = f.cause
        mem = f.memory
        if mem is not None and mem.victims:
            victims = sorted(mem.victims, key=lambda v: -(v[2] or 0.0))
            shown = ", ".join(
                f"{task_actor(name)} (pid {pid}" + (f", {gb:g} GB" if gb is not None else "") + ")"
                for name, pid, gb in victims[:4]
            )
            head += f". Killed: {shown}"
        return head
    if f.kind in ("actor_died", "creation_failed", "task_error"):
        return f"Ray actor {f.cause}"
    if f.kind in ("node_died", "actor_unavailable"):
        return f"A Ray node died: {f.cause}"
    if f.kind == "cluster_unreachable":
        return f"The Ray cluster is gone: {f.cause}"
    return f"Ray: {f.cause}"


def kernel_words(s: Snapshot, f: RayFailure) -> str | None:
    """What the kernel says of a worker that died unexpectedly (Ray's SYSTEM_ERROR: Ray only saw its connection
    drop): a ``Killed process <pid>`` line in the logs names it; else the container's OOM-kill counter."""
    actor = f.actor
    if actor is None or actor.exit_type != "SYSTEM_ERROR" or not actor.pid:
        return None
    for k in reversed(s.kernel.events if s.kernel is not None else ()):  # the kernel log itself (sources/kernel)
        if k.kind == "oom_kill" and k.pid == actor.pid:
            where = os.path.basename(k.source) if k.source.startswith("/") else k.source
            return f"the kernel's OOM killer killed pid {actor.pid} ({where}: {k.text[:160]})"
    ev = s.events.get("oom_kill")
    for line in reversed(ev.recent if ev is not None else ()):
        if actor.pid in killed_pids(line.text):
            return f"the kernel's OOM killer killed pid {actor.pid} ({os.path.basename(line.path)}:{line.lineno})"
    kills = s.memory.oom_kills if s.memory is not None else None
    if kills:
        return (
            f"this container's memory cgroup counted {plural(kills, 'OOM kill')}: most likely the kernel's OOM killer "
            f"(dmesg on its node says which pid)"
        )
    return None


def _title(f: RayFailure) -> str:
    """The driver's last exception line, to its first sentence: the rest is what the cause already says."""
    kind, sep, said = f.title.partition(": ")
    if not sep:
        return f.title[:160]
    first = said.split(". ", 1)[0].rstrip(".")
    return f"{kind}: {first[:140]}" + ("…" if len(first) > 140 else "")


def _where(f: RayFailure) -> str:
    if f.path is None or f.lineno is None:
        return ""
    return f" ({os.path.basename(f.path)}:{f.lineno})"


def step_words(s: Snapshot, f: RayFailure) -> str:
    """At which step it died: the attempt's last logged step, and the total when known."""
    total = s.training.total_steps if s.training is not None else None
    of = f" of {total}" if total else ""
    if f.step is None or f.step <= 0:
        return "It died before the run's first step."
    return f"It died during step {f.step + 1}{of} (the last step logged: {f.step})."


def resume_words(s: Snapshot) -> str:
    """Where a resume starts: the checkpoint the framework's tracker file names (verl's
    latest_checkpointed_iteration.txt, DeepSpeed's `latest`), else the newest checkpoint, else from scratch."""
    latest = s.checkpoint.latest if s.checkpoint is not None else None
    if latest is None:
        return "No checkpoint was found: a resume starts from scratch."
    name = os.path.basename(latest.path.rstrip("/"))
    step = f" (step {latest.global_step})" if latest.global_step is not None else ""
    if latest.tracker:
        tracker = os.path.basename(latest.tracker)
        return f"A resume starts from {name}{step}, the checkpoint {tracker} names."
    return f"The latest checkpoint is {name}{step}."


def _message(s: Snapshot, f: RayFailure) -> str:
    parts = [_head(f).rstrip(".") + "."]
    kernel = kernel_words(s, f)
    if kernel:
        parts.append(f"The kernel: {kernel}.")
    if f.exception and f.exception not in f.cause:
        parts.append(f"Its error: {f.exception}.")
    if f.title and f.title not in f.cause and not f.title.startswith("State API"):
        parts.append(f"The driver ended in: {_title(f)}{_where(f)}.")
    parts.append(step_words(s, f))
    parts.append(resume_words(s))
    if s.profile == "verl" and f.kind != "cluster_unreachable":
        parts.append("Fix the cause, then: rlwatch act resume (adds trainer.resume_mode=auto).")
    return " ".join(parts)


def ray(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """The failure the run's latest attempt ended in, as its root cause; earlier attempts' failures as history."""
    r = s.ray
    if r is None:
        return
    f = r.failure
    if f is not None and f.current:
        if f.kind == "job_stopped":
            at = f" at step {f.step}" if f.step else ""
            yield Finding(INFO, "ray_job_stopped", f"The Ray job was stopped{at}: {f.cause}. {resume_words(s)}", f.at)
        else:
            yield Finding(CRIT, _CODES.get(f.kind, "ray_actor_died"), _message(s, f), f.at)
    for h in r.history[-2:]:
        now = s.training.last_step if s.training is not None else None
        since = f"; the run went on since (now at step {now})" if now is not None else "; the run went on since"
        yield Finding(INFO, "ray_earlier_failure", f"An earlier attempt failed: {_head(h)}{since}.", h.at)
    if r.dead_nodes and (f is None or f.kind not in ("node_died", "actor_unavailable", "cluster_unreachable")):
        alive = s.run_state is not None and s.run_state.state in ("progressing", "unknown", "hung")
        yield Finding(
            WARN if alive else INFO,
            "ray_node_dead",
            f"Ray reports {plural(len(r.dead_nodes), 'dead node')}: {'; '.join(r.dead_nodes[:3])}.",
            None,
        )


def _driver_alive(s: Snapshot) -> bool:
    members = {pid for pid, _ in s.live_run.members} if s.live_run is not None else set()
    return any(p.alive and p.role in _DRIVER_ROLES and p.pid in members for p in s.processes)


def ray_run_state(s: Snapshot, rs: RunState) -> RunState:
    """The run's state with what Ray says: an attempt that ended in a Ray failure crashed (its actors' last lines,
    relayed after the driver's traceback, are no progress after it); one whose job was stopped stopped."""
    r = s.ray
    f = r.failure if r is not None else None
    if f is None or not f.current or _driver_alive(s):
        return rs
    since = f.at if f.at is not None else rs.since
    evidence = tuple(f.evidence[:6]) or rs.evidence
    step = f" at step {f.step}" if f.step else ""
    if f.kind == "job_stopped":
        if rs.state in ("finished", "stopped", "unknown") and not (s.training is not None and s.training.finished):
            return RunState("stopped", f"{f.cause}{step}", since, evidence)
        return rs
    if s.training is not None and s.training.finished:
        return rs
    when = f", {hhmm(f.at, s.time)}" if f.at is not None else ""
    why = _head(f)
    if f.title and f.title not in why and not f.title.startswith("State API"):
        why += f"; the driver ended in {_title(f)}{_where(f)}"
    return RunState("crashed", f"{why}{step}{when}", since, evidence)
