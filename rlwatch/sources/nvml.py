"""GPUs through NVML (nvidia-ml-py's ``pynvml``), built so a sick driver can never stall or crash rlwatch.

Every NVML call goes through :func:`nvml_query`, so one failing query (a field the board does not support, a GPU
that fell off the bus) costs that field only. All calls run on one worker thread and each sample waits at most
``query_timeout_s`` for it: a hung driver call — exactly what happens on a node in trouble — leaves the last good
values on screen, marked stale, instead of freezing the dashboard. A GPU that is lost triggers a fresh ``nvmlInit``
a little later, so one that comes back is seen again.

Beside utilisation and memory, each GPU's hardware health is read the way NVIDIA's DCGM health checks read it
(``modules/health/DcgmHealthWatch.cpp``: volatile double-bit ECC errors, pending page retirements, retired pages,
row-remap failures, PCIe link), every ``HEALTH_EVERY_S`` (the counters move rarely): ECC error counts, retired pages
and remapped rows, PCIe link generation and width against their maximum, the clock event (throttle) reasons, and a
GPU NVML calls lost (``NVML_ERROR_GPU_IS_LOST`` from any call). Xid events come through NVML's event API where the
driver allows it (``nvmlDeviceRegisterEvents`` for ``nvmlEventTypeXidCriticalError``), drained without waiting
(timeout 0) at every sample. A board or driver that does not support a query gives None for that field only.
"""

from __future__ import annotations

import math
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any, TypeVar

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.common.numbers import finite_float, finite_int
from rlwatch.common.state import GpuHealth, GpuState, GpuStatus, HostEvent
from rlwatch.sources import one_line
from rlwatch.sources.kernel import normalize_pci

T = TypeVar("T")

# NVML return codes (nvml.h); kept here so a missing library still lets errors be classified.
ERROR_TIMEOUT = 10
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_GPU_NOT_FOUND = 28
ERROR_UNKNOWN = 999
_LOST = {ERROR_NOT_FOUND, ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED, ERROR_GPU_NOT_FOUND, ERROR_UNKNOWN}

COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}
TEMPERATURE_GPU = 0
# nvml.h: nvmlMemoryErrorType_t, nvmlEccCounterType_t, nvmlPageRetirementCause_t, nvmlEventTypeXidCriticalError.
MEMORY_ERROR_CORRECTED, MEMORY_ERROR_UNCORRECTED = 0, 1
VOLATILE_ECC, AGGREGATE_ECC = 0, 1
RETIRED_SBE_CAUSE, RETIRED_DBE_CAUSE = 0, 1
EVENT_XID = 0x0000000000000008
# nvml.h nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*): the bit and rlwatch's name for it.
CLOCK_EVENTS = {
    0x1: "idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
HEALTH_EVERY_S = 10.0  # ECC, retirement, remapping and the PCIe link change rarely; Xid events are read every sample
XID_KEEP = 32

ProcessMap = dict[int, dict[int, int | None]]


CLOCK_SM = 1  # nvml.h NVML_CLOCK_SM


def nvml_query(
    func: Callable[..., Any], *args: Any, default: Any = None, errors: list[BaseException] | None = None
) -> Any:
    """``func(*args)``, or ``default`` when it raises anything at all (the error is appended to ``errors``)."""
    try:
        return func(*args)
    except Exception as exc:
        if errors is not None:
            errors.append(exc)
        return default


def error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def describe_init_error(exc: BaseException) -> str:
    """Why NVML could not start, in the one line the GPU panel shows."""
    if isinstance(exc, ImportError):
        return "NVML library not found"
    code = error_code(exc)
    if code == ERROR_LIBRARY_NOT_FOUND:
        return "NVML library not found"
    if code == ERROR_LIB_RM_VERSION_MISMATCH or type(exc).__name__ == "NVMLLibraryMismatchError":
        return "driver/library version mismatch"
    if code == ERROR_DRIVER_NOT_LOADED:
        return "NVML init failed: driver not loaded"
    return f"NVML init failed: {one_line(exc)}"


def clock_event_names(mask: int) -> tuple[str, ...]:
    """The active clock event (throttle) reasons of a ``nvmlDeviceGetCurrentClocksEventReasons`` mask, by name."""
    return tuple(name for bit, name in CLOCK_EVENTS.items() if mask & bit)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


class _Worker:
    """One daemon thread that runs NVML jobs in order; a job stuck in the driver blocks only this thread.

    A daemon thread, not an executor, because executors join their threads at interpreter exit and a call hung in
    the driver would then hang rlwatch's exit too.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], T]) -> Future[T] | None:
        """Queue ``job``; None while an earlier job is still running (it may be hung)."""
        with self._lock:
            if self._busy:
                return None
            self._busy = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rlwatch-nvml", daemon=True)
                self._thread.start()
        future: Future[T] = Future()
        self._jobs.put((job, future))
        return future

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, future = item
            result: Any = None
            failure: BaseException | None = None
            try:
                result = job()
            except BaseException as exc:  # handed to the waiting caller
                failure = exc
            with self._lock:
                self._busy = False
            if failure is None:
                future.set_result(result)
            else:
                future.set_exception(failure)

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._busy

    def stop(self) -> None:
        self._jobs.put(None)


class NvmlBackend:
    """Real GPUs. ``nvml`` may be given a stand-in module for tests on machines without a GPU."""

    name = "nvml"

    def __init__(
        self,
        *,
        query_timeout_s: float = 2.0,
        clock: Clock | None = None,
        retry_s: float = 30.0,
        nvml: Any = None,
    ) -> None:
        self._timeout = query_timeout_s
        self._clock: Clock = clock or SystemClock()
        self._retry_s = retry_s
        self._nvml = nvml
        self._worker = _Worker()
        self._lock = threading.Lock()
        self._initialised = False
        self._init_error: str | None = None
        self._next_init_at = -math.inf
        self._reinit_at: float | None = None
        self._last_good: GpuStatus | None = None
        self._last_good_at: float | None = None
        self._closed = False
        self.last_processes: ProcessMap = {}
        self._health: dict[int, tuple[float, GpuHealth]] = {}  # index -> (monotonic time read, health)
        self._events: Any = None  # the NVML event set Xids arrive on; None: not created (yet, or not supported)
        self._events_error: str | None = None
        self._xids: dict[int, deque[HostEvent]] = {}

    # ------------------------------------------------------------------------------------------ on the worker
    def _module(self) -> Any:
        if self._nvml is None:
            import pynvml

            self._nvml = pynvml
        return self._nvml

    def _ensure_init(self) -> str | None:
        now = self._clock.monotonic()
        if self._initialised and self._reinit_at is not None and now >= self._reinit_at:
            self._free_events()
            nvml_query(self._module().nvmlShutdown)
            self._initialised = False
            self._next_init_at = -math.inf
        if self._initialised:
            return None
        if now < self._next_init_at:
            return self._init_error
        try:
            self._module().nvmlInit()
        except Exception as exc:
            self._init_error = describe_init_error(exc)
            self._next_init_at = now + self._retry_s
            return self._init_error
        self._initialised, self._init_error, self._reinit_at = True, None, None
        return None

    def _schedule_reinit(self) -> None:
        if self._reinit_at is None:
            self._reinit_at = self._clock.monotonic() + self._retry_s

    def _gpu(self, index: int, procs: ProcessMap, problems: list[str]) -> GpuState:
        nv = self._module()
        errors: list[BaseException] = []
        handle = nvml_query(nv.nvmlDeviceGetHandleByIndex, index, errors=errors)
        if handle is None:
            problems.append(f"GPU {index}: {one_line(errors[0]) if errors else 'no handle'}")
            self._schedule_reinit()
            why = next((one_line(e) for e in errors if error_code(e) == ERROR_GPU_IS_LOST), None)
            health = None if why is None else self._lost_health(index, why)
            return GpuState(index, None, None, None, None, None, None, None, None, health=health)
        util = nvml_query(nv.nvmlDeviceGetUtilizationRates, handle, errors=errors)
        memory = nvml_query(nv.nvmlDeviceGetMemoryInfo, handle, errors=errors)
        power_mw = finite_float(nvml_query(nv.nvmlDeviceGetPowerUsage, handle, errors=errors))
        mode = finite_int(nvml_query(nv.nvmlDeviceGetComputeMode, handle, errors=errors))
        state = GpuState(
            index=index,
            name=_text(nvml_query(nv.nvmlDeviceGetName, handle, errors=errors)),
            uuid=_text(nvml_query(nv.nvmlDeviceGetUUID, handle, errors=errors)),
            util=finite_float(getattr(util, "gpu", None)),
            mem_used_bytes=finite_int(getattr(memory, "used", None)),
            mem_total_bytes=finite_int(getattr(memory, "total", None)),
            temp_c=finite_float(nvml_query(nv.nvmlDeviceGetTemperature, handle, TEMPERATURE_GPU, errors=errors)),
            power_w=None if power_mw is None else power_mw / 1000.0,
            compute_mode=None if mode is None else COMPUTE_MODES.get(mode, str(mode)),
        )
        clock_info = getattr(nv, "nvmlDeviceGetClockInfo", None)
        if clock_info is not None:  # the engine keeps each GPU's draw over a window (Snapshot.gpu_activity)
            state = replace(state, sm_clock_mhz=finite_float(nvml_query(clock_info, handle, CLOCK_SM)))
        running = nvml_query(nv.nvmlDeviceGetComputeRunningProcesses, handle, errors=errors)
        if running is None and hasattr(nv, "nvmlDeviceGetComputeRunningProcesses_v2"):
            running = nvml_query(nv.nvmlDeviceGetComputeRunningProcesses_v2, handle)
        per_pid: dict[int, int | None] = {}
        for proc in running or ():
            pid = finite_int(getattr(proc, "pid", None))
            if pid is not None and pid > 0:
                per_pid[pid] = finite_int(getattr(proc, "usedGpuMemory", None))
        procs[index] = per_pid
        health = self._read_health(index, handle, errors)
        lost = [e for e in errors if error_code(e) in _LOST]
        if lost:
            problems.append(f"GPU {index}: {one_line(lost[0])}")
            self._schedule_reinit()
        gone = next((one_line(e) for e in errors if error_code(e) == ERROR_GPU_IS_LOST), None)
        if gone is not None:
            health = replace(health, lost=gone)
        return replace(state, health=health)

    # -------------------------------------------------------------------------------------------- health
    def _lost_health(self, index: int, why: str) -> GpuHealth:
        cached = self._health.get(index)
        base = cached[1] if cached is not None else GpuHealth()
        return replace(base, lost=why, xids=tuple(self._xids.get(index, ())))

    def _read_health(self, index: int, handle: Any, errors: list[BaseException]) -> GpuHealth:
        """The GPU's hardware health, read again every HEALTH_EVERY_S; the Xids NVML delivered are always fresh."""
        now = self._clock.monotonic()
        cached = self._health.get(index)
        if cached is not None and now - cached[0] < HEALTH_EVERY_S:
            health = cached[1]
        else:
            health = self._query_health(handle, errors)
            self._health[index] = (now, health)
        return replace(health, lost=None, xids=tuple(self._xids.get(index, ())))

    def _query_health(self, handle: Any, errors: list[BaseException]) -> GpuHealth:
        nv = self._module()

        def ask(name: str, *args: Any) -> Any:
            func = getattr(nv, name, None)
            return None if func is None else nvml_query(func, handle, *args, errors=errors)

        def count(kind: int, counter: int) -> int | None:
            return finite_int(ask("nvmlDeviceGetTotalEccErrors", kind, counter))

        def pages(cause: int) -> int | None:
            found = ask("nvmlDeviceGetRetiredPages", cause)
            return len(found) if isinstance(found, list | tuple) else None

        pci = ask("nvmlDeviceGetPciInfo")
        ecc = ask("nvmlDeviceGetEccMode")
        remap = ask("nvmlDeviceGetRemappedRows")
        remap = remap if isinstance(remap, list | tuple) and len(remap) == 4 else (None, None, None, None)
        pending = finite_int(ask("nvmlDeviceGetRetiredPagesPendingStatus"))
        reasons = finite_int(ask("nvmlDeviceGetCurrentClocksEventReasons"))
        if reasons is None:
            reasons = finite_int(ask("nvmlDeviceGetCurrentClocksThrottleReasons"))
        return GpuHealth(
            pci_bus_id=_text(getattr(pci, "busId", None)),
            ecc_enabled=None if not isinstance(ecc, list | tuple) or not ecc else bool(finite_int(ecc[0])),
            ecc_volatile_corrected=count(MEMORY_ERROR_CORRECTED, VOLATILE_ECC),
            ecc_volatile_uncorrected=count(MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC),
            ecc_aggregate_corrected=count(MEMORY_ERROR_CORRECTED, AGGREGATE_ECC),
            ecc_aggregate_uncorrected=count(MEMORY_ERROR_UNCORRECTED, AGGREGATE_ECC),
            retired_sbe=pages(RETIRED_SBE_CAUSE),
            retired_dbe=pages(RETIRED_DBE_CAUSE),
            retired_pending=None if pending is None else bool(pending),
            remap_correctable=finite_int(remap[0]),
            remap_uncorrectable=finite_int(remap[1]),
            remap_pending=None if finite_int(remap[2]) is None else bool(remap[2]),
            remap_failure=None if finite_int(remap[3]) is None else bool(remap[3]),
            pcie_gen=finite_int(ask("nvmlDeviceGetCurrPcieLinkGeneration")),
            pcie_gen_max=finite_int(ask("nvmlDeviceGetMaxPcieLinkGeneration")),
            pcie_width=finite_int(ask("nvmlDeviceGetCurrPcieLinkWidth")),
            pcie_width_max=finite_int(ask("nvmlDeviceGetMaxPcieLinkWidth")),
            clock_events=None if reasons is None else clock_event_names(reasons),
        )

    def _register_events(self, count: int) -> None:
        """Create the event set once per nvmlInit and register every GPU for Xid events; where the driver or the
        container does not allow it, Xids come from the kernel log only."""
        if self._events is not None or self._events_error is not None:
            return
        nv = self._module()
        errors: list[BaseException] = []
        events = nvml_query(nv.nvmlEventSetCreate, errors=errors) if hasattr(nv, "nvmlEventSetCreate") else None
        if events is None:
            self._events_error = f"NVML events: {one_line(errors[0]) if errors else 'not supported'}"
            return
        registered = 0
        for i in range(count):
            handle = nvml_query(nv.nvmlDeviceGetHandleByIndex, i)
            if (
                handle is not None
                and nvml_query(nv.nvmlDeviceRegisterEvents, handle, EVENT_XID, events, errors=errors) is None
                and not errors
            ):
                registered += 1
            errors.clear()
        if registered == 0:
            nvml_query(nv.nvmlEventSetFree, events)
            self._events_error = "NVML events: Xid events not supported here"
            return
        self._events = events

    def _drain_events(self, pci_of: dict[int, str | None]) -> None:
        """Every Xid event waiting, without waiting for more (timeout 0)."""
        if self._events is None:
            return
        nv = self._module()
        wait = getattr(nv, "nvmlEventSetWait_v2", None) or getattr(nv, "nvmlEventSetWait", None)
        if wait is None:
            return
        for _ in range(64):
            errors: list[BaseException] = []
            data = nvml_query(wait, self._events, 0, errors=errors)
            if data is None:
                if errors and error_code(errors[0]) not in (ERROR_TIMEOUT, None):
                    self._events_error = f"NVML events: {one_line(errors[0])}"
                return
            xid = finite_int(getattr(data, "eventData", None))
            if xid is None:
                continue
            index = finite_int(nvml_query(nv.nvmlDeviceGetIndex, getattr(data, "device", None)))
            if index is None:
                index = -1
            pci = normalize_pci(pci_of.get(index))
            event = HostEvent(
                kind="xid",
                time=self._clock.time(),
                text=f"NVML: Xid {xid} on GPU {index}",
                source="nvml",
                pci=pci,
                gpu=index if index >= 0 else None,
                xid=xid,
            )
            self._xids.setdefault(index, deque(maxlen=XID_KEEP)).append(event)

    def _free_events(self) -> None:
        if self._events is not None:
            nvml_query(self._module().nvmlEventSetFree, self._events)
        self._events = None
        self._events_error = None
        self._health.clear()

    def _collect(self) -> tuple[GpuStatus, ProcessMap]:
        error = self._ensure_init()
        if error is not None:
            return GpuStatus(backend=self.name, available=False, error=error), {}
        errors: list[BaseException] = []
        count = finite_int(nvml_query(self._module().nvmlDeviceGetCount, errors=errors))
        if count is None:
            self._schedule_reinit()
            reason = one_line(errors[0]) if errors else "no answer"
            return GpuStatus(backend=self.name, available=False, error=f"NVML cannot count GPUs: {reason}"), {}
        procs: ProcessMap = {}
        problems: list[str] = []
        self._register_events(count)
        self._drain_events({i: h.pci_bus_id for i, (_, h) in self._health.items()})
        gpus = tuple(self._gpu(i, procs, problems) for i in range(count))
        return GpuStatus(backend=self.name, available=True, error="; ".join(problems) or None, gpus=gpus), procs

    def _collect_and_keep(self) -> GpuStatus:
        status, procs = self._collect()
        with self._lock:
            if status.available:
                self._last_good, self._last_good_at = status, self._clock.time()
                self.last_processes = procs
            else:
                self._last_good, self._last_good_at = None, None
                self.last_processes = {}
        return status

    # --------------------------------------------------------------------------------------- caller's thread
    def _stale(self, reason: str) -> GpuStatus:
        with self._lock:
            last, at = self._last_good, self._last_good_at
        if last is None or at is None:
            return GpuStatus(backend=self.name, available=False, error=reason)
        age = max(0.0, self._clock.time() - at)
        return replace(last, error=f"stale: {reason}; values from {age:.0f}s ago")

    def sample(self) -> GpuStatus:
        if self._closed:
            return GpuStatus(backend=self.name, available=False, error="NVML backend closed")
        future = self._worker.submit(self._collect_and_keep)
        if future is None:
            return self._stale(f"NVML did not answer within {self._timeout:g}s")
        try:
            return future.result(timeout=self._timeout)
        except FutureTimeout:
            return self._stale(f"NVML did not answer within {self._timeout:g}s")
        except Exception as exc:
            return GpuStatus(backend=self.name, available=False, error=f"NVML failed: {one_line(exc)}")

    def probe(self) -> str | None:
        """Initialise NVML now; the reason it cannot be used, or None when it works."""
        future = self._worker.submit(self._ensure_init)
        if future is None:
            return f"NVML did not answer within {self._timeout:g}s"
        try:
            return future.result(timeout=self._timeout)
        except FutureTimeout:
            return f"NVML did not answer within {self._timeout:g}s"
        except Exception as exc:
            return describe_init_error(exc)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._initialised:

            def shutdown() -> None:
                self._free_events()
                nvml_query(self._module().nvmlShutdown)

            future = self._worker.submit(shutdown)
            if future is not None:
                try:
                    future.result(timeout=self._timeout)
                except Exception:
                    pass
        self._worker.stop()
