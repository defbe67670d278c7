"""The GPU source behind one small interface: real GPUs through NVML, a simulator's state file, or none.

Machines without a GPU (laptops, CI, the simulator) get a backend that says so in words rather than an error, since
a host with no GPU is not a problem in itself. Every backend also exposes ``last_processes`` — which pids NVML
(or the simulator) says use which GPU — for the cross-check against the device holders found in /proc.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.common.numbers import finite_float, finite_int
from rlwatch.common.state import GpuHealth, GpuState, GpuStatus, HostEvent
from rlwatch.config.models import GpuConfig
from rlwatch.sources import one_line
from rlwatch.sources.kernel import normalize_pci
from rlwatch.sources.nvml import NvmlBackend, ProcessMap

DEFAULT_SIMULATED_STATE = ".sim/gpu_state.json"


class GpuBackend(Protocol):
    name: str
    last_processes: ProcessMap  # gpu index → pid → GPU memory in bytes (None when the driver does not say)

    def sample(self) -> GpuStatus: ...

    def close(self) -> None: ...


class NoGpuBackend:
    name = "none"

    def __init__(self, reason: str | None = None) -> None:
        self._error = f"no GPU backend ({reason})" if reason else "no GPU backend"
        self.last_processes: ProcessMap = {}

    def sample(self) -> GpuStatus:
        return GpuStatus(backend=self.name, available=False, error=self._error)

    def close(self) -> None:
        return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_HEALTH_INTS = (
    "ecc_volatile_corrected",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_corrected",
    "ecc_aggregate_uncorrected",
    "retired_sbe",
    "retired_dbe",
    "remap_correctable",
    "remap_uncorrectable",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
)
_HEALTH_BOOLS = ("ecc_enabled", "retired_pending", "remap_pending", "remap_failure")


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def parse_health(item: Any, index: int) -> GpuHealth | None:
    """A simulated GPU's ``health`` object, shaped like :class:`GpuHealth` (every field optional): so the simulator
    and the tests can make a GPU show any condition NVML can report. ``lost``: true or the error's text; ``xids``: a
    list of ``{"xid": 79, "time": …}``."""
    if not isinstance(item, dict):
        return None
    ints = {key: finite_int(item.get(key)) for key in _HEALTH_INTS}
    bools = {key: _bool(item.get(key)) for key in _HEALTH_BOOLS}
    events = item.get("clock_events")
    lost = item.get("lost")
    xids = []
    raw_xids = item.get("xids")
    for x in raw_xids if isinstance(raw_xids, list) else ():
        code = finite_int(x.get("xid")) if isinstance(x, dict) else None
        if code is not None and isinstance(x, dict):
            pci = _str(item.get("pci_bus_id"))
            xids.append(
                HostEvent(
                    kind="xid",
                    time=finite_float(x.get("time")),
                    text=_str(x.get("text")) or f"NVML: Xid {code} on GPU {index}",
                    source="nvml",
                    gpu=index,
                    pci=normalize_pci(pci),
                    xid=code,
                )
            )
    return GpuHealth(
        pci_bus_id=_str(item.get("pci_bus_id")),
        clock_events=tuple(e for e in events if isinstance(e, str)) if isinstance(events, list) else None,
        lost=("GPU is lost" if lost is True else _str(lost)),
        xids=tuple(xids),
        **ints,  # type: ignore[arg-type]
        **bools,
    )


def parse_simulated(data: Any) -> tuple[tuple[GpuState, ...], ProcessMap] | None:
    """The simulator's GPU document; None when it has no ``gpus`` list. Missing or mistyped fields become None."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        return None
    gpus: list[GpuState] = []
    procs: ProcessMap = {}
    for position, item in enumerate(data["gpus"]):
        if not isinstance(item, dict):
            continue
        index = finite_int(item.get("index"))
        index = position if index is None else index
        gpus.append(
            GpuState(
                index=index,
                name=_str(item.get("name")),
                uuid=_str(item.get("uuid")),
                util=finite_float(item.get("util")),
                mem_used_bytes=finite_int(item.get("mem_used_bytes")),
                mem_total_bytes=finite_int(item.get("mem_total_bytes")),
                temp_c=finite_float(item.get("temp_c")),
                power_w=finite_float(item.get("power_w")),
                compute_mode=_str(item.get("compute_mode")),
                health=parse_health(item.get("health"), index),
            )
        )
        per_pid: dict[int, int | None] = {}
        raw_procs = item.get("processes")
        for proc in raw_procs if isinstance(raw_procs, list) else ():
            pid = finite_int(proc.get("pid")) if isinstance(proc, dict) else None
            if pid is not None and pid > 0:
                per_pid[pid] = finite_int(proc.get("used_bytes")) if isinstance(proc, dict) else None
        procs[index] = per_pid
    return tuple(gpus), procs


class SimulatedBackend:
    """GPUs described by a JSON file the simulator rewrites atomically every second."""

    name = "simulated"

    def __init__(self, state_file: str | Path, *, clock: Clock | None = None, stale_after_s: float = 10.0) -> None:
        self._path = Path(state_file)
        self._clock: Clock = clock or SystemClock()
        self._stale_after_s = stale_after_s
        self.last_processes: ProcessMap = {}

    def _unavailable(self, error: str) -> GpuStatus:
        self.last_processes = {}
        return GpuStatus(backend=self.name, available=False, error=error)

    def sample(self) -> GpuStatus:
        try:
            text = self._path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return self._unavailable(f"simulated GPU state not found: {self._path}")
        except (OSError, ValueError) as exc:
            return self._unavailable(f"simulated GPU state not readable: {one_line(exc)}")
        try:
            data = json.loads(text)
        except ValueError:
            return self._unavailable("simulated GPU state is not valid JSON (half-written?)")
        parsed = parse_simulated(data)
        if parsed is None:
            return self._unavailable("simulated GPU state has no 'gpus' list")
        gpus, procs = parsed
        self.last_processes = procs
        error = None
        written = finite_float(data.get("time"))
        if written is not None:
            age = self._clock.time() - written
            if age > self._stale_after_s:
                error = f"stale: simulated GPU state is {age:.0f}s old"
        return GpuStatus(backend=self.name, available=True, error=error, gpus=gpus)

    def close(self) -> None:
        return None


def make_gpu_backend(cfg: GpuConfig, run_dir: str | Path, *, clock: Clock | None = None) -> GpuBackend:
    """The configured backend; ``auto`` is NVML when it initialises, otherwise none (with NVML's reason)."""
    if cfg.backend == "simulated":
        path = Path(cfg.simulated_state or DEFAULT_SIMULATED_STATE)
        return SimulatedBackend(path if path.is_absolute() else Path(run_dir) / path, clock=clock)
    if cfg.backend == "none":
        return NoGpuBackend()
    nvml = NvmlBackend(query_timeout_s=cfg.query_timeout_s, clock=clock)
    if cfg.backend == "nvml":
        return nvml
    reason = nvml.probe()
    if reason is None:
        return nvml
    nvml.close()
    return NoGpuBackend(reason)
