"""Free heap goes back to the system once a big backlog is counted (rlwatch.common.heap, Engine's log loop)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from rlwatch.common.heap import release_free_heap
from rlwatch.discover.load import resolve_config
from rlwatch.engine import loops  # where the heap is released
from rlwatch.engine.engine import Engine
from tests.simhost import wait_until

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_release_works_on_glibc() -> None:
    assert release_free_heap() is True


def _run_dir(tmp_path: Path, lines: int) -> Path:
    log = tmp_path / "trainer.log"
    log.write_text("".join(f"2026-11-21 10:00:{i % 60:02d} INFO Train step {i}/100000 done.\n" for i in range(lines)))
    return tmp_path


def test_log_loop_releases_heap_after_a_backlog_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(loops, "release_free_heap", lambda: calls.append(1) or True)
    monkeypatch.setattr(loops, "RELEASE_AFTER_BYTES", 64 << 10)
    run_dir = _run_dir(tmp_path, 4000)  # about 200 KB: over the lowered threshold
    cfg, _ = resolve_config(run_dir, None)
    engine = Engine(cfg, run_dir)
    engine.start()
    try:
        assert wait_until(lambda: bool(calls), timeout=10), "the heap was never released after the backlog"
        assert engine.counter.summaries()["step"].count == 4000
        # A few more lines are not a backlog: no second release.
        with (run_dir / "trainer.log").open("a") as fh:
            fh.write("2026-11-21 10:01:00 INFO Train step 4001/100000 done.\n")
        assert wait_until(lambda: engine.counter.summaries()["step"].count == 4001, timeout=10)
        assert calls == [1]
    finally:
        engine.stop()


def test_sample_loop_releases_heap_every_so_often(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(loops, "release_free_heap", lambda: calls.append(1) or True)
    monkeypatch.setattr(loops, "RELEASE_EVERY_S", 0.05)
    run_dir = _run_dir(tmp_path, 10)  # a tiny log: no backlog release
    cfg, _ = resolve_config(run_dir, None)
    engine = Engine(cfg.model_copy(update={"interval_s": 0.02}), run_dir)
    engine.start()
    try:
        assert wait_until(lambda: len(calls) >= 3, timeout=10), f"released {len(calls)} times"
    finally:
        engine.stop()
