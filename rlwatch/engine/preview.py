"""Diagnosis first: the newest part of each big backlog is counted before the rest.

After an incident night a log holds gigabytes. Read from its start, the diagnosis of what is wrong *now* (the last
exception and its root cause, streaks, the step) would come only once the whole file is read: a minute per GiB of a
log full of tracebacks. So when the log loop starts, each followed file whose unread backlog exceeds
:data:`MIN_BACKLOG` has its newest :data:`TAIL_BYTES` counted first by a second, fresh counter and training tracker
(a :class:`Counting`, wired as the engine wires its own), and while the main count reads the backlog from its start
the snapshot takes from the preview what is *now*:

* per kind: the count is the main count's plus the preview's (they have read disjoint parts: an exact lower bound,
  never more than the file holds; once the main count reaches a preview's first line, that file's figure stays
  where it was until the main count passes it, so a count never goes down); the first time is the main count's;
  the last time, evidence lines, streak and rate are the preview's;
* incidents: the main count's from before each preview, then the preview's;
* training: the preview's, once it has seen a step.

The header says the backlog is being read and how far, so totals are not taken for final. The preview is dropped
when the main count has read past the end of every previewed part; from then on everything is the main count's,
exactly as without a preview. ``report`` answers once everything is read (at a terminal it shows the preview's
diagnosis on stderr first).

The preview does not wait for the lines above it to be counted (:class:`rlwatch.logs.linecount.PrefixCount`, in
child processes on other cores): a 2 GiB prefix takes a fraction of a second to count from the page cache but
seconds from disk, and a training pod short of memory has little page cache. It waits a moment (``first_wait``),
which from the page cache is enough; after that its lines are numbered from :data:`rlwatch.common.state.UNCOUNTED`
until the count answers, which every view shows as "?" and never as a number. Once every count has answered, or
the main count has reached a tail and so numbered it itself, the tails are counted again with their true numbers
and that count replaces the first: the same lines through the same code, so everything but the line numbers is as
it was. Every line number the preview shows is exact or "?".
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from rlwatch.common.state import UNCOUNTED, EventSummary, Incident, LearningState, TrainingState
from rlwatch.logs.events import EventCounter
from rlwatch.logs.incidents import MAX_INCIDENTS
from rlwatch.logs.learning import LearningTracker
from rlwatch.logs.linecount import PrefixCount
from rlwatch.logs.newlines import complete_end, count_lines
from rlwatch.logs.tailer import Backlog, Chunk
from rlwatch.logs.training import TrainingTracker

__all__ = ["MIN_BACKLOG", "TAIL_BYTES", "Counting", "TailPreview"]

MIN_BACKLOG = 16 << 20  # a smaller backlog is read whole in about a second: no preview
TAIL_BYTES = 2 << 20  # the newest part counted first: 0.2 s of the densest log (20 000 lines), an hour of a calm one


@dataclass
class Counting:
    """One counter with what listens to it: the engine has one for the whole logs, a preview one for their ends."""

    counter: EventCounter
    training: TrainingTracker
    starts: dict[str, deque[float]] = field(default_factory=dict)  # role -> times its start banner was logged
    learning: LearningTracker | None = None  # the learning metrics (loss, reward, …) the count has seen


@dataclass
class _Tail:
    path: str
    start: int  # offset of its first line
    end: int  # offset after its last complete line
    data: bytes
    mtime: float
    lines_before: PrefixCount
    nlines: int
    first_lineno: int | None = None  # known once the lines before it are counted
    frozen: dict[str, int] | None = None  # per kind, the merged count when the main count reached it
    frozen_incidents: tuple[Incident, ...] = ()  # the main count's incidents in its file when it reached it


class TailPreview:
    """The newest part of each big backlog, counted ahead of the rest (see the module's doc)."""

    def __init__(
        self,
        make: Callable[[], Counting],
        tails: Sequence[_Tail],
        clock_time: Callable[[], float],
        tail_bytes: int,
        first_wait: float = 0.0,
    ) -> None:
        """Counts the tails before it returns: after ``first_wait`` seconds at most for their line counts."""
        self.tail_bytes = tail_bytes
        self._make = make
        self._tails = {t.path: t for t in tails}
        self._time = clock_time
        self.error: str | None = None
        self.numbered = False  # every tail counted with its true line numbers
        self.wait(first_wait)
        self._take_answers()
        self.counting = self._count()

    @property
    def ready(self) -> bool:
        """There is something to show (a tail was counted, with its line numbers or without)."""
        return bool(self._tails)

    @classmethod
    def plan(
        cls,
        backlogs: Sequence[Backlog],
        make: Callable[[], Counting],
        clock_time: Callable[[], float],
        *,
        min_backlog: int = MIN_BACKLOG,
        tail_bytes: int = TAIL_BYTES,
        first_wait: float = 0.0,
    ) -> TailPreview | None:
        """A preview of the big backlogs among ``backlogs``, counted; None when none is big. Their line counts are
        started first, and waited for up to ``first_wait`` seconds: a count that answers by then saves counting
        the tails twice."""
        tails = [t for b in backlogs if b.end - b.offset > min_backlog and (t := _read_tail(b, tail_bytes))]
        return cls(make, tails, clock_time, tail_bytes, first_wait) if tails else None

    @property
    def described(self) -> str:
        """What the preview is, for the header and the stream: "now from the newest 2.0 MiB of trainer.log"."""
        names = ", ".join(os.path.basename(p) for p in self._tails)
        counting = "" if self.numbered else " (its line numbers still being counted)"
        return f"now from the newest {self.tail_bytes / 2**20:.1f} MiB of {names}{counting}"

    def _count(self) -> Counting:
        """Every tail counted by a fresh counter and tracker, numbered truly where known, else from UNCOUNTED."""
        counting = self._make()
        for tail in self._tails.values():
            first = UNCOUNTED + 1 if tail.first_lineno is None else tail.first_lineno
            counting.counter.feed(Chunk(tail.path, tail.data, first, tail.nlines, backlog_mtime=tail.mtime))
        counting.training.on_any_line(self._time())
        self.numbered = all(t.first_lineno is not None for t in self._tails.values())
        if self.numbered:
            for tail in self._tails.values():
                tail.data = b""  # counted for good
        return counting

    # ------------------------------------------------------------------------------------------- the log loop
    def step(self) -> bool:
        """Take the line counts that have answered; True when what the preview shows changed: every tail's line
        numbers are known and it was counted again with them, or a tail was left out (its line numbers cannot be
        known: the file was replaced) and the rest was counted again without it."""
        if self.numbered:
            return False
        if self._take_answers() or all(t.first_lineno is not None for t in self._tails.values()):
            self.counting = self._count()
            return True
        return False

    def _take_answers(self) -> bool:
        """Number the tails whose line counts answered; True when one was left out (its count failed)."""
        dropped = False
        for tail in list(self._tails.values()):
            if tail.first_lineno is not None:
                continue
            before = tail.lines_before.result()
            if before is not None:
                tail.first_lineno = before + 1
            elif tail.lines_before.error is not None:
                self.error = tail.lines_before.error
                del self._tails[tail.path]
                dropped = True
        return dropped

    @property
    def empty(self) -> bool:
        """Every tail was left out (its line numbers could not be known): nothing to show, ever."""
        return not self._tails

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the line counts (then :meth:`step` takes them). The log loop waits
        here once, after the first look is out: the counts have the cores meanwhile, and exact line numbers for the
        diagnosis of now are worth more than the first megabytes of last night."""
        deadline = time.monotonic() + timeout
        for tail in list(self._tails.values()):
            if tail.first_lineno is None:
                tail.lines_before.wait(max(0.0, deadline - time.monotonic()))

    def before_main_chunk(self, chunk: Chunk, main: EventCounter) -> None:
        """Called before the main count takes ``chunk``: when it reaches a tail's first line, freeze that file's
        merged counts, so that they stay a lower bound and never go down while the main count reads the tail."""
        tail = self._tails.get(chunk.path)
        if tail is None or tail.frozen is not None:
            return
        if tail.first_lineno is None:
            # The main count got here before the line count answered (from a cold cache, a small prefix): the
            # chunk that holds the tail's first byte numbers it. The same file: the backlog's modification time.
            at = tail.start - chunk.offset
            if chunk.offset < 0 or chunk.backlog_mtime != tail.mtime or not 0 <= at < len(chunk.data):
                return
            tail.first_lineno = chunk.first_lineno + count_lines(chunk.data[:at])
            tail.lines_before.close()
        if chunk.first_lineno + chunk.nlines <= tail.first_lineno:
            return
        mine = self.counting.counter.summaries()
        theirs = main.summaries()
        # A storm that began above the tail grows as the main count reads the tail's lines, which the preview's
        # own storm holds too: the file's incidents stay as they were here until the preview is dropped.
        tail.frozen_incidents = tuple(i for i in main.incidents() if i.path == tail.path)
        tail.frozen = {
            kind: theirs[kind].files.get(tail.path, 0) + s.files.get(tail.path, 0)
            for kind, s in mine.items()
            if kind in theirs
        }

    def done(self, read_offset: Callable[[str], int | None]) -> bool:
        """True once the main count has read past every tail (or a tail's file is no longer followed)."""
        for tail in self._tails.values():
            offset = read_offset(tail.path)
            if offset is not None and offset < tail.end:
                return False
        return True

    def close(self) -> None:
        for tail in self._tails.values():
            tail.lines_before.close()

    # ------------------------------------------------------------------------------------------------ merging
    def events(self, main: EventCounter) -> dict[str, EventSummary]:
        """Per kind, what is known so far: totals from both, what is now from the preview."""
        mine = self.counting.counter.summaries()
        out: dict[str, EventSummary] = {}
        for kind, m in main.summaries().items():
            p = mine.get(kind)
            out[kind] = m if p is None or not p.count else self._merge(kind, m, p, main)
        return out

    def _merge(self, kind: str, m: EventSummary, p: EventSummary, main: EventCounter) -> EventSummary:
        files = dict(m.files)
        for path, n in p.files.items():
            tail = self._tails.get(path)
            mine = m.files.get(path, 0)
            frozen = tail.frozen.get(kind) if tail is not None and tail.frozen is not None else None
            files[path] = mine + n if frozen is None else max(mine, frozen)
        count = m.count + sum(files[f] - m.files.get(f, 0) for f in p.files)
        # A previewed file's streak is the preview's (a lower bound when it began before the preview).
        streaks = {f: n for f, n in main.streaks(kind).items() if f not in self._tails}
        streaks.update(self.counting.counter.streaks(kind))
        approximate = m.approximate or p.approximate
        first, first_by = (m.first, m.first_by) if m.count else (p.first, p.first_by)
        if approximate and m.count and not m.approximate:
            first_by = m.first  # an exact time is its own bound
        last_by = p.last_by if p.approximate else (p.last if approximate else None)
        return replace(
            p,
            count=count,
            first=first,
            first_by=first_by if approximate else None,
            last_by=last_by,
            approximate=approximate,
            rate_per_min=max(m.rate_per_min, p.rate_per_min),
            streak=max(streaks.values(), default=0) if p.streak or m.streak else 0,  # 0 for progress kinds
            files=files,
        )

    def incidents(self, main: Sequence[Incident]) -> tuple[Incident, ...]:
        """The main count's incidents from before each previewed part (as they were when it reached the part),
        then the preview's."""
        kept = [
            i
            for i in main
            if (t := self._tails.get(i.path)) is None
            or (t.frozen is None and (t.first_lineno is None or i.lineno < t.first_lineno))
        ]
        for t in self._tails.values():
            kept += t.frozen_incidents
        merged = (*kept, *self.counting.counter.incidents())
        return merged[-MAX_INCIDENTS:]  # as many as one count keeps, the newest

    def learning(self, main: LearningState | None) -> LearningState | None:
        """The learning metrics: the preview's, once it has seen one (the newest part says what is now)."""
        mine = self.counting.learning.state() if self.counting.learning is not None else None
        return mine if mine is not None else main

    def training(self, main: TrainingState, now: float) -> TrainingState:
        mine = self.counting.training.state(now)
        return mine if mine.last_step is not None or mine.finished else main

    def starts(self, main: dict[str, deque[float]]) -> dict[str, list[float]]:
        roles = set(main) | set(self.counting.starts)
        return {r: sorted(set(main.get(r, ())) | set(self.counting.starts.get(r, ()))) for r in roles}


def _first_line_start(data: bytes) -> int:
    """Where the first whole line of ``data`` starts (0: none): after its first terminator, a "\\r\\n" taken whole
    and a "\\r" only with the next byte known, so a "\\r\\n" is never cut in two. CR-only logs (a bar redrawn in
    place) have no "\\n" at all, and are previewed too."""
    nl = data.find(b"\n")
    cr = data.find(b"\r", 0, nl if nl >= 0 else len(data))
    if cr < 0:
        return nl + 1
    if cr + 1 >= len(data):
        return 0
    return cr + 2 if data[cr + 1] == 0x0A else cr + 1


def _read_tail(backlog: Backlog, tail_bytes: int) -> _Tail | None:
    """The newest complete lines of a backlog, at most ``tail_bytes`` from a line start; None when unreadable."""
    start = max(backlog.offset, backlog.end - tail_bytes)
    try:
        fd = os.open(backlog.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != backlog.identity:
            return None  # replaced since it was opened: the tailer will see to it
        data = os.pread(fd, backlog.end - start, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    first = _first_line_start(data)
    last = complete_end(data)  # a final "\r" waits: a "\n" may follow
    if first <= 0 or last <= first:
        return None  # no whole line in it (one line longer than the part): nothing to preview
    begin = start + first
    body = data[first:last]
    return _Tail(
        backlog.path,
        begin,
        start + last,
        body,
        backlog.mtime,
        PrefixCount(backlog.path, backlog.identity, begin),
        count_lines(body),
    )
