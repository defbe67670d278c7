"""A Ray worker that died with SYSTEM_ERROR (Ray only saw its connection drop) is named as the OOM killer's victim
when a kill line the logs counted names its pid: the line read by the kernel's parser (rlwatch.logs.foreign.kernel),
as every other reader of it does. The lines are the saved real kernel logs' (tests/real/host/kernel)."""

from __future__ import annotations

import math
from pathlib import Path

from rlwatch.common.state import EventSummary, LogLine, RayActor, RayFailure, Severity, Snapshot
from rlwatch.engine.diagnosis.ray import kernel_words

NOW = 1_763_700_000.0
KERNEL_LOGS = Path(__file__).resolve().parents[1] / "real" / "host" / "kernel"


def _kill_line(name: str) -> str:
    return next(line for line in (KERNEL_LOGS / name).read_text().splitlines() if "Killed process" in line)


def _words(pid: int, line: str) -> str | None:
    recent = (LogLine("/run/raylet.out", 40, line, math.nan),)
    ev = EventSummary("oom_kill", Severity.CRITICAL, 1, None, None, 0.0, 1, {"/run/raylet.out": 1}, recent)
    actor = RayActor("WorkerDict", pid, exit_type="SYSTEM_ERROR", state="DEAD")
    failure = RayFailure("actor_died", "its worker died", "ActorDiedError", actor=actor)
    snap = Snapshot(host="h", time=NOW, profile="auto", run_dir="/run", events={"oom_kill": ev})
    return kernel_words(snap, failure)


def test_the_kill_line_naming_the_workers_pid_names_the_killer() -> None:
    for name, pid in (("oom-killer-dmesg.log", 698405), ("oom-old-kernel-ctime.log", 28438)):
        words = _words(pid, _kill_line(name))
        assert words == f"the kernel's OOM killer killed pid {pid} (raylet.out:40)", name


def test_a_kill_of_another_pid_is_not_the_workers() -> None:
    line = _kill_line("oom-killer-dmesg.log")  # Killed process 698405
    assert _words(69840, line) is None  # a pid its digits begin with
    assert _words(6984051, line) is None
