"""Another local user (``nobody``) against root's actions: the probe's findings N1 and N8, each reproduced with real
processes of ``nobody`` and refused.

N1. ``actions.allow_other_users`` means the users ``actions.other_users`` names, nothing wider. With
    ``other_users`` naming someone else, ``nobody``'s orphaned GPU holder working in root's run directory is left
    alone by kill-zombies (it was "a stray … never touched" the directory it works in), and ``nobody``'s process that
    matches the server's rule is neither stopped by restart-server nor where the new server's output goes (it held
    a root file open read-only as its stdout, and root appended the server's output to it).
N8. A process of another user that matches the server's rule is not the run's server: it softens no outage, blocks
    no restart-server, and is shown with its owner as not the run's.

Processes are started as ``nobody`` (``Popen(user=…)``) in run directories under ``/tmp`` (0755): pytest's own
temporary tree is private to root, and ``nobody`` could not work in it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rlwatch.common.clock import SystemClock
from rlwatch.config.models import ActionsConfig, Config, GpuConfig, ProcessRule, ServerConfig, TrainingConfig
from rlwatch.engine.engine import Engine
from rlwatch.remedy.actions.api import Actions
from rlwatch.remedy.actions.plan import KILL_ZOMBIES, RESTART_SERVER
from tests.simhost import wait_until, younger_from_now_on
from tests.unprivileged import shared_dir

try:
    NOBODY, NOGROUP = pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid
except KeyError:  # pragma: no cover - every Debian has it
    NOBODY = NOGROUP = -1

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or NOBODY < 0, reason="needs root and a second user (nobody)"),
]

SOMEONE_ELSE = 1  # the uid other_users names in these tests: not nobody's (Debian's daemon)

# The live run: writes its log in the run directory (its working directory) and holds the stand-in GPU.
RUN = """
import sys, time
log = open('train.log', 'a')
f = open(sys.argv[1], 'rb')
print('ready', flush=True)
time.sleep(300)
"""


@pytest.fixture
def run() -> Iterator[Path]:
    """Root's run directory, 0755 like most, where ``nobody`` can enter but not write."""
    d = shared_dir("rlwatch-other-actions-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Process groups this test started (its own, and nobody's orphaned leftover, whose group outlives its starter)."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _config(run: Path, **parts: object) -> Config:
    return Config(
        gpu=GpuConfig(backend="none", device_glob=f"{run}/dev/nvidia*"),
        training=TrainingConfig(logs=["train.log"]),
        **parts,  # type: ignore[arg-type]
    )


def _actions(run: Path, **kw: object) -> ActionsConfig:
    return ActionsConfig(audit_log=str(run / "audit.jsonl"), grace_s=1.0, **kw)  # type: ignore[arg-type]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------------ N1: kill-zombies
def _nobodys_leftover(run: Path, device: Path, started: list[int]) -> int:
    """``nobody``'s GPU holder, working in root's run directory, orphaned: the shell that started it exits, so it is
    re-parented to init with its session gone, as the probe's ``holder.py`` was."""
    starter = subprocess.Popen(
        ["/bin/sh", "-c", f"exec 3<'{device}'; /bin/sleep 300 >/dev/null 2>&1 & echo $!"],
        cwd=run, user=NOBODY, group=NOGROUP, extra_groups=[], start_new_session=True,
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    started.append(starter.pid)
    assert starter.stdout is not None
    pid = int(starter.stdout.readline())
    starter.wait(timeout=10)
    wait_until(lambda: psutil.Process(pid).ppid() != starter.pid, 5)
    assert psutil.Process(pid).uids().real == NOBODY
    younger_from_now_on(pid)  # the live run starts after it: it is older, as a leftover is
    return pid


def _live_run(run: Path, device: Path, started: list[int]) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN, str(device)],
        cwd=run, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    started.append(proc.pid)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc.pid


@pytest.fixture
def holders(run: Path, started: list[int]) -> tuple[int, int]:
    """(nobody's orphaned leftover, root's live run), both holding the stand-in device."""
    device = run / "dev" / "nvidia0"
    device.parent.mkdir()
    device.write_bytes(b"\0" * 4096)
    os.chmod(device.parent, 0o755)
    os.chmod(device, 0o644)
    theirs = _nobodys_leftover(run, device, started)
    return theirs, _live_run(run, device, started)


def _engine(cfg: Config, run: Path) -> Engine:
    engine = Engine(cfg, run, clock=SystemClock())
    engine.sample(fresh_holders=True)
    engine.sample(fresh_holders=True)  # the second round sees the live run it found in the first
    return engine


def test_kill_zombies_leaves_a_user_other_users_does_not_name_alone(run: Path, holders: tuple[int, int]) -> None:
    theirs, live = holders
    cfg = _config(run, actions=_actions(run, allow_other_users=True, other_users=[SOMEONE_ELSE]))
    engine = _engine(cfg, run)
    try:
        holder = next(h for h in engine.build().holders if h.pid == theirs)
        assert holder.protected == "another user's process (nobody)" and holder.reason is None
        plan = Actions(engine).prepare(KILL_ZOMBIES).plan
        assert theirs not in {t.pid for t in plan.targets}, plan
        assert plan.refused is not None and f"pid {theirs}: another user's process (nobody)" in plan.refused
        named = Actions(engine).prepare(KILL_ZOMBIES, pids=[theirs]).plan  # not even when named
        assert named.refused == (
            f"pid {theirs} must not be stopped: owned by nobody, not by you nor by a user actions.other_users names"
        )
        assert psutil.Process(theirs).is_running() and psutil.Process(live).is_running()
    finally:
        engine.stop()


def test_kill_zombies_judges_a_listed_users_holder_on_the_same_evidence_and_says_whom_it_may_touch(
    run: Path, holders: tuple[int, int]
) -> None:
    """With ``nobody`` named, its holder is judged as root's own would be: it works in the run directory, so it is a
    leftover of an earlier attempt that works there, never one that "never touched" it; and the plan does not say
    other users are never touched while it stops one."""
    theirs, _ = holders
    cfg = _config(run, actions=_actions(run, allow_other_users=True, other_users=["nobody"]))
    engine = _engine(cfg, run)
    try:
        prepared = Actions(engine).prepare(KILL_ZOMBIES)
        plan = prepared.plan
        assert plan.refused is None and [t.pid for t in plan.targets] == [theirs], plan
        why = prepared.stops[0].reason or ""
        assert f"never touched {run}" not in why and f"works in {run}" in why, why
        assert not any(step.endswith("other users") or "other users," in step for step in plan.steps), plan.steps
        assert any("other users than nobody (actions.other_users)" in step for step in plan.steps), plan.steps
    finally:
        engine.stop()


# ---------------------------------------------------------------------------------- N1 and N8: the server
@pytest.fixture
def impostor(run: Path, started: list[int]) -> tuple[int, Path, str]:
    """``nobody``'s ``fake_vllm_server`` (``sleep`` under that name) in its own directory, its stdout a root file
    of the run directory opened read-only; (its pid, that file, the marker its command line carries)."""
    victim = run / "victim_public.txt"
    victim.write_text("ROOT-OWNED PUBLIC FILE, original\n")
    os.chmod(victim, 0o644)
    marker = f"fake_vllm_server-{os.getpid()}"
    with open(victim, "rb") as read_only:
        proc = subprocess.Popen(
            [marker, "300"], executable="/bin/sleep", cwd="/tmp", user=NOBODY, group=NOGROUP, extra_groups=[],
            env={"PATH": "/usr/bin:/bin"}, start_new_session=True, stdin=subprocess.DEVNULL, stdout=read_only,
        )  # fmt: skip
    started.append(proc.pid)
    wait_until(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] == marker.encode(), 5)
    return proc.pid, victim, marker


def _server_config(run: Path, marker: str, actions: ActionsConfig) -> Config:
    script = run / "server.sh"
    script.write_text("#!/bin/sh\necho ROOT SERVER OUTPUT LINE\nexec sleep 1\n")
    os.chmod(script, 0o755)
    return _config(
        run,
        server=ServerConfig(
            kind="vllm", url=f"http://127.0.0.1:{_free_port()}", health_path="/", command=[str(script)],
            start_timeout_s=10,
        ),
        processes=[ProcessRule(role="server", cmdline_regex=marker)],
        actions=actions,
    )  # fmt: skip


def test_restart_server_neither_stops_an_unlisted_users_server_nor_writes_where_it_points(
    run: Path, impostor: tuple[int, Path, str]
) -> None:
    pid, victim, marker = impostor
    cfg = _server_config(run, marker, _actions(run, allow_other_users=True, other_users=[SOMEONE_ELSE]))
    engine = _engine(cfg, run)
    try:
        engine.probe_server()
        prepared = Actions(engine).prepare(RESTART_SERVER)
        assert prepared.plan.refused is None and prepared.launches, prepared.plan  # root's server is started…
        assert pid not in {t.pid for t in prepared.plan.targets}, prepared.plan  # …and theirs is never stopped
        assert all(Path(x.log or "") != victim for x in prepared.launches), prepared.launches
        assert str(victim) not in " ".join(t.reason or "" for t in prepared.plan.start)
        assert victim.read_text() == "ROOT-OWNED PUBLIC FILE, original\n"
    finally:
        engine.stop()


def test_another_users_server_process_is_not_the_runs_server(run: Path, impostor: tuple[int, Path, str]) -> None:
    pid, _, marker = impostor
    engine = _engine(_server_config(run, marker, _actions(run)), run)
    try:
        engine.probe_server()
        snap = engine.build()
        assert pid not in {p.pid for p in snap.processes}
        assert snap.server is not None and snap.server.up is False and snap.server.process_alive is False
        said = " ".join(f.message for f in snap.findings)
        assert f"process {pid}" not in said and "one miss is not yet a failure" not in said, said
        assert "not answering yet" not in said, said
        (shown,) = [s for s in snap.sources if s.name == "other users"]
        assert shown.error == f"pid {pid} matches the server rule but runs as nobody: not the run's server"
        plan = Actions(engine).prepare(RESTART_SERVER).plan
        assert plan.refused is None, plan.refused  # never a reason to refuse: root's own server is started
        assert pid not in {t.pid for t in plan.targets}
    finally:
        engine.stop()
