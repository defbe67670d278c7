"""Who a process is: (pid, start time), because a pid alone may name a different process by the time we act.

The start time is psutil's ``create_time()`` (``starttime`` ticks since boot / CLK_TCK + the boot time), precise to
one clock tick (0.01 s), so two identities compare equal within that tolerance. A zombie has already exited: it
holds no memory and no files and cannot be signalled into doing anything, so it counts as gone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

from rlwatch.sources.procfs import clk_tck, parse_stat

CREATE_TIME_TOLERANCE_S = 0.01
PF_KTHREAD = 0x00200000  # task flag of kernel threads (include/linux/sched.h)
_GONE_STATES = frozenset({"Z", "X", "x"})
_BOOT_TIME_TTL_S = 1.0
_boot_cache: tuple[float, float] | None = None  # (monotonic time read, boot time)


@dataclass(frozen=True, slots=True)
class Ident:
    """One process over its whole life: the pid plus when it started (epoch seconds, as psutil reports it)."""

    pid: int
    create_time: float


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the actions need, read in one go so they describe one process."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int
    session: int
    flags: int
    start_ticks: int

    @property
    def gone(self) -> bool:
        """Exited (zombie or dead) even though the pid is still listed."""
        return self.state in _GONE_STATES

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & PF_KTHREAD)


def parse_proc_stat(pid: int, text: str) -> ProcStat | None:
    """The process ``pid`` as ``text`` (its ``/proc/<pid>/stat``) describes it; None when that is no stat line."""
    f = parse_stat(text)
    if f is None:
        return None
    return ProcStat(pid, f.comm, f.state, f.ppid, f.pgrp, f.session, f.flags, f.starttime_ticks)


def read_proc_stat(pid: int) -> ProcStat | None:
    """None when the process is gone, unreadable, or the pid is not a process id at all."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    return parse_proc_stat(pid, text)


def _boot_time() -> float | None:
    """psutil's boot time, re-read at most once a second: wait loops check identities every few milliseconds, and
    ``/proc/stat`` is costly to generate on hosts with many CPUs. It moves only when the wall clock is stepped."""
    global _boot_cache
    now = time.monotonic()
    if _boot_cache is None or now - _boot_cache[0] > _BOOT_TIME_TTL_S:
        try:
            _boot_cache = (now, psutil.boot_time())
        except (OSError, RuntimeError, ValueError):
            return None
    return _boot_cache[1]


def create_time_of(stat: ProcStat) -> float | None:
    """The start time in the same arithmetic as psutil, so it compares with an :class:`Ident` from psutil."""
    boot = _boot_time()
    if boot is None:
        return None
    return float(stat.start_ticks) / clk_tck() + boot


def ident_of(pid: int) -> Ident | None:
    """The identity of whatever runs as ``pid`` now; None if nothing does or it cannot be read."""
    if pid <= 0:
        return None
    try:
        return Ident(pid, psutil.Process(pid).create_time())
    except (psutil.Error, OSError, ValueError):
        return None


def matches(ident: Ident, stat: ProcStat) -> bool:
    """Whether ``stat`` (read just now) describes the process ``ident`` names, alive."""
    if stat.pid != ident.pid or stat.gone:
        return False
    started = create_time_of(stat)
    return started is not None and abs(started - ident.create_time) <= CREATE_TIME_TOLERANCE_S


def same_process(ident: Ident) -> bool:
    """The process still runs: its pid exists, started when the identity says, and has not exited (zombie)."""
    stat = read_proc_stat(ident.pid)
    return stat is not None and matches(ident, stat)
