"""Launch records outlive the rlwatch process that saw them, so a later one can start a dead process again."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from rlwatch.clock import SystemClock
from rlwatch.config import Config, GpuConfig, ProcessRule
from rlwatch.engine import Engine
from rlwatch.launches import LaunchBook
from rlwatch.sources.processes import LaunchRecord


def record(argv: tuple[str, ...] = ("python3", "-m", "trainer")) -> LaunchRecord:
    return LaunchRecord(argv=argv, cwd="/srv/run", env={"TOKEN": "x"}, first_seen=1.0, pid=42, create_time=2.0)


def test_book_round_trips_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / ".rlwatch" / "launches.json"
    assert LaunchBook(path).remember("trainer", record())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # environments may hold tokens
    again = LaunchBook(path)
    assert again.get("trainer") == record()
    assert not again.remember("trainer", record(("other",)))  # the first launch is the one kept
    assert LaunchBook(path).get("trainer") == record()


def test_corrupt_book_is_ignored_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "launches.json"
    path.write_bytes(b"\x00{garbage")
    book = LaunchBook(path)
    assert book.get("trainer") is None and book.error and "unreadable" in book.error
    path.write_text('{"trainer": {"argv": 5}, "ok": {"argv": ["a"], "first_seen": 1, "pid": 1, "create_time": 1}}')
    book = LaunchBook(path)
    assert book.get("trainer") is None and book.get("ok") is not None


def test_unwritable_book_keeps_working_from_memory(tmp_path: Path) -> None:
    (tmp_path / ".rlwatch").write_text("a file where the directory should be")
    book = LaunchBook(tmp_path / ".rlwatch" / "launches.json")
    assert book.remember("trainer", record())
    assert book.get("trainer") == record() and book.error and "cannot write" in book.error


def test_a_fresh_engine_knows_how_a_dead_process_was_started(tmp_path: Path) -> None:
    marker = f"rlwatch-launch-test-{os.getpid()}"
    argv = [sys.executable, "-c", "import sys, time; time.sleep(60)", marker]
    cfg = Config(
        gpu=GpuConfig(backend="none"),
        processes=[ProcessRule(role="launcher", cmdline_regex=marker)],
    )
    child = subprocess.Popen(argv, cwd=tmp_path)
    try:
        first = Engine(cfg, tmp_path, clock=SystemClock())
        first.sample()
        seen = first.launch_record("launcher")
        assert seen is not None and list(seen.argv) == argv
        first.stop()
    finally:
        child.kill()
        child.wait()
    later = Engine(cfg, tmp_path, clock=SystemClock())
    later.sample()
    assert later.processes.launch_record("launcher") is None  # this engine never saw it alive
    remembered = later.launch_record("launcher")
    assert remembered is not None and list(remembered.argv) == argv and remembered.cwd == str(tmp_path)
    later.stop()
