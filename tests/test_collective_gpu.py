"""Collectives on two real GPUs, watched live as a user watches them: ``rlwatch watch --json`` beside
``torchrun --nproc-per-node 2 collective_2gpu.py`` (tests/real/capture), and ``rlwatch report --json`` during the run.

- **mismatch**: at step 12 rank 0 reduces a metric rank 1 never reduces; NCCL's watchdog (timeout 30 s) prints both
  ranks' ``WorkNCCL(SeqNum=13 …)`` and the flight recorder dumps into the run directory. The finding names the rank
  with one more collective, its GPU, the collective (``all_reduce`` of 1 element against 4194304) and its number.
- **straggler**: rank 1 multiplies four times the matrices of rank 0 each step; both ranks' Python stacks wait in the
  same place, so only NVML tells: the finding names rank 1, GPU 1 and both draws in watts. Two GPUs only: on one,
  the ranks time-slice it and the waiting rank's NCCL kernel spins through its slices, so neither the GPU's power nor
  NVML's per-process samples tell the ranks apart (measured: tests/real/collective-2gpu-watched/straggler-1gpu).
- **healthy**: equal work; nothing is found.

These are the times a person waits, so each test prints how long after the event (the mismatch's step, the
straggler's first step) the finding came, from the records' own times. With ``RLWATCH_EVIDENCE_DIR`` set, what rlwatch
printed is kept there (a GPU session copies it to tests/real/collective-2gpu-watched/). Needs two NVIDIA GPUs,
torchrun and py-spy; skipped elsewhere.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rlwatch.sources.stacks import py_spy
from tests.gpus import gpu_count
from tests.simhost import kill_job, wait_until

CAPTURE = Path(__file__).resolve().parent / "real" / "capture"


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("torchrun") is None or gpu_count() < 1, reason="needs torchrun and a GPU"),
    pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed"),
]
# NVLink multicast stays off: on a shared host a program that uses it can put every GPU out of service.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# With one GPU both ranks share it (collective_2gpu.py makes each its own host to NCCL, reached over loopback).
ONE_GPU = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}


def _gpu_of(rank: int) -> int:
    return rank if gpu_count() >= 2 else 0


@dataclass
class Watched:
    """A run under a live ``rlwatch watch --json``, and what the test saw of it."""

    run: Path
    out: Path
    job: subprocess.Popen[bytes]
    watch: subprocess.Popen[bytes]
    times: dict[str, float] = field(default_factory=dict)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.startswith("{")]

    def findings(self, code: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("type") == "finding" and code in (None, r.get("code"))]

    def log(self, name: str) -> str:
        path = self.run / name
        return path.read_text(errors="replace") if path.exists() else ""

    def step_seen(self, n: int) -> bool:
        return re.search(rf"^Train step {n}/", self.log("train.log"), re.M) is not None

    def report(self) -> dict[str, Any]:
        raw = subprocess.run(
            [sys.executable, "-m", "rlwatch", "report", str(self.run), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert raw.returncode in (0, 1, 3), raw.stderr[-2000:]
        report: dict[str, Any] = json.loads(raw.stdout)
        return report


def _at(record: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(record["time"]).timestamp()


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[list[Watched]]:
    runs: list[Watched] = []
    yield runs
    for w in runs:
        w.watch.send_signal(signal.SIGTERM)
        try:
            w.watch.wait(timeout=60)
        except subprocess.TimeoutExpired:
            w.watch.kill()
            w.watch.wait(timeout=30)
        kill_job(w.job)
        keep = os.environ.get("RLWATCH_EVIDENCE_DIR")  # where a GPU session keeps what it saw, for tests/real/
        if keep:
            dest = Path(keep) / w.run.name
            dest.mkdir(parents=True, exist_ok=True)
            for name in ("train.log", "torchrun.log", "COMMAND"):
                if (w.run / name).exists():
                    shutil.copy(w.run / name, dest / name)
            shutil.copy(w.out, dest / "watch.jsonl")
            (dest / "times.json").write_text(json.dumps(w.times, indent=1) + "\n")


def _start(tmp_path: Path, runs: list[Watched], mode: str, steps: int, env: dict[str, str]) -> Watched:
    """The scenario started from a shell, as a person starts it, and rlwatch's watchdog beside it."""
    run = tmp_path / mode
    run.mkdir()
    shutil.copy(CAPTURE / "collective_2gpu.py", run / "collective_2gpu.py")
    command = f"torchrun --nproc-per-node 2 collective_2gpu.py {mode} {steps}"
    (run / "COMMAND").write_text(" ".join(f"{k}={v}" for k, v in env.items()) + f" {command}\n")
    job = subprocess.Popen(
        ["bash", "-c", f"{command} > torchrun.log 2>&1; true"],
        cwd=run,
        env={**os.environ, **NO_MULTICAST, **(ONE_GPU if gpu_count() < 2 else {}), "PYTHONUNBUFFERED": "1", **env},
        start_new_session=True,
    )
    out = run.parent / f"{mode}-watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [sys.executable, "-m", "rlwatch", "watch", str(run), "--json"],
            stdout=sink,
            stderr=subprocess.DEVNULL,
            cwd=tmp_path,
        )
    w = Watched(run, out, job, watch, {"start": time.time()})
    runs.append(w)
    return w


def _keep_report(w: Watched, name: str, report: dict[str, Any]) -> None:
    keep = os.environ.get("RLWATCH_EVIDENCE_DIR")
    if keep:
        dest = Path(keep) / w.run.name
        dest.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text(json.dumps(report, indent=1) + "\n")


@pytest.mark.timeout(420)
def test_a_collective_mismatch_is_named_with_rank_gpu_collective_and_number(
    tmp_path: Path, watched: list[Watched]
) -> None:
    run_env = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "mismatch" / "nccl_trace_rank_"),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "mismatch" / "nccl_pipe_rank_"),
        "NCCL_TIMEOUT_S": "30",
    }
    w = _start(tmp_path, watched, "mismatch", 100, run_env)
    wait_until(lambda: w.step_seen(11), 240, 0.1)
    # Rank 0 enters its extra all_reduce 0.3 s after this line (step 12's sleep, then the step's own reduce).
    w.times["step_11_line"] = time.time()
    found = wait_until(lambda: w.findings("collective_mismatch"), 150, 0.2)
    w.times["finding_record"] = _at(found[0])
    w.times["finding_seen"] = time.time()

    def named() -> dict[str, Any] | None:
        report = w.report()
        return report if any(f["code"] == "collective_mismatch" for f in report["findings"]) else None

    report = wait_until(named, 90, 1.0)
    w.times["report_named"] = time.time()
    _keep_report(w, "report.json", report)
    message = found[0]["message"]
    print(json.dumps({"mismatch": message, "after_s": round(w.times["finding_record"] - w.times["step_11_line"], 1)}))
    assert found[0]["severity"] == "critical"
    assert "#13" in message, message
    zero, one = f"rank 0 (GPU {_gpu_of(0)})", f"rank 1 (GPU {_gpu_of(1)})"
    assert f"{zero} called all_reduce of 1 element" in message, message
    assert f"{one} called all_reduce of 4194304 elements" in message, message
    assert f"{zero} made one more collective than {one}" in message, message
    (said,) = [f for f in report["findings"] if f["code"] == "collective_mismatch"]
    assert "#13" in said["message"] and "rank 0" in said["message"] and "4194304" in said["message"]


@pytest.mark.timeout(420)
@pytest.mark.skipif(
    gpu_count() < 2,
    reason="two ranks time-sliced on one GPU take equal parts of it (the waiting rank's NCCL kernel spins): its power "
    "and NVML's per-process samples both leave the straggler unnamed (tests/real/collective-2gpu-watched/"
    "straggler-1gpu); needs two GPUs",
)
def test_a_gpu_bound_straggler_is_named_with_rank_gpu_and_watts(tmp_path: Path, watched: list[Watched]) -> None:
    w = _start(tmp_path, watched, "straggler", 200, {})
    wait_until(lambda: w.step_seen(1), 240, 0.1)
    w.times["step_1_line"] = time.time()
    found = wait_until(lambda: w.findings("gpu_straggler"), 150, 0.2)
    w.times["finding_record"] = _at(found[0])
    w.times["finding_seen"] = time.time()
    report = w.report()
    w.times["report_done"] = time.time()
    _keep_report(w, "report.json", report)
    message = found[0]["message"]
    print(json.dumps({"straggler": message, "after_s": round(w.times["finding_record"] - w.times["step_1_line"], 1)}))
    watts = re.search(r"rank 1 \(GPU 1\) computes longer each step: (\d+) W beside (\d+) W", message)
    assert watts is not None, message
    assert int(watts.group(1)) > int(watts.group(2)), message
    assert "straggler" not in [f["code"] for f in w.findings()]  # the stacks agree: theirs says nothing
    said = [f["message"] for f in report["findings"] if f["code"] == "gpu_straggler"]
    assert said and "rank 1 (GPU 1)" in said[0], report["findings"]


@pytest.mark.timeout(420)
def test_a_healthy_run_on_two_gpus_is_said_to_progress_and_nothing_else(tmp_path: Path, watched: list[Watched]) -> None:
    w = _start(tmp_path, watched, "healthy", 600, {})
    wait_until(lambda: w.step_seen(1), 240, 0.1)
    w.times["step_1_line"] = time.time()
    # Watched past the straggler's window (60 s of GPU readings at ~0.2 s a step, twice that on one GPU) and the
    # hang's floor (60 s).
    last = 360 if gpu_count() >= 2 else 180
    wait_until(lambda: w.step_seen(last), 300, 0.5)
    w.times[f"step_{last}_line"] = time.time()
    report = w.report()
    w.times["report_done"] = time.time()
    _keep_report(w, "report.json", report)
    assert w.job.poll() is None, w.log("torchrun.log")[-2000:]
    first = [r for r in w.records() if r.get("type") == "state"]
    said = [(f["code"], f["severity"], f["message"]) for f in w.findings() + report["findings"]]
    print(json.dumps({"healthy": said, "first_state": first[0]["findings"] if first else None}))
    assert [x for x in said if x[1] != "info"] == []
    assert report["run_state"]["state"] == "progressing", report["run_state"]
