"""Incidents: lines that belong together, so a person reads one failure instead of hundreds of lines.

Three shapes: a *traceback* block (header, frames, final exception; chained exceptions are one block named after
the last one), a *retry storm* (many connection-refused or timeout lines in a short time in one file, one incident
that grows while it lasts) and a *crash* (a torchrun child, an inference engine or the SGLang server died).
Each carries a signature that stays the same for the same failure in another file or on another host, so a fleet
view can say "the same crash everywhere".
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rlwatch.state import Incident

__all__ = ["EVENT_KINDS", "HEADER_WORD", "IncidentTracker", "signature"]

_HEADER = re.compile(r"Traceback \(most recent call last\):\s*$")
# In every header. A line without it, in a file without an open block, is nothing to the tracker: the counter
# checks this (and ``open_paths``) before handing it a line, most lines being such.
HEADER_WORD = "Traceback"
_FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+)')
_CHAIN = re.compile(
    r"^\s*(?:During handling of the above exception, another exception occurred:"
    r"|The above exception was the direct cause of the following exception:)\s*$"
)
# `RuntimeError: msg`, `torch.distributed.elastic.multiprocessing.errors.ChildFailedError: `, `KeyboardInterrupt`.
_EXC = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::\s?(.*))?$")
_SEPARATOR = re.compile(r"^[\s=\-*_]*$")
# Python 3.11 prints exception groups with a gutter ("  | ", "  + ") in front of every line of the group.
_GUTTER = re.compile(r"^\s*[|+](?:[ -]?[|+])*[ -]?")
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_CHILD_CAUSE = re.compile(r"^\s*traceback\s*:\s*(Signal \d+ \(\w+\).*)$")

_TITLE_MSG_CHARS = 200
_STALL_LINES = 80  # a block that makes no progress for this many lines was cut off (the process died mid-print)
_AFTER_LINES = 40  # lines after the exception that may still chain another exception or detail a torchrun failure
# A block whose writer has been silent for this many lines of its file is over: that writer (a rank that printed
# its traceback and died) will never write the lines that would close it, and an open block makes the counter walk
# every line of the file.
_SILENT_LINES = 200


def _normalise(message: str) -> str:
    """The message with what differs between occurrences (addresses, paths, numbers) blanked out."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", message)
    text = re.sub(r"(?:[A-Za-z]:)?(?:[\w.~-]*/)+([\w.-]+)", r"\1", text)
    text = re.sub(r"\d+", "N", text)
    return re.sub(r"\s+", " ", text).strip()[:_TITLE_MSG_CHARS]


def signature(*parts: str | None) -> str:
    """A short stable id over normalised parts."""
    joined = "\x1f".join(_normalise(p) if p else "" for p in parts)
    return hashlib.sha1(joined.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()[:12]


def _exception(line: str) -> tuple[str, str] | None:
    """(type, message) when ``line`` is the final line of a traceback."""
    m = _EXC.match(line)
    if m is None:
        return None
    name = m.group(1)
    last = name.rsplit(".", 1)[-1]
    # Logger levels ("WARNING: ...") share the shape; Python exception names are never all capitals.
    if last.upper() == last:
        return None
    if not (last[0].isupper() or last.endswith(("error", "exception", "timeout", "exit"))):
        return None
    return name, (m.group(2) or "").strip()


@dataclass(slots=True)
class _Record:
    kind: str
    path: str
    lineno: int
    first: float
    last: float
    count: int
    title: str
    location: str | None
    signature: str

    def freeze(self) -> Incident:
        return Incident(
            kind=self.kind,
            path=self.path,
            lineno=self.lineno,
            first=self.first,
            last=self.last,
            count=self.count,
            title=self.title,
            location=self.location,
            signature=self.signature,
        )


@dataclass(slots=True)
class _Block:
    """A traceback being read: from its header, possibly across several chained links."""

    lineno: int
    first: float
    seen: int = 0  # number of the writer's latest line in the file
    lines: int = 1
    location: str | None = None
    state: str = "frames"  # frames | after | chain
    idle: int = 0
    gap: int = 0  # lines since the last exception line (blank lines, chain messages)
    record: _Record | None = None
    exc_type: str = ""
    exc_msg: str = ""
    detail: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Storm:
    times: deque[tuple[float, int]] = field(default_factory=deque)
    record: _Record | None = None


_STORM_KINDS = {"connection_refused": "connection-refused", "timeout": "timeout"}
_CRASH_KINDS = ("child_failed", "engine_dead", "_server_exit")
# The only kinds :meth:`IncidentTracker.event` does anything with: the counter passes no others.
EVENT_KINDS = frozenset(_STORM_KINDS) | frozenset(_CRASH_KINDS)


class IncidentTracker:
    """Groups lines into incidents. Fed by the event counter; keeps its state per file (and per writer prefix)."""

    def __init__(
        self,
        *,
        storm_threshold: int = 5,
        storm_window_s: float = 60.0,
        crash_window_s: float = 60.0,
        max_incidents: int = 500,
    ) -> None:
        self._storm_threshold = max(1, storm_threshold)
        self._storm_window = storm_window_s
        self._crash_window = crash_window_s
        self._records: deque[_Record] = deque(maxlen=max_incidents)
        self._blocks: dict[tuple[str, str], _Block] = {}
        self.open_paths: dict[str, set[str]] = {}  # path -> writer tags with an open block (read-only outside)
        self._storms: dict[tuple[str, str], _Storm] = {}
        self._crashes: dict[str, _Record] = {}

    # ------------------------------------------------------------------------------------------- tracebacks
    def wants_every_line(self, path: str) -> bool:
        """True while a traceback block is open in ``path``: its frames match no event literal."""
        return path in self.open_paths

    def _open(self, key: tuple[str, str], block: _Block) -> None:
        self.open_paths.setdefault(key[0], set()).add(key[1])
        self._blocks[key] = block

    def _close(self, key: tuple[str, str]) -> None:
        if self._blocks.pop(key, None) is not None:
            tags = self.open_paths.get(key[0])
            if tags is not None:
                tags.discard(key[1])
                if not tags:
                    del self.open_paths[key[0]]

    def _expire(self, path: str, tag: str, lineno: int) -> None:
        """Close the blocks of other writers in ``path`` that have been silent for too long."""
        tags = self.open_paths.get(path)
        if tags is None or (len(tags) == 1 and tag in tags):
            return
        for other in [t for t in tags if t != tag]:
            block = self._blocks.get((path, other))
            # Numbering that went back means the file was truncated or replaced: that block is over too.
            if block is not None and not 0 <= lineno - block.seen <= _SILENT_LINES:
                self._close((path, other))

    def line(self, path: str, tag: str, body: str, lineno: int, when: Callable[[], float]) -> None:
        """One line of ``path`` (prefix ``tag`` split off). ``when`` gives its time, parsed only if needed."""
        if path not in self.open_paths:
            # Nothing open in this file (the usual case): only a header matters. A gutter is never part of one.
            if HEADER_WORD in body and _HEADER.search(body):
                self._open((path, tag), _Block(lineno=lineno, first=when(), seen=lineno))
            return
        self._expire(path, tag, lineno)
        key = (path, tag)
        block = self._blocks.get(key)
        if "|" in body[:12] or "+" in body[:12]:
            body = _GUTTER.sub("", body, count=1)
        if block is None:
            if "Traceback" in body and _HEADER.search(body):
                self._open(key, _Block(lineno=lineno, first=when(), seen=lineno))
            return
        block.seen = lineno
        if block.state == "frames":
            self._in_frames(key, block, body, lineno, when)
        else:
            self._after(key, block, body, lineno, when)

    def _in_frames(
        self, key: tuple[str, str], block: _Block, body: str, lineno: int, when: Callable[[], float]
    ) -> None:
        block.lines += 1
        frame = _FRAME.match(body)
        if frame:
            block.location = f"{os.path.basename(frame.group(1)) or frame.group(1)}:{frame.group(2)}"
            block.idle = 0
            return
        if _HEADER.search(body):  # a fresh traceback from the same writer: the old one was cut off
            self._open(key, _Block(lineno=lineno, first=when(), seen=lineno))
            return
        if body[:1].isspace() or not body.strip():
            block.idle += 1
        else:
            exc = _exception(body.rstrip())
            if exc is not None:
                block.exc_type, block.exc_msg = exc
                block.state = "after"
                block.idle = 0
                self._publish(key[0], block, when())
                return
            block.idle += 1
        if block.idle > _STALL_LINES:
            self._close(key)

    def _after(self, key: tuple[str, str], block: _Block, body: str, lineno: int, when: Callable[[], float]) -> None:
        block.idle += 1
        block.gap += 1
        if _CHAIN.match(body):
            block.state = "chain"
            return
        if _HEADER.search(body):
            if block.state == "chain":  # the next link of the same chained failure
                block.state = "frames"
                block.location = None
                block.idle = 0
                block.lines += block.gap
                block.gap = 0
                return
            self._close(key)
            self._open(key, _Block(lineno=lineno, first=when(), seen=lineno))
            return
        if block.state == "after" and block.exc_type.endswith("ChildFailedError"):
            self._child_detail(key[0], block, body, when)
        if block.idle > _AFTER_LINES:
            self._close(key)

    def _child_detail(self, path: str, block: _Block, body: str, when: Callable[[], float]) -> None:
        """torchrun prints the cause of a ChildFailedError below it: keep the exit code and the signal."""
        code = _EXITCODE.match(body)
        cause = _CHILD_CAUSE.match(body)
        if code and not any(d.startswith("exitcode") for d in block.detail):
            block.detail.append(f"exitcode {code.group(1)}")
        elif cause and len(block.detail) < 2:
            block.detail.append(cause.group(1).strip())
        elif not block.exc_msg and not block.detail and not _SEPARATOR.match(body):
            block.exc_msg = body.strip()
        else:
            return
        self._publish(path, block, when())

    def _publish(self, path: str, block: _Block, now: float) -> None:
        message = block.exc_msg
        if block.detail:
            message = ", ".join([m for m in (message,) if m] + block.detail)
        title = block.exc_type + (f": {message[:_TITLE_MSG_CHARS]}" if message else "")
        sig = signature("traceback", block.exc_type, message, block.location)
        rec = block.record
        if rec is None:
            rec = _Record("traceback", path, block.lineno, block.first, now, block.lines, title, block.location, sig)
            block.record = rec
            self._records.append(rec)
        else:
            rec.last = max(rec.last, now)
            rec.count = block.lines
            rec.title = title
            rec.location = block.location
            rec.signature = sig

    # ------------------------------------------------------------------------------------ storms and crashes
    def event(self, kind: str, path: str, lineno: int, time: float, text: str) -> None:
        """A counted event; retry storms and crashes are built from these."""
        if kind in _STORM_KINDS:
            self._storm(kind, path, lineno, time)
        elif kind in _CRASH_KINDS:
            self._crash(kind, path, lineno, time, text)

    def _storm(self, kind: str, path: str, lineno: int, time: float) -> None:
        storm = self._storms.setdefault((path, kind), _Storm())
        storm.times.append((time, lineno))
        while storm.times and storm.times[0][0] < time - self._storm_window:
            storm.times.popleft()
        rec = storm.record
        if rec is not None and time - rec.last <= self._storm_window:
            rec.count += 1
            rec.last = max(rec.last, time)
        elif len(storm.times) >= self._storm_threshold:
            first, first_line = storm.times[0]
            sig = signature("retry_storm", kind, os.path.basename(path))
            rec = _Record("retry_storm", path, first_line, first, time, len(storm.times), "", None, sig)
            storm.record = rec
            self._records.append(rec)
        else:
            return
        rec.title = f"{rec.count} {_STORM_KINDS[kind]} errors ({os.path.basename(path)})"

    def _crash(self, kind: str, path: str, lineno: int, time: float, text: str) -> None:
        rec = self._crashes.get(path)
        if rec is not None and time - rec.last <= self._crash_window:
            rec.count += 1
            rec.last = max(rec.last, time)
            return
        title = _crash_title(kind, text)
        rec = _Record("crash", path, lineno, time, time, 1, title, None, signature("crash", title))
        self._crashes[path] = rec
        self._records.append(rec)

    def incidents(self) -> tuple[Incident, ...]:
        return tuple(r.freeze() for r in self._records)


_RETURNCODE = re.compile(r"exits, returncode=(-?\d+)")


def _crash_title(kind: str, text: str) -> str:
    if kind == "child_failed":
        return "torchrun worker failed (ChildFailedError)"
    if kind == "_server_exit":
        m = _RETURNCODE.search(text)
        return f"inference server exited (returncode={m.group(1)})" if m else "inference server exited"
    for needle, title in (
        ("EngineDeadError", "vLLM engine died (EngineDeadError)"),
        ("EngineCore encountered a fatal error", "vLLM engine core hit a fatal error"),
        ("EngineCore failed to start", "vLLM engine core failed to start"),
        ("Scheduler hit an exception", "SGLang scheduler hit an exception"),
        ("Received sigquit", "SGLang child process failed (SIGQUIT)"),
    ):
        if needle in text:
            return title
    return "inference engine died"
