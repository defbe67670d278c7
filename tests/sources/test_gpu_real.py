"""The NVML backend and the holder scan on a real NVIDIA GPU (skipped where there is none)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from rlwatch.sources.holders import find_holders
from rlwatch.sources.nvml import NvmlBackend
from tests.simhost import wait_until
from tests.sources.test_holders import classify

pytestmark = pytest.mark.gpu

GIB = 1024**3

ALLOCATE = """
import sys, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()
"""


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception:
        return False
    return True


if not _nvml_works():
    pytest.skip("needs a real NVIDIA GPU with NVML", allow_module_level=True)


@pytest.fixture
def nvml() -> Iterator[NvmlBackend]:
    backend = NvmlBackend(query_timeout_s=10.0)
    yield backend
    backend.close()


def test_reports_real_gpus(nvml: NvmlBackend) -> None:
    status = nvml.sample()
    assert status.backend == "nvml" and status.available, status.error
    assert len(status.gpus) >= 1
    for gpu in status.gpus:
        assert gpu.name
        assert gpu.uuid and gpu.uuid.startswith(("GPU-", "MIG-"))
        assert gpu.mem_total_bytes is not None and gpu.mem_total_bytes > 0
        assert gpu.mem_used_bytes is not None and 0 <= gpu.mem_used_bytes <= gpu.mem_total_bytes
        assert gpu.util is None or 0 <= gpu.util <= 100
        assert gpu.compute_mode in {None, "DEFAULT", "EXCLUSIVE_THREAD", "PROHIBITED", "EXCLUSIVE_PROCESS"}
    assert set(nvml.last_processes) == {g.index for g in status.gpus}


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch to allocate GPU memory")
def test_a_process_allocating_memory_is_seen(nvml: NvmlBackend) -> None:
    nvml.sample()
    pids_before = {pid for per_gpu in nvml.last_processes.values() for pid in per_gpu}
    child = subprocess.Popen(
        [sys.executable, "-c", ALLOCATE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"

        def seen() -> bool:
            # Judged by the new process's own memory, not the total: memory another process frees meanwhile (a
            # leftover of an earlier test going away) would hide the child's allocation in the sum.
            nvml.sample()
            procs = {pid: used for per_gpu in nvml.last_processes.values() for pid, used in per_gpu.items()}
            return any(used is None or used >= GIB for pid, used in procs.items() if pid not in pids_before)

        assert wait_until(seen, 30), nvml.last_processes
        procs = {pid: used for per_gpu in nvml.last_processes.values() for pid, used in per_gpu.items()}
        new = set(procs) - pids_before
        if child.pid in procs:
            used = procs[child.pid]
            assert used is None or used >= GIB
        else:
            # Inside a container the driver reports host pids: then the new pid is the child's host pid.
            assert any(procs[pid] is None or (procs[pid] or 0) >= GIB for pid in new)
        # The /proc scan finds the child by its device descriptors, whatever pids NVML reports.
        holders = find_holders("/dev/nvidia*")
        assert child.pid in holders
        assert any(d.rsplit("/", 1)[-1].removeprefix("nvidia").isdigit() for d in holders[child.pid])
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait(timeout=30)


MONITOR = """
import sys, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
pynvml.nvmlDeviceGetUtilizationRates(h)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch to allocate GPU memory")
def test_a_monitor_reading_nvml_is_protected_while_a_cuda_process_is_a_holder(tmp_path: object) -> None:
    """nvidia-smi, nvitop, glances or another rlwatch hold GPU nodes through NVML: never kill-zombies targets. A CUDA
    process is an ordinary holder: not protected, and here (its starter, this test, is alive) not a stray either."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for code in (MONITOR, ALLOCATE)
    ]
    monitor, cuda = children
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        raw = find_holders("/dev/nvidia*")
        print(
            f"\nmonitor pid {monitor.pid} holds {raw.get(monitor.pid)}\ncuda pid {cuda.pid} holds {raw.get(cuda.pid)}"
        )
        holders = classify(raw, protected_names=())
        assert holders[monitor.pid].protected and "NVML" in holders[monitor.pid].protected
        assert holders[monitor.pid].reason is None
        assert holders[cuda.pid].protected is None and holders[cuda.pid].status == "unknown"
        assert holders[cuda.pid].evidence  # why it cannot be classified, said
    finally:
        for child in children:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait(timeout=30)
