# cython: boundscheck=False, wraparound=False, cdivision=True, annotation_typing=False
# (Read when compiled, where timestamps.pxd gives the types: every index is checked against the window's end, or lies
# before a clock already found, before it is read; nothing divided or taken modulo is negative.)
"""The time a log line says it was written.

Counting a backlog must place old events at their own time, not at the time rlwatch happened to read them, or
every rate and "first seen" would be wrong after a restart of rlwatch. The frameworks write local time without a
zone; the stamps that container runtimes put in front of each line (docker, Kubernetes, CRI log files) are RFC 3339
with a zone, and win where a line holds both: they come first, carry the year and the zone, and were taken when the
line was written.

This text is both paths' rule: setup.py compiles it with Cython (its C types in ``timestamps.pxd`` beside it) and the
compiled event path calls :func:`time_or_nan` at C speed for every line it counts; where nothing is compiled it runs
as it is. So each format is matched by hand, character by character, as the regular expression quoted above its
matcher (all ``re.ASCII``) would match it when searched in a window of the line: look-behinds see before the
window, and the window's end is the text's end. Every format holds a clock (``HH:MM:SS``) at a fixed place, so a
format is tried only where a clock stands, not at every character.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from functools import lru_cache

from rlwatch.logs import textscan, wording

__all__ = ["HMS_BYTES", "local_minute", "parse_time", "time_or_nan"]

# The timestamp sits near the start of a line, behind at most an ANSI-stripped logger prefix such as
# "(AReaL) " or "[rank0]:"; looking further would pick up times quoted inside messages.
_SEARCH_CHARS = 200

HMS_BYTES = re.compile(rb"\d\d:\d\d:\d\d")  # the clock test on raw bytes: skips decoding lines without a time

# A line "from the future" by more than this is taken to be from the previous year (year-less formats only).
_FUTURE_SLACK_S = 86_400.0

_NAN = float("nan")  # what time_or_nan says for no time (or an impossible one): a C double carries no None

# vLLM's level names: "INFO 05-06 20:59:57" (wording's table, which the prefixes read too).
_LEVELS: tuple[str, ...] = tuple(wording.LOG_LEVELS)

# Local time of a minute, remembered as a packed (year, month, day, hour, minute) -> epoch seconds (NaN: impossible):
# a log has many lines per minute, and the compiled path asks for one without building a Python tuple.
_minutes: dict[int, float] = {}
_MINUTES_KEPT = 8192
# The last minute asked for, before the dict: a log's lines come in runs of one minute.
_last_key = -1
_last_start = _NAN
# time.localtime(now).tm_year, remembered for one `now` (a chunk's lines share it).
_year_for = _NAN
_year_value = 0
_year_ok = False


@lru_cache(maxsize=4096)
def local_minute(year: int, month: int, day: int, hour: int, minute: int) -> float | None:
    """Local-time epoch seconds of the start of a minute: datetime's rules (zones, folds), in Python for both paths,
    asked only for a minute :func:`_local_minute` has not seen."""
    try:
        return datetime(year, month, day, hour, minute).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _local_minute(year: int, month: int, day: int, hour: int, minute: int) -> float:
    """:func:`local_minute` as a float (NaN: impossible), remembered by a packed integer key."""
    global _last_key, _last_start
    if not (0 <= year <= 99999 and 0 <= month <= 99 and 0 <= day <= 99 and 0 <= hour <= 99 and 0 <= minute <= 99):
        got = local_minute(year, month, day, hour, minute)
        return _NAN if got is None else got
    key = (((year * 100 + month) * 100 + day) * 100 + hour) * 100 + minute
    if key == _last_key:
        return _last_start
    start = _minutes.get(key)
    if start is None:
        got = local_minute(year, month, day, hour, minute)
        start = _NAN if got is None else got
        if len(_minutes) >= _MINUTES_KEPT:
            _minutes.clear()
        _minutes[key] = start
    _last_key, _last_start = key, start
    return start


# ------------------------------------------------------------------------------------------------ the calendar
def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if _leap(year) else 28
    if month in (4, 6, 9, 11):
        return 30
    return 31


def _valid(year: int, month: int, day: int, hour: int, minute: int) -> bool:
    """What ``datetime(year, month, day, hour, minute)`` accepts."""
    return (
        1 <= year <= 9999
        and 1 <= month <= 12
        and 1 <= day <= _days_in_month(year, month)
        and 0 <= hour <= 23
        and 0 <= minute <= 59
    )


def _ordinal(year: int, month: int, day: int) -> int:
    """``date(year, month, day).toordinal()`` of a valid date."""
    before = year - 1
    days = before * 365 + before // 4 - before // 100 + before // 400
    for m in range(1, month):
        days += _days_in_month(year, m)
    return days + day


def _in_minute(start: float, second: int, frac: int, frac_len: int) -> float:
    """``second`` and its fraction (``frac`` written in ``frac_len`` digits) into the minute that begins at
    ``start``; NaN for an impossible date (``start`` NaN) or second. A leap second is read as :59."""
    if _is_nan(start) or not 0 <= second <= 60:
        return _NAN
    stamp = start + (second if second < 59 else 59)
    if frac_len:
        scale = 1.0
        for _ in range(frac_len):
            scale *= 10.0
        stamp += frac / scale  # both exact: the quotient is int(frac) / 10 ** len(frac)'s
    return stamp


def _yearless(text: str, h: int, month_at: int, frac_len: int, now: float) -> float:
    """A year-less stamp (its month at ``month_at``, its day just before the clock at ``h``): the year ``now`` lies
    in, or the one before when the date would otherwise lie in the future (a December line read in January)."""
    global _year_for, _year_value, _year_ok
    if now != _year_for:  # and always while _year_for is NaN
        _year_for = now
        try:
            _year_value = time.localtime(now).tm_year
            _year_ok = True
        except (ValueError, OverflowError, OSError):
            _year_ok = False
    if not _year_ok:
        return _NAN
    month, day = _two(text, month_at), _two(text, h - 3)
    hour, minute, second = _two(text, h), _two(text, h + 3), _two(text, h + 6)
    frac = _num(text, h + 9, frac_len)
    stamp = _in_minute(_local_minute(_year_value, month, day, hour, minute), second, frac, frac_len)
    if not _is_nan(stamp) and stamp > now + _FUTURE_SLACK_S:
        stamp = _in_minute(_local_minute(_year_value - 1, month, day, hour, minute), second, frac, frac_len)
    return stamp


def _dated(text: str, year_at: int, month_at: int, h: int, frac_len: int) -> float:
    """Local-time epoch seconds of a stamp with a year (at ``year_at``, its month at ``month_at``, its day just
    before the clock at ``h``, a fraction of ``frac_len`` digits after it); NaN for an impossible one."""
    start = _local_minute(
        _num(text, year_at, 4), _two(text, month_at), _two(text, h - 3), _two(text, h), _two(text, h + 3)
    )
    return _in_minute(start, _two(text, h + 6), _num(text, h + 9, frac_len), frac_len)


# ---------------------------------------------------------------------------------------------- characters
def _is_nan(x: float) -> bool:
    """NaN is the one float unequal to itself (math.isnan would be a call into Python from the compiled text)."""
    return x != x  # noqa: PLR0124


def _digit(c: str) -> bool:
    """``\\d`` under re.ASCII: a non-ASCII digit is no digit."""
    return "0" <= c <= "9"


def _space(c: str) -> bool:
    """``\\s`` under re.ASCII."""
    return c == " " or "\t" <= c <= "\r"


def _word(c: str) -> bool:
    """``\\w`` under re.ASCII."""
    return "0" <= c <= "9" or "a" <= c <= "z" or "A" <= c <= "Z" or c == "_"


def _digits(text: str, i: int, n: int, end: int) -> bool:
    """``text[i:i + n]`` is ``n`` ASCII digits, all before ``end``."""
    if i < 0 or i + n > end:
        return False
    for k in range(i, i + n):  # noqa: SIM110 (all() of a generator is an object made per call, compiled)
        if not _digit(text[k]):
            return False
    return True


def _num(text: str, i: int, n: int) -> int:
    """The number the ``n`` ASCII digits at ``i`` write (0 for none)."""
    value = 0
    for k in range(i, i + n):
        value = value * 10 + (ord(text[k]) - 48)
    return value


def _two(text: str, i: int) -> int:
    """The number the two ASCII digits at ``i`` write (most fields are two digits: no loop)."""
    return (ord(text[i]) - 48) * 10 + (ord(text[i + 1]) - 48)


def _digit_after(text: str, i: int, end: int) -> bool:
    """``(?!\\d)`` fails at ``i``: an ASCII digit stands there, before the window's end."""
    return i < end and _digit(text[i])


def _fraction(text: str, p: int, end: int, comma: bool, most: int) -> int:
    """``(?:[.,](\\d{1,most}))?(?!\\d)`` at ``p`` (``[.,]`` when ``comma``, else ``\\.``): how many digits the
    fraction has (0: none taken), or -1 where the expression fails. A separator followed by no digit or by more
    than ``most`` is not taken, and is no digit itself."""
    if p >= end:
        return 0
    c = text[p]
    if c == "." or (comma and c == ","):
        run = p + 1
        while run < end and _digit(text[run]):
            run += 1
        run -= p + 1
        return run if 1 <= run <= most else 0
    return -1 if _digit(c) else 0


def find_hms(text: str, lo: int, hi: int) -> int:
    """Where the first ``\\d\\d:\\d\\d:\\d\\d`` (ASCII digits) of ``text[lo:hi]`` begins, or -1: looked for at
    its colons, which are few in a line."""
    if hi - lo < 8:  # no room (and str.find would read a negative end from the text's end)
        return -1
    colon = textscan.find_char(text, ":", lo + 2, hi - 5)
    while colon >= 0:
        if (
            text[colon + 3] == ":"
            and _digit(text[colon - 2])
            and _digit(text[colon - 1])
            and _digit(text[colon + 1])
            and _digit(text[colon + 2])
            and _digit(text[colon + 4])
            and _digit(text[colon + 5])
        ):
            return colon - 2
        colon = textscan.find_char(text, ":", colon + 1, hi - 5)
    return -1


# ------------------------------------------------------------------------------------------------- formats
# Each matcher is given the clock's place ``h`` (a ``\d\d:\d\d:\d\d`` found there) and the window [lo, end): the
# format's start is then fixed, and the matcher says whether the expression matches from there.


def _rfc3339_zone(text: str, h: int, lo: int, end: int) -> int:
    """docker logs --timestamps, kubectl logs --timestamps, CRI log files, docker compose --timestamps:
    "2026-11-24T05:09:01.123456789Z" (RFC3339Nano, UTC; trailing zeros dropped) or with an offset "+01:00".
    ``(?<!\\d)(\\d{4})-(\\d\\d)-(\\d\\d)T(\\d\\d):(\\d\\d):(\\d\\d)(?:[.,](\\d{1,9}))?(Z|[+-]\\d\\d:?\\d\\d)(?![\\d:])``
    with its clock at ``h``: where its zone begins, or -1."""
    s = h - 11
    if s < lo or (s > 0 and _digit(text[s - 1])):
        return -1
    if not (
        _digits(text, s, 4, end) and text[s + 4] == "-" and _digits(text, s + 5, 2, end) and text[s + 7] == "-"
        and _digits(text, s + 8, 2, end) and text[s + 10] == "T"
    ):  # fmt: skip
        return -1
    i = h + 8
    if i < end and (text[i] == "." or text[i] == ","):
        run = i + 1
        while run < end and _digit(text[run]):
            run += 1
        if not 1 <= run - i - 1 <= 9:
            return -1
        i = run
    if i >= end:
        return -1
    zone = i
    c = text[i]
    if c == "Z":
        i += 1
    elif c in "+-":
        if not _digits(text, i + 1, 2, end):
            return -1
        if i + 3 < end and text[i + 3] == ":":
            if not _digits(text, i + 4, 2, end):
                return -1
            i += 6
        else:
            if not _digits(text, i + 3, 2, end):
                return -1
            i += 5
    else:
        return -1
    if i < end and (_digit(text[i]) or text[i] == ":"):
        return -1
    return zone


def _rfc3339(text: str, h: int, zone: int) -> float:
    """Epoch seconds of the RFC 3339 stamp whose clock is at ``h`` and zone at ``zone`` (NaN: impossible date)."""
    s = h - 11
    year, month, day = _num(text, s, 4), _two(text, s + 5), _two(text, s + 8)
    hour, minute = _two(text, h), _two(text, h + 3)
    if not _valid(year, month, day, hour, minute):
        return _NAN
    offset = 0
    if text[zone] != "Z":
        minutes_at = zone + 4 if text[zone + 3] == ":" else zone + 3
        offset = _two(text, zone + 1) * 60 + _two(text, minutes_at)
        if text[zone] == "-":
            offset = -offset
    start = (_ordinal(year, month, day) - 719163) * 86400 + hour * 3600 + minute * 60 - offset * 60
    frac_len = zone - h - 9 if zone > h + 8 else 0
    return _in_minute(float(start), _two(text, h + 6), _num(text, h + 9, frac_len), frac_len)


def _areal(text: str, h: int, lo: int, end: int) -> int:
    """AReaL: "20251121-09:15:30.652".
    ``(?<!\\d)(\\d{4})(\\d\\d)(\\d\\d)-(\\d\\d):(\\d\\d):(\\d\\d)(?:\\.(\\d{1,6}))?(?!\\d)`` with its clock at
    ``h``: the fraction's digits (see :func:`_fraction`), or -1."""
    s = h - 9
    if s < lo or (s > 0 and _digit(text[s - 1])):
        return -1
    if not (_digits(text, s, 8, end) and text[s + 8] == "-"):
        return -1
    return _fraction(text, h + 8, end, False, 6)


def _iso(text: str, h: int, lo: int, end: int) -> int:
    """SGLang "[2025-03-14 02:15:58 TP0]", Python logging "2025-03-14 02:15:58,123", ISO "2025-03-14T02:15:58.1".
    ``(?<!\\d)(\\d{4})-(\\d\\d)-(\\d\\d)[ T](\\d\\d):(\\d\\d):(\\d\\d)(?:[.,](\\d{1,6}))?(?!\\d)``."""
    s = h - 11
    if s < lo or (s > 0 and _digit(text[s - 1])):
        return -1
    if not (
        _digits(text, s, 4, end) and text[s + 4] == "-" and _digits(text, s + 5, 2, end) and text[s + 7] == "-"
        and _digits(text, s + 8, 2, end) and (text[s + 10] == " " or text[s + 10] == "T")
    ):  # fmt: skip
        return -1
    return _fraction(text, h + 8, end, True, 6)


def _ymd_slash(text: str, h: int, lo: int, end: int) -> bool:
    """mmengine's log file (MMLogger's FileHandler, datefmt '%Y/%m/%d %H:%M:%S', mmengine/logging/logger.py):
    "2022/08/22 15:51:56 - mmengine - INFO - Epoch(train) [1][10/1563] ...".
    ``(?<!\\d)(\\d{4})/(\\d\\d)/(\\d\\d) (\\d\\d):(\\d\\d):(\\d\\d)(?!\\d)``."""
    s = h - 11
    if s < lo or (s > 0 and _digit(text[s - 1])):
        return False
    return (
        _digits(text, s, 4, end) and text[s + 4] == "/" and _digits(text, s + 5, 2, end) and text[s + 7] == "/"
        and _digits(text, s + 8, 2, end) and text[s + 10] == " " and not _digit_after(text, h + 8, end)
    )  # fmt: skip


def _vllm(text: str, h: int, lo: int, end: int) -> int:
    """vLLM: "INFO 05-06 20:59:57" (no year). ``\\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\\s+``
    ``(\\d\\d)-(\\d\\d) (\\d\\d):(\\d\\d):(\\d\\d)(?:\\.(\\d{1,6}))?(?!\\d)`` (the level names from wording): the
    fraction's digits, or -1. The level is a word, so it ends where the run of spaces before the date begins."""
    i = h - 6
    if i - 1 <= lo or not (
        _digits(text, i, 2, end) and text[i + 2] == "-" and _digits(text, i + 3, 2, end) and text[i + 5] == " "
    ):
        return -1
    spaces = i
    while spaces > lo and _space(text[spaces - 1]):
        spaces -= 1
    if spaces == i:
        return -1
    for level in _LEVELS:
        s = spaces - len(level)
        if s >= lo and text.startswith(level, s, spaces):
            if s > 0 and _word(text[s - 1]):
                continue  # no word boundary before it
            return _fraction(text, h + 8, end, False, 6)
    return -1


def _glog(text: str, h: int, lo: int, end: int) -> int:
    """glog (torch C++ and torchrun): "[E1121 06:24:44.903881913 ..." or "W1121 09:22:41.944000 40112 ..." (no year).
    ``(?<![^\\s\\[:])[IWEF](\\d\\d)(\\d\\d) (\\d\\d):(\\d\\d):(\\d\\d)(?:\\.(\\d{1,9}))?(?!\\d)``."""
    s = h - 6
    if s < lo:
        return -1
    if s > 0:
        c = text[s - 1]
        if not (_space(c) or c in "[:"):
            return -1
    c = text[s]
    if c not in "IWEF":
        return -1
    if not (_digits(text, s + 1, 4, end) and text[s + 5] == " "):
        return -1
    return _fraction(text, h + 8, end, False, 9)


def _md_slash(text: str, h: int, lo: int, end: int) -> bool:
    """mmengine's console (MMLogger's StreamHandler, datefmt '%m/%d %H:%M:%S'): "04/21 21:03:53 - mmengine - INFO -
    ..."; detectron2 (setup_logger in detectron2/utils/logger.py, the same datefmt) on stdout "[11/01 11:27:04
    d2.utils.events]: eta: ..." and in its log.txt "[11/01 11:27:04] d2.engine.train_loop INFO: ..." (no year). Not
    behind a digit or a slash: "2022/08/22" and "11/21/2025" are other dates.
    ``(?<![\\d/])(\\d\\d)/(\\d\\d) (\\d\\d):(\\d\\d):(\\d\\d)(?!\\d)``."""
    s = h - 6
    if s < lo:
        return False
    if s > 0 and (_digit(text[s - 1]) or text[s - 1] == "/"):
        return False
    return (
        _digits(text, s, 2, end) and text[s + 2] == "/" and _digits(text, s + 3, 2, end) and text[s + 5] == " "
        and not _digit_after(text, h + 8, end)
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------ the rule
def _next_clock(text: str, h: int, first: int, second: int, hi: int) -> int:
    """The clock after the one at ``h`` in the window ``[.., hi)``: after the first, the second, found once for all
    the formats (each is tried at every clock in turn, and most windows hold one); after that, searched."""
    if h == first:
        return second
    return find_hms(text, h + 1, hi)


def time_or_nan(text: str, now: float) -> float:
    """:func:`parse_time` with NaN for None: what the compiled event path calls for each line it counts."""
    n = min(len(text), _SEARCH_CHARS)
    first = find_hms(text, 0, n)  # every format has HH:MM:SS: most lines are rejected by this one scan
    if first < 0:
        return _NAN
    # Each format is searched for as `re` would search text[lo:hi] (in place: look-behinds see before lo), the
    # formats in turn, each at its leftmost place: the clocks in the window, left to right.
    lo = first - 24 if first > 24 else 0
    hi = first + 20 if first + 20 < n else n
    if first >= 1 and text[first - 1] == "T":  # the RFC 3339 stamp of a container runtime: a wider window
        end = first + 26 if first + 26 < n else n
        h = first
        while h >= 0:
            zone = _rfc3339_zone(text, h, lo, end)
            if zone >= 0:
                return _rfc3339(text, h, zone)
            h = find_hms(text, h + 1, end)
    # AReaL's stamp, the commonest, is tried at the first clock before any other clock is looked for; each format is
    # then tried at each later clock in turn. Most windows hold one clock: the second is searched for once, for all.
    frac_len = _areal(text, first, lo, hi)
    if frac_len >= 0:
        return _dated(text, first - 9, first - 5, first, frac_len)
    second = find_hms(text, first + 1, hi)
    h = second
    while h >= 0:
        frac_len = _areal(text, h, lo, hi)
        if frac_len >= 0:
            return _dated(text, h - 9, h - 5, h, frac_len)
        h = find_hms(text, h + 1, hi)
    h = first
    while h >= 0:
        frac_len = _iso(text, h, lo, hi)
        if frac_len >= 0:
            return _dated(text, h - 11, h - 6, h, frac_len)
        h = _next_clock(text, h, first, second, hi)
    h = first
    while h >= 0:
        if _ymd_slash(text, h, lo, hi):
            return _dated(text, h - 11, h - 6, h, 0)
        h = _next_clock(text, h, first, second, hi)
    h = first
    while h >= 0:
        frac_len = _vllm(text, h, lo, hi)
        if frac_len >= 0:
            return _yearless(text, h, h - 6, frac_len, now)
        h = _next_clock(text, h, first, second, hi)
    h = first
    while h >= 0:
        frac_len = _glog(text, h, lo, hi)
        if frac_len >= 0:
            return _yearless(text, h, h - 5, frac_len, now)
        h = _next_clock(text, h, first, second, hi)
    h = first
    while h >= 0:
        if _md_slash(text, h, lo, hi):
            return _yearless(text, h, h - 6, 0, now)
        h = _next_clock(text, h, first, second, hi)
    return _NAN


def parse_time(text: str, now: float) -> float | None:
    """Epoch seconds of the timestamp a log line carries, or None when it has none (or an impossible one).

    ``now`` supplies the year for formats that omit it: the current year, or the previous one when the date
    would otherwise lie in the future (a December line read in January).
    """
    stamp = time_or_nan(text, now)
    return None if _is_nan(stamp) else stamp
