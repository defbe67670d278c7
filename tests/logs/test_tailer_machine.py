"""A Hypothesis state machine drives one real log file through appends (odd bytes and line endings included),
partial lines, rename-rotation, copytruncate, truncation, deletion and re-creation, polling after every step.

The model knows what was written to each generation of the file; the tailer must deliver exactly its lines, in
order, numbered from 1 in each generation, none twice, and the counter must count exactly the lines that hold
the marker.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import EventsConfig
from rlwatch.logs.events import EventCounter, build_kinds
from rlwatch.logs.tailer import Chunk, Tailer

MARKER = b"Train step 1/2 done."
MAX_LINE = 16

pieces = st.sampled_from(
    [b"a", b"bc", b" ", b"\t", b"\x00", b"\xff", b"\xc3", b"\xe2\x94", b"\n", b"\r", b"\r\n", MARKER]
)
payloads = st.lists(pieces, min_size=1, max_size=12).map(b"".join)


def expected_lines(content: bytes, finished: bool, released: frozenset[int] = frozenset()) -> list[bytes]:
    """What the tailer owes for one generation of the file's content. ``released``: where a bare CR ended the file
    at a poll that found it grown no further (that line was delivered then, and a LF written after it only ended it)."""
    lines: list[bytes] = []
    at = 0
    for line in content.splitlines(keepends=True):
        cr = at + len(line) - (2 if line.endswith(b"\r\n") else 1)
        lines.append(line[:-1] if line.endswith(b"\r\n") and cr in released else line)
        at += len(line)
    if finished or not lines:
        return lines
    last = lines[-1]
    if not last.endswith((b"\n", b"\r")):
        lines.pop()  # unfinished: held
    elif last.endswith(b"\r") and not last.endswith(b"\r\n") and len(content) - 1 not in released:
        lines.pop()  # a bare CR at the very end may still become CRLF: held while the file grows
    return lines


class TailedFile(RuleBasedStateMachine):
    @initialize(block=st.sampled_from([1, 3, 7, 64, 4096]))
    def start(self, block: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tailfsm"))
        self.path = self.dir / "app.log"
        self.tailer = Tailer([str(self.dir / "*.log")], max_line_bytes=MAX_LINE, block_bytes=block, rescan_s=0.0)
        self.counter = EventCounter(build_kinds(EventsConfig()), FakeClock())
        self.finished: list[tuple[bytes, frozenset[int]]] = []  # generations that ended (rotated, truncated, deleted)
        self.released: set[int] = set()  # where a bare CR ending the current generation was delivered
        self.polled: int | None = None  # the current generation's length at the last poll (None: a new one since)
        self.current: bytes | None = None  # content of the file at the path now; None when there is none
        self.got: list[list[bytes]] = []  # delivered lines, per generation (numbering restarts at 1)
        self.open_line = False  # the last delivered line continues in the next chunk
        self.rotations = 0

    def teardown(self) -> None:
        self.tailer.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -------------------------------------------------------------------------------------------- helpers
    def poll(self) -> None:
        content = self.current
        if content is not None and self.polled == len(content) and content.endswith(b"\r"):
            self.released.add(len(content) - 1)  # read by the last poll, grown no further since: delivered now
        self.polled = None if content is None else len(content)
        for chunk in self.tailer.poll():
            self.take(chunk)
            self.counter.feed(chunk)

    def take(self, chunk: Chunk) -> None:
        assert chunk.path == str(self.path)
        parts = chunk.data.splitlines(keepends=True)
        first = chunk.first_lineno
        if chunk.continues_line:
            assert self.open_line, "a continuation without a started line"
            gen = self.got[-1]
            assert first == len(gen), "a piece changed its line number"
            gen[-1] += parts.pop(0) if parts else b""
            first += 1
        else:
            assert not self.open_line, "a started line was never finished"
            if first == 1:
                self.got.append([])
        gen = self.got[-1]
        assert first == len(gen) + 1, f"line {first} delivered after line {len(gen)}"
        gen.extend(parts)
        expected_n = len(parts) + (1 if chunk.continues_line else 0)
        if chunk.continued:
            expected_n -= 1  # the trailing piece is not a finished line yet
        assert chunk.nlines == expected_n
        self.open_line = chunk.continued

    def end_generation(self) -> None:
        if self.current is not None:
            self.finished.append((self.current, frozenset(self.released)))
        self.released = set()
        self.polled = None

    # --------------------------------------------------------------------------------------------- rules
    @rule(data=payloads)
    def append(self, data: bytes) -> None:
        with self.path.open("ab") as f:
            f.write(data)
        self.current = (self.current or b"") + data
        self.poll()

    @precondition(lambda self: self.current is not None)
    @rule()
    def rotate(self) -> None:
        self.rotations += 1
        self.path.rename(self.dir / f"app.log.{self.rotations}")
        self.path.write_bytes(b"")
        self.end_generation()
        self.current = b""
        self.poll()

    @precondition(lambda self: self.current is not None)
    @rule()
    def copytruncate(self) -> None:
        # Only after everything was read: bytes written between the copy and the truncation are lost by design.
        self.rotations += 1
        shutil.copyfile(self.path, self.dir / f"app.log.{self.rotations}")
        with self.path.open("r+b") as f:
            f.truncate(0)
        self.end_generation()
        self.current = b""
        self.poll()

    @precondition(lambda self: self.current is not None)
    @rule()
    def truncate(self) -> None:
        with self.path.open("r+b") as f:
            f.truncate(0)
        self.end_generation()
        self.current = b""
        self.poll()

    @precondition(lambda self: self.current is not None)
    @rule()
    def delete(self) -> None:
        os.unlink(self.path)
        self.end_generation()
        self.current = None
        self.poll()

    @precondition(lambda self: self.current is None)
    @rule()
    def recreate(self) -> None:
        self.path.write_bytes(b"")
        self.current = b""
        self.poll()

    @rule()
    def idle_poll(self) -> None:
        self.poll()

    # ----------------------------------------------------------------------------------------- invariants
    @invariant()
    def delivered_exactly_what_was_written(self) -> None:
        gens = [expected_lines(c, True, released) for c, released in self.finished]
        if self.current is not None:
            gens.append(expected_lines(self.current, False, frozenset(self.released)))
        got = self.complete()
        assert [line for gen in got for line in gen] == [line for gen in gens for line in gen]
        assert [len(g) for g in got if g] == [len(g) for g in gens if g]  # each generation numbered from 1

    def complete(self) -> list[list[bytes]]:
        """Delivered lines per generation, without a long line still arriving in pieces."""
        got = [list(g) for g in self.got]
        if self.open_line:
            got[-1].pop()
        return got

    @invariant()
    def counted_exactly_the_marked_lines(self) -> None:
        done = [line for gen in self.complete() for line in gen]
        marked = sum(1 for line in done if MARKER in line)
        count = self.counter.summaries()["step"].count
        assert count in (marked, marked + 1) if self.open_line else count == marked

    @invariant()
    def never_holds_a_long_line_whole(self) -> None:
        for watch in self.tailer._watches.values():  # internal look: the memory bound is the point
            for handle in (watch.cur, watch.old):
                if handle is not None:
                    assert len(handle.pending) <= MAX_LINE


TailedFile.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_tailed_file = TailedFile.TestCase
