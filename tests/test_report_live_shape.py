"""A one-shot `rlwatch report` on a live run whose step lines carry no time and no framework's words (`it 517 | loss
…`, read by their shape): the log ending in a step record is progress at its modification time, as a log ending in a
catalogue's step line is. Before, the report said "started 23s ago and has shown no progress yet" through every
step; `watch`, which reads the lines as they come, saw them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlwatch.common.state import Snapshot
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from tests.simhost import wait_until

pytestmark = pytest.mark.slow

_WRITER = """
import time
for i in range(1, 100000):
    print(f"it {i:6d} | loss {1 / i:.4f} | 0.14s/it", flush=True)
    time.sleep(0.3)
"""


def _report(run: Path) -> Snapshot:
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run)
    try:
        return engine.collect_once()
    finally:
        engine.stop()


def _writing_run(tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> Path:
    """A run directory whose writer (started, in ``started``) has printed three records of `it N | loss …`."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    with log.open("w") as out:
        started.append(subprocess.Popen([sys.executable, "-c", _WRITER], stdout=out, cwd=run, start_new_session=True))
    wait_until(lambda: log.read_text().count("\n") >= 3, timeout=30.0)
    return run


def test_a_live_run_whose_records_are_read_by_shape_is_progressing_in_a_report(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    run = _writing_run(tmp_path, started)
    snap = _report(run)
    assert snap.training is not None and snap.training.last_step is not None and snap.training.last_step >= 3
    assert snap.run_state is not None and snap.run_state.state == "progressing", snap.run_state


def test_the_reader_of_rlwatch_s_own_output_is_never_the_run(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """`rlwatch report --json | python3 -c …` typed in the run directory of a trainer that is a `python3 -c` too:
    discovery's trainer rule (`python -c`) matches the reader, which stands in the directory; it reads rlwatch's own
    output, so it is an observer, never a member."""
    run = _writing_run(tmp_path, started)
    saved = tmp_path / "report.json"
    reader = f"import sys; open({str(saved)!r}, 'w').write(sys.stdin.read())"
    piped = f"{sys.executable} -m rlwatch report {run} --json | {sys.executable} -c {reader!r}"
    subprocess.run(["sh", "-c", piped], cwd=run, timeout=120, check=False)
    members = [m["pid"] for m in json.loads(saved.read_text())["live_run"]["members"]]
    assert members == [started[0].pid], members
