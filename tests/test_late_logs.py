"""A watchdog started before the run's logs exist follows them when the run's processes create them.

Found on the GPU host: `rlwatch watch` started beside torchrun saw only the launcher's redirect (torchrun.log), and
the ranks' train.log, created a moment later, was never read, so the job stayed "still starting" through its steps.
Here a real `rlwatch watch` starts in an empty directory (and in one holding only a launcher's log), then a real
process creates train.log, holds it open and writes steps: the watchdog's own state file must say progressing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simhost import wait_until

pytestmark = pytest.mark.slow

WRITER = """
import sys, time
with open("train.log", "a") as f:
    for i in range(1, 400):
        print(f"[rank0]: Train step {i}/400 done.", file=f, flush=True)
        time.sleep(0.3)
"""


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(timeout=30)


def _state(run: Path) -> str | None:
    try:
        data = json.loads((run / ".rlwatch" / "watchdog.json").read_text())
    except (OSError, ValueError):
        return None
    state = data.get("run_state") or {}
    return state.get("state") if isinstance(state, dict) else None


@pytest.mark.parametrize("launcher_log", [False, True], ids=["empty", "launcher-log-only"])
def test_a_log_created_after_the_watchdog_started_is_followed(
    tmp_path: Path, started: list[subprocess.Popen[bytes]], launcher_log: bool
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    if launcher_log:
        (run / "torchrun.log").write_text("W1128 launching 1 rank\n")
    with (tmp_path / "watch.jsonl").open("wb") as out:
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "rlwatch", "watch", str(run), "--json", "--interval", "0.5"],
                stdout=out,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
        )
    wait_until(lambda: _state(run) is not None, 60)  # the watchdog has looked at the run once
    started.append(subprocess.Popen([sys.executable, "-c", WRITER], cwd=run, stdin=subprocess.DEVNULL))
    assert wait_until(lambda: _state(run) == "progressing", 90)
