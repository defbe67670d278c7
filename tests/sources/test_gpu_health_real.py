"""A GPU's hardware health through the real NVML (skipped where there is none): every new query answers or says the
board does not support it (never another error), a healthy GPU yields no hardware finding idle or busy, Xid events
are registered or declined without stalling a sample, and the real `rlwatch report --json` carries it all.

Run on a GPU host with ``.venv/bin/pytest -m gpu tests/sources/test_gpu_health_real.py -v``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlwatch.common.state import GpuStatus, Severity, Snapshot
from rlwatch.engine.diagnosis import Context, diagnose
from rlwatch.sources.nvml import NvmlBackend, error_code
from tests.simhost import wait_until

pytestmark = pytest.mark.gpu

HEALTH_CALLS = (
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
)
# What a healthy board may answer: not supported (Hopper has no page retirement), not permitted (a container may not
# register events), unknown function in an older driver, and the event wait's "nothing yet".
ALLOWED = {3, 4, 13, 10}  # NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND, TIMEOUT
HARDWARE = {"gpu_lost", "gpu_memory_fault", "gpu_memory_pending", "gpu_pcie_degraded", "gpu_throttled"}

BUSY = """
import sys, torch
a = torch.randn(8192, 8192, device="cuda")
print("ready", flush=True)
while True:
    a = (a @ a).clamp_(-1, 1)
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


class Recording:
    """pynvml itself, with every failure of a health query recorded (name, NVML error code)."""

    def __init__(self) -> None:
        import pynvml

        self._nv = pynvml
        self.failures: list[tuple[str, int | None]] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._nv, name)
        if name not in HEALTH_CALLS or not callable(value):
            return value

        def call(*args: Any) -> Any:
            try:
                return value(*args)
            except Exception as exc:
                self.failures.append((name, error_code(exc)))
                raise

        return call


@pytest.fixture
def recording() -> Recording:
    return Recording()


@pytest.fixture
def nvml(recording: Recording) -> Iterator[NvmlBackend]:
    backend = NvmlBackend(query_timeout_s=10.0, nvml=recording)
    yield backend
    backend.close()


def hardware_findings(status: GpuStatus) -> list[str]:
    snap = Snapshot(host="h", time=time.time(), profile="generic", run_dir="/r", gpu=status)
    return [
        f"{f.code}: {f.message}"
        for f in diagnose(snap, Context())
        if f.code in HARDWARE and f.severity != Severity.INFO
    ]


def test_every_health_field_reads_without_error(nvml: NvmlBackend, recording: Recording) -> None:
    status = nvml.sample()
    assert status.available and status.error is None, status.error
    for g in status.gpus:
        h = g.health
        assert h is not None, g.index
        print(f"GPU {g.index} {g.name}: {h}")  # for the record (pytest -s)
        assert h.lost is None
        assert h.pci_bus_id and h.pci_bus_id.count(":") == 2
        for value in (
            h.ecc_volatile_corrected,
            h.ecc_volatile_uncorrected,
            h.ecc_aggregate_corrected,
            h.ecc_aggregate_uncorrected,
            h.retired_sbe,
            h.retired_dbe,
            h.remap_correctable,
            h.remap_uncorrectable,
        ):
            assert value is None or value >= 0
        assert h.pcie_gen is not None and h.pcie_gen_max is not None and 1 <= h.pcie_gen <= h.pcie_gen_max
        assert h.pcie_width is not None and h.pcie_width_max is not None and 1 <= h.pcie_width <= h.pcie_width_max
        assert h.clock_events is not None  # "idle" at rest, () or power-cap under load
        if h.ecc_enabled:  # a board with ECC on answers its counters; Hopper remaps rows instead of retiring pages
            assert h.ecc_volatile_uncorrected is not None and h.remap_pending is not None
    unexpected = [(name, code) for name, code in recording.failures if code not in ALLOWED]
    assert not unexpected, unexpected


def test_a_healthy_gpu_has_no_hardware_finding_at_rest(nvml: NvmlBackend) -> None:
    assert hardware_findings(nvml.sample()) == []


def test_xid_events_are_registered_or_declined_without_stalling_a_sample(nvml: NvmlBackend) -> None:
    nvml.sample()
    started = time.monotonic()
    for _ in range(5):
        status = nvml.sample()
    assert (time.monotonic() - started) / 5 < 1.0  # the wait has timeout 0: nothing blocks for an event
    assert status.error is None
    assert all(g.health is not None and g.health.xids == () for g in status.gpus)  # a healthy host has none


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch to load the GPU")
def test_a_busy_healthy_gpu_has_no_hardware_finding(nvml: NvmlBackend) -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"

        def busy() -> GpuStatus | None:
            status = nvml.sample()
            return status if any((g.util or 0) >= 50 for g in status.gpus) else None

        status = wait_until(busy, timeout=60, interval=0.5)
        loaded = [g for g in status.gpus if (g.util or 0) >= 50]
        for g in loaded:
            assert g.health is not None and g.health.pcie_gen == g.health.pcie_gen_max, g.health
        assert hardware_findings(status) == []
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_the_real_report_carries_each_gpus_health(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text("profile: generic\ngpu: {backend: nvml}\n", encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "rlwatch", "report", str(run), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # 3: the directory holds no run, so whether one progresses is unknown; the GPUs' health is what is read here
    assert out.returncode in (0, 1, 3), out.stderr
    rep = json.loads(out.stdout)
    assert rep["gpus"] and all(g["health"] is not None and g["health"]["lost"] is None for g in rep["gpus"])
    assert not [f for f in rep["findings"] if f["code"] in HARDWARE and f["severity"] != "info"], rep["findings"]
    assert rep["kernel"] is not None and rep["limits"]["shm_total_bytes"] is not None
