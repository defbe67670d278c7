"""A real hang on two GPUs: rank 1 stops joining before its collective, rank 0 waits in it (NCCL's timeout 30 min).

rlwatch's watchdog declares the run hung within its window (here the floor, 10 s, over a step cadence of ~0.3 s),
long before NCCL's own timeout, and the stacks it reads then show who waits in the collective (rank 0, in
``train_step``) and who never reached it (rank 1, in ``never_reaches_collective``). Needs two NVIDIA GPUs and torch
with CUDA; skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlwatch.sources.stacks import py_spy
from tests.gpus import gpu_count
from tests.simhost import kill_job, wait_until

CAPTURE = Path(__file__).resolve().parent / "real" / "capture"


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("torchrun") is None or gpu_count() < 2, reason="needs torchrun and two GPUs"),
    pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed"),
]
CONFIG = "profile: generic\ninterval_s: 1\ngpu: {backend: nvml}\ntraining: {logs: [train.log]}\n"
CONFIG += "thresholds: {hang_floor_s: 10}\nwatchdog: {heartbeat_s: 1}\n"


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


def test_a_rank_that_never_reaches_its_collective_is_a_hang_with_both_stacks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(CONFIG)
    shutil.copy(CAPTURE / "hang_2gpu.py", run / "hang_2gpu.py")
    # Started from a shell, as a person starts it (the shell is where the run's family ends going up).
    job = subprocess.Popen(
        ["bash", "-c", "torchrun --nproc-per-node 2 hang_2gpu.py > torchrun.out 2>&1; true"],
        cwd=run,
        start_new_session=True,
    )
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [sys.executable, "-m", "rlwatch", "watch", str(run), "--json"], stdout=sink, stderr=subprocess.PIPE
        )
    try:
        wait_until(
            lambda: (
                "Train step 10/100 done." in (run / "train.log").read_text() if (run / "train.log").exists() else False
            ),
            300,
        )
        last_step = time.time()

        def hung() -> dict[str, Any] | None:
            return next((r for r in _records(out) if r.get("type") == "finding" and r.get("code") == "hung"), None)

        finding = wait_until(hung, 120)
        declared = time.time() - last_step
        assert declared < 10 + 15, f"declared {declared:.0f} s after the last step (window 10 s)"

        def with_stacks() -> dict[str, Any] | None:
            raw = subprocess.run(
                [sys.executable, "-m", "rlwatch", "report", str(run), "--json"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            ).stdout
            report = json.loads(raw)
            return report if (report.get("stacks") or {}).get("groups") else None

        report = wait_until(with_stacks, 120)
        stacks = report["stacks"]
        keep = os.environ.get("RLWATCH_EVIDENCE_DIR")  # where a GPU session keeps what it saw, for tests/real/
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / "hang-2gpu-report.json").write_text(json.dumps(report, indent=1))
            shutil.copy(stacks["kept_at"], Path(keep) / "hang-2gpu-stacks.json")
            shutil.copy(run / "train.log", Path(keep) / "hang-2gpu-train.log")
            shutil.copy(out, Path(keep) / "hang-2gpu-watch.jsonl")
        where = {label: g["where"] for g in stacks["groups"] for label in g["processes"]}
        assert where.get("rank 0", "").startswith("train_step (hang_2gpu.py:"), stacks
        assert where.get("rank 1", "").startswith("never_reaches_collective (hang_2gpu.py:"), stacks
        assert report["run_state"]["state"] == "hung" and finding["severity"] == "critical"
        print(
            json.dumps(
                {"declared_after_s": round(declared, 1), "finding": finding["message"], "stacks": stacks["summary"]}
            )
        )
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=60)
        kill_job(job)
