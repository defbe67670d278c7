"""Counting events in log chunks: totals, per-file counts, times, rates, streaks, evidence lines, incidents.

The counter never splits a chunk into lines. It asks the matcher for the next literal hit, works out that one
line's bounds and number from the bytes around it, and jumps past it; only while a traceback block is open in a
file does it walk that file line by line (its frames match no literal). A line counts at most once per kind.

Two implementations do this. :class:`PyEventCounter`, here, is the reference; ``rlwatch.logs._eventpath`` (Cython,
built at install where a compiler is found) is the same counter and line reading compiled, some ten times faster;
both hand each counted line to the same counting rules (``counting.Counts``) and each line and event to the same
incident rules (``incidents.Grouper``), each compiled from its own text.
:class:`EventCounter` runs the compiled one when it is built and can take the kinds (at most 64, each with
literals), else this one; ``RLWATCH_NATIVE=0`` picks this one always.
``tests/logs/test_native_equivalence.py`` feeds both the same chunks and compares every answer.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from rlwatch.common.clock import Clock
from rlwatch.common.state import EventSummary, Incident, IncidentTally, LogLine
from rlwatch.common.textsafe import strip_ansi
from rlwatch.logs.counting import (
    BANNER,
    DISPLAY_CHARS,
    HEAD_BYTES,
    LOOK_BACK_BYTES,
    LOOK_BACK_LINES,
    OVERLAP_BYTES,
    RESTART,
    TIME_SEARCH_BYTES,
    Counts,
    FileState,
    LongLine,
    Tag,
    long_line,
    shown,
    undated_time,
    upper_bound,
)
from rlwatch.logs.incidents import HEADER_WORD, IncidentTracker, Span
from rlwatch.logs.kinds import EventKind, build_kinds
from rlwatch.logs.matcher import Matcher
from rlwatch.logs.native import event_path
from rlwatch.logs.prefixes import prepare
from rlwatch.logs.progress_shape import redraw_layout
from rlwatch.logs.tailer import Chunk
from rlwatch.logs.timestamps import HMS_BYTES, parse_time

__all__ = ["DISPLAY_CHARS", "NATIVE", "EventCounter", "EventKind", "PyEventCounter", "Tag", "build_kinds"]

_TERMINATOR = re.compile(rb"\r\n?|\n")
_OVERLAP = OVERLAP_BYTES
_HEAD = HEAD_BYTES
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


class _Lines:
    """Line arithmetic over one chunk, honouring universal newlines without splitting it; and the time of a line."""

    __slots__ = ("approximate", "before", "by", "cr", "data", "stamp")

    def __init__(self, data: bytes, by: float | None = None, before: float | None = None) -> None:
        self.data = data
        self.cr = b"\r" in data
        self.stamp: tuple[int, float] | None = None  # (line start, time) of the latest line known to have a time
        # A backlog chunk: its file's modification time when opened (no line of it was written later), and the
        # latest timestamp read in the file before this chunk. None for both in a live chunk.
        self.by = by
        self.before = before
        self.approximate = False  # the latest answer of time_of is a lower bound, not the line's time

    def time_of(self, start: int, text: str, now: float) -> float:
        """The time of the line at ``start``: its own timestamp, else that of one of the few lines just above it
        (a traceback's header sits right under the logged error; a stats row a few lines under its step).

        Failing those, a live line (appended while followed) takes the time of the nearest earlier line of this
        chunk that has one, else ``now``: it arrived within one poll. A backlog line gets no time of its own: the
        answer is the latest timestamp before it in its file, a lower bound (``-inf``: none), with
        ``approximate`` set; ``by`` bounds it from above.
        """
        ref = now if self.by is None else self.by  # what a year-less timestamp is read against
        own = parse_time(text, ref) if ":" in text else None  # every timestamp format holds a colon
        if own is not None:
            self.stamp = (start, own)
            self.approximate = False
            return own
        floor = max(0, start - LOOK_BACK_BYTES)
        known = self.stamp
        if known is not None and known[0] < start:
            floor = max(floor, known[0] + 1)
        data = self.data
        cr = self.cr
        if not cr:
            # A timestamp holds a colon. Where the lines looked at hold none (a stats row among rules and rows),
            # settle at once: finding where they begin takes three memrchr calls, checking them one more.
            top = start
            for _ in range(LOOK_BACK_LINES):
                if top <= floor:
                    break
                top = data.rfind(b"\n", floor, top - 1) + 1 or floor
            if data.find(b":", top, start) < 0:
                return self._fallback(start, now)
        pos = start
        for _ in range(LOOK_BACK_LINES):
            if pos <= floor:
                break
            end = pos - 1  # the previous line's terminator, one byte or "\r\n"
            if cr and end > floor and data[end - 1 : end + 1] == b"\r\n":
                end -= 1
            begin = self.start(end, floor) if cr else data.rfind(b"\n", floor, end) + 1 or floor
            head_end = min(end, begin + TIME_SEARCH_BYTES)
            # Every timestamp holds a colon: most lines without a time (table rows, frames) are passed by memchr.
            if data.find(b":", begin, head_end) >= 0 and HMS_BYTES.search(data, begin, head_end):
                found = parse_time(strip_ansi(data[begin:end].decode("utf-8", "replace")), ref)
                if found is not None:
                    self.stamp = (begin, found)
                    self.approximate = False
                    return found
            pos = begin
        return self._fallback(start, now)

    def _fallback(self, start: int, now: float) -> float:
        """The time of a line with no timestamp on it or just above it (see :meth:`time_of`)."""
        known = self.stamp
        earlier = known is not None and known[0] < start
        backlog = self.by is not None
        self.approximate = backlog
        before = self.before
        return undated_time(
            known[1] if known is not None and earlier else 0.0,
            earlier,
            backlog,
            0.0 if before is None else before,
            before is not None,
            now,
        )

    def span(self, start: int, text: str, now: float) -> Span:
        """(time, by) of the line at ``start``: by None when the time is the line's own (or, live, read within one
        poll); else time is a lower bound and by an upper bound, ``inf`` where the file's modification time is not
        sound (a timestamp in the file later than it)."""
        t = self.time_of(start, text, now)
        if not self.approximate:
            return t, None
        by = self.by
        assert by is not None  # approximate: a backlog line
        return t, upper_bound(t, by)

    def end(self, pos: int, limit: int) -> tuple[int, int]:
        """(end of the line starting at or containing ``pos``, start of the next line)."""
        if self.cr:
            m = _TERMINATOR.search(self.data, pos, limit)
            return (m.start(), m.end()) if m else (limit, limit)
        i = self.data.find(b"\n", pos, limit)
        return (i, i + 1) if i >= 0 else (limit, limit)

    def start(self, hit: int, floor: int) -> int:
        """Start of the line containing ``hit``, no earlier than ``floor`` (a known line start)."""
        i = self.data.rfind(b"\n", floor, hit)
        if self.cr:
            i = max(i, self.data.rfind(b"\r", floor, hit))
        return i + 1 if i >= 0 else floor

    def count(self, a: int, b: int) -> int:
        """Line terminators in ``data[a:b]`` (both ends at line starts)."""
        n = self.data.count(b"\n", a, b)
        if self.cr:
            n += self.data.count(b"\r", a, b) - self.data.count(b"\r\n", a, b)
        return n

    def last_start(self) -> int:
        """Where the unterminated tail of the chunk begins (``len`` when it ends with a terminator)."""
        i = self.data.rfind(b"\n")
        if self.cr:
            i = max(i, self.data.rfind(b"\r"))
        return i + 1


class PyEventCounter:
    """Counts event kinds in chunks from the tailer and groups incidents (the Python implementation).

    Times are the lines' own timestamps when they carry one (or that of a line just above). A line without one
    appended while followed takes the timestamp of the nearest earlier line of the same chunk, else the clock's
    wall time at feed: it was written within one poll. A line without one read from a backlog gets no time: it is
    bounded by the latest timestamp before it in its file and by the file's modification time, and placed by
    position (file, line, the step reported last before it); its :class:`LogLine` time is NaN. Rates use the wall
    clock too, since they compare with line times.
    """

    def __init__(
        self,
        kinds: Sequence[EventKind],
        clock: Clock,
        *,
        recent_lines: int = 20,
        rate_window_s: float = 300.0,
        storm_threshold: int = 5,
        storm_window_s: float = 60.0,
    ) -> None:
        self._kinds = {k.name: k for k in kinds}
        self._matcher = Matcher(list(self._kinds.values()))
        self._clock = clock
        self._incidents = IncidentTracker(storm_threshold=storm_threshold, storm_window_s=storm_window_s)
        self._counts = Counts(
            list(self._kinds.values()),
            self._incidents.grouper,
            recent_lines=recent_lines,
            rate_window_s=rate_window_s,
        )
        needles = self._matcher.needle_kinds() or []
        self._digitless = not any(48 <= c <= 57 for needle, _ in needles for c in needle)  # see _redraws
        self._redrawn = frozenset(self._counts.stats[i].name for i in self._counts.redrawn)
        self.errors: deque[str] = self._counts.errors

    @property
    def kinds(self) -> tuple[EventKind, ...]:
        return tuple(self._kinds.values())

    def subscribe(self, kind: str, callback: Callable[[LogLine], None]) -> None:
        """Call ``callback`` with every future occurrence of ``kind`` (internal kinds included)."""
        self._counts.subscribe(kind, callback)

    def tag_into(self, sink: list[Tag], keep: int) -> None:
        """Append (path, line number, kind) of every line counted among the newest ``keep`` of each chunk to
        ``sink`` (the log view tags only the lines it can still show); a run of redraws passed over in bulk as
        (path, range of line numbers, kind)."""
        self._counts.tag_into(sink, keep)

    def open_files(self) -> dict[str, set[str]]:
        """Paths with a traceback block open, and the writer tags of those blocks."""
        return {path: set(tags) for path, tags in self._incidents.open_paths.items()}

    # ------------------------------------------------------------------------------------------------ feeding
    def feed(self, chunk: Chunk) -> None:
        """Count everything in one chunk. Arbitrary bytes are fine: nothing here raises on content."""
        data = chunk.data
        path = chunk.path
        state = self._counts.file(path)
        now = self._clock.time()
        self._counts.chunk(chunk.first_lineno, chunk.nlines)
        by = chunk.backlog_mtime
        lines = _Lines(data, by, state.stamp if by is not None and state.has_stamp else None)
        size = len(data)
        pos = 0
        lineno = chunk.first_lineno
        if chunk.continues_line:
            end, nxt = lines.end(0, size)
            final = end < size or not chunk.continued
            first = state.long is None or state.long.lineno != lineno
            if first:  # its start was never seen (counting began mid-line): count from here
                state.long = long_line(lineno)
            self._piece(path, state, data[:end], first=first, final=final, now=now, by=by)
            if not final:
                return
            pos = nxt
            lineno += 1
        else:
            state.long = None  # an unfinished line whose rest never came
        limit = lines.last_start() if chunk.continued else size
        if pos < limit:
            self._scan(path, state, lines, (pos, limit, lineno), now)
        if lines.stamp is not None:  # the latest timestamp read in the file
            state.stamp = lines.stamp[1]
            state.has_stamp = True
        if chunk.continued and max(pos, limit) < size:
            start = max(pos, limit)
            state.long = long_line(chunk.first_lineno + chunk.nlines)
            self._piece(path, state, data[start:], first=True, final=False, now=now, by=by)

    def _scan(self, path: str, state: FileState, lines: _Lines, span: tuple[int, int, int], now: float) -> None:
        """Count the complete lines in ``data[pos:limit]``, the first of them numbered ``lineno``.

        The needles of the whole span are found in one pass; lines without one are skipped without being looked
        at, unless a traceback block is open in the file (its frames hold no needle), then every line is fed but
        the block's frame lines, which the incident tracker reads in bulk.
        """
        pos, limit, lineno = span
        incidents = self._incidents
        if self._matcher.every_line:  # a kind without literals: every line must be tried
            while pos < limit:
                end, nxt = lines.end(pos, limit)
                self._line(path, state, lines, (pos, end, lineno), now, None)
                lineno += 1
                pos = nxt
            return
        data = lines.data
        cr = lines.cr
        found = self._matcher.hits(data, pos, limit)
        n = len(found)
        i = 0
        open_paths = incidents.open_paths  # wants_every_line(path), without a call per line
        while pos < limit:
            if path in open_paths:
                if not cr:  # a traceback's frames, up to the next line with a needle, in bulk
                    stop = found[i][0] if i < n else limit
                    after, lineno = incidents.skip_frames(path, data, (pos, stop, lineno))
                    if after != pos:
                        pos = after
                        continue
                end, nxt = lines.end(pos, limit)
                j = i
                while j < n and found[j][0] < end:
                    j += 1
                self._line(path, state, lines, (pos, end, lineno), now, found[i:j])
                i = j
                lineno += 1
                pos = nxt
                continue
            if i >= n:
                return
            hit = found[i][0]
            if cr:
                start = lines.start(hit, pos)
                lineno += lines.count(pos, start)
                end, nxt = lines.end(hit, limit)
            else:  # the common case, spelt out: this loop runs once per candidate line
                start = data.rfind(b"\n", pos, hit) + 1 or pos
                lineno += data.count(b"\n", pos, start)
                end = data.find(b"\n", hit, limit)
                if end < 0:
                    end = nxt = limit
                else:
                    nxt = end + 1
            j = i + 1
            while j < n and found[j][0] < end:
                j += 1
            names = self._line(path, state, lines, (start, end, lineno), now, found[i:j])
            lineno += 1
            if names and self._redrawn.issuperset(names) and path not in open_paths:
                first = (start, end, found[i:j], names)
                pos, lineno, j = self._redraws(path, lines, first, (nxt, limit, lineno), found, j)
            else:
                pos = nxt
            i = j

    def _redraws(
        self,
        path: str,
        lines: _Lines,
        first: tuple[int, int, list[tuple[int, bytes]], list[str]],
        span: tuple[int, int, int],
        found: list[tuple[int, bytes]],
        i: int,
    ) -> tuple[int, int, int]:
        """After a bar's line ``first`` (its bounds, needles and the kinds it counted as: ``_progress`` and
        ``_steplike`` only), pass over the lines that redraw it (progress_shape.redraw_key: the same bar, its
        counter never going back) with the same needles: all but the last are counted here in bulk, as the first was
        (the same kinds, no time, nothing handed to subscribers; the log view's tags as one by one); the last is
        left to be counted as any line, so a subscriber sees a run of redraws by its first and last lines, whose
        times and counters are the run's. Returns where to go on: the last redraw's start, its number, its first
        needle (or ``span``'s start and number where there is no run)."""
        pos, limit, lineno = span
        data = lines.data
        layout = redraw_layout(data, first[0], first[1])
        if layout is None:
            return pos, lineno, i
        key, counter, ns, ne, ts, te = layout
        mask = self._matcher.needle_mask(first[2])
        prev = data[first[0] : first[1]]
        prev_zero = prev.translate(_DIGITS_AS_ZERO)
        n = len(found)
        q, k, run = pos, i, 0
        last = (pos, i)
        while q < limit:
            end, nxt = lines.end(q, limit)
            j = k
            while j < n and found[j][0] < end:
                j += 1
            if j == k:
                break
            line = data[q:end]
            # the quick test first, as the compiled path's digits_moved: the line before with only digits moved,
            # none of "/TOTAL" (then the key and the needles are the same); else the key and the needles
            if (
                self._digitless
                and len(line) == len(prev)
                and line[ts:te] == prev[ts:te]
                and line.translate(_DIGITS_AS_ZERO) == prev_zero
            ):
                moved = int(line[ns:ne]) if ne > ns else -1
            else:
                layout = redraw_layout(data, q, end)
                if layout is None or layout[0] != key or self._matcher.needle_mask(found[k:j]) != mask:
                    break
                _, moved, ns, ne, ts, te = layout
                prev_zero = line.translate(_DIGITS_AS_ZERO)
            if moved < counter:
                break
            counter, prev = moved, line
            last = (q, k)
            run += 1
            q, k = nxt, j
        if run < 2:
            return pos, lineno, i
        skipped = run - 1
        names = first[3]
        counts = self._counts
        state = counts.file(path)
        for name in names:
            counts.bulk(counts.index[name], state, lineno, skipped)  # one tag per run
        return last[0], lineno + skipped, last[1]

    def _line(
        self,
        path: str,
        state: FileState,
        lines: _Lines,
        span: tuple[int, int, int],
        now: float,
        hits: list[tuple[int, bytes]] | None,
    ) -> list[str]:
        """One line ``data[start:end]`` numbered ``lineno``: incidents see it, then each kind it matches counts.

        ``hits`` are the needles found in the line (None: try every kind). Returns the kinds it counted as."""
        start, end, lineno = span
        raw = lines.data[start:end]
        text, tag, body = prepare(raw)
        kinds = self._matcher.match_raw(raw, body) if hits is None else self._matcher.match_hits(body, hits)
        t: Span | None = None  # the line's time, read at most once, and only if someone needs it
        incidents = self._incidents
        if path in incidents.open_paths or HEADER_WORD in body:  # else incidents.line would change nothing
            stamp: list[Span] = []

            def when() -> Span:
                if not stamp:
                    stamp.append(lines.span(start, text, now))
                return stamp[0]

            incidents.line(path, tag, body, lineno, when)
            if stamp:
                t = stamp[0]
        if not kinds:
            return []
        names = [kinds[0].name] if len(kinds) == 1 else [k.name for k in kinds]  # mostly one
        if BANNER in names and self._counts.restarts(state, RESTART in names):
            names.append(RESTART)
        evidence = shown(text)
        if t is None:
            t = lines.span(start, text, now)
        for name in names:
            self._count(name, state, lineno, t, evidence, now)
        return names

    def _piece(
        self, path: str, state: FileState, piece: bytes, *, first: bool, final: bool, now: float, by: float | None
    ) -> None:
        """One piece of an over-long line: matched with the end of the previous piece, counted once per kind."""
        long = state.long
        if long is None:
            return
        if len(long.head) < _HEAD:
            long.head += piece[: _HEAD - len(long.head)]
        window = long.tail + piece
        text, tag, body = prepare(window)
        if first:  # prefixes exist only at the start of a line; incidents see the line once, by its head
            self._incidents.line(path, tag, body[:_HEAD], long.lineno, lambda: self._long_time(state, now, by))
        else:
            body = text
        counts = self._counts
        found = [i for i in (counts.index[k.name] for k in self._matcher.match(body)) if counts.long_new(state, i)]
        if found:
            (t, bound), evidence = self._long_time(state, now, by), self._long_shown(long)
            for i in found:
                counts.count_long(i, state, t, 0.0 if bound is None else bound, bound is not None, evidence, now)
        long.tail = window[-_OVERLAP:]
        if final:
            state.long = None

    def _long_time(self, state: FileState, now: float, by: float | None) -> Span:
        """The (time, by) of the over-long line ``state`` is receiving (``counting.Counts.long_time``)."""
        long = state.long
        assert long is not None
        if not long.has_span:
            self._counts.long_time(state, prepare(long.head)[0], now, 0.0 if by is None else by, by is not None)
        return (long.span_t, long.span_by if long.span_has_by else None)

    @staticmethod
    def _long_shown(long: LongLine) -> str:
        return shown(prepare(long.head)[0])

    def _count(self, name: str, state: FileState, lineno: int, span: Span, evidence: str, now: float) -> None:
        """One occurrence of ``name``: counted by the rules both counters share (``counting.Counts.count``)."""
        t, by = span
        self._counts.count(self._counts.index[name], state, lineno, t, 0.0 if by is None else by, by is not None,
                           evidence, now)  # fmt: skip

    # ------------------------------------------------------------------------------------------------ reading
    def summaries(self) -> dict[str, EventSummary]:
        """Every reported kind, zero counts included, keyed by name."""
        return self._counts.summaries(self._clock.time())

    def streaks(self, kind: str) -> dict[str, int]:
        """Per-file current streak of ``kind``: occurrences since the last progress event in that file."""
        return self._counts.streaks(kind)

    def incidents(self) -> tuple[Incident, ...]:
        return self._incidents.incidents()

    def dropped_incidents(self) -> tuple[IncidentTally, ...]:
        return self._incidents.dropped()


# ------------------------------------------------------------------------------------------------ the choice
_core = event_path()
NATIVE = _core is not None  # whether the compiled event path is there (the benchmarks say which one ran)


class EventCounter:
    """Counts event kinds in chunks from the tailer and groups incidents: the compiled counter where it is built and
    can take these kinds, else :class:`PyEventCounter` (``native=False`` asks for it). Both give the same answers."""

    def __init__(
        self,
        kinds: Sequence[EventKind],
        clock: Clock,
        *,
        recent_lines: int = 20,
        rate_window_s: float = 300.0,
        storm_threshold: int = 5,
        storm_window_s: float = 60.0,
        native: bool = True,
    ) -> None:
        unique = list({k.name: k for k in kinds}.values())
        impl: Any = None
        if native and _core is not None:
            matcher = Matcher(unique)
            needles = matcher.needle_kinds()
            if needles is not None and len(unique) <= 64:
                impl = _core.Core(
                    unique,
                    clock,
                    [n for n, _ in needles],
                    [sum(1 << i for i in ks) for _, ks in needles],
                    recent_lines=recent_lines,
                    rate_window_s=rate_window_s,
                    storm_threshold=storm_threshold,
                    storm_window_s=storm_window_s,
                )
        if impl is None:
            impl = PyEventCounter(
                unique,
                clock,
                recent_lines=recent_lines,
                rate_window_s=rate_window_s,
                storm_threshold=storm_threshold,
                storm_window_s=storm_window_s,
            )
        self.native = not isinstance(impl, PyEventCounter)
        self._impl = impl
        self._kinds = tuple(unique)
        # The implementation's own methods, called without a frame of this class in between.
        self.feed: Callable[[Chunk], None] = impl.feed
        self.subscribe: Callable[[str, Callable[[LogLine], None]], None] = impl.subscribe
        self.tag_into: Callable[[list[Tag], int], None] = impl.tag_into
        self.summaries: Callable[[], dict[str, EventSummary]] = impl.summaries
        self.streaks: Callable[[str], dict[str, int]] = impl.streaks
        self.incidents: Callable[[], tuple[Incident, ...]] = impl.incidents
        self.dropped_incidents: Callable[[], tuple[IncidentTally, ...]] = impl.dropped_incidents
        self.open_files: Callable[[], dict[str, set[str]]] = impl.open_files
        self.errors: deque[str] = impl.errors

    @property
    def kinds(self) -> tuple[EventKind, ...]:
        return self._kinds
