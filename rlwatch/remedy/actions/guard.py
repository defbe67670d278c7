"""Which processes rlwatch must never touch, whatever a plan, a policy or a person asks.

The rules are split in two: :func:`judge` decides from plain facts (so every rule is testable with made-up
processes), and :func:`protected_reason` gathers the facts of a real pid. When the facts cannot be read the answer
is "protected": not knowing who a process is, is reason enough to leave it alone.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass

import psutil

from rlwatch.remedy.actions.identity import read_proc_stat
from rlwatch.sources import procfs
from rlwatch.sources.membership import may_act_on
from rlwatch.sources.procfs import daemon_name, daemon_names


@dataclass(frozen=True, slots=True)
class ProcFacts:
    """What the rules look at. ``names`` holds every name the process goes by (executable, comm, argv[0], script)."""

    pid: int
    names: tuple[str, ...]
    uid: int | None
    user: str | None
    kernel_thread: bool


def _special_pid(pid: int, self_pid: int, ancestors: Collection[int]) -> str | None:
    if pid <= 0:
        return "pid 0/negative"
    if pid == 1:
        return "pid 1"
    if pid == self_pid:
        return "rlwatch itself"
    if pid in ancestors:
        return "an ancestor of rlwatch"
    return None


def judge(
    facts: ProcFacts,
    *,
    self_pid: int,
    ancestors: Collection[int],
    owners: Collection[int],
    protected_names: Collection[str],
) -> str | None:
    """Why ``facts.pid`` must be left alone, or None when it may be signalled. ``owners``: the users whose processes
    may be acted on (:func:`~rlwatch.sources.membership.run_owners`: this user, and under root the users a trusted
    file's ``actions.other_users`` names when ``allow_other_users`` is set, nobody else)."""
    special = _special_pid(facts.pid, self_pid, ancestors)
    if special is not None:
        return special
    if facts.kernel_thread:
        return "kernel thread"
    daemon = daemon_name(facts.names, protected_names)
    if daemon is not None:
        return f"system daemon {daemon}"
    if facts.uid is None:
        return "owner unknown"
    if not may_act_on(facts.uid, owners):
        also = " nor by a user actions.other_users names" if len(owners) > 1 else ""
        return f"owned by {facts.user or facts.uid}, not by you{also}"
    return None


def ancestors_of(pid: int) -> tuple[int, ...]:
    """The parent chain of ``pid``, nearest first, up to the first parent that is 0 or cannot be read."""
    return tuple(procfs.ancestors(pid))


def read_facts(pid: int) -> ProcFacts | None:
    """The facts of a live pid; None when it is gone or its basic facts cannot be read."""
    stat = read_proc_stat(pid)
    if stat is None:
        return None
    exe: str | None = None
    cmdline: list[str] = []
    uid: int | None = None
    try:
        proc = psutil.Process(pid)
        uid = proc.uids().real
        try:
            cmdline = proc.cmdline()
            exe = proc.exe() or None
        except (psutil.AccessDenied, psutil.ZombieProcess):
            pass
    except (psutil.Error, OSError, ValueError):
        return None
    return ProcFacts(
        pid=pid,
        names=daemon_names(exe, stat.comm, cmdline),
        uid=uid,
        user=procfs.user_name(uid),
        kernel_thread=stat.kernel_thread,
    )


def protected_reason(
    pid: int,
    *,
    protected_names: Collection[str],
    owners: Collection[int],
    self_pid: int | None = None,
) -> str | None:
    """Why ``pid`` must never be touched, or None. ``owners`` as for :func:`judge`; ``self_pid`` defaults to this
    process, read at call time."""
    me = os.getpid() if self_pid is None else self_pid
    ancestors = ancestors_of(me)
    special = _special_pid(pid, me, ancestors)
    if special is not None:
        return special
    facts = read_facts(pid)
    if facts is None:
        return f"cannot inspect pid {pid} (gone or unreadable)"
    return judge(
        facts,
        self_pid=me,
        ancestors=ancestors,
        owners=owners,
        protected_names=protected_names,
    )
