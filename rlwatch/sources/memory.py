"""Host memory, swap, the cgroup's OOM-kill counter, and a forecast of when available memory runs out.

Inside a container ``dmesg`` is forbidden, so the kernel's OOM kills are read from the cgroup counters instead:
``memory.events`` (cgroup v2) or ``memory.oom_control`` (cgroup v1). The process's own cgroup is tried before the
mount root because on hosts without a cgroup namespace the root is the whole machine, not this container.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from rlwatch.common import forecast
from rlwatch.common.clock import Clock
from rlwatch.common.state import MemoryState, ProcessInfo, Series
from rlwatch.sources import one_line

FORECAST_WINDOW_S = 600.0
# A fall smaller than this over the window is page-cache churn, not a trend worth a forecast.
FORECAST_MIN_DROP_BYTES = 256 * 1024**2


@dataclass(frozen=True, slots=True)
class VmReading:
    total_bytes: int | None
    available_bytes: int | None
    swap_total_bytes: int | None
    swap_used_bytes: int | None


def read_vm() -> VmReading:
    """Host memory as psutil sees it (``MemAvailable`` from /proc/meminfo, which counts reclaimable cache)."""
    vm = psutil.virtual_memory()
    try:
        swap = psutil.swap_memory()
        swap_total: int | None = int(swap.total)
        swap_used: int | None = int(swap.used)
    except (OSError, RuntimeError):
        swap_total = swap_used = None
    return VmReading(int(vm.total), int(vm.available), swap_total, swap_used)


def _parse_flat_keyed(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        key, value = parts
        try:
            out[key] = int(value)
        except ValueError:
            continue
    return out


def parse_memory_events(text: str) -> dict[str, int]:
    """cgroup v2 ``memory.events``: ``key value`` lines (``oom``, ``oom_kill``, ``max`` …); junk lines are skipped."""
    return _parse_flat_keyed(text)


def parse_oom_control(text: str) -> dict[str, int]:
    """cgroup v1 ``memory.oom_control``: ``oom_kill_disable``, ``under_oom`` and (kernel ≥ 4.13) ``oom_kill``."""
    return _parse_flat_keyed(text)


def parse_self_cgroup(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as controller → path; the v2 unified entry (``0::/path``) is keyed ``""``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        for controller in parts[1].split(","):
            out.setdefault(controller, parts[2])
    return out


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _under(root: Path, cgroup_path: str | None) -> list[Path]:
    """The process's own cgroup directory first, then the mount root itself."""
    dirs = []
    if cgroup_path and cgroup_path.strip("/"):
        dirs.append(root / cgroup_path.strip("/"))
    dirs.append(root)
    return dirs


def _first_oom_kill(dirs: list[Path], name: str, parse: Callable[[str], dict[str, int]]) -> int | None:
    """The ``oom_kill`` count in the first of ``dirs`` whose file ``name`` has one."""
    for directory in dirs:
        text = _read_text(directory / name)
        if text is not None:
            value = parse(text).get("oom_kill")
            if value is not None:
                return value
    return None


def read_oom_kills(cgroup_root: Path, self_cgroup: str | None) -> tuple[int | None, str | None]:
    """The OOM-kill counter of this process's cgroup, or None and the reason it could not be read."""
    own = parse_self_cgroup(self_cgroup or "")
    if (cgroup_root / "cgroup.controllers").exists():
        value = _first_oom_kill(_under(cgroup_root, own.get("")), "memory.events", parse_memory_events)
        missing = f"no oom_kill counter in {cgroup_root}/…/memory.events"
    else:
        v1_dirs = _under(cgroup_root / "memory", own.get("memory"))
        value = _first_oom_kill(v1_dirs, "memory.oom_control", parse_oom_control)
        missing = f"no cgroup OOM counter under {cgroup_root}"
    return (value, None) if value is not None else (None, missing)


UNLIMITED_V1 = 1 << 62  # cgroup v1 writes 9223372036854771712 (PAGE_COUNTER_MAX) for "no limit"


def _int_file(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None


def read_cgroup_memory(
    cgroup_root: Path, self_cgroup: str | None
) -> tuple[int | None, int | None, int | None, int | None]:
    """This container's memory limit, usage, working set and OOM-event count (cgroup v2 ``memory.max``,
    ``memory.current``, ``memory.stat``, ``memory.events``; v1 ``memory.limit_in_bytes``, ``memory.usage_in_bytes``,
    ``memory.stat``), from the process's own cgroup first. A Kubernetes or Docker limit is what the OOM killer
    enforces here, however much RAM the host has; the working set (usage less inactive file cache) is what the
    kubelet's eviction and ``kubectl top`` count. The limit is None when there is none."""
    own = parse_self_cgroup(self_cgroup or "")
    if (cgroup_root / "cgroup.controllers").exists():
        for d in _under(cgroup_root, own.get("")):
            raw = _read_text(d / "memory.max")
            if raw is None:
                continue
            limit = None if raw.strip() == "max" else _int_file(d / "memory.max")
            usage = _int_file(d / "memory.current")
            stat = _parse_flat_keyed(_read_text(d / "memory.stat") or "")
            events = parse_memory_events(_read_text(d / "memory.events") or "")
            inactive = stat.get("inactive_file")
            working = None if usage is None else max(0, usage - (inactive or 0))
            return limit, usage, working, events.get("oom")
        return None, None, None, None
    for d in _under(cgroup_root / "memory", own.get("memory")):
        limit = _int_file(d / "memory.limit_in_bytes")
        if limit is None:
            continue
        usage = _int_file(d / "memory.usage_in_bytes")
        stat = _parse_flat_keyed(_read_text(d / "memory.stat") or "")
        inactive = stat.get("total_inactive_file", stat.get("inactive_file"))
        working = None if usage is None else max(0, usage - (inactive or 0))
        return (None if limit >= UNLIMITED_V1 else limit), usage, working, None
    return None, None, None, None


class MemorySource:
    """Samples host memory each tick and keeps a short history for the exhaustion forecast and the RAM graph."""

    def __init__(
        self,
        clock: Clock,
        *,
        cgroup_root: str | Path = "/sys/fs/cgroup",
        history: int = 600,
        self_cgroup_file: str | Path = "/proc/self/cgroup",
        reader: Callable[[], VmReading] = read_vm,
    ) -> None:
        self._clock = clock
        self._cgroup_root = Path(cgroup_root)
        self._self_cgroup = _read_text(Path(self_cgroup_file))
        self._reader = reader
        # (monotonic, wall, available, used %, swap used %)
        self._samples: deque[tuple[float, float, float | None, float | None, float | None]] = deque(
            maxlen=max(2, history)
        )
        self.error: str | None = None

    def sample(self) -> MemoryState:
        errors: list[str] = []
        try:
            vm = self._reader()
        except Exception as exc:  # psutil on a broken /proc: report, never raise
            vm = VmReading(None, None, None, None)
            errors.append(f"memory not readable: {one_line(exc)}")
        oom_kills, oom_error = read_oom_kills(self._cgroup_root, self._self_cgroup)
        if oom_error:
            errors.append(oom_error)
        self._record(vm)
        self.error = "; ".join(errors) or None
        limit, usage, working, oom_events = read_cgroup_memory(self._cgroup_root, self._self_cgroup)
        if limit is not None and vm.total_bytes is not None and limit >= vm.total_bytes:
            limit = None  # a limit above the host's RAM limits nothing: the host's RAM is the limit
        return MemoryState(
            total_bytes=vm.total_bytes,
            available_bytes=vm.available_bytes,
            swap_total_bytes=vm.swap_total_bytes,
            swap_used_bytes=vm.swap_used_bytes,
            oom_kills=oom_kills,
            forecast_exhausted_at=self.forecast_exhausted_at(),
            cgroup_limit_bytes=limit,
            cgroup_usage_bytes=usage,
            cgroup_working_set_bytes=working,
            cgroup_oom_events=oom_events,
        )

    def _record(self, vm: VmReading) -> None:
        used_pct = _pct(
            None if vm.total_bytes is None or vm.available_bytes is None else vm.total_bytes - vm.available_bytes,
            vm.total_bytes,
        )
        swap_pct = _pct(vm.swap_used_bytes, vm.swap_total_bytes)
        available = None if vm.available_bytes is None else float(vm.available_bytes)
        self._samples.append((self._clock.monotonic(), self._clock.time(), available, used_pct, swap_pct))

    def forecast_exhausted_at(self) -> float | None:
        """Wall time at which available memory reaches zero if the recent fall continues; None if not falling."""
        points = [(mono, wall, avail) for mono, wall, avail, _, _ in self._samples if avail is not None]
        return forecast.exhausted_at(points, window_s=FORECAST_WINDOW_S, min_drop=FORECAST_MIN_DROP_BYTES)

    def ram_history(self) -> Series:
        """Used RAM in percent of total, oldest first, by wall time."""
        return Series(tuple(s[1] for s in self._samples), tuple(s[3] for s in self._samples))

    def swap_history(self) -> Series:
        return Series(tuple(s[1] for s in self._samples), tuple(s[4] for s in self._samples))


def _pct(part: int | None, whole: int | None) -> float | None:
    if part is None or not whole:
        return None
    value = 100.0 * part / whole
    return value if math.isfinite(value) else None


def with_growth_forecast(
    mem: MemoryState, procs: Sequence[ProcessInfo], leak_bytes_per_hour: float, now: float
) -> MemoryState:
    """The forecast from the processes that grow, where it runs RAM out sooner than the host's trend: two workers
    leaking 6.5 GB/h beside a flat host total (page cache giving way) must never read "RAM is not running out".
    The memory panel and the leak findings say the same time, from this one figure."""
    growers = [
        p
        for p in procs
        if p.alive and p.rss_growth_bytes_per_hour is not None and p.rss_growth_bytes_per_hour >= leak_bytes_per_hour
    ]
    room: float | None = mem.available_bytes
    if mem.cgroup_limit_bytes and (held := mem.cgroup_working_set_bytes or mem.cgroup_usage_bytes) is not None:
        room = max(0.0, float(mem.cgroup_limit_bytes - held))  # the container's limit is what runs out here
    if not growers or room is None:
        return mem
    rate = sum(p.rss_growth_bytes_per_hour or 0.0 for p in growers)
    at = now + room / rate * 3600.0
    if mem.forecast_exhausted_at is not None and mem.forecast_exhausted_at <= at:
        return mem
    names = ", ".join(p.name for p in growers[:3]) + (f" and {len(growers) - 3} more" if len(growers) > 3 else "")
    gb = rate / 1e9
    words = f"{names} growing {gb:.1f} GB/h" if gb >= 0.1 else f"{names} growing {rate / 1e6:.0f} MB/h"
    return replace(mem, forecast_exhausted_at=at, forecast_from=words)
