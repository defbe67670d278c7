"""The diagnosis of the machine under the run: kernel events tied to the run's processes (by pid, by torchrun's
report, by time and program) or told once as the machine's; Xids by their verdict; the pod's limits (/dev/shm,
locked memory, a container's memory limit, disk against the checkpoints to come, inodes)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from rlwatch.common.state import (
    CheckpointInfo,
    CheckpointState,
    ChildFailure,
    DiskState,
    EventSummary,
    HostEvent,
    HostLimits,
    Incident,
    KernelLogState,
    LogLine,
    MemlockLimit,
    MemoryState,
    ProcessInfo,
    Severity,
    Snapshot,
    TrainingState,
)
from rlwatch.config.models import HostConfig
from rlwatch.engine.diagnosis import Context, diagnose

NOW = 1_763_716_800.0
GIB = 1024**3


def oom(pid: int, at: float, name: str = "python3", memcg: str | None = None) -> HostEvent:
    return HostEvent(
        "oom_kill",
        at,
        f"Out of memory: Killed process {pid} ({name}) total-vm:1kB, anon-rss:1kB, file-rss:0kB",
        "kmsg",
        pid=pid,
        process=name,
        rss_bytes=61 * GIB,
        memcg=memcg,
    )


def xid(code: int, at: float | None, text: str = "", pid: int | None = None, pci: str = "0000:3b:00") -> HostEvent:
    return HostEvent("xid", at, text or f"NVRM: Xid (PCI:{pci}): {code}, x", "kmsg", pid=pid, pci=pci, xid=code)


def proc(pid: int, name: str = "trainer", alive: bool = True, started: float = NOW - 3600) -> ProcessInfo:
    return ProcessInfo(
        pid, started, name, name, None, None, started, 0, ("/usr/bin/python3", "train.py"), None, None, alive=alive
    )


def snap(**fields: Any) -> Snapshot:
    return Snapshot(host="h", time=NOW, profile="generic", run_dir="/run", **fields)


def kernel(*events: HostEvent) -> KernelLogState:
    return KernelLogState("kmsg", True, events=events)


def found(s: Snapshot, ctx: Context | None = None) -> dict[str, tuple[Severity, str]]:
    return {f.code: (f.severity, f.message) for f in diagnose(s, ctx or Context())}


# --------------------------------------------------------------------------------------------------- OOM kills
def test_the_runs_process_killed_by_the_oom_killer_is_the_root_cause() -> None:
    s = snap(
        kernel=kernel(oom(4242, NOW - 60, memcg="/kubepods/pod1")),
        processes=(proc(4242, alive=False),),
        training=TrainingState(12, 100, None, None, False, NOW - 61, NOW - 61),
        checkpoint=CheckpointState(CheckpointInfo("/run/output/checkpoint-10", 10, None, None, None, None), 2, (5, 10)),
        memory=MemoryState(None, None, None, None, None, None, cgroup_limit_bytes=64 * GIB),
    )
    severity, message = found(s)["kernel_oom_kill"]
    assert severity is Severity.CRITICAL
    assert message.startswith(
        f"The run's trainer (pid 4242) was killed by the kernel OOM killer at {time.strftime('%H:%M:%S', time.localtime(NOW - 60))}, RSS 65.5 GB"
    )
    assert "memory cgroup /kubepods/pod1 hit its limit (68.7 GB)" in message
    assert "the run's last step was logged at" in message and "resume from checkpoint-10 (step 10)" in message


def test_a_rank_torchrun_reports_is_tied_by_pid_or_by_sigkill_time() -> None:
    died = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(NOW - 59))
    report = Incident(
        "crash",
        "/run/torchrun.log",
        10,
        NOW - 58,
        NOW - 58,
        20,
        "ChildFailedError",
        None,
        "sig",
        root_cause=ChildFailure(3, 3, -9, "SIGKILL", 812917, "h", died, None),
    )
    by_pid = found(snap(kernel=kernel(oom(812917, NOW - 60)), incidents=(report,)))["kernel_oom_kill"]
    assert by_pid[0] is Severity.CRITICAL and by_pid[1].startswith("Rank 3 (pid 812917) was killed")
    # the kernel prints the host's pid, the container's torchrun its own: tied by the SIGKILL two minutes around it
    by_time = found(snap(kernel=kernel(oom(99, NOW - 60)), incidents=(report,)))["kernel_oom_kill"]
    assert by_time[0] is Severity.CRITICAL
    assert by_time[1].startswith("Rank 3 (pid 812917 in this container, killed by SIGKILL at")
    assert "(matched by time and program, not by pid)" in by_time[1]
    far = found(snap(kernel=kernel(oom(99, NOW - 600)), incidents=(report,)))["kernel_oom_kill"]
    assert far[0] is Severity.INFO


def test_kills_of_other_processes_are_one_line_of_information() -> None:
    s = snap(
        kernel=kernel(oom(1, NOW - 50, "java"), oom(2, NOW - 40, "java"), oom(3, NOW - 30, "node")),
        processes=(proc(9),),
    )
    (f,) = [f for f in diagnose(s, Context()) if f.code == "kernel_oom_kill"]
    assert f.severity is Severity.INFO and "killed 3 processes" in f.message


def test_a_kill_before_the_run_started_is_not_this_runs() -> None:
    s = snap(kernel=kernel(oom(4242, NOW - 7200)), processes=(proc(4242, started=NOW - 3600),))
    assert "kernel_oom_kill" not in found(s)


def test_a_gone_python_process_is_probably_the_one_the_kernel_named() -> None:
    s = snap(
        kernel=kernel(oom(777777, NOW - 60, "pt_main_thread")), processes=(proc(31, alive=False), proc(32, "server"))
    )
    severity, message = found(s)["kernel_oom_kill"]
    assert severity is Severity.CRITICAL and "the run's trainer (pid 31 here; it is gone)" in message.lower()


def test_segfaults_tied_and_not() -> None:
    seg = HostEvent(
        "segfault",
        NOW - 5,
        "python3[42]: segfault at 0 ip 1 sp 2 error 4 in libnccl.so.2[1+2]",
        "kmsg",
        pid=42,
        process="python3",
    )
    severity, message = found(snap(kernel=kernel(seg), processes=(proc(42),)))["kernel_segfault"]
    assert (
        severity is Severity.CRITICAL
        and "crashed with a segmentation fault" in message
        and "(in libnccl.so.2)" in message
    )
    assert found(snap(kernel=kernel(seg), processes=(proc(43),)))["kernel_segfault"][0] is Severity.INFO


# ------------------------------------------------------------------------------------------------------------ Xids
def test_xid_verdicts_and_their_advice() -> None:
    s = snap(kernel=kernel(xid(79, NOW - 10, pid=4242)), processes=(proc(4242, alive=False),))
    severity, message = found(s)["xid_79"]
    assert (
        severity is Severity.CRITICAL
        and "It hit the run's trainer (pid 4242)" in message
        and "drain this node" in message
    )
    assert found(snap(kernel=kernel(xid(13, NOW - 10))))["xid_13"][0] is Severity.WARNING
    assert found(snap(kernel=kernel(xid(63, NOW - 10))))["xid_63"][0] is Severity.INFO
    assert found(snap(kernel=kernel(xid(92, NOW - 10))))["xid_92"][0] is Severity.WARNING
    assert found(snap(kernel=kernel(xid(999, NOW - 10))))["xid_999"][0] is Severity.WARNING
    drain = xid(
        154,
        NOW - 10,
        "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
    )
    severity, message = found(snap(kernel=kernel(drain)))["xid_154"]
    assert severity is Severity.CRITICAL and "The driver now asks for: Drain and Reset" in message
    none = xid(
        154,
        NOW - 10,
        "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to 0x0 (None)",
    )
    assert found(snap(kernel=kernel(none)))["xid_154"][0] is Severity.INFO


def test_a_hardware_xid_before_the_run_is_a_warning_and_repeats_are_counted_once_per_fault() -> None:
    before = found(snap(kernel=kernel(xid(48, NOW - 7200)), processes=(proc(1),)))["xid_48"]
    assert before[0] is Severity.WARNING and "before this run started" in before[1]
    # the driver's Xid line, its "fallen off the bus" line and NVML's event: one fault; an hour later: another
    bus = HostEvent(
        "fallen_off_bus", NOW - 3599, "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", "kmsg", pci="0000:3b:00"
    )
    nvml = replace(xid(79, NOW - 3599), source="nvml")
    message = found(snap(kernel=kernel(xid(79, NOW - 3600), bus, nvml, xid(79, NOW - 10))))["xid_79"][1]
    assert ", 2 times:" in message


# ---------------------------------------------------------------------------------------------------- pod limits
def shm(total: int, free: int | None = None, frameworks: tuple[str, ...] = ("vllm", "pytorch")) -> HostLimits:
    return HostLimits("/dev/shm", total, total if free is None else free, frameworks)


def shm_error(line: str) -> EventSummary:
    return EventSummary(
        "shm_error",
        Severity.CRITICAL,
        1,
        NOW - 5,
        NOW - 5,
        0.2,
        1,
        {"/run/train.log": 1},
        (LogLine("/run/train.log", 9, line, NOW - 5),),
    )


def test_docker_default_shm_beside_the_runs_frameworks_warns_then_the_error_is_critical() -> None:
    severity, message = found(snap(limits=shm(64 * 1024 * 1024)))["shm_small"]
    assert severity is Severity.WARNING and "67.1 MB" in message and "vllm, pytorch" in message
    assert "--ipc=host" in message and "medium: Memory" in message
    assert "shm_small" not in found(snap(limits=shm(16 * GIB)))
    assert "shm_small" not in found(snap(limits=shm(64 * 1024 * 1024, frameworks=())))  # nothing here needs it
    assert found(snap(limits=shm(16 * GIB, free=GIB // 2)))["shm_small"][1].startswith("Shared memory is nearly full")
    crit = found(snap(limits=shm(16 * GIB), events={"shm_error": shm_error("Fatal Python error: Bus error")}))
    assert crit["shm_exhausted"][0] is Severity.CRITICAL and "shm_small" not in crit
    assert "'Fatal Python error: Bus error'" in crit["shm_exhausted"][1]


def test_memlock_only_where_rdma_is_in_use() -> None:
    low = HostLimits(
        "/dev/shm", None, None, rdma="/sys/class/infiniband: mlx5_0", memlock=(MemlockLimit(7, "trainer", 65536),)
    )
    severity, message = found(snap(limits=low))["memlock_low"]
    assert (
        severity is Severity.WARNING
        and "trainer (pid 7) may lock only 65.5 KB" in message
        and "ulimit -l unlimited" in message
    )
    assert "memlock_low" not in found(snap(limits=replace(low, rdma=None)))
    assert "memlock_low" not in found(snap(limits=replace(low, memlock=(MemlockLimit(7, "trainer", None),))))


def test_the_memory_finding_uses_the_containers_limit() -> None:
    mem = MemoryState(
        512 * GIB,
        500 * GIB,
        None,
        None,
        None,
        None,
        cgroup_limit_bytes=64 * GIB,
        cgroup_usage_bytes=63 * GIB,
        cgroup_working_set_bytes=62 * GIB,
    )
    severity, message = found(snap(memory=mem))["memory_high"]
    assert severity is Severity.WARNING and message.startswith("Container memory at 96.9% of its limit")
    assert "the host has 549.8 GB" in message
    plenty = replace(mem, cgroup_working_set_bytes=10 * GIB)
    assert "memory_high" not in found(snap(memory=plenty))  # the host's RAM (2 % used) is not the limit here


def test_disk_against_the_checkpoints_to_come_and_inodes() -> None:
    latest = CheckpointInfo("/run/output/checkpoint-200", 200, None, None, None, 40 * GIB)
    ckpt = CheckpointState(latest, 4, (50, 100, 150, 200))
    tr = TrainingState(200, 1000, None, None, False, None, None)
    left = found(snap(disk=DiskState("/run", 300 * GIB, 2000 * GIB), checkpoint=ckpt, training=tr))
    severity, message = left["checkpoint_space"]
    assert severity is Severity.WARNING and "the 16 saves left need 687.2 GB" in message
    assert "near step 600" in message  # 7 saves of 40 GiB fit in 300 GiB: the 8th, 8 x 50 steps on, fails
    full = found(snap(disk=DiskState("/run", 30 * GIB, 2000 * GIB), checkpoint=ckpt, training=tr))
    assert full["checkpoint_wont_fit"][0] is Severity.CRITICAL
    inodes = found(snap(disk=DiskState("/run", 900 * GIB, 2000 * GIB, inodes_free=1000, inodes_total=10**6)))
    assert inodes["inodes_low"][0] is Severity.WARNING and "0.1%" in inodes["inodes_low"][1]
    ctx = Context(host=HostConfig(inodes_min_fraction=0.0001))
    assert "inodes_low" not in found(
        snap(disk=DiskState("/run", 900 * GIB, 2000 * GIB, inodes_free=1000, inodes_total=10**6)), ctx
    )


def test_a_gpu_fault_in_the_runs_own_log_is_critical() -> None:
    ev = EventSummary(
        "gpu_fault",
        Severity.CRITICAL,
        1,
        NOW - 5,
        NOW - 5,
        0.2,
        1,
        {"/run/train.log": 1},
        (LogLine("/run/train.log", 9, "RuntimeError: CUDA error: uncorrectable ECC error encountered", NOW - 5),),
    )
    severity, message = found(snap(events={"gpu_fault": ev}))["gpu_fault"]
    assert (
        severity is Severity.CRITICAL
        and "uncorrectable ECC error encountered" in message
        and "drain this node" in message
    )
