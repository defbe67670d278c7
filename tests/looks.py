"""One look at a run directory after the fact, as `rlwatch report` takes it: its files written an hour ago (no
writer to wait for) and the engine's one-shot collection. The tests that read a run's step or verdict from its files
alone share it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rlwatch.common.state import Snapshot
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine


def written_an_hour_ago(*paths: Path) -> None:
    """Date ``paths`` an hour back: a log that old has no writer a one-shot look waits to see."""
    an_hour_ago = time.time() - 3600
    for path in paths:
        os.utime(path, (an_hour_ago, an_hour_ago))


def look_once(run: Path) -> Snapshot:
    """The run's snapshot from one look, with the configuration discovery gives it and no wait for a writer."""
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run)
    engine.unseen_writer_wait_s = 0
    try:
        return engine.collect_once()
    finally:
        engine.stop()
