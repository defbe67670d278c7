"""The time a log line says it was written.

Counting a backlog must place old events at their own time, not at the time rlwatch happened to read them, or
every rate and "first seen" would be wrong after a restart of rlwatch. Only matched lines are parsed, so this is
off the hot path. The frameworks write local time without a zone; the stamps that container runtimes put in front
of each line (docker, Kubernetes, CRI log files) are RFC 3339 with a zone, and win where a line holds both: they
come first, carry the year and the zone, and were taken when the line was written.
"""

from __future__ import annotations

import calendar
import re
import time
from datetime import datetime
from functools import lru_cache

__all__ = ["HMS_BYTES", "local_minute", "parse_time"]

# The timestamp sits near the start of a line, behind at most an ANSI-stripped logger prefix such as
# "(AReaL) " or "[rank0]:"; looking further would pick up times quoted inside messages.
_SEARCH_CHARS = 200

_HMS = re.compile(r"\d\d:\d\d:\d\d", re.ASCII)
HMS_BYTES = re.compile(rb"\d\d:\d\d:\d\d")  # the same test on raw bytes: skips decoding lines without a time
# docker logs --timestamps, kubectl logs --timestamps, CRI log files, docker compose --timestamps:
# "2026-11-24T05:09:01.123456789Z" (RFC3339Nano, UTC; trailing zeros dropped) or with an offset "+01:00".
_RFC3339 = re.compile(
    r"(?<!\d)(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)(?![\d:])", re.ASCII
)
# AReaL: 20251121-09:15:30.652
_AREAL = re.compile(r"(?<!\d)(\d{4})(\d\d)(\d\d)-(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?!\d)", re.ASCII)
# SGLang "[2025-03-14 02:15:58 TP0]", Python logging "2025-03-14 02:15:58,123", ISO "2025-03-14T02:15:58.1"
_ISO = re.compile(r"(?<!\d)(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?(?!\d)", re.ASCII)
# mmengine's log file (MMLogger's FileHandler, datefmt '%Y/%m/%d %H:%M:%S', mmengine/logging/logger.py):
# "2022/08/22 15:51:56 - mmengine - INFO - Epoch(train) [1][10/1563] ..."
_YMD_SLASH = re.compile(r"(?<!\d)(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)()(?!\d)", re.ASCII)
# vLLM: "INFO 05-06 20:59:57" (no year)
_VLLM = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?!\d)", re.ASCII
)
# glog (torch C++ and torchrun): "[E1121 06:24:44.903881913 ..." or "W1121 09:22:41.944000 40112 ..." (no year)
_GLOG = re.compile(r"(?<![^\s\[:])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?!\d)", re.ASCII)

# mmengine's console (MMLogger's StreamHandler, datefmt '%m/%d %H:%M:%S'): "04/21 21:03:53 - mmengine - INFO - ...";
# detectron2 (setup_logger in detectron2/utils/logger.py, the same datefmt) on stdout "[11/01 11:27:04 d2.utils.events]:
# eta: ..." and in its log.txt "[11/01 11:27:04] d2.engine.train_loop INFO: ..." (no year). Not behind a digit or a
# slash: "2022/08/22" and "11/21/2025" are other dates.
_MD_SLASH = re.compile(r"(?<![\d/])(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)()(?!\d)", re.ASCII)

# A line "from the future" by more than this is taken to be from the previous year (year-less formats only).
_FUTURE_SLACK_S = 86_400.0


@lru_cache(maxsize=4096)
def local_minute(year: int, month: int, day: int, hour: int, minute: int) -> float | None:
    """Local-time epoch seconds of the start of a minute (cached: a log has many lines per minute); the compiled
    event path calls it for a minute it has not seen."""
    try:
        return datetime(year, month, day, hour, minute).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


@lru_cache(maxsize=4096)
def _minute_of(year: str, month: str, day: str, hour: str, minute: str) -> float | None:
    """:func:`local_minute` of fixed-width digit fields as matched (the same minute is always spelt the same)."""
    return local_minute(int(year), int(month), int(day), int(hour), int(minute))


@lru_cache(maxsize=4096)
def _utc_minute(year: str, month: str, day: str, hour: str, minute: str, zone: str) -> float | None:
    """Epoch seconds of the start of a minute written in UTC or with an offset (``Z``, ``+01:00``, ``-0530``)."""
    try:
        fields = (int(year), int(month), int(day), int(hour), int(minute))
        datetime(*fields)  # validates the date, which timegm does not
    except (ValueError, OverflowError):
        return None
    offset = 0
    if zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = (int(digits[:2]) * 60 + int(digits[2:])) * 60
        if zone[0] == "-":
            offset = -offset
    return float(calendar.timegm((*fields, 0, 0, 0, 0)) - offset)


def _in_minute(start: float | None, second: int, frac: str | None) -> float | None:
    """``second`` (and its fraction) into the minute that begins at ``start``; None for an impossible date. A leap
    second is read as :59."""
    if start is None or not 0 <= second <= 60:
        return None
    stamp = start + min(second, 59)
    if frac:
        stamp += int(frac) / 10 ** len(frac)
    return stamp


def _dated(groups: tuple[str | None, ...]) -> float | None:
    """Epoch seconds of a match of a format with a year (the minute's fields looked up as matched, not converted:
    a log has many lines per minute)."""
    return _in_minute(_minute_of(*groups[:5]), int(groups[5] or 0), groups[6])


def _local(fields: tuple[int, int, int, int, int, int], frac: str | None) -> float | None:
    """Local-time epoch seconds; None for an impossible date."""
    year, month, day, hour, minute, second = fields
    return _in_minute(local_minute(year, month, day, hour, minute), second, frac)


def _yearless(groups: tuple[str | None, ...], now: float) -> float | None:
    month, day, hour, minute, second = (int(g or 0) for g in groups[:5])
    try:
        year = time.localtime(now).tm_year
    except (ValueError, OverflowError, OSError):
        return None
    stamp = _local((year, month, day, hour, minute, second), groups[5])
    if stamp is not None and stamp > now + _FUTURE_SLACK_S:
        stamp = _local((year - 1, month, day, hour, minute, second), groups[5])
    return stamp


def parse_time(text: str, now: float) -> float | None:
    """Epoch seconds of the timestamp a log line carries, or None when it has none (or an impossible one).

    ``now`` supplies the year for formats that omit it: the current year, or the previous one when the date
    would otherwise lie in the future (a December line read in January).
    """
    head = text[:_SEARCH_CHARS]
    clock = _HMS.search(head)  # every supported format has HH:MM:SS: most lines are rejected by this one scan
    if clock is None:
        return None
    # Searched in place (not sliced) so look-behinds still see the characters before the window.
    lo, hi = max(0, clock.start() - 24), clock.end() + 12
    if head[clock.start() - 1 : clock.start()] == "T":  # the RFC 3339 stamp of a container runtime
        m = _RFC3339.search(head, lo, clock.end() + 18)
        if m:
            g = m.groups()
            return _in_minute(_utc_minute(g[0], g[1], g[2], g[3], g[4], g[7]), int(g[5]), g[6])
    for full in (_AREAL, _ISO, _YMD_SLASH):
        m = full.search(head, lo, hi)
        if m:
            return _dated(m.groups())
    for yearless in (_VLLM, _GLOG, _MD_SLASH):
        m = yearless.search(head, lo, hi)
        if m:
            return _yearless(m.groups(), now)
    return None
