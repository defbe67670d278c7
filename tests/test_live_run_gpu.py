"""The host that lost a live run, rebuilt on a real GPU (skipped where there is none).

A training script started as ``python3 train.py`` in the run directory, matching no profile, writing ``train.log``
and holding GPU memory, beside an orphaned leftover that holds more. rlwatch must find the live run by evidence, call
only the leftover a stray, and ``kill-zombies --yes`` must stop the leftover and nothing else. A second test puts
rlwatch in its own PID namespace, like a restarted container, with the leftover outside it: the memory is reported
as held outside, and no kill is advised or attempted.
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
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.simhost import StartedProcesses, wait_until

pytestmark = pytest.mark.gpu

GIB = 1024**3
RLWATCH = [sys.executable, "-m", "rlwatch"]

# A leftover of an earlier attempt: double-forked so nothing remembers it, holding GPU memory until killed.
LEFTOVER = """
import os, sys
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
import torch
x = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
open(sys.argv[2], "w").write(str(os.getpid()))
import time
while True:
    time.sleep(3600)
"""
# An unremarkable trainer: nothing in its command line says "training".
TRAIN = """
import time, torch
x = torch.empty(1536 << 20, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
step = 0
while True:
    step += 1
    print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    time.sleep(0.5)
"""


def _gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


if not _gpu():
    pytest.skip("needs a real NVIDIA GPU with NVML and torch", allow_module_level=True)


def _env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture
def started() -> Iterator[StartedProcesses]:
    s = StartedProcesses()
    yield s
    s.kill_all()


def leftover(tmp_path: Path, started: StartedProcesses, mib: int = 2816) -> int:
    pidfile = tmp_path / "leftover.pid"
    subprocess.run([sys.executable, "-c", LEFTOVER, str(mib), str(pidfile)], cwd=tmp_path, check=True, timeout=60)
    pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text(), timeout=60))
    started.add(pid)
    return pid


def report(run_dir: Path, *prefix: str) -> dict[str, Any]:
    out = subprocess.run(
        [*prefix, *RLWATCH, "report", str(run_dir), "--json"], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert out.returncode in (0, 1), out.stderr
    return dict(json.loads(out.stdout))


def test_kill_zombies_stops_the_orphan_and_never_the_live_run(tmp_path: Path, started: StartedProcesses) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    orphan = leftover(tmp_path, started)
    assert wait_until(lambda: psutil.Process(orphan).ppid() == 1)
    born = psutil.Process(orphan).create_time()
    assert wait_until(lambda: time.time() > born + 0.05)
    (run_dir / "train.py").write_text(TRAIN)
    with open(run_dir / "train.log", "ab") as log:
        trainer = subprocess.Popen(["python3", "train.py"], cwd=run_dir, stdout=log, stderr=subprocess.STDOUT)
    started.add(trainer.pid)
    assert wait_until(lambda: b"step 2 " in (run_dir / "train.log").read_bytes(), timeout=120)

    rep = report(run_dir)
    holders = {h["pid"]: h for h in rep["holders"]}
    assert holders[trainer.pid]["status"] == "run", holders[trainer.pid]
    assert "train.log" in holders[trainer.pid]["why"]
    assert holders[orphan]["status"] == "stray", holders[orphan]
    for pid in (trainer.pid, orphan):
        assert holders[pid]["attribution"] == "nvml" and holders[pid]["gpus"] == [0], holders[pid]
    assert [z["pid"] for z in rep["zombies"]] == [orphan]
    print(json.dumps({"holders": rep["holders"], "findings": rep["findings"]}, indent=1))

    dry = subprocess.run(
        [*RLWATCH, "act", "kill-zombies", str(run_dir), "--dry-run"], capture_output=True, text=True, env=_env()
    )
    assert re.findall(r"stop\s+pid (\d+)", dry.stdout) == [str(orphan)], dry.stdout
    act = subprocess.run(
        [*RLWATCH, "act", "kill-zombies", str(run_dir), "--yes"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    print(act.stdout, act.stderr)
    assert act.returncode == 0, act.stdout + act.stderr
    assert wait_until(lambda: not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == "zombie", timeout=30)
    assert trainer.poll() is None, "the live run was stopped"
    size = (run_dir / "train.log").stat().st_size
    assert wait_until(lambda: (run_dir / "train.log").stat().st_size > size, timeout=30)  # and it still trains
    trainer.send_signal(signal.SIGTERM)
    trainer.wait(timeout=30)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1) for a PID namespace")
def test_memory_held_outside_the_namespace_is_reported_not_killed(tmp_path: Path, started: StartedProcesses) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    orphan = leftover(tmp_path, started, mib=6 * 1024)
    ns = ["unshare", "--pid", "--fork", "--mount-proc"]
    rep = report(run_dir, *ns)
    print(json.dumps({"gpus": rep["gpus"], "holders": rep["holders"], "findings": rep["findings"]}, indent=1))
    gpu0 = rep["gpus"][0]
    assert gpu0["outside_bytes"] is not None and gpu0["outside_bytes"] >= 5 * GIB, gpu0
    # NVML lists the outside process under its own pid on some hosts; on an H100 (driver 580.159.04) inside a PID
    # namespace it listed none, and the memory was known only as used beyond what listed processes explain.
    assert gpu0["outside_pids"] in ([], [orphan]), gpu0
    assert rep["holders"] == []
    codes = {f["code"]: f["message"] for f in rep["findings"]}
    assert "gpu_outside" in codes and "restarting the pod" in codes["gpu_outside"]
    assert "gpu_strays" not in codes
    act = subprocess.run(
        [*ns, *RLWATCH, "act", "kill-zombies", str(run_dir), "--yes"], capture_output=True, text=True, env=_env()
    )
    print(act.stdout)
    assert act.returncode == 1 and "outside this container" in act.stdout, act.stdout
    assert psutil.pid_exists(orphan)
