# cython: boundscheck=False, wraparound=False, cdivision=True, annotation_typing=False
# (for Cython: the C types are in the .pxd beside this file)
"""Counting: what the event counter keeps of each kind and each file, and what one counted line changes in it.

Both event counters read lines their own way (``events.PyEventCounter`` in Python, ``_eventpath.Core`` over a
chunk's bytes in C) and hand every line they count to :class:`Counts`, which keeps the per-kind statistics (count,
first and last times and their bounds, rate window, recent evidence), each file's per-kind state (its count, streak
and latest occurrence), the over-long line still arriving, the subscribers and the log view's tags, and answers
``summaries`` and ``streaks``. This module is compiled from its own text (setup.py's ``COMPILED``, the C types in
``counting.pxd``) and cimported by the compiled counter, whose calls into it are C calls; the Python counter imports
the same classes. So the counting rules are written once, here, and the two counters differ only in how they find
and read a line.

Its own module rather than part of ``events``: ``events`` holds the Python line reading (universal newlines, regular
expressions, a Python matcher), which Cython would compile as Python objects for no gain, and the choice of counter;
what is here is typed state that both paths share.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable, Sequence

from rlwatch.common.state import EventSummary, LogLine, line_ref
from rlwatch.common.textsafe import clean_line
from rlwatch.logs import textscan
from rlwatch.logs.incidents import EVENT_KINDS, FileIncidents, Grouper, step_number
from rlwatch.logs.kinds import REDRAWN_KINDS, EventKind
from rlwatch.logs.timestamps import time_or_nan

__all__ = [
    "BANNER",
    "DISPLAY_CHARS",
    "HEAD_BYTES",
    "LOOK_BACK_BYTES",
    "LOOK_BACK_LINES",
    "OVERLAP_BYTES",
    "RESTART",
    "TIME_SEARCH_BYTES",
    "Counts",
    "FileKind",
    "FileState",
    "KindStats",
    "LongLine",
    "Tag",
    "long_line",
    "shown",
    "undated_time",
    "upper_bound",
]

_INF = float("inf")
# How both counters read a line (Python values: the compiled counter reads them into C when it loads).
DISPLAY_CHARS = 2000  # evidence lines are capped: a multi-megabyte line is shown by its start
_SHOWN_CAP = DISPLAY_CHARS  # the same, a C integer where this module is compiled (counting.pxd)
# An over-long line arrives in pieces: its first HEAD_BYTES are its evidence text, time and prefix, and this much of
# the previous piece is searched again with the next one, so a match that straddles two pieces is still found.
HEAD_BYTES = 8192
OVERLAP_BYTES = 4096
# How far back a line without a timestamp looks for one in the same chunk before it settles for the latest one
# already known (a traceback's header sits right under the logged error; a stats row a few lines under its step).
LOOK_BACK_LINES = 3
LOOK_BACK_BYTES = 8 * 1024
TIME_SEARCH_BYTES = 400  # a timestamp sits near the start of a line, behind colour codes and a prefix
# A start banner (a process's first line, internal) and the restart it means when a file shows a second one.
BANNER = "_banner"
RESTART = "restart"
_NAN = float("nan")
# What the log view is told of a counted line: (path, line number, kind); a run of a bar's redraws passed over in
# bulk is told as one (path, range of line numbers, kind).
Tag = tuple[str, int | range, str]
_LOG_LINE_NEW = object.__new__
# LogLine is frozen: its slots are set through their descriptors, without its generated __init__ (four setattr calls
# through object.__setattr__), for each line a subscriber is handed and each evidence line read.
_LL_PATH = LogLine.__dict__["path"].__set__
_LL_LINENO = LogLine.__dict__["lineno"].__set__
_LL_TEXT = LogLine.__dict__["text"].__set__
_LL_TIME = LogLine.__dict__["time"].__set__


def _log_line(path: str, lineno: int, text: str, time: float) -> LogLine:
    """``LogLine(path, lineno, text, time)``."""
    line = _LOG_LINE_NEW(LogLine)
    _LL_PATH(line, path)
    _LL_LINENO(line, lineno)
    _LL_TEXT(line, text)
    _LL_TIME(line, time)
    return line


def shown(text: str) -> str:
    """The evidence text of a line: capped at ``DISPLAY_CHARS``, with every control sequence removed (a line is
    cut before it is cleaned, so a multi-megabyte line costs its start only)."""
    if len(text) > _SHOWN_CAP * 2:
        text = textscan.cut(text, 0, _SHOWN_CAP * 2)
    if not textscan.isprintable(text):
        text = clean_line(text)
    return text if len(text) <= _SHOWN_CAP else textscan.cut(text, 0, _SHOWN_CAP)


def undated_time(
    earlier: float, has_earlier: bool, backlog: bool, before: float, has_before: bool, now: float
) -> float:
    """The time of a line with no timestamp on it or just above it. Live (appended while followed): that of the
    nearest earlier line of its chunk that has one (``earlier``), else ``now``: it was written within one poll. From
    a backlog it has no time of its own (the caller marks it approximate): the answer is a lower bound, the latest
    timestamp before it in its chunk, else in its file before the chunk (``before``), else ``-inf``."""
    if not backlog:
        return earlier if has_earlier else now
    if has_earlier:
        return earlier
    return before if has_before else -_INF


def upper_bound(t: float, by: float) -> float:
    """The upper bound of an undated backlog line whose lower bound is ``t``: its file's modification time ``by``,
    or ``inf`` where that is not sound (a timestamp in the file later than it)."""
    return by if by >= t else _INF


def _finite(t: float) -> float | None:
    return t if math.isfinite(t) else None


class LongLine:
    """An over-long line whose pieces are still arriving. Made by :func:`long_line`."""

    lineno: int
    head: bytes  # the start of the line (up to the counter's head size): its evidence text, time and prefix
    tail: bytes  # the end of the previous piece, searched again with the next one
    seen: set[str]  # the kinds it counted as so far (a line counts once per kind)
    has_span: bool  # its time was read (by its head)
    span_t: float
    span_by: float
    span_has_by: bool


def long_line(lineno: int) -> LongLine:
    long = LongLine.__new__(LongLine)
    long.lineno = lineno
    long.head = b""
    long.tail = b""
    long.seen = set()
    long.has_span = False
    long.span_t = 0.0
    long.span_by = 0.0
    long.span_has_by = False
    return long


class FileKind:
    """What one kind keeps of one file: how many times it counted there, its streak, its latest occurrence."""

    files: int
    has_files: bool  # in its kind's file_order
    streak: int  # occurrences since the file's last progress line
    has_streak: bool  # in its kind's streak_order
    has_last: bool
    # Bounds of its latest occurrence in the file [lo, hi], per file because lines of one file come in order: an
    # undated line is no later than a dated one after it, which a maximum over all lines would forget.
    last_lo: float
    last_hi: float
    last_placed: bool  # the latest occurrence was undated: placed by position ("train.log:5123, after step 1869")
    last_lineno: int
    last_step: str | None  # the file's step when it was counted


def _file_kind() -> FileKind:
    fk = FileKind.__new__(FileKind)
    fk.files = 0
    fk.has_files = False
    fk.streak = 0
    fk.has_streak = False
    fk.has_last = False
    fk.last_lo = 0.0
    fk.last_hi = 0.0
    fk.last_placed = False
    fk.last_lineno = 0
    fk.last_step = None
    return fk


class FileState:
    """Everything the counter keeps of one file: its kinds' state, the incident rules' state, its over-long line,
    the latest timestamp read in it, where training was in it."""

    path: str
    base: str
    banners: int
    long: LongLine | None
    has_stamp: bool
    stamp: float  # the latest timestamp read in this file: undated lines after it are no earlier
    progress_lines: int
    streaking: list[FileKind]  # the kinds with a streak going in this file (a progress line ends them)
    kinds: list[FileKind]  # per kind, by index
    inc: FileIncidents  # what the incident rules keep of the file (its open blocks, storms, crash, step)


class KindStats:
    """What is kept of one kind, and what the counting asks of the kind itself. An internal kind keeps only its
    count and streaks (``summaries`` skips it; a policy may name one), and its subscribers still get every line."""

    kind: EventKind
    name: str
    progress: bool
    internal: bool
    event: bool  # handed to the incident rules (retry storms, crashes, NCCL timeouts are made of these)
    subs: list[Callable[[LogLine], None]] | None
    count: int
    # Bounds of the first occurrence: the earliest each line can be and the earliest each line must be by, over all
    # lines. A line with a time of its own has one value for both; an undated line of a backlog is bounded by the
    # latest timestamp before it in its file (-inf: none) and the file's modification time (inf: none sound).
    first_lo: float
    first_hi: float
    approximate: bool  # some line had no time of its own
    file_order: list[FileState]  # the files in the order it was first counted in them (files and last)
    streak_order: list[FileState]  # the files in the order their streak began
    buckets: dict[int, int]  # whole seconds -> events, for the rate window
    # the recent lines, a ring: path, line number, text and own time, the LogLine made when first read
    ring_path: list[str | None]
    ring_text: list[str | None]
    ring_line: list[LogLine | None]
    ring_lineno: array[int]
    ring_time: array[float]
    ring_cap: int
    ring_head: int
    ring_size: int

    def remember(self, path: str, lineno: int, text: str, own: float) -> None:
        """One more recent line (the oldest of ``ring_cap`` goes)."""
        if self.ring_size < self.ring_cap:
            i = (self.ring_head + self.ring_size) % self.ring_cap
            self.ring_size += 1
        else:
            i = self.ring_head
            self.ring_head = (self.ring_head + 1) % self.ring_cap
        self.ring_path[i] = path
        self.ring_text[i] = text
        self.ring_line[i] = None
        self.ring_lineno[i] = lineno
        self.ring_time[i] = own

    def recent(self) -> tuple[LogLine, ...]:
        out = []
        for k in range(self.ring_size):
            i = (self.ring_head + k) % self.ring_cap
            line = self.ring_line[i]
            if line is None:
                path, text = self.ring_path[i], self.ring_text[i]
                assert path is not None and text is not None
                line = self.ring_line[i] = _log_line(path, self.ring_lineno[i], text, self.ring_time[i])
            out.append(line)
        return tuple(out)


def _kind_stats(kind: EventKind, cap: int) -> KindStats:
    st = KindStats.__new__(KindStats)
    st.kind = kind
    st.name = kind.name
    st.progress = kind.progress
    st.internal = kind.internal
    st.event = kind.name in EVENT_KINDS
    st.subs = None
    st.count = 0
    st.first_lo = _INF
    st.first_hi = _INF
    st.approximate = False
    st.file_order = []
    st.streak_order = []
    st.buckets = {}
    st.ring_path = [None] * cap
    st.ring_text = [None] * cap
    st.ring_line = [None] * cap
    # arrays, so that compiled they are C ones (typed memoryviews in counting.pxd)
    st.ring_lineno = array("q", bytes(8 * cap))
    st.ring_time = array("d", bytes(8 * cap))
    st.ring_cap = cap
    st.ring_head = 0
    st.ring_size = 0
    return st


class Counts:
    """The counting state of one counter and its rules: per kind (by index, in the kinds' order) and per file."""

    def __init__(self, kinds: Sequence[EventKind], g: Grouper, *, recent_lines: int, rate_window_s: float) -> None:
        self.g = g  # the incident rules: events are handed to them, and each file's state is theirs too
        # What makes the LogLine a subscriber is handed (compiled, a C function pointer the compiled counter sets to
        # its own maker, which fills the slots without a call through their descriptors).
        self.make_line: Callable[[str, int, str, float], LogLine] = _log_line
        self.recent_lines = max(1, recent_lines)
        self.window = max(1.0, float(rate_window_s))
        self.stats: list[KindStats] = [_kind_stats(k, self.recent_lines) for k in kinds]
        self.nk = len(self.stats)
        self.index: dict[str, int] = {k.name: i for i, k in enumerate(kinds)}
        self.files: dict[str, FileState] = {}
        self.errors: deque[str] = deque(maxlen=20)
        self.tag_sink: list[Tag] | None = None
        self.tag_keep = 0
        self.tag_from = 0
        # The kinds a bar's redraw counts as (passed over in bulk, see the counters' redraws): internal, not progress.
        self.banner = self.index.get(BANNER, -1)
        self.restart = self.index.get(RESTART, -1)
        self.redrawn: list[int] = [
            i for i, k in enumerate(kinds) if k.name in REDRAWN_KINDS and k.internal and not k.progress
        ]

    # ------------------------------------------------------------------------------------------------ set-up
    def subscribe(self, kind: str, callback: Callable[[LogLine], None]) -> None:
        """Call ``callback`` with every future occurrence of ``kind`` (internal kinds included)."""
        i = self.index.get(kind)
        if i is None:
            raise KeyError(f"unknown event kind {kind!r}")
        st = self.stats[i]
        if st.subs is None:
            st.subs = []
        st.subs.append(callback)

    def tag_into(self, sink: list[Tag], keep: int) -> None:
        """Append (path, line number, kind) of every line counted among the newest ``keep`` of each chunk to
        ``sink`` (the log view tags only the lines it can still show)."""
        self.tag_sink = sink
        self.tag_keep = keep

    def chunk(self, first_lineno: int, nlines: int) -> None:
        """A chunk whose first line is ``first_lineno`` and which ends ``nlines`` lines later begins: only its
        newest ``tag_keep`` lines are tagged."""
        self.tag_from = first_lineno + (nlines - self.tag_keep if nlines > self.tag_keep else 0)

    def file(self, path: str) -> FileState:
        """The state of ``path``, made when first asked."""
        fs = self.files.get(path)
        if fs is None:
            fs = FileState.__new__(FileState)
            fs.path = path
            fs.inc = self.g.file(path)
            fs.base = fs.inc.base
            fs.banners = 0
            fs.long = None
            fs.has_stamp = False
            fs.stamp = 0.0
            fs.progress_lines = 0
            fs.streaking = []
            fs.kinds = [_file_kind() for _ in range(self.nk)]
            self.files[path] = fs
        return fs

    # ----------------------------------------------------------------------------------------------- counting
    def count(
        self, i: int, fs: FileState, lineno: int, t: float, by: float, has_by: bool, shown: str, now: float
    ) -> None:
        """One occurrence of kind ``i`` in file ``fs``, on line ``lineno`` at ``t`` (``has_by``: the line has no
        time of its own, ``t`` and ``by`` bound it), its evidence text ``shown``. ``now`` is the clock read once per
        chunk: a backlog counts millions of events, each needing it."""
        st = self.stats[i]
        fk = fs.kinds[i]
        st.count += 1
        if st.progress:
            # Where training was, for placing undated lines after it: the step it reports, else how many progress
            # lines the file has had (a TRL metric dict holds no step number). It ends every streak in the file.
            digits = step_number(shown)
            fs.progress_lines += 1
            fs.inc.step = f"step {digits}" if digits is not None else f"progress line {fs.progress_lines}"
            if fs.streaking:
                for other in fs.streaking:
                    other.streak = 0
                fs.streaking = []
        else:
            self._streak(st, fs, fk, 1)
        own = _NAN if has_by else t  # a LogLine's time is the line's own or NaN, never a bound
        if not st.internal:  # an internal kind keeps no times, files, rate or evidence
            if not fk.has_files:
                fk.has_files = True
                st.file_order.append(fs)
            fk.files += 1
            hi = by if has_by else t
            st.first_lo = min(st.first_lo, t)
            st.first_hi = min(st.first_hi, hi)
            if not has_by:
                if not fk.has_last or t >= fk.last_lo:
                    fk.has_last = True
                    fk.last_lo = fk.last_hi = t
                    fk.last_placed = False
                    fk.last_step = None
                second = int(t)
                if second >= now - self.window:
                    st.buckets[second] = st.buckets.get(second, 0) + 1
                    if len(st.buckets) > 2 * self.window + 16:
                        self.prune(st, now)
            else:
                st.approximate = True
                lo = t if not fk.has_last or t > fk.last_lo else fk.last_lo
                fk.has_last = True
                fk.last_lo = lo
                fk.last_hi = hi if hi > lo else lo
                fk.last_placed = True
                fk.last_lineno = lineno
                fk.last_step = fs.inc.step
            st.remember(fs.path, lineno, shown, own)
        if st.event:
            self.g.event(fs.inc, st.name, lineno, t, by, has_by, shown)
        if self.tag_sink is not None and lineno >= self.tag_from:
            self.tag_sink.append((fs.path, lineno, st.name))
        if st.subs:
            line = self.make_line(fs.path, lineno, shown, own)
            for callback in st.subs:
                try:
                    callback(line)
                except Exception as exc:  # a subscriber's bug must not stop the counting
                    self.errors.append(f"subscriber of {st.name} failed: {type(exc).__name__}: {exc}")

    def restarts(self, fs: FileState, restart_counted: bool) -> bool:
        """A line of ``fs`` counted as a start banner (``restart_counted``: and as a restart itself): whether it is
        also a restart, to be counted after its other kinds. A second start banner in the same file is the process
        starting again."""
        fs.banners += 1
        return fs.banners > 1 and self.restart >= 0 and not restart_counted

    # ----------------------------------------------------------------------------------------- over-long lines
    def long_new(self, fs: FileState, i: int) -> bool:
        """Whether the over-long line ``fs`` is receiving has not counted as kind ``i`` yet: a line counts at most
        once per kind, however many of its pieces match."""
        long = fs.long
        return long is not None and self.stats[i].name not in long.seen

    def count_long(self, i: int, fs: FileState, t: float, by: float, has_by: bool, shown: str, now: float) -> None:
        """The over-long line ``fs`` is receiving counts as kind ``i`` (``long_new`` said it had not)."""
        long = fs.long
        assert long is not None
        long.seen.add(self.stats[i].name)
        self.count(i, fs, long.lineno, t, by, has_by, shown, now)

    def long_time(self, fs: FileState, head: str, now: float, by: float, has_by: bool) -> None:
        """The time of the over-long line ``fs`` is receiving, read once by the text of its head, ``head``: its own
        timestamp, else (live) now, else (a backlog: ``has_by``, ``by`` the file's modification time) bounded by
        the latest timestamp before it in its file and the file's modification time."""
        long = fs.long
        if long is None or long.has_span:
            return
        parsed = time_or_nan(head, by if has_by else now)
        if not math.isnan(parsed):  # a time of its own, the file's latest
            long.span_t, long.span_has_by = parsed, False
            fs.stamp, fs.has_stamp = parsed, True
        elif not has_by:
            long.span_t, long.span_has_by = now, False
        else:
            lo = fs.stamp if fs.has_stamp else -_INF
            long.span_t, long.span_has_by = lo, True
            long.span_by = by if by >= lo else _INF
        long.has_span = True

    # ----------------------------------------------------------------------------------------------- streaks
    def _streak(self, st: KindStats, fs: FileState, fk: FileKind, n: int) -> None:
        """``n`` more occurrences of a kind that is not progress in a file: its streak there grows."""
        if not fk.has_streak:
            fk.has_streak = True
            st.streak_order.append(fs)
        if not fk.streak:
            fs.streaking.append(fk)
        fk.streak += n

    def bulk(self, i: int, fs: FileState, lineno: int, skipped: int) -> None:
        """Lines ``lineno`` to ``lineno + skipped - 1`` of ``fs``, a bar's redraws passed over in bulk, each of kind
        ``i`` (one of ``redrawn``): counted as one by one, without times, evidence or subscribers (the run's first
        and last lines are counted as any line); the log view told of them as one tag."""
        st = self.stats[i]
        st.count += skipped
        self._streak(st, fs, fs.kinds[i], skipped)
        first_tag = lineno if lineno > self.tag_from else self.tag_from
        if self.tag_sink is not None and first_tag < lineno + skipped:
            self.tag_sink.append((fs.path, range(first_tag, lineno + skipped), st.name))

    # ------------------------------------------------------------------------------------------------ reading
    def prune(self, st: KindStats, now: float) -> None:
        """Drop the rate window's seconds that fell out of it."""
        floor = int(now - self.window)
        for second in [s for s in st.buckets if s < floor]:
            del st.buckets[second]

    def summaries(self, now: float) -> dict[str, EventSummary]:
        """Every reported kind, zero counts included, keyed by name (``now``: the clock, for the rate)."""
        out: dict[str, EventSummary] = {}
        for i in range(self.nk):
            st = self.stats[i]
            if st.internal:
                continue
            self.prune(st, now)
            in_window = 0
            for s, n in st.buckets.items():
                if s >= now - self.window:
                    in_window += n
            first, first_by, last, last_by, position = self._bounds(i, st)
            out[st.name] = EventSummary(
                kind=st.name,
                severity=st.kind.severity,
                count=st.count,
                first=first,
                last=last,
                rate_per_min=in_window * 60.0 / self.window,
                streak=0 if st.progress else self._max_streak(i, st),
                files={fs.path: fs.kinds[i].files for fs in st.file_order},
                recent=st.recent(),
                approximate=st.approximate,
                first_by=first_by,
                last_by=last_by,
                position=position,
            )
        return out

    def _max_streak(self, i: int, st: KindStats) -> int:
        best = 0
        for fs in st.streak_order:
            n = fs.kinds[i].streak
            best = max(best, n)
        return best

    def _bounds(
        self, i: int, st: KindStats
    ) -> tuple[float | None, float | None, float | None, float | None, str | None]:
        """(first, first_by, last, last_by, position) of a kind, as :class:`EventSummary` holds them."""
        latest: FileKind | None = None
        latest_fs: FileState | None = None
        last_lo = 0.0
        if not st.count:
            return None, None, None, None, None
        for fs in st.file_order:
            fk = fs.kinds[i]
            if not fk.has_last:
                continue
            if latest is None or fk.last_lo > last_lo:
                last_lo = fk.last_lo
            if (
                latest is None
                or fk.last_hi > latest.last_hi
                or (fk.last_hi == latest.last_hi and fk.last_lo > latest.last_lo)
            ):
                latest, latest_fs = fk, fs
        if latest is None or latest_fs is None:
            return None, None, None, None, None
        if not st.approximate:
            return _finite(st.first_lo), None, _finite(last_lo), None, None
        last_hi = latest.last_hi if latest.last_hi > last_lo else last_lo
        where: str | None = None
        if last_hi != last_lo and latest.last_placed:
            where = line_ref(latest_fs.path, latest.last_lineno)
            if latest.last_step:
                where = f"{where}, after {latest.last_step}"
        return _finite(st.first_lo), _finite(st.first_hi), _finite(last_lo), _finite(last_hi), where

    def streaks(self, kind: str) -> dict[str, int]:
        """Per-file current streak of ``kind``: occurrences since the last progress event in that file."""
        i = self.index.get(kind)
        if i is None:
            return {}
        out = {}
        for fs in self.stats[i].streak_order:
            n = fs.kinds[i].streak
            if n:
                out[fs.path] = n
        return out
