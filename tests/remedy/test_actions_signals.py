"""Signals reach exactly the process meant: real children of this test, never anything else."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rlwatch.remedy.actions import identity, signals
from rlwatch.remedy.actions.identity import Ident, ident_of, parse_proc_stat, read_proc_stat, same_process
from rlwatch.remedy.actions.signals import SignalStatus, send_signal, wait_gone
from tests.simhost import wait_until

IDLE = r"""
import os, signal, sys
ready, mode = sys.argv[1], sys.argv[2]
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(ready + ".tmp", ready)
while True:
    signal.pause()
"""


class Kids:
    """Children this test starts, each ready before it is returned; all killed and reaped afterwards."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.popens: list[subprocess.Popen[bytes]] = []

    def start(self, mode: str = "default", **popen: object) -> tuple[subprocess.Popen[bytes], Ident]:
        ready = self.tmp_path / f"ready-{len(self.popens)}"
        proc = subprocess.Popen([sys.executable, "-S", "-c", IDLE, str(ready), mode], **popen)  # type: ignore[call-overload]
        self.popens.append(proc)
        assert wait_until(ready.exists), "child never became ready"
        ident = ident_of(proc.pid)
        assert ident is not None
        return proc, ident

    def close(self) -> None:
        for proc in self.popens:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def kids(tmp_path: Path) -> Iterator[Kids]:
    k = Kids(tmp_path)
    yield k
    k.close()


def test_ident_of_this_process_matches_psutil() -> None:
    me = ident_of(os.getpid())
    assert me is not None
    assert me.create_time == psutil.Process().create_time()
    assert same_process(me)
    assert ident_of(0) is None
    assert ident_of(-4) is None


def test_start_time_from_proc_agrees_with_psutil() -> None:
    stat = read_proc_stat(os.getpid())
    assert stat is not None
    started = identity.create_time_of(stat)
    assert started is not None
    assert abs(started - psutil.Process().create_time()) <= identity.CREATE_TIME_TOLERANCE_S


def test_parse_proc_stat_handles_odd_names_and_garbage() -> None:
    fields = " ".join(str(n) for n in range(4, 53))
    stat = parse_proc_stat(42, f"42 (a) b (c d) S {fields}")
    assert stat is not None
    assert stat.comm == "a) b (c d"
    assert (stat.state, stat.ppid, stat.pgrp, stat.session, stat.flags) == ("S", 4, 5, 6, 9)
    assert stat.start_ticks == 22
    assert parse_proc_stat(1, "garbage") is None
    assert parse_proc_stat(1, "1 (x) S 1 2") is None
    assert parse_proc_stat(1, "1 (x) S one 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20") is None


def test_term_is_sent_through_a_pidfd(kids: Kids) -> None:
    proc, ident = kids.start()
    outcome = send_signal(ident, signal.SIGTERM)
    assert outcome.status is SignalStatus.SENT
    assert outcome.via == "pidfd"
    assert str(outcome) == "sent"
    assert proc.wait(timeout=10) == -signal.SIGTERM


def test_reused_pid_is_not_signalled(kids: Kids) -> None:
    proc, ident = kids.start()
    stale = Ident(ident.pid, ident.create_time + 100.0)
    outcome = send_signal(stale, signal.SIGKILL)
    assert outcome.status is SignalStatus.REUSED
    assert not outcome.sent
    assert proc.poll() is None
    assert same_process(ident)


def test_zombie_and_reaped_processes_are_gone(kids: Kids) -> None:
    proc, ident = kids.start()
    os.kill(proc.pid, signal.SIGKILL)  # our own child, by the pid we hold unreaped
    assert wait_until(lambda: (s := read_proc_stat(ident.pid)) is not None and s.state == "Z")
    assert not same_process(ident)
    assert send_signal(ident, signal.SIGTERM).status is SignalStatus.GONE
    proc.wait(timeout=10)
    assert send_signal(ident, signal.SIGTERM).status is SignalStatus.GONE
    assert ident_of(ident.pid) is None or ident_of(ident.pid) != ident


@pytest.mark.parametrize("pid", [1, 0, -1, -1234])
def test_pid_one_and_below_are_never_signalled(pid: int) -> None:
    outcome = send_signal(Ident(pid, 0.0), signal.SIGTERM)
    assert outcome.status is SignalStatus.DENIED
    assert str(outcome).startswith("denied: never signal pid")


def test_psutil_fallback_when_pidfd_open_is_missing(kids: Kids, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    proc, ident = kids.start()
    assert send_signal(Ident(ident.pid, ident.create_time - 50), signal.SIGTERM).status is SignalStatus.REUSED
    assert proc.poll() is None
    outcome = send_signal(ident, signal.SIGTERM)
    assert (outcome.status, outcome.via) == (SignalStatus.SENT, "psutil")
    assert proc.wait(timeout=10) == -signal.SIGTERM


def test_psutil_fallback_when_pidfd_send_signal_is_missing(kids: Kids, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(signal, "pidfd_send_signal")
    proc, ident = kids.start()
    outcome = send_signal(ident, signal.SIGKILL)
    assert (outcome.status, outcome.via) == (SignalStatus.SENT, "psutil")
    assert proc.wait(timeout=10) == -signal.SIGKILL


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_signal_to_another_users_process_is_denied(kids: Kids) -> None:
    sleeper = subprocess.Popen(["sleep", "300"], user=12345, group=12345)
    kids.popens.append(sleeper)
    assert wait_until(lambda: psutil.Process(sleeper.pid).uids().real == 12345)
    ident = ident_of(sleeper.pid)
    assert ident is not None
    os.seteuid(65534)  # the real uid stays 0, so this can be undone; effective capabilities are dropped
    try:
        outcome = send_signal(ident, signal.SIGTERM)
    finally:
        os.seteuid(0)
    assert outcome.status is SignalStatus.DENIED
    assert sleeper.poll() is None


def test_send_signal_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(pid: int) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(signals, "_send_pidfd", lambda ident, sig: broken(ident.pid))
    outcome = send_signal(Ident(os.getpid() + 10_000_000, 1.0), signal.SIGTERM)
    assert outcome.status is SignalStatus.ERROR
    assert str(outcome) == "error: RuntimeError: boom"


def test_wait_gone_returns_as_soon_as_all_exit(kids: Kids) -> None:
    procs = [kids.start() for _ in range(2)]
    for proc, _ident in procs:
        proc.terminate()
    started = time.monotonic()
    gone, alive = wait_gone([i for _p, i in procs], timeout=30.0)
    assert gone == [i for _p, i in procs]
    assert alive == []
    assert time.monotonic() - started < 10.0


def test_wait_gone_reports_survivors_after_the_deadline(kids: Kids) -> None:
    (p1, keep), (p2, goes) = kids.start(), kids.start()
    p2.kill()
    started = time.monotonic()
    gone, alive = wait_gone([keep, goes], timeout=0.3)
    elapsed = time.monotonic() - started
    assert (gone, alive) == ([goes], [keep])
    assert 0.3 <= elapsed < 5.0
    assert p1.poll() is None


def test_wait_gone_without_pidfds_polls(kids: Kids, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise AttributeError("pidfd_open")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    (p1, keep), (p2, goes) = kids.start(), kids.start()
    p2.terminate()
    gone, alive = wait_gone([keep, goes], timeout=0.3)
    assert (gone, alive) == ([goes], [keep])
    p1.terminate()
    gone, alive = wait_gone([keep], timeout=30.0)
    assert (gone, alive) == ([keep], [])


def test_wait_gone_follows_an_injected_clock(kids: Kids) -> None:
    _proc, ident = kids.start()
    ticks = iter(range(1000))
    gone, alive = wait_gone([ident], timeout=3.0, clock_monotonic=lambda: float(next(ticks)))
    assert (gone, alive) == ([], [ident])
