"""Who holds the GPU device nodes, and which of them are strays that block the run.

Inside a container the driver reports host pids, or none, so NVML cannot say which local process holds a GPU. The
kernel can: like ``fuser`` and ``lsof``, :func:`find_holders` reads each process's open file descriptors and memory
mappings for the device paths. :func:`classify_holders` then sorts them into the live run's processes, processes
that must never be touched, and strays — each stray with its reason in words, because a person confirms every kill.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rlwatch.clock import Clock
from rlwatch.sources import procfs
from rlwatch.state import GpuHolder

_WILDCARDS = re.compile(r"[*?\[]")
_GPU_INDEX = re.compile(r"nvidia(\d+)$")


@dataclass(frozen=True, slots=True)
class HolderScan:
    holders: dict[int, tuple[str, ...]]  # pid → device paths it holds
    skipped: int  # processes that denied the read (another user's, without the privilege to look); gone ones are not


def _literal_prefix(glob: str) -> str:
    match = _WILDCARDS.search(glob)
    return glob[: match.start()] if match else glob


def _mapped_paths(maps_file: str, prefix: str) -> list[str] | None:
    try:
        with open(maps_file, "rb") as f:
            data = f.read()
    except OSError:
        return None
    needle = prefix.encode("utf-8", "surrogateescape")
    if needle and needle not in data:
        return []
    paths = []
    for line in data.split(b"\n"):
        # address perms offset dev inode [path]; the path is everything after the fifth field and may hold spaces.
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith(b"/"):
            paths.append(parts[5].decode("utf-8", "surrogateescape").removesuffix(" (deleted)"))
    return paths


MapsReader = Callable[[int], list[str] | None]


def scan_holders(device_glob: str, *, proc_root: str = "/proc", maps: MapsReader | None = None) -> HolderScan:
    """Every process with a descriptor or a mapping of a path matching ``device_glob``.

    Mappings are read only for processes with no matching descriptor: a CUDA process keeps its device descriptors
    open, and formatting a large process's maps is the costliest read of the scan. ``maps`` replaces the reading of
    ``/proc/<pid>/maps`` (the mapped paths, or None when unreadable), so a watch loop can cache it.
    """
    prefix = _literal_prefix(device_glob)

    def read_maps(pid: int) -> list[str] | None:
        return _mapped_paths(f"{proc_root}/{pid}/maps", prefix)

    holders: dict[int, tuple[str, ...]] = {}
    skipped = 0
    for pid in procfs.list_pids(proc_root):
        fds = procfs.fd_paths(pid, proc_root)
        found = _matching(fds or (), prefix, device_glob)
        if not found:
            mapped = (maps or read_maps)(pid)
            if fds is None and mapped is None:
                if os.path.lexists(f"{proc_root}/{pid}"):  # still there, so the read was denied: a blind spot
                    skipped += 1
                continue
            found = _matching(mapped or (), prefix, device_glob)
        if found:
            holders[pid] = tuple(sorted(found))
    return HolderScan(holders, skipped)


class HolderScanner:
    """Repeated scans for a watch loop: descriptors every time, a process's mappings only every ``maps_every_s``.

    A process that holds a device only as a mapping (its descriptor closed) is rare, and its mappings are kept
    between reads, so re-reading them less often costs nothing in what is found while sparing the kernel the
    formatting of every process's maps on every tick.
    """

    def __init__(self, device_glob: str, clock: Clock, *, proc_root: str = "/proc", maps_every_s: float = 30.0) -> None:
        self._glob = device_glob
        self._prefix = _literal_prefix(device_glob)
        self._clock = clock
        self._proc_root = proc_root
        self._every = maps_every_s
        self._maps: dict[tuple[int, int | None], tuple[float, list[str] | None]] = {}
        self.skipped = 0

    def _cached_maps(self, pid: int) -> list[str] | None:
        # Keyed by (pid, start time) so a reused pid is read afresh.
        stat = procfs.read_stat(pid, self._proc_root)
        key = (pid, None if stat is None else stat.starttime_ticks)
        now = self._clock.monotonic()
        cached = self._maps.get(key)
        if cached is not None and now - cached[0] < self._every:
            return cached[1]
        mapped = _mapped_paths(f"{self._proc_root}/{pid}/maps", self._prefix)
        self._maps[key] = (now, mapped)
        return mapped

    def scan(self) -> dict[int, tuple[str, ...]]:
        result = scan_holders(self._glob, proc_root=self._proc_root, maps=self._cached_maps)
        now = self._clock.monotonic()
        self._maps = {key: value for key, value in self._maps.items() if now - value[0] < 2 * self._every}
        self.skipped = result.skipped
        return result.holders


def _matching(paths: Iterable[str], prefix: str, device_glob: str) -> set[str]:
    return {p for p in paths if p.startswith(prefix) and fnmatch.fnmatchcase(p, device_glob)}


def find_holders(device_glob: str, *, proc_root: str = "/proc") -> dict[int, tuple[str, ...]]:
    """pid → the device paths it holds open or mapped; unreadable and vanished processes are left out."""
    return scan_holders(device_glob, proc_root=proc_root).holders


def gpu_index(device: str) -> int | None:
    """The GPU a device node stands for (``/dev/nvidia3`` → 3); None for the shared nodes (nvidiactl, nvidia-uvm)."""
    match = _GPU_INDEX.search(Path(device).name)
    return int(match.group(1)) if match else None


def holders_by_gpu(holders: Iterable[GpuHolder]) -> dict[int, tuple[int, ...]]:
    """GPU index → pids holding its device node, for :attr:`rlwatch.state.GpuState.holders`."""
    out: dict[int, list[int]] = {}
    for holder in holders:
        for index in sorted({i for i in map(gpu_index, holder.devices) if i is not None}):
            out.setdefault(index, []).append(holder.pid)
    return {index: tuple(sorted(pids)) for index, pids in out.items()}


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{max(0, round(seconds))}s"
    if seconds < 2 * 3600:
        return f"{round(seconds / 60)}m"
    return f"{seconds / 3600:.1f}h"


def _protected_reason(
    pid: int,
    *,
    names: set[str],
    rlwatch_family: set[int],
    self_pid: int,
    owner: int | None,
    user: str | None,
    allow_other_users: bool,
    proc_root: str,
    cmdline: tuple[str, ...],
) -> str | None:
    if pid == 1:
        return "pid 1 (the container's init)"
    if pid == self_pid:
        return "rlwatch itself"
    if pid in rlwatch_family:
        return "a parent of rlwatch"
    # The same rule as the actions' guard: the script behind an interpreter and the kernel's truncated comm count.
    known_as = procfs.names_of(procfs.exe_name(pid, proc_root), procfs.comm(pid, proc_root), cmdline)
    daemon = procfs.daemon_name(known_as, names)
    if daemon:
        return f"system daemon ({daemon})"
    me = os.geteuid()
    if owner is None:
        return "owner unknown"
    if owner != me and not (me == 0 and allow_other_users):
        return f"another user's process ({user})"
    return None


_GPU_NODE = re.compile(r"^/dev/nvidia(\d+|-uvm)$")


def _nvml_client_only(devices: tuple[str, ...], mapped: list[str] | None, gpu_mem_bytes: int | None) -> bool:
    """A process that has a GPU's nodes open without a CUDA context: a monitor (nvidia-smi, nvitop, glances, DCGM,
    another rlwatch) reading NVML, never a zombie holding the GPU.

    Measured on an H200 (driver 580): NVML clients open /dev/nvidiactl, /dev/nvidiaN and even /dev/nvidia-uvm, but
    map at most /dev/nvidiactl; a CUDA context maps the GPU node and /dev/nvidia-uvm. So the mappings decide. Only
    for the real device nodes (a stand-in device file elsewhere has no such mappings), only when the maps could be
    read, and never for a process NVML lists as using GPU memory.
    """
    if mapped is None or gpu_mem_bytes or not any(d.startswith("/dev/nvidia") for d in devices):
        return False
    return not any(_GPU_NODE.match(path) for path in mapped)


def _stray_reason(parent: int | None, create_time: float, run_started_at: float | None) -> str:
    reasons = []
    if parent == 1:
        reasons.append("orphaned (parent is pid 1)")
    if run_started_at is not None and create_time < run_started_at:
        reasons.append(f"started before the run ({_minutes(run_started_at - create_time)} earlier)")
    return "; ".join(reasons) or "not part of the run's process tree"


def classify_holders(
    raw: Mapping[int, tuple[str, ...]],
    *,
    run_pids: set[int],
    run_started_at: float | None,
    nvml_pids: Mapping[int, int | None],
    protected_names: Iterable[str],
    self_pid: int,
    allow_other_users: bool,
    proc_root: str = "/proc",
) -> tuple[GpuHolder, ...]:
    """Sort holders into the run's own, the untouchable, and strays (with a reason); vanished pids are dropped.

    A holder is the run's when it or any ancestor is in ``run_pids``. Daemons are recognised by their executable
    name (``comm``, ``/proc/<pid>/exe`` or ``argv[0]``), never by a substring of the command line, so
    ``python serve.py --name nvidia-persistenced`` is not mistaken for one.
    """
    names = set(protected_names)
    rlwatch_family = set(procfs.ancestors(self_pid, proc_root))
    btime = procfs.boot_time(proc_root)
    out: list[GpuHolder] = []
    for pid in sorted(raw):
        stat = procfs.read_stat(pid, proc_root)
        create_time = None if stat is None else procfs.start_time_from_ticks(stat.starttime_ticks, btime)
        if stat is None or create_time is None:
            continue  # gone since the scan
        cmdline = procfs.read_cmdline(pid, proc_root)
        owner = procfs.uid(pid, proc_root)
        user = procfs.user_name(owner)
        protected = _protected_reason(
            pid,
            names=names,
            rlwatch_family=rlwatch_family,
            self_pid=self_pid,
            owner=owner,
            user=user,
            allow_other_users=allow_other_users,
            proc_root=proc_root,
            cmdline=cmdline,
        )
        mapped = _mapped_paths(f"{proc_root}/{pid}/maps", "/dev/nvidia") if protected is None else None
        if protected is None and _nvml_client_only(tuple(raw[pid]), mapped, nvml_pids.get(pid)):
            protected = "a monitor reading NVML (no CUDA context)"
        # A child the run started after run_pids was computed is still the run's: check the live parent chain too.
        in_run = pid in run_pids or any(a in run_pids for a in procfs.ancestors(pid, proc_root))
        reason = None if in_run or protected else _stray_reason(stat.ppid, create_time, run_started_at)
        out.append(
            GpuHolder(
                pid=pid,
                create_time=create_time,
                user=user,
                cmdline=cmdline or (f"[{stat.comm}]",),
                devices=tuple(raw[pid]),
                gpu_mem_bytes=nvml_pids.get(pid),
                in_run=in_run,
                reason=reason,
                protected=protected,
            )
        )
    return tuple(out)


def merge_nvml_pids(per_gpu: Mapping[int, Mapping[int, int | None]]) -> dict[int, int | None]:
    """pid → GPU memory summed over GPUs, from a backend's ``last_processes``."""
    out: dict[int, int | None] = {}
    for procs in per_gpu.values():
        for pid, used in procs.items():
            prev = out.get(pid)
            out[pid] = used if prev is None else prev + (used or 0)
    return out
