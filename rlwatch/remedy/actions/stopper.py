"""The stop protocol: SIGTERM (and SIGCONT) to a process tree, a grace period, SIGKILL, then an honest report.

The tree is snapshotted once as (pid, start time) identities, and every signal goes through
:func:`~rlwatch.remedy.actions.signals.send_signal`, so a process that exits and whose pid is re-used meanwhile is
never hit. The process group is signalled too (it catches what forks while we work), but only when the root leads its
own group and every live member of that group belongs to the tree: a group that holds anything else, such as rlwatch's
own group or a login shell's, is never signalled as a whole. Protected processes are left alone and reported. What
survives SIGKILL is reported as unkillable (usually state D, stuck in the kernel) instead of being retried forever.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil

from rlwatch.common.signals import signal_text
from rlwatch.remedy.actions.identity import (
    CREATE_TIME_TOLERANCE_S,
    Ident,
    ProcStat,
    ident_of,
    matches,
    read_proc_stat,
    same_process,
)
from rlwatch.remedy.actions.signals import SignalOutcome, SignalStatus, send_signal, wait_gone

EXITED = "exited after SIGTERM"
KILLED = "killed"
ALREADY_GONE = "already gone"
REUSED = "pid reused: left alone"
GONE_OUTCOMES = frozenset({EXITED, KILLED, ALREADY_GONE, REUSED})

Protected = Callable[[int], str | None]


@dataclass(frozen=True, slots=True)
class StoppedProcess:
    """One member of the tree: who it was, the signals that reached it in order, and how it ended."""

    ident: Ident
    cmdline: tuple[str, ...]
    signals: tuple[str, ...]
    outcome: str  # EXITED | KILLED | ALREADY_GONE | REUSED | "unkillable (…)" | "refused: <reason>"
    found_late: bool = False  # forked after the snapshot, found before the SIGKILL round

    @property
    def gone(self) -> bool:
        return self.outcome in GONE_OUTCOMES


@dataclass(frozen=True, slots=True)
class StopReport:
    root: Ident
    processes: tuple[StoppedProcess, ...]
    pgid: int | None = None  # the root's own process group, when it leads one
    group_signals: tuple[str, ...] = ()  # what reached that group as a whole (nothing if it held outsiders)
    error: str | None = None  # an unexpected failure that cut the protocol short

    @property
    def ok(self) -> bool:
        """Everything in the tree is gone, and nothing had to be left alone."""
        return self.error is None and all(p.gone for p in self.processes)

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for p in self.processes:
            counts[p.outcome] = counts.get(p.outcome, 0) + 1
        return ", ".join(f"{n} {outcome}" for outcome, n in counts.items()) or "nothing to stop"


@dataclass
class _Member:
    ident: Ident
    cmdline: tuple[str, ...]
    depth: int
    late: bool = False
    signals: list[str] = field(default_factory=list)
    outcome: str | None = None
    failure: SignalOutcome | None = None

    def freeze(self) -> StoppedProcess:
        return StoppedProcess(self.ident, self.cmdline, tuple(self.signals), self.outcome or "", self.late)


def _cmdline(proc: psutil.Process) -> tuple[str, ...]:
    try:
        return tuple(proc.cmdline())
    except (psutil.Error, OSError):
        return ()


def _process(ident: Ident) -> psutil.Process | None:
    """A psutil handle on ``ident`` only if the pid still names that very process."""
    try:
        proc = psutil.Process(ident.pid)
        if abs(proc.create_time() - ident.create_time) > CREATE_TIME_TOLERANCE_S:
            return None
    except (psutil.Error, OSError):
        return None
    return proc


def _descendants(ident: Ident, base_depth: int) -> list[tuple[Ident, tuple[str, ...], int]]:
    """Every process below ``ident`` (parents before children), with its depth in the tree."""
    proc = _process(ident)
    if proc is None:
        return []
    try:
        kids = proc.children(recursive=True)
    except (psutil.Error, OSError):
        return []
    depth = {ident.pid: base_depth}
    out: list[tuple[Ident, tuple[str, ...], int]] = []
    for kid in kids:
        try:
            kid_ident = Ident(kid.pid, kid.create_time())
            parent = kid.ppid()
        except (psutil.Error, OSError):
            continue
        depth[kid.pid] = depth.get(parent, base_depth) + 1
        out.append((kid_ident, _cmdline(kid), depth[kid.pid]))
    return out


def _check(protected: Protected, pid: int) -> str | None:
    try:
        return protected(pid)
    except Exception as exc:  # a broken check protects: never act on a process we could not vet
        return f"protection check failed: {type(exc).__name__}"


def _group_members(pgid: int) -> list[ProcStat] | None:
    """Live members of process group ``pgid``; None when /proc cannot be listed (then: no group signal)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    members = []
    for name in names:
        if not name.isdigit():
            continue
        stat = read_proc_stat(int(name))
        if stat is not None and stat.pgrp == pgid and not stat.gone:
            members.append(stat)
    return members


def _group_is_ours(pgid: int, tree: Iterable[Ident]) -> bool:
    """Group ``pgid`` has live members and every one is in ``tree`` (the same processes, not just the same pids)."""
    by_pid = {i.pid: i for i in tree}
    members = _group_members(pgid)
    if not members:
        return False
    for stat in members:
        ident = by_pid.get(stat.pid)
        if ident is None or not matches(ident, stat):
            return False
    return True


class _Stop:
    def __init__(self, root: Ident, protected: Protected, clock: Callable[[], float]) -> None:
        self.root = root
        self.protected = protected
        self.clock = clock
        self.members: list[_Member] = []
        self.pgid: int | None = None
        self.group_signals: list[str] = []

    def report(self, error: str | None = None) -> StopReport:
        procs = tuple(m.freeze() for m in self.members)
        return StopReport(self.root, procs, self.pgid, tuple(self.group_signals), error)

    def active(self) -> list[_Member]:
        return [m for m in self.members if m.outcome is None]

    def add(self, ident: Ident, cmdline: tuple[str, ...], depth: int, *, late: bool = False) -> None:
        member = _Member(ident, cmdline, depth, late)
        self.members.append(member)
        if not same_process(ident):
            member.outcome = ALREADY_GONE
        elif why := _check(self.protected, ident.pid):
            member.outcome = f"refused: {why}"

    def start(self) -> bool:
        """Vet the root and snapshot the tree; False when there is nothing that may be signalled."""
        root = self.root
        if root.pid <= 1:
            early = _check(self.protected, root.pid) or f"pid {root.pid}"
            self.members.append(_Member(root, (), 0, outcome=f"refused: {early}"))
            return False
        proc = _process(root) if same_process(root) else None
        if proc is None:
            now = ident_of(root.pid)
            reused = now is not None and abs(now.create_time - root.create_time) > CREATE_TIME_TOLERANCE_S
            self.members.append(_Member(root, (), 0, outcome=REUSED if reused else ALREADY_GONE))
            return False
        why = _check(self.protected, root.pid)
        if why is not None:  # never look further: the children of pid 1 are the whole machine
            self.members.append(_Member(root, _cmdline(proc), 0, outcome=f"refused: {why}"))
            return False
        self.members.append(_Member(root, _cmdline(proc), 0))
        for ident, cmdline, depth in _descendants(root, 0):
            self.add(ident, cmdline, depth)
        stat = read_proc_stat(root.pid)
        if stat is not None and stat.pgrp == root.pid:
            self.pgid = root.pid
        return True

    def signal_each(self, sigs: tuple[int, ...], members: list[_Member]) -> None:
        """Signal bottom-up, so parents do not respawn children we are about to stop; stop at the first miss."""
        for m in sorted(members, key=lambda m: -m.depth):
            for sig in sigs:
                if not self._signal(m, sig):
                    break

    def _signal(self, m: _Member, sig: int) -> bool:
        result = send_signal(m.ident, sig)
        if result.sent:
            m.signals.append(signal_text(sig))
            m.failure = None
            return True
        if result.status is SignalStatus.GONE:
            m.outcome = EXITED if m.signals else ALREADY_GONE
        elif result.status is SignalStatus.REUSED:
            m.outcome = REUSED
        else:
            m.failure = result
        return False

    def signal_group(self, *sigs: int) -> None:
        if self.pgid is None:
            return
        tree = [m.ident for m in self.members if m.outcome is None or m.outcome in GONE_OUTCOMES]
        if not _group_is_ours(self.pgid, tree):  # a protected member is not in ``tree``: it blocks this too
            return
        for sig in sigs:
            try:
                os.killpg(self.pgid, sig)
            except OSError:
                return
            self.group_signals.append(signal_text(sig))

    def ended(self, m: _Member) -> str:
        """How a member that is now gone ended, judged by the strongest signal that reached it."""
        reached = {*m.signals, *self.group_signals}
        if "SIGKILL" in reached:
            return KILLED
        return EXITED if "SIGTERM" in reached else ALREADY_GONE

    def wait(self, timeout: float) -> None:
        live = {m.ident: m for m in self.active()}
        gone, _alive = wait_gone(list(live), timeout, self.clock)
        for ident in gone:
            live[ident].outcome = self.ended(live[ident])

    def find_late(self) -> None:
        """Children forked after the snapshot (a parent respawning workers while we waited)."""
        known = {m.ident.pid for m in self.members}
        covered: set[int] = set()
        for m in sorted(self.active(), key=lambda m: m.depth):
            if m.ident.pid in covered:  # already listed under a live ancestor
                continue
            for ident, cmdline, depth in _descendants(m.ident, m.depth):
                covered.add(ident.pid)
                if ident.pid not in known:
                    known.add(ident.pid)
                    self.add(ident, cmdline, depth, late=True)

    def finish(self) -> None:
        for m in self.active():
            stat = read_proc_stat(m.ident.pid)
            if stat is None or not matches(m.ident, stat):
                m.outcome = self.ended(m)
            elif m.failure is not None and "SIGKILL" not in m.signals:
                m.outcome = f"unkillable ({m.failure})"
            else:
                m.outcome = f"unkillable (state {stat.state})"


def stop_tree(
    root: Ident,
    *,
    grace_s: float,
    kill_wait_s: float = 5.0,
    protected: Protected,
    clock_monotonic: Callable[[], float] = time.monotonic,
) -> StopReport:
    """Stop ``root`` and everything below it; returns within about ``grace_s + kill_wait_s``. Never raises."""
    stop = _Stop(root, protected, clock_monotonic)
    try:
        if not stop.start():
            return stop.report()
        stop.signal_each((signal.SIGTERM, signal.SIGCONT), stop.active())
        stop.signal_group(signal.SIGTERM, signal.SIGCONT)
        stop.wait(grace_s)
        stop.find_late()
        if stop.active():
            stop.signal_each((signal.SIGKILL,), stop.active())
            stop.signal_group(signal.SIGKILL)
            stop.wait(kill_wait_s)
        stop.finish()
    except Exception as exc:  # report what is known so far rather than leave the caller with a traceback
        for m in stop.active():
            m.outcome = f"unkillable (stop interrupted: {type(exc).__name__})"
        return stop.report(error=f"{type(exc).__name__}: {exc}")
    return stop.report()
