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
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rlwatch.common.clock import Clock
from rlwatch.common.state import GpuHolder, GpuState
from rlwatch.sources import procfs
from rlwatch.sources.membership import RUN, STRAY, RunView, may_act_on

_WILDCARDS = re.compile(r"[*?\[]")
_GPU_INDEX = re.compile(r"nvidia(\d+)$")


@dataclass(frozen=True, slots=True)
class HolderScan:
    holders: dict[int, tuple[str, ...]]  # pid → device paths it holds
    skipped: int  # processes that denied the read (another user's, without the privilege to look); gone ones are not
    # pid → (fd, path) of what it holds open under the ``under`` directory: run-membership evidence from the same pass
    opened: dict[int, list[tuple[int, str]]] = field(default_factory=dict)


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


def scan_holders(
    device_glob: str, *, proc_root: str = "/proc", maps: MapsReader | None = None, under: str | None = None
) -> HolderScan:
    """Every process with a descriptor or a mapping of a path matching ``device_glob``.

    Mappings are read only for processes with no matching descriptor: a CUDA process keeps its device descriptors
    open, and formatting a large process's maps is the costliest read of the scan. ``maps`` replaces the reading of
    ``/proc/<pid>/maps`` (the mapped paths, or None when unreadable), so a watch loop can cache it. With ``under``
    (a directory), the descriptors open on files below it are collected too: the run-membership evidence, read in
    the same pass instead of a second walk over every descriptor on the host.
    """
    prefix = _literal_prefix(device_glob)
    below = None if under is None else under.rstrip("/") + "/"

    def read_maps(pid: int) -> list[str] | None:
        return _mapped_paths(f"{proc_root}/{pid}/maps", prefix)

    holders: dict[int, tuple[str, ...]] = {}
    opened: dict[int, list[tuple[int, str]]] = {}
    skipped = 0
    for pid in procfs.list_pids(proc_root):
        entries = procfs.fd_entries(pid, proc_root)
        fds = None if entries is None else [path for _, path in entries]
        if below is not None and entries:
            mine = [(fd, path) for fd, path in entries if path.startswith(below)]
            if mine:
                opened[pid] = mine
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
    return HolderScan(holders, skipped, opened)


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

    def scan(self, under: str | None = None) -> HolderScan:
        result = scan_holders(self._glob, proc_root=self._proc_root, maps=self._cached_maps, under=under)
        now = self._clock.monotonic()
        self._maps = {key: value for key, value in self._maps.items() if now - value[0] < 2 * self._every}
        self.skipped = result.skipped
        return result


def _matching(paths: Iterable[str], prefix: str, device_glob: str) -> set[str]:
    return {p for p in paths if p.startswith(prefix) and fnmatch.fnmatchcase(p, device_glob)}


def find_holders(device_glob: str, *, proc_root: str = "/proc") -> dict[int, tuple[str, ...]]:
    """pid → the device paths it holds open or mapped; unreadable and vanished processes are left out."""
    return scan_holders(device_glob, proc_root=proc_root).holders


def gpu_index(device: str) -> int | None:
    """The GPU a device node stands for (``/dev/nvidia3`` → 3); None for the shared nodes (nvidiactl, nvidia-uvm)."""
    match = _GPU_INDEX.search(Path(device).name)
    return int(match.group(1)) if match else None


def _protected_reason(
    pid: int,
    *,
    names: set[str],
    rlwatch_family: set[int],
    self_pid: int,
    owner: int | None,
    user: str | None,
    owners: Collection[int],
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
    known_as = procfs.daemon_names(procfs.exe_name(pid, proc_root), procfs.comm(pid, proc_root), cmdline)
    daemon = procfs.daemon_name(known_as, names)
    if daemon:
        return f"system daemon ({daemon})"
    if owner is None:
        return "owner unknown"
    if not may_act_on(owner, owners):
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


MONITOR = "a monitor reading NVML (no CUDA context)"


def classify_holders(
    raw: Mapping[int, tuple[str, ...]],
    *,
    view: RunView,
    nvml_procs: Mapping[int, Mapping[int, int | None]],
    protected_names: Iterable[str],
    self_pid: int,
    owners: Collection[int],
    proc_root: str = "/proc",
) -> tuple[GpuHolder, ...]:
    """Sort holders into the live run's, the untouchable, strays (with positive reasons) and unknown ones (with
    why); vanished pids are dropped. ``nvml_procs`` is NVML's GPU index → pid → used memory.

    Membership comes from ``view`` (evidence: see :mod:`rlwatch.sources.membership`), never from a command-line
    pattern. Daemons are recognised by their executable name (``comm``, ``/proc/<pid>/exe`` or ``argv[0]``), never
    by a substring of the command line, so ``python serve.py --name nvidia-persistenced`` is not mistaken for one.
    Which GPUs a holder uses comes from NVML's per-process memory where NVML lists the pid; a CUDA process opens
    every visible ``/dev/nvidiaN``, so the device nodes are only a marked fallback. ``owners``: the users whose
    processes may be acted on (:func:`~rlwatch.sources.membership.run_owners`); anyone else's holder is protected.
    """
    names = set(protected_names)
    rlwatch_family = set(procfs.ancestors(self_pid, proc_root))
    btime = procfs.boot_time(proc_root)
    nvml_by_pid: dict[int, dict[int, int | None]] = {}
    for index, procs in nvml_procs.items():
        for pid, used in procs.items():
            nvml_by_pid.setdefault(pid, {})[index] = used
    out: list[GpuHolder] = []
    for pid in sorted(raw):
        stat = procfs.read_stat(pid, proc_root)
        create_time = None if stat is None else procfs.start_time_from_ticks(stat.starttime_ticks, btime)
        if stat is None or create_time is None:
            continue  # gone since the scan
        cmdline = procfs.read_cmdline(pid, proc_root)
        owner = procfs.uid(pid, proc_root)
        user = procfs.user_name(owner)
        per_gpu = nvml_by_pid.get(pid, {})
        known = [used for used in per_gpu.values() if used is not None]
        gpu_mem = sum(known) if known else None
        protected = _protected_reason(
            pid,
            names=names,
            rlwatch_family=rlwatch_family,
            self_pid=self_pid,
            owner=owner,
            user=user,
            owners=owners,
            proc_root=proc_root,
            cmdline=cmdline,
        )
        mapped = _mapped_paths(f"{proc_root}/{pid}/maps", "/dev/nvidia") if protected is None else None
        if protected is None and _nvml_client_only(tuple(raw[pid]), mapped, gpu_mem):
            protected = MONITOR
        verdict = view.verdict(pid, create_time)
        # A monitor that only opened the device nodes (no CUDA context) holds no GPU, whatever run it sits in.
        in_run = verdict.status == RUN and protected != MONITOR
        if per_gpu:
            gpus, attribution = tuple(sorted(per_gpu)), "nvml"
        else:
            gpus = tuple(sorted({i for i in map(gpu_index, raw[pid]) if i is not None}))
            attribution = "device nodes"
        out.append(
            GpuHolder(
                pid=pid,
                create_time=create_time,
                user=user,
                cmdline=cmdline or (f"[{stat.comm}]",),
                devices=tuple(raw[pid]),
                gpu_mem_bytes=gpu_mem,
                in_run=in_run,
                reason=verdict.why if verdict.status == STRAY and not protected else None,
                protected=protected,
                evidence=None if verdict.status == STRAY else verdict.why,
                gpus=gpus,
                attribution=attribution,
            )
        )
    return tuple(out)


# Used memory above what NVML's listed processes explain by more than this is not driver overhead.
UNEXPLAINED_BYTES = 2 * 1024**3


def attribute(
    gpus: Sequence[GpuState],
    nvml_procs: Mapping[int, Mapping[int, int | None]],
    holders: Sequence[GpuHolder],
    pid_exists: Callable[[int], bool],
) -> tuple[GpuState, ...]:
    """Each GPU with the local processes using it and the memory held where rlwatch cannot see.

    NVML counts every process on the GPU; a process in another container or PID namespace (the leftovers of an
    earlier container start, incident 4) appears under a pid that does not exist here, or not at all. That memory
    is reported as held *outside*, because no kill from in here can reach it. When NVML lists pids and none of them
    is a local holder while local holders exist, NVML is speaking another namespace's pids: nothing can be
    concluded, and ``outside_bytes`` stays unknown.
    """
    local = {h.pid: h for h in holders if h.protected != MONITOR}
    out = []
    for g in gpus:
        procs = nvml_procs.get(g.index)
        users = tuple(sorted(h.pid for h in holders if g.index in h.gpus))
        outside: int | None = None
        outside_pids: tuple[int, ...] = ()
        if procs is not None:
            here = [pid for pid in procs if pid in local]
            missing = tuple(sorted(pid for pid in procs if pid not in local and not pid_exists(pid)))
            local_on_gpu = [h for h in local.values() if g.index in h.gpus]
            if missing and not here and local_on_gpu:
                outside = None  # another namespace's pids: cannot tell which are ours
            else:
                outside_pids = missing
                outside = sum(procs[pid] or 0 for pid in missing)
                listed = sum(used or 0 for used in procs.values())
                unexplained = (g.mem_used_bytes or 0) - listed
                if not any(h.attribution != "nvml" for h in local_on_gpu) and unexplained > UNEXPLAINED_BYTES:
                    outside += unexplained
        out.append(replace(g, holders=users, outside_bytes=outside, outside_pids=outside_pids))
    return tuple(out)


def merge_nvml_pids(per_gpu: Mapping[int, Mapping[int, int | None]]) -> dict[int, int | None]:
    """pid → GPU memory summed over GPUs, from a backend's ``last_processes``."""
    out: dict[int, int | None] = {}
    for procs in per_gpu.values():
        for pid, used in procs.items():
            prev = out.get(pid)
            out[pid] = used if prev is None else prev + (used or 0)
    return out
