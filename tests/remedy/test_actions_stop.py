"""The stop protocol against real process trees that this test starts (and only those)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from rlwatch.remedy.actions import stopper
from rlwatch.remedy.actions.guard import protected_reason
from rlwatch.remedy.actions.identity import Ident, ident_of, read_proc_stat, same_process
from rlwatch.remedy.actions.signals import SignalOutcome, SignalStatus, send_signal, wait_gone
from rlwatch.remedy.actions.stopper import ALREADY_GONE, EXITED, KILLED, REUSED, StopReport, stop_tree
from tests.simhost import wait_until

NAMES = ["nvidia-persistenced", "nv-hostengine", "dcgm-exporter"]

TREE = r"""
import os, signal, subprocess, sys
out, mode, fanout, depth = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
extra = sys.argv[5:]

def mark(kind):
    tmp = os.path.join(out, f".{kind}-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, os.path.join(out, f"{kind}-{os.getpid()}"))

def forever(kind):
    mark(kind)
    while True:
        signal.pause()

def on_term(signum, frame):
    mark("term")
    os._exit(0)

late = []
def fork_on_term(signum, frame):
    if not late:
        late.append(1)
        if os.fork() == 0:
            forever("late")

if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode == "handler":
    signal.signal(signal.SIGTERM, on_term)
elif mode == "fork-on-term":
    signal.signal(signal.SIGTERM, fork_on_term)
elif mode == "daemon":
    forever("daemon")

def grow(level):
    if level < depth:
        for _ in range(fanout):
            if os.fork() == 0:
                grow(level + 1)
                forever("ready")

if mode == "orphan":
    if os.fork() == 0:
        if os.fork() == 0:
            forever("orphan")
        os._exit(0)
    os.wait()
grow(0)
if extra:
    subprocess.Popen(extra)
forever("ready")
"""


def guard(pid: int) -> str | None:
    return protected_reason(pid, protected_names=NAMES, owners={os.geteuid()})


class Tree:
    """One process tree started by this test; every process in it marks a file when it is ready."""

    def __init__(self, out: Path, known: list[Ident]) -> None:
        self.out = out
        self.known = known
        out.mkdir()

    def pids(self, kind: str) -> list[int]:
        return sorted(int(p.name.split("-")[1]) for p in self.out.glob(f"{kind}-*"))

    def wait_for(self, kind: str, count: int) -> list[Ident]:
        assert wait_until(lambda: len(self.pids(kind)) >= count), f"only {self.pids(kind)} of {count} {kind}"
        idents = [i for i in (ident_of(pid) for pid in self.pids(kind)) if i is not None]
        assert len(idents) == len(self.pids(kind))
        self.known.extend(idents)
        return idents


class Trees:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.popens: list[subprocess.Popen[bytes]] = []
        self.known: list[Ident] = []

    def start(
        self,
        mode: str = "default",
        *,
        fanout: int = 0,
        depth: int = 0,
        extra: Sequence[str] = (),
        new_session: bool = True,
        program: str = sys.executable,
    ) -> tuple[Tree, Ident]:
        tree = Tree(self.tmp_path / f"tree-{len(self.popens)}", self.known)
        argv = [program, "-S", "-c", TREE, str(tree.out), mode, str(fanout), str(depth), *extra]
        self.popens.append(subprocess.Popen(argv, start_new_session=new_session))
        size = sum(fanout**level for level in range(depth + 1))
        members = tree.wait_for("ready", size)
        root = ident_of(self.popens[-1].pid)
        assert root is not None and root in members
        return tree, root

    def close(self) -> None:
        for ident in self.known:  # identity-checked: only ever the processes started here
            send_signal(ident, signal.SIGKILL)
        for proc in self.popens:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def trees(tmp_path: Path) -> Iterator[Trees]:
    t = Trees(tmp_path)
    yield t
    t.close()


def outcome_of(report: StopReport, ident: Ident) -> str:
    return next(p.outcome for p in report.processes if p.ident == ident)


def test_child_that_exits_on_term(trees: Trees) -> None:
    tree, root = trees.start("handler")
    started = time.monotonic()
    report = stop_tree(root, grace_s=30.0, protected=guard)
    assert time.monotonic() - started < 10.0  # returned when it exited, not after the grace period
    assert [p.outcome for p in report.processes] == [EXITED]
    assert report.summary() == "1 exited after SIGTERM"
    assert report.processes[0].signals[0] == "SIGTERM"  # SIGCONT follows unless it has exited already
    assert tree.pids("term") == [root.pid]  # its own handler ran: it was asked, not killed
    assert report.ok
    assert not same_process(root)


def test_child_ignoring_term_is_killed_after_grace(trees: Trees) -> None:
    _tree, root = trees.start("ignore")
    started = time.monotonic()
    report = stop_tree(root, grace_s=0.3, kill_wait_s=10.0, protected=guard)
    assert time.monotonic() - started >= 0.3
    (proc,) = report.processes
    assert proc.outcome == KILLED
    assert proc.signals == ("SIGTERM", "SIGCONT", "SIGKILL")
    assert report.pgid == root.pid
    assert report.group_signals[:2] == ("SIGTERM", "SIGCONT")  # SIGKILL too, unless nothing was left in the group
    assert not same_process(root)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "expected"), [("default", EXITED), ("ignore", KILLED)])
def test_process_group_with_grandchildren_all_gone(trees: Trees, mode: str, expected: str) -> None:
    tree, root = trees.start(mode, fanout=2, depth=2)
    members = tree.wait_for("ready", 7)
    report = stop_tree(root, grace_s=0.5, kill_wait_s=10.0, protected=guard)
    assert {p.ident for p in report.processes} == set(members)
    assert {p.outcome for p in report.processes} == {expected}
    assert report.pgid == root.pid
    if mode == "ignore":  # otherwise the group may be empty before its turn comes
        assert report.group_signals[:2] == ("SIGTERM", "SIGCONT")
    assert not any(same_process(i) for i in members)
    assert all(p.signals[0] == "SIGTERM" for p in report.processes)  # each one signalled on its own as well


@pytest.mark.slow
def test_group_holding_an_outsider_is_never_signalled_as_a_whole(trees: Trees) -> None:
    tree, root = trees.start("orphan")
    (orphan,) = tree.wait_for("orphan", 1)
    stat = read_proc_stat(orphan.pid)
    assert stat is not None and stat.pgrp == root.pid  # same group, but no longer below the root
    report = stop_tree(root, grace_s=5.0, protected=guard)
    assert [p.outcome for p in report.processes] == [EXITED]
    assert report.group_signals == ()
    assert same_process(orphan)


def test_reused_pid_is_left_alone(trees: Trees) -> None:
    _tree, root = trees.start()
    stale = Ident(root.pid, root.create_time + 100.0)
    report = stop_tree(stale, grace_s=0.1, kill_wait_s=0.1, protected=guard)
    assert [(p.outcome, p.signals) for p in report.processes] == [(REUSED, ())]
    assert same_process(root)


def test_root_already_gone(trees: Trees) -> None:
    _tree, root = trees.start()
    proc = trees.popens[-1]
    proc.kill()
    proc.wait(timeout=10)
    report = stop_tree(root, grace_s=0.1, protected=guard)
    assert [p.outcome for p in report.processes] == [ALREADY_GONE]


class Recorder:
    """Stands in for every way stop_tree can signal, so a test aimed at pid 1 cannot reach it even if it fails."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, int]] = []
        monkeypatch.setattr(stopper, "send_signal", self.send)
        monkeypatch.setattr(os, "killpg", self.killpg)

    def send(self, ident: Ident, sig: int) -> SignalOutcome:
        self.calls.append((ident.pid, sig))
        return SignalOutcome(SignalStatus.ERROR, "recorded, not sent")

    def killpg(self, pgid: int, sig: int) -> None:
        self.calls.append((-pgid, sig))


@pytest.mark.parametrize(
    ("which", "reason"),
    [("self", "rlwatch itself"), ("parent", "an ancestor of rlwatch"), ("init", "pid 1")],
)
def test_protected_processes_are_refused_untouched(monkeypatch: pytest.MonkeyPatch, which: str, reason: str) -> None:
    pid = {"self": os.getpid(), "parent": os.getppid(), "init": 1}[which]
    ident = ident_of(pid)
    assert ident is not None
    recorder = Recorder(monkeypatch)
    report = stop_tree(ident, grace_s=0.1, kill_wait_s=0.1, protected=guard)
    assert [p.outcome for p in report.processes] == [f"refused: {reason}"]
    assert recorder.calls == []
    assert same_process(ident)


def test_pid_one_is_refused_even_by_a_lax_check(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(monkeypatch)
    report = stop_tree(Ident(1, 0.0), grace_s=0.1, protected=lambda pid: None)
    assert [p.outcome for p in report.processes] == ["refused: pid 1"]
    assert recorder.calls == []


@pytest.mark.slow
def test_protected_member_of_the_tree_is_left_alone(trees: Trees, tmp_path: Path) -> None:
    daemon_exe = tmp_path / "nv-hostengine"
    daemon_exe.symlink_to(sys.executable)
    out = tmp_path / "tree-0"
    extra = [str(daemon_exe), "-S", "-c", TREE, str(out), "daemon", "0", "0"]
    tree, root = trees.start(extra=extra)
    (daemon,) = tree.wait_for("daemon", 1)
    report = stop_tree(root, grace_s=5.0, protected=guard)
    assert outcome_of(report, daemon) == "refused: system daemon nv-hostengine"
    assert outcome_of(report, root) == EXITED
    assert report.group_signals == ()  # the group holds a protected process
    assert not report.ok
    assert same_process(daemon)


def test_decoy_with_the_same_command_line_survives(trees: Trees) -> None:
    _t1, target = trees.start()
    _t2, decoy = trees.start()
    report = stop_tree(target, grace_s=5.0, protected=guard)
    assert [p.ident for p in report.processes] == [target]
    assert outcome_of(report, target) == EXITED
    assert same_process(decoy)


def test_stopped_process_still_dies_by_term_and_cont(trees: Trees) -> None:
    tree, root = trees.start("handler")
    assert send_signal(root, signal.SIGSTOP).sent
    assert wait_until(lambda: (s := read_proc_stat(root.pid)) is not None and s.state == "T")
    report = stop_tree(root, grace_s=30.0, protected=guard)
    assert outcome_of(report, root) == EXITED
    assert report.processes[0].signals[:2] == ("SIGTERM", "SIGCONT")
    assert tree.pids("term") == [root.pid]


def test_unkillable_process_is_reported_not_retried(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree, root = trees.start(new_session=False)  # in this test's group: the group must not be signalled either
    sent: list[int] = []

    def swallowed(ident: Ident, sig: int) -> SignalOutcome:
        sent.append(sig)
        return SignalOutcome(SignalStatus.SENT, via="test")

    monkeypatch.setattr(stopper, "send_signal", swallowed)
    started = time.monotonic()
    report = stop_tree(root, grace_s=0.2, kill_wait_s=0.3, protected=guard)
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 3.0
    assert outcome_of(report, root).startswith("unkillable (state ")
    assert sent == [signal.SIGTERM, signal.SIGCONT, signal.SIGKILL]
    assert report.pgid is None and report.group_signals == ()
    assert same_process(root)


def test_children_forked_after_the_snapshot_are_killed(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    tree, root = trees.start("fork-on-term", new_session=False)
    real_wait = wait_gone
    calls: list[float] = []

    def wait_then_see_fork(
        idents: list[Ident], timeout: float, clock: Callable[[], float]
    ) -> tuple[list[Ident], list[Ident]]:
        if not calls:
            assert wait_until(lambda: len(tree.pids("late")) == 1)  # the root forked on SIGTERM
            tree.wait_for("late", 1)
        calls.append(timeout)
        return real_wait(idents, timeout, clock)

    monkeypatch.setattr(stopper, "wait_gone", wait_then_see_fork)
    report = stop_tree(root, grace_s=0.2, kill_wait_s=10.0, protected=guard)
    late = [p for p in report.processes if p.found_late]
    assert [p.ident.pid for p in late] == tree.pids("late")
    assert [(p.outcome, p.signals) for p in late] == [(KILLED, ("SIGKILL",))]
    assert outcome_of(report, root) == KILLED
    assert not any(same_process(p.ident) for p in report.processes)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another user")
def test_denied_signals_are_reported_unkillable(started_as_other: tuple[subprocess.Popen[bytes], Ident]) -> None:
    proc, ident = started_as_other
    os.seteuid(65534)  # the real uid stays 0, so this can be undone; effective capabilities are dropped
    try:
        report = stop_tree(ident, grace_s=0.1, kill_wait_s=0.1, protected=lambda pid: None)
    finally:
        os.seteuid(0)
    assert outcome_of(report, ident) == f"unkillable (denied: not permitted to signal pid {ident.pid})"
    assert report.processes[0].signals == ()
    assert not report.ok
    assert proc.poll() is None


@pytest.fixture
def started_as_other() -> Iterator[tuple[subprocess.Popen[bytes], Ident]]:
    proc = subprocess.Popen(["sleep", "300"], user=12345, group=12345)
    try:
        assert wait_until(lambda: (s := read_proc_stat(proc.pid)) is not None and s.comm == "sleep")
        ident = ident_of(proc.pid)
        assert ident is not None
        yield proc, ident
    finally:
        proc.kill()
        proc.wait(timeout=10)
