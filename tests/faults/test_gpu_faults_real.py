"""GPU faults on a real NVIDIA GPU through the real driver (skipped where NVML does not work).

What a machine cannot be made to do on purpose (a driver/library mismatch, a GPU falling off the bus) is covered
with a stand-in driver in ``test_gpu_faults.py``; here the real library is driven into the faults it can reach:
an init/shutdown cycle under the backend's feet, a GPU index that does not exist, a query while another process
holds the device, and the whole report on top of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlwatch.sources.holders import find_holders
from rlwatch.sources.nvml import NvmlBackend
from tests.faults.conftest import FaultRow
from tests.simhost import wait_until

pytestmark = [pytest.mark.gpu, pytest.mark.faults]


def _nvml() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception:
        return None
    return pynvml


pynvml = _nvml()
if pynvml is None:
    pytest.skip("needs a real NVIDIA GPU with NVML", allow_module_level=True)


class OneMoreGpu:
    """The real pynvml, except that it counts one GPU more than there is: the extra index is a real driver error."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def nvmlDeviceGetCount(self) -> int:
        return int(self._real.nvmlDeviceGetCount()) + 1


@pytest.fixture
def backend() -> Iterator[NvmlBackend]:
    nv = NvmlBackend(query_timeout_s=10.0, retry_s=0.5)
    yield nv
    nv.close()


def test_init_shutdown_cycle_under_the_backend(backend: NvmlBackend, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "GPU (real): NVML shut down under rlwatch (nvmlInit/nvmlShutdown cycle)",
        "the GPU panel says NVML fails, then re-initialises by itself",
    )
    first = backend.sample()
    assert first.available and first.gpus, first.error
    # Another user of the library in this process shuts it down once too often: every handle is now invalid.
    pynvml.nvmlShutdown()
    broken = backend.sample()
    assert broken.error is not None
    row.saw(f"after an extra nvmlShutdown: available={broken.available}, error {broken.error!r}")
    assert wait_until(lambda: backend.sample().error is None, 15)
    again = backend.sample()
    assert again.available and len(again.gpus) == len(first.gpus)
    row.saw(f"re-initialised within the retry interval: {len(again.gpus)} GPU(s) back, error cleared")


def test_gpu_index_that_does_not_exist(fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "GPU (real): a GPU index that does not exist",
        "that index blank with the driver's error; every real GPU reported in full",
    )
    nv = NvmlBackend(nvml=OneMoreGpu(pynvml), query_timeout_s=10.0)
    try:
        status = nv.sample()
    finally:
        nv.close()
    *real, ghost = status.gpus
    assert real and all(g.name and g.mem_total_bytes for g in real)
    assert (ghost.name, ghost.util, ghost.mem_total_bytes) == (None, None, None)
    assert status.error is not None and f"GPU {ghost.index}" in status.error
    row.saw(f"{len(real)} real GPU(s) full; index {ghost.index}: {status.error!r}")


def test_query_while_another_process_holds_the_gpu(
    tmp_path: Path, backend: NvmlBackend, fault_row: Callable[[str, str], FaultRow]
) -> None:
    row = fault_row(
        "GPU (real): queried while another process holds the device",
        "NVML answers; the holder is found through /proc; the report lists it",
    )
    device = "/dev/nvidia0"
    if not os.path.exists(device):
        pytest.skip(f"{device} is not visible here")
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import sys; f = open({device!r}, 'rb'); print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        status = backend.sample()
        assert status.available and status.gpus, status.error
        assert holder.pid in find_holders("/dev/nvidia*")
        (tmp_path / "rlwatch.yaml").write_text("gpu:\n  backend: nvml\n")
        out = subprocess.run(
            [sys.executable, "-m", "rlwatch", "report", str(tmp_path), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        # 3: no run in the directory, so whether one progresses is unknown; the GPUs are what this test reads
        assert out.returncode in (0, 1, 3), out.stderr
        rep = json.loads(out.stdout)
        assert rep["gpus"] and rep["gpus"][0]["name"]
        listed = {pid for g in rep["gpus"] for pid in g["holders"]}
        assert holder.pid in listed
        row.saw(
            f"{rep['gpus'][0]['name']}: util {rep['gpus'][0]['util']}%, holder pid {holder.pid} listed "
            f"(zombies: {[z['pid'] for z in rep['zombies']]})"
        )
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
