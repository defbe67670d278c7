"""Tailing many log files by glob: backlog first, then live, across rotation, truncation and re-creation.

Each file is opened once and pinned by its inode; reads use ``pread`` at an offset kept here, so no file position
is shared and nothing depends on a watcher having seen an event. Every poll costs one ``stat`` per file plus a glob
rescan about once a second. On each poll, for each watched path:

- same inode, larger: read the new bytes, at most ``max_poll_bytes`` per file (a huge backlog streams over
  several polls, so memory stays bounded by one poll's chunks and a caller gets to refresh between polls);
- same inode, smaller than what was read, or its first bytes changed: truncated (``copytruncate``, ``> file``):
  start again at 0 with line 1;
- another inode (renamed away and re-created, or deleted and re-created): the old descriptor is drained to its end
  first, then the new file is read from 0;
- gone: the old descriptor is drained, then closed.

Chunks carry complete lines only, split as Python's universal newlines do (``\\n``, ``\\r\\n``, ``\\r``). The
unfinished last line of a file is held back until it is completed. A line ending in a bare ``\\r`` at the end of
what has been written is held too, until the next byte shows whether it is ``\\r\\n``, or until a poll finds the
file grown no further since the one that read it (a tqdm bar's last redraw, in a log that stopped there: after the
fact, or a run that stopped writing): then it is delivered, and a ``\\n`` written after all only ends the line
already delivered (it is passed over, so no empty line is counted and the numbers stay). When a file is rotated
away, deleted or truncated, its unfinished last line is delivered as a line of its own once the old content has
been drained, since it can never be completed. A line longer than ``max_line_bytes`` is delivered in pieces
(``continued`` / ``continues_line``) that keep one line number, so it is never held whole in memory.

Limits: bytes appended to a file and then removed by ``copytruncate`` before a poll read them are lost (that is
inherent in copytruncate); two rotations between two polls lose the middle file unless the glob also matches the
rotated names (then it is read as a file of its own); a truncation followed by regrowth with identical first bytes
between two polls is not noticed.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlwatch.common.globbing import glob_paths
from rlwatch.common.trust import LinkRefused, open_followed
from rlwatch.logs.newlines import complete_end, count_lines

__all__ = ["Backlog", "Chunk", "Tailer"]

_MAGIC = re.compile(r"[*?\[]")
_HEAD_BYTES = 128  # first bytes kept per file: a changed head means the file was replaced in place
_RETIRED_MAX = 64
_NUL_BLOCK = 1 << 16  # a read this long and NUL from end to end is passed over (a few stray NULs are text)
_NUL_WEIGHT = 16  # a block of NUL bytes, passed over, costs a poll's budget this many times less than text


@dataclass(frozen=True, slots=True)
class Chunk:
    """New text from one file.

    ``data`` holds complete lines, each with its terminator, numbered from ``first_lineno`` (1-based). ``nlines``
    counts the line terminators in ``data``, plus one for a final unterminated line when the file ended for good.
    An over-long line comes in pieces: every piece but the first has ``continues_line`` (its bytes up to the first
    terminator belong to the line that ``first_lineno`` numbers), every piece but the last has ``continued`` (the
    bytes after the last terminator are the start of a line that goes on in the next chunk).

    ``backlog_mtime`` tells backlog from live. None: the bytes were appended while the file was followed, so the
    time they were read is evidence of when they were written. A number: the bytes were already in the file when it
    was opened (a backlog), and this was its modification time then: none of them was written later, and the time
    they were read says nothing about when they were.
    """

    path: str
    data: bytes
    first_lineno: int
    nlines: int
    continues_line: bool = False
    continued: bool = False
    backlog_mtime: float | None = None
    offset: int = -1  # where ``data`` starts in the file (-1: not known, a chunk made elsewhere than a tailer)


@dataclass(frozen=True, slots=True)
class Backlog:
    """A followed file's backlog still to read: ``[offset, end)`` of the file ``identity`` (device, inode)."""

    path: str
    identity: tuple[int, int]
    offset: int
    end: int
    mtime: float


def _describe(exc: OSError | ValueError) -> str:
    if not isinstance(exc, OSError):
        return f"unusable path: {exc}"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EISDIR:
        return "is a directory"
    return (exc.strerror or type(exc).__name__).lower()


def _kind_error(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "is a FIFO: not tailed"
    return "not a regular file: not tailed"


class _Handle:
    """One open file, pinned by its inode, with what has been read and delivered from it."""

    __slots__ = (
        "backlog_end",
        "cr_ended",
        "dev",
        "fd",
        "head",
        "ino",
        "lineno",
        "mtime",
        "offset",
        "pending",
        "piece",
        "size",
    )

    def __init__(self, fd: int, st: os.stat_result, offset: int = 0, lineno: int = 1) -> None:
        self.fd = fd
        self.dev = st.st_dev
        self.ino = st.st_ino
        self.offset = offset  # next byte to read
        self.size = st.st_size  # size at the last look
        self.lineno = lineno  # number of the next line to start
        self.pending = b""  # the unfinished last line (read, not delivered)
        self.piece = False  # part of the pending line was delivered already
        self.cr_ended = False  # a line ending in a bare "\r" was delivered last: a "\n" next would only end it
        self.head = b""
        self.backlog_end = 0  # bytes before this offset were in the file when it was opened (see Chunk)
        self.mtime = st.st_mtime  # the file's modification time when it was opened

    @property
    def backlog(self) -> float | None:
        """The ``backlog_mtime`` of what was read up to ``offset``."""
        return self.mtime if self.offset <= self.backlog_end else None

    @property
    def key(self) -> tuple[int, int]:
        return (self.dev, self.ino)

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


@dataclass(slots=True)
class _Retired:
    """A drained file that may reappear under another name (a rotated file the glob also matches)."""

    head: bytes
    offset: int
    lineno: int


class _Watch:
    __slots__ = ("cur", "old", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.cur: _Handle | None = None
        self.old: _Handle | None = None  # renamed or deleted, still being drained


class Tailer:
    """Follows every file matching ``patterns`` (absolute globs, ``**`` allowed). Never raises on I/O errors."""

    def __init__(
        self,
        patterns: Sequence[str],
        *,
        max_line_bytes: int = 1 << 20,
        block_bytes: int = 1 << 20,
        max_poll_bytes: int = 8 << 20,
        rescan_s: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._patterns = tuple(dict.fromkeys(patterns))
        self._max_line = max(1, max_line_bytes)
        self._block = max(1, block_bytes)
        self._max_poll = max(1, max_poll_bytes)
        self._rescan_s = rescan_s
        self._monotonic = monotonic
        self._next_rescan = float("-inf")
        self._watches: dict[str, _Watch] = {}
        self._retired: OrderedDict[tuple[int, int], _Retired] = OrderedDict()
        self.errors: dict[str, str] = {}
        self.nul_skipped: dict[str, int] = {}  # path -> NUL bytes passed over (holes, zero-filled blocks)

    @property
    def files(self) -> tuple[str, ...]:
        """Paths being followed now."""
        return tuple(sorted(p for p, w in self._watches.items() if w.cur is not None or w.old is not None))

    def backlog_progress(self) -> tuple[int, int]:
        """(bytes read, bytes) of what the followed files held when they were opened: how far their backlog has
        been read, for a person waiting on a big one. Bytes written since are not part of it."""
        done = total = 0
        for watch in list(self._watches.values()):  # a copy: another thread may ask while the log loop polls
            for handle in (watch.cur, watch.old):
                if handle is not None and handle.backlog_end:
                    total += handle.backlog_end
                    done += min(handle.offset, handle.backlog_end)
        return done, total

    def follow(self, path: str) -> None:
        """Follow one more file from now on (a dead Ray actor's stderr, named once the run's logs say it died); its
        backlog is read like any other's. A path already followed is left as it is."""
        if path not in self._patterns:
            self._patterns = (*self._patterns, path)  # a new tuple: the polling thread reads the old one whole
            self._next_rescan = float("-inf")

    def discover(self) -> None:
        """Open the files the patterns match now, reading nothing yet (``poll`` reads them): so that what a
        backlog holds is known before the first bytes of it are counted."""
        self._next_rescan = self._monotonic() + self._rescan_s
        self._rescan()

    def backlogs(self) -> list[Backlog]:
        """The followed files whose backlog is still being read, each with what is left of it."""
        out: list[Backlog] = []
        for watch in list(self._watches.values()):
            handle = watch.cur
            if watch.old is None and handle is not None and handle.offset < handle.backlog_end:
                out.append(Backlog(watch.path, handle.key, handle.offset, handle.backlog_end, handle.mtime))
        return out

    def position(self, path: str) -> tuple[int, int] | None:
        """(how far the current file at ``path`` has been read, the number of the next line to start), or None."""
        watch = self._watches.get(path)
        return None if watch is None or watch.cur is None else (watch.cur.offset, watch.cur.lineno)

    def read_offset(self, path: str) -> int | None:
        """How far the current file at ``path`` has been read (None: not followed now)."""
        watch = self._watches.get(path)
        return None if watch is None or watch.cur is None else watch.cur.offset

    def close(self) -> None:
        for watch in self._watches.values():
            for handle in (watch.cur, watch.old):
                if handle is not None:
                    handle.close()
        self._watches.clear()

    # ---------------------------------------------------------------------------------------------------- poll
    def poll(self) -> list[Chunk]:
        """Everything new since the last poll, oldest first within each file."""
        chunks: list[Chunk] = []
        for watch in list(self._watches.values()):
            self._poll_watch(watch, chunks)
        now = self._monotonic()
        if now >= self._next_rescan:
            self._next_rescan = now + self._rescan_s
            for watch in self._rescan():
                self._poll_watch(watch, chunks)
        return chunks

    def _rescan(self) -> list[_Watch]:
        """New paths matching the patterns, opened (or resumed, when they are a file already read)."""
        found: list[_Watch] = []
        matched: set[str] = set()
        live = {h.key for w in self._watches.values() for h in (w.cur, w.old) if h is not None}
        for pattern in self._patterns:
            literal = _MAGIC.search(pattern) is None
            try:
                paths = [pattern] if literal else sorted(glob_paths(pattern))
            except (OSError, ValueError, RecursionError) as exc:
                self.errors[pattern] = f"cannot expand pattern: {exc}"
                continue
            matched.update(paths)
            for path in paths:
                if path in self._watches:
                    continue
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
                    self.errors[path] = _describe(exc)
                    continue
                problem = _kind_error(st.st_mode)
                if problem is not None:
                    if literal or not stat.S_ISDIR(st.st_mode):
                        self.errors[path] = problem
                    continue
                if (st.st_dev, st.st_ino) in live:
                    continue  # another name of a file already followed
                watch = _Watch(path)
                handle = self._open(path)
                if handle is None:
                    self._watches[path] = watch  # keep trying: the error may clear
                    continue
                self._place(handle, st)
                watch.cur = handle
                live.add(handle.key)
                self._watches[path] = watch
                found.append(watch)
        for path in [p for p, w in self._watches.items() if p not in matched and w.cur is None and w.old is None]:
            del self._watches[path]  # gone for good; a later rescan finds it again if it comes back
        for path in [p for p in self.errors if p not in matched and p not in self._watches and p not in self._patterns]:
            del self.errors[path]  # the troublesome path is gone
        return found

    def _place(self, handle: _Handle, st: os.stat_result) -> None:
        """Where a newly found file starts: where it was left under another name, else at 0 (its backlog)."""
        handle.head = self._pread(handle, _HEAD_BYTES, 0) or b""
        handle.backlog_end, handle.mtime = st.st_size, st.st_mtime
        retired = self._retired.pop(handle.key, None)
        if retired is not None and retired.offset <= st.st_size and handle.head.startswith(retired.head):
            handle.offset, handle.lineno = retired.offset, retired.lineno

    def _poll_watch(self, watch: _Watch, chunks: list[Chunk]) -> None:
        path = watch.path
        if watch.old is not None and not self._drain(watch, chunks):
            return  # still draining the rotated file: the new one waits, so lines stay in order
        try:
            st = os.stat(path)
        except FileNotFoundError:
            # The watch stays, so a re-created file is noticed on the next poll, not the next rescan.
            if watch.cur is not None:
                watch.old, watch.cur = watch.cur, None
                self._drain(watch, chunks)
            self.errors.pop(path, None)
            return
        except (OSError, ValueError) as exc:
            self.errors[path] = _describe(exc)
            return
        problem = _kind_error(st.st_mode)
        if problem is not None:
            self.errors[path] = problem
            if watch.cur is not None:
                watch.old, watch.cur = watch.cur, None
                self._drain(watch, chunks)
            return
        cur = watch.cur
        if cur is not None and (st.st_dev, st.st_ino) != cur.key:
            watch.old, watch.cur = cur, None
            if not self._drain(watch, chunks):
                return
            cur = None
        if cur is None:
            if self._followed_elsewhere(watch, st):
                return  # the file moved here from another followed name: that watch drains it first
            cur = self._open(path)
            if cur is None:
                return
            self._place(cur, st)
            watch.cur = cur
        self.errors.pop(path, None)
        if st.st_size != cur.size or st.st_size < cur.offset:
            if st.st_size < cur.offset or not self._head_intact(cur):
                self._flush(path, cur, chunks)
                cur.offset, cur.lineno, cur.piece, cur.cr_ended = 0, 1, False, False
                cur.backlog_end = 0  # written again while followed: live
                cur.head = self._pread(cur, _HEAD_BYTES, 0) or b""
            cur.size = st.st_size
        if st.st_size > cur.offset:
            self._read(path, cur, chunks)
        elif cur.pending.endswith(b"\r") and st.st_size == cur.offset:
            # grown no further since the poll that read it: a bar's last redraw is not held back for a "\n" that
            # may never come (the file stopped there)
            self._flush(path, cur, chunks)
            cur.cr_ended = True

    def _followed_elsewhere(self, watch: _Watch, st: os.stat_result) -> bool:
        key = (st.st_dev, st.st_ino)
        return any(
            h is not None and h.key == key for w in self._watches.values() if w is not watch for h in (w.cur, w.old)
        )

    def _head_intact(self, handle: _Handle) -> bool:
        if not handle.head:
            return True
        now = self._pread(handle, len(handle.head), 0)
        return now is None or now == handle.head

    def _drain(self, watch: _Watch, chunks: list[Chunk]) -> bool:
        """Read the rotated-away file to its end; True once it is finished and closed."""
        old = watch.old
        if old is None:
            return True
        if self._read(watch.path, old, chunks) == "more":
            return False
        self._flush(watch.path, old, chunks)
        try:
            renamed = os.fstat(old.fd).st_nlink > 0
        except OSError:
            renamed = False
        old.close()
        # Only a file that still has a name can turn up again; a deleted one's inode number may be reused by a
        # brand-new file, which must then be read from its start.
        if renamed:
            self._retired[old.key] = _Retired(head=old.head, offset=old.offset, lineno=old.lineno)
            while len(self._retired) > _RETIRED_MAX:
                self._retired.popitem(last=False)
        watch.old = None
        return True

    # --------------------------------------------------------------------------------------------------- I/O
    def _open(self, path: str) -> _Handle | None:
        try:
            # A link another user planted where others can write is not followed (the kernel's protected_symlinks
            # rule, kept whatever the host's sysctl says): its target could be any file root may read.
            fd = open_followed(path, os.O_RDONLY | os.O_NONBLOCK)
        except LinkRefused as exc:
            self.errors[path] = f"refused: {exc.strerror}"
            return None
        except (OSError, ValueError) as exc:
            self.errors[path] = _describe(exc)
            return None
        try:
            fst = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            self.errors[path] = _describe(exc)
            return None
        problem = _kind_error(fst.st_mode)
        if problem is not None:  # replaced by something else between stat and open
            os.close(fd)
            self.errors[path] = problem
            return None
        self.errors.pop(path, None)
        return _Handle(fd, fst)

    def _pread(self, handle: _Handle, size: int, offset: int) -> bytes | None:
        try:
            return os.pread(handle.fd, size, offset)
        except OSError:
            return None

    def _read(self, path: str, handle: _Handle, chunks: list[Chunk]) -> str:
        """Read from the handle's offset, at most one poll's worth: "eof", "more" (budget spent) or "error".

        Runs of NUL bytes are not text: a hole of a sparse file is stepped over without reading it (``SEEK_DATA``),
        and a block of 64 KiB or more that is NUL from end to end (a zero-filled or preallocated file) is read but not
        delivered. They hold no line terminator, so no line number moves; bytes of a line around them are joined. A
        gigabyte of them costs a few milliseconds instead of being counted as one endless line (issue 35)."""
        budget = self._max_poll
        while budget > 0:
            if handle.size - handle.offset >= self._block:
                self._skip_hole(path, handle)
            want = min(self._block, budget)
            if handle.offset < handle.backlog_end:  # a block is all backlog or all live, never both
                want = min(want, handle.backlog_end - handle.offset)
            try:
                block = os.pread(handle.fd, want, handle.offset)
            except OSError as exc:
                self.errors[path] = f"read failed: {_describe(exc)}"
                return "error"
            if not block:
                return "eof"
            handle.offset += len(block)
            handle.size = max(handle.size, handle.offset)
            budget -= len(block)
            if len(handle.head) < _HEAD_BYTES and handle.offset - len(block) <= len(handle.head):
                start = len(handle.head) - (handle.offset - len(block))
                handle.head += block[start : start + _HEAD_BYTES - len(handle.head)]
            if len(block) == self._block >= _NUL_BLOCK and not block.strip(b"\0"):
                budget += len(block) - len(block) // _NUL_WEIGHT  # cheap to pass over: more of it fits a poll
                self.nul_skipped[path] = self.nul_skipped.get(path, 0) + len(block)
                continue
            self._split(path, handle, block, chunks)
        return "more"

    def _skip_hole(self, path: str, handle: _Handle) -> None:
        """Step over a hole of a sparse file at the handle's offset (to the next data, or to the size last seen)."""
        try:
            data = os.lseek(handle.fd, handle.offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # EINVAL: the file system cannot say; read on
                return
            data = handle.size  # no data after the offset: the rest is a hole
        if data > handle.offset:
            self.nul_skipped[path] = self.nul_skipped.get(path, 0) + data - handle.offset
            handle.offset = data

    def _split(self, path: str, handle: _Handle, block: bytes, chunks: list[Chunk]) -> None:
        if handle.cr_ended:
            handle.cr_ended = False
            if block[:1] == b"\n":  # the "\r\n" of a line delivered at its "\r": it is ended already
                block = block[1:]
                if not block:
                    return
        data = handle.pending + block if handle.pending else block
        at = handle.offset - len(data)  # where data starts in the file
        end = complete_end(data)
        if end:
            complete = data[:end]
            n = count_lines(complete)
            chunks.append(Chunk(path, complete, handle.lineno, n, handle.piece, False, handle.backlog, at))
            handle.lineno += n
            handle.piece = False
            at += end
        rest = data[end:] if end else data
        # Pieces are cut strictly inside the unfinished line, so a held trailing "\r" is never split off.
        while len(rest) > self._max_line:
            piece, rest = rest[: self._max_line], rest[self._max_line :]
            chunks.append(Chunk(path, piece, handle.lineno, 0, handle.piece, True, handle.backlog, at))
            handle.piece = True
            at += len(piece)
        handle.pending = rest

    def _flush(self, path: str, handle: _Handle, chunks: list[Chunk]) -> None:
        """Deliver the unfinished last line of a file that will not grow any more (rotated, deleted, truncated), or
        a line ending in a bare ``\\r`` that the file stopped at."""
        rest = handle.pending
        if not rest:
            return
        n = count_lines(rest) + (0 if rest.endswith((b"\n", b"\r")) else 1)
        at = handle.offset - len(rest)
        chunks.append(Chunk(path, rest, handle.lineno, n, handle.piece, False, handle.backlog, at))
        handle.lineno += n
        handle.pending = b""
        handle.piece = False
