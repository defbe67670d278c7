# cython: boundscheck=False, wraparound=False, cdivision=True, annotation_typing=False
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
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

from rlwatch.common.state import UNCOUNTED, ChildFailure, CollectiveTimeout, Incident, IncidentTally
from rlwatch.common.words import plural
from rlwatch.logs import textscan, wording
from rlwatch.logs.prefixes import prepare
from rlwatch.logs.signatures import TITLE_MSG_CHARS, chain, exception, frame, header, location, signature
from rlwatch.logs.torchrun_report import CHILD_TITLES, Report, child_failure_text, finished, report_line

__all__ = [
    "EVENT_KINDS",
    "GUTTER",
    "HEADER_WORD",
    "PROCESS_GROUP",
    "STORM_KINDS",
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
# The words the rules look for on every header and exception line, read once (compiled: C globals, no module look-up)
_RANK_PREFIX = wording.RANK_PREFIX
_CHILD_FAILED = wording.CHILD_FAILED

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
FRAME_WINDOW = 16 << 10  # bytes of frame lines read in bulk per call at most (the compiled event path reads it too)

_STALL_LINES = 80  # a block that makes no progress for this many lines was cut off (the process died mid-print)
_AFTER_LINES = 40  # lines after the exception that may still chain another exception or detail a torchrun failure
# the first k lines of a span (k up to a stall's room), found in C
_N_LINES = [re.compile(rb"(?:[^\n]*\n){%d}" % k) for k in range(_STALL_LINES + 1)]
# A block whose writer has been silent for this many lines of its file is over: that writer (a rank that printed
# its traceback and died) will never write the lines that would close it, and an open block makes the counter walk
# every line of the file.
_SILENT_LINES = 200


def tagged_rank(tag: str) -> int | None:
    """The global rank a "[rank3]:" prefix names (torch prefixes each worker's lines with it); the compiled event
    path calls it too."""
    m = _RANK_TAG.search(tag) if "rank" in tag else None
    return int(m.group(1)) if m else None


class _Record:
    """An incident being read, kept until it is frozen into an ``Incident``. Made by :func:`_record` (compiled, a C
    class whose fields ``incidents.pxd`` declares: made without an argument parse, every field set)."""

    kind: str
    path: str
    lineno: int
    first: float
    last: float
    count: int
    title: str | None  # None: a retry storm's, made when read from its count and ``storm_label`` (see freeze)
    location: str | None
    signature: str
    hi: float  # the latest the last line can be
    approximate: bool
    position: str | None
    first_exact: bool
    rank: int | None
    last_line: int
    root_cause: ChildFailure | None
    victims: tuple[ChildFailure, ...]
    cause: _Record | None
    collective: CollectiveTimeout | None
    storm_label: str

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


def _record(
    kind: str, path: str, lineno: int, t: float, by: float, has_by: bool, count: int, title: str | None, sig: str
) -> _Record:
    """A record whose first line is ``lineno`` at ``t`` (``has_by``: the line has no time of its own, ``t`` and
    ``by`` bound it)."""
    rec = _Record.__new__(_Record)
    rec.kind = kind
    rec.path = path
    rec.lineno = lineno
    rec.first = t
    rec.last = t
    rec.count = count
    rec.title = title
    rec.location = None
    rec.signature = sig
    rec.hi = max(by, t) if has_by else t
    rec.approximate = has_by
    rec.position = None
    rec.first_exact = not has_by
    rec.rank = None
    rec.last_line = lineno
    rec.root_cause = None
    rec.victims = ()
    rec.cause = None
    rec.collective = None
    rec.storm_label = ""
    return rec


def _bounds(span: Span) -> tuple[float, float, bool]:
    """A span as ``_Record.stretch`` takes it: (time, by, whether there is a by)."""
    t, by = span
    return (t, 0.0, False) if by is None else (t, by, True)


class LineTime:
    """A line's (time, by), read at most once and only if a rule needs it (most lines an incident sees need none).
    The Python counter gives it a callable; the compiled event path subclasses it (``compute`` reads the time from
    the chunk being counted, in C) and hands one instance, reset for each line, to the same rules."""

    def __init__(self, fn: Callable[[], Span | float] | None = None) -> None:
        self.fn = fn
        self.have = False
        self.t = 0.0
        self.by = 0.0
        self.has_by = False

    def compute(self) -> None:
        assert self.fn is not None
        value = self.fn()
        t, by = value if isinstance(value, tuple) else (value, None)
        self.t = t
        self.has_by = by is not None
        self.by = 0.0 if by is None else by

    def get(self) -> None:
        """Make ``t``, ``by`` and ``has_by`` the line's."""
        if not self.have:
            self.compute()
            self.have = True


# A traceback block's states.
_FRAMES = 0
_AFTER = 1
_CHAIN = 2  # a chain message was read: waiting for the next link's header


class _Block:
    """A traceback being read: from its header, possibly across several chained links. Made by :func:`_block`."""

    lineno: int
    first_t: float
    first_by: float
    first_has_by: bool
    seen: int  # number of the writer's latest line in the file
    lines: int
    location: str | None
    state: int
    idle: int
    gap: int  # lines since the last exception line (blank lines, chain messages)
    record: _Record | None
    exc_type: str
    exc_msg: str
    rank: int | None
    report: Report | None
    stale: bool  # its record took report lines whose title, signature and failures are not made yet (``_settle``)


def _block(lineno: int, t: float, by: float, has_by: bool, rank: int | None) -> _Block:
    """A block whose header is line ``lineno``, at ``t`` (or between ``t`` and ``by``)."""
    block = _Block.__new__(_Block)
    block.lineno = lineno
    block.first_t = t
    block.first_by = by
    block.first_has_by = has_by
    block.seen = lineno
    block.lines = 1
    block.location = None
    block.state = _FRAMES
    block.idle = 0
    block.gap = 0
    block.record = None
    block.exc_type = ""
    block.exc_msg = ""
    block.rank = rank
    block.report = None
    block.stale = False
    return block


class _Storm:
    """A file's lines of one storm kind: the newest ``threshold`` within the window (time and line number, in a ring
    the size of the threshold), which is all a new storm needs (its first line and how many), and the storm going
    on. Bounded: a storm of thousands of lines a second keeps a handful of them, not every line of its window."""

    def __init__(self, cap: int) -> None:
        # arrays, so that compiled they are C ones (typed memoryviews in incidents.pxd): a storm's every line sets one
        self.times = array("d", bytes(8 * cap))
        self.lines = array("q", bytes(8 * cap))
        self.cap = cap
        self.head = 0  # index of the oldest
        self.size = 0
        self.record: _Record | None = None


class FileIncidents:
    """What the incident rules keep for one file: its open traceback blocks (per writer prefix), its storms, its
    latest crash and where training was in it. The compiled counter holds it in its own per-file state, so a line
    reaches the rules with no look-up by path."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.base = os.path.basename(path)
        self.blocks: dict[str, _Block] = {}  # writer tag -> its open block
        self.storm_refused: _Storm | None = None
        self.storm_timeout: _Storm | None = None
        self.crash: _Record | None = None
        # Where training was in the file, "step 1869" (set by the counter on each progress line), so that an
        # incident without a time of its own can be placed ("train.log:5123, after step 1869").
        self.step: str | None = None


def _step_word(c: str) -> bool:
    """``\\w`` of ``re`` on str patterns: alphanumeric or ``_``."""
    return c.isalnum() or c == "_"


def step_number(text: str) -> str | None:
    """The step a progress line reports (its file's ``step`` is "step" and these digits): the digits after the last
    "step" in any case with at most three non-word characters between, as
    ``re.compile(r".*step\\W{0,3}(\\d+)", re.IGNORECASE | re.DOTALL).match(text).group(1)`` reads it ("Train step
    1869/2000", "'step': 1869", "global_step=1869"; AReaL's "Epoch 32/166 Step 918/935 Train step 29903/155052 done."
    counts the run's steps last). Written out, one character at a time, so that it compiles to C: both counters call
    it on every progress line. ``re`` ignoring case matches an "s" with the long s too; ``\\d`` is any decimal digit."""
    # Each "step" ends with a "p" or "P": those are found from the right by the str's own search (a C loop, where
    # reading each character back from the end read the str's width for every one), the last ones first.
    n = len(text)
    lo = text.rfind("p")
    up = text.rfind("P")
    while True:
        p = lo if lo > up else up
        i = p - 3
        if i < 0:
            return None
        if text[i] in "sS\u017f" and text[i + 1] in "tT" and text[i + 2] in "eE":
            j = p + 1
            k = 0
            while k < 3 and j < n and not _step_word(text[j]):
                j += 1
                k += 1
            if j < n and textscan.isdecimal(text[j]):
                d = j
                while d < n and textscan.isdecimal(text[d]):
                    d += 1
                return text[j:d]
        if p == lo:
            lo = textscan.rfind_char(text, "p", 0, p)
        else:
            up = textscan.rfind_char(text, "P", 0, p)


_REFUSED = "connection_refused"
# The kinds whose lines come in storms (a retried request's every failure), with the word a storm's title uses.
_STORM_KINDS = {_REFUSED: "connection-refused", "timeout": "timeout"}
STORM_KINDS = frozenset(_STORM_KINDS)  # for the compiled counter, which marks their kinds when it builds them
_CRASH_KINDS = ("child_failed", "engine_dead", "_server_exit")
# The only kinds :meth:`IncidentTracker.event` does anything with: the counter passes no others.
EVENT_KINDS = STORM_KINDS | frozenset(_CRASH_KINDS) | {"nccl_timeout"}
_UNCOUNTED = UNCOUNTED
_STALE_MAX = 64  # blocks left unsettled before all are settled (memory: each holds its report)
_SIGNATURES_KEPT = 4096
# (parts) -> signature: the same failure comes back tens of thousands of times in a long backlog
_signatures: dict[tuple[str | None, ...], str] = {}


def _gap(a: float, b: float) -> float:
    """``b - a`` where both are times; 0 where either is unknown (undated lines are taken to belong together). ``x - x``
    is 0 only for a finite ``x`` (NaN for an infinity or NaN): a finiteness test that compiles to C."""
    return b - a if a - a == 0.0 and b - b == 0.0 else 0.0


# What reading frame lines in bulk does to a block: both bulk readers (IncidentTracker.skip_frames and the compiled
# event path's Core.skip_frames) find the lines with their own byte scans and leave the block's state to these, so
# the bulk path keeps to what ``Grouper.take`` would do line by line (``_in_frames``, ``_after``).
def in_frames(block: _Block) -> bool:
    """True while the block reads its frames (its header read, its exception line not yet): frame lines are then
    read in bulk; after its exception line only the lines between a chain's links are."""
    return block.state == _FRAMES


def stall_room(block: _Block) -> int:
    """How many more lines a block in its frames may read without a frame before the next one stalls it (0 or less:
    the next line closes it, read line by line); never more than ``_STALL_LINES``, ``idle`` being 0 or more."""
    return _STALL_LINES - block.idle


def frames_read(block: _Block, n: int, where: str | None, idle_after: int, lineno: int) -> None:
    """The effect of reading ``n`` frame lines (the first numbered ``lineno``, at most ``stall_room`` of them) on a
    block in its frames: ``where`` is the location of the last frame among them and ``idle_after`` the lines after
    it (no frame among them, ``where`` None: each line is one more without progress)."""
    if where is None:
        block.idle += n
    else:
        block.location = where
        block.idle = idle_after
    block.lines += n
    block.seen = lineno + n - 1


def between_read(block: _Block, n: int, chained: bool, lineno: int) -> bool:
    """The effect of reading ``n`` lines between the links of a chained traceback (blank lines and the chain's
    message, ``chained`` when that message is among them; the first numbered ``lineno``) on a block after its
    exception line, as ``_after`` has on each: False, the block unchanged, when one of them would close it (they are
    then read line by line)."""
    if block.idle + n > _AFTER_LINES:
        return False
    block.idle += n
    block.gap += n
    if chained:
        block.state = _CHAIN
    block.seen = lineno + n - 1
    return True


def _signature(parts: tuple[str | None, ...]) -> str:
    sig = _signatures.get(parts)
    if sig is None:
        sig = signature(*parts)
        if len(_signatures) >= _SIGNATURES_KEPT:
            _signatures.clear()
        _signatures[parts] = sig
    return sig


class Grouper:
    """The incident rules, per line and per event: what groups lines into incidents. One text for both paths: the
    Python tracker (:class:`IncidentTracker`) and the compiled event path call the same methods (incidents.pxd
    declares them; the compiled counter cimports this class), each with the file's :class:`FileIncidents` and the
    line's :class:`LineTime`."""

    def __init__(self, storm_threshold: int, storm_window_s: float, crash_window_s: float, max_incidents: int) -> None:
        self.storm_threshold = max(1, storm_threshold)
        self.storm_window = storm_window_s
        self.crash_window = crash_window_s
        self.max_incidents = max_incidents
        self.records: deque[_Record] = deque(maxlen=max_incidents)
        # (kind, signature) -> [incidents, lines, exact first time] of those pushed out of records: a night of one
        # crash repeated must still say how often it happened, not how often among the newest kept.
        self.tallies: dict[tuple[str, str], list[Any]] = {}
        self.files: dict[str, FileIncidents] = {}
        # path -> its open blocks (the file's ``blocks`` while not empty): the paths whose every line the rules want
        self.open_paths: dict[str, dict[str, _Block]] = {}
        self.timeouts: dict[tuple[str, int | None, int, str], _Record] = {}
        self.stale: list[_Block] = []  # blocks whose record is stretched but not yet settled (see _after)

    def file(self, path: str) -> FileIncidents:
        fi = self.files.get(path)
        if fi is None:
            fi = self.files[path] = FileIncidents(path)
        return fi

    def _new(
        self,
        kind: str,
        fi: FileIncidents,
        lineno: int,
        t: float,
        by: float,
        has_by: bool,
        count: int,
        title: str | None,
        sig: str,
    ) -> _Record:
        rec = _record(kind, fi.path, lineno, t, by, has_by, count, title, sig)
        if has_by:
            step = fi.step
            # state.line_ref, the file's base name made once
            rec.position = f"{fi.base}:{'?' if lineno >= _UNCOUNTED else lineno}" + (f", after {step}" if step else "")
        if len(self.records) == self.max_incidents:
            self.settle_all()  # the record pushed out is tallied as it stands
            self._drop(self.records[0])
        self.records.append(rec)
        return rec

    def _drop(self, rec: _Record) -> None:
        """Tally an incident that the kept ones push out (its lines long read: its signature is final)."""
        key = (rec.kind, rec.signature)
        tally = self.tallies.get(key)
        if tally is not None:
            tally[0] += 1
            tally[1] += rec.count
        elif len(self.tallies) < _MAX_TALLIES:
            first = rec.first if rec.first_exact and rec.first - rec.first == 0.0 else None
            self.tallies[key] = [1, rec.count, first]

    # ------------------------------------------------------------------------------------------- tracebacks
    def _open(self, fi: FileIncidents, tag: str, lineno: int, w: LineTime) -> None:
        w.get()
        rank = tagged_rank(tag) if _RANK_PREFIX in tag else None
        if not fi.blocks:
            self.open_paths[fi.path] = fi.blocks
        fi.blocks[tag] = _block(lineno, w.t, w.by, w.has_by, rank)

    def _close(self, fi: FileIncidents, tag: str) -> None:
        blocks = fi.blocks
        if blocks.pop(tag, None) is not None and not blocks:
            del self.open_paths[fi.path]

    def _expire(self, fi: FileIncidents, tag: str, lineno: int) -> None:
        """Close the blocks of other writers in the file that have been silent for too long."""
        blocks = fi.blocks
        if len(blocks) == 1 and tag in blocks:
            return
        for other in [t for t in blocks if t != tag]:
            block = blocks[other]
            # Numbering that went back means the file was truncated or replaced: that block is over too.
            if not 0 <= lineno - block.seen <= _SILENT_LINES:
                self._close(fi, other)

    def expire_over(self, fi: FileIncidents, first: int, last: int) -> None:
        """What ``_expire`` does for each of the unprefixed writer's lines ``first`` to ``last``, at once: another
        writer's block closes if one of those lines is numbered before its latest, or too far after it."""
        blocks = fi.blocks
        for other in [t for t in blocks if t != ""]:
            block = blocks[other]
            if first < block.seen or last - block.seen > _SILENT_LINES:
                self._close(fi, other)

    def take(self, fi: FileIncidents, tag: str, body: str, lineno: int, w: LineTime) -> None:
        """One line of the file (prefix ``tag`` split off); ``w`` gives its time, read only if needed."""
        if not fi.blocks:
            # Nothing open in this file (the usual case): only a header matters. A gutter is never part of one.
            if header(body):
                self._open(fi, tag, lineno, w)
            return
        self._expire(fi, tag, lineno)
        block = fi.blocks.get(tag)
        # Python 3.11 prints exception groups with a gutter ("  | ", "  + ") in front of every line of the group.
        # Looked for in the first twelve characters, by iterating the str (compiled, a C loop over its characters
        # that reads the str's width once, where indexing reads it for each character).
        for k, c in enumerate(body):
            if k == 12:
                break
            if c in "|+":
                body = GUTTER.sub("", body, count=1)
                break
        if block is None:
            if header(body):
                self._open(fi, tag, lineno, w)
            return
        block.seen = lineno
        if block.state == _FRAMES:
            self._in_frames(fi, tag, block, body, lineno, w)
        else:
            self._after(fi, tag, block, body, lineno, w)

    def _in_frames(self, fi: FileIncidents, tag: str, block: _Block, body: str, lineno: int, w: LineTime) -> None:
        block.lines += 1
        found = frame(body)
        if found is not None:
            block.location = location(found[0], found[1])
            block.idle = 0
            return
        if header(body):  # a fresh traceback from the same writer: the old one was cut off
            self._open(fi, tag, lineno, w)
            return
        n = len(body)
        if n == 0 or body[0].isspace():  # blank, or indented (a frame's code line)
            block.idle += 1
        else:
            # the line with its trailing spaces stripped (most have none: then the line itself, no call)
            exc = exception(body.rstrip() if body[n - 1].isspace() else body)
            if exc is not None:
                block.exc_type, block.exc_msg = exc
                block.state = _AFTER
                block.idle = 0
                if block.exc_type.endswith(_CHILD_FAILED):
                    block.report = Report()
                w.get()
                self._publish(fi, block, w, lineno)
                return
            block.idle += 1
        if block.idle > _STALL_LINES:
            self._close(fi, tag)

    def _after(self, fi: FileIncidents, tag: str, block: _Block, body: str, lineno: int, w: LineTime) -> None:
        block.idle += 1
        block.gap += 1
        report = block.report
        if report is not None and not report.done and block.state == _AFTER and report_line(report, body):
            block.idle = 0
            w.get()
            # What _publish does to the record, its title, signature and failures made once the report is read (or
            # when the record is read before): each report line only stretches it (see _settle).
            rec = block.record
            assert rec is not None
            rec.stretch(w.t, w.by, w.has_by, lineno)
            rec.count = block.lines
            if not block.stale:
                block.stale = True
                self.stale.append(block)
                if len(self.stale) > _STALE_MAX:
                    self.settle_all()
            if finished(report):
                self._settle(block)
                self._close(fi, tag)
            return
        if chain(body):
            block.state = _CHAIN
            return
        if header(body):
            if block.state == _CHAIN:  # the next link of the same chained failure
                block.state = _FRAMES
                block.location = None
                block.idle = 0
                block.lines += block.gap
                block.gap = 0
                return
            self._close(fi, tag)
            self._open(fi, tag, lineno, w)
            return
        if block.idle > _AFTER_LINES:
            self._close(fi, tag)

    def _settle(self, block: _Block) -> None:
        """The title, signature and failures that _publish would have given the block's record at its latest report
        line: until then the block's failure, its report's contents and the record's location are as they were
        there (a new exception line publishes at once, and clears this)."""
        rec = block.record
        if not block.stale or rec is None:
            return
        block.stale = False
        self._made(block, rec, rec.location)

    def settle_all(self) -> None:
        stale = self.stale
        self.stale = []
        for block in stale:
            self._settle(block)

    def _publish(self, fi: FileIncidents, block: _Block, w: LineTime, lineno: int) -> None:
        rec = block.record
        block.stale = False  # what _settle would make is made here
        if rec is None:
            rec = self._new(
                "traceback", fi, block.lineno, block.first_t, block.first_by, block.first_has_by, block.lines, "", ""
            )
            rec.rank = block.rank
            rec.stretch(w.t, w.by, w.has_by, lineno)
            block.record = rec
        else:
            rec.stretch(w.t, w.by, w.has_by, lineno)
            rec.count = block.lines
        self._made(block, rec, block.location)

    def _made(self, block: _Block, rec: _Record, where: str | None) -> None:
        """A traceback record's title, signature, location and failures, from its block."""
        message = block.exc_msg
        report = block.report
        root: ChildFailure | None = None
        victims: tuple[ChildFailure, ...] = ()
        if report is not None and report.failures:
            frozen = [(f.root, f.freeze()) for f in report.failures]
            roots = [c for is_root, c in frozen if is_root]
            root = roots[0] if roots else None
            victims = tuple([c for is_root, c in frozen if not is_root])
        if report is not None and (report.name or root):
            parts = [f"{report.name} FAILED" if report.name else ""]
            if root is not None:
                parts.append(child_failure_text(root))
            message = ", ".join([p for p in parts if p])
        rec.title = block.exc_type + (": " + message[:TITLE_MSG_CHARS] if message else "")
        rec.location = where
        rec.signature = _signature(("traceback", block.exc_type, message, where))
        rec.root_cause = root
        rec.victims = victims

    # ------------------------------------------------------------------------------------ storms and crashes
    def event(self, fi: FileIncidents, kind: str, lineno: int, t: float, by: float, has_by: bool, text: str) -> None:
        """A counted event (at ``t``, or between ``t`` and ``by`` where ``has_by``); retry storms, crashes and NCCL
        timeouts are built from these."""
        if kind in _STORM_KINDS:
            self._storm(fi, kind, lineno, t, by, has_by)
        elif kind == "nccl_timeout":
            self._timeout(fi, lineno, t, by, has_by, text)
        elif kind in _CRASH_KINDS:
            self._crash(fi, kind, lineno, t, by, has_by, text)

    def _storm(self, fi: FileIncidents, kind: str, lineno: int, t: float, by: float, has_by: bool) -> None:
        refused = kind == _REFUSED
        storm = fi.storm_refused if refused else fi.storm_timeout
        if storm is None:
            storm = _Storm(self.storm_threshold)
            if refused:
                fi.storm_refused = storm
            else:
                fi.storm_timeout = storm
        # append, the oldest dropped when full (a deque with maxlen = threshold)
        if storm.size < storm.cap:
            last = (storm.head + storm.size) % storm.cap
            storm.size += 1
        else:
            last = storm.head
            storm.head = (storm.head + 1) % storm.cap
        storm.times[last] = t
        storm.lines[last] = lineno
        while storm.size and storm.times[storm.head] < t - self.storm_window:
            storm.head = (storm.head + 1) % storm.cap
            storm.size -= 1
        rec = storm.record
        if rec is not None and _gap(rec.last, t) <= self.storm_window:
            rec.count += 1
            rec.stretch(t, by, has_by, lineno)
        elif storm.size >= self.storm_threshold:
            sig = _signature(("retry_storm", kind, fi.base))
            rec = self._new(
                "retry_storm", fi, storm.lines[storm.head], storm.times[storm.head], by, has_by, storm.size, None, sig
            )
            rec.stretch(t, by, has_by, lineno)
            rec.storm_label = _STORM_KINDS[kind]
            storm.record = rec
        else:
            return
        rec.title = None  # made when read: "<count> connection-refused errors (trainer.log)"

    def _crash(self, fi: FileIncidents, kind: str, lineno: int, t: float, by: float, has_by: bool, text: str) -> None:
        rec = fi.crash
        if rec is not None and _gap(rec.last, t) <= self.crash_window:
            rec.count += 1
            rec.stretch(t, by, has_by, lineno)
            return
        title = crash_title(kind, text)
        fi.crash = self._new("crash", fi, lineno, t, by, has_by, 1, title, _signature(("crash", title)))

    def _timeout(self, fi: FileIncidents, lineno: int, t: float, by: float, has_by: bool, text: str) -> None:
        """A line that prints a timed-out collective: the first of it makes the incident, the rest count in it."""
        work = WORK.search(text)
        if work is None:
            return
        m = WORK_RANK.search(text)
        rank = int(m.group(1)) if m else tagged_rank(text[: max(0, work.start())])
        seq, op = int(work.group(1)), work.group(2)
        key = (fi.path, rank, seq, op)
        rec = self.timeouts.get(key)
        if rec is not None and 0 <= lineno - rec.last_line <= _NCCL_SAME_BURST:
            rec.count += 1
            rec.stretch(t, by, has_by, lineno)
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
        sig = _signature(("nccl_timeout", op, "" if timeout is None else timeout.group(1)))
        rec = self._new("nccl_timeout", fi, lineno, t, by, has_by, 1, "", sig)
        rec.rank = rank
        rec.collective = coll
        rec.title = timeout_title(rec)
        self.timeouts[key] = rec

    # ---------------------------------------------------------------------------------------------- reading
    def incidents(self) -> tuple[Incident, ...]:
        self.settle_all()
        for rec in self.records:
            if rec.root_cause is not None and rec.cause is None:
                rec.cause = self._cause_of(rec)
        return tuple([r.freeze() for r in self.records])

    def dropped(self) -> tuple[IncidentTally, ...]:
        """The incidents no longer kept, per kind and signature."""
        self.settle_all()
        return tuple([IncidentTally(kind, sig, *tally) for (kind, sig), tally in self.tallies.items()])

    def _cause_of(self, failure: _Record) -> _Record | None:
        """The error the root-cause rank printed before torchrun reported it: its latest incident before the
        report (same file first), an NCCL timeout or a traceback that is not torchrun's own."""
        root = failure.root_cause
        if root is None or root.rank is None:
            return None
        best: _Record | None = None
        for rec in self.records:
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


class IncidentTracker:
    """Groups lines into incidents. Fed by the Python event counter; its rules are :class:`Grouper`'s, which the
    compiled event path runs too. Keeps its state per file (and per writer prefix)."""

    def __init__(
        self,
        *,
        storm_threshold: int = 5,
        storm_window_s: float = 60.0,
        crash_window_s: float = 60.0,
        max_incidents: int = MAX_INCIDENTS,
    ) -> None:
        self._g = Grouper(storm_threshold, storm_window_s, crash_window_s, max_incidents)
        self.open_paths: dict[str, dict[str, _Block]] = self._g.open_paths  # path -> writer tags with an open block

    @property
    def grouper(self) -> Grouper:
        """The rules themselves: the counter hands them its events (``counting.Counts``)."""
        return self._g

    def file(self, path: str) -> FileIncidents:
        """The rules' state of ``path`` (the counter sets its ``step``)."""
        return self._g.file(path)

    def dropped(self) -> tuple[IncidentTally, ...]:
        """The incidents no longer kept, per kind and signature."""
        return self._g.dropped()

    def incidents(self) -> tuple[Incident, ...]:
        return self._g.incidents()

    # ------------------------------------------------------------------------------------------- tracebacks
    def wants_every_line(self, path: str) -> bool:
        """True while a traceback block is open in ``path``: its frames match no event literal."""
        return path in self.open_paths

    def line(self, path: str, tag: str, body: str, lineno: int, when: Callable[[], Span | float]) -> None:
        """One line of ``path`` (prefix ``tag`` split off). ``when`` gives its (time, by), or a time of its own,
        parsed only if needed."""
        if path not in self.open_paths and not (HEADER_WORD in body and header(body)):
            return  # nothing open in this file (the usual case) and no header: nothing to the rules
        g = self._g
        g.take(g.file(path), tag, body, lineno, LineTime(when))

    def event(self, kind: str, path: str, lineno: int, span: Span, text: str) -> None:
        """A counted event; retry storms, crashes and NCCL timeouts are built from these."""
        g = self._g
        g.event(g.file(path), kind, lineno, *_bounds(span), text)

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
        block = tags.get("")
        if block is None:
            return pos, lineno
        if not in_frames(block):
            return self._skip_between(path, block, data, span)
        # A window at most, cut before the first line holding ``Traceback`` (a header, when the configuration has no
        # needle for it); the run stops at the first line with an escape. A line left to ``line`` sends the scan back
        # here: each costs a window's search at most, never the rest of a long run.
        window = min(stop, pos + FRAME_WINDOW)
        k = data.find(b"Traceback", pos, window)
        if k >= 0:
            window = data.rfind(b"\n", pos, k) + 1 or pos
        m = _FRAME_RUN.match(data, pos, window)
        if m is None:
            return pos, lineno
        first = lineno
        end = m.end()
        while pos < end:
            room = stall_room(block)
            if room <= 0:
                break  # the next line stalls the block: ``line`` closes it
            piece = _N_LINES[room].match(data, pos, end)
            q = end if piece is None else piece.end()
            n = data.count(b"\n", pos, q)
            last = self._last_frame(data, pos, q)
            if last is None:
                frames_read(block, n, None, 0, lineno)
            else:
                (file, line), after = last
                frames_read(block, n, location(file, line), data.count(b"\n", after, q), lineno)
            lineno += n
            pos = q
        if lineno > first and len(tags) > 1:
            self._g.expire_over(self._g.file(path), first, lineno - 1)
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
        if not between_read(block, n, data.find(_EXCEPTION_WORD, pos, end) >= 0, lineno):
            return pos, lineno  # one of them closes the block: line by line
        if len(self.open_paths.get(path, ())) > 1:
            self._g.expire_over(self._g.file(path), lineno, lineno + n - 1)
        return end, lineno + n

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
