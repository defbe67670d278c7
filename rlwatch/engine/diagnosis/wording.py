"""How the diagnosis says times, sizes and durations: as far as they are known, never a made-up precision.

A line without a time of its own is given bounds (\"between\", \"before\", \"after\") and its place in the file,
never the time it was read; every view that writes a time takes it from here.
"""

from __future__ import annotations

import math
import time

from rlwatch.common.state import (
    EventSummary,
    Incident,
)


def hhmm(t: float | None, now: float | None = None) -> str:
    """A clock time; with the date too when ``t`` is not on the same day as ``now`` (a log from yesterday)."""
    if t is None or not math.isfinite(t):
        return "?"
    same_day = now is None or time.localtime(t)[:3] == time.localtime(now)[:3]
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", time.localtime(t))


def known(t: float | None) -> float | None:
    return t if t is not None and math.isfinite(t) else None


def when_text(
    t: float | None, by: float | None, approximate: bool, now: float | None = None, position: str | None = None
) -> str:
    """A time as far as it is known. Lines without a time of their own (read from a backlog) have only bounds:
    "between 09:12:03 and 09:40:00", "before 09:40:00" (the file's modification time), "after 09:12:03", or
    "time unknown", with where the line sits ("train.log:5123, after step 1869"). Never the time it was read."""
    t, by = known(t), known(by)
    if not approximate or (t is not None and by == t):
        return hhmm(t, now)
    if t is None and by is None:
        out = "time unknown"
    elif by is None:
        out = f"after {hhmm(t, now)}"
    elif t is None:
        out = f"before {hhmm(by, now)}"
    else:
        a, b = hhmm(t, now), hhmm(by, now)
        out = a if a == b else f"between {a} and {b}"  # bounds within one second read as that second
    return f"{out} ({position})" if position else out


def first_text(ev: EventSummary, now: float | None = None) -> str:
    """When a kind was first seen, as far as it is known (see :func:`when_text`)."""
    return when_text(ev.first, ev.first_by, ev.approximate, now)


def last_text(ev: EventSummary, now: float | None = None) -> str:
    """When a kind was last seen, as far as it is known, with where its last line sits when undated."""
    return when_text(ev.last, ev.last_by, ev.approximate, now, ev.position)


def incident_text(i: Incident, now: float | None = None, *, said: str | None = None) -> str:
    """When an incident happened, as far as it is known: its first line's own time, else its last line's, else
    bounds and position. ``said``: the ``file:line`` the caller already wrote beside it, not repeated."""
    if i.first_exact and math.isfinite(i.first):
        return hhmm(i.first, now)
    position = i.position
    if said and position and position.startswith(said):
        position = position[len(said) :].lstrip(", ") or None
    return when_text(i.last, i.by, i.approximate, now, position)


def exact_first(ev: EventSummary | None) -> float | None:
    """The first time of a kind where it is known exactly (a finding's "since"); None where it is only bounded."""
    if ev is None or ev.first is None:
        return None
    return ev.first if not ev.approximate or ev.first_by == ev.first else None


def exact_time(i: Incident) -> float | None:
    """An incident's first time where it is known exactly; None where it is only bounded."""
    return i.first if i.first_exact and math.isfinite(i.first) else None


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def backlog_text(done: int, total: int) -> str:
    """How far a backlog has been read, as the dashboard's header and `report` at a terminal say it."""
    return f"reading backlog: {share(done, total)}"


def percent_read(done: int, total: int) -> int:
    return 100 * done // max(total, 1)


def share(done: int, total: int) -> str:
    return f"{percent_read(done, total)} % of {human_bytes(total)}"


def human_duration(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{s / 60:.0f}m"
    if s < 2 * 86400:
        return f"{s // 3600:.0f}h{(s % 3600) / 60:02.0f}m"
    return f"{s / 86400:.1f}d"
