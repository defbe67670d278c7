"""The machine's series in the exporter (issue #28): each GPU's hardware health, the kernel's events, the pod's
limits and the learning metrics, in base units, absent where nothing was read, passing promtool's lint."""

from __future__ import annotations

import math
from dataclasses import replace

from rlwatch.common.state import (
    DiskState,
    GpuHealth,
    GpuState,
    GpuStatus,
    HostEvent,
    HostLimits,
    KernelLogState,
    LearningState,
    MemlockLimit,
    MemoryState,
    MetricPoint,
    Snapshot,
)
from tests.export.test_exporter import exposition, get, names, promtool, samples

GIB = 1024**3


def machine() -> Snapshot:
    health = GpuHealth(
        pci_bus_id="00000000:3B:00.0",
        ecc_volatile_uncorrected=2,
        ecc_volatile_corrected=7,
        ecc_aggregate_uncorrected=3,
        ecc_aggregate_corrected=40,
        retired_sbe=None,
        remap_uncorrectable=4,
        remap_pending=True,
        remap_failure=False,
        pcie_gen=4,
        pcie_gen_max=5,
        pcie_width=8,
        pcie_width_max=16,
        clock_events=("hw_thermal",),
    )
    gpu = GpuState(0, "H100", "GPU-0", 90.0, GIB, 80 * GIB, 80.0, 650.0, "DEFAULT", health=health)
    lost = GpuState(1, None, None, None, None, None, None, None, None, health=GpuHealth(lost="GPU is lost"))
    events = (
        HostEvent("oom_kill", 1.0, "x", "kmsg", pid=1),
        HostEvent("xid", 2.0, "x", "kmsg", xid=79),
        HostEvent("xid", 3.0, "x", "kmsg", xid=79),
        HostEvent("xid", 4.0, "x", "kmsg", xid=13),
    )
    return Snapshot(
        host="h",
        time=1_763_716_800.0,
        profile="generic",
        run_dir="/run",
        gpu=GpuStatus("nvml", True, None, (gpu, lost)),
        kernel=KernelLogState("kmsg", True, events=events),
        limits=HostLimits(
            "/dev/shm", 64 << 20, 60 << 20, ("vllm",), rdma="ib", memlock=(MemlockLimit(4, "trainer", 65536),)
        ),
        memory=MemoryState(
            512 * GIB, 400 * GIB, None, None, 0, None, cgroup_limit_bytes=64 * GIB, cgroup_working_set_bytes=60 * GIB
        ),
        disk=DiskState("/run", GIB, 10 * GIB, inodes_free=10, inodes_total=100),
        learning=LearningState(
            series={
                "loss": (MetricPoint(1, 0.5, math.nan), MetricPoint(2, math.nan, math.nan)),
                "reward": (MetricPoint(2, 0.25, math.nan),),
            }
        ),
    )


def test_the_machines_series_in_base_units() -> None:
    found = samples(exposition(machine()))
    assert get(found, "rlwatch_gpu_ecc_errors", gpu="0", type="uncorrected", counter="volatile") == 2
    assert get(found, "rlwatch_gpu_ecc_errors", gpu="0", type="corrected", counter="aggregate") == 40
    assert get(found, "rlwatch_gpu_retired_pages", gpu="0", cause="sbe") is None  # not supported: absent, not 0
    assert get(found, "rlwatch_gpu_remapped_rows", gpu="0", cause="uncorrectable") == 4
    assert get(found, "rlwatch_gpu_remap_pending", gpu="0") == 1
    assert get(found, "rlwatch_gpu_remap_failure", gpu="0") == 0
    assert get(found, "rlwatch_gpu_pcie_link_width", gpu="0") == 8
    assert get(found, "rlwatch_gpu_pcie_link_generation_max", gpu="0") == 5
    assert get(found, "rlwatch_gpu_clock_event", gpu="0", reason="hw_thermal") == 1
    assert get(found, "rlwatch_gpu_lost", gpu="0") == 0 and get(found, "rlwatch_gpu_lost", gpu="1") == 1
    assert get(found, "rlwatch_kernel_events", kind="xid") == 3 and get(found, "rlwatch_kernel_events", kind="gpf") == 0
    assert get(found, "rlwatch_kernel_xid_events", xid="79") == 2
    assert get(found, "rlwatch_shm_total_bytes") == 64 << 20
    assert get(found, "rlwatch_process_memlock_bytes", name="trainer") == 65536
    assert get(found, "rlwatch_cgroup_memory_limit_bytes") == 64 * GIB
    assert get(found, "rlwatch_cgroup_memory_usage_bytes") is None
    assert get(found, "rlwatch_disk_free_inodes") == 10

    def learning(name: str, metric: str) -> float | None:
        return found.get((name, frozenset({("metric", metric)})))

    assert learning("rlwatch_learning_metric", "reward") == 0.25
    assert learning("rlwatch_learning_metric", "loss") is None  # NaN is no value: its flag says so
    assert learning("rlwatch_learning_metric_nonfinite", "loss") == 1


def test_nothing_read_is_no_series() -> None:
    snap = replace(machine(), kernel=KernelLogState("none", False, error="/dev/kmsg: denied"), learning=None)
    found = names(samples(exposition(snap)))
    assert not {"rlwatch_kernel_events", "rlwatch_learning_metric"} & found


def test_the_machines_series_pass_promtool() -> None:
    result = promtool(exposition(machine()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == ""
