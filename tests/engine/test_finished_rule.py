"""Issue 41: a run is finished only when its outermost counter reached its total or the framework says so. A nested
bar at its end (a GRPO run's rollout bar at 32/32 inside step 56 of 2290, whose thread says it hung there) is not
the run's end; the bar that counts the run's steps, at its total, is."""

from __future__ import annotations

from pathlib import Path

from rlwatch.common.state import Snapshot
from tests.looks import look_once, written_an_hour_ago


def _after_the_fact(tmp_path: Path, text: str) -> Snapshot:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text(text)
    written_an_hour_ago(log)
    return look_once(run)


def _rollout(step: int) -> str:
    bar = "".join(
        f"rollout: {100 * i // 32:3d}%|{'█' * (10 * i // 32):10s}| {i}/32 [00:{i:02d}<00:30,  1.30s/it]\n"
        for i in (8, 16, 32)
    )
    return f"{bar}step {step}/2290 | loss 0.41 | reward 0.12 | 41.2s/step\n"


def test_a_nested_bar_at_its_end_finishes_nothing(tmp_path: Path) -> None:
    text = "".join(_rollout(step) for step in range(50, 57)) + _rollout(57).split("step 57")[0]
    snap = _after_the_fact(tmp_path, text)
    tr = snap.training
    assert tr is not None and (tr.last_step, tr.total_steps) == (56, 2290), tr
    assert snap.run_state is not None and snap.run_state.state != "finished", snap.run_state


def test_the_bar_counting_the_steps_at_its_total_is_the_end(tmp_path: Path) -> None:
    text = (
        "".join(
            f"{100 * n // 150:3d}%|{'█' * (10 * n // 150):10s}| {n}/150 [01:{n % 60:02d}<00:01,  1.50it/s]\n"
            for n in range(140, 151)
        )
        + "Model weights saved in out/model.safetensors\n"
    )
    snap = _after_the_fact(tmp_path, text)
    tr = snap.training
    assert tr is not None and (tr.last_step, tr.total_steps) == (150, 150), tr
    assert snap.run_state is not None and snap.run_state.state == "finished", snap.run_state
    assert "reached its end" in snap.run_state.why
