"""What this GPU host says of its hardware, as rlwatch reads it: run on a GPU host, commit the JSON it writes.

    .venv/bin/python tests/real/host/collect_gpu_health.py tests/real/gpu-facts/health.json

For each GPU: every health field rlwatch reads through NVML and the raw answer (or NVML error) of each query behind
it; whether NVML's Xid event set could be created and registered; which kernel log rlwatch can read here (/dev/kmsg,
journalctl, dmesg) and what it found; the pod's limits (/dev/shm, the cgroup's memory, RDMA and RLIMIT_MEMLOCK).
Nothing is changed on the host. The output holds no secrets (no environment, no command lines): only hardware facts.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any


def _raw(nv: Any, name: str, *args: Any) -> Any:
    func = getattr(nv, name, None)
    if func is None:
        return {"error": "not in this pynvml"}
    try:
        value = func(*args)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "code": getattr(exc, "value", None)}
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):
        return [v if isinstance(v, int | float | str) else repr(v) for v in value][:16]
    if isinstance(value, int | float | str) or value is None:
        return value
    busid = getattr(value, "busId", None)
    if busid is not None:
        return busid.decode(errors="replace") if isinstance(busid, bytes) else str(busid)
    return repr(value)


def main(out: str | None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    import pynvml

    from rlwatch.sources.kernel import KernelLog
    from rlwatch.sources.limits import LimitsSource
    from rlwatch.sources.memory import read_cgroup_memory
    from rlwatch.sources.nvml import NvmlBackend

    facts: dict[str, Any] = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kernel": platform.release()}
    pynvml.nvmlInit()
    facts["driver"] = _raw(pynvml, "nvmlSystemGetDriverVersion")
    facts["nvml"] = _raw(pynvml, "nvmlSystemGetNVMLVersion")
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        raw = {
            "name": _raw(pynvml, "nvmlDeviceGetName", h),
            "pci": _raw(pynvml, "nvmlDeviceGetPciInfo", h),
            "ecc_mode": _raw(pynvml, "nvmlDeviceGetEccMode", h),
            "ecc": {
                f"{kind}/{counter}": _raw(pynvml, "nvmlDeviceGetTotalEccErrors", h, k, c)
                for k, kind in ((0, "corrected"), (1, "uncorrected"))
                for c, counter in ((0, "volatile"), (1, "aggregate"))
            },
            "retired_sbe": _raw(pynvml, "nvmlDeviceGetRetiredPages", h, 0),
            "retired_dbe": _raw(pynvml, "nvmlDeviceGetRetiredPages", h, 1),
            "retired_pending": _raw(pynvml, "nvmlDeviceGetRetiredPagesPendingStatus", h),
            "remapped_rows": _raw(pynvml, "nvmlDeviceGetRemappedRows", h),
            "pcie": [
                _raw(pynvml, name, h)
                for name in (
                    "nvmlDeviceGetCurrPcieLinkGeneration",
                    "nvmlDeviceGetMaxPcieLinkGeneration",
                    "nvmlDeviceGetCurrPcieLinkWidth",
                    "nvmlDeviceGetMaxPcieLinkWidth",
                )
            ],
            "clock_event_reasons": _raw(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", h),
            "supported_events": _raw(pynvml, "nvmlDeviceGetSupportedEventTypes", h),
        }
        gpus.append({"index": i, "raw": raw})
    events: dict[str, Any] = {}
    try:
        event_set = pynvml.nvmlEventSetCreate()
        events["create"] = "ok"
        events["register"] = [
            _raw(pynvml, "nvmlDeviceRegisterEvents", pynvml.nvmlDeviceGetHandleByIndex(i), 8, event_set)
            for i in range(len(gpus))
        ]
        events["wait_0ms"] = _raw(pynvml, "nvmlEventSetWait_v2", event_set, 0)
        pynvml.nvmlEventSetFree(event_set)
    except Exception as exc:
        events["create"] = f"{type(exc).__name__}: {exc}"
    facts["events"] = events
    pynvml.nvmlShutdown()

    backend = NvmlBackend(query_timeout_s=10.0)
    status = backend.sample()
    backend.close()
    for entry, g in zip(gpus, status.gpus, strict=False):
        entry["rlwatch"] = None if g.health is None else asdict(g.health)
        entry["rlwatch_error"] = status.error
    facts["gpus"] = gpus

    log = KernelLog("/nonexistent")
    k = log.sample()
    log.close()
    facts["kernel_log"] = {
        "source": k.source,
        "available": k.available,
        "error": k.error,
        "events": [{"kind": e.kind, "xid": e.xid, "text": e.text} for e in k.events[-20:]],
    }
    lim = LimitsSource().sample([])
    facts["limits"] = {"shm_total_bytes": lim.shm_total_bytes, "shm_free_bytes": lim.shm_free_bytes, "rdma": lim.rdma}
    self_cgroup = Path("/proc/self/cgroup").read_text() if os.path.exists("/proc/self/cgroup") else None
    memory = read_cgroup_memory(Path("/sys/fs/cgroup"), self_cgroup)
    facts["cgroup_memory"] = dict(zip(("limit", "usage", "working_set", "oom_events"), memory, strict=True))
    text = json.dumps(facts, indent=2, default=str)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
