"""Real healthy training output of many frameworks and hand-written loops (tests/real/healthy), as rlwatch sees it.

Each excerpt is read twice. Live-looking: the run directory's log is followed from empty and the excerpt is
appended while it is followed, a few seconds after its last line's own time (its lines arrive then, as a running
trainer's would), and the run's state is judged
with a writer of the run alive (this test's own process, which wrote the lines). After the fact: the excerpt is an
hour old and read as `rlwatch report` reads it. Both must find the step a person names at the end of the excerpt
(sources.yaml) and, where the lines show one, the total; live, the run is progressing; neither calls it broken.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LiveRun, Severity
from rlwatch.discover.load import resolve_config
from rlwatch.engine.diagnosis.base import Context
from rlwatch.engine.diagnosis.health import assess_run
from rlwatch.engine.engine import Engine
from rlwatch.logs.timestamps import parse_time

HEALTHY = Path(__file__).resolve().parent / "real" / "healthy"
ENTRIES: list[dict[str, Any]] = yaml.safe_load((HEALTHY / "sources.yaml").read_text())


def test_the_corpus_is_sourced_whole() -> None:
    assert {p.name for p in HEALTHY.glob("*.log")} == {e["file"] for e in ENTRIES}
    assert len({e["framework"].split(" (")[0] for e in ENTRIES}) >= 20
    for e in ENTRIES:
        assert e["source"].startswith("https://github.com/"), e["file"]
        assert isinstance(e["step"], int), e["file"]
        assert len((HEALTHY / e["file"]).read_text().splitlines()) <= 200


def _engine(run: Path, now: float | None = None) -> Engine:
    cfg, _ = resolve_config(run, None, "auto")
    return Engine(cfg, run) if now is None else Engine(cfg, run, clock=FakeClock(start=now))


def _written(text: str) -> float:
    """A few seconds after the excerpt's last line was written: its last own time, else now (an undated log)."""
    times = [t for line in text.splitlines() if (t := parse_time(line, time.time())) is not None]
    return (max(times) if times else time.time()) + 5.0


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"][:-4] for e in ENTRIES])
def test_live_looking_the_step_is_named_and_the_run_progresses(tmp_path: Path, entry: dict[str, Any]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_bytes(b"")
    data = (HEALTHY / entry["file"]).read_bytes()
    now = _written(data.decode())
    engine = _engine(run, now)
    try:
        engine.drain_logs()  # the log is followed from here: what follows arrives live
        with log.open("ab") as out:
            out.write(data)
        engine.drain_logs()
        snap = engine.build()
    finally:
        engine.stop()
    tr = snap.training
    assert tr is not None and tr.last_step == entry["step"], (entry["file"], tr)
    if "total" in entry:
        assert tr.total_steps == entry["total"], (entry["file"], tr)
    assert tr.last_step_at is not None and abs(tr.last_step_at - now) < 600, entry["file"]
    writer = LiveRun(True, None, now - 3600, members=((os.getpid(), "writes the run's log"),))
    state = assess_run(replace(snap, live_run=writer, time=now), Context(thresholds=engine.cfg.thresholds))
    assert state.state == "progressing", (entry["file"], state)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"][:-4] for e in ENTRIES])
def test_after_the_fact_the_step_is_named_and_nothing_is_critical(tmp_path: Path, entry: dict[str, Any]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    shutil.copyfile(HEALTHY / entry["file"], log)
    an_hour_ago = time.time() - 3600
    os.utime(log, (an_hour_ago, an_hour_ago))
    engine = _engine(run)
    try:
        snap = engine.collect_once()
    finally:
        engine.stop()
    tr = snap.training
    assert tr is not None and tr.last_step == entry["step"], (entry["file"], tr)
    assert snap.run_state is not None and snap.run_state.state not in ("crashed", "hung"), snap.run_state
    assert not [f for f in snap.findings if f.severity == Severity.CRITICAL], snap.findings
