"""The log view's newest lines: what the followed logs said last, each tagged with the event kinds it matched.

The engine counts every chunk it reads, but a log view can only ever show the newest :data:`RECENT_LINES` lines:
:class:`RecentLines` keeps those, raw until a view asks for them (:meth:`RecentLines.after`), numbered so a view
asks only for what it has not shown. The engine hands it each counted chunk with the tags its lines got.

It has a lock of its own, held only to keep or hand out lines, never while a chunk is counted: the dashboard asks
for lines on its event loop, and behind the engine's lock it waited for a whole poll of backlog (0.6 s of a dense
log), a frozen screen, because a thread that releases a lock and takes it again at once keeps it from waiters.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Iterable

from rlwatch.common.state import TaggedLine
from rlwatch.common.textsafe import clean_line
from rlwatch.logs.events import Tag
from rlwatch.logs.tailer import Chunk

_NEWLINES = re.compile(rb"\r\n|\r|\n")
RECENT_LINES = 5000


class RecentLines:
    """The newest RECENT_LINES lines of the logs, for the log view; each gets a sequence number that only grows."""

    def __init__(self) -> None:
        self._recent: deque[TaggedLine] = deque(maxlen=RECENT_LINES)
        self._pending: deque[tuple[Chunk, Iterable[Tag]]] = deque()  # raw, not yet in _recent
        self._pending_lines = 0
        self._seq = 0
        self._lock = threading.Lock()

    def add(self, chunk: Chunk, tags_seen: Iterable[Tag]) -> None:
        """Keep a chunk, raw, with the ``(path, line number, kind)`` tags its lines got when they were counted
        (``tags_seen`` is kept as it is: the caller hands over a list it no longer changes); decode both only when a
        view asks (:meth:`after`).

        Only the newest RECENT_LINES lines can ever be shown, so while a backlog streams in, older pending chunks
        are dropped undecoded, and their tags unread: cleaning every line of a 1 GiB log just to throw it away was
        half of `report`'s time, and reading a tag per event of a storm was Python per event.
        """
        with self._lock:
            self._pending.append((chunk, tags_seen))
            self._pending_lines += chunk.nlines
            while len(self._pending) > 1 and self._pending_lines - self._pending[0][0].nlines >= RECENT_LINES:
                self._pending_lines -= self._pending.popleft()[0].nlines

    def after(self, seq: int, limit: int = 2000) -> list[TaggedLine]:
        """Lines with a sequence number greater than ``seq``, oldest first, at most ``limit`` of the newest."""
        out: list[TaggedLine] = []
        with self._lock:
            self._flush()
            for line in reversed(self._recent):  # seqs only grow: walk back from the newest, stop at the old
                if line.seq <= seq or len(out) == limit:
                    break
                out.append(line)
        out.reverse()
        return out

    def _flush(self) -> None:
        while self._pending:
            chunk, tags_seen = self._pending.popleft()
            first_kept = chunk.first_lineno + max(0, chunk.nlines - RECENT_LINES)
            tags: dict[int, set[str]] = {}
            for path, lineno, kind in tags_seen:
                if path != chunk.path:
                    continue
                if isinstance(lineno, range):  # a run of a bar's redraws, tagged as one (events.Tag)
                    for n in lineno[max(0, first_kept - lineno.start) :]:
                        tags.setdefault(n, set()).add(kind)
                elif lineno >= first_kept:
                    tags.setdefault(lineno, set()).add(kind)
            self._remember(chunk, tags)
        self._pending_lines = 0

    def _remember(self, chunk: Chunk, tags: dict[int, set[str]]) -> None:
        """Keep the last lines of a chunk for the log view, tagged with the kinds they matched."""
        data = chunk.data
        if chunk.nlines > RECENT_LINES:
            # Find the start of the kept tail without splitting the whole chunk. The last "\n" and "\r" before the
            # cut are remembered and searched for again only once passed: a chunk without any "\r" would otherwise
            # be scanned to its start once per kept line (a 100 MB/s log then fell minutes behind).
            cut = len(data)
            last_nl = data.rfind(b"\n", 0, cut - 1)
            last_cr = data.rfind(b"\r", 0, cut - 1)
            for _ in range(RECENT_LINES + 1):
                nl = max(last_nl, last_cr)
                if nl < 0:
                    break
                cut = nl
                if last_nl >= cut - 1:
                    last_nl = data.rfind(b"\n", 0, cut - 1)
                if last_cr >= cut - 1:
                    last_cr = data.rfind(b"\r", 0, cut - 1)
            data = data[cut + 1 :] if cut < len(data) else data
        pieces = _NEWLINES.split(data)
        if pieces and pieces[-1] == b"":
            pieces.pop()
        lineno = chunk.first_lineno + chunk.nlines - len(pieces)
        for raw in pieces:
            self._seq += 1
            kinds = frozenset(tags.get(lineno, ()))
            text = clean_line(raw[:4000].decode("utf-8", "replace"))
            self._recent.append(TaggedLine(self._seq, chunk.path, lineno, text, kinds))
            lineno += 1
