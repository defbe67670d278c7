"""A timeless step line dated by when earlier reads saw it (engine/seen), never by its file's modification time.

The hang demo's report said "unknown" for the whole hang: its step lines carry no time, and rank 1's heartbeat kept
moving the log's modification time, the only bound a one-shot read had. Each read now keeps the last step line it
found and when; the next read of the same line takes that bound, and a later step line came after that look.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path

from rlwatch.common.state import (
    EventSummary,
    LiveRun,
    LogLine,
    ProcessInfo,
    ProcessStack,
    Severity,
    Snapshot,
    SourceStatus,
    StackReport,
    TrainingState,
)
from rlwatch.config.models import Thresholds
from rlwatch.engine.diagnosis import Context, decide_run_state
from rlwatch.engine.diagnosis.health import health, undated
from rlwatch.engine.seen import NAME, exchange
from rlwatch.sources.stacks import summarize

NOW = 1_763_700_000.0
CTX = Context(thresholds=Thresholds(hang_floor_s=60))


def _snap(run: Path, log: Path, lineno: int, at: float) -> Snapshot:
    """The run at ``at`` as a one-shot read sees it: the step line undated, bounded by the file's modification time."""
    mtime = log.stat().st_mtime
    line = LogLine(str(log), lineno, "Train step 12/120 done.", math.nan)
    step = EventSummary("step", Severity.INFO, 12, NOW - 900, NOW - 900, 0.0, 0, {str(log): 12}, (line,), True,
                        mtime, mtime)  # fmt: skip
    proc = ProcessInfo(77, NOW - 1000, "trainer", "trainer", 1, None, NOW - 1000, 0, ("python3", "train.py"), str(run),
                       "root")  # fmt: skip
    live = LiveRun(True, None, NOW - 1000, members=((77, "writes train.log"),), looked_at=at)
    return Snapshot(host="h", time=at, profile="generic", run_dir=str(run), events={"step": step}, processes=(proc,),
                    live_run=live, sources=(SourceStatus("logs", True, at),))  # fmt: skip


def test_a_heartbeat_that_moves_the_logs_mtime_no_longer_hides_a_hang_from_a_one_shot_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text("Train step 11/120 done.\nTrain step 12/120 done.\nwaiting for rollout workers...\n")
    os.utime(log, (NOW, NOW))
    first = _snap(run, log, 2, NOW + 1)
    assert first.logs_read
    seen = exchange(run, first)
    assert seen is not None and seen.by == NOW and not seen.exact and (run / ".rlwatch" / NAME).exists()
    # Two minutes on: the heartbeat moved the mtime; the same step line is still the last.
    with log.open("a") as fh:
        fh.write("waiting for rollout workers...\n" * 60)
    os.utime(log, (NOW + 120, NOW + 120))
    later = _snap(run, log, 2, NOW + 121)
    assert decide_run_state(later, CTX).state == "unknown"  # alone, the read knows only "by the mtime"
    seen = exchange(run, later)
    assert seen is not None and seen.by == NOW
    rs = decide_run_state(later, Context(thresholds=CTX.thresholds, seen=seen))
    assert rs.state == "hung" and rs.since == NOW, rs
    assert rs.why.startswith("no progress since ") and " at the latest (2m; " in rs.why, rs.why  # a bound, said so


def test_a_step_line_the_last_look_did_not_find_came_after_it(tmp_path: Path) -> None:
    """Between two reports a new step line was written: it came after the first one's look, so the run is
    progressing (the dashboard said OK while report said unknown)."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text("Train step 11/120 done.\nrollout batch prepared\n")
    os.utime(log, (NOW, NOW))
    exchange(run, _snap(run, log, 1, NOW + 1))
    with log.open("a") as fh:
        fh.write("Train step 12/120 done.\nrollout batch prepared\n")
    os.utime(log, (NOW + 5, NOW + 5))
    later = _snap(run, log, 3, NOW + 6)
    seen = exchange(run, later)
    assert seen is not None and seen.after == NOW + 1
    rs = decide_run_state(later, Context(thresholds=CTX.thresholds, seen=seen))
    assert rs.state == "progressing", rs
    # Another file under the same name (rotated, recreated) is not the line the record speaks of.
    log.unlink()
    log.write_text("Train step 1/120 done.\nx\nTrain step 2/120 done.\n")
    seen = exchange(run, _snap(run, log, 3, NOW + 9))
    assert seen is not None and seen.after is None


def test_an_undated_first_look_says_where_each_rank_waits_now(tmp_path: Path) -> None:
    """The first report on a quiet run has no earlier read to lean on: it says unknown (exit 3), and where each rank
    stands now, read once, is the evidence it gives: rank 0 in the all-reduce, waiting for rank 1."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text("Train step 12/120 done.\nwaiting for rollout workers...\n")
    os.utime(log, (NOW, NOW))
    waiting = ProcessStack(21, "rank 0", ("all_reduce (distributed_c10d.py:50)", "train_step (ddp.py:120)"), "x", 1)
    away = ProcessStack(
        22, "rank 1", ("never_reaches_collective (ddp.py:114)",), "never_reaches_collective (ddp.py:114)", 1
    )
    waiting = replace(waiting, where="all_reduce (ddp.py:120)")
    _, summary = summarize((waiting, away))
    s = _snap(run, log, 1, NOW + 5)
    s = replace(s, training=TrainingState(12, 120, None, None, False, None, None), run_state=decide_run_state(s, CTX),
                stacks=StackReport(NOW + 4, "progress not dated", (waiting, away), (), summary, None))  # fmt: skip
    assert s.run_state is not None and s.run_state.state == "unknown" and undated(s)
    unknown = next(f for f in health(s, CTX) if f.code == "run_state_unknown")
    assert (
        "Where each waits now: rank 1 in never_reaches_collective (ddp.py:114), not in a collective; rank 0 waits"
        in (unknown.message)
    ), unknown.message
