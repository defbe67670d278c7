"""Issue 36 on a real GPU host (skipped elsewhere): torchrun's agent SIGKILLed, its two ranks orphaned and still
training while they hold GPU memory, and a new run started on GPU 0 beside them.

``rlwatch watch --json`` runs from before the kill, so it sees the agent go. The finding that names the earlier
attempt (its ranks, their launcher torchrun and when it went, the memory they hold on GPUs 0-1, the new run sharing
GPU 0, the exact ``kill-zombies --pid`` command) must come while the new run is still alive — before it could fail —
and the new run must not be merged with them. ``kill-zombies`` alone chooses nothing; named, it stops the two ranks
and nothing else. Needs two GPUs, torch with NCCL, and torchrun.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.simhost import StartedProcesses, wait_until

pytestmark = pytest.mark.gpu

RLWATCH = [sys.executable, "-m", "rlwatch"]
GIB = 1024**3

TRAIN = """
import os, time, torch, torch.distributed as dist
rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl")
hold = torch.empty(6 << 30, dtype=torch.uint8, device="cuda")
hold.fill_(1)
x = torch.ones(1024, device="cuda")
log = open("train.log", "a", buffering=1)
step = 0
while True:
    step += 1
    x.fill_(1.0)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"[rank{rank}] Train step {step}/100000 done. loss {1.0 / step:.4f}", file=log)
    time.sleep(0.5)
"""
LIVE = """
import time, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
log = open("train.log", "a", buffering=1)
step = 0
while True:
    step += 1
    print(f"live step {step}/1000 loss 0.5", file=log)
    time.sleep(0.5)
"""


def _gpus() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = int(pynvml.nvmlDeviceGetCount())
        pynvml.nvmlShutdown()
        import torch

        return n if torch.cuda.is_available() else 0
    except Exception:
        return 0


if _gpus() < 2:
    pytest.skip("needs two NVIDIA GPUs with NVML, torch and NCCL", allow_module_level=True)


def _env(**extra: str) -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


@pytest.fixture
def started() -> Iterator[StartedProcesses]:
    s = StartedProcesses()
    yield s
    s.kill_all()


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


@pytest.mark.timeout(600)
def test_torchrun_ranks_orphaned_beside_a_new_run_are_named_before_it_fails(
    tmp_path: Path, started: StartedProcesses
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text("profile: generic\ntraining: {logs: [train.log]}\n")
    (run / "train.py").write_text(TRAIN)
    (run / "live.py").write_text(LIVE)
    torchrun = shutil.which("torchrun")
    agent = subprocess.Popen(
        [
            *([torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]),
            "--nproc-per-node",
            "2",
            "train.py",
        ],
        cwd=run,
        env=_env(CUDA_VISIBLE_DEVICES="0,1"),
        start_new_session=True,  # as a shell with job control starts it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started.add(agent.pid)
    ranks = wait_until(lambda: len(c := psutil.Process(agent.pid).children()) == 2 and c, timeout=60)
    for r in ranks:
        started.add(r.pid)
    rank_pids = sorted(r.pid for r in ranks)
    wait_until(lambda: (run / "train.log").exists() and "[rank1] Train step 3/" in (run / "train.log").read_text(), 180)
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [*RLWATCH, "watch", str(run), "--json"], stdout=sink, stderr=subprocess.DEVNULL, env=_env()
        )
    started.add(watch.pid)
    wait_until(lambda: any((r.get("run_state") or {}).get("state") == "progressing" for r in _records(out)), 120)

    os.kill(agent.pid, signal.SIGKILL)  # the agent only: what a killed tmux pane or Ctrl-\\ leaves
    agent.wait(30)
    wait_until(lambda: all(psutil.Process(pid).ppid() != agent.pid for pid in rank_pids), 30)
    size = (run / "train.log").stat().st_size
    wait_until(lambda: (run / "train.log").stat().st_size > size + 200, 60)  # the ranks train on between themselves

    live = subprocess.Popen(
        [sys.executable, "live.py"],
        cwd=run,
        env=_env(CUDA_VISIBLE_DEVICES="0"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started.add(live.pid)

    def named() -> dict[str, Any] | None:
        return next(
            (r for r in _records(out) if r.get("type") == "finding" and r.get("code") == "earlier_attempt"), None
        )

    finding = wait_until(named, timeout=120, interval=0.5)
    message = finding["message"]
    print(message)
    assert live.poll() is None, "the finding must come while the new run lives, before it can fail"
    assert f"2 processes of an earlier attempt (pid {rank_pids[0]}, {rank_pids[1]}" in message
    assert re.search(rf"their launcher torchrun, pid {agent.pid}, is gone since \d\d:\d\d:\d\d", message), message
    assert f"rlwatch act kill-zombies --pid {rank_pids[0]} --pid {rank_pids[1]}" in message

    # Once the new run holds GPU 0, a report says what they hold and that the new run shares GPU 0 with them
    # (after the fact: the launcher "is gone", with no time).
    wait_until(lambda: "live step 2/" in (run / "train.log").read_text(), 120)

    def report() -> dict[str, Any]:
        out = subprocess.run(
            [*RLWATCH, "report", str(run), "--json"], capture_output=True, text=True, env=_env(), timeout=120
        )
        return dict(json.loads(out.stdout))

    rep = report()
    said = next(f["message"] for f in rep["findings"] if f["code"] == "earlier_attempt")
    print(said)
    assert re.search(r"hold \d+\.\d GB on GPUs 0–1", said), said
    assert f"live.py, pid {live.pid}) shares GPU 0 with them" in said, said
    assert "their launcher torchrun is gone" in said, said
    members = [m["pid"] for m in rep["live_run"]["members"]]
    assert live.pid in members and not set(rank_pids) & set(members), rep["live_run"]
    attempts = rep["live_run"]["attempts"]
    assert [a["state"] for a in attempts] == ["earlier attempt", "live run"], attempts
    assert sorted(attempts[0]["pids"]) == rank_pids and attempts[0]["launcher"]["name"] == "torchrun"
    assert attempts[0]["gpus"] == [0, 1] and attempts[0]["gpu_mem_bytes"] >= 12 * GIB

    # Nothing is chosen unasked: they still write. Named, they are the plan's only targets, with what they hold.
    dry = subprocess.run(
        [*RLWATCH, "act", "kill-zombies", str(run), "--dry-run"], capture_output=True, text=True, env=_env()
    )
    assert not re.findall(r"stop\s+pid (\d+)", dry.stdout), dry.stdout
    named_cmd = [*RLWATCH, "act", "kill-zombies", str(run)] + [a for pid in rank_pids for a in ("--pid", str(pid))]
    plan = subprocess.run([*named_cmd, "--dry-run"], capture_output=True, text=True, env=_env())
    print(plan.stdout)
    assert sorted(int(p) for p in re.findall(r"stop\s+pid (\d+)", plan.stdout)) == rank_pids, plan.stdout
    assert "earlier attempt" in plan.stdout and "GPU" in plan.stdout
    act = subprocess.run([*named_cmd, "--yes"], capture_output=True, text=True, env=_env(), timeout=120)
    print(act.stdout, act.stderr)
    assert act.returncode == 0, act.stdout + act.stderr
    wait_until(lambda: not any(psutil.pid_exists(pid) for pid in rank_pids), 60)
    assert live.poll() is None, "the new run was stopped"
