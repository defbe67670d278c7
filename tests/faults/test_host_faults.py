"""Faults of the machine's own sources (issue #28), seen through a whole engine: a kernel log nothing may read, a
reader that hangs, a saved log that is a FIFO or a link, NVML losing a GPU in its health queries, a shared-memory
mount that is not there. Each degrades its own source with one line; the rest stays live; it recovers by itself."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.sources.kernel import CommandReader, KernelLog, KmsgReader
from rlwatch.sources.nvml import NvmlBackend
from tests.faults.conftest import FaultRow, make_engine, source_error
from tests.sources.test_gpu_health import HealthNvml
from tests.sources.test_gpu_source import board

pytestmark = pytest.mark.faults

STEP = "{'loss': 0.5, 'grad_norm': 1.0, 'epoch': 0.1}\n"


def test_no_kernel_log_readable_then_one_saved_beside_the_run(
    tmp_path: Path, fault_row: Callable[[str, str], FaultRow]
) -> None:
    row = fault_row(
        "kernel log: none readable (a container)",
        "the kernel source degraded with how to hand one over; training still read; a saved dmesg.log then read",
    )
    (tmp_path / "train.log").write_text(STEP)
    clock = FakeClock()
    engine = make_engine(tmp_path, {"training": {"logs": ["train.log"]}}, clock=clock)
    denied = [
        KmsgReader(str(tmp_path / "no-kmsg")),
        CommandReader("dmesg", [sys.executable, "-c", "import sys; sys.exit('dmesg: read kernel buffer failed')"], 5.0),
    ]
    engine.kernel_log = KernelLog(tmp_path, live=denied, clock=clock)
    snap = engine.collect_once()
    error = source_error(snap, "kernel")
    assert error is not None and "dmesg > dmesg.log" in error and "read kernel buffer failed" in error
    assert snap.training is not None and snap.training.last_step == 1
    (tmp_path / "dmesg.log").write_text("[  12.5] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    engine.sample()
    snap = engine.build()
    assert source_error(snap, "kernel") is None and snap.kernel is not None and snap.kernel.source == "files"
    assert any(f.code == "xid_79" for f in snap.findings)
    row.saw(f"kernel: {error[:70]}…; step 1 read; after dmesg.log appeared: source ok, xid_79 found")
    engine.stop()


def test_a_hung_kernel_reader_costs_its_timeout_once(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row("kernel log: journalctl hangs", "killed after its timeout, named, not tried again for a minute")
    clock = FakeClock()
    engine = make_engine(tmp_path, {}, clock=clock)
    hang = CommandReader("journalctl", [sys.executable, "-c", "import time; time.sleep(60)"], 0.5)
    engine.kernel_log = KernelLog(tmp_path, live=[hang], clock=clock, retry_s=60.0)
    started = time.monotonic()
    engine.sample()
    first = time.monotonic() - started
    error = source_error(engine.build(), "kernel")
    assert error is not None and "no answer within 0.5s" in error
    started = time.monotonic()
    engine.sample()
    assert time.monotonic() - started < first  # within retry_s: the hung reader is not started again
    row.saw(f"first sample {first:.1f}s, error {error.split(' (on the host')[0]!r}; the next sample did not wait")
    engine.stop()


def test_a_saved_kernel_log_that_is_a_fifo_or_a_link(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row("kernel log: dmesg.log a FIFO, kern.log a link", "neither opened for reading or followed; named")
    os.mkfifo(tmp_path / "dmesg.log")
    (tmp_path / "elsewhere").write_text("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    (tmp_path / "kern.log").symlink_to(tmp_path / "elsewhere")
    engine = make_engine(tmp_path, {"host": {"kernel_log": "files"}})
    snap = engine.collect_once()  # a FIFO opened for reading without O_NONBLOCK would block here for ever
    error = source_error(snap, "kernel")
    assert error is not None and "not a regular file" in error and "a symbolic link" in error
    assert snap.kernel is not None and snap.kernel.events == ()
    row.saw(error)
    engine.stop()


def test_nvml_loses_a_gpu_in_its_health_queries(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row("GPU: lost in a health query", "that GPU reported lost (critical, drain the node); the other live")
    clock = FakeClock()
    nv = HealthNvml([board(0), board(1)])
    nv.lost_later.add(1)
    backend = NvmlBackend(nvml=nv, clock=clock, query_timeout_s=5.0)
    engine = make_engine(tmp_path, {"gpu": {"backend": "nvml"}}, clock=clock, gpu_backend=backend)
    snap = engine.collect_once()
    lost = [f for f in snap.findings if f.code == "gpu_lost"]
    assert lost and lost[0].severity.value == "critical" and "GPU 1" in lost[0].message
    assert snap.gpus[0].util == 40.0 and snap.gpus[0].health is not None and snap.gpus[0].health.lost is None
    row.saw(lost[0].message[:90] + "…")
    engine.stop()


def test_a_shared_memory_mount_that_is_not_there(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row("limits: /dev/shm missing", "the limits source degraded with the path; no shm finding made up")
    engine = make_engine(tmp_path, {"host": {"shm_path": str(tmp_path / "no-shm")}})
    snap = engine.collect_once()
    error = source_error(snap, "limits")
    assert error is not None and "no-shm" in error
    assert snap.limits is not None and snap.limits.shm_total_bytes is None
    assert not [f for f in snap.findings if f.code.startswith("shm_")]
    row.saw(error)
    engine.stop()
