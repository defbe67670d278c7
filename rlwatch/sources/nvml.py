"""GPUs through NVML (nvidia-ml-py's ``pynvml``), built so a sick driver can never stall or crash rlwatch.

Every NVML call goes through :func:`nvml_query`, so one failing query (a field the board does not support, a GPU
that fell off the bus) costs that field only. All calls run on one worker thread and each sample waits at most
``query_timeout_s`` for it: a hung driver call — exactly what happens on a node in trouble — leaves the last good
values on screen, marked stale, instead of freezing the dashboard. A GPU that is lost triggers a fresh ``nvmlInit``
a little later, so one that comes back is seen again.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any, TypeVar

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.common.numbers import finite_float, finite_int
from rlwatch.common.state import GpuState, GpuStatus
from rlwatch.sources import one_line

T = TypeVar("T")

# NVML return codes (nvml.h); kept here so a missing library still lets errors be classified.
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

ProcessMap = dict[int, dict[int, int | None]]


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

    # ------------------------------------------------------------------------------------------ on the worker
    def _module(self) -> Any:
        if self._nvml is None:
            import pynvml

            self._nvml = pynvml
        return self._nvml

    def _ensure_init(self) -> str | None:
        now = self._clock.monotonic()
        if self._initialised and self._reinit_at is not None and now >= self._reinit_at:
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
            return GpuState(index, None, None, None, None, None, None, None, None)
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
        running = nvml_query(nv.nvmlDeviceGetComputeRunningProcesses, handle, errors=errors)
        if running is None and hasattr(nv, "nvmlDeviceGetComputeRunningProcesses_v2"):
            running = nvml_query(nv.nvmlDeviceGetComputeRunningProcesses_v2, handle)
        per_pid: dict[int, int | None] = {}
        for proc in running or ():
            pid = finite_int(getattr(proc, "pid", None))
            if pid is not None and pid > 0:
                per_pid[pid] = finite_int(getattr(proc, "usedGpuMemory", None))
        procs[index] = per_pid
        lost = [e for e in errors if error_code(e) in _LOST]
        if lost:
            problems.append(f"GPU {index}: {one_line(lost[0])}")
            self._schedule_reinit()
        return state

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
            future = self._worker.submit(lambda: nvml_query(self._module().nvmlShutdown))
            if future is not None:
                try:
                    future.result(timeout=self._timeout)
                except Exception:
                    pass
        self._worker.stop()
