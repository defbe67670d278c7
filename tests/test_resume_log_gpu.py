"""The fix loop on a real GPU host, as a person lives it (issue 34): a trainer started as ``python3 train.py >>
train.log 2>&1`` is SIGKILLed under ``rlwatch watch`` with a resume policy; the watchdog resumes it, and the resumed
trainer appends to ``train.log`` — the log the person tails — where its steps go on from the checkpoint, never in
``.rlwatch/logs/trainer.log``. Every view then says the same step.

Needs an NVIDIA GPU and torch with CUDA; skipped elsewhere. Run on the GPU host with:
``.venv/bin/pytest -q -p no:cacheprovider -m gpu tests/test_resume_log_gpu.py``
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpus import gpu_count
from tests.simhost import wait_until


def _torch_cuda() -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], timeout=120, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(gpu_count() < 1 or not _torch_cuda(), reason="needs an NVIDIA GPU and torch with CUDA"),
]

# A small trainer on the GPU: a step every ~0.3 s, a checkpoint (its step in a JSON file) every 5 steps, started
# again from it; it prints its steps as verl's console logger does (``step:12 - actor/…:…``).
TRAIN = r"""
import json, os, sys, time
import torch
ckpt = "ckpt/state.json"
start = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
print(f"resuming from step {start}" if start else "starting", flush=True)
x = torch.randn(2048, 2048, device="cuda")
for step in range(start + 1, 400):
    for _ in range(8):
        x = torch.tanh(x @ x.T / 2048)
    torch.cuda.synchronize()
    print(f"step:{step} - actor/loss:{float(x.mean()):.4f}", flush=True)
    if step % 5 == 0:
        os.makedirs("ckpt", exist_ok=True)
        json.dump({"step": step}, open(ckpt + ".tmp", "w"))
        os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.3)
"""
CONFIG = """profile: generic
interval_s: 1
gpu: {backend: nvml}
training: {logs: [train.log]}
processes:
  - {role: trainer, cmdline_regex: 'train\\.py'}
policies:
  - name: trainer-gone
    when: {dead: trainer, for_s: 2}
    actions: [resume]
watchdog: {heartbeat_s: 1}
"""


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


def _steps(log: Path) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^step:(\d+) - ", log.read_text(), re.M)]


def test_a_killed_trainer_is_resumed_into_the_log_the_person_tails(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(CONFIG)
    (run / "train.py").write_text(TRAIN)
    log = run / "train.log"
    job = subprocess.Popen(
        ["bash", "-c", f"exec {sys.executable} train.py >> train.log 2>&1"], cwd=run, start_new_session=True
    )
    out = tmp_path / "watch.jsonl"
    err = tmp_path / "watch.err"
    with out.open("wb") as sink, err.open("wb") as errs:
        watch = subprocess.Popen(
            [sys.executable, "-m", "rlwatch", "watch", str(run), "--json"], stdout=sink, stderr=errs
        )
    try:
        wait_until(lambda: log.exists() and len(_steps(log)) >= 12, 300)
        wait_until(lambda: any(r.get("type") == "state" for r in _records(out)), 60)
        assert "ACTS on this run" in err.read_text()  # it said so at start, with its policy
        killed_at = max(_steps(log))
        os.kill(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
        # The watchdog resumes it; the resumed trainer writes where the killed one wrote.
        wait_until(lambda: "resuming from step" in log.read_text(), 120)
        wait_until(lambda: max(_steps(log)) >= killed_at + 5, 120)
        text = log.read_text()
        assert text.index("resuming from step") > text.index(f"step:{killed_at} - ")  # appended, never truncated
        assert (
            not (run / ".rlwatch" / "logs" / "trainer.log").exists()
            or "step" not in (run / ".rlwatch" / "logs" / "trainer.log").read_text()
        )
        action = wait_until(lambda: next((r for r in _records(out) if r.get("type") == "action"), None), 150)
        assert action.get("ok") is True, action
        # One step in every view: the report's verdict says the log's own, latest step.
        rep = json.loads(
            subprocess.run(
                [sys.executable, "-m", "rlwatch", "report", str(run), "--json"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            ).stdout
        )
        newest = max(_steps(log))
        assert rep["verdict"]["step"] is not None and rep["verdict"]["step"] >= newest - 5, (rep["verdict"], newest)
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=60)
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        # The trainer the watchdog started (its own session): by the pid the stream named, checked to be ours.
        for rec in _records(out):
            if rec.get("type") in ("process_started", "process_seen") and rec.get("role") == "trainer":
                _kill_if_ours(int(rec["pid"]), run)


def _kill_if_ours(pid: int, run: Path) -> None:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return
    if cwd == str(run) and b"train.py" in argv:
        os.kill(pid, signal.SIGKILL)
