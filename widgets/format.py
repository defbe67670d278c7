"""Pure formatting helpers for the dashboard: sizes, durations, ages, clock times and safe text.

Everything here is a plain function of its arguments (no clock reads, no Textual), so screens render the same
snapshot to the same characters every time, and every formatter can be tested on its own. Sizes use decimal units
(GB = 10^9 bytes), the same as the report and the findings, so numbers on screen match numbers in messages.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence

from rlwatch.common.state import Severity
from rlwatch.common.textsafe import INVISIBLE
from rlwatch.common.vocab import FindingCode
from rlwatch.engine.diagnosis import hhmm

# Complete escape sequences first (CSI, OSC, DCS/SOS/PM/APC strings, two-byte ESC sequences), so colour codes and
# terminal-title tricks disappear whole instead of leaving their parameters behind as noise.
_ESCAPE_SEQUENCE = re.compile(
    r"""
    \x1b\[[0-?]*[ -/]*[@-~]                 # CSI ... final byte
    | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?     # OSC ... BEL or ST (or unterminated)
    | \x1b[PX^_][^\x1b]*(?:\x1b\\)?          # DCS, SOS, PM, APC ... ST
    | \x1b[ -/]*[0-~]                        # other ESC sequences (charset selection, RIS, ...)
    | \x9b[0-?]*[ -/]*[@-~]                  # 8-bit CSI
    """,
    re.VERBOSE,
)
# Whatever control characters remain are shown as Unicode control pictures, so nothing reaches the terminal raw
# and a person can still see that something odd was in the log.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x80-\x9f]")
_INVISIBLE = re.compile(INVISIBLE)  # bidi controls, line separators, zero-width and tag characters: dropped
_CONTROL_PICTURE = {**{c: chr(0x2400 + c) for c in range(0x20)}, 0x7F: "\u2421"}

UNKNOWN = "–"


def row_text(text: str, limit: int | None = None) -> str:
    """Make log text safe to put on a terminal: drop escape sequences, show other controls as visible glyphs.

    Tabs become spaces and carriage returns / newlines become control pictures because a line of the log view must
    stay one row. ``limit`` bounds the result (very long lines would otherwise cost time on every repaint).
    """
    if limit is not None and len(text) > limit * 2:
        text = text[: limit * 2]
    text = _INVISIBLE.sub("", _ESCAPE_SEQUENCE.sub("", text)).replace("\t", "    ")
    text = _CONTROL.sub(lambda m: _CONTROL_PICTURE.get(ord(m.group()), "\ufffd"), text)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return UNKNOWN
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} PB"  # pragma: no cover - the loop returns at TB


def fmt_rate_per_hour(bytes_per_hour: float | None) -> str:
    """A growth rate, signed, in MB/h below 1 GB/h so slow leaks do not read as zero."""
    if bytes_per_hour is None:
        return UNKNOWN
    sign = "+" if bytes_per_hour >= 0 else "-"
    magnitude = abs(bytes_per_hour)
    if magnitude < 1e9:
        return f"{sign}{magnitude / 1e6:.0f} MB/h"
    return f"{sign}{magnitude / 1e9:.1f} GB/h"


def fmt_duration(seconds: float | None) -> str:
    """Compact and exact to the unit shown: 45s, 5m12s, 2h10m, 3d4h."""
    if seconds is None:
        return UNKNOWN
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def fmt_age(then: float | None, now: float) -> str:
    """How long ago, measured against the snapshot's time (never the wall clock, so renders are repeatable)."""
    if then is None or not math.isfinite(then):  # NaN, ±inf: a time that is not known
        return UNKNOWN
    delta = now - then
    if delta < 0:
        return "in " + fmt_duration(-delta)
    return fmt_duration(delta) + " ago"


def fmt_clock(t: float | None, *, seconds: bool = True, now: float | None = None) -> str:
    """Local time of day, as a person on the pod reads it next to the logs' own timestamps. With ``now``, a time
    on another day than ``now``'s carries its date: a backlog's "since 08:00:10" may be weeks ago."""
    if t is None or not math.isfinite(t):  # NaN, ±inf: a time that is not known
        return UNKNOWN
    clock = hhmm(t, now if now is not None and math.isfinite(now) else None)
    return clock if seconds else clock[:-3]


def fmt_percent(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.0f}%"


def fmt_number(value: float | None, digits: int = 3) -> str:
    return UNKNOWN if value is None else f"{value:.{digits}g}"


def shorten_middle(text: str, width: int) -> str:
    """Keep both ends of a path or command: the start says where, the end says which."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width <= 3:
        return text[:width]
    head = (width - 1) // 3
    tail = width - 1 - head
    return text[:head] + "…" + text[-tail:]


def shorten_path(path: str, width: int) -> str:
    """Drop leading directories first: the last components (experiment, trial) are what tell runs apart."""
    path = row_text(path)
    if len(path) <= width:
        return path
    parts = path.split("/")
    for i in range(1, len(parts)):
        candidate = "…/" + "/".join(parts[i:])
        if len(candidate) <= width:
            return candidate
    return shorten_middle(path, width)


def fmt_cmdline(argv: Sequence[str], width: int | None = None, *, full_path: bool = True) -> str:
    """A command line as a shell would echo it, cleaned of control characters, bounded in width.

    In narrow columns the interpreter's directory (``/opt/venv/bin/python``) hides what runs, so ``full_path=False``
    keeps only the executable's name, as top and htop do; the confirmation dialog keeps the full path.
    """
    if argv and not full_path and argv[0].startswith("/"):
        argv = [argv[0].rstrip("/").rsplit("/", 1)[-1], *argv[1:]]
    text = row_text(shlex.join(argv)) if argv else UNKNOWN
    if width is not None and len(text) > width:
        return text[: max(0, width - 1)] + "…"
    return text


def basename(path: str) -> str:
    return row_text(path.rstrip("/").rsplit("/", 1)[-1])


SEVERITY_STYLE: dict[Severity, str] = {
    Severity.CRITICAL: "bold red",
    Severity.WARNING: "bold yellow",
    Severity.INFO: "cyan",
}

SEVERITY_LABEL: dict[Severity, str] = {
    Severity.CRITICAL: "CRITICAL",
    Severity.WARNING: "WARNING",
    Severity.INFO: "INFO",
}


def severity_style(severity: Severity | None) -> str:
    return "bold green" if severity is None else SEVERITY_STYLE[severity]


# What a finding is about, in words, for the `d` list: the codes are for machines (report --json, notifications), and
# `expected_missing` or `run_lost_launcher` mean nothing to a person at 3 a.m.
FINDING_TITLES: dict[FindingCode, str] = {
    "expected_missing": "an expected process is not running",
    "torchrun_failed": "torchrun reported a failure",
    "run_lost_launcher": "the run lost its launcher",
    "run_crashed": "the run crashed",
    "run_stopped": "the run stopped",
    "run_finished": "the run finished",
    "run_state_unknown": "whether the run progresses is unknown",
    "no_run": "no run found",
    "hung": "the run is hung",
    "gpu_strays": "stray processes hold the GPU",
    "gpu_unknown_holders": "unknown processes hold the GPU",
    "device_busy": "the GPU is busy or unavailable",
    "server_down": "the inference server is down",
    "server_wait": "waiting for the inference server",
    "brake_no_relief": "the emergency brake cannot free memory",
    "over_memory_limit": "a process is over its memory limit",
    "kernel_oom_kill": "the kernel OOM killer killed a rank",
    "oom_kill": "the kernel OOM killer killed a process",
    "shm_small": "/dev/shm is small",
    "shm_exhausted": "shared memory ran out",
    "learning_nonfinite": "the loss is not a number",
    "nccl_timeout": "an NCCL collective timed out",
    "restart_loop": "a restart loop",
    "crash_repeating": "the same crash keeps happening",
    "crashed": "an exception in the logs",
    "earlier_attempt": "an earlier attempt of the run",
    "timeout": "timeout errors in the logs",
    "actions_off": "actions are off",
}


def finding_title(code: str) -> str:
    """A finding's code said in words (``xid_79`` → ``GPU Xid 79``; an unknown code with its underscores as spaces)."""
    if code in FINDING_TITLES:
        return FINDING_TITLES[code]
    if code.startswith("xid_") and code[4:].isdigit():
        return f"GPU Xid {code[4:]}"
    return row_text(code.replace("_", " "))
