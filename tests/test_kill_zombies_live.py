"""kill-zombies from the dashboard: a running engine, its loops backing off on a quiet run, as `rlwatch RUN_DIR` runs
it. The verify looked at the engine's GPU-holder list, scanned every 30 s on a quiet run, and said "FAILED — a
stopped process still holds the device (waiting for a fresh look at the host)" after the strays had exited; the
dashboard then kept their rows, and `z`, until the next scan (issue 42, H4)."""

from __future__ import annotations

import pytest

from rlwatch.discover.load import load_config
from rlwatch.engine.engine import IDLE_SAMPLE_S, STOPPED_SAMPLE_S, Engine
from rlwatch.remedy.actions.api import Actions
from tests.simhost import wait_until
from tests.test_actions_e2e import StrayDir, stray_dir

__all__ = ["stray_dir"]  # the fixture, used by name

pytestmark = pytest.mark.slow


def test_kill_zombies_under_the_dashboards_engine_is_verified_on_the_host_and_the_rows_go(stray_dir: StrayDir) -> None:
    run_dir = stray_dir.configure()
    engine = Engine(load_config(run_dir / "rlwatch.yaml"), run_dir)
    engine.idle_sample_s, engine.stopped_sample_s = IDLE_SAMPLE_S, STOPPED_SAMPLE_S  # as the dashboard sets them
    engine.start()
    try:
        wait_until(lambda: [h.pid for h in engine.snapshot().zombies] == [stray_dir.stray], 30)
        wait_until(lambda: engine.looks > 0, 30)  # quiet: the rounds back off, and the holder scan with them
        actions = Actions(engine)
        result = actions.execute(actions.prepare("kill-zombies"))
        assert result.ok, result.message
        assert "1 stray GPU holder gone; no stray process holds" in result.message
        # The stray's row goes within a round or two, not at the next 30 s scan.
        wait_until(lambda: not engine.snapshot().zombies, 8)
    finally:
        engine.stop()
