"""The actions API against real processes this test starts, holding a stand-in GPU device file.

Each decoy of the issue has its own test: whatever kill-zombies or restart-workers is asked to do, a process with
the same command line outside the run, a process in another process group, a pid reused between plan and execute,
a process named like a system daemon, and the run's own processes all survive.

A stray needs positive evidence: the tests make real leftovers (their starter exits, so they are re-parented to
init with the session that started them gone, and they start before the live run). Any other holder outside the
run is *unknown*: kill-zombies leaves it alone unless a person names its pid, which is how the tests of the stop
mechanics (grace period, SIGKILL, pid reuse, unkillable) choose their target.
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

from rlwatch.config.models import ActionsConfig, Config, GpuConfig, ProcessRule, ServerConfig
from rlwatch.engine.engine import Engine
from rlwatch.remedy.actions import stopper
from rlwatch.remedy.actions.api import Actions
from rlwatch.remedy.actions.identity import Ident, same_process
from rlwatch.remedy.actions.plan import KILL_ZOMBIES, RESTART_SERVER, RESTART_WORKERS, RESUME, Prepared, stdout_file
from rlwatch.remedy.actions.signals import SignalOutcome, SignalStatus
from rlwatch.sources.membership import RUN
from tests.simhost import wait_until, younger_from_now_on

# Holds the device only when asked through the environment, so a decoy can share the stray's exact command line.
# ORPHAN: a leftover; it forks and its starter exits, so it is re-parented to init with its session leader gone
# ("group": it then leads a process group of its own). HOLD_WHEN: it opens the device only once the test writes to
# that FIFO. It prints its pid first.
HOLDER = """
import os, signal, sys, time
if os.environ.get("ORPHAN"):
    if os.fork():
        os._exit(0)
    if os.environ["ORPHAN"] == "group":
        os.setpgid(0, 0)
if os.environ.get("HOLD_WHEN"):
    print(os.getpid(), flush=True)
    open(os.environ["HOLD_WHEN"]).read(1)
if os.environ.get("HOLD", "1") == "1":
    f = open(sys.argv[1], "rb")
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("COMM"):
    import ctypes
    ctypes.CDLL(None).prctl(15, os.environ["COMM"].encode(), 0, 0, 0)  # PR_SET_NAME
print(os.getpid(), flush=True)
time.sleep(300)
"""
# A holder with a child in its process group (KID_SESSION: in a session of its own); the child holds the device too.
# It prints its pid and the child's.
HOLDER_WITH_CHILD = """
import os, signal, subprocess, sys, time
if os.environ.get("ORPHAN"):
    if os.fork():
        os._exit(0)
    if os.environ["ORPHAN"] == "group":
        os.setpgid(0, 0)
f = open(sys.argv[1], "rb")
if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
env = {k: v for k, v in os.environ.items() if k != "ORPHAN"}
kid = subprocess.Popen(
    [sys.executable, "-c", sys.argv[2], sys.argv[1]],
    stdout=subprocess.PIPE,
    text=True,
    env=env,
    start_new_session=bool(os.environ.get("KID_SESSION")),
)
kid.stdout.readline()
print(os.getpid(), kid.pid, flush=True)
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
        cwd: Path | None = None,
        **env: str,
    ) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [executable, "-c", code, *args],
            cwd=cwd,
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

    def orphan(self, code: str, *args: str, group: bool = False, **env: str) -> list[int]:
        """Start a leftover: ``code`` forks under ORPHAN and its starter exits, so the pids it prints (its own
        first) are re-parented to init with the session that started them gone — what a leftover of an earlier
        attempt looks like."""
        starter, line = self.start(code, *args, ORPHAN="group" if group else "1", **env)
        pids = [int(word) for word in line.split()]
        wait_until(lambda: starter.poll() is not None, 5)
        wait_until(lambda: psutil.Process(pids[0]).ppid() != starter.pid, 5)
        for pid in pids:
            self.adopt(Ident(pid, psutil.Process(pid).create_time()))
        return pids

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


def start_run(
    procs: Procs, host: Host, *after: int, code: str = HOLDER, args: tuple[str, ...] = (), **env: str
) -> tuple[subprocess.Popen[str], str]:
    """Start the live run's trainer (named by its pidfile), younger than every process in ``after``."""
    for pid in after:
        younger_from_now_on(pid)
    run, line = procs.start(code, *(args or (str(host.dev / "nvidia0"),)), **env)
    host.mark_run(run.pid)
    for pid in after:
        assert psutil.Process(run.pid).create_time() > psutil.Process(pid).create_time()
    return run, line


def holds(pid: int, path: str) -> bool:
    try:
        return any(f.path == path for f in psutil.Process(pid).open_files())
    except psutil.NoSuchProcess:
        return False


# ------------------------------------------------------------------------------------------------- the decoys
def test_same_command_line_outside_the_run_survives(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    (stray,) = procs.orphan(HOLDER, device)  # a leftover of an earlier attempt
    run, _ = start_run(procs, host, stray)
    decoy, _ = procs.start(HOLDER, device, HOLD="0")  # same argv as the stray, holds nothing
    outsider, _ = procs.start(HOLDER, device)  # same argv, holds the device, its session alive: another job, maybe
    argv = psutil.Process(stray).cmdline()
    assert psutil.Process(decoy.pid).cmdline() == argv == psutil.Process(outsider.pid).cmdline()
    actions = host.actions()
    prepared = actions.prepare(KILL_ZOMBIES)
    assert target_pids(prepared) == {stray}
    reason = prepared.plan.targets[0].reason
    assert reason is not None and reason.startswith("stray: orphaned: the session that started it") and device in reason
    assert f"before the live run (pid {run.pid}" in reason
    left = f"pid {outsider.pid}: not sure it is a stray (not part of the live run, but not orphaned"
    assert any(left in step for step in prepared.plan.steps), prepared.plan.steps
    result = actions.execute(prepared)
    assert result.ok, result
    assert wait_until(lambda: not running(stray), 5)
    assert alive(decoy) and alive(run) and alive(outsider)


def test_process_in_another_process_group_survives(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    # The stray leads its own group and its child is in it; both ignore SIGTERM, so the group is still alive
    # when it is signalled as a whole.
    stray, kid = procs.orphan(HOLDER_WITH_CHILD, device, HOLDER, group=True, IGNORE_TERM="1")
    run, _ = start_run(procs, host, stray, kid, HOLD="0")
    other, _ = procs.start(HOLDER, device, HOLD="0", IGNORE_TERM="1")  # another group, same program
    assert os.getpgid(kid) == stray != os.getpgid(other.pid)
    actions = host.actions(grace_s=0.3)
    prepared = actions.prepare(KILL_ZOMBIES)
    assert target_pids(prepared) == {stray, kid}  # the child is a leftover too: "pid <stray> above it" is orphaned
    result = actions.execute(prepared)
    assert result.ok, result
    assert wait_until(lambda: not running(stray) and not running(kid), 5)
    assert alive(other) and alive(run)
    signal_lines = [r for r in host.audit_lines() if r["event"] == "signal" and r["pid"] == stray]
    assert signal_lines and signal_lines[0]["group_signals"][:2] == ["SIGTERM", "SIGCONT"]


def test_group_shared_with_outsiders_is_never_signalled_as_a_whole(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    holder, _ = procs.start(HOLDER, device, new_session=False)  # in this test's process group
    neighbour, _ = procs.start(HOLDER, device, new_session=False, HOLD="0")
    assert os.getpgid(holder.pid) == os.getpgid(neighbour.pid) == os.getpgid(0)
    actions = host.actions()
    # With no live run to set it against, nothing is a stray; the holder is stopped only because it is named.
    unnamed = actions.prepare(KILL_ZOMBIES)
    assert unnamed.plan.refused is not None and "cannot tell what the live run is" in unnamed.plan.refused
    result = actions.execute(actions.prepare(KILL_ZOMBIES, pids=[holder.pid]))
    assert result.ok, result
    assert wait_until(lambda: not alive(holder), 5)
    assert alive(neighbour)
    (line,) = [r for r in host.audit_lines() if r["event"] == "signal"]
    assert line["group_signals"] == [] and line["signals"][:1] == ["SIGTERM"]


def test_pid_reused_between_plan_and_execute_is_left_alone(procs: Procs, host: Host) -> None:
    (stray,) = procs.orphan(HOLDER, str(host.dev / "nvidia0"))
    start_run(procs, host, stray, HOLD="0")
    actions = host.actions()
    prepared = actions.prepare(KILL_ZOMBIES)
    (stop,) = prepared.stops
    assert stop.pid == stray
    # The planned process "exited" and its pid now names another one: emulated by a planned start time that no
    # longer matches whatever holds the pid.
    moved = replace(prepared, stops=(replace(stop, create_time=stop.create_time - 30.0),))
    result = actions.execute(moved)
    assert running(stray)
    assert not result.ok
    assert any("started at another time: left alone" in d for d in result.details), result.details
    assert "plan again" in result.message
    (line,) = [r for r in host.audit_lines() if r["event"] == "signal"]
    assert line["outcome"] == stopper.REUSED and line["signals"] == []


def test_a_named_pid_reused_before_execute_is_left_alone_and_said(procs: Procs, host: Host) -> None:
    """A named holder whose pid names another process by the time the plan runs: nothing is signalled, and the
    result says so instead of "0 gone" passing for success."""
    start_run(procs, host)
    other, _ = procs.start(HOLDER, str(host.dev / "nvidia0"))
    actions = host.actions()
    named = actions.prepare(KILL_ZOMBIES, pids=[other.pid])
    (stop,) = named.stops
    moved = replace(named, stops=(replace(stop, create_time=stop.create_time - 30.0),))
    result = actions.execute(moved)
    assert alive(other)
    assert not result.ok
    assert f"pid {other.pid} ended and its number now belongs to another process" in result.message, result
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
    (stray,) = procs.orphan(HOLDER, device)
    start_run(procs, host, stray, HOLD="0")
    actions = host.actions()
    prepared = actions.prepare(KILL_ZOMBIES)
    assert target_pids(prepared) == {stray}
    result = actions.execute(prepared)
    assert result.ok, result
    assert wait_until(lambda: not running(stray), 5)
    assert alive(daemon)
    alone = actions.prepare(KILL_ZOMBIES)  # only the daemon holds the device now
    assert alone.plan.refused is not None
    assert f"pid {daemon.pid}: system daemon" in alone.plan.refused
    named = actions.prepare(KILL_ZOMBIES, pids=[daemon.pid])  # naming it does not make it a target
    assert (named.plan.refused or "").startswith(f"pid {daemon.pid} must not be stopped: system daemon")
    assert alive(daemon)


def test_run_processes_holding_the_device_are_not_targets(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    (stray,) = procs.orphan(HOLDER, device)
    run, line = start_run(procs, host, stray, code=HOLDER_WITH_CHILD, args=(device, HOLDER))
    kid = int(line.split()[1])
    actions = host.actions()
    prepared = actions.prepare(KILL_ZOMBIES)
    assert target_pids(prepared) == {stray}
    result = actions.execute(prepared)
    assert result.ok, result
    assert alive(run) and running(kid)
    assert not running(stray)
    assert actions.prepare(KILL_ZOMBIES).plan.refused == "no stray GPU holders"


def test_a_run_member_named_with_pid_is_refused(procs: Procs, host: Host) -> None:
    device = str(host.dev / "nvidia0")
    run, line = start_run(procs, host, code=HOLDER_WITH_CHILD, args=(device, HOLDER))
    kid = int(line.split()[1])
    actions = host.actions()
    trainer = actions.prepare(KILL_ZOMBIES, pids=[run.pid])
    assert trainer.plan.refused == (
        f"pid {run.pid} must not be stopped: part of the live run: the trainer (named by its pidfile)"
    )
    child = actions.prepare(KILL_ZOMBIES, pids=[kid])
    assert (child.plan.refused or "").startswith(f"pid {kid} must not be stopped: part of the live run: ")
    assert f"pid {run.pid}, which is the trainer" in (child.plan.refused or "")
    result = actions.execute(child)
    assert not result.ok and "refused" in result.message
    assert alive(run) and running(kid)
    assert not any(r["event"] == "signal" for r in host.audit_lines())


def test_an_unknown_holder_named_with_pid_is_planned_and_stopped(procs: Procs, host: Host) -> None:
    """A holder outside the run whose session is alive may be another job: never chosen on its own, stopped when
    a person names it."""
    device = str(host.dev / "nvidia0")
    run, _ = start_run(procs, host)
    other, _ = procs.start(HOLDER, device)
    actions = host.actions()
    unnamed = actions.prepare(KILL_ZOMBIES)
    assert unnamed.plan.refused is not None and not unnamed.stops
    assert unnamed.plan.refused.startswith("no stray GPU holders; 1 holder rlwatch cannot classify was left alone")
    assert f"pid {other.pid}: not part of the live run, but not orphaned" in unnamed.plan.refused
    assert "rlwatch act kill-zombies --pid PID" in unnamed.plan.refused
    named = actions.prepare(KILL_ZOMBIES, pids=[other.pid])
    assert target_pids(named) == {other.pid}
    (target,) = named.plan.targets
    assert target.named and target.role == "GPU holder named by you"
    assert (target.reason or "").startswith("named by you; rlwatch's view: unknown: not part of the live run")
    result = actions.execute(named)
    assert result.ok, result
    assert wait_until(lambda: not alive(other), 5)
    assert alive(run)
    (line,) = [r for r in host.audit_lines() if r["event"] == "signal"]
    assert line["pid"] == other.pid and line["outcome"] == stopper.EXITED


def test_ancestor_of_the_run_is_not_a_target(procs: Procs, host: Host) -> None:
    # The run is the child, in a session of its own; the parent holding the device is above it: the process that
    # started the run's (its launcher), so the run's too, up to the shell it was started from.
    parent, line = procs.start(HOLDER_WITH_CHILD, str(host.dev / "nvidia0"), HOLDER, KID_SESSION="1")
    kid = int(line.split()[1])
    procs.adopt(Ident(kid, psutil.Process(kid).create_time()))  # not in the parent's group: stopped on its own
    host.mark_run(kid)
    actions = host.actions()
    unnamed = actions.prepare(KILL_ZOMBIES)
    assert unnamed.plan.refused == "no stray GPU holders"
    verdict = actions.engine.live_run().verdict(parent.pid)
    assert verdict.status == RUN and verdict.why.startswith(f"an ancestor of pid {kid}"), verdict
    named = actions.prepare(KILL_ZOMBIES, pids=[parent.pid])
    assert named.plan.refused == (
        f"pid {parent.pid} must not be stopped: part of the live run: an ancestor of pid {kid}, which is the trainer "
        "(named by its pidfile)"
    )
    assert alive(parent)


# ---------------------------------------------------------------------------------------- stopping the hard way
def test_stray_ignoring_sigterm_is_killed_after_the_grace_period(procs: Procs, host: Host) -> None:
    holder, _ = procs.start(HOLDER, str(host.dev / "nvidia0"), IGNORE_TERM="1")
    actions = host.actions(grace_s=0.3)
    started = time.monotonic()
    result = actions.execute(actions.prepare(KILL_ZOMBIES, pids=[holder.pid]))
    assert result.ok, result
    assert time.monotonic() - started >= 0.3
    assert not alive(holder) and holder.returncode == -signal.SIGKILL
    (line,) = [r for r in host.audit_lines() if r["event"] == "signal"]
    assert line["signals"][:2] == ["SIGTERM", "SIGCONT"] and "SIGKILL" in [*line["signals"], *line["group_signals"]]
    assert line["outcome"] == stopper.KILLED


@pytest.mark.slow
def test_unkillable_stray_is_reported_not_retried(procs: Procs, host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    holder, _ = procs.start(HOLDER, str(host.dev / "nvidia0"), new_session=False)  # no group signal either
    sent: list[int] = []

    def swallowed(ident: Ident, sig: int) -> SignalOutcome:
        sent.append(sig)
        return SignalOutcome(SignalStatus.SENT, via="test")

    monkeypatch.setattr(stopper, "send_signal", swallowed)
    actions = host.actions(grace_s=0.2)
    started = time.monotonic()
    result = actions.execute(actions.prepare(KILL_ZOMBIES, pids=[holder.pid]))
    assert time.monotonic() - started < 15.0 + 0.2 + 5.0 + 3.0
    assert not result.ok
    assert "unkillable" in result.message
    assert sent == [signal.SIGTERM, signal.SIGCONT, signal.SIGKILL]
    assert alive(holder)


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
    # The run's workers work in its directory: their rule names their role, that evidence makes them the run's.
    old = [procs.start(WORKER, str(marker), token, str(i), cwd=tmp_path)[0] for i in range(2)]
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
    assert f"trainer is alive (pid {trainer.pid})" in refused.plan.refused
    # the command that overrides it, as a person types it in a shell (the dashboard has no flags to pass)
    assert "only `rlwatch act resume --force` overrides this" in refused.plan.refused
    forced = actions.prepare(RESUME, force=True)
    assert forced.plan.runnable and target_pids(forced) == {trainer.pid}
    assert forced.plan.start[0].cmdline == (sys.executable, "-c", "pass")
    assert alive(trainer)


LAUNCHER = """
import subprocess, sys, time
server = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1] + '-server'])
print(server.pid, flush=True)
time.sleep(120)
"""


def test_a_server_the_launcher_started_comes_back_with_the_resume_not_before(
    procs: Procs, host: Host, tmp_path: Path
) -> None:
    """AReaL's launcher starts the inference server. With the trainer gone, restarting the server alone would be
    followed by a resume whose launcher starts a second one on the same GPU: restart-server is refused with that
    reason, and resume stops the launcher's old server with the launcher. With the trainer alive, the server is
    restarted as usual."""
    token = f"rlwatch-test-launcher-{os.getpid()}-{time.monotonic_ns()}"
    launcher, server_pid = procs.start(LAUNCHER, token, cwd=tmp_path)  # a launcher works in its run's directory
    procs.adopted.append(Ident(int(server_pid), psutil.Process(int(server_pid)).create_time()))
    rules = [
        ProcessRule(role="launcher", cmdline_regex=f"{token}$"),
        ProcessRule(role="server", cmdline_regex=f"{token}-server$"),
    ]
    cfg = host.config(rules=rules).model_copy(update={"server": ServerConfig(url="http://127.0.0.1:9", kind="sglang")})
    actions = Actions(Engine(cfg, tmp_path))
    refused = actions.prepare(RESTART_SERVER)
    assert refused.plan.refused is not None and "the launcher started this server" in refused.plan.refused
    resume = actions.prepare(RESUME)
    assert resume.plan.runnable, resume.plan.refused
    assert target_pids(resume) == {launcher.pid, int(server_pid)}
    (server_target,) = [t for t in resume.plan.targets if t.pid == int(server_pid)]
    assert "starts its own" in (server_target.reason or "")

    trainer, _ = procs.start(HOLDER, str(host.dev / "nvidia0"))
    host.mark_run(trainer.pid)
    restart = Actions(Engine(cfg, tmp_path)).prepare(RESTART_SERVER)
    assert restart.plan.runnable, restart.plan.refused
    assert target_pids(restart) == {int(server_pid)}
    assert alive(launcher) and running(int(server_pid))  # planning touches nothing


def test_readonly_refuses_everything(host: Host) -> None:
    actions = host.actions(readonly=True)
    for name in ("kill-zombies", "restart-workers", "resume", "restart-server"):
        assert actions.prepare(name).plan.refused == "read-only mode: actions are disabled"
    assert "unknown action" in (host.actions().prepare("reboot").plan.refused or "")


def test_a_plan_from_elsewhere_is_planned_again_and_must_match(procs: Procs, host: Host, tmp_path: Path) -> None:
    device = str(host.dev / "nvidia0")
    # Three leftovers; the second and third open the device only when told, after plans were made.
    gates = [tmp_path / "second.fifo", tmp_path / "third.fifo"]
    for gate in gates:
        os.mkfifo(gate)
    (stray,) = procs.orphan(HOLDER, device)
    second, third = (procs.orphan(HOLDER, device, HOLD_WHEN=str(gate))[0] for gate in gates)
    start_run(procs, host, stray, second, third, HOLD="0")

    def let_hold(pid: int, gate: Path) -> None:
        gate.write_text("go")
        wait_until(lambda: holds(pid, device), 5)

    plan = host.actions().plan(KILL_ZOMBIES)  # made by another front end
    assert target_pids(Prepared(plan)) == {stray}
    other = host.actions()
    result = other.execute(plan)
    assert result.ok, result
    assert not running(stray)
    let_hold(second, gates[0])
    stale = host.actions().plan(KILL_ZOMBIES)
    assert target_pids(Prepared(stale)) == {second}
    let_hold(third, gates[1])  # a leftover holding the device now, after that plan was shown
    again = other.execute(stale)
    assert not again.ok
    assert again.message == "kill-zombies: refused: the host changed since this plan was made; plan again"
    assert running(second) and running(third)


def test_actions_on_a_running_engine(procs: Procs, host: Host) -> None:
    (stray,) = procs.orphan(HOLDER, str(host.dev / "nvidia0"))
    start_run(procs, host, stray, HOLD="0")
    actions = host.actions()
    engine = actions.engine
    engine.start()
    try:
        wait_until(lambda: any(h.pid == stray for h in engine.snapshot().zombies), 10)
        result = actions.execute(actions.plan(KILL_ZOMBIES), progress=lambda _m: None)
    finally:
        engine.stop()
    assert result.ok, result
    assert not running(stray)
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
