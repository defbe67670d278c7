"""Attempts on the CPU, with real processes: an earlier launch's orphaned ranks beside a new run, and a dead run.

A launcher script starts two ranks that append step lines to ``train.log``; the launcher is SIGKILLed (what a killed
tmux pane or a container restart does to torchrun's agent) and the ranks live on, re-parented, still writing. One
attempt only, it is the run, marked as having lost its launcher. Then a new run starts in the same directory: the
engine keeps the two apart (the live run is the new one alone), names the earlier attempt with its launcher and
when rlwatch saw it go, gives the exact command that stops it, and calls its ranks strays only once they stop
writing. Then: a trainer SIGKILLed is stopped at once — never "progressing" for a grace window — and ``rlwatch
watch`` started in the run directory, with a shell standing there, is never the run.

The tests signal only the processes they started (by pid and start time), and wait on conditions, never sleeps.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlwatch.common.state import Snapshot
from rlwatch.config.models import ActionsConfig, Config, GpuConfig, TrainingConfig
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json
from rlwatch.remedy.actions.api import Actions
from rlwatch.remedy.actions.plan import KILL_ZOMBIES
from rlwatch.sources.gpu import NoGpuBackend
from tests.simhost import StartedProcesses, wait_until

pytestmark = pytest.mark.slow

RANK = """
import sys, time
log = open("train.log", "a", buffering=1)
step = 0
while True:
    step += 1
    print(f"[rank{sys.argv[1]}] step {step}/1000 loss 0.0320", file=log)
    time.sleep(0.1)
"""
LAUNCHER = """
import os, subprocess, sys, time
# As torchrun's agent or DeepSpeed's launcher does, each rank gets its rank in its environment.
env = lambda i: {**os.environ, "RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": "2"}
kids = [subprocess.Popen([sys.executable, "rank.py", str(i)], env=env(i)) for i in range(2)]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""
LIVE = """
import time
log = open("train.log", "a", buffering=1)
print("ready", flush=True)
step = 0
while True:
    step += 1
    print(f"live step {step}/1000 loss 0.5", file=log)
    time.sleep(0.1)
"""
CONFIG = "profile: generic\ngpu: {backend: none}\ntraining: {logs: [train.log]}\nthresholds: {hang_floor_s: 1.5}\n"


@pytest.fixture
def started() -> Iterator[StartedProcesses]:
    s = StartedProcesses()
    yield s
    s.kill_all()


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(CONFIG)
    (run / "rank.py").write_text(RANK)
    (run / "launch.py").write_text(LAUNCHER)
    (run / "live.py").write_text(LIVE)
    return run


def _look(engine: Engine) -> Snapshot:
    engine.drain_logs()
    engine.sample(fresh_holders=True)
    return engine.build()


def _finding(s: Snapshot, code: str) -> str | None:
    return next((f.message for f in s.findings if f.code == code), None)


def test_an_orphaned_earlier_attempt_beside_a_new_run_is_named_apart_with_its_command(
    tmp_path: Path, started: StartedProcesses
) -> None:
    run = _run_dir(tmp_path)
    launcher = subprocess.Popen(
        [sys.executable, "launch.py"], cwd=run, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    started.add(launcher.pid)
    assert launcher.stdout is not None
    ranks = [int(pid) for pid in launcher.stdout.readline().split()]
    for pid in ranks:
        started.add(pid)
    wait_until(lambda: (run / "train.log").exists() and (run / "train.log").read_text().count("step") >= 4)
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run, gpu_backend=NoGpuBackend())
    try:
        first = engine.collect_once()
        assert first.live_run is not None and {launcher.pid, *ranks} <= {p for p, _ in first.live_run.members}
        assert first.live_run.attempts == ()  # one launch, its launcher alive: nothing to tell apart

        started.signal(launcher.pid, signal.SIGKILL)
        launcher.wait(10)
        wait_until(lambda: all(psutil.Process(pid).ppid() != launcher.pid for pid in ranks))
        alone = _look(engine)
        # One attempt only: the orphaned ranks still progress, so they are the run, marked as having lost it.
        assert alone.live_run is not None and set(ranks) <= {p for p, _ in alone.live_run.members}
        lost = _finding(alone, "run_lost_launcher")
        assert lost is not None and f"pid {launcher.pid}" in lost and "(gone since " in lost, lost

        live = subprocess.Popen(
            [sys.executable, "live.py"], cwd=run, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        started.add(live.pid)
        assert live.stdout is not None and live.stdout.readline().strip() == "ready"
        both = _look(engine)
        lr = both.live_run
        assert lr is not None
        # The live run is the new one alone; the header counts its processes only.
        assert [p for p, _ in lr.members] == [live.pid]
        earlier = [a for a in lr.attempts if not a.current]
        assert len(earlier) == 1 and set(earlier[0].pids) == set(ranks)
        assert earlier[0].launcher_pid == launcher.pid and earlier[0].launcher_gone_at is not None
        message = _finding(both, "earlier_attempt")
        assert message is not None
        assert f"2 processes of an earlier attempt (pid {', '.join(map(str, sorted(ranks)))}" in message
        assert f"pid {launcher.pid}, is gone since" in message and "live.py, pid" in message
        command = "rlwatch act kill-zombies " + " ".join(f"--pid {pid}" for pid in sorted(ranks))
        assert command in message
        assert both.run_state is not None and both.run_state.state in ("progressing", "unknown")
        # The processes table groups them apart; report --json lists both attempts with their launchers.
        assert {p.pid: p.attempt for p in both.processes if p.pid in ranks} == {pid: 0 for pid in ranks}
        data = json.loads(to_json(both))
        attempts: list[dict[str, Any]] = data["live_run"]["attempts"]
        assert [a["state"] for a in attempts] == ["earlier attempt", "live run"]
        assert attempts[0]["launcher"]["pid"] == launcher.pid and attempts[0]["launcher"]["alive"] is False
        assert attempts[0]["writes"] == ["train.log"]

        # They stop writing (stopped, not killed): after the hang window they are strays, with that reason.
        for pid in ranks:
            started.signal(pid, signal.SIGSTOP)

        def strays() -> str | None:
            a = [x for x in (_look(engine).live_run or lr).attempts if not x.current]
            return a[0].stray if a and a[0].stray else None

        reason = wait_until(strays, timeout=20, interval=0.3)
        assert "written nothing for" in reason and "hang window" in reason
        assert live.poll() is None and all(psutil.Process(pid).is_running() for pid in ranks)  # nothing signalled
    finally:
        engine.stop()


TRAINER = """
import time
log = open("train.log", "a", buffering=1)
step = 0
while True:
    step += 1
    print(f"Train step {step}/1000 done.", file=log)
    time.sleep(0.2)
"""


def _report(run: Path) -> dict[str, Any]:
    """What ``rlwatch report --json`` says, made in this process (a fresh engine: a one-shot look)."""
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run, gpu_backend=NoGpuBackend())
    engine.unseen_writer_wait_s = 0.5
    try:
        return dict(json.loads(to_json(engine.collect_once())))
    finally:
        engine.stop()


def test_a_sigkilled_trainer_is_stopped_at_once_and_rlwatch_or_a_shell_in_its_directory_is_not_the_run(
    tmp_path: Path, started: StartedProcesses
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text("profile: generic\ngpu: {backend: none}\ntraining: {logs: [train.log]}\n")
    (run / "train.py").write_text(TRAINER)
    trainer = subprocess.Popen([sys.executable, "train.py"], cwd=run, start_new_session=True)
    started.add(trainer.pid)
    # A person's shell standing in the directory, and the watchdog started from there through its console script.
    shell = subprocess.Popen(["bash", "-c", "read -r _; true"], cwd=run, stdin=subprocess.PIPE)
    started.add(shell.pid)
    console = Path(sys.executable).parent / "rlwatch"
    watch_cmd = [str(console)] if console.exists() else [sys.executable, "-m", "rlwatch"]
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen([*watch_cmd, "watch", ".", "--json"], cwd=run, stdout=sink, stderr=subprocess.DEVNULL)
    started.add(watch.pid)
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run, gpu_backend=NoGpuBackend())  # a watchdog's engine, looking again and again
    try:
        wait_until(lambda: (run / "train.log").exists() and (run / "train.log").read_text().count("step") >= 3)
        before = wait_until(
            lambda: (r := _report(run))["run_state"]["state"] == "progressing" and r, timeout=30, interval=0.2
        )
        members = {m["pid"] for m in before["live_run"]["members"]}
        assert trainer.pid in members and watch.pid not in members and shell.pid not in members
        assert before["status"] == "ok"
        seen = engine.collect_once()
        assert seen.run_state is not None and seen.run_state.state == "progressing"

        started.signal(trainer.pid, signal.SIGKILL)
        trainer.wait(10)
        after = _report(run)  # the next report, a moment after the kill
        state = after["run_state"]
        assert state["state"] == "stopped", state
        assert "Train step" in state["why"] and after["status"] != "ok"
        assert watch.pid not in {m["pid"] for m in after["live_run"]["members"]}
        # The watchdog's engine saw the trainer alive: at its next look it is gone, at once (no hang_floor_s wait).
        now = _look(engine)
        assert now.run_state is not None and now.run_state.state == "stopped", now.run_state
        assert f"its processes are gone (pid {trainer.pid})" in now.run_state.why
    finally:
        engine.stop()
        if shell.stdin is not None:
            shell.stdin.close()  # the shell ends on its own; the fixture kills the rest


# A writer rlwatch cannot see: it opens the log only to append a line and works elsewhere (as one in another
# container sharing the directory looks from here).
UNSEEN = """
import sys, time
step = 0
while True:
    step += 1
    with open(sys.argv[1], "a") as log:
        print(f"Train step {step}/1000 done.", file=log)
    time.sleep(0.2)
"""


def test_a_log_still_being_written_with_no_process_seen_is_unknown_never_progressing_nor_stopped(
    tmp_path: Path, started: StartedProcesses
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text("profile: generic\ngpu: {backend: none}\ntraining: {logs: [train.log]}\n")
    writer = subprocess.Popen([sys.executable, "-c", UNSEEN, str(run / "train.log")], cwd=tmp_path)
    started.add(writer.pid)
    wait_until(lambda: (run / "train.log").exists() and (run / "train.log").read_text().count("step") >= 3)
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run, gpu_backend=NoGpuBackend())
    engine.unseen_writer_wait_s = 30.0  # a deadline for a writer slowed by a loaded machine; it ends at the growth
    try:
        snap = engine.collect_once()
    finally:
        engine.stop()
    assert snap.run_state is not None
    assert snap.run_state.state == "unknown", snap.run_state
    assert "after rlwatch looked" in snap.run_state.why


# A rank holding a stand-in GPU device file (the configured device glob) as a CUDA process holds /dev/nvidia0.
HOLDING_RANK = """
import sys, time
dev = open(sys.argv[2], "rb")
log = open("train.log", "a", buffering=1)
step = 0
while True:
    step += 1
    print(f"[rank{sys.argv[1]}] step {step}/1000 loss 0.0320", file=log)
    time.sleep(0.1)
"""
HOLDING_LAUNCHER = """
import os, subprocess, sys, time
env = lambda i: {**os.environ, "RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": "2"}  # a launcher's ranks
kids = [subprocess.Popen([sys.executable, "rank.py", str(i), sys.argv[1]], env=env(i)) for i in range(2)]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""


def test_kill_zombies_leaves_an_earlier_attempt_that_writes_alone_and_stops_it_when_named(
    tmp_path: Path, started: StartedProcesses
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").write_bytes(b"\0" * 16)
    (run / "rank.py").write_text(HOLDING_RANK)
    (run / "launch.py").write_text(HOLDING_LAUNCHER)
    (run / "live.py").write_text(LIVE)
    launcher = subprocess.Popen(
        [sys.executable, "launch.py", str(dev / "nvidia0")], cwd=run, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    started.add(launcher.pid)
    assert launcher.stdout is not None
    ranks = sorted(int(pid) for pid in launcher.stdout.readline().split())
    for pid in ranks:
        started.add(pid)
    wait_until(lambda: (run / "train.log").exists() and (run / "train.log").read_text().count("[rank1]") >= 2)
    started.signal(launcher.pid, signal.SIGKILL)
    launcher.wait(10)
    wait_until(lambda: all(psutil.Process(pid).ppid() != launcher.pid for pid in ranks))
    live = subprocess.Popen(
        [sys.executable, "live.py"], cwd=run, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    started.add(live.pid)
    assert live.stdout is not None and live.stdout.readline().strip() == "ready"
    cfg = Config(
        profile="generic",
        gpu=GpuConfig(backend="none", device_glob=f"{dev}/nvidia*"),
        training=TrainingConfig(logs=["train.log"]),
        actions=ActionsConfig(grace_s=1.0, audit_log=str(tmp_path / "audit.jsonl"), verify_timeout_s=10.0),
    )
    engine = Engine(cfg, run, gpu_backend=NoGpuBackend())
    try:
        actions = Actions(engine)
        snap = engine.collect_once()
        assert {h.pid: h.status for h in snap.holders} == {pid: "unknown" for pid in ranks}
        unasked = actions.prepare(KILL_ZOMBIES)
        assert unasked.plan.refused is not None and not unasked.stops, unasked.plan
        named = actions.prepare(KILL_ZOMBIES, pids=ranks)
        assert sorted(t.pid for t in named.plan.targets if t.pid is not None) == ranks
        reason = named.plan.targets[0].reason or ""
        assert "of an earlier attempt beside the live run" in reason and "writes train.log" in reason, reason
        assert "holds" in reason or "uses" in reason, reason
        result = actions.execute(named)
        assert result.ok, result
        wait_until(
            lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in ranks)
        )
        assert live.poll() is None  # the new run was not touched
    finally:
        engine.stop()
