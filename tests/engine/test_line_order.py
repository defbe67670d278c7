"""The training tracker reads a chunk's lines in the order the file has them.

Two paths bring it lines: the event counter hands on the lines holding a step-like literal (an `Epoch:  4` header),
and the tracker reads a chunk's last lines itself (records with no such literal: `batch 280 sent 16 docs …`). A
record above a header must be read before it, whichever path brought each: read after it, the header looks older
than the record, the batch counter seems to start over with no epoch advancing, and the step is the batch index
(280) instead of the epoch the run is in."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import TrainingState
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from tests.looks import look_once, written_an_hour_ago


def _epoch(e: int, batches: range) -> str:
    return f"Epoch:  {e}\n" + "".join(f"batch {b} sent 16 docs at width {b % 37 + 9} loss 2.{b:04d}\n" for b in batches)


# The last epoch's tail, the evaluation between epochs, the next epoch's header and its first records: the header
# and the record above it both among the chunk's last lines.
_TEXT = (
    _epoch(3, range(0, 320, 40))
    + "dev pass: P 0.71, R 0.74, F1 0.72\nDev pass took 12.5 seconds\n"
    + _epoch(4, range(0, 240, 40))
)


def _live(tmp_path: Path) -> TrainingState | None:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_bytes(b"")
    engine = Engine(resolve_config(run, None, "auto")[0], run, clock=FakeClock(start=time.time()))
    try:
        engine.drain_logs()
        with log.open("a") as out:
            out.write(_TEXT)
        engine.drain_logs()
        return engine.build().training
    finally:
        engine.stop()


def _after(tmp_path: Path) -> TrainingState | None:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text(_TEXT)
    written_an_hour_ago(log)
    return look_once(run).training


@pytest.mark.parametrize("read", [_live, _after], ids=["live", "after-the-fact"])
def test_a_header_below_a_record_is_read_after_it(tmp_path: Path, read: object) -> None:
    assert callable(read)
    tr = read(tmp_path)
    assert tr is not None and tr.last_step == 4, tr
