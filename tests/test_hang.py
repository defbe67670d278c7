"""A hang is caught by its silence in progress, whatever the log keeps printing, and the stacks say where it waits.

The issue's case as written, scaled down: a trainer makes a step every 0.2 s, then hangs in a function that prints
"waiting for rollout workers..." on and on. `rlwatch watch --json` (the headless watchdog) declares the run hung
within its window — the larger of 5 step intervals and the floor (here 3 s, from the run's rlwatch.yaml) — and
reads the trainer's stack with py-spy once, which names the function it waits in; `rlwatch report` then shows the
same, with the dump kept under .rlwatch/stacks/. Before the hang the same run is progressing, never hung.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlwatch.sources.stacks import py_spy
from tests.simhost import Sim, settled, start, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed")]

TRAINER = """
import os, sys, time
log = open("train.log", "a", buffering=1)

def wait_for_rollout_workers():
    while True:
        print("waiting for rollout workers...", file=log)
        time.sleep(0.2)

step = 0
while not os.path.exists("stop-stepping"):  # steps until the watchdog has seen it progress, however slow its start
    step += 1
    print(f"Train step {step}/1000 done.", file=log)
    time.sleep(0.2)
open("hung-now", "w").close()
wait_for_rollout_workers()
"""
CONFIG = "profile: generic\ninterval_s: 0.3\ngpu: {backend: none}\ntraining: {logs: [train.log]}\n"
CONFIG += "thresholds: {hang_floor_s: 3}\nwatchdog: {heartbeat_s: 0.3}\n"


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


def test_a_run_that_prints_but_makes_no_progress_is_hung_with_its_stack(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(CONFIG)
    (run / "train.py").write_text(TRAINER)
    # Started from a shell, as a person starts it: the shell is where the run's family ends going up.
    trainer = subprocess.Popen(["bash", "-c", f"{sys.executable} train.py; true"], cwd=run, start_new_session=True)
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [sys.executable, "-m", "rlwatch", "watch", str(run), "--json"],
            stdout=sink,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
    try:
        progressing = wait_until(
            lambda: next((r for r in _records(out) if (r.get("run_state") or {}).get("state") == "progressing"), None),
            60,
        )
        assert progressing
        (run / "stop-stepping").touch()
        wait_until(lambda: (run / "hung-now").exists(), 30)
        hung_at = time.time()

        def hung() -> dict[str, Any] | None:
            return next((r for r in _records(out) if r.get("type") == "finding" and r.get("code") == "hung"), None)

        try:
            finding = wait_until(hung, 60)
        except AssertionError:
            raise AssertionError([r for r in _records(out) if r.get("type") not in ("event", "step")][-6:]) from None
        declared = time.time() - hung_at
        assert declared < 3 + 10, f"declared {declared:.1f}s after the last step (window 3 s, a few rounds of slack)"

        def with_stack() -> dict[str, Any] | None:
            report = json.loads(
                subprocess.run(
                    [sys.executable, "-m", "rlwatch", "report", str(run), "--json"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                ).stdout
            )
            return report if report.get("stacks") and report["stacks"]["summary"] else None

        report = wait_until(with_stack, 60)
        assert report["run_state"]["state"] == "hung" and report["status"] == "critical"
        stacks = report["stacks"]
        assert "wait_for_rollout_workers (train.py:" in stacks["summary"], stacks
        assert len(stacks["processes"]) == 1, stacks  # the trainer alone: not the shell, not this test
        assert stacks["kept_at"] and Path(stacks["kept_at"]).is_file()
        assert stacks["kept_at"].startswith(str(run / ".rlwatch" / "stacks"))
        assert trainer.poll() is None  # reading a stack signals nothing
        hung_text = next(f["message"] for f in report["findings"] if f["code"] == "hung")
        assert "no progress since" in hung_text and "wait_for_rollout_workers" in hung_text
        assert finding["severity"] == "critical"
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=30)
        os.killpg(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=30)


def test_the_simulated_hang_is_hung_with_both_ranks_stacks(tmp_path: Path, sims: list[Sim]) -> None:
    """`rlwatch sim hang`: torchrun's two ranks, rank 1 stops joining and prints a heartbeat, rank 0 waits in the
    all-reduce. The watchdog says hung once the run's cadence is past, and the stacks name where each rank stands."""
    sim = start(sims, tmp_path, "hang", 20)
    (sim.dir / "rlwatch.yaml").write_text(
        "profile: generic\ntraining: {logs: ['**/*.log']}\ngpu: {backend: none}\ninterval_s: 0.5\n"
        "thresholds: {hang_floor_s: 3}\nwatchdog: {heartbeat_s: 0.5}\n"
    )
    sim.wait(settled, timeout=60)  # rank 1 hung, rank 0 waiting in the collective
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [sys.executable, "-m", "rlwatch", "watch", str(sim.dir), "--json"], stdout=sink, stderr=subprocess.PIPE
        )
    try:
        wait_until(lambda: any(r.get("type") == "finding" and r.get("code") == "hung" for r in _records(out)), 60)

        def stacks() -> dict[str, Any] | None:
            rep = json.loads(
                subprocess.run(
                    [sys.executable, "-m", "rlwatch", "report", str(sim.dir), "--json"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                ).stdout
            )
            return rep if rep.get("stacks") and rep["stacks"]["groups"] else None

        rep = wait_until(stacks, 60)
        where = {label: g["where"] for g in rep["stacks"]["groups"] for label in g["processes"]}
        # Rank 0 waits where a real rank waits, in torch's all_reduce; rank 1 is the one it waits for, and the one
        # remedy reads rank 1's stack, not the waiting rank's.
        assert where.get("rank 0", "").startswith("all_reduce ("), rep["stacks"]
        assert where.get("rank 1", "").startswith("never_reaches_collective ("), rep["stacks"]
        assert "rank 0 waits for it in all_reduce" in rep["stacks"]["summary"], rep["stacks"]
        assert rep["run_state"]["state"] == "hung"
        rank1 = next(p["pid"] for p in rep["stacks"]["processes"] if p["label"] == "rank 1")
        assert rep["verdict"]["command"] == f"py-spy dump --pid {rank1}", rep["verdict"]
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=30)
        sim.stop()


UNDATED = """
import os, sys, time
log = open("train.log", "a", buffering=1)
for step in range(1, 1_000_000):
    print(f"Train step {step}/1000000 done.", file=log)
    print("rollout batch prepared", file=log)
    if os.path.exists("stop-stepping"):
        break
    time.sleep(0.1)
open("quiet-now", "w").close()
time.sleep(600)
"""


def test_a_one_shot_report_over_undated_steps_says_unknown_then_hung_once_the_log_is_quiet(tmp_path: Path) -> None:
    """A one-shot `report` sees the run at one moment, and a step line with no time of their own, followed by other
    lines, says only that it came by the file's last write (a step that is the file's last line came at it): while
    the log is fresh that is too little to tell progress from a hang ("unknown",
    never "progressing" nor "hung"); once the log has been quiet past the window with the trainer alive, it is hung."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(CONFIG)
    (run / "train.py").write_text(UNDATED)
    trainer = subprocess.Popen(["bash", "-c", f"{sys.executable} train.py; true"], cwd=run, start_new_session=True)

    def report() -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "rlwatch", "report", str(run), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    try:
        wait_until(lambda: (run / "train.log").exists() and (run / "train.log").stat().st_size > 200, 30)
        fresh = report()["run_state"]
        assert fresh["state"] == "unknown", fresh
        assert "at the latest" in fresh["why"] and "too little time" in fresh["why"], fresh
        (run / "stop-stepping").touch()
        wait_until(lambda: (run / "quiet-now").exists(), 30)
        quiet_from = (run / "train.log").stat().st_mtime
        wait_until(lambda: time.time() - quiet_from > 3.5, 10)  # the window (hang_floor_s 3) is past
        later = report()
        assert later["run_state"]["state"] == "hung", later["run_state"]
        assert later["status"] == "critical" and trainer.poll() is None
    finally:
        os.killpg(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=30)


def test_a_one_shot_report_over_the_simulated_hang_says_hung_from_when_an_earlier_read_saw_the_last_step(
    tmp_path: Path, sims: list[Sim]
) -> None:
    """`rlwatch sim hang`: rank 1's heartbeat keeps moving the log's modification time, the only date its timeless
    step lines had, so `report` said unknown (exit 0) for the whole hang. A report keeps when it saw the last step
    line; the next one, past the window, says hung from then, exit 1; a watchdog started later dates the hang from
    that look too, not from its own start."""
    sim = start(sims, tmp_path, "hang", 20)
    (sim.dir / "rlwatch.yaml").write_text(
        "profile: generic\ntraining: {logs: ['**/*.log']}\ngpu: {backend: none}\ninterval_s: 0.5\n"
        "thresholds: {hang_floor_s: 3}\nwatchdog: {heartbeat_s: 0.5}\n"
    )
    sim.wait(settled, timeout=60)

    def report() -> tuple[int, dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "-m", "rlwatch", "report", str(sim.dir), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.returncode, json.loads(done.stdout)

    first_at = time.time()
    rc, rep = report()
    if rep["run_state"]["state"] != "hung":  # the log was fresh: too little time since to tell
        assert rc == 3 and rep["status"] == "unknown", (rc, rep["run_state"])
    wait_until(lambda: time.time() - first_at > 3.5, 10)  # the window (hang_floor_s 3) past that look
    rc, rep = report()
    assert rep["run_state"]["state"] == "hung" and rc == 1, (rc, rep["run_state"])
    since = rep["run_state"]["since"]
    assert _epoch(since) <= first_at + 1, rep["run_state"]  # the first report's look, not the heartbeat's last write
    out = tmp_path / "watch.jsonl"
    watch_from = time.time()
    with out.open("wb") as sink:
        watch = subprocess.Popen(
            [sys.executable, "-m", "rlwatch", "watch", str(sim.dir), "--json"], stdout=sink, stderr=subprocess.PIPE
        )
    try:
        hung = wait_until(lambda: next((rs for rs in _states(out) if rs.get("state") == "hung"), None), 60)
        assert hung["since"] == since, (hung, since)
        assert _epoch(hung["since"]) < watch_from, hung
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.communicate(timeout=30)
        sim.stop()


def _states(out: Path) -> list[dict[str, Any]]:
    return [r["run_state"] for r in _records(out) if isinstance(r.get("run_state"), dict)]


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()
