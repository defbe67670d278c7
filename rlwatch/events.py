"""Counting events in log chunks: totals, per-file counts, times, rates, streaks, evidence lines, incidents.

The counter never splits a chunk into lines. It asks the matcher for the next literal hit, works out that one
line's bounds and number from the bytes around it, and jumps past it; only while a traceback block is open in a
file does it walk that file line by line (its frames match no literal). A line counts at most once per kind.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlwatch.clock import Clock
from rlwatch.incidents import EVENT_KINDS, HEADER_WORD, IncidentTracker
from rlwatch.patterns import EventKind, Matcher, build_kinds, prepare
from rlwatch.state import EventSummary, Incident, LogLine
from rlwatch.tailer import Chunk
from rlwatch.textsafe import clean_line, strip_ansi
from rlwatch.timestamps import HMS_BYTES, parse_time

__all__ = ["DISPLAY_CHARS", "EventCounter", "EventKind", "build_kinds"]

DISPLAY_CHARS = 2000  # evidence lines are capped: a multi-megabyte line is shown by its start
_TERMINATOR = re.compile(rb"\r\n?|\n")
# An over-long line arrives in pieces; this much of the previous piece is searched again with the next one, so a
# match that straddles two pieces is still found.
_OVERLAP = 4096
_HEAD = 8192
# How far back a line without a timestamp looks for one in the same chunk before it settles for the latest one
# already known (a traceback's header sits right under the logged error; a stats row a few lines under its step).
_LOOK_BACK_LINES = 3
_LOOK_BACK_BYTES = 8 * 1024
_TIME_SEARCH_BYTES = 400  # a timestamp sits near the start of a line, behind colour codes and a prefix


@dataclass(slots=True)
class _Stats:
    """What is kept of one kind. An internal kind keeps only its count and streaks (``summaries`` skips it)."""

    count: int = 0
    first: float | None = None
    last: float | None = None
    files: dict[str, int] = field(default_factory=dict)
    streaks: dict[str, int] = field(default_factory=dict)
    buckets: dict[int, int] = field(default_factory=dict)  # whole seconds -> events, for the rate window
    recent: deque[LogLine] = field(default_factory=deque)


@dataclass(slots=True)
class _LongLine:
    """An over-long line whose pieces are still arriving."""

    lineno: int
    head: bytes = b""  # the start of the line (up to _HEAD bytes): its evidence text, time and prefix
    tail: bytes = b""
    seen: set[str] = field(default_factory=set)
    time: float | None = None


@dataclass(slots=True)
class _File:
    banners: int = 0
    long: _LongLine | None = None


def _shown(text: str) -> str:
    """The evidence text of a line: capped, with every control sequence removed."""
    text = text[: DISPLAY_CHARS * 2]
    return (text if text.isprintable() else clean_line(text))[:DISPLAY_CHARS]


class _Lines:
    """Line arithmetic over one chunk, honouring universal newlines without splitting it."""

    __slots__ = ("cr", "data", "stamp")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.cr = b"\r" in data
        self.stamp: tuple[int, float] | None = None  # (line start, time) of the latest line known to have a time

    def time_of(self, start: int, text: str, now: float) -> float:
        """The time of the line at ``start``: its own timestamp, else that of the nearest earlier line in this
        chunk that has one (lines read together were written together: in a backlog that is the only honest
        estimate, live it is within one poll), else ``now``."""
        own = parse_time(text, now) if ":" in text else None  # every timestamp format holds a colon
        if own is not None:
            self.stamp = (start, own)
            return own
        floor = max(0, start - _LOOK_BACK_BYTES)
        known = self.stamp
        if known is not None and known[0] < start:
            floor = max(floor, known[0] + 1)
        data = self.data
        cr = self.cr
        if not cr:
            # A timestamp holds a colon. Where the lines looked at hold none (a stats row among rules and rows),
            # settle at once: finding where they begin takes three memrchr calls, checking them one more.
            top = start
            for _ in range(_LOOK_BACK_LINES):
                if top <= floor:
                    break
                top = data.rfind(b"\n", floor, top - 1) + 1 or floor
            if data.find(b":", top, start) < 0:
                return known[1] if known is not None and known[0] < start else now
        pos = start
        for _ in range(_LOOK_BACK_LINES):
            if pos <= floor:
                break
            end = pos - 1  # the previous line's terminator, one byte or "\r\n"
            if cr and end > floor and data[end - 1 : end + 1] == b"\r\n":
                end -= 1
            begin = self.start(end, floor) if cr else data.rfind(b"\n", floor, end) + 1 or floor
            head_end = min(end, begin + _TIME_SEARCH_BYTES)
            # Every timestamp holds a colon: most lines without a time (table rows, frames) are passed by memchr.
            if data.find(b":", begin, head_end) >= 0 and HMS_BYTES.search(data, begin, head_end):
                found = parse_time(strip_ansi(data[begin:end].decode("utf-8", "replace")), now)
                if found is not None:
                    self.stamp = (begin, found)
                    return found
            pos = begin
        if known is not None and known[0] < start:
            return known[1]
        return now

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


class EventCounter:
    """Counts event kinds in chunks from the tailer and groups incidents.

    Times are the lines' own timestamps when they carry one, else the timestamp of the nearest earlier line of
    the same chunk, else the clock's wall time at feed. Rates use the wall clock too, since they compare with
    line times.
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
        self._recent_lines = max(1, recent_lines)
        self._window = max(1.0, float(rate_window_s))
        self._stats = {name: _Stats(recent=deque(maxlen=self._recent_lines)) for name in self._kinds}
        self._subs: dict[str, list[Callable[[LogLine], None]]] = {}
        self._files: dict[str, _File] = {}
        self._incidents = IncidentTracker(storm_threshold=storm_threshold, storm_window_s=storm_window_s)
        self._progress = frozenset(k.name for k in self._kinds.values() if k.progress)
        # Internal kinds are never reported: their times, files, rate and evidence are not kept (streaks are, since
        # a policy may name one); subscribers still get every line.
        self._internal = frozenset(k.name for k in self._kinds.values() if k.internal)
        self._streaking: dict[str, set[str]] = {}  # path -> kinds with a streak going in it
        self.errors: deque[str] = deque(maxlen=20)

    @property
    def kinds(self) -> tuple[EventKind, ...]:
        return tuple(self._kinds.values())

    def subscribe(self, kind: str, callback: Callable[[LogLine], None]) -> None:
        """Call ``callback`` with every future occurrence of ``kind`` (internal kinds included)."""
        if kind not in self._kinds:
            raise KeyError(f"unknown event kind {kind!r}")
        self._subs.setdefault(kind, []).append(callback)

    # ------------------------------------------------------------------------------------------------ feeding
    def feed(self, chunk: Chunk) -> None:
        """Count everything in one chunk. Arbitrary bytes are fine: nothing here raises on content."""
        data = chunk.data
        path = chunk.path
        state = self._files.setdefault(path, _File())
        now = self._clock.time()
        lines = _Lines(data)
        size = len(data)
        pos = 0
        lineno = chunk.first_lineno
        if chunk.continues_line:
            end, nxt = lines.end(0, size)
            final = end < size or not chunk.continued
            first = state.long is None or state.long.lineno != lineno
            if first:  # its start was never seen (counting began mid-line): count from here
                state.long = _LongLine(lineno=lineno)
            self._piece(path, state, data[:end], first=first, final=final, now=now)
            if not final:
                return
            pos = nxt
            lineno += 1
        else:
            state.long = None  # an unfinished line whose rest never came
        limit = lines.last_start() if chunk.continued else size
        if pos < limit:
            self._scan(path, state, lines, (pos, limit, lineno), now)
        if chunk.continued and max(pos, limit) < size:
            start = max(pos, limit)
            state.long = _LongLine(lineno=chunk.first_lineno + chunk.nlines)
            self._piece(path, state, data[start:], first=True, final=False, now=now)

    def _scan(self, path: str, state: _File, lines: _Lines, span: tuple[int, int, int], now: float) -> None:
        """Count the complete lines in ``data[pos:limit]``, the first of them numbered ``lineno``.

        The needles of the whole span are found in one pass; lines without one are skipped without being looked
        at, unless a traceback block is open in the file (its frames hold no needle), then every line is fed.
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
            self._line(path, state, lines, (start, end, lineno), now, found[i:j])
            i = j
            lineno += 1
            pos = nxt

    def _line(
        self,
        path: str,
        state: _File,
        lines: _Lines,
        span: tuple[int, int, int],
        now: float,
        hits: list[tuple[int, bytes]] | None,
    ) -> None:
        """One line ``data[start:end]`` numbered ``lineno``: incidents see it, then each kind it matches counts.

        ``hits`` are the needles found in the line (None: try every kind)."""
        start, end, lineno = span
        raw = lines.data[start:end]
        text, tag, body = prepare(raw)
        kinds = self._matcher.match_raw(raw, body) if hits is None else self._matcher.match_hits(body, hits)
        t: float | None = None  # the line's time, read at most once, and only if someone needs it
        incidents = self._incidents
        if path in incidents.open_paths or HEADER_WORD in body:  # else incidents.line would change nothing
            stamp: list[float] = []

            def when() -> float:
                if not stamp:
                    stamp.append(lines.time_of(start, text, now))
                return stamp[0]

            incidents.line(path, tag, body, lineno, when)
            if stamp:
                t = stamp[0]
        if not kinds:
            return
        names = [kinds[0].name] if len(kinds) == 1 else [k.name for k in kinds]  # mostly one
        if "_banner" in names:
            state.banners += 1
            # A second start banner in the same file is the process starting again.
            if state.banners > 1 and "restart" in self._kinds and "restart" not in names:
                names.append("restart")
        shown = _shown(text)
        if t is None:
            t = lines.time_of(start, text, now)
        for name in names:
            self._count(name, path, lineno, t, shown, now)

    def _piece(self, path: str, state: _File, piece: bytes, *, first: bool, final: bool, now: float) -> None:
        """One piece of an over-long line: matched with the end of the previous piece, counted once per kind."""
        long = state.long
        if long is None:
            return
        if len(long.head) < _HEAD:
            long.head += piece[: _HEAD - len(long.head)]
        window = long.tail + piece
        text, tag, body = prepare(window)
        if first:  # prefixes exist only at the start of a line; incidents see the line once, by its head
            self._incidents.line(path, tag, body[:_HEAD], long.lineno, lambda: self._long_time(long, now))
        else:
            body = text
        found = [k.name for k in self._matcher.match(body) if k.name not in long.seen]
        if found:
            when, shown = self._long_time(long, now), self._long_shown(long)
            for name in found:
                long.seen.add(name)
                self._count(name, path, long.lineno, when, shown, now)
        long.tail = window[-_OVERLAP:]
        if final:
            state.long = None

    @staticmethod
    def _long_time(long: _LongLine, now: float) -> float:
        if long.time is None:
            text = prepare(long.head)[0]
            parsed = parse_time(text, now)
            long.time = now if parsed is None else parsed
        return long.time

    @staticmethod
    def _long_shown(long: _LongLine) -> str:
        return _shown(prepare(long.head)[0])

    def _count(self, name: str, path: str, lineno: int, when: float, shown: str, now: float) -> None:
        """``now`` is the clock read once per feed: a backlog counts millions of events, each needing it."""
        st = self._stats[name]
        st.count += 1
        if name in self._progress:
            streaking = self._streaking.pop(path, None)
            if streaking:
                stats = self._stats
                for other in streaking:
                    stats[other].streaks[path] = 0
        else:
            streaks = st.streaks
            streaks[path] = streaks.get(path, 0) + 1
            self._streaking.setdefault(path, set()).add(name)
        subs = self._subs.get(name)
        if name in self._internal:
            line = LogLine(path, lineno, shown, when) if subs else None
        else:
            files = st.files
            files[path] = files.get(path, 0) + 1
            first = st.first
            if first is None or when < first:  # min() and max() without their call overhead, with their semantics
                st.first = when
            last = st.last
            if last is None or when > last:
                st.last = when
            second = int(when)
            if second >= now - self._window:
                st.buckets[second] = st.buckets.get(second, 0) + 1
                if len(st.buckets) > 2 * self._window + 16:
                    self._prune(st, now)
            line = LogLine(path, lineno, shown, when)
            st.recent.append(line)
        if name in EVENT_KINDS:
            self._incidents.event(name, path, lineno, when, shown)
        if subs:
            assert line is not None
            for callback in subs:
                try:
                    callback(line)
                except Exception as exc:  # a subscriber's bug must not stop the counting
                    self.errors.append(f"subscriber of {name} failed: {type(exc).__name__}: {exc}")

    def _prune(self, st: _Stats, now: float) -> None:
        floor = int(now - self._window)
        for second in [s for s in st.buckets if s < floor]:
            del st.buckets[second]

    # ------------------------------------------------------------------------------------------------ reading
    def summaries(self) -> dict[str, EventSummary]:
        """Every reported kind, zero counts included, keyed by name."""
        now = self._clock.time()
        out: dict[str, EventSummary] = {}
        for name, kind in self._kinds.items():
            if kind.internal:
                continue
            st = self._stats[name]
            self._prune(st, now)
            in_window = sum(n for s, n in st.buckets.items() if s >= now - self._window)
            out[name] = EventSummary(
                kind=name,
                severity=kind.severity,
                count=st.count,
                first=st.first,
                last=st.last,
                rate_per_min=in_window * 60.0 / self._window,
                streak=0 if kind.progress else max(st.streaks.values(), default=0),
                files=dict(st.files),
                recent=tuple(st.recent),
            )
        return out

    def streaks(self, kind: str) -> dict[str, int]:
        """Per-file current streak of ``kind``: occurrences since the last progress event in that file."""
        st = self._stats.get(kind)
        return {p: n for p, n in st.streaks.items() if n} if st else {}

    def incidents(self) -> tuple[Incident, ...]:
        return self._incidents.incidents()
