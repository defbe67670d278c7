"""The actions API against real processes this test starts, holding a stand-in GPU device file.

Each decoy of the issue has its own test: whatever kill-zombies or restart-workers is asked to do, a process with
the same command line outside the run, a process in another process group, a pid reused between plan and execute,
a process named like a system daemon, and the run's own processes all survive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlwatch.actions import stopper
from rlwatch.actions.api import Actions
from rlwatch.actions.identity import Ident, same_process
from rlwatch.actions.plan import KILL_ZOMBIES, RESTART_WORKERS, RESUME, Prepared, stdout_file
from rlwatch.actions.signals import SignalOutcome, SignalStatus
from rlwatch.config import ActionsConfig, Config, GpuConfig, ProcessRule
from rlwatch.engine import Engine
from tests.simhost import wait_until

# Holds the device only when asked through the environment, so a decoy can share the stray's exact command line.
HOLDER = """
import os, signal, sys, time
if os.environ.get("HOLD", "1") == "1":
    f = open(sys.argv[1], "rb")
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("COMM"):
    import ctypes
    ctypes.CDLL(None).prctl(15, os.environ["COMM"].encode(), 0, 0, 0)  # PR_SET_NAME
print("ready", flush=True)
time.sleep(300)
"""
# A holder with a child in its own process group; the child holds the device too.
HOLDER_WITH_CHILD = """
import os, signal, subprocess, sys, time
f = open(sys.argv[1], "rb")
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
kid = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]], stdout=subprocess.PIPE, text=True)
kid.stdout.readline()
print(kid.pid, flush=True)
time.sleep(300)
"""
# A worker of a pool: leaks 48 MB at start while the marker file exists, so a fresh start is measurably smaller.
WORKER = """
import os, sys, time
hoard = bytearray(48 * 1024 * 1024) if os.path.exists(sys.argv[1]) else bytearray()
for at in range(0, len(hoard), 4096):
    hoard[at] = 1  # resident, not just reserved
print("ready", flush=True)
time.sleep(300)
"""


class Procs:
    """Starts test processes and kills exactly those (and any process the actions started for the test)."""

    def __init__(self) -> None:
        self.procs: list[tuple[subprocess.Popen[str], bool]] = []
        self.adopted: list[Ident] = []

    def start(
        self,
        code: str,
        *args: str,
        new_session: bool = True,
        executable: str = sys.executable,
        **env: str,
    ) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=new_session,
            env={**os.environ, **env},
        )
        self.procs.append((proc, new_session))
        assert proc.stdout is not None
        return proc, proc.stdout.readline().strip()

    def adopt(self, ident: Ident) -> None:
        self.adopted.append(ident)

    def stop_all(self) -> None:
        for proc, own_group in self.procs:
            if proc.poll() is None or own_group:
                try:
                    if own_group:
                        os.killpg(proc.pid, signal.SIGKILL)
                    else:
                        proc.kill()
                except (ProcessLookupError, PermissionError):
                    pass
            proc.wait(timeout=10)
        for ident in self.adopted:
            if same_process(ident):
                os.kill(ident.pid, signal.SIGKILL)


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.stop_all()


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    devdir = tmp_path / "dev"
    devdir.mkdir()
    for name in ("nvidia0", "nvidiactl"):
        (devdir / name).write_bytes(b"\0" * 4096)
    return devdir


class Host:
    """An engine and its actions over the test's run directory, configured like a real one."""

    def __init__(self, tmp_path: Path, dev: Path) -> None:
        self.dir = tmp_path
        self.dev = dev
        self.run_pidfile = tmp_path / "run.pid"
        self.audit = tmp_path / "audit.jsonl"

    def config(self, *, rules: list[ProcessRule] | None = None, **actions: Any) -> Config:
        run_rule = ProcessRule(role="trainer", pidfile=str(self.run_pidfile))
        return Config(
            interval_s=0.2,
            gpu=GpuConfig(backend="none", device_glob=f"{self.dev}/nvidia*"),
            processes=[run_rule, *(rules or [])],
            actions=ActionsConfig(
                **{"grace_s": 1.0, "audit_log": str(self.audit), "verify_timeout_s": 10.0, **actions}
            ),
        )

    def actions(self, *, rules: list[ProcessRule] | None = None, **actions: Any) -> Actions:
        engine = Engine(self.config(rules=rules, **actions), self.dir)
        return Actions(engine)

    def mark_run(self, pid: int) -> None:
        self.run_pidfile.write_text(f"{pid}\n")

    def audit_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.audit.read_text().splitlines()]


@pytest.fixture
def host(tmp_path: Path, dev: Path) -> Host:
    return Host(tmp_path, dev)


def target_pids(prepared: Prepared) -> set[int | None]:
    return {t.pid for t in prepared.plan.targets}


def alive(proc: subprocess.Popen[str]) -> bool:
    return proc.poll() is None


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init, which may be slow to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ------------------------------------------------------------------------------------------------- the decoys
def test_same_command_line_outside_the_run_survives(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    run, _ = procs.start(HOLDER, device)
    host.mark_run(run.pid)
    stray, _ = procs.start(HOLDER, device)
    decoy, _ = procs.start(HOLDER, device, HOLD="0")  # same argv as the stray, holds nothing
    assert psutil.Process(decoy.pid).cmdline() == psutil.Process(stray.pid).cmdline()
    actions = host.actions()
    prepared = actions.prepare(KILL_ZOMBIES)
    assert target_pids(prepared) == {stray.pid}
    reason = prepared.plan.targets[0].reason
    assert reason is not None and reason.startswith("stray: ") and device in reason
    result = actions.execute(prepared)
    assert result.ok, result
    assert wait_until(lambda: not alive(stray), 5)
    assert alive(decoy) and alive(run)


def test_process_in_another_process_group_survives(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    # The stray leads its own group and its child is in it; both ignore SIGTERM, so the group is still alive
    # when it is signalled as a whole.
    stray, kid = procs.start(HOLDER_WITH_CHILD, device, HOLDER, IGNORE_TERM="1")
    other, _ = procs.start(HOLDER, device, HOLD="0", IGNORE_TERM="1")  # another group, same program
    assert os.getpgid(int(kid)) == stray.pid != os.getpgid(other.pid)
    actions = host.actions(grace_s=0.3)
    prepared = actions.prepare(KILL_ZOMBIES)
    assert stray.pid in target_pids(prepared)
    result = actions.execute(prepared)
    assert result.ok, result
    assert wait_until(lambda: not alive(stray) and not running(int(kid)), 5)
    assert alive(other)
    signal_lines = [r for r in host.audit_lines() if r["event"] == "signal" and r["pid"] == stray.pid]
    assert signal_lines and signal_lines[0]["group_signals"][:2] == ["SIGTERM", "SIGCONT"]


def test_group_shared_with_outsiders_is_never_signalled_as_a_whole(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    stray, _ = procs.start(HOLDER, device, new_session=False)  # in this test's process group
    neighbour, _ = procs.start(HOLDER, device, new_session=False, HOLD="0")
    assert os.getpgid(stray.pid) == os.getpgid(neighbour.pid) == os.getpgid(0)
    actions = host.actions()
    result = actions.execute(actions.prepare(KILL_ZOMBIES))
    assert result.ok, result
    assert wait_until(lambda: not alive(stray), 5)
    assert alive(neighbour)
    (line,) = [r for r in host.audit_lines() if r["event"] == "signal"]
    assert line["group_signals"] == [] and line["signals"][:1] == ["SIGTERM"]


def test_pid_reused_between_plan_and_execute_is_left_alone(procs: Procs, host: Host) -> None:
    stray, _ = procs.start(HOLDER, str(host.dev / "nvidia0"))
    actions = host.actions()
    prepared = actions.prepare(KILL_ZOMBIES)
    (stop,) = prepared.stops
    # The planned process "exited" and its pid now names another one: emulated by a planned start time that no
    # longer matches whatever holds the pid.
    moved = replace(prepared, stops=(replace(stop, create_time=stop.create_time - 30.0),))
    result = actions.execute(moved)
    assert alive(stray)
    assert not result.ok
    assert any("started at another time: left alone" in d for d in result.details), result.details
    assert "plan again" in result.message
    (line,) = [r for r in host.audit_lines() if r["event"] == "signal"]
    assert line["outcome"] == stopper.REUSED and line["signals"] == []


@pytest.mark.parametrize("how", ["executable", "comm"])
def test_process_named_like_an_excluded_daemon_is_not_a_target(
    procs: Procs, host: Host, tmp_path: Path, how: str
) -> None:
    device = str(host.dev / "nvidia0")
    if how == "executable":
        exe = tmp_path / "nv-hostengine"
        exe.symlink_to(sys.executable)
        daemon, _ = procs.start(HOLDER, device, executable=str(exe))
    else:
        daemon, _ = procs.start(HOLDER, device, COMM="nv-hostengine")
        assert psutil.Process(daemon.pid).name() == "nv-hostengine"
    stray, _ = procs.start(HOLDER, device)
    actions = host.actions()
    prepared = actions.prepare(KILL_ZOMBIES)
    assert target_pids(prepared) == {stray.pid}
    result = actions.execute(prepared)
    assert result.ok, result
    assert wait_until(lambda: not alive(stray), 5)
    assert alive(daemon)
    alone = actions.prepare(KILL_ZOMBIES)  # only the daemon holds the device now
    assert alone.plan.refused is not None
    assert f"pid {daemon.pid}: system daemon" in alone.plan.refused


def test_run_processes_holding_the_device_are_not_targets(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    run, kid = procs.start(HOLDER_WITH_CHILD, device, HOLDER)
    host.mark_run(run.pid)
    stray, _ = procs.start(HOLDER, device)
    actions = host.actions()
    prepared = actions.prepare(KILL_ZOMBIES)
    assert target_pids(prepared) == {stray.pid}
    result = actions.execute(prepared)
    assert result.ok, result
    assert alive(run) and running(int(kid))
    assert not alive(stray)
    assert actions.prepare(KILL_ZOMBIES).plan.refused == "no stray GPU holders"


def test_ancestor_of_the_run_is_not_a_target(procs: Procs, host: Host) -> None:
    parent, kid = procs.start(HOLDER_WITH_CHILD, str(host.dev / "nvidia0"), HOLDER)
    host.mark_run(int(kid))  # the run is the child; the parent holding the device is above it
    prepared = host.actions().prepare(KILL_ZOMBIES)
    assert prepared.plan.refused is not None
    assert f"pid {parent.pid}: an ancestor of the live run" in prepared.plan.refused
    assert alive(parent)


# ---------------------------------------------------------------------------------------- stopping the hard way
def test_stray_ignoring_sigterm_is_killed_after_the_grace_period(procs: Procs, host: Host) -> None:
    stray, _ = procs.start(HOLDER, str(host.dev / "nvidia0"), IGNORE_TERM="1")
    actions = host.actions(grace_s=0.3)
    started = time.monotonic()
    result = actions.execute(actions.prepare(KILL_ZOMBIES))
    assert result.ok, result
    assert time.monotonic() - started >= 0.3
    assert not alive(stray) and stray.returncode == -signal.SIGKILL
    (line,) = [r for r in host.audit_lines() if r["event"] == "signal"]
    assert line["signals"][:2] == ["SIGTERM", "SIGCONT"] and "SIGKILL" in [*line["signals"], *line["group_signals"]]
    assert line["outcome"] == stopper.KILLED


@pytest.mark.slow
def test_unkillable_stray_is_reported_not_retried(procs: Procs, host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    stray, _ = procs.start(HOLDER, str(host.dev / "nvidia0"), new_session=False)  # no group signal either
    sent: list[int] = []

    def swallowed(ident: Ident, sig: int) -> SignalOutcome:
        sent.append(sig)
        return SignalOutcome(SignalStatus.SENT, via="test")

    monkeypatch.setattr(stopper, "send_signal", swallowed)
    actions = host.actions(grace_s=0.2)
    started = time.monotonic()
    result = actions.execute(actions.prepare(KILL_ZOMBIES))
    assert time.monotonic() - started < 15.0 + 0.2 + 5.0 + 3.0
    assert not result.ok
    assert "unkillable" in result.message
    assert sent == [signal.SIGTERM, signal.SIGCONT, signal.SIGKILL]
    assert alive(stray)


# ------------------------------------------------------------------------------------------------- the API
def worker_rules(tmp_path: Path, token: str, marker: Path) -> list[ProcessRule]:
    return [
        ProcessRule(
            role="worker",
            cmdline_regex=f"{token} {i}$",
            command=[sys.executable, "-c", WORKER, str(marker), token, str(i)],
            cwd=str(tmp_path),
            log=f"worker-{i}.log",
        )
        for i in range(2)
    ]


def test_restart_workers_restarts_only_the_named_ones_with_fresh_memory(
    procs: Procs, host: Host, tmp_path: Path
) -> None:
    token = f"pool-{os.getpid()}-{time.monotonic_ns()}"
    marker = tmp_path / "leak"
    marker.touch()
    old = [procs.start(WORKER, str(marker), token, str(i))[0] for i in range(2)]
    actions = host.actions(rules=worker_rules(tmp_path, token, marker))
    assert "no worker named worker-9" in (actions.prepare(RESTART_WORKERS, only=["worker-9"]).plan.refused or "")
    prepared = actions.prepare(RESTART_WORKERS, only=["worker-1"])
    assert target_pids(prepared) == {old[1].pid}
    assert [t.role for t in prepared.plan.start] == ["worker-1"]
    marker.unlink()  # the restarted worker starts small: its memory is fresh
    result = actions.execute(prepared)
    spawned = [r for r in host.audit_lines() if r["event"] == "spawn"]
    for r in spawned:
        procs.adopt(Ident(r["pid"], r["create_time"]))
    assert result.ok, result
    assert "fresh memory" in result.message and "(was " in result.message
    assert alive(old[0]) and not alive(old[1])
    (line,) = spawned
    assert line["target"] == "worker-1" and same_process(Ident(line["pid"], line["create_time"]))
    assert (tmp_path / "worker-1.log").exists()


def test_resume_is_refused_while_the_trainer_lives(procs: Procs, host: Host, tmp_path: Path) -> None:
    trainer, _ = procs.start(HOLDER, str(host.dev / "nvidia0"))
    host.mark_run(trainer.pid)
    actions = host.actions(resume_command=[sys.executable, "-c", "pass"])
    refused = actions.prepare(RESUME)
    assert refused.plan.refused is not None
    assert f"trainer is alive (pid {trainer.pid})" in refused.plan.refused and "--force" in refused.plan.refused
    forced = actions.prepare(RESUME, force=True)
    assert forced.plan.runnable and target_pids(forced) == {trainer.pid}
    assert forced.plan.start[0].cmdline == (sys.executable, "-c", "pass")
    assert alive(trainer)


def test_readonly_refuses_everything(host: Host) -> None:
    actions = host.actions(readonly=True)
    for name in ("kill-zombies", "restart-workers", "resume", "restart-server"):
        assert actions.prepare(name).plan.refused == "read-only mode: actions are disabled"
    assert "unknown action" in (host.actions().prepare("reboot").plan.refused or "")


def test_a_plan_from_elsewhere_is_planned_again_and_must_match(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    stray, _ = procs.start(HOLDER, device)
    plan = host.actions().plan(KILL_ZOMBIES)  # made by another front end
    other = host.actions()
    result = other.execute(plan)
    assert result.ok, result
    assert not alive(stray)
    second, _ = procs.start(HOLDER, device)
    stale = host.actions().plan(KILL_ZOMBIES)
    assert target_pids(Prepared(stale)) == {second.pid}
    third, _ = procs.start(HOLDER, device)  # appeared after that plan was shown
    again = other.execute(stale)
    assert not again.ok
    assert again.message == "kill-zombies: refused: the host changed since this plan was made; plan again"
    assert alive(second) and alive(third)


def test_actions_on_a_running_engine(procs: Procs, host: Host) -> None:
    stray, _ = procs.start(HOLDER, str(host.dev / "nvidia0"))
    actions = host.actions()
    engine = actions.engine
    engine.start()
    try:
        wait_until(lambda: any(h.pid == stray.pid for h in engine.snapshot().zombies), 10)
        result = actions.execute(actions.plan(KILL_ZOMBIES), progress=lambda _m: None)
    finally:
        engine.stop()
    assert result.ok, result
    assert not alive(stray)
    events = [r["event"] for r in host.audit_lines()]
    assert events[0] == "plan" and events[-2:] == ["verify", "result"]
    result_line = host.audit_lines()[-1]
    assert result_line["ok"] is True and result_line["action"] == KILL_ZOMBIES


def test_a_recorded_process_keeps_appending_to_the_file_it_writes(procs: Procs, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    with open(log, "ab") as out:
        to_file = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(300)"], stdout=out, start_new_session=True
        )
    try:
        assert stdout_file(to_file.pid) == str(log)
    finally:
        to_file.kill()
        to_file.wait(timeout=10)
    piped, _ = procs.start(HOLDER, str(tmp_path / "nothing"), HOLD="0")  # writes to a pipe: no file to keep
    assert stdout_file(piped.pid) is None
    assert stdout_file(2**22 + 1) is None
