"""GPU backends: NVML behind a stand-in driver module (this machine has no GPU), the simulator's file, none."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import GpuConfig
from rlwatch.sources.gpu import NoGpuBackend, SimulatedBackend, make_gpu_backend, parse_simulated
from rlwatch.sources.nvml import NvmlBackend, describe_init_error, nvml_query
from tests.simhost import wait_until

GIB = 1024**3


def nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


class FakeNvml:
    """The slice of pynvml the backend uses, with the real NVMLError classes, over made-up boards."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: list[dict[str, Any]], init_error: BaseException | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.init_calls = 0
        self.shutdown_calls = 0
        self.lost: set[int] = set()
        self.unsupported: set[str] = set()
        self.block: threading.Event | None = None

    def _board(self, handle: int, field: str) -> dict[str, Any]:
        if handle in self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if field in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.gpus[handle]

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index in self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def nvmlDeviceGetName(self, h: int) -> str:
        return str(self._board(h, "name")["name"])

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return str(self._board(h, "uuid")["uuid"])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        if self.block is not None:
            self.block.wait()
        return SimpleNamespace(gpu=self._board(h, "util")["util"], memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        board = self._board(h, "memory")
        return SimpleNamespace(used=board["used"], total=board["total"], free=board["total"] - board["used"])

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return int(self._board(h, "temp")["temp"])

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._board(h, "power")["power_mw"])

    def nvmlDeviceGetComputeMode(self, h: int) -> int:
        return int(self._board(h, "mode")["mode"])

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self._board(h, "procs")["procs"]]


def board(i: int, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "NVIDIA H200",
        "uuid": f"GPU-{i:04d}",
        "util": 40 + i,
        "used": (10 + i) * GIB,
        "total": 141 * GIB,
        "temp": 50 + i,
        "power_mw": 310_500 + i,
        "mode": pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
        "procs": [(4000 + i, 3 * GIB)],
    }
    base.update(over)
    return base


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def backend(fake: FakeNvml, clock: FakeClock, timeout: float = 5.0) -> NvmlBackend:
    return NvmlBackend(nvml=fake, clock=clock, query_timeout_s=timeout, retry_s=30.0)


# ------------------------------------------------------------------------------------------------------- NVML
def test_nvml_reports_every_field(clock: FakeClock) -> None:
    fake = FakeNvml([board(0), board(1, mode=pynvml.NVML_COMPUTEMODE_DEFAULT, procs=[(77, None)])])
    nv = backend(fake, clock)
    status = nv.sample()
    assert status.backend == "nvml" and status.available and status.error is None
    g0, g1 = status.gpus
    assert (g0.index, g0.name, g0.uuid) == (0, "NVIDIA H200", "GPU-0000")
    assert g0.util == 40.0
    assert (g0.mem_used_bytes, g0.mem_total_bytes) == (10 * GIB, 141 * GIB)
    assert g0.temp_c == 50.0
    assert g0.power_w == pytest.approx(310.5)
    assert g0.compute_mode == "EXCLUSIVE_PROCESS"
    assert g1.compute_mode == "DEFAULT"
    assert nv.last_processes == {0: {4000: 3 * GIB}, 1: {77: None}}
    nv.close()


def test_unsupported_field_is_none_and_others_stay(clock: FakeClock) -> None:
    fake = FakeNvml([board(0)])
    fake.unsupported = {"power", "temp"}
    status = backend(fake, clock).sample()
    (g,) = status.gpus
    assert g.power_w is None and g.temp_c is None
    assert g.util == 40.0 and g.name == "NVIDIA H200"
    assert status.available and status.error is None


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), "NVML library not found"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH), "driver/library version mismatch"),
        (pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED), "NVML init failed: driver not loaded"),
        (OSError("libnvidia-ml.so.1: cannot open shared object file"), "NVML init failed: libnvidia-ml.so.1"),
    ],
)
def test_init_failures_are_one_line(clock: FakeClock, error: BaseException, text: str) -> None:
    status = backend(FakeNvml([board(0)], init_error=error), clock).sample()
    assert not status.available
    assert status.gpus == ()
    assert status.error is not None and status.error.startswith(text) and "\n" not in status.error


def test_init_is_retried_later(clock: FakeClock) -> None:
    fake = FakeNvml([board(0)], init_error=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    nv = backend(fake, clock)
    assert not nv.sample().available
    assert not nv.sample().available
    assert fake.init_calls == 1  # not hammered every tick
    fake.init_error = None
    clock.advance(31)
    status = nv.sample()
    assert status.available and status.gpus[0].name == "NVIDIA H200"
    assert fake.init_calls == 2


def test_lost_gpu_blanks_only_itself_and_comes_back(clock: FakeClock) -> None:
    fake = FakeNvml([board(0), board(1)])
    nv = backend(fake, clock)
    assert nv.sample().gpus[1].util == 41.0
    fake.lost = {1}
    status = nv.sample()
    g0, g1 = status.gpus
    assert g0.util == 40.0 and g0.mem_used_bytes == 10 * GIB
    assert (g1.name, g1.util, g1.mem_used_bytes, g1.temp_c, g1.power_w) == (None, None, None, None, None)
    assert status.available
    assert status.error is not None and "GPU 1" in status.error and "lost" in status.error
    fake.lost = set()
    clock.advance(31)
    status = nv.sample()
    assert status.gpus[1].util == 41.0
    assert status.error is None
    assert fake.shutdown_calls == 1 and fake.init_calls == 2  # re-initialised to find it again


def test_hung_query_keeps_last_values_marked_stale(clock: FakeClock) -> None:
    fake = FakeNvml([board(0)])
    nv = backend(fake, clock, timeout=0.2)
    assert nv.sample().gpus[0].util == 40.0
    fake.block = threading.Event()
    clock.advance(5)
    stale = nv.sample()
    assert stale.available and stale.gpus[0].util == 40.0
    assert stale.error is not None and stale.error.startswith("stale") and "0.2s" in stale.error
    again = nv.sample()  # the driver is still stuck: answered at once from the last values
    assert again.error is not None and "stale" in again.error
    fake.gpus[0]["util"] = 90
    fake.block.set()
    assert wait_until(lambda: nv.sample().error is None)
    assert nv.sample().gpus[0].util == 90.0
    nv.close()


def test_hung_first_query_is_unavailable(clock: FakeClock) -> None:
    fake = FakeNvml([board(0)])
    fake.block = threading.Event()
    nv = backend(fake, clock, timeout=0.1)
    status = nv.sample()
    assert not status.available and status.error == "NVML did not answer within 0.1s"
    fake.block.set()
    nv.close()


def test_nvml_query_swallows_everything() -> None:
    errors: list[BaseException] = []

    def lost() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    def broken() -> None:
        raise OSError("device gone")

    assert nvml_query(lost, errors=errors) is None
    assert nvml_query(broken, default=-1, errors=errors) == -1
    assert nvml_query(int, "7") == 7
    assert nvml_query(int, "x", default=0) == 0
    assert [type(e).__name__ for e in errors] == ["NVMLError_GpuIsLost", "OSError"]


def test_describe_import_error() -> None:
    assert describe_init_error(ImportError("No module named 'pynvml'")) == "NVML library not found"


def test_closed_backend_says_so(clock: FakeClock) -> None:
    fake = FakeNvml([board(0)])
    nv = backend(fake, clock)
    nv.sample()
    nv.close()
    nv.close()
    assert fake.shutdown_calls == 1
    status = nv.sample()
    assert not status.available and status.error is not None and "closed" in status.error


@pytest.mark.skipif(nvml_works(), reason="this machine has a working NVML")
def test_real_nvml_without_a_driver() -> None:
    nv = NvmlBackend(query_timeout_s=5.0)
    status = nv.sample()
    assert status == status.__class__(backend="nvml", available=False, error="NVML library not found")
    nv.close()


# -------------------------------------------------------------------------------------------------- factory
def test_make_backend_none(tmp_path: Path) -> None:
    gpu = make_gpu_backend(GpuConfig(backend="none"), tmp_path)
    assert isinstance(gpu, NoGpuBackend)
    status = gpu.sample()
    assert (status.backend, status.available, status.error) == ("none", False, "no GPU backend")
    assert gpu.last_processes == {}


@pytest.mark.skipif(nvml_works(), reason="this machine has a working NVML")
def test_make_backend_auto_without_gpu_falls_back_to_none(tmp_path: Path) -> None:
    gpu = make_gpu_backend(GpuConfig(backend="auto"), tmp_path)
    status = gpu.sample()
    assert status.backend == "none" and not status.available
    assert status.error == "no GPU backend (NVML library not found)"


def test_make_backend_nvml_is_nvml_even_when_it_fails(tmp_path: Path) -> None:
    gpu = make_gpu_backend(GpuConfig(backend="nvml", query_timeout_s=5.0), tmp_path)
    try:
        assert gpu.name == "nvml"
        assert gpu.sample().backend == "nvml"
    finally:
        gpu.close()


def test_make_backend_simulated_resolves_against_the_run_dir(tmp_path: Path) -> None:
    write_state(tmp_path / ".sim" / "gpu_state.json", time.time())
    gpu = make_gpu_backend(GpuConfig(backend="simulated", simulated_state=".sim/gpu_state.json"), tmp_path)
    status = gpu.sample()
    assert status.backend == "simulated" and status.available
    assert status.gpus[0].name == "Simulated H200"


# ------------------------------------------------------------------------------------------------ simulated
SIM_GPU = {
    "index": 0,
    "name": "Simulated H200",
    "uuid": "GPU-sim-0",
    "util": 37.0,
    "mem_used_bytes": 1234,
    "mem_total_bytes": 150323855360,
    "temp_c": 51,
    "power_w": 310.5,
    "compute_mode": "EXCLUSIVE_PROCESS",
    "processes": [{"pid": 4242, "used_bytes": 1000}],
}


def write_state(path: Path, when: float, gpus: list[Any] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"time": when, "gpus": [SIM_GPU] if gpus is None else gpus}))
    tmp.replace(path)


def test_simulated_reads_the_documented_format(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "gpu_state.json"
    write_state(path, clock.time())
    sim = SimulatedBackend(path, clock=clock)
    status = sim.sample()
    assert status.available and status.error is None and status.backend == "simulated"
    (g,) = status.gpus
    assert (g.index, g.name, g.uuid, g.util) == (0, "Simulated H200", "GPU-sim-0", 37.0)
    assert (g.mem_used_bytes, g.mem_total_bytes, g.temp_c, g.power_w) == (1234, 150323855360, 51.0, 310.5)
    assert g.compute_mode == "EXCLUSIVE_PROCESS"
    assert sim.last_processes == {0: {4242: 1000}}


def test_simulated_missing_fields_are_none(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "gpu_state.json"
    write_state(path, clock.time(), [{"index": 2, "util": "busy", "processes": [{"pid": 5}, "junk", {"pid": -1}]}, 7])
    sim = SimulatedBackend(path, clock=clock)
    (g,) = sim.sample().gpus
    assert g.index == 2
    assert (g.name, g.util, g.mem_used_bytes, g.temp_c, g.power_w, g.compute_mode) == (None,) * 6
    assert sim.last_processes == {2: {5: None}}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "not found"),
        ("", "not valid JSON"),
        ('{"time": 1, "gpus": [{"index": 0, "na', "not valid JSON"),
        ("\xff\xfe garbage", "not valid JSON"),
        ('{"time": 1}', "no 'gpus' list"),
        ("[1, 2]", "no 'gpus' list"),
    ],
)
def test_simulated_bad_files_are_unavailable(
    tmp_path: Path, clock: FakeClock, content: str | None, needle: str
) -> None:
    path = tmp_path / "gpu_state.json"
    if content is not None:
        path.write_text(content)
    status = SimulatedBackend(path, clock=clock).sample()
    assert not status.available and status.gpus == ()
    assert status.error is not None and needle in status.error and "\n" not in status.error


def test_simulated_invalid_utf8(tmp_path: Path, clock: FakeClock) -> None:
    (tmp_path / "gpu_state.json").write_bytes(b'{"gpus": [\xff\xfe')
    status = SimulatedBackend(tmp_path / "gpu_state.json", clock=clock).sample()
    assert not status.available and status.error is not None and "\n" not in status.error


def test_simulated_unreadable_file(tmp_path: Path, clock: FakeClock) -> None:
    (tmp_path / "gpu_state.json").mkdir()
    status = SimulatedBackend(tmp_path / "gpu_state.json", clock=clock).sample()
    assert not status.available and status.error is not None and "not readable" in status.error


def test_simulated_state_that_stopped_updating_is_stale(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "gpu_state.json"
    write_state(path, clock.time())
    sim = SimulatedBackend(path, clock=clock)
    clock.advance(60)
    status = sim.sample()
    assert status.available and status.gpus
    assert status.error == "stale: simulated GPU state is 60s old"


def test_simulated_recovers_after_a_bad_read(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "gpu_state.json"
    path.write_text("{")
    sim = SimulatedBackend(path, clock=clock)
    assert not sim.sample().available and sim.last_processes == {}
    write_state(path, clock.time())
    assert sim.sample().available and sim.last_processes == {0: {4242: 1000}}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from([*SIM_GPU, "gpus"]), inner),
    max_leaves=20,
)


@given(st.dictionaries(st.sampled_from(["time", "gpus"]), json_values | st.lists(json_values, max_size=3)))
def test_parse_simulated_never_raises(data: dict[str, Any]) -> None:
    parsed = parse_simulated(data)
    if parsed is not None:
        gpus, procs = parsed
        assert all(g.util is None or isinstance(g.util, float) for g in gpus)
        assert all(pid > 0 for per_gpu in procs.values() for pid in per_gpu)
