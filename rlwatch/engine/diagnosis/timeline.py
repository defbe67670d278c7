"""The handful of moments that explain an incident, oldest first."""

from __future__ import annotations

import math

from rlwatch.common.state import (
    Snapshot,
    TimelineEntry,
)
from rlwatch.engine.diagnosis.crashes import failure_text
from rlwatch.engine.diagnosis.server import down_when
from rlwatch.engine.diagnosis.wording import (
    hhmm,
    last_text,
)


def timeline(s: Snapshot, limit: int = 20) -> tuple[TimelineEntry, ...]:
    """The handful of moments that explain an incident, oldest first (checkpoint 05:04 → server gone 05:09 → …)."""
    out: list[TimelineEntry] = []
    if s.checkpoint and s.checkpoint.latest and s.checkpoint.latest.saved_at:
        c = s.checkpoint.latest
        out.append(TimelineEntry(c.saved_at or 0.0, f"last checkpoint saved ({c.path.rsplit('/', 1)[-1]})"))
    since, when = down_when(s)
    if s.server and since:
        said = " (first seen)" if when.startswith("(first seen") else ""
        out.append(TimelineEntry(since, f"inference server down{said} ({s.server.error or 'no answer'})"))
    labels = {
        "connection_refused": "connection-refused errors",
        "cuda_busy": "'device busy or unavailable' errors",
        "emergency_brake": "emergency brake firing",
        "traceback": "tracebacks",
        "cuda_oom": "CUDA out of memory",
        "nccl_timeout": "NCCL timeouts",
        "restart": "restarts",
    }
    for kind, label in labels.items():
        ev = s.events.get(kind)
        if not ev or not ev.count:
            continue
        if not ev.approximate:
            if ev.first is not None:
                span = f" until {hhmm(ev.last, s.time)}" if ev.last and ev.last != ev.first else ""
                out.append(TimelineEntry(ev.first, f"{label} begin ({ev.count}{span})"))
            continue
        # Undated lines: no "until" (the time they were read says nothing), only bounds and where the last sits.
        first = ev.first if ev.first is not None else -math.inf
        text = f"{label} begin ({ev.count}, last {last_text(ev, s.time)})"
        out.append(TimelineEntry(first, text, approximate=True, by=ev.first_by))
    torchrun = any(i.root_cause is not None for i in s.incidents)
    for inc in s.incidents:
        if torchrun and inc.kind == "crash" and "ChildFailedError" in inc.title:
            continue  # the report read whole says more than the line that announced it
        if inc.kind == "crash" or inc.root_cause is not None:
            title = inc.title if inc.root_cause is None else f"torchrun failed: {failure_text(inc.root_cause)}"
            if inc.approximate:
                out.append(TimelineEntry(inc.first, f"crash: {title}", approximate=True, by=inc.by))
            else:
                out.append(TimelineEntry(inc.first, f"crash: {title}"))
        elif inc.kind == "nccl_timeout":
            out.append(TimelineEntry(inc.first, f"NCCL timeout: {inc.title}", approximate=inc.approximate, by=inc.by))
    if s.training and s.training.last_step_at:
        out.append(TimelineEntry(s.training.last_step_at, f"last training step ({s.training.last_step})"))
    out.sort(key=lambda e: (e.time, e.by if e.by is not None else e.time))
    return tuple(out[-limit:])
