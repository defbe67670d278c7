"""Real ranks synchronising through a barrier (bench/stack_ranks.py), read by the real sampler with py-spy: a rank
that stops joining is a hang named with both stacks, whatever the log prints (a heartbeat, a format rlwatch was not
taught); a rank that spends 0.6 s more per step is named as the straggler. Windows are small; the engine's run is
found by its own membership."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rlwatch.common.clock import SystemClock
from rlwatch.common.state import RunState, Snapshot
from rlwatch.config.models import StacksConfig, Thresholds
from rlwatch.discover.load import load_config
from rlwatch.engine.diagnosis.base import Context
from rlwatch.engine.diagnosis.stacks import stack_run_state, stragglers
from rlwatch.engine.engine import Engine
from rlwatch.sources.sampler import StackSampler
from rlwatch.sources.stacks import StackTarget, py_spy
from tests.simhost import wait_until

RANKS = Path(__file__).resolve().parents[2] / "bench" / "stack_ranks.py"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed")]


@contextmanager
def _ranks(run: Path, mode: str, n: int = 2) -> Iterator[list[int]]:
    argv = [sys.executable, str(RANKS), "--ranks", str(n), "--mode", mode, "--log", "train.log", "--hang-after", "5"]
    proc = subprocess.Popen(argv, cwd=run, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        yield list(json.loads(proc.stdout.readline())["ranks"])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _readable(pid: int) -> bool:
    out = subprocess.run(
        [str(py_spy()), "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, text=True, check=False
    )
    if out.returncode != 0 and "ermission" in out.stderr:
        pytest.skip("ptrace is not permitted here")
    return out.returncode == 0


def _snap(sampler: StackSampler) -> Snapshot:
    return Snapshot(host="h", time=SystemClock().time(), profile="generic", run_dir=".", sampling=sampler.state())


def test_a_rank_that_stops_joining_is_hung_within_the_window_with_both_stacks(tmp_path: Path) -> None:
    ctx = Context(thresholds=Thresholds(hang_floor_s=3.0))
    with _ranks(tmp_path, "hang") as pids:
        wait_until(lambda: _readable(pids[1]), 20, 0.2)
        targets = [StackTarget(pid, f"rank {i}") for i, pid in enumerate(pids)]
        sampler = StackSampler(lambda: targets, SystemClock(), interval_s=0.3, cpu_budget=1.0)
        sampler.start()
        try:
            unknown = RunState("unknown", "no progress seen yet")
            # On a loaded machine the first reads in the socket may straddle its entry; what must hold is that the
            # rank blocked in it is named, read long enough, as one whose main thread never woke.
            rs = wait_until(
                lambda: (
                    r
                    if (r := stack_run_state(_snap(sampler), ctx, unknown)).state == "hung" and "never woke" in r.why
                    else None
                ),
                60,
                0.2,
            )
        finally:
            sampler.stop()
        log = (tmp_path / "train.log").read_text()
    assert "step 5/1000" in log and "step 6/1000" not in log and "heartbeat" in log.rsplit("step 5/1000", 1)[1]
    assert "rank 1 has been in fetch_batch_from_service (bench/stack_ranks.py:" in rs.why, rs.why
    assert "its main thread never woke" in rs.why and "rank 0 waits for it in all_reduce (" in rs.why, rs.why
    assert {line.split(":", 1)[0] for line in rs.evidence} == {"rank 0", "rank 1"}


# record: windows of 4 s hold 3 samples each (its first comes a second in), three windows in 12 s: on a loaded machine
# a window may come late, and two in 8 s left fewer than five reads for rounds on end. dump: ten reads of each rank at
# the least, over 10 s, so a loaded machine's few reads (a rank starved of CPU in its own step) cannot decide where it
# stands.
@pytest.mark.parametrize(("method", "interval", "window", "reads"), [("dump", 0.3, 10.0, 10), ("record", 4.0, 12.0, 5)])
def test_a_rank_slower_by_0_6_s_a_step_is_named_the_straggler(
    tmp_path: Path, method: str, interval: float, window: float, reads: int
) -> None:
    ctx = Context(stacks=StacksConfig(straggler_window_s=window, straggler_min_samples=reads))
    with _ranks(tmp_path, "straggler") as pids:
        wait_until(lambda: _readable(pids[1]), 20, 0.2)
        targets = [StackTarget(pid, f"rank {i}") for i, pid in enumerate(pids)]
        sampler = StackSampler(lambda: targets, SystemClock(), interval_s=interval, cpu_budget=1.0, method=method)
        sampler.start()
        try:
            # The first report can come from few reads on a loaded machine; what must hold is that, read long
            # enough, the straggler is named with what only it does.
            report = wait_until(
                lambda: r if (r := stragglers(_snap(sampler), ctx)) and "decode_and_augment" in r.message else None,
                90,
                0.2,
            )
            # ... and never a hang: the ranks wake at every step.
            assert stack_run_state(_snap(sampler), ctx, RunState("unknown", "")).state == "unknown"
        finally:
            sampler.stop()
    assert report.slow == ("rank 1",), report
    assert report.message.startswith("rank 0 spends "), report.message
    assert "waiting in all_reduce for rank 1, which is in decode_and_augment (bench/stack_ranks.py:" in report.message


def test_the_engine_samples_its_runs_ranks_and_declares_the_hang_whatever_the_log_prints(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(
        "profile: generic\ninterval_s: 0.5\ngpu: {backend: none}\ntraining: {logs: [train.log]}\n"
        'host: {kernel_log: "off"}\nthresholds: {hang_floor_s: 3}\nstacks: {interval_s: 0.3, cpu_budget: 1.0}\n'
    )
    cfg = load_config(run / "rlwatch.yaml")
    with _ranks(run, "hang") as pids:
        wait_until(lambda: _readable(pids[1]), 20, 0.2)
        engine = Engine(cfg, run)
        engine.start()
        try:
            # The log's own silence may say "hung" first (its floor is 3 s here); the stacks then say where.
            snap = wait_until(
                lambda: (
                    s
                    if (s := engine.snapshot()).run_state
                    and s.run_state.state == "hung"
                    and "rank 1 has been in" in s.run_state.why
                    else None
                ),
                90,
                0.2,
            )
        finally:
            engine.stop()
    assert snap.run_state is not None
    why = snap.run_state.why
    assert "rank 1 has been in fetch_batch_from_service" in why and "rank 0 waits for it in all_reduce" in why, why
    assert any(f.code == "hung" for f in snap.findings)
    assert snap.sampling is not None and {p.rank for p in snap.sampling.processes} >= {0, 1}
