"""The audit log: one JSON line per record, from threads and processes alike, and it never breaks an action."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.remedy.actions.audit import AuditLog, jsonable
from rlwatch.remedy.actions.identity import Ident
from rlwatch.remedy.actions.stopper import StoppedProcess, StopReport


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_records_are_json_lines_with_an_offset_time(tmp_path: Path) -> None:
    clock = FakeClock()
    log = AuditLog(tmp_path / "deep" / "audit.jsonl", clock)
    target = Ident(4242, 1_763_716_000.25)
    assert log.record("kill-zombies", "plan", targets=[target], cmdline=("python", "train.py; rm -rf /\n"))
    clock.advance(1.5)
    assert log.record("kill-zombies", "result", ok=True, message="done")
    first, second = records(tmp_path / "deep" / "audit.jsonl")
    assert first["action"] == "kill-zombies" and first["event"] == "plan"
    assert first["targets"] == [{"pid": 4242, "create_time": 1_763_716_000.25}]
    assert first["cmdline"] == ["python", "train.py; rm -rf /\n"]
    when = datetime.fromisoformat(str(first["time"]))
    assert when.utcoffset() is not None
    assert when.timestamp() == pytest.approx(clock.time() - 1.5)
    assert datetime.fromisoformat(str(second["time"])).timestamp() == pytest.approx(clock.time())
    assert second["ok"] is True
    assert log.error is None


def test_stop_reports_and_odd_values_serialise(tmp_path: Path) -> None:
    report = StopReport(
        Ident(7, 1.0),
        (StoppedProcess(Ident(7, 1.0), ("sleep", "9"), ("SIGTERM", "SIGCONT"), "exited after SIGTERM"),),
    )
    log = AuditLog(tmp_path / "a.jsonl", FakeClock())
    assert log.record("restart-workers", "signal", report=report, nan=math.nan, path=tmp_path, time="mine")
    (rec,) = records(tmp_path / "a.jsonl")
    assert rec["report"]["processes"][0]["signals"] == ["SIGTERM", "SIGCONT"]  # type: ignore[index]
    assert rec["nan"] is None
    assert rec["path"] == str(tmp_path)
    assert rec["field_time"] == "mine"
    assert jsonable({1: {2, 3}}) in ({"1": [2, 3]}, {"1": [3, 2]})


def test_appends_never_truncate(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"earlier": true}\n')
    AuditLog(path, FakeClock()).record("resume", "spawn", argv=["python", "launch.py"])
    assert [next(iter(r)) for r in records(path)] == ["earlier", "time"]


@pytest.mark.parametrize("blocker", ["directory at the path", "file where the directory should be"])
def test_unwritable_path_returns_false_with_an_error(tmp_path: Path, blocker: str) -> None:
    if blocker == "directory at the path":
        path = tmp_path / "audit.jsonl"
        path.mkdir()
    else:
        (tmp_path / "runs").write_text("")
        path = tmp_path / "runs" / "audit.jsonl"
    log = AuditLog(path, FakeClock())
    assert log.record("kill-zombies", "plan", targets=[]) is False
    assert log.error is not None
    assert log.error.startswith(f"audit log {path}: ")
    assert "\n" not in log.error


def test_threads_each_write_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, FakeClock())

    def burst(n: int) -> None:
        for i in range(50):
            log.record("restart-workers", "signal", thread=n, i=i, cmdline=["x" * 500])

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = records(path)
    assert len(got) == 300
    assert {(r["thread"], r["i"]) for r in got} == {(n, i) for n in range(6) for i in range(50)}


@pytest.mark.slow
def test_two_processes_appending_at_once(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    writer = (
        "import sys\n"
        "from pathlib import Path\n"
        "from rlwatch.remedy.actions.audit import AuditLog\n"
        "from rlwatch.common.clock import SystemClock\n"
        "log = AuditLog(Path(sys.argv[1]), SystemClock())\n"
        "for i in range(300):\n"
        "    assert log.record('resume', 'signal', writer=sys.argv[2], i=i, pad='y' * 3000)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(path), name], env=env) for name in ("a", "b")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    got = records(path)
    assert len(got) == 600
    assert {(r["writer"], r["i"]) for r in got} == {(w, i) for w in "ab" for i in range(300)}
