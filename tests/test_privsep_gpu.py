"""On a machine with an NVIDIA GPU: root's rlwatch on another user's run sees the GPU as root does.

The run directory belongs to ``nobody``; a CUDA process of root's, outside the run, holds GPU memory. Root's
``rlwatch report`` on the run works as ``nobody`` (privilege separation), who cannot read root's ``/proc/PID/fd``:
the holder is still found, with its owner, because root's side scans the NVIDIA device nodes and hands over the
pids. NVML is read as ``nobody`` (its device nodes are open to every user). The holder is another user's process,
never the run's, never a stray rlwatch would stop. Only the process this test starts is ever signalled.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.simhost import wait_until
from tests.unprivileged import CAN_DROP_PRIVILEGES, NOBODY, Runtime

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

HOLD = """
import sys, time, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
x.fill_(1)
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(600)
"""


def _gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception:
        return False
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return probe.stdout.strip() == "True"


if not (CAN_DROP_PRIVILEGES and _gpu()):
    pytest.skip("needs root, a second user and a real NVIDIA GPU with NVML and torch", allow_module_level=True)


@pytest.fixture
def holder() -> Iterator[int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd="/", text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_another_users_gpu_holder_is_seen_through_roots_side(separated: Runtime, holder: int) -> None:
    assert NOBODY is not None
    base = Path(tempfile.mkdtemp(prefix="rlwatch-privsep-gpu-", dir="/tmp"))
    try:
        base.chmod(0o755)
        run = base / "run"
        run.mkdir()
        (run / "train.log").write_text("step 1 loss 1.0\nstep 2 loss 0.9\n")
        for path in (run, run / "train.log"):
            os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)

        def report() -> dict[str, Any]:
            out = separated.run_as_root("report", str(run), "--json")
            assert out.returncode in (0, 1, 3), out.stderr
            assert f"works as {NOBODY.pw_name}" in out.stderr
            return dict(json.loads(out.stdout))

        def seen() -> dict[str, Any] | None:
            rep = report()
            rows = [h for h in rep["holders"] if h["pid"] == holder]
            return rep if rows else None

        rep = wait_until(seen, 90)
        row = next(h for h in rep["holders"] if h["pid"] == holder)
        print(json.dumps(row), file=sys.stderr)
        assert row["user"] == "root"
        assert row["status"] == "protected" and "another user" in row["why"]  # shown, never a target
        sources = {s["name"]: s for s in rep["sources"]}
        assert sources["holders"]["ok"], sources["holders"]
    finally:
        shutil.rmtree(base, ignore_errors=True)
