"""torchrun's ChildFailedError report, read apart from the traceback it ends: the lines after a ChildFailedError
are torchrun's own format (one entry per failed worker), not Python's.

torchrun's ChildFailedError report is read whole: the rank it names as the root cause (first observed failure),
with its exit code, signal and host, and the other failures apart as victims. The incident tracker
(:mod:`rlwatch.logs.incidents`) hands it those lines, one at a time, and makes the error that preceded the failure on
the root-cause rank the incident's ``cause``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rlwatch.common.signals import signal_name
from rlwatch.common.state import ChildFailure
from rlwatch.logs import wording
from rlwatch.logs.signatures import exception, header

__all__ = [
    "CHILD_TITLES",
    "FAILURES",
    "NO_OTHER_FAILURES",
    "REPORT_FIELDS",
    "ROOT_CAUSE",
    "Report",
    "ReportFailure",
    "child_failure_text",
    "exit_reported",
    "finished",
    "report_line",
    "signal_received",
]

_SEPARATOR = re.compile(r"^[\s=\-*_]*$")
# A stripped separator line begins with one of these (a line that does not is not tried), and is mostly a run of
# that one mark (told by a count, without the expression): a report is read on every crash of a dense log.
_SEPARATOR_MARKS = "=-*_"

# torchrun's report, torch/distributed/elastic/multiprocessing/errors/__init__.py (_MSG_FORMAT_TEMPLATE and
# _FAILURE_FORMAT_TEMPLATE): "<name> FAILED", "Failures:", "Root Cause (first observed failure):", then per failure
# "[idx]:" and the fields "  time      : …", "  host      : …", "  rank      : R (local_rank: L)",
# "  exitcode  : C (pid: P)", "  error_file: …", "  traceback : …" (a recorded Python traceback goes on, indented).
_REPORT_TITLE = re.compile(r"^(\S.*)" + re.escape(wording.TORCHRUN_FAILED) + r"\s*$")
FAILURES = wording.TORCHRUN_FAILURES
ROOT_CAUSE = wording.TORCHRUN_ROOT_CAUSE
NO_OTHER_FAILURES = wording.TORCHRUN_NO_OTHER_FAILURES
_REPORT_ENTRY = re.compile(r"^\[(\d+)\]:\s*$")
REPORT_FIELDS = ("time", "host", "rank", "exitcode", "error_file", "traceback")
_REPORT_FIELD = re.compile(rf"^\s{{1,4}}({'|'.join(REPORT_FIELDS)})\s*:\s?(.*)$")
_REPORT_RANK = re.compile(r"^(-?\d+)(?: \(local_rank: (-?\d+)\))?")
_CODE_PID = r"(-?\d+)(?:\s*\(pid: (\d+)\))?"
_REPORT_CODE = re.compile("^" + _CODE_PID)
# The exit code with the pid wherever a line carries it (a report's field behind any prefix), and the agent's own
# line (agent/server/api.py): `failed (exitcode: -9) local_rank: 0 (pid: 1234) of binary: /usr/bin/python`.
_EXITCODE = re.compile(r"\bexitcode\s*:\s*" + _CODE_PID)
_AGENT_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: (\d+)\)")
# The traceback field of a worker killed by a signal: `Signal 9 (SIGKILL) received by PID 1234`.
_SIGNAL = re.compile(r"Signal (\d+) \((\w+)\)(?: received by PID (\d+))?")


@dataclass(slots=True)
class ReportFailure:
    """One "[idx]:" entry of a torchrun report while its fields are read."""

    root: bool
    fields: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # the final exception of a recorded traceback, read from the lines under it

    def freeze(self) -> ChildFailure:
        f = self.fields
        rank = _REPORT_RANK.match(f.get("rank", ""))
        code = _REPORT_CODE.match(f.get("exitcode", ""))
        exitcode = int(code.group(1)) if code else None
        text = f.get("traceback", "").strip() or None
        sig = _SIGNAL.match(text or "")
        name = sig.group(2) if sig else None
        if name is None and exitcode is not None and exitcode < 0:
            name = signal_name(-exitcode)
        if text is not None and header(text):
            text = self.error or "a traceback"
        host = f.get("host", "").strip() or None
        return ChildFailure(
            rank=int(rank.group(1)) if rank else None,
            local_rank=int(rank.group(2)) if rank and rank.group(2) is not None else None,
            exitcode=exitcode,
            signal=name,
            pid=int(code.group(2)) if code and code.group(2) else None,
            host=host,
            time=f.get("time", "").strip() or None,
            error=text,
        )


@dataclass(slots=True)
class Report:
    """torchrun's ChildFailedError report under the exception line."""

    name: str | None = None
    section: str = ""  # "" | "failures" | "root"
    current: ReportFailure | None = None
    failures: list[ReportFailure] = field(default_factory=list)
    in_traceback: bool = False  # reading the indented lines of a recorded traceback
    done: bool = False


def report_line(report: Report, body: str) -> bool:
    """Read one line of torchrun's report; False when it is not one (the report is then over or absent)."""
    text = body.rstrip()
    if report.in_traceback and report.current is not None:
        if text.startswith("    ") or (text.startswith("  ") and not _REPORT_FIELD.match(text)):
            exc = exception(text.strip()) if not text.startswith("    ") else None
            if exc is not None:
                report.current.error = f"{exc[0]}: {exc[1]}" if exc[1] else exc[0]
            return True
        report.in_traceback = False
    stripped = text.strip()
    if not stripped:
        return report.section != ""  # blank lines inside a report belong to it
    if stripped[0] in _SEPARATOR_MARKS and (stripped.count(stripped[0]) == len(stripped) or _SEPARATOR.match(stripped)):
        if report.section == "root" and report.current is not None and stripped.startswith("="):
            report.done = True
            report.current = None
        return True
    if report.name is None and report.section == "":
        m = _REPORT_TITLE.match(stripped)
        if m:
            report.name = m.group(1)
            return True
    if stripped == FAILURES:
        report.section, report.current = "failures", None
        return True
    if stripped.startswith(ROOT_CAUSE):
        report.section, report.current = "root", None
        return True
    if stripped == NO_OTHER_FAILURES:
        return True
    if report.section and stripped[0] == "[" and _REPORT_ENTRY.match(stripped):
        report.current = ReportFailure(root=report.section == "root")
        report.failures.append(report.current)
        return True
    current = report.current
    m = _REPORT_FIELD.match(text) if current is not None and text[0].isspace() else None
    if m and current is not None:
        name, value = m.groups()
        current.fields[name] = value
        report.in_traceback = name == "traceback" and header(value)
        return True
    return False


def exit_reported(text: str) -> tuple[int, int] | None:
    """(exit code, pid) of a failed worker, where a line of the report or of the agent says both; else None."""
    m = _EXITCODE.search(text)
    if m is None or m.group(2) is None:
        m = _AGENT_FAILED.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def signal_received(text: str) -> tuple[int, str, int] | None:
    """(signal number, its name, pid) of a worker killed by a signal, as the report's traceback field says it."""
    m = _SIGNAL.search(text) if "received by PID" in text else None
    return (int(m.group(1)), m.group(2), int(m.group(3))) if m and m.group(3) else None


def finished(report: Report) -> bool:
    return report.done


CHILD_TITLES = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError", "ChildFailedError")


def child_failure_text(f: ChildFailure) -> str:
    """ "rank 0 exitcode -6 (SIGABRT) on host-a": how one failed worker ended, as torchrun reported it."""
    out = f"rank {f.rank if f.rank is not None else '?'}"
    if f.exitcode is not None:
        out += f" exitcode {f.exitcode}"
    if f.signal:
        out += f" ({f.signal})"
    if f.host:
        out += f" on {f.host}"
    if f.error and not f.error.startswith("Signal ") and not f.error.startswith("To enable traceback"):
        out += f": {f.error}"
    return out
