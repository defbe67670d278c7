"""A GPU's hardware health through NVML (a stand-in driver module with pynvml's real error classes: this machine has
no GPU) and through the simulator's state file: every condition DCGM's health checks look for can be produced, each
field a board does not support is None, a GPU lost on any call is lost, and Xids arrive through the event set."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import GpuHealth, GpuState, GpuStatus, Snapshot
from rlwatch.engine.diagnosis import Context, diagnose
from rlwatch.sources.gpu import SimulatedBackend, parse_health
from rlwatch.sources.nvml import HEALTH_EVERY_S, NvmlBackend, clock_event_names
from tests.sources.test_gpu_source import FakeNvml, board

HEALTHY: dict[str, Any] = {
    "pci": "00000000:3B:00.0",
    "ecc": [1, 1],
    "ecc_counts": {(0, 0): 0, (1, 0): 0, (0, 1): 3, (1, 1): 0},
    "retired": None,  # Hopper: no page retirement, rows are remapped (NOT_SUPPORTED)
    "retired_pending": None,
    "remap": (0, 0, 0, 0),
    "gen": (5, 5),
    "width": (16, 16),
    "reasons": 0x1,  # idle
}


class HealthNvml(FakeNvml):
    """FakeNvml plus the health queries, the event set and nvmlDeviceGetIndex; ``None`` means NOT_SUPPORTED."""

    def __init__(self, gpus: list[dict[str, Any]]) -> None:
        super().__init__(gpus)
        self.queue: list[tuple[int, int]] = []  # (gpu index, xid) events waiting
        self.register_error: int | None = None
        self.registered: list[int] = []
        self.lost_later: set[int] = set()  # handle works, later calls say the GPU is lost

    def _health(self, h: int, key: str) -> Any:
        if h in self.lost_later:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        value = self.gpus[h].get("health", HEALTHY).get(key, HEALTHY[key])
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._health(h, "pci").encode())

    def nvmlDeviceGetEccMode(self, h: int) -> list[int]:
        return list(self._health(h, "ecc"))

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return int(self._health(h, "ecc_counts")[(kind, counter)])

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        return list(range(self._health(h, "retired")[cause]))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return int(self._health(h, "retired_pending"))

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return tuple(self._health(h, "remap"))  # type: ignore[return-value]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return int(self._health(h, "gen")[0])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return int(self._health(h, "gen")[1])

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return int(self._health(h, "width")[0])

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return int(self._health(h, "width")[1])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(self._health(h, "reasons"))

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, kinds: int, events: str) -> None:
        assert kinds == pynvml.nvmlEventTypeXidCriticalError and events == "event-set"
        if self.register_error is not None:
            raise pynvml.NVMLError(self.register_error)
        self.registered.append(h)

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0  # never waits in the sampling loop
        if not self.queue:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.queue.pop(0)
        return SimpleNamespace(device=index, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid)

    def nvmlDeviceGetIndex(self, h: int) -> int:
        return h

    def nvmlEventSetFree(self, events: str) -> None:
        return None


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def sample(nv: HealthNvml, clock: FakeClock) -> GpuStatus:
    backend = NvmlBackend(nvml=nv, clock=clock, query_timeout_s=5.0)
    try:
        return backend.sample()
    finally:
        backend.close()


def test_a_healthy_hopper_reads_every_field_and_says_so(clock: FakeClock) -> None:
    status = sample(HealthNvml([board(0)]), clock)
    h = status.gpus[0].health
    assert h is not None and status.error is None
    assert h == GpuHealth(
        pci_bus_id="00000000:3B:00.0",
        ecc_enabled=True,
        ecc_volatile_corrected=0,
        ecc_volatile_uncorrected=0,
        ecc_aggregate_corrected=3,
        ecc_aggregate_uncorrected=0,
        retired_sbe=None,
        retired_dbe=None,
        retired_pending=None,
        remap_correctable=0,
        remap_uncorrectable=0,
        remap_pending=False,
        remap_failure=False,
        pcie_gen=5,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
        clock_events=("idle",),
    )
    snap = Snapshot(host="h", time=clock.time(), profile="generic", run_dir="/r", gpu=status)
    assert diagnose(snap, Context()) == ()


def test_each_fault_dcgm_looks_for_is_read(clock: FakeClock) -> None:
    sick = {
        **HEALTHY,
        "ecc_counts": {(0, 0): 12, (1, 0): 2, (0, 1): 40, (1, 1): 5},
        "retired": {0: 3, 1: 61},
        "retired_pending": 1,
        "remap": (4, 9, 1, 1),
        "gen": (3, 5),
        "width": (8, 16),
        "reasons": 0x8 | 0x40 | 0x4,
    }
    h = sample(HealthNvml([board(0, health=sick)]), clock).gpus[0].health
    assert h is not None
    assert (h.ecc_volatile_corrected, h.ecc_volatile_uncorrected) == (12, 2)
    assert (h.ecc_aggregate_corrected, h.ecc_aggregate_uncorrected) == (40, 5)
    assert (h.retired_sbe, h.retired_dbe, h.retired_pending) == (3, 61, True)
    assert (h.remap_correctable, h.remap_uncorrectable, h.remap_pending, h.remap_failure) == (4, 9, True, True)
    assert (h.pcie_gen, h.pcie_gen_max, h.pcie_width, h.pcie_width_max) == (3, 5, 8, 16)
    assert h.clock_events == ("sw_power_cap", "hw_slowdown", "hw_thermal")


def test_a_gpu_lost_on_any_call_is_lost(clock: FakeClock) -> None:
    nv = HealthNvml([board(0), board(1)])
    nv.lost_later.add(1)  # the handle and the basic queries answered; the GPU went on a later call
    status = sample(nv, clock)
    assert status.gpus[0].health is not None and status.gpus[0].health.lost is None
    lost = status.gpus[1].health
    assert lost is not None and lost.lost is not None and "GPU is lost" in lost.lost
    assert status.error is not None and "GPU 1" in status.error
    nv2 = HealthNvml([board(0)])
    nv2.lost.add(0)  # not even a handle
    h = sample(nv2, clock).gpus[0].health
    assert h is not None and h.lost is not None


def test_xid_events_arrive_without_waiting_and_are_kept(clock: FakeClock) -> None:
    nv = HealthNvml([board(0), board(1)])
    backend = NvmlBackend(nvml=nv, clock=clock, query_timeout_s=5.0)
    try:
        assert backend.sample().gpus[1].health.xids == ()  # type: ignore[union-attr]
        assert nv.registered == [0, 1]
        nv.queue += [(1, 79), (1, 48)]
        clock.advance(1)
        status = backend.sample()
        xids = status.gpus[1].health.xids  # type: ignore[union-attr]
        assert [(e.xid, e.gpu, e.source, e.pci) for e in xids] == [
            (79, 1, "nvml", "0000:3b:00"),
            (48, 1, "nvml", "0000:3b:00"),
        ]
        assert status.gpus[0].health.xids == ()  # type: ignore[union-attr]
        clock.advance(1)
        assert len(backend.sample().gpus[1].health.xids) == 2  # type: ignore[union-attr]
    finally:
        backend.close()


def test_events_not_allowed_here_leave_everything_else_working(clock: FakeClock) -> None:
    nv = HealthNvml([board(0)])
    nv.register_error = pynvml.NVML_ERROR_NOT_SUPPORTED
    status = sample(nv, clock)
    assert status.available and status.error is None and status.gpus[0].health is not None


def test_health_is_read_again_only_every_few_seconds(clock: FakeClock) -> None:
    nv = HealthNvml([board(0)])
    backend = NvmlBackend(nvml=nv, clock=clock, query_timeout_s=5.0)
    try:
        backend.sample()
        nv.gpus[0]["health"] = {**HEALTHY, "ecc_counts": {(0, 0): 0, (1, 0): 7, (0, 1): 3, (1, 1): 7}}
        clock.advance(1)
        assert backend.sample().gpus[0].health.ecc_volatile_uncorrected == 0  # type: ignore[union-attr]
        clock.advance(HEALTH_EVERY_S)
        assert backend.sample().gpus[0].health.ecc_volatile_uncorrected == 7  # type: ignore[union-attr]
    finally:
        backend.close()


def test_a_driver_without_the_health_queries_still_reports_the_gpu(clock: FakeClock) -> None:
    status = sample(FakeNvml([board(0)]), clock)  # type: ignore[arg-type]
    h = status.gpus[0].health
    assert status.error is None and h is not None and h.ecc_volatile_uncorrected is None and h.lost is None


def test_clock_event_names() -> None:
    assert clock_event_names(0) == ()
    assert clock_event_names(0x80 | 0x20) == ("sw_thermal", "hw_power_brake")


# ----------------------------------------------------------------------------------------------------- simulated
def test_the_simulated_gpu_can_show_every_condition(tmp_path: Path, clock: FakeClock) -> None:
    health = {
        "pci_bus_id": "00000000:3B:00.0",
        "ecc_enabled": True,
        "ecc_volatile_uncorrected": 2,
        "ecc_volatile_corrected": 5,
        "ecc_aggregate_uncorrected": 9,
        "ecc_aggregate_corrected": 50,
        "retired_sbe": 1,
        "retired_dbe": 62,
        "retired_pending": True,
        "remap_correctable": 1,
        "remap_uncorrectable": 3,
        "remap_pending": True,
        "remap_failure": True,
        "pcie_gen": 3,
        "pcie_gen_max": 5,
        "pcie_width": 8,
        "pcie_width_max": 16,
        "clock_events": ["hw_thermal"],
        "lost": True,
        "xids": [{"xid": 79, "time": 5.0}, {"xid": "junk"}],
    }
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"time": clock.time(), "gpus": [{"index": 0, "health": health}]}))
    h = SimulatedBackend(state, clock=clock).sample().gpus[0].health
    assert h is not None
    for key, value in health.items():
        if key not in ("lost", "xids", "clock_events"):
            assert getattr(h, key) == value, key
    assert h.clock_events == ("hw_thermal",) and h.lost == "GPU is lost"
    assert [(e.xid, e.time, e.gpu, e.pci) for e in h.xids] == [(79, 5.0, 0, "0000:3b:00")]


def test_simulated_health_with_wrong_types_is_none_not_an_error() -> None:
    h = parse_health({"ecc_volatile_uncorrected": "two", "remap_pending": 1, "lost": 7, "xids": "x"}, 0)
    assert h == GpuHealth()
    assert parse_health("nope", 0) is None


def test_every_simulated_condition_leads_to_its_finding(clock: FakeClock) -> None:
    def finding(**fields: Any) -> set[str]:
        gpu = GpuState(0, "H100", None, 90.0, None, None, 80.0, 650.0, None, health=GpuHealth(**fields))
        snap = Snapshot(
            host="h", time=clock.time(), profile="generic", run_dir="/r", gpu=GpuStatus("nvml", True, None, (gpu,))
        )
        return {f"{f.code}:{f.severity.value}" for f in diagnose(snap, Context())}

    assert finding(lost="GPU is lost") == {"gpu_lost:critical"}
    assert finding(ecc_volatile_uncorrected=1) == {"gpu_memory_fault:critical"}
    assert finding(remap_failure=True) == {"gpu_memory_fault:critical"}
    assert finding(retired_dbe=60, retired_sbe=3) == {"gpu_memory_fault:critical"}
    assert finding(remap_pending=True) == {"gpu_memory_pending:warning"}
    assert finding(retired_pending=True) == {"gpu_memory_pending:warning"}
    assert finding(ecc_aggregate_uncorrected=4, ecc_volatile_uncorrected=0) == {"gpu_memory_history:info"}
    assert finding(pcie_width=8, pcie_width_max=16) == {"gpu_pcie_degraded:warning"}
    assert finding(pcie_gen=3, pcie_gen_max=5) == {"gpu_pcie_degraded:warning"}  # 90 % busy
    assert finding(clock_events=("hw_power_brake",)) == {"gpu_throttled:warning"}
    assert finding(clock_events=("idle", "sw_power_cap")) == set()  # a GPU at its power cap runs as designed
    assert finding() == set()
