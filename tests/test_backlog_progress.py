"""While a big backlog is being read, the snapshot says how far, and the header shows it; once read, it says nothing.

Totals, rates and the timeline of a snapshot taken mid-backlog are those of the part read so far: a person must see
that they are partial, and how long the rest will take.
"""

from __future__ import annotations

import threading
from pathlib import Path

from rlwatch.common.state import Snapshot
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.logs.tailer import Tailer
from rlwatch.widgets.header import header_text

LINE = "2026-11-21 10:00:00 INFO Train step {i}/100000 done.\n"


def _log(path: Path, lines: int) -> int:
    path.write_text("".join(LINE.format(i=i) for i in range(lines)))
    return path.stat().st_size


def test_the_tailer_tells_how_far_the_backlog_is_read(tmp_path: Path) -> None:
    size = _log(tmp_path / "trainer.log", 60_000)  # about 3 MB
    tailer = Tailer([str(tmp_path / "*.log")], block_bytes=256 << 10, max_poll_bytes=1 << 20)
    try:
        assert tailer.backlog_progress() == (0, 0)  # nothing opened yet
        tailer.poll()
        done, total = tailer.backlog_progress()
        assert total == size
        assert 0 < done < size  # one poll reads a bounded amount
        while tailer.poll():
            pass
        assert tailer.backlog_progress() == (size, size)
        with (tmp_path / "trainer.log").open("a") as fh:  # written while followed: live, not backlog
            fh.write(LINE.format(i=60_000))
        tailer.poll()
        assert tailer.backlog_progress() == (size, size)
    finally:
        tailer.close()


def test_a_snapshot_mid_backlog_says_how_far_and_none_once_read(tmp_path: Path) -> None:
    size = _log(tmp_path / "trainer.log", 60_000)
    cfg, _ = resolve_config(tmp_path, None)
    engine = Engine(cfg, tmp_path)
    engine.tailer.close()
    engine.tailer = Tailer(engine.log_patterns, block_bytes=256 << 10, max_poll_bytes=1 << 20)  # bounded reads
    try:
        engine.poll_logs()
        snap = engine.build()
        assert snap.backlog is not None
        done, total = snap.backlog
        assert total == size and 0 < done < size
        engine.drain_logs()
        done_snap = engine.build()
        assert done_snap.backlog is None
        assert done_snap.events["step"].count == 60_000
    finally:
        engine.tailer.close()


def test_the_header_shows_the_backlogs_progress_only_while_it_is_read() -> None:
    reading = Snapshot(host="h", time=1000.0, profile="areal", run_dir="/r", backlog=(861_000_000, 2_100_000_000))
    assert "reading backlog: 41 % of 2.1 GB" in header_text(reading, 160).plain
    done = Snapshot(host="h", time=1000.0, profile="areal", run_dir="/r")
    assert "reading backlog" not in header_text(done, 160).plain


def test_the_log_view_gets_its_lines_while_a_chunk_is_being_counted(tmp_path: Path) -> None:
    """The dashboard asks for lines on its event loop: it must not wait for the backlog's counting (the screen would
    freeze for a whole poll of a dense log)."""
    _log(tmp_path / "trainer.log", 2_000)
    cfg, _ = resolve_config(tmp_path, None)
    engine = Engine(cfg, tmp_path)
    inside, release = threading.Event(), threading.Event()

    def slow_subscriber(_line: object) -> None:  # holds the count mid-chunk, under the engine's lock
        inside.set()
        release.wait(30)

    engine.counter.subscribe("step", slow_subscriber)
    counting = threading.Thread(target=engine.poll_logs)
    asked: list[int] = []
    asking = threading.Thread(target=lambda: asked.append(len(engine.lines_after(0))))
    try:
        counting.start()
        assert inside.wait(30)
        asking.start()
        asking.join(10)
        assert asked == [0], (
            "lines_after waited for the chunk being counted"
        )  # nothing kept yet: that chunk is not done
    finally:
        release.set()
        counting.join(30)
        asking.join(30)
        engine.tailer.close()
    assert len(engine.lines_after(0)) == 2_000  # and once counted, the chunk's lines are there
