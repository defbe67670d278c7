"""What every rule shares: the facts beyond the snapshot (:class:`Context`), the rule's type, and the few questions
of evidence many rules ask (did training progress after this? is this kind history?)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rlwatch.common.state import (
    Finding,
    Incident,
    Severity,
    Snapshot,
)
from rlwatch.config.models import HostConfig, LearningConfig, StacksConfig, Thresholds

CRIT, WARN, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO


@dataclass(frozen=True, slots=True)
class StepSeen:
    """What earlier reads of the run (any rlwatch's: the dashboard, a watchdog, an earlier report) say of the last
    step line, ``path``:``lineno`` (:mod:`rlwatch.engine.seen`): written by ``by`` at the latest (its own time or when
    a live read saw it come, where ``exact``), and after ``after``, where a look before it found an earlier step
    last."""

    path: str
    lineno: int
    by: float
    exact: bool
    after: float | None = None


@dataclass(frozen=True)
class Context:
    """Facts the rules need beyond the snapshot."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    missing_expected: tuple[str, ...] = ()  # roles configured as expected with no live process
    starts: dict[str, tuple[float, ...]] = field(default_factory=dict)  # role -> recent start times (wall)
    memory_limits: dict[str, int] = field(default_factory=dict)  # process name -> configured RSS limit
    server_start_timeout_s: float = 600.0
    server_grace_s: float = 10.0  # a live server silent for less than this (two probes) may just be busy
    trainer_alive: bool | None = None
    # A launch command is configured (actions.resume_command, or a launcher's or trainer's command): a resume can
    # start the run even when rlwatch never saw its launcher (it died before rlwatch started).
    resume_known: bool = False
    gpu_idle: bool | None = None
    no_run: str | None = None  # nothing of a training run seen: where discovery looked
    actions_off: str | None = None  # why no action may run (an untrusted configuration file), in one line
    progress_kinds: tuple[str, ...] = ()  # the configuration's own kinds whose lines prove progress
    host: HostConfig = field(default_factory=HostConfig)  # the machine's limits (host.py, hardware.py)
    learning: LearningConfig = field(default_factory=LearningConfig)  # when learning broke (learning.py)
    stacks: StacksConfig = field(default_factory=StacksConfig)  # hangs and stragglers from the stacks (stacks.py)
    seen: StepSeen | None = None  # when earlier reads saw the last step line (health.py's last_progress)


Rule = Callable[[Snapshot, Context], Iterator[Finding]]


def progressed_since(s: Snapshot, t: float | None) -> bool:
    """Training logged a step after ``t``: an error before it is only_history, not a current problem."""
    tr = s.training
    return t is not None and tr is not None and tr.last_step_at is not None and tr.last_step_at > t


def stepped_after(s: Snapshot, i: Incident) -> bool:
    """A training step was logged below the incident's lines in its own file: progress after it, by position (an
    undated block is bounded only by the file's modification time, but the order of its lines is certain)."""
    step = s.events.get("step")
    last = step.recent[-1] if step is not None and step.recent else None
    return last is not None and last.path == i.path and last.lineno >= i.lineno + i.count


def progress_before(s: Snapshot, path: str, lineno: int | None, t: float | None) -> bool:
    """Every log's last progress line came before the failure at line ``lineno`` of ``path`` (its time ``t``): above
    it in its own log, or in another log at a time of its own no later than ``t``. A line read live is dated when it
    was read, so a step written just before a launcher's stamped failure report, and read with it, is "later" than
    the report by that clock; its place in the log says it came first (kernel-oom watched live: the crash was taken
    for history, and the run called stopped "without an error" while a report said crashed)."""
    lines = s.progress_lines
    if not lines or t is None:
        return False
    return all(
        (line.path == path and lineno is not None and line.lineno < lineno)
        or (line.path != path and math.isfinite(line.time) and line.time <= t)
        for line in lines
    )


def only_history(s: Snapshot, kind: str) -> bool:
    """Every file that had ``kind`` has shown progress since (a step, the server ready…): it is no longer happening."""
    ev = s.events.get(kind)
    # Undated lines count as history only when progress came after the latest they can be.
    last = (ev.last_by if ev.approximate else ev.last) if ev is not None else None
    return ev is not None and ev.count > 0 and (ev.streak == 0 or progressed_since(s, last))


def count_of(s: Snapshot, kind: str) -> int:
    e = s.events.get(kind)
    return e.count if e else 0


def per_file(s: Snapshot, kind: str) -> str:
    e = s.events.get(kind)
    if not e or not e.files:
        return ""
    parts = [f"{path.rsplit('/', 1)[-1]} {n}" for path, n in sorted(e.files.items(), key=lambda kv: -kv[1])]
    return " (" + ", ".join(parts[:4]) + ")"
