# cython: annotation_typing=False
# (for Cython: the C types are in the .pxd beside this file)
"""Incidents: lines that belong together, so a person reads one failure instead of hundreds of lines.

Four shapes: a *traceback* block (header, frames, final exception; chained exceptions are one block named after
the last one), a *retry storm* (many connection-refused or timeout lines in a short time in one file, one incident
that grows while it lasts), a *crash* (a torchrun child, an inference engine or the SGLang server died) and an
*nccl_timeout* (one collective that ProcessGroupNCCL's watchdog timed out: torch prints it three times or more,
each printing one more line of the same incident).

A ChildFailedError traceback carries torchrun's report (read by :mod:`rlwatch.logs.torchrun_report`); the error that
preceded the failure on the root-cause rank (an NCCL timeout, a traceback such as a CUDA OOM) becomes the incident's
``cause``.

Times: every line comes with ``(time, by)``. ``by`` None: ``time`` is the line's own. Otherwise the line has no time
of its own (an undated line of a backlog): ``time`` is a lower bound (``-inf``: none) and ``by`` an upper bound
(``inf``: none); the incident is then ``approximate`` and placed by position.
Each carries a signature (:mod:`rlwatch.logs.signatures`).
"""

from __future__ import annotations

import math
import os
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlwatch.common.state import ChildFailure, CollectiveTimeout, Incident, IncidentTally, line_ref
from rlwatch.common.words import plural
from rlwatch.logs import wording
from rlwatch.logs.prefixes import prepare
from rlwatch.logs.signatures import TITLE_MSG_CHARS, chain, exception, frame, header, location, signature
from rlwatch.logs.torchrun_report import CHILD_TITLES, Report, child_failure_text, finished, report_line

__all__ = [
    "EVENT_KINDS",
    "GUTTER",
    "HEADER_WORD",
    "PROCESS_GROUP",
    "WORK",
    "WORK_RANK",
    "WORK_TIMEOUT",
    "IncidentTracker",
    "Span",
    "crash_title",
    "tagged_rank",
    "timeout_title",
]

# (time, by) of one line: see the module docstring.
Span = tuple[float, float | None]
_INF = float("inf")

# In every traceback header (``signatures.header``). A line without it, in a file without an open block, is nothing
# to the tracker: the counter checks this (and ``open_paths``) before handing it a line, most lines being such.
HEADER_WORD = wording.TRACEBACK
# GUTTER, WORK, WORK_RANK, WORK_TIMEOUT and PROCESS_GROUP are public: the compiled event path runs them too.
# Python 3.11 prints exception groups with a gutter ("  | ", "  + ") in front of every line of the group.
GUTTER = re.compile(r"^\s*[|+](?:[ -]?[|+])*[ -]?")
_RANK_TAG = re.compile(re.escape(wording.RANK_PREFIX) + r"(\d+)\]")

# ProcessGroupNCCL's watchdog (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp): "[Rank 0] Watchdog caught
# collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=…, NumelOut=…, Timeout(ms)=10000) ran
# for 10035 milliseconds before timing out." Newer versions put "[PG ID 0 PG GUID 0(default_pg) Rank 0]" in front;
# the same text comes again in "Process group watchdog thread terminated with exception: …" and in the
# "what():" line of the C++ terminate that follows.
WORK = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)((?:[^()]|\([a-z]+\))*)\)(?: ran for (\d+) milliseconds)?")
WORK_RANK = re.compile(r"Rank (\d+)\]\s*Watchdog caught")
WORK_TIMEOUT = re.compile(r"Timeout\(ms\)=(\d+)")
PROCESS_GROUP = re.compile(r"\[PG (?:ID )?(\w+)")
MAX_INCIDENTS = 500  # kept, newest last: a night of retries would otherwise keep every one
_MAX_TALLIES = 10_000  # distinct (kind, signature) of the incidents no longer kept; signatures are normalised
_NCCL_SAME_BURST = 5000  # lines: a later timeout with the same rank and sequence number is a new run's

# Lines a traceback's frames are made of, read in bulk while a block of the unprefixed writer is in its frames: each
# starts with a blank or tab and then a printable ASCII character other than a gutter's ``|`` or ``+`` (so neither
# the gutter nor the prefix rules apply), and is complete. Lines holding an escape or ``Traceback`` are left to the
# line-by-line rules.
_FRAME_RUN = re.compile(rb"(?:[ \t]+[\x21-\x2a\x2c-\x7b\x7d\x7e][^\n\x1b]*\n)+")
_FRAME_WORD = wording.FRAME_FILE.encode()
_EXCEPTION_WORD = wording.EXCEPTION_WORD.encode()
# Blank lines and the messages between the links of a chained traceback, as whole lines.
_BETWEEN_RUN = re.compile(
    rb"(?:[ \t]*(?:%s|%s)?[ \t]*\n)+"
    % (re.escape(wording.CHAIN_CONTEXT.encode()), re.escape(wording.CHAIN_CAUSE.encode()))
)
_WINDOW = 16 << 10  # bytes of frame lines read in bulk per call at most
_N_LINES = [re.compile(rb"(?:[^\n]*\n){%d}" % k) for k in range(81)]  # the first k lines of a span, found in C

_STALL_LINES = 80  # a block that makes no progress for this many lines was cut off (the process died mid-print)
_AFTER_LINES = 40  # lines after the exception that may still chain another exception or detail a torchrun failure
# A block whose writer has been silent for this many lines of its file is over: that writer (a rank that printed
# its traceback and died) will never write the lines that would close it, and an open block makes the counter walk
# every line of the file.
_SILENT_LINES = 200


def tagged_rank(tag: str) -> int | None:
    """The global rank a "[rank3]:" prefix names (torch prefixes each worker's lines with it); the compiled event
    path calls it too."""
    m = _RANK_TAG.search(tag) if "rank" in tag else None
    return int(m.group(1)) if m else None


def _as_span(value: Span | float) -> Span:
    """A line's (time, by); a bare number is a time of the line's own (callers that know only exact times)."""
    return value if isinstance(value, tuple) else (value, None)


def _gap(a: float, b: float) -> float:
    """``b - a`` where both are times; 0 where either is unknown (undated lines are taken to belong together)."""
    return b - a if math.isfinite(a) and math.isfinite(b) else 0.0


class _Record:
    """An incident being read, kept until it is frozen into an ``Incident``. One text for both paths: Cython compiles
    this module (setup.py's ``COMPILED``) and the compiled event path cimports the class (``incidents.pxd`` declares
    its fields as C ones), making its records without ``__init__`` and setting every field."""

    def __init__(
        self, kind: str, path: str, lineno: int, t: float, by: float, has_by: bool, count: int, title: str, sig: str
    ) -> None:
        """A record whose first line is ``lineno`` at ``t`` (``has_by``: the line has no time of its own, ``t`` and
        ``by`` bound it)."""
        self.kind = kind
        self.path = path
        self.lineno = lineno
        self.first = t
        self.last = t
        self.count = count
        # None: a retry storm's, made when read from its count and ``storm_label`` (see freeze)
        self.title: str | None = title
        self.location: str | None = None
        self.signature = sig
        self.hi = max(by, t) if has_by else t  # the latest the last line can be
        self.approximate = has_by
        self.position: str | None = None
        self.first_exact = not has_by
        self.rank: int | None = None
        self.last_line = lineno
        self.root_cause: ChildFailure | None = None
        self.victims: tuple[ChildFailure, ...] = ()
        self.cause: _Record | None = None
        self.collective: CollectiveTimeout | None = None
        self.storm_label = ""

    def stretch(self, t: float, by: float, has_by: bool, lineno: int) -> None:
        """One more line of this incident, later in its file than the ones before (so no earlier than them): at
        ``t``, or between ``t`` and ``by`` where ``has_by``."""
        if has_by:
            self.approximate = True
        self.last = max(self.last, t)
        self.hi = max(by if has_by else t, self.last)
        self.last_line = max(self.last_line, lineno)

    def freeze(self) -> Incident:
        if self.title is None:
            self.title = storm_title(self.count, self.storm_label, self.path)
        by = self.hi if self.approximate and self.hi != self.last and math.isfinite(self.hi) else None
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
            approximate=self.approximate,
            by=by,
            position=self.position if self.approximate else None,
            first_exact=self.first_exact,
            rank=self.rank,
            root_cause=self.root_cause,
            victims=self.victims,
            cause=None if self.cause is None else self.cause.freeze(),
            collective=self.collective,
        )


def _bounds(span: Span) -> tuple[float, float, bool]:
    """A span as ``_Record.stretch`` takes it: (time, by, whether there is a by)."""
    t, by = span
    return (t, 0.0, False) if by is None else (t, by, True)


@dataclass(slots=True)
class _Block:
    """A traceback being read: from its header, possibly across several chained links."""

    lineno: int
    first: Span
    seen: int = 0  # number of the writer's latest line in the file
    lines: int = 1
    location: str | None = None
    state: str = "frames"  # frames | after | chain
    idle: int = 0
    gap: int = 0  # lines since the last exception line (blank lines, chain messages)
    record: _Record | None = None
    exc_type: str = ""
    exc_msg: str = ""
    rank: int | None = None
    report: Report | None = None


@dataclass(slots=True)
class _Storm:
    """A file's lines of one storm kind: the newest ``threshold`` within the window (time, line number), which is
    all a new storm needs (its first line and how many), and the storm going on. Bounded: a storm of thousands of
    lines a second keeps a handful of them, not every line of its window."""

    times: deque[tuple[float, int]]
    record: _Record | None = None


_STORM_KINDS = {"connection_refused": "connection-refused", "timeout": "timeout"}
_CRASH_KINDS = ("child_failed", "engine_dead", "_server_exit")
# The only kinds :meth:`IncidentTracker.event` does anything with: the counter passes no others.
EVENT_KINDS = frozenset(_STORM_KINDS) | frozenset(_CRASH_KINDS) | {"nccl_timeout"}


class IncidentTracker:
    """Groups lines into incidents. Fed by the event counter; keeps its state per file (and per writer prefix)."""

    def __init__(
        self,
        *,
        storm_threshold: int = 5,
        storm_window_s: float = 60.0,
        crash_window_s: float = 60.0,
        max_incidents: int = MAX_INCIDENTS,
    ) -> None:
        self._storm_threshold = max(1, storm_threshold)
        self._storm_window = storm_window_s
        self._crash_window = crash_window_s
        self._records: deque[_Record] = deque(maxlen=max_incidents)
        # (kind, signature) -> [incidents, lines, exact first time] of those pushed out of _records: a night of one
        # crash repeated must still say how often it happened, not how often among the newest kept.
        self._dropped: dict[tuple[str, str], list[Any]] = {}
        self._blocks: dict[tuple[str, str], _Block] = {}
        self.open_paths: dict[str, set[str]] = {}  # path -> writer tags with an open block (read-only outside)
        self._storms: dict[tuple[str, str], _Storm] = {}
        self._crashes: dict[str, _Record] = {}
        self._timeouts: dict[tuple[str, int | None, int, str], _Record] = {}
        # path -> where training was in it: "step 1869" (set by the counter on each progress line), so that an
        # incident without a time of its own can be placed ("train.log:5123, after step 1869").
        self.steps: dict[str, str] = {}

    def _new(self, kind: str, path: str, lineno: int, span: Span, count: int, title: str, sig: str) -> _Record:
        by = span[1]
        rec = _Record(kind, path, lineno, *_bounds(span), count, title, sig)
        if by is not None:
            step = self.steps.get(path)
            rec.position = line_ref(path, lineno) + (f", after {step}" if step else "")
        if len(self._records) == self._records.maxlen:
            self._drop(self._records[0])
        self._records.append(rec)
        return rec

    def _drop(self, rec: _Record) -> None:
        """Tally an incident that the kept ones push out (its lines long read: its signature is final)."""
        key = (rec.kind, rec.signature)
        tally = self._dropped.get(key)
        if tally is not None:
            tally[0] += 1
            tally[1] += rec.count
        elif len(self._dropped) < _MAX_TALLIES:
            first = rec.first if rec.first_exact and math.isfinite(rec.first) else None
            self._dropped[key] = [1, rec.count, first]

    def dropped(self) -> tuple[IncidentTally, ...]:
        """The incidents no longer kept, per kind and signature."""
        return tuple(IncidentTally(kind, sig, *tally) for (kind, sig), tally in self._dropped.items())

    # ------------------------------------------------------------------------------------------- tracebacks
    def wants_every_line(self, path: str) -> bool:
        """True while a traceback block is open in ``path``: its frames match no event literal."""
        return path in self.open_paths

    def _open(self, key: tuple[str, str], block: _Block) -> None:
        self.open_paths.setdefault(key[0], set()).add(key[1])
        block.rank = tagged_rank(key[1])
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

    def line(self, path: str, tag: str, body: str, lineno: int, when: Callable[[], Span | float]) -> None:
        """One line of ``path`` (prefix ``tag`` split off). ``when`` gives its (time, by), or a time of its own,
        parsed only if needed."""
        if path not in self.open_paths:
            # Nothing open in this file (the usual case): only a header matters. A gutter is never part of one.
            if HEADER_WORD in body and header(body):
                self._open((path, tag), _Block(lineno=lineno, first=_as_span(when()), seen=lineno))
            return
        self._expire(path, tag, lineno)
        key = (path, tag)
        block = self._blocks.get(key)
        if "|" in body[:12] or "+" in body[:12]:
            body = GUTTER.sub("", body, count=1)
        if block is None:
            if "Traceback" in body and header(body):
                self._open(key, _Block(lineno=lineno, first=_as_span(when()), seen=lineno))
            return
        block.seen = lineno
        if block.state == "frames":
            self._in_frames(key, block, body, lineno, when)
        else:
            self._after(key, block, body, lineno, when)

    bulk_frames = True  # False: every frame line through ``line`` (the plain path the bulk one must equal)

    def skip_frames(self, path: str, data: bytes, span: tuple[int, int, int]) -> tuple[int, int]:
        """Read the frame lines at ``data[pos:stop]`` (``span`` is pos, stop, number of the line at pos) in bulk,
        with the effect ``line`` would have on each: the block's last frame is its location, its line count and
        idle count move on, it stalls at the same line, and other writers' blocks expire as they would. Returns
        (pos, line number) after the lines read; pos unchanged when these lines are not frames of the unprefixed
        writer's open block in its frames (then ``line`` reads them). A traceback is thus read by its header, its
        exception line and what follows: its frames cost a few searches in C per run, not Python per line."""
        pos, stop, lineno = span
        tags = self.open_paths.get(path)
        if not self.bulk_frames or tags is None or "" not in tags:
            return pos, lineno
        block = self._blocks.get((path, ""))
        if block is None:
            return pos, lineno
        if block.state != "frames":
            return self._skip_between(path, block, data, span)
        # A window at most, cut before the first line holding ``Traceback`` (a header, when the configuration has no
        # needle for it); the run stops at the first line with an escape. A line left to ``line`` sends the scan back
        # here: each costs a window's search at most, never the rest of a long run.
        window = min(stop, pos + _WINDOW)
        k = data.find(b"Traceback", pos, window)
        if k >= 0:
            window = data.rfind(b"\n", pos, k) + 1 or pos
        m = _FRAME_RUN.match(data, pos, window)
        if m is None:
            return pos, lineno
        first = lineno
        end = m.end()
        while pos < end:
            room = _STALL_LINES - block.idle
            if room <= 0:
                break  # the next line stalls the block: ``line`` closes it
            piece = _N_LINES[min(room, 80)].match(data, pos, end)
            q = end if piece is None else piece.end()
            n = data.count(b"\n", pos, q)
            last = self._last_frame(data, pos, q)
            if last is None:
                block.idle += n
            else:
                (file, line), after = last
                block.location = location(file, line)
                block.idle = data.count(b"\n", after, q)
            block.lines += n
            lineno += n
            block.seen = lineno - 1
            pos = q
        if lineno > first and len(tags) > 1:
            self._expire_over(path, first, lineno - 1)
        return pos, lineno

    def _skip_between(self, path: str, block: _Block, data: bytes, span: tuple[int, int, int]) -> tuple[int, int]:
        """Between the links of a chained traceback: blank lines and the chain's message ("During handling of the
        above exception, ...") after an exception line, read in bulk as ``_after`` reads each (idle and gap move
        on, a chain message makes the block wait for the next link's header), while no line of them can close it."""
        pos, stop, lineno = span
        if block.report is not None:
            return pos, lineno
        m = _BETWEEN_RUN.match(data, pos, stop)
        if m is None:
            return pos, lineno
        end = m.end()
        n = data.count(b"\n", pos, end)
        if block.idle + n > _AFTER_LINES:
            return pos, lineno  # one of them closes the block: line by line
        block.idle += n
        block.gap += n
        if data.find(_EXCEPTION_WORD, pos, end) >= 0:
            block.state = "chain"
        block.seen = lineno + n - 1
        if len(self.open_paths.get(path, ())) > 1:
            self._expire_over(path, lineno, lineno + n - 1)
        return end, lineno + n

    def _expire_over(self, path: str, first: int, last: int) -> None:
        """What ``_expire`` does for each of the unprefixed writer's lines ``first`` to ``last``, at once: another
        writer's block closes if one of those lines is numbered before its latest, or too far after it."""
        for other in [t for t in self.open_paths.get(path, ()) if t != ""]:
            block = self._blocks.get((path, other))
            if block is not None and (first < block.seen or last - block.seen > _SILENT_LINES):
                self._close((path, other))

    @staticmethod
    def _last_frame(data: bytes, pos: int, q: int) -> tuple[tuple[str, str], int] | None:
        """The last line of ``data[pos:q]`` that is a frame (its file and line, and where the next line starts)."""
        hi = q
        while (i := data.rfind(_FRAME_WORD, pos, hi)) >= 0:
            start = data.rfind(b"\n", pos, i) + 1 or pos
            if not data[start:i].strip(b" \t"):
                nl = data.find(b"\n", i, q)
                found = frame(prepare(data[start:nl])[2])
                if found is not None:
                    return found, nl + 1
            hi = start
        return None

    def _in_frames(
        self, key: tuple[str, str], block: _Block, body: str, lineno: int, when: Callable[[], Span | float]
    ) -> None:
        block.lines += 1
        found = frame(body)
        if found is not None:
            block.location = location(*found)
            block.idle = 0
            return
        if header(body):  # a fresh traceback from the same writer: the old one was cut off
            self._open(key, _Block(lineno=lineno, first=_as_span(when()), seen=lineno))
            return
        if body[:1].isspace() or not body.strip():
            block.idle += 1
        else:
            exc = exception(body.rstrip())
            if exc is not None:
                block.exc_type, block.exc_msg = exc
                block.state = "after"
                block.idle = 0
                if block.exc_type.endswith(wording.CHILD_FAILED):
                    block.report = Report()
                self._publish(key[0], block, _as_span(when()), lineno)
                return
            block.idle += 1
        if block.idle > _STALL_LINES:
            self._close(key)

    def _after(
        self, key: tuple[str, str], block: _Block, body: str, lineno: int, when: Callable[[], Span | float]
    ) -> None:
        block.idle += 1
        block.gap += 1
        report = block.report
        if report is not None and not report.done and block.state == "after" and report_line(report, body):
            block.idle = 0
            self._publish(key[0], block, _as_span(when()), lineno)
            if finished(report):
                self._close(key)
            return
        if chain(body):
            block.state = "chain"
            return
        if header(body):
            if block.state == "chain":  # the next link of the same chained failure
                block.state = "frames"
                block.location = None
                block.idle = 0
                block.lines += block.gap
                block.gap = 0
                return
            self._close(key)
            self._open(key, _Block(lineno=lineno, first=_as_span(when()), seen=lineno))
            return
        if block.idle > _AFTER_LINES:
            self._close(key)

    def _publish(self, path: str, block: _Block, span: Span, lineno: int) -> None:
        message = block.exc_msg
        report = block.report
        root: ChildFailure | None = None
        victims: tuple[ChildFailure, ...] = ()
        if report is not None and report.failures:
            frozen = [(f.root, f.freeze()) for f in report.failures]
            roots = [c for is_root, c in frozen if is_root]
            root = roots[0] if roots else None
            victims = tuple(c for is_root, c in frozen if not is_root)
        if report is not None and (report.name or root):
            parts = [f"{report.name} FAILED" if report.name else ""]
            if root is not None:
                parts.append(child_failure_text(root))
            message = ", ".join(p for p in parts if p)
        title = block.exc_type + (f": {message[:TITLE_MSG_CHARS]}" if message else "")
        sig = signature("traceback", block.exc_type, message, block.location)
        rec = block.record
        if rec is None:
            rec = self._new("traceback", path, block.lineno, block.first, block.lines, title, sig)
            rec.rank = block.rank
            rec.stretch(*_bounds(span), lineno)
            block.record = rec
        else:
            rec.stretch(*_bounds(span), lineno)
            rec.count = block.lines
        rec.title = title
        rec.location = block.location
        rec.signature = sig
        rec.root_cause = root
        rec.victims = victims

    # ------------------------------------------------------------------------------------ storms and crashes
    def event(self, kind: str, path: str, lineno: int, span: Span, text: str) -> None:
        """A counted event; retry storms, crashes and NCCL timeouts are built from these."""
        if kind in _STORM_KINDS:
            self._storm(kind, path, lineno, span)
        elif kind == "nccl_timeout":
            self._timeout(path, lineno, span, text)
        elif kind in _CRASH_KINDS:
            self._crash(kind, path, lineno, span, text)

    def _storm(self, kind: str, path: str, lineno: int, span: Span) -> None:
        time = span[0]
        storm = self._storms.get((path, kind))
        if storm is None:
            storm = self._storms[(path, kind)] = _Storm(deque(maxlen=self._storm_threshold))
        storm.times.append((time, lineno))
        while storm.times and storm.times[0][0] < time - self._storm_window:
            storm.times.popleft()
        rec = storm.record
        if rec is not None and _gap(rec.last, time) <= self._storm_window:
            rec.count += 1
            rec.stretch(*_bounds(span), lineno)
        elif len(storm.times) >= self._storm_threshold:
            first, first_line = storm.times[0]
            sig = signature("retry_storm", kind, os.path.basename(path))
            rec = self._new("retry_storm", path, first_line, (first, span[1]), len(storm.times), "", sig)
            rec.stretch(*_bounds(span), lineno)
            storm.record = rec
            rec.storm_label = _STORM_KINDS[kind]
        else:
            return
        rec.title = None  # made when read: "<count> connection-refused errors (trainer.log)"

    def _crash(self, kind: str, path: str, lineno: int, span: Span, text: str) -> None:
        rec = self._crashes.get(path)
        if rec is not None and _gap(rec.last, span[0]) <= self._crash_window:
            rec.count += 1
            rec.stretch(*_bounds(span), lineno)
            return
        title = crash_title(kind, text)
        self._crashes[path] = self._new("crash", path, lineno, span, 1, title, signature("crash", title))

    def _timeout(self, path: str, lineno: int, span: Span, text: str) -> None:
        """A line that prints a timed-out collective: the first of it makes the incident, the rest count in it."""
        work = WORK.search(text)
        if work is None:
            return
        m = WORK_RANK.search(text)
        rank = int(m.group(1)) if m else tagged_rank(text[: max(0, work.start())])
        seq, op = int(work.group(1)), work.group(2)
        key = (path, rank, seq, op)
        rec = self._timeouts.get(key)
        if rec is not None and 0 <= lineno - rec.last_line <= _NCCL_SAME_BURST:
            rec.count += 1
            rec.stretch(*_bounds(span), lineno)
            rec.title = timeout_title(rec)
            return
        timeout = WORK_TIMEOUT.search(work.group(3))
        pg = PROCESS_GROUP.search(text)
        coll = CollectiveTimeout(
            rank=rank,
            seq=seq,
            op=op,
            timeout_ms=int(timeout.group(1)) if timeout else None,
            ran_ms=int(work.group(4)) if work.group(4) else None,
            group=pg.group(1) if pg else None,
        )
        sig = signature("nccl_timeout", op, "" if timeout is None else timeout.group(1))
        rec = self._new("nccl_timeout", path, lineno, span, 1, "", sig)
        rec.rank = rank
        rec.collective = coll
        rec.title = timeout_title(rec)
        self._timeouts[key] = rec

    # ---------------------------------------------------------------------------------------------- reading
    def incidents(self) -> tuple[Incident, ...]:
        for rec in self._records:
            if rec.root_cause is not None and rec.cause is None:
                rec.cause = self._cause_of(rec)
        return tuple(r.freeze() for r in self._records)

    def _cause_of(self, failure: _Record) -> _Record | None:
        """The error the root-cause rank printed before torchrun reported it: its latest incident before the
        report (same file first), an NCCL timeout or a traceback that is not torchrun's own."""
        root = failure.root_cause
        if root is None or root.rank is None:
            return None
        best: _Record | None = None
        for rec in self._records:
            if rec is failure or rec.rank != root.rank or rec.kind not in ("traceback", "nccl_timeout"):
                continue
            if rec.root_cause is not None or (rec.title is not None and rec.title.startswith(CHILD_TITLES)):
                continue
            same = rec.path == failure.path
            if same and rec.lineno > failure.lineno:
                continue  # printed after torchrun's report: not what led to it
            if best is None or (same, rec.last, rec.lineno) > (best.path == failure.path, best.last, best.lineno):
                best = rec
        return best


def storm_title(count: int, label: str, path: str) -> str:
    """A retry storm's title, ``5 connection-refused errors (trainer.log)``; the compiled event path calls it too, so
    both say one error as ``1 … error`` (a storm threshold of 1 is allowed)."""
    return f"{plural(count, label + ' error')} ({os.path.basename(path)})"


def timeout_title(rec: _Record) -> str:
    """An NCCL timeout record's title from its collective (the compiled event path calls it too)."""
    c = rec.collective
    if c is None:
        return "NCCL collective timeout"
    rank = f"rank {c.rank}" if c.rank is not None else "a rank"
    limit = f", timeout {c.timeout_ms} ms" if c.timeout_ms is not None else ""
    ran = f", ran {c.ran_ms} ms" if c.ran_ms is not None else ""
    printed = f" (printed {rec.count} times)" if rec.count > 1 else ""
    return f"NCCL collective timeout on {rank}: {c.op} SeqNum={c.seq}{limit}{ran}{printed}"


_RETURNCODE = re.compile(r"exits, returncode=(-?\d+)")


def crash_title(kind: str, text: str) -> str:
    """A crash record's title from its kind and line (the compiled event path calls it too)."""
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
