"""A person's `tail -f`, `less` or any command left standing in the run directory is not "the live run".

Real processes on this host: they work in the run's directory (and `tail` holds its log open for reading), which
is weak evidence (a leftover of an earlier attempt does the same) and proves no life. The verdict already counted none
of them alive; the live-run record called them the live run all the same ("live run: pid N: works in …" beside
"no process of the run is alive", and a JSON record `identified: true`). Now both say the same thing, and a real
writer still makes the live run, with the viewers beside it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import run_cli
from tests.simhost import wait_until

pytestmark = pytest.mark.slow


@contextmanager
def _started(argv: list[str], cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _report(run: Path) -> dict[str, Any]:
    res = run_cli("report", "--json", str(run))
    assert res.returncode in (0, 1, 2, 3), res.stderr
    return dict(json.loads(res.stdout))


def _holds_open(pid: int, path: Path) -> bool:
    try:
        return any(str(path) == str(fd.resolve()) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def test_viewers_in_the_run_directory_are_not_the_live_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "trainer.log"
    log.write_text("step 1 loss 0.5\nstep 2 loss 0.4\n")
    (run / "rlwatch.yaml").write_text("training:\n  logs: ['*.log']\ngpu:\n  backend: none\n")
    with (
        _started(["tail", "-f", "trainer.log"], run) as tail,
        _started([sys.executable, "-c", "import time; time.sleep(300)"], run) as idle,
    ):
        assert wait_until(lambda: _holds_open(tail.pid, log.resolve()), 10)
        out = _report(run)
        live, state = out["live_run"], out["run_state"]
        assert {m["pid"] for m in live["members"]} >= {tail.pid, idle.pid}  # still listed, with their evidence
        assert live["identified"] is False
        assert "prove no life" in live["why_unknown"] and f"pid {tail.pid}: tail -f trainer.log" in live["why_unknown"]
        assert state["state"] == "stopped"
        assert "only work in its directory" in state["why"] and "works in its directory or" not in state["why"]

        # A process that writes the log is the live run; the viewers stay beside it, as weak members.
        code = "import time; f = open('trainer.log', 'a'); time.sleep(300)"
        with _started([sys.executable, "-c", code], run) as writer:
            assert wait_until(lambda: _holds_open(writer.pid, log.resolve()), 10)
            live = _report(run)["live_run"]
            assert live["identified"] is True
            evidence = {m["pid"]: m["evidence"] for m in live["members"]}
            assert evidence[writer.pid].startswith("writes trainer.log")
            assert tail.pid in evidence
