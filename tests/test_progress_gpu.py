"""Progress known by its shape on a real GPU host (skipped elsewhere): issue 32's first run.

torchrun starts two ranks that log through Python's logging module (`2026-… INFO [rank0] step 23/1000 loss … tokens/s
…`, no framework rlwatch was taught), one all-reduce per step. While they train, `rlwatch report` sees the run
progressing at the step the lines name; then rank 1 stops joining and prints a heartbeat every 2 s while rank 0 waits
in the collective, and the watchdog declares the run hung within its window (hang_floor_s 10) — which it can only do
because it saw the steps. Needs two NVIDIA GPUs, torch with CUDA and torchrun.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpus import gpu_count
from tests.simhost import kill_job, wait_until

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("torchrun") is None or gpu_count() < 2, reason="needs torchrun and two GPUs"),
]

TRAIN = """
import logging, os, time
import torch, torch.distributed as dist

rank = int(os.environ["RANK"])
logging.basicConfig(filename="train.log", level=logging.INFO,
                    format=f"%(asctime)s %(levelname)s [rank{rank}] %(message)s")
log = logging.getLogger("train")
dist.init_process_group("nccl")
torch.cuda.set_device(rank)
x = torch.ones(1 << 20, device="cuda")
for step in range(1, 1001):
    if rank == 1 and step > int(os.environ["HANG_AFTER"]):
        k = 0
        while True:  # never reaches the collective again: rank 0 waits in it
            k += 1
            log.info(f"heartbeat {k}: still here")
            time.sleep(2)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    log.info(f"step {step}/1000 loss {1.0 / step:.4f} tokens/s 51200")
    time.sleep(0.3)
"""
CONFIG = "profile: generic\ninterval_s: 1\ngpu: {backend: nvml}\ntraining: {logs: [train.log]}\n"
CONFIG += "thresholds: {hang_floor_s: 10}\nwatchdog: {heartbeat_s: 1}\n"


def _report(run: Path) -> dict[str, Any]:
    raw = subprocess.run(
        [sys.executable, "-m", "rlwatch", "report", str(run), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    return json.loads(raw)  # type: ignore[no-any-return]


def test_ranks_logging_through_python_logging_progress_then_hang(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(CONFIG)
    (run / "train.py").write_text(TRAIN)
    job = subprocess.Popen(
        ["bash", "-c", "torchrun --nproc-per-node 2 train.py > torchrun.out 2>&1; true"],
        cwd=run,
        start_new_session=True,
        env={**os.environ, "HANG_AFTER": "60"},
    )
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [sys.executable, "-m", "rlwatch", "watch", str(run), "--json"], stdout=sink, stderr=subprocess.PIPE
        )
    try:
        log = run / "train.log"
        wait_until(lambda: log.exists() and "step 10/1000" in log.read_text(), 300)
        report = _report(run)
        assert report["run_state"]["state"] == "progressing", report["run_state"]
        assert report["training"]["last_step"] >= 10 and report["training"]["total_steps"] == 1000, report["training"]

        def hung() -> dict[str, Any] | None:
            records = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
            return next((r for r in records if r.get("type") == "finding" and r.get("code") == "hung"), None)

        finding = wait_until(hung, 180)
        assert _report(run)["training"]["last_step"] == 60  # the heartbeats that follow are no steps
        print(json.dumps({"progressing_at": report["training"]["last_step"], "hung": finding["message"]}))
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=60)
        kill_job(job)
