"""GPU faults behind the NVML backend, seen through a whole engine: the GPU panel degrades, nothing else does.

This machine has no GPU, so NVML is a stand-in module with the real ``pynvml.NVMLError`` classes
(``tests/test_gpu_source.py``'s ``FakeNvml``); the same faults on a real GPU are in ``test_gpu_faults_real.py``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json_dict
from rlwatch.export.stream import changes, plain
from rlwatch.sources.nvml import NvmlBackend
from tests.faults.conftest import FaultRow, make_engine, source_error
from tests.sources.test_gpu_source import FakeNvml, board

pytestmark = pytest.mark.faults

TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom\n'


def gpu_engine(tmp_path: Path, nvml: object, clock: FakeClock, timeout: float = 5.0) -> Engine:
    (tmp_path / "trainer.log").write_text(TRACEBACK)
    backend = NvmlBackend(nvml=nvml, clock=clock, query_timeout_s=timeout, retry_s=30.0)
    return make_engine(
        tmp_path, {"gpu": {"backend": "nvml"}, "training": {"logs": ["*.log"]}}, clock=clock, gpu_backend=backend
    )


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def tracebacks(engine: Engine) -> int:
    return engine.build().events["traceback"].count


@pytest.mark.parametrize(
    ("fault", "error", "shown"),
    [
        ("GPU: NVML library missing", pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), "NVML library not found"),
        (
            "GPU: NVML init fails (driver not loaded)",
            pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED),
            "NVML init failed: driver not loaded",
        ),
        (
            "GPU: driver/library version mismatch",
            pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH),
            "driver/library version mismatch",
        ),
    ],
)
def test_nvml_that_cannot_start(
    tmp_path: Path, fault_row: Callable[[str, str], FaultRow], fault: str, error: BaseException, shown: str
) -> None:
    row = fault_row(fault, "GPU panel and report say why in one line; logs still counted; GPUs appear once fixed")
    clock = FakeClock()
    fake = FakeNvml([board(0)], init_error=error)
    engine = gpu_engine(tmp_path, fake, clock)
    snap = engine.collect_once()
    assert snap.gpu is not None and not snap.gpu.available and snap.gpus == ()
    assert snap.gpu.error == shown
    assert source_error(snap, "gpu") == shown
    report = to_json_dict(snap)
    assert report["gpu_error"] == shown and report["gpus"] == []
    assert snap.events["traceback"].count == 1
    row.saw(f"gpu_error {report['gpu_error']!r}, gpus []; traceback counted")
    append(tmp_path / "trainer.log", TRACEBACK)
    engine.drain_logs()
    assert tracebacks(engine) == 2
    fake.init_error = None
    clock.advance(31)  # NVML init is retried every 30 s, not on every tick
    engine.sample()
    snap = engine.build()
    assert snap.gpu is not None and snap.gpu.available and snap.gpus[0].util == 40.0
    assert source_error(snap, "gpu") is None
    row.saw("after the driver is fixed: GPU 0 back at 40% without a restart")
    engine.stop()


def test_python_bindings_missing(
    tmp_path: Path, fault_row: Callable[[str, str], FaultRow], monkeypatch: pytest.MonkeyPatch
) -> None:
    row = fault_row("GPU: pynvml module not importable", "'NVML library not found', the rest of the report intact")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the import itself fails, as on a host without the bindings
    clock = FakeClock()
    engine = gpu_engine(tmp_path, None, clock)
    snap = engine.collect_once()
    engine.stop()
    assert snap.gpu is not None and snap.gpu.error == "NVML library not found"
    assert json.loads(json.dumps(to_json_dict(snap)))["gpu_error"] == "NVML library not found"
    assert snap.events["traceback"].count == 1 and snap.memory is not None and snap.memory.total_bytes
    row.saw("gpu_error 'NVML library not found'; memory and events still reported")


def test_one_gpu_lost_mid_run_and_back(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    lost = fault_row("GPU: one GPU lost mid-run", "that GPU blank and named in the error; the other GPU stays live")
    back = fault_row("GPU: a lost GPU comes back", "re-initialised within the retry interval, shown again")
    clock = FakeClock()
    fake = FakeNvml([board(0), board(1)])
    engine = gpu_engine(tmp_path, fake, clock)
    snap = engine.collect_once()
    assert [g.util for g in snap.gpus] == [40.0, 41.0]
    fake.lost = {1}
    fake.gpus[0]["util"] = 77
    clock.advance(2)
    engine.sample()
    snap = engine.build()
    g0, g1 = snap.gpus
    assert g0.util == 77.0 and g0.mem_used_bytes == 10 * 1024**3  # the healthy GPU keeps updating
    assert (g1.util, g1.mem_used_bytes, g1.name) == (None, None, None)
    error = source_error(snap, "gpu") or (snap.gpu.error if snap.gpu else None)
    assert error is not None and "GPU 1" in error
    report = to_json_dict(snap)
    assert report["gpus"][1]["util"] is None and report["gpus"][0]["util"] == 77.0
    lost.saw(f"GPU 0 at 77%, GPU 1 null; error {error!r}")
    fake.lost = set()
    clock.advance(31)
    engine.sample()
    snap = engine.build()
    assert [g.util for g in snap.gpus] == [77.0, 41.0]
    assert snap.gpu is not None and snap.gpu.error is None
    assert fake.shutdown_calls == 1 and fake.init_calls == 2
    back.saw("after 31 s: nvmlShutdown+nvmlInit, GPU 1 at 41% again, error cleared")
    engine.stop()


def test_single_queries_failing(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row("GPU: single NVML queries fail", "only those fields are null; the GPU and its other fields stay")
    clock = FakeClock()
    fake = FakeNvml([board(0)])
    fake.unsupported = {"power", "temp", "mode"}
    engine = gpu_engine(tmp_path, fake, clock)
    snap = engine.collect_once()
    engine.stop()
    (g,) = snap.gpus
    assert (g.power_w, g.temp_c, g.compute_mode) == (None, None, None)
    assert g.util == 40.0 and g.mem_total_bytes == 141 * 1024**3 and g.name == "NVIDIA H200"
    assert to_json_dict(snap)["gpus"][0]["power_w"] is None
    row.saw("power/temp/compute mode null, util 40% and memory shown")


def test_hanging_query(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "GPU: an NVML query hangs",
        "last values kept, marked stale, within the query timeout; logs keep flowing; fresh once it answers",
    )
    clock = FakeClock()
    fake = FakeNvml([board(0)])
    engine = gpu_engine(tmp_path, fake, clock, timeout=0.2)
    engine.collect_once()
    fake.block = threading.Event()
    try:
        started = time.monotonic()
        engine.sample()
        took = time.monotonic() - started
        append(tmp_path / "trainer.log", TRACEBACK)
        engine.drain_logs()
        snap = engine.build()
        assert took < 2.0
        assert snap.gpus[0].util == 40.0
        assert snap.gpu is not None and snap.gpu.error is not None and snap.gpu.error.startswith("stale")
        assert snap.events["traceback"].count == 2
        row.saw(f"sample returned in {took:.2f}s with {snap.gpu.error!r}; new traceback counted")
        started = time.monotonic()
        engine.sample()  # still hung: answered at once from the last values
        assert time.monotonic() - started < 1.0
    finally:
        fake.gpus[0]["util"] = 90
        fake.block.set()
    deadline = time.monotonic() + 5
    while True:
        engine.sample()
        snap = engine.build()
        if (snap.gpu is not None and snap.gpu.error is None) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert snap.gpus[0].util == 90.0 and snap.gpu is not None and snap.gpu.error is None
    row.saw("after the driver answers: 90%, not stale")
    engine.stop()


def test_watch_says_a_stale_gpu_once(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "GPU: a driver hung for many ticks, seen by `rlwatch watch`",
        "one 'gpu NOT AVAILABLE' record when it starts, one 'available again' when it ends, not one per tick",
    )
    clock = FakeClock()
    fake = FakeNvml([board(0)])
    engine = gpu_engine(tmp_path, fake, clock, timeout=0.1)
    prev = engine.collect_once()
    fake.block = threading.Event()
    records = []
    try:
        for _ in range(5):
            clock.advance(7)  # the "values from Ns ago" in the error changes every tick
            engine.sample()
            snap = engine.build()
            records += [r for r in changes(prev, snap) if r["type"] == "source"]
            prev = snap
    finally:
        fake.block.set()
    deadline = time.monotonic() + 5
    while source_error(prev, "gpu") is not None and time.monotonic() < deadline:
        engine.sample()
        snap = engine.build()
        records += [r for r in changes(prev, snap) if r["type"] == "source"]
        prev = snap
        time.sleep(0.02)
    engine.stop()
    assert [(r["name"], r["ok"]) for r in records] == [("gpu", False), ("gpu", True)]
    assert "stale" in records[0]["error"]
    shown = [str(plain(r)).split(" ", 1)[1] for r in records]  # as printed, without the time
    row.saw(f"5 stale ticks → 2 records: {shown[0][:70]!r}…, then {shown[1]!r}")
