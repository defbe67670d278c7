"""Failures the fresh text used to miss (tests/real/fresh, sources.yaml): the output files schedulers and launchers
write, Slurm's own records, fp16 loss-scale collapse, a traceback cut before its exception line. Each excerpt is put
alone in a run directory an hour old, discovered as `rlwatch report` discovers it, and read after the fact."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from rlwatch.common.state import Severity, Snapshot
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.logs.shapes import shape_of

FRESH = Path(__file__).resolve().parent / "real" / "fresh"


def _report(tmp_path: Path, name: str) -> Snapshot:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(FRESH / name, run / name)
    an_hour_ago = time.time() - 3600
    os.utime(run / name, (an_hour_ago, an_hour_ago))
    cfg, _ = resolve_config(run, None, "auto")
    assert cfg.training.logs == [name]  # discovered: not only *.log
    engine = Engine(cfg, run)
    try:
        return engine.collect_once()
    finally:
        engine.stop()


def _codes(snap: Snapshot) -> dict[str, str]:
    return {f.code: f.message for f in snap.findings}


def test_a_slurm_oom_kill_in_the_jobs_err_file_is_a_crash_by_the_oom_killer(tmp_path: Path) -> None:
    snap = _report(tmp_path, "error_191.err")
    assert snap.run_state is not None and snap.run_state.state == "crashed", snap.run_state
    assert "oom-kill event" in snap.run_state.why and "OOM killer" in snap.run_state.why
    assert "oom_kill" in _codes(snap)


def test_srun_and_slurmstepd_oom_in_slurm_out(tmp_path: Path) -> None:
    snap = _report(tmp_path, "slurm-37205392.out")
    assert snap.run_state is not None and snap.run_state.state == "crashed", snap.run_state
    assert "oom_kill" in _codes(snap)


def test_a_job_cancelled_at_its_time_limit_was_stopped_from_outside(tmp_path: Path) -> None:
    snap = _report(tmp_path, "slurm-494583.out")
    assert snap.run_state is not None and snap.run_state.state == "stopped", snap.run_state
    assert "DUE TO TIME LIMIT" in snap.run_state.why
    assert "TIME LIMIT" in _codes(snap)["slurm_cancelled"]


def test_a_node_failure_is_named() -> None:
    line = (FRESH / "salloc-node-failure.out").read_text().strip()
    shape = shape_of(line.split(": ", 1)[1])
    assert shape is not None and shape.detail == "slurm node failure"
    slurmstepd = "*** JOB 1449 ON gpu-07 CANCELLED AT 2025-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG ***"
    shape = shape_of(slurmstepd)
    assert shape is not None and shape.detail == "slurm node failure" and shape.signal is None


def test_loss_scale_halved_down_to_nothing_is_a_collapse(tmp_path: Path) -> None:
    snap = _report(tmp_path, "apex-loss-scale-collapse.log")
    found = [f for f in snap.findings if f.code == "loss_scale_collapse"]
    assert found and found[0].severity == Severity.CRITICAL, snap.findings
    assert "9.967194951097568e-206" in found[0].message


def test_the_overflows_at_the_start_of_an_fp16_run_are_not_a_failure(tmp_path: Path) -> None:
    snap = _report(tmp_path, "deepspeed-overflows-at-start.log")
    assert not {"loss_scale_collapse", "loss_scale_overflow_storm"} & set(_codes(snap)), snap.findings


def test_a_traceback_cut_before_its_exception_line_is_a_crash_not_a_stop(tmp_path: Path) -> None:
    snap = _report(tmp_path, "cut-traceback.log")
    assert snap.run_state is not None and snap.run_state.state == "crashed", snap.run_state
    assert "exception line is not in the log" in snap.run_state.why
