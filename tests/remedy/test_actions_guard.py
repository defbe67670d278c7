"""Who rlwatch must never touch: the rules on made-up processes, then on real ones this test can see or start."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rlwatch.remedy.actions.guard import (
    ProcFacts,
    ancestors_of,
    daemon_name,
    daemon_names,
    judge,
    protected_reason,
    read_facts,
)
from rlwatch.remedy.actions.identity import read_proc_stat
from tests.simhost import wait_until

NAMES = ["nvidia-persistenced", "nv-hostengine", "dcgm-exporter", "nvitop-exporter"]


def facts(
    pid: int = 4242,
    names: tuple[str, ...] = ("python3",),
    uid: int | None = 1000,
    user: str = "alice",
    kt: bool = False,
) -> ProcFacts:
    return ProcFacts(pid=pid, names=names, uid=uid, user=user, kernel_thread=kt)


def rule(f: ProcFacts, *, owners: frozenset[int] = frozenset({1000})) -> str | None:
    return judge(f, self_pid=100, ancestors=(50, 10, 1), owners=owners, protected_names=NAMES)


def owners(*, root: bool, allow: bool, other_users: list[str | int], trusted: bool = True) -> frozenset[int]:
    """The users whose processes may be acted on, as the engine gives them (run_owners), for rlwatch as root or not."""
    me = 0 if root else 1000
    listed = {int(u) for u in other_users} if root and allow and trusted else set()
    return frozenset({me, *listed})


def test_rules_on_made_up_processes() -> None:
    assert rule(facts()) is None
    assert rule(facts(pid=0)) == "pid 0/negative"
    assert rule(facts(pid=-7)) == "pid 0/negative"
    assert rule(facts(pid=1)) == "pid 1"
    assert rule(facts(pid=100)) == "rlwatch itself"
    assert rule(facts(pid=50)) == "an ancestor of rlwatch"
    assert rule(facts(kt=True, names=("kworker/0:1",))) == "kernel thread"
    assert rule(facts(names=("python3", "nv-hostengine"))) == "system daemon nv-hostengine"
    assert rule(facts(uid=None)) == "owner unknown"


def test_other_users_need_root_the_setting_and_their_name() -> None:
    bob = facts(uid=1001, user="bob")
    assert rule(bob) == "owned by bob, not by you"
    assert rule(bob, owners=owners(root=False, allow=True, other_users=[1001])) == "owned by bob, not by you"
    assert rule(bob, owners=owners(root=True, allow=False, other_users=[1001])) == "owned by bob, not by you"
    assert rule(bob, owners=owners(root=True, allow=True, other_users=[1001])) is None
    assert rule(facts(uid=0, user="root"), owners=owners(root=True, allow=False, other_users=[])) is None
    # allow_other_users opens the users other_users names, nobody else (the probe's finding N1)
    assert rule(bob, owners=owners(root=True, allow=True, other_users=[65534])) == (
        "owned by bob, not by you nor by a user actions.other_users names"
    )
    assert rule(bob, owners=owners(root=True, allow=True, other_users=[])) == "owned by bob, not by you"


def test_daemons_are_known_by_every_name_they_go_by() -> None:
    assert daemon_names("/usr/bin/nvidia-persistenced", "nvidia-persiste", ["nvidia-persistenced", "--verbose"]) == (
        "nvidia-persistenced",
        "nvidia-persiste",
    )
    script = daemon_names("/usr/bin/python3.11", "python3", ["/usr/bin/python3", "-u", "/opt/bin/nvitop-exporter"])
    assert "nvitop-exporter" in script
    assert daemon_name(("nvidia-persiste",), NAMES) == "nvidia-persistenced"  # the kernel's 15-character comm
    assert daemon_name(("nvidia-persist",), NAMES) is None
    assert daemon_name(("dcgm-exporter-2",), NAMES) is None
    assert daemon_name(("python3",), NAMES) is None
    assert daemon_names("/usr/bin/x (deleted)", None, []) == ("x",)


def test_real_special_processes() -> None:
    reason = functools.partial(protected_reason, protected_names=NAMES, owners={os.geteuid()})
    assert reason(os.getpid()) == "rlwatch itself"
    assert reason(os.getppid()) == "an ancestor of rlwatch"
    assert reason(1) == "pid 1"
    assert reason(0) == "pid 0/negative"
    assert reason(-3) == "pid 0/negative"
    assert os.getppid() in ancestors_of(os.getpid())


def test_a_kernel_thread_is_protected() -> None:
    kthreads = [p for p in psutil.pids() if (s := read_proc_stat(p)) is not None and s.kernel_thread]
    if not kthreads:
        pytest.skip("no kernel thread visible in this PID namespace")
    assert protected_reason(kthreads[0], protected_names=NAMES, owners={os.geteuid()}) == "kernel thread"


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


IDLE = "import signal, sys; open(sys.argv[1], 'w').close(); signal.pause()"


def test_own_child_may_be_signalled_and_a_gone_one_is_not_judged(
    started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-S", "-c", IDLE, str(ready)])
    started.append(proc)
    assert wait_until(ready.exists)
    assert protected_reason(proc.pid, protected_names=NAMES, owners={os.geteuid()}) is None
    assert protected_reason(proc.pid, protected_names=NAMES, owners={os.geteuid()}, self_pid=proc.pid) == (
        "rlwatch itself"
    )
    proc.kill()
    proc.wait(timeout=10)
    assert protected_reason(proc.pid, protected_names=NAMES, owners={os.geteuid()}) == (
        f"cannot inspect pid {proc.pid} (gone or unreadable)"
    )


def test_daemon_by_name_is_protected(started: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    exe = tmp_path / "nv-hostengine"
    exe.symlink_to(sys.executable)
    ready = tmp_path / "ready"
    proc = subprocess.Popen([str(exe), "-S", "-c", IDLE, str(ready)])
    started.append(proc)
    assert wait_until(ready.exists)
    found = read_facts(proc.pid)
    assert found is not None and "nv-hostengine" in found.names
    reason = protected_reason(proc.pid, protected_names=NAMES, owners={os.geteuid(), 65534})
    assert reason == "system daemon nv-hostengine"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another user")
def test_another_users_process(started: list[subprocess.Popen[bytes]]) -> None:
    proc = subprocess.Popen(["sleep", "300"], user=65534, group=65534)
    started.append(proc)
    assert wait_until(lambda: psutil.Process(proc.pid).uids().real == 65534)
    user = psutil.Process(proc.pid).username()
    assert protected_reason(proc.pid, protected_names=NAMES, owners={os.geteuid()}) == f"owned by {user}, not by you"
    assert protected_reason(proc.pid, protected_names=NAMES, owners={0, 65534}) is None
    assert protected_reason(proc.pid, protected_names=NAMES, owners={0, 1}) == (
        f"owned by {user}, not by you nor by a user actions.other_users names"
    )
