"""Resuming a verl run: the driver's recorded command line with ``trainer.resume_mode=auto``, from the checkpoint
verl's ``latest_checkpointed_iteration.txt`` names, refused while the driver or its TaskRunner lives, when the
command is not known, or when there is nothing to resume from.

The driver is a real process standing in for ``python3 -m verl.trainer.main_ppo`` (no Ray: the mechanics of a resume
are the driver's; what Ray prints is judged on the real runs in tests/test_ray_real.py): it takes hydra-style
overrides, prints verl's lines through a Ray-style prefix, saves ``global_step_N`` with the tracker every 4 steps,
and reads the tracker back under ``trainer.resume_mode=auto`` as verl's ``_load_checkpoint`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.discover.discovery import discover
from rlwatch.engine.engine import Engine
from rlwatch.remedy.actions.api import Actions
from rlwatch.remedy.actions.plan import RESUME, with_resume_mode
from tests.simhost import wait_until

MAIN_PPO = r"""
import os, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
mode = args.get("trainer.resume_mode", "auto")
ckpt = args.get("trainer.default_local_dir", "checkpoints")
steps = int(args.get("trainer.total_training_steps", "8"))
crash_at = int(args.get("+standin.crash_at", "0"))
crash_unless = args.get("+standin.crash_unless", "")
hold = args.get("+standin.hold_until", "")
pid = os.getpid()

def out(msg):
    print(f"\x1b[36m(TaskRunner pid={pid})\x1b[0m {msg}", flush=True)

print("ray init kwargs: {'num_cpus': None}", flush=True)
tracker = os.path.join(ckpt, "latest_checkpointed_iteration.txt")
start = 0
if mode == "auto" and os.path.exists(tracker):
    start = int(open(tracker).read())
    out(f"Found checkpoint: %s {ckpt}/global_step_{start}")
    out(f"Setting global step to {start}")
else:
    out("Training from scratch")
out(f"Total training steps: {steps}")
for step in range(start + 1, steps + 1):
    if step == crash_at and not os.path.exists(crash_unless):
        while hold and not os.path.exists(hold):
            time.sleep(0.05)
        raise RuntimeError(f"injected failure at step {step}")
    out(f"step:{step} - actor/pg_loss:0.0123 - critic/rewards/mean:0.5")
    if step % 4 == 0:
        os.makedirs(f"{ckpt}/global_step_{step}/actor", exist_ok=True)
        open(f"{ckpt}/global_step_{step}/data.pt", "w").write("stub")
        open(tracker, "w").write(str(step))
    time.sleep(0.05)
out("('Final validation metrics: None')")
"""


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "verl" / "trainer").mkdir(parents=True)
    (run / "verl" / "__init__.py").write_text("")
    (run / "verl" / "trainer" / "__init__.py").write_text("")
    (run / "verl" / "trainer" / "main_ppo.py").write_text(MAIN_PPO)
    for d in (tmp_path, run):
        d.chmod(0o755)
    return run


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(5)


def _driver(run: Path, procs: list[subprocess.Popen[bytes]], *overrides: str) -> subprocess.Popen[bytes]:
    with open(run / "driver.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
            cwd=run,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    procs.append(proc)
    return proc


def _actions(run: Path) -> Actions:
    cfg = discover(run)
    cfg = cfg.model_copy(
        update={"actions": cfg.actions.model_copy(update={"verify_timeout_s": 30.0, "grace_s": 2.0})}
    ).with_provenance(cfg.provenance)
    return Actions(Engine(cfg, run))


def _adopt_spawned(run: Path, procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """Processes the action started (they are children of nobody here): kill them at the end too."""
    pids = []
    audit = run / ".rlwatch" / "audit.jsonl"
    for line in audit.read_text().splitlines() if audit.exists() else []:
        record = json.loads(line)
        if record.get("event") == "spawn" and record.get("pid"):
            pids.append(int(record["pid"]))
    return pids


def test_with_resume_mode_adds_or_replaces_the_override() -> None:
    base = ("python3", "-m", "verl.trainer.main_ppo", "data.train_batch_size=32")
    assert with_resume_mode(base) == ((*base, "trainer.resume_mode=auto"), None)
    argv, old = with_resume_mode((*base, "trainer.resume_mode=disable", "trainer.save_freq=4"))
    assert argv == (*base, "trainer.resume_mode=auto", "trainer.save_freq=4") and old == "trainer.resume_mode=disable"
    argv, old = with_resume_mode((*base, "++trainer.resume_mode=resume_path", "+trainer.resume_mode=disable"))
    assert argv == (*base, "++trainer.resume_mode=auto") and old == "++trainer.resume_mode=resume_path"
    # Another key that merely contains the name is left alone.
    assert with_resume_mode(("x", "trainer.resume_mode_extra=1"))[0][-1] == "trainer.resume_mode=auto"


def test_a_verl_run_that_died_resumes_from_its_tracker_checkpoint(
    run_dir: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    gate = run_dir / "crash.go"
    fixed = run_dir / "fixed"
    driver = _driver(
        run_dir,
        started,
        "trainer.resume_mode=disable",
        "trainer.total_training_steps=8",
        "+standin.crash_at=6",
        f"+standin.crash_unless={fixed}",
        f"+standin.hold_until={gate}",
    )
    wait_until(lambda: (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").exists(), 20)
    actions = _actions(run_dir)
    assert actions.cfg.profile == "verl"
    # While the driver lives, a resume would start a second run.
    alive = actions.prepare(RESUME)
    assert alive.plan.refused is not None and f"the verl driver is alive (pid {driver.pid})" in alive.plan.refused
    # Its command line was recorded when it was seen running; now it fails at step 6.
    gate.write_text("go")
    driver.wait(20)
    assert driver.returncode != 0

    # A TaskRunner actor that outlives its driver (Ray keeps the job's actors until it ends it) blocks the resume.
    runner = subprocess.Popen(
        ["ray::TaskRunner.run", "-c", "import time; time.sleep(60)"],
        executable=sys.executable,
        start_new_session=True,
    )
    started.append(runner)
    wait_until(lambda: Path(f"/proc/{runner.pid}/cmdline").read_bytes().startswith(b"ray::TaskRunner.run"), 5)
    blocked = actions.prepare(RESUME)
    assert blocked.plan.refused is not None
    assert f"TaskRunner actor still lives (pid {runner.pid})" in blocked.plan.refused
    runner.kill()
    runner.wait(5)

    prepared = actions.prepare(RESUME)
    assert prepared.plan.runnable, prepared.plan.refused
    steps = " | ".join(prepared.plan.steps)
    assert "resumes from global_step_4 (global step 4: latest_checkpointed_iteration.txt says 4)" in steps
    assert "trainer.resume_mode=disable replaced by trainer.resume_mode=auto" in steps
    (launch,) = prepared.launches
    assert launch.argv[:3] == (sys.executable, "-m", "verl.trainer.main_ppo")
    assert "trainer.resume_mode=auto" in launch.argv and "trainer.resume_mode=disable" not in launch.argv
    assert launch.cwd == str(run_dir) and launch.log == str(run_dir / "driver.log")  # the log it wrote goes on
    assert prepared.resume_step == 4 and prepared.plan.targets == ()

    fixed.write_text("the cause is fixed")
    result = actions.execute(prepared)
    pids = _adopt_spawned(run_dir, started)
    try:
        assert result.ok, result
        assert "(past resume step 4)" in result.message
        log = (run_dir / "driver.log").read_text()
        assert "Setting global step to 4" in log and log.count("ray init kwargs:") == 2
        events = [json.loads(line)["event"] for line in (run_dir / ".rlwatch" / "audit.jsonl").read_text().splitlines()]
        assert events[0] == "plan" and "spawn" in events and events[-2:] == ["verify", "result"]
    finally:
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def test_no_checkpoint_or_no_known_command_is_refused(run_dir: Path, started: list[subprocess.Popen[bytes]]) -> None:
    # A driver that died before its first save: nothing to resume from (verl would start from scratch).
    driver = _driver(run_dir, started, "trainer.total_training_steps=8", "+standin.crash_at=2")
    driver.wait(20)
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    refused = _actions(run_dir).prepare(RESUME)
    assert refused.plan.refused is not None and "latest_checkpointed_iteration.txt" in refused.plan.refused
    assert "--force" in refused.plan.refused
    # A checkpoint, but no driver ever seen running and no actions.resume_command: nothing to run.
    (run_dir / "checkpoints" / "global_step_4" / "actor").mkdir(parents=True)
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("4")
    unknown = _actions(run_dir).prepare(RESUME)
    assert unknown.plan.refused is not None and "command line is not known" in unknown.plan.refused
    audit = run_dir / ".rlwatch" / "audit.jsonl"
    assert not audit.exists() or "spawn" not in audit.read_text()  # nothing was started by either
