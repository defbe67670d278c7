"""Hangs and stragglers from the sampled stacks on two GPUs (torchrun, NCCL), with ranks logging in a format rlwatch
was not taught (``2026-11-27 11:29:23,497 INFO [rank0] step 23/1000 loss 0.0320``) and a heartbeat thread that keeps
logging whatever the ranks do (tests/stack_ranks_gpu.py). The watchdog runs with the defaults of the stacks section
(reads every 10 s or slower, at most 1 % of a core; hang floor 60 s; straggler window 90 s):

- a hang (rank 1 blocks on a socket at step 25, rank 0 waits in NCCL's all-reduce): declared from the stacks within
  max(60 s, hang_factor times the cadence) plus a round of reads of the last step, before 300 s, naming rank 1 in
  fetch_batch_from_service and rank 0 waiting for it;
- a rank killed mid-collective (SIGKILL to rank 1 while rank 0 waits in the all-reduce): crashed, never hung;
- a straggler (rank 1 spends 0.6 s more per step): named within two minutes, with each rank's GPU utilisation.

Needs two NVIDIA GPUs, torchrun and py-spy; skipped elsewhere. Prints what it measured as one JSON line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rlwatch.sources.stacks import py_spy
from tests.gpus import gpu_count
from tests.simhost import kill_job, wait_until

SCRIPT = Path(__file__).resolve().parent / "stack_ranks_gpu.py"


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("torchrun") is None or gpu_count() < 2, reason="needs torchrun and two GPUs"),
    pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed"),
]
CONFIG = "profile: generic\ninterval_s: 2\ngpu: {backend: nvml}\ntraining: {logs: [train.log, torchrun.out]}\n"
CONFIG += "watchdog: {heartbeat_s: 1}\n"


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


def _finding(out: Path, code: str) -> dict[str, Any] | None:
    return next((r for r in _records(out) if r.get("type") == "finding" and r.get("code") == code), None)


def _steps(run: Path) -> list[str]:
    log = run / "train.log"
    return re.findall(r"step (\d+)/1000", log.read_text()) if log.exists() else []


def _text(path: Path) -> str:
    """The file's text, or nothing before its writer has made it."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


@contextmanager
def _job(tmp_path: Path, mode: str) -> Iterator[tuple[Path, Path]]:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(CONFIG)
    shutil.copy(SCRIPT, run / SCRIPT.name)
    job = subprocess.Popen(
        ["bash", "-c", f"torchrun --nproc-per-node 2 {SCRIPT.name} {mode} > torchrun.out 2>&1; true"],
        cwd=run,
        start_new_session=True,
    )
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [sys.executable, "-m", "rlwatch", "watch", str(run), "--json"], stdout=sink, stderr=subprocess.PIPE
        )
    try:
        yield run, out
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=60)
        kill_job(job)


def test_a_rank_blocked_on_a_socket_is_a_hang_from_the_stacks_in_a_format_never_taught(tmp_path: Path) -> None:
    with _job(tmp_path, "hang") as (run, out):
        wait_until(lambda: "24" in _steps(run), 300, 0.5)
        # The heartbeat keeps writing: the last step's time is the one its line carries.
        line = next(x for x in (run / "train.log").read_text().splitlines() if "step 24/1000" in x)
        last_step = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
        finding = wait_until(lambda: _finding(out, "hung"), 300, 1)
        declared = time.time() - last_step
        assert _steps(run)[-1] == "24"
    message = finding["message"]
    assert declared < 300, f"declared {declared:.0f} s after the last step"
    assert "rank 1 has been in fetch_batch_from_service (" in message and "stack_ranks_gpu.py:" in message, message
    assert "rank 0 waits for it in" in message, message
    print(json.dumps({"hang_declared_after_s": round(declared, 1), "finding": message}))


def test_a_rank_killed_mid_collective_is_a_crash_naming_it_never_a_hang(tmp_path: Path) -> None:
    with _job(tmp_path, "kill") as (run, out):
        said = wait_until(lambda: re.search(r"rank 1 pid (\d+) waits", _text(run / "torchrun.out")), 300, 0.5)
        time.sleep(3)  # rank 0 is in its all-reduce by now (its step takes well under a second)
        os.kill(int(said.group(1)), signal.SIGKILL)  # a rank of the job this test started
        killed = time.time()

        def ended() -> dict[str, Any] | None:
            states = [r["run_state"] for r in _records(out) if r.get("type") == "run_state" and r.get("run_state")]
            return states[-1] if states and states[-1].get("state") in ("crashed", "stopped") else None

        wait_until(ended, 300, 1)
        noticed = time.time() - killed

        def crashed() -> dict[str, Any] | None:
            # torchrun's report (rank 1's signal) can come a snapshot after its processes were seen gone: the run
            # may read "stopped" for that moment, and must then read crashed, naming the signal.
            state = ended()
            text = json.dumps(state)
            return state if state and state["state"] == "crashed" and ("SIGKILL" in text or "-9" in text) else None

        state = wait_until(crashed, 60, 1)
        named = time.time() - killed
        hung = _finding(out, "hung")
        states = [r["run_state"]["state"] for r in _records(out) if r.get("type") == "run_state" and r.get("run_state")]
    assert hung is None, hung
    print(json.dumps({"kill_noticed_after_s": round(noticed, 1), "crash_named_after_s": round(named, 1)}))
    print(json.dumps({"states": states, "run_state": state}))


def test_a_rank_slower_by_0_6_s_a_step_is_named_the_straggler_within_two_minutes(tmp_path: Path) -> None:
    with _job(tmp_path, "straggler") as (run, out):
        wait_until(lambda: len(_steps(run)) >= 3, 300, 0.5)
        appeared = time.time()
        finding = wait_until(lambda: _finding(out, "straggler"), 180, 1)
        named = time.time() - appeared
    message = finding["message"]
    assert named < 120 + 15, f"named {named:.0f} s after it appeared"
    assert "for rank 1, which is in decode_and_augment (" in message, message
    assert "rank 0 on GPU 0 at" in message and "rank 1 on GPU 1 at" in message, message
    assert _finding(out, "hung") is None
    print(json.dumps({"straggler_named_after_s": round(named, 1), "finding": message}))
