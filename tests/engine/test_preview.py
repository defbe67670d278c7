"""Diagnosis first: the newest part of a big backlog is counted before the rest, and never changes the answer.

- The line numbers of a preview are exact: the lines before it, counted in child processes in ranges, are those the
  tailer numbers (``\\r\\n`` cut by a range or block boundary counted once, bare ``\\r`` ending a line).
- While the backlog is read from its start, a snapshot already names the log's last exception, at its true line,
  and its step; counts never go down and never exceed the final ones; once read, the snapshot is the one an engine
  without a preview gives.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import UNCOUNTED, Snapshot, line_number, line_ref
from rlwatch.discover.load import resolve_config
from rlwatch.engine import preview as preview_module
from rlwatch.engine import reading  # where the preview's waits are read
from rlwatch.engine.engine import Engine
from rlwatch.engine.preview import Counting
from rlwatch.logs import linecount, newlines
from rlwatch.logs.linecount import PrefixCount
from rlwatch.logs.newlines import count_file_range, count_lines
from rlwatch.logs.tailer import Tailer
from rlwatch.widgets.header import header_text
from tests.simhost import wait_until

STEP = "2026-11-21 10:{m:02d}:{s:02d},000 INFO Train step {i}/100000 done.\n"
REFUSED = (
    "2026-11-21 10:{m:02d}:{s:02d},500 WARNING HTTPUtils: failed with ClientConnectorError: "
    "Cannot connect to host 127.0.0.1:30000 ssl:default [Connect call failed ('127.0.0.1', 30000)] (attempt 1/3)\n"
)
LAST = [
    "Traceback (most recent call last):\n",
    '  File "/opt/areal/trainer.py", line 812, in update_weights\n',
    "    raise RuntimeError(msg)\n",
    "RuntimeError: weight update to the server failed for the last time\n",
]


def test_a_range_count_numbers_lines_as_the_tailer_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(newlines, "_BLOCK", 7)  # many block boundaries, some through a "\r\n"
    rng = random.Random(5)
    path = tmp_path / "mixed.log"
    for trial in range(40):
        data = bytes(rng.choice(b"ab\r\n") for _ in range(rng.randrange(0, 300)))
        path.write_bytes(data)
        with path.open("rb") as fh:
            for cut in range(0, len(data) + 1, 13):
                want = count_lines(data[:cut])
                assert newlines.py_count_file_range(fh.fileno(), 0, cut).lines == want, (trial, cut)
                assert count_file_range(fh.fileno(), 0, cut).lines == want, (trial, cut)
                if newlines.NATIVE:  # what the child processes run: a memory map of the range
                    part = linecount.count_mapped(fh.fileno(), cut // 2, cut)
                    assert part.lines == count_lines(data[cut // 2 : cut]), (trial, cut)
                    assert (part.first, part.last) == ((data[cut // 2], data[cut - 1]) if cut else (-1, -1))


def test_prefix_counts_in_child_processes_join_at_their_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "crlf.log"
    data = b"step\r\n" * 5000 + b"bar\rtqdm\r" * 3000 + b"plain\n" * 4000
    path.write_bytes(data)
    st = path.stat()
    for workers in (1, 3, 7):  # odd splits put boundaries inside "\r\n" pairs
        count = PrefixCount(str(path), (st.st_dev, st.st_ino), len(data), workers=workers)
        try:
            assert count.wait(60) == count_lines(data)
        finally:
            count.close()


def test_a_replaced_file_gives_no_count_rather_than_a_wrong_one(tmp_path: Path) -> None:
    path = tmp_path / "trainer.log"
    path.write_bytes(b"x\n" * 100)
    old = path.stat()
    path.unlink()
    path.write_bytes(b"y\n" * 10)  # another file under the same name
    new = path.stat()
    # the identity the count was asked for is not the file now there (tmpfs may hand the old inode's successor, or
    # the old inode itself, to the new file: neither may be taken as "another file")
    gone = next(ino for ino in (old.st_ino, old.st_ino + 1, new.st_ino + 1) if ino != new.st_ino)
    count = PrefixCount(str(path), (new.st_dev, gone), 100)
    assert count.wait(60) is None
    assert count.error is not None and "replaced" in count.error


def _backlog(path: Path, steps: int) -> int:
    """A log of steps and refused connections, ending with a traceback; returns the number of its last line."""
    lines: list[str] = []
    for i in range(steps):
        m, s = divmod(i % 3600, 60)
        lines.append(STEP.format(m=m, s=s, i=i))
        if i % 3 == 0:
            lines.append(REFUSED.format(m=m, s=s))
    lines += LAST
    path.write_text("".join(lines))
    return len(lines)


def _engine(root: Path, *, preview: bool) -> Engine:
    cfg, _ = resolve_config(root, None)
    engine = Engine(cfg, root, clock=FakeClock(start=1_800_000_000.0))
    engine.tailer.close()
    engine.tailer = Tailer(engine.log_patterns, block_bytes=64 << 10, max_poll_bytes=128 << 10)  # many polls
    engine.preview_sizes = (256 << 10, 64 << 10) if preview else (1 << 60, 0)
    return engine


def _final(engine: Engine) -> Snapshot:
    while engine.advance_preview() or engine.poll_logs() or engine.preview is not None:
        pass
    return engine.build()


def test_the_preview_names_the_last_exception_first_and_changes_nothing_once_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(reading, "PREVIEW_FIRST_WAIT_S", 0.0)  # counted before its line count can answer
    root = tmp_path / "run"
    root.mkdir()
    last_line = _backlog(root / "trainer.log", 40_000)  # about 3 MB
    engine = _engine(root, preview=True)
    plain = _engine(root, preview=False)
    try:
        assert engine.advance_preview()  # opens the logs, plans the preview: counted at once, its line count starts
        assert engine.preview is not None
        first = engine.build()  # the first look: what is now, before a line of the backlog was read
        assert first.backlog is not None and first.backlog[0] == 0
        assert first.preview is not None and "line numbers still being counted" in first.preview
        assert not first.preview_numbered and "(line numbers: ? until counted)" in header_text(first, 200).plain
        last = first.incidents[-1]
        assert last.title.startswith("RuntimeError: weight update to the server failed")
        assert last.lineno > UNCOUNTED and line_number(last.lineno) is None  # not known yet, and never shown
        assert line_ref(last.path, last.lineno) == "trainer.log:?"
        assert first.training.last_step == 39_999
        assert engine.advance_preview()  # waits for the line count, then counts the newest part again with it
        numbered = engine.build()
        # Counted again, nothing but the line numbers changed.
        assert {k: (e.count, e.last, e.streak, e.rate_per_min) for k, e in numbered.events.items()} == {
            k: (e.count, e.last, e.streak, e.rate_per_min) for k, e in first.events.items()
        }
        assert [(i.title, i.count, i.last, i.signature) for i in numbered.incidents] == [
            (i.title, i.count, i.last, i.signature) for i in first.incidents
        ]
        assert [f.code for f in numbered.findings] == [f.code for f in first.findings]
        engine.poll_logs()  # the main count has read only the first bytes
        snap = engine.build()
        assert snap.backlog is not None and snap.backlog[0] < snap.backlog[1] // 2
        assert snap.preview is not None and "trainer.log" in snap.preview and "being counted" not in snap.preview
        assert snap.preview_numbered and "? until counted" not in header_text(snap, 200).plain
        assert "diagnosis from the end first" in header_text(snap, 200).plain
        last = snap.incidents[-1]
        assert last.title.startswith("RuntimeError: weight update to the server failed")
        assert last.lineno == last_line - len(LAST) + 1  # its true line, once the lines before it are counted
        assert snap.training.last_step == 39_999
        assert snap.events["connection_refused"].streak > 0

        final_plain = _final(plain)
        seen = snap.events["step"].count
        while engine.poll_logs() or engine.advance_preview():
            now = engine.build()
            for kind, summary in now.events.items():
                assert summary.count <= final_plain.events[kind].count, kind  # never more than the file holds
            assert now.events["step"].count >= seen  # never goes down
            seen = now.events["step"].count
        assert engine.preview is None
        final = engine.build()
        assert final.preview is None and final.backlog is None
        assert {k: (e.count, e.first, e.last, e.streak, e.files) for k, e in final.events.items()} == {
            k: (e.count, e.first, e.last, e.streak, e.files) for k, e in final_plain.events.items()
        }
        assert [(i.title, i.lineno, i.count) for i in final.incidents] == [
            (i.title, i.lineno, i.count) for i in final_plain.incidents
        ]
        assert final.training.last_step == final_plain.training.last_step == 39_999
        assert [f.code for f in final.findings] == [f.code for f in final_plain.findings]
    finally:
        for e in (engine, plain):
            e.stop()


def test_a_small_backlog_gets_no_preview(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    _backlog(root / "trainer.log", 500)
    cfg, _ = resolve_config(root, None)
    engine = Engine(cfg, root, clock=FakeClock(start=1_800_000_000.0))
    try:
        engine.advance_preview()
        assert engine.preview is None
        engine.drain_logs()
        assert engine.build().events["step"].count == 500
    finally:
        engine.stop()


def test_the_count_child_finds_rlwatch_where_the_parent_did(tmp_path: Path) -> None:
    """The child runs isolated (``-I``); it must still import rlwatch from a checkout on PYTHONPATH, not only from
    an install. ``-S`` leaves even the install out: only the folder the parent imported rlwatch from remains."""
    path = tmp_path / "log"
    path.write_bytes(b"one\r\ntwo\rthree\n")
    st = path.stat()
    argv = [str(path), str(st.st_dev), str(st.st_ino), "0", str(st.st_size)]
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", linecount._CHILD, linecount._ROOT, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert (done.returncode, done.stdout.split()) == (0, ["3", str(ord("o")), str(ord("\n"))]), done.stderr


def test_the_first_look_is_published_with_the_preview_in_it(tmp_path: Path) -> None:
    """The dashboard holds its first frame for the engine's first look: once that is out, the snapshot already
    holds the diagnosis of the newest part, not only a backlog being read."""
    root = tmp_path / "run"
    root.mkdir()
    last_line = _backlog(root / "trainer.log", 40_000)
    engine = _engine(root, preview=True)
    try:
        assert not engine.wait_first_look(0)  # nothing runs yet
        engine.start()
        assert engine.wait_first_look(60)
        snap = engine.snapshot()
        assert snap.preview is not None and "trainer.log" in snap.preview
        assert {s.name for s in snap.sources if s.last_sample is not None} >= {"memory", "processes"}  # sampled
        assert snap.incidents[-1].title.startswith("RuntimeError: weight update to the server failed")
        # Then its true line number, once the lines before it are counted.
        wait_until(lambda: engine.snapshot().incidents[-1].lineno == last_line - len(LAST) + 1, timeout=60)
    finally:
        engine.stop()


def test_without_a_preview_the_first_look_does_not_wait(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    _backlog(root / "trainer.log", 500)
    engine = _engine(root, preview=False)
    try:
        engine.start()
        assert engine.wait_first_look(60)
        assert engine.preview is None
    finally:
        engine.stop()
    assert engine.wait_first_look(0)  # a stopped engine never keeps a caller waiting


def test_a_line_count_that_answers_soon_numbers_the_first_look(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A prefix in the page cache is counted in a fraction of a second: the first look waits for that much, and
    the newest part is counted once, with its true line numbers."""
    root = tmp_path / "run"
    root.mkdir()
    last_line = _backlog(root / "trainer.log", 40_000)
    engine = _engine(root, preview=True)
    made: list[Counting] = []
    make = engine._counting

    def counting() -> Counting:
        made.append(make())
        return made[-1]

    monkeypatch.setattr(engine, "_counting", counting)
    monkeypatch.setattr(reading, "PREVIEW_FIRST_WAIT_S", 60.0)  # a deadline, not a pause: it ends at the answer
    try:
        assert engine.advance_preview()
        assert engine.preview is not None and engine.preview.numbered
        snap = engine.build()
        assert snap.preview is not None and "being counted" not in snap.preview
        assert snap.incidents[-1].lineno == last_line - len(LAST) + 1
        assert not engine.advance_preview()  # nothing more to take: it is not counted again
        assert len(made) == 1
    finally:
        engine.stop()


def test_report_s_first_look_changes_nothing_in_its_answer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`report` at a terminal shows the newest part's diagnosis first; what it then answers is the same as without."""
    monkeypatch.setattr(reading, "PREVIEW_FIRST_WAIT_S", 0.0)  # counted before its line count can answer
    root = tmp_path / "run"
    root.mkdir()
    last_line = _backlog(root / "trainer.log", 40_000)
    looks: list[Snapshot] = []
    progress: list[tuple[int, int]] = []
    engine, plain = _engine(root, preview=True), _engine(root, preview=False)
    try:
        answer = engine.collect_once(
            first_look=looks.append, progress=lambda done, total: progress.append((done, total))
        )
        expected = plain.collect_once()
    finally:
        for e in (engine, plain):
            e.stop()
    assert len(looks) == 1
    look = looks[0]
    assert look.preview is not None and look.backlog is not None and look.backlog[0] < look.backlog[1]
    assert look.incidents[-1].title.startswith("RuntimeError: weight update to the server failed")
    assert line_number(look.incidents[-1].lineno) is None  # shown at once: the lines before it not counted yet
    assert answer.incidents[-1].lineno == last_line - len(LAST) + 1
    assert look.events["step"].count < expected.events["step"].count  # only part of it read
    assert progress and progress[-1][0] == progress[-1][1]  # read to the end
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(progress))
    assert engine.preview is None and answer.preview is None and answer.backlog is None
    assert {k: (e.count, e.first, e.last, e.streak, e.files) for k, e in answer.events.items()} == {
        k: (e.count, e.first, e.last, e.streak, e.files) for k, e in expected.events.items()
    }
    assert [(i.title, i.lineno, i.count) for i in answer.incidents] == [
        (i.title, i.lineno, i.count) for i in expected.incidents
    ]
    assert [(f.code, f.message) for f in answer.findings] == [(f.code, f.message) for f in expected.findings]


class _NeverCounted:
    """A line count that never answers, as one from a cold page cache on a slow disk can take longer than the main
    count needs to reach the newest part: the main count must then number the preview itself."""

    error: str | None = None

    def __init__(self, path: str, identity: tuple[int, int], end: int) -> None:
        self.closed = False

    def result(self) -> int | None:
        return None

    def wait(self, timeout: float) -> int | None:
        return None

    def close(self) -> None:
        self.closed = True


class _FailedCount(_NeverCounted):
    """A line count that failed: the file was replaced under it."""

    error = "the line count of trainer.log failed: the file was replaced"


def test_a_part_whose_line_count_failed_is_no_longer_shown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Its line numbers can never be known: what was shown of it with '?' goes, and the main count's alone stays."""
    monkeypatch.setattr(preview_module, "PrefixCount", _FailedCount)
    root = tmp_path / "run"
    root.mkdir()
    _backlog(root / "trainer.log", 40_000)
    engine = _engine(root, preview=True)
    try:
        assert engine.advance_preview()
        preview = engine.preview
        assert preview is not None
        assert preview.empty and preview.error is not None and "replaced" in preview.error
        assert engine.advance_preview()  # dropped
        assert engine.preview is None
        snap = engine.build()
        assert snap.preview is None and not snap.incidents and snap.events["step"].count == 0
    finally:
        engine.stop()


def test_the_main_count_numbers_the_preview_when_it_gets_there_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """While the line count has not answered, the main count reading into the newest part must not add its lines
    to the preview's a second time: the chunk that holds the part's first byte gives its first line's number, the
    merged counts freeze there, and the preview is counted again with true numbers."""
    monkeypatch.setattr(preview_module, "PrefixCount", _NeverCounted)
    monkeypatch.setattr(reading, "PREVIEW_WAIT_S", 0.0)
    root = tmp_path / "run"
    root.mkdir()
    last_line = _backlog(root / "trainer.log", 12_000)  # about 900 KB, the newest 64 KiB previewed
    plain = _engine(root, preview=False)
    final_plain = _final(plain)
    plain.stop()
    engine = _engine(root, preview=True)
    engine.tailer = Tailer(engine.log_patterns, block_bytes=16 << 10, max_poll_bytes=16 << 10)
    try:
        assert engine.advance_preview()
        preview = engine.preview
        assert preview is not None and line_number(engine.build().incidents[-1].lineno) is None
        seen: dict[str, int] = {}
        numbered_before_dropped = False
        while True:  # as the log loop goes: the preview advanced, then a poll of backlog
            changed = engine.advance_preview()
            if not engine.poll_logs() and not changed and engine.preview is None:
                break
            snap = engine.build()
            for kind, summary in snap.events.items():
                assert summary.count <= final_plain.events[kind].count, kind  # never more than the file holds
                assert summary.count >= seen.get(kind, 0), kind  # never goes down
                seen[kind] = summary.count
            # None counted twice (a storm that began before the newest part shows as two until the preview goes).
            assert len([i for i in snap.incidents if i.kind == "traceback"]) == 1
            storms = sum(i.count for i in snap.incidents if i.kind == "retry_storm")
            assert storms <= sum(i.count for i in final_plain.incidents if i.kind == "retry_storm")
            if engine.preview is not None and snap.incidents[-1].lineno == last_line - len(LAST) + 1:
                numbered_before_dropped = True
        assert numbered_before_dropped  # the preview showed its true line numbers while the rest was read
        assert engine.preview is None
        final = engine.build()
        assert {k: e.count for k, e in final.events.items()} == {k: e.count for k, e in final_plain.events.items()}
    finally:
        engine.stop()


def test_report_s_first_look_does_not_wait_for_the_line_count(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """From a cold page cache the line count before the newest part takes seconds, on a slow disk longer than
    `report` needs to read everything: the first look comes at once all the same, and the answer is whole."""
    monkeypatch.setattr(preview_module, "PrefixCount", _NeverCounted)
    root = tmp_path / "run"
    root.mkdir()
    last_line = _backlog(root / "trainer.log", 40_000)
    looks: list[Snapshot] = []
    engine, plain = _engine(root, preview=True), _engine(root, preview=False)
    try:
        answer = engine.collect_once(first_look=looks.append)
        expected = plain.collect_once()
    finally:
        for e in (engine, plain):
            e.stop()
    assert len(looks) == 1 and looks[0].preview is not None and looks[0].backlog == (0, looks[0].backlog[1])
    assert looks[0].incidents[-1].title.startswith("RuntimeError: weight update to the server failed")
    assert answer.preview is None and answer.incidents[-1].lineno == last_line - len(LAST) + 1
    assert {k: e.count for k, e in answer.events.items()} == {k: e.count for k, e in expected.events.items()}


def test_the_part_starts_after_any_line_end_a_crlf_whole() -> None:
    """Issue 35: a CR-only log (a bar redrawn in place) has no "\\n" to start the newest part after: it is previewed
    too; a "\\r" at the very end waits for its next byte, so a "\\r\\n" is never cut in two."""
    from rlwatch.engine.preview import _first_line_start

    assert _first_line_start(b"ab\ncd") == 3
    assert _first_line_start(b"ab\rcd\rx") == 3
    assert _first_line_start(b"ab\r\ncd") == 4
    assert _first_line_start(b"\ncd") == 1  # the "\n" of a "\r\n" cut at the part's first byte
    assert _first_line_start(b"ab\r") == 0
    assert _first_line_start(b"no end") == 0
