"""The pod's limits: /dev/shm (statvfs, or the simulator's size), the frameworks of the run that need it, RDMA and
RLIMIT_MEMLOCK of the run's real processes, the container's cgroup memory (v2 and v1 trees laid out as the kernel
does), the Xid catalogue."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.common.state import ProcessInfo
from rlwatch.sources.limits import SHM_NEEDS, LimitsSource, frameworks, parse_memlock, rdma_in_use, shm_size
from rlwatch.sources.memory import read_cgroup_memory
from rlwatch.sources.xid import CATALOG, describe, recovery_action, verdict_of

GIB = 1024**3


def proc(cmdline: str, role: str = "trainer", pid: int = 1, alive: bool = True) -> ProcessInfo:
    return ProcessInfo(pid, 1.0, role, role, None, None, 1.0, 0, tuple(cmdline.split()), None, None, alive=alive)


def test_frameworks_from_the_run_processes_and_server_kind() -> None:
    assert frameworks([proc("python3 -m sglang.launch_server --tp-size 2", "server")]) == ("sglang", "nccl")
    assert frameworks([proc("vllm serve Qwen --tensor-parallel-size 4", "server")]) == ("vllm", "nccl")
    assert frameworks([proc("torchrun --nproc-per-node 8 train.py")]) == ("nccl", "pytorch")
    assert frameworks([proc("python3 -m verl.trainer.main_ppo", "launcher")]) == ("ray", "pytorch")
    assert frameworks([proc("python3 train.py")], server_kind="trl") == ("vllm", "pytorch")
    assert frameworks([proc("python3 train.py", alive=False)]) == ()  # only live processes say what runs now
    assert frameworks([proc("python3 -m rlwatch watch", "watchdog")]) == ()
    assert set(SHM_NEEDS) == {"vllm", "sglang", "nccl", "ray", "pytorch"}


def test_shm_size_is_the_mount_statvfs_reports(tmp_path: Path) -> None:
    total, free, error = shm_size(str(tmp_path))
    st = os.statvfs(tmp_path)
    assert error is None and total == st.f_blocks * st.f_frsize and free is not None and free <= total
    assert shm_size(str(tmp_path / "absent"))[2] is not None


def test_the_simulator_says_what_size_shm_has() -> None:
    lim = LimitsSource(simulated_shm_bytes=64 * 1024 * 1024).sample([proc("python3 train.py")])
    assert (lim.shm_total_bytes, lim.shm_free_bytes, lim.simulated) == (64 * 1024 * 1024, 64 * 1024 * 1024, True)
    assert lim.frameworks == ("pytorch",)


def test_rdma_from_devices_or_the_runs_nccl_settings(tmp_path: Path) -> None:
    assert rdma_in_use(str(tmp_path)) is None
    assert rdma_in_use(str(tmp_path), [{"NCCL_IB_HCA": "mlx5_0"}]) == "the run's environment sets NCCL_IB_HCA"
    (tmp_path / "class" / "infiniband" / "mlx5_0").mkdir(parents=True)
    assert rdma_in_use(str(tmp_path)) == f"{tmp_path}/class/infiniband: mlx5_0"
    assert rdma_in_use(str(tmp_path), [{"NCCL_IB_DISABLE": "1"}]) is None  # told not to use it


def test_memlock_of_real_processes_where_rdma_is_in_use(tmp_path: Path) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    want = 64 * 1024 if hard == resource.RLIM_INFINITY or hard >= 64 * 1024 else hard
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={**os.environ, "NCCL_IB_HCA": "mlx5_0"},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_MEMLOCK, (want, hard)),
    )
    try:
        p = ProcessInfo(child.pid, 1.0, "trainer", "trainer", None, None, 1.0, 0, ("python3",), None, None)
        lim = LimitsSource(sys_root=str(tmp_path)).sample([p])
        assert lim.rdma == "the run's environment sets NCCL_IB_HCA"
        assert [(m.pid, m.name, m.soft_bytes) for m in lim.memlock] == [(child.pid, "trainer", want)]
    finally:
        child.communicate(b"")


def test_memlock_lines() -> None:
    text = "Max locked memory         8388608              8388608              bytes     \n"
    assert parse_memlock(text) == (True, 8388608)
    assert parse_memlock("Max locked memory         unlimited            unlimited            bytes\n") == (True, None)
    assert parse_memlock("nothing") == (False, None)


# ------------------------------------------------------------------------------------------------------- cgroups
@pytest.fixture
def v2(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "cgroup"
    own = root / "kubepods.slice" / "pod1"
    own.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "memory.max").write_text("max\n")  # the mount root: the whole machine
    (own / "memory.max").write_text(f"{64 * GIB}\n")
    (own / "memory.current").write_text(f"{60 * GIB}\n")
    (own / "memory.stat").write_text(f"anon {50 * GIB}\nfile {10 * GIB}\ninactive_file {4 * GIB}\nactive_file 1\n")
    (own / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 3\noom_kill 1\n")
    yield root


def test_cgroup_v2_limit_usage_and_working_set_of_this_process_cgroup(v2: Path) -> None:
    assert read_cgroup_memory(v2, "0::/kubepods.slice/pod1\n") == (64 * GIB, 60 * GIB, 56 * GIB, 3)
    assert read_cgroup_memory(v2, "0::/\n") == (None, None, None, None)  # the root has no limit ("max")


def test_cgroup_v1_limit_and_its_unlimited(tmp_path: Path) -> None:
    mem = tmp_path / "memory" / "docker" / "abc"
    mem.mkdir(parents=True)
    (mem / "memory.limit_in_bytes").write_text(f"{16 * GIB}\n")
    (mem / "memory.usage_in_bytes").write_text(f"{15 * GIB}\n")
    (mem / "memory.stat").write_text(f"cache 10\ntotal_inactive_file {GIB}\n")
    assert read_cgroup_memory(tmp_path, "12:memory:/docker/abc\n") == (16 * GIB, 15 * GIB, 14 * GIB, None)
    (mem / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert read_cgroup_memory(tmp_path, "12:memory:/docker/abc\n")[0] is None
    assert read_cgroup_memory(tmp_path / "nothing", None) == (None, None, None, None)


# ---------------------------------------------------------------------------------------------------------- Xids
REQUIRED = (13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140, 143, 154)


def test_the_catalogue_has_every_xid_the_issue_names_with_nvidias_buckets() -> None:
    for code in REQUIRED:
        info = CATALOG[code]
        assert info.code == code and info.mnemonic and info.meaning and info.immediate and info.advice
    # NVIDIA's immediate actions, as its catalogue says them
    assert CATALOG[79].immediate == "RESTART_BM" and CATALOG[95].immediate == "RESET_GPU"
    assert CATALOG[13].immediate == "RESTART_APP" and CATALOG[63].immediate == "IGNORE"


def test_verdicts() -> None:
    assert {c for c in REQUIRED if verdict_of(c) == "hardware"} == {48, 61, 62, 64, 74, 79, 95, 109, 119, 120, 140, 143}
    assert {c for c in REQUIRED if verdict_of(c) == "application"} == {13, 31, 32, 68, 69}
    assert verdict_of(154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)") == "hardware"
    assert verdict_of(154, "GPU recovery action changed from 0x4 (Drain and Reset) to 0x0 (None)") == "info"
    assert (
        verdict_of(145, "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2)")
        == "degraded"
    )
    assert (
        verdict_of(145, "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Fatal XC0 i0 Link 13 (0x0409a0c2)") == "hardware"
    )
    assert describe(999).verdict == "unknown"
    assert recovery_action("GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)") == (
        "GPU Reset Required"
    )
