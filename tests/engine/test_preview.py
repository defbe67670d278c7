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
from rlwatch.common.state import Snapshot
from rlwatch.discover.load import resolve_config
from rlwatch.engine import engine as engine_module
from rlwatch.engine.engine import Engine
from rlwatch.logs import linecount, newlines
from rlwatch.logs.linecount import PrefixCount
from rlwatch.logs.newlines import count_file_range, count_lines
from rlwatch.logs.tailer import Tailer
from rlwatch.widgets.header import header_text

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
    st = path.stat()
    path.unlink()
    path.write_bytes(b"y\n" * 10)  # another file under the same name
    count = PrefixCount(str(path), (st.st_dev, st.st_ino + 1), 100)
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


def test_the_preview_names_the_last_exception_first_and_changes_nothing_once_read(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    last_line = _backlog(root / "trainer.log", 40_000)  # about 3 MB
    engine = _engine(root, preview=True)
    plain = _engine(root, preview=False)
    try:
        engine.advance_preview()  # opens the logs, plans the preview: its line count starts
        assert engine.preview is not None
        assert engine.preview.wait(60)  # the line numbers are known and the newest part counted
        engine.poll_logs()  # the main count has read only the first bytes
        snap = engine.build()
        assert snap.backlog is not None and snap.backlog[0] < snap.backlog[1] // 2
        assert snap.preview is not None and "trainer.log" in snap.preview
        assert "diagnosis from the end first" in header_text(snap, 200).plain
        last = snap.incidents[-1]
        assert last.title.startswith("RuntimeError: weight update to the server failed")
        assert last.lineno == last_line - len(LAST) + 1  # its true line, counted before the preview
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
        assert snap.incidents[-1].lineno == last_line - len(LAST) + 1
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


def test_report_s_first_look_changes_nothing_in_its_answer(tmp_path: Path) -> None:
    """`report` at a terminal shows the newest part's diagnosis first; what it then answers is the same as without."""
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
    assert look.incidents[-1].lineno == last_line - len(LAST) + 1  # the crash at the end, on its true line
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


def test_report_s_first_look_comes_when_the_line_count_answers_late(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """From a cold page cache the line count before the newest part takes seconds: `report` reads on meanwhile and
    shows the first look once the count has answered, not never."""
    monkeypatch.setattr(engine_module, "PREVIEW_WAIT_S", 0.0)  # no waiting for it at the start
    root = tmp_path / "run"
    root.mkdir()
    last_line = _backlog(root / "trainer.log", 40_000)
    looks: list[Snapshot] = []
    engine = _engine(root, preview=True)
    try:
        answer = engine.collect_once(first_look=looks.append)
    finally:
        engine.stop()
    assert len(looks) == 1 and looks[0].preview is not None
    assert looks[0].incidents[-1].lineno == last_line - len(LAST) + 1
    assert answer.preview is None and answer.events["step"].count == 40_000
