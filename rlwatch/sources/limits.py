"""The pod's limits that kill runs before their code does: /dev/shm, locked memory where RDMA is in use.

Docker gives a container a 64 MiB ``/dev/shm`` unless told otherwise (``--shm-size``, ``--ipc=host``; Kubernetes: a
memory-backed ``emptyDir`` mounted there). NCCL, vLLM, SGLang, Ray and PyTorch DataLoader workers all put shared
memory there and die of a full one with SIGBUS ("Bus error") or "No space left on device". What each framework asks
for is cited in :data:`SHM_NEEDS`; the diagnosis warns before they die and turns critical once their error is in the
logs. Where RDMA (InfiniBand, RoCE) is in use, NCCL registers memory with the NIC and needs ``ulimit -l unlimited``.

The frameworks in use are read from the run's processes (their command lines and roles) and the configured server
kind: nothing here guesses from names of processes that are not the run's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from rlwatch.common.state import HostLimits, MemlockLimit, ProcessInfo
from rlwatch.sources import one_line

# What each framework says it needs in /dev/shm, in its own words (shown with the finding).
SHM_NEEDS: dict[str, str] = {
    # vLLM docs, "Deploying with Docker" / "Using Docker" (docs.vllm.ai, v0.4 to v0.7.3 at least): "You can either
    # use the ipc=host flag or --shm-size flag to allow the container to access the host's shared memory. vLLM uses
    # PyTorch, which uses shared memory to share data between processes under the hood, particularly for tensor
    # parallel inference." (vllm-project/vllm PR #1125: "When the shared memory allocated for a docker container is
    # too small and when TP is used, vLLM can hang or perform bad.")
    "vllm": "vLLM: run the container with --ipc=host or a larger --shm-size (its workers share tensors there)",
    # SGLang's docker/compose.yaml (sgl-project/sglang): `ipc: host` and `ulimits: memlock: -1`; its Kubernetes
    # examples mount a memory-backed emptyDir at /dev/shm.
    "sglang": "SGLang: its Docker setup runs with ipc: host (Kubernetes: a memory-backed emptyDir at /dev/shm)",
    # NCCL user guide, Troubleshooting, "Shared memory": "NCCL creates shared memory segments, traditionally in
    # /dev/shm ... If insufficient shared memory is available, NCCL will fail to initialize ... Docker containers
    # default to limited shared and pinned memory resources ... adding the following arguments to the docker launch
    # command line: --shm-size=1g --ulimit memlock=-1" (docs.nvidia.com/deeplearning/nccl/user-guide/docs/
    # troubleshooting/runtime_and_mpi_issues.html). A full one: "NCCL WARN Error while creating shared memory
    # segment /dev/shm/nccl-Ewjreo (size 33030528), error: No space left on device (28)" (llm-d/llm-d#352).
    "nccl": "NCCL: its troubleshooting guide asks for at least --shm-size=1g --ulimit memlock=-1 in Docker",
    # Ray (python/ray/_private/services.py): "WARNING: The object store is using /tmp instead of /dev/shm because
    # /dev/shm has only 67108864 bytes available. This will harm performance! ... you can increase /dev/shm size by
    # passing '--shm-size=10.24gb' to 'docker run' ... Make sure to set this to more than 30% of available RAM."
    # (quoted in vllm-project/vllm#1710).
    "ray": "Ray: its object store wants /dev/shm above 30% of RAM, else it falls back to /tmp (slow)",
    # PyTorch README, "Using pre-built images": "Please note that PyTorch uses shared memory to share data between
    # processes, so if torch multiprocessing is used (e.g. for multithreaded data loaders) the default shared memory
    # segment size that container runs with is not enough, and you should increase shared memory size either with
    # --ipc=host or --shm-size command line options to nvidia-docker run." DataLoader workers then die with "ERROR:
    # Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm)."
    # (open-mmlab/mmsegmentation#1356).
    "pytorch": "PyTorch: DataLoader workers and torch.multiprocessing need --ipc=host or a larger --shm-size",
}

_FRAMEWORK_WORDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("vllm", re.compile(r"\bvllm\b|vllm[-_]serve|vllm\.entrypoints")),
    ("sglang", re.compile(r"\bsglang\b")),
    ("ray", re.compile(r"(^|[\s/])ray(::|let\b|\s+start\b)|-m ray\b|\bverl\b")),
    (
        "nccl",
        re.compile(
            r"(^|[\s/])(torchrun|deepspeed)\b|torch\.distributed\.run|accelerate\s+launch|--nproc[-_]per[-_]node"
            r"|--(tp|tensor-parallel)[-_]size[ =]?([2-9]|\d\d)"
        ),
    ),
)


def frameworks(procs: Sequence[ProcessInfo], server_kind: str | None = None) -> tuple[str, ...]:
    """The frameworks of the run that put shared memory in /dev/shm, from its live processes' command lines (a
    trainer or launcher implies PyTorch) and the configured server kind."""
    found: dict[str, None] = {}
    if server_kind in ("vllm", "trl"):
        found["vllm"] = None
    elif server_kind == "sglang":
        found["sglang"] = None
    for p in procs:
        if not p.alive:
            continue
        line = " ".join(p.cmdline)
        for name, pattern in _FRAMEWORK_WORDS:
            if pattern.search(line):
                found[name] = None
        if p.role in ("trainer", "launcher", "worker"):
            found["pytorch"] = None
    order = ("vllm", "sglang", "nccl", "ray", "pytorch")
    return tuple(n for n in order if n in found)


def shm_size(path: str) -> tuple[int | None, int | None, str | None]:
    """(total, free) bytes of the mount holding ``path`` (statvfs), or Nones and the reason."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return None, None, f"{path}: {exc.strerror or one_line(exc)}"
    except ValueError as exc:
        return None, None, f"{path}: {one_line(exc)}"
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize, None


def rdma_in_use(sys_root: str = "/sys", environs: Sequence[dict[str, str]] = ()) -> str | None:
    """Why RDMA is thought in use: InfiniBand/RoCE devices under /sys/class/infiniband, or NCCL told to use them
    (an ``NCCL_IB_*`` variable other than NCCL_IB_DISABLE=1 in a run process's environment); None: no sign of it."""
    ib = Path(sys_root) / "class" / "infiniband"
    try:
        devices = sorted(os.listdir(ib))
    except OSError:
        devices = []
    for env in environs:
        if env.get("NCCL_IB_DISABLE") == "1":
            return None
    if devices:
        return f"{ib}: {', '.join(devices[:4])}{' …' if len(devices) > 4 else ''}"
    for env in environs:
        keys = sorted(k for k in env if k.startswith("NCCL_IB_") and k != "NCCL_IB_DISABLE")
        if keys:
            return f"the run's environment sets {keys[0]}"
    return None


_MEMLOCK = re.compile(r"^Max locked memory\s+(\S+)\s+(\S+)\s+bytes", re.M)


def parse_memlock(text: str) -> tuple[bool, int | None]:
    """/proc/PID/limits → (found, soft limit in bytes; None for unlimited)."""
    m = _MEMLOCK.search(text)
    if m is None:
        return False, None
    soft = m.group(1)
    return True, None if soft == "unlimited" else int(soft) if soft.isdigit() else None


def _environ(proc_root: str, pid: int) -> dict[str, str]:
    try:
        raw = Path(proc_root, str(pid), "environ").read_bytes()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key.startswith(b"NCCL_"):
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


class LimitsSource:
    """Samples the pod's limits. Reads only the run's own processes' /proc entries, never raises."""

    def __init__(
        self,
        *,
        shm_path: str = "/dev/shm",
        simulated_shm_bytes: int | None = None,
        proc_root: str = "/proc",
        sys_root: str = "/sys",
    ) -> None:
        self._shm_path = shm_path
        self._simulated = simulated_shm_bytes
        self._proc_root = proc_root
        self._sys_root = sys_root
        self._cache: dict[tuple[int, float], tuple[dict[str, str], tuple[bool, int | None]]] = {}
        self.error: str | None = None

    def _process(self, p: ProcessInfo) -> tuple[dict[str, str], tuple[bool, int | None]]:
        key = (p.pid, p.create_time)
        cached = self._cache.get(key)
        if cached is None:
            try:
                limits = parse_memlock(Path(self._proc_root, str(p.pid), "limits").read_text(errors="replace"))
            except OSError:
                limits = (False, None)
            cached = (_environ(self._proc_root, p.pid), limits)
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = cached
        return cached

    def sample(self, procs: Sequence[ProcessInfo], server_kind: str | None = None) -> HostLimits:
        if self._simulated is not None:
            total: int | None = self._simulated
            free: int | None = self._simulated
            self.error = None
        else:
            total, free, self.error = shm_size(self._shm_path)
        alive = [p for p in procs if p.alive][:32]
        seen = [self._process(p) for p in alive]
        rdma = rdma_in_use(self._sys_root, [env for env, _ in seen])
        memlock: tuple[MemlockLimit, ...] = ()
        if rdma is not None:
            memlock = tuple(
                MemlockLimit(p.pid, p.name, soft) for p, (_, (found, soft)) in zip(alive, seen, strict=True) if found
            )
        return HostLimits(
            shm_path=self._shm_path,
            shm_total_bytes=total,
            shm_free_bytes=free,
            frameworks=frameworks(procs, server_kind),
            rdma=rdma,
            memlock=memlock,
            simulated=self._simulated is not None,
        )
