"""AReaL recover info: parsing, the resume rule, finding the file, and checking it against the checkpoints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import CheckpointInfo, RecoverState
from rlwatch.sources.checkpoints import CheckpointScanner
from rlwatch.sources.recover import (
    StepInfo,
    agree,
    find_step_info,
    next_step,
    parse_step_info,
    read_recover,
)

INCIDENT = {"epoch": 1, "epoch_step": 934, "global_step": 1869, "steps_per_epoch": 935}


def _dump(path: Path, data: object, mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4))  # as AReaL's RecoverInfo.dump writes it
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _recover(path: str, epoch: int, epoch_step: int, global_step: int, spe: int) -> RecoverState:
    nxt = next_step(StepInfo(epoch, epoch_step, global_step, spe))
    return RecoverState(path, epoch, epoch_step, global_step, spe, nxt.epoch, nxt.epoch_step, nxt.global_step)


def _ckpt(path: str, g: int, e: int | None = None, s: int | None = None) -> CheckpointInfo:
    return CheckpointInfo(path=path, global_step=g, epoch=e, epoch_step=s, saved_at=None, size_bytes=None)


def test_parse_step_info_incident_one() -> None:
    assert parse_step_info(json.dumps(INCIDENT, indent=4)) == StepInfo(1, 934, 1869, 935)


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(INCIDENT, indent=4)[:-5],  # caught half-written
        "",
        "null",
        "[1, 934, 1869, 935]",
        json.dumps({**INCIDENT, "steps_per_epoch": 0}),
        json.dumps({**INCIDENT, "epoch": -1}),
        json.dumps({**INCIDENT, "global_step": True}),
        json.dumps({**INCIDENT, "epoch_step": 934.0}),
        json.dumps({**INCIDENT, "epoch_step": "934"}),
        json.dumps({**INCIDENT, "epoch_step": 935}),  # not a position inside a 935-step epoch
        json.dumps({k: v for k, v in INCIDENT.items() if k != "global_step"}),
        "\x00\x01garbage",
    ],
)
def test_parse_step_info_rejects(text: str) -> None:
    assert parse_step_info(text) is None


def test_parse_step_info_tolerates_extra_keys() -> None:
    assert parse_step_info(json.dumps({**INCIDENT, "note": "x"})) == StepInfo(1, 934, 1869, 935)


def test_next_step_rolls_over_at_the_end_of_an_epoch() -> None:
    assert next_step(StepInfo(1, 934, 1869, 935)) == StepInfo(2, 0, 1870, 935)


def test_next_step_inside_an_epoch() -> None:
    assert next_step(StepInfo(0, 5, 5, 935)) == StepInfo(0, 6, 6, 935)


def test_next_step_with_one_step_per_epoch() -> None:
    assert next_step(StepInfo(3, 0, 3, 1)) == StepInfo(4, 0, 4, 1)


def test_read_recover_from_the_file(tmp_path: Path) -> None:
    path = _dump(tmp_path / "recover_info" / "step_info.json", INCIDENT, mtime=1_763_701_440.0)
    state, error = read_recover(path)
    assert error is None
    assert state is not None
    assert (state.epoch, state.epoch_step, state.global_step, state.steps_per_epoch) == (1, 934, 1869, 935)
    assert (state.resume_epoch, state.resume_epoch_step, state.resume_global_step) == (2, 0, 1870)
    assert state.saved_at == 1_763_701_440.0
    assert state.path == str(path)


def test_read_recover_from_a_checkpoints_root(tmp_path: Path) -> None:
    path = _dump(tmp_path / "checkpoints" / "u" / "exp" / "trial0" / "recover_info" / "step_info.json", INCIDENT)
    state, error = read_recover(tmp_path / "checkpoints")
    assert error is None
    assert state is not None
    assert state.path == str(path)


def test_read_recover_errors_are_one_line(tmp_path: Path) -> None:
    missing, err1 = read_recover(tmp_path / "recover_info" / "step_info.json")
    assert missing is None
    assert err1 is not None
    assert "not found" in err1

    corrupt_path = tmp_path / "step_info.json"
    corrupt_path.write_text('{"epoch": 1, "epoch_st')
    corrupt, err2 = read_recover(corrupt_path)
    assert corrupt is None
    assert err2 is not None
    assert "corrupt" in err2

    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    nothing, err3 = read_recover(empty_dir)
    assert nothing is None
    assert err3 is not None
    assert "no recover_info/step_info.json" in err3

    big = tmp_path / "big" / "step_info.json"
    big.parent.mkdir()
    big.write_bytes(b" " * (2 * 1024 * 1024))
    huge, err4 = read_recover(big)
    assert huge is None
    assert err4 is not None
    assert "too large" in err4

    for err in (err1, err2, err3, err4):
        assert "\n" not in err


def test_find_step_info_picks_the_newest_trial(tmp_path: Path) -> None:
    exp = tmp_path / "checkpoints" / "u" / "exp"
    _dump(exp / "trial0" / "recover_info" / "step_info.json", INCIDENT, mtime=1000.0)
    newest = _dump(exp / "trial1" / "recover_info" / "step_info.json", INCIDENT, mtime=2000.0)
    _dump(exp / "trial1" / "default" / "epoch0epochstep1globalstep1" / "recover_info" / "step_info.json", {}, 3000.0)
    assert find_step_info(tmp_path) == newest


def test_find_step_info_given_the_recover_info_dir(tmp_path: Path) -> None:
    path = _dump(tmp_path / "recover_info" / "step_info.json", INCIDENT)
    assert find_step_info(tmp_path / "recover_info") == path
    assert find_step_info(tmp_path / "nothing-here") is None


def test_agree_incident_one_on_a_real_tree(tmp_path: Path) -> None:
    trial = tmp_path / "checkpoints" / "root" / "gsm8k-grpo" / "trial0"
    (trial / "default" / "epoch1epochstep934globalstep1869").mkdir(parents=True)
    (trial / "default" / "epoch0epochstep934globalstep934").mkdir(parents=True)
    _dump(trial / "recover_info" / "step_info.json", INCIDENT)
    latest = CheckpointScanner([tmp_path / "checkpoints"], FakeClock()).scan().latest
    recover, error = read_recover(tmp_path / "checkpoints")
    assert error is None
    assert recover is not None
    assert agree(recover, latest) is None


def test_agree_recover_behind_the_latest_checkpoint() -> None:
    rec = _recover("/r/exp/trial0/recover_info/step_info.json", 0, 900, 900, 935)
    problem = agree(rec, _ckpt("/r/exp/trial0/default/epoch1epochstep934globalstep1869", 1869, 1, 934))
    assert problem is not None
    assert "behind" in problem
    assert "969" in problem  # steps a resume would redo


def test_agree_recover_far_ahead_of_the_latest_checkpoint() -> None:
    rec = _recover("/r/exp/trial0/recover_info/step_info.json", 3, 100, 2905, 935)
    ckpt = _ckpt("/r/exp/trial0/default/epoch1epochstep934globalstep1869", 1869, 1, 934)
    problem = agree(rec, ckpt)
    assert problem is not None
    assert "ahead" in problem
    assert agree(rec, ckpt, ahead_tolerance=1100) is None


def test_agree_recover_slightly_ahead_is_normal() -> None:
    rec = _recover("/r/exp/trial0/recover_info/step_info.json", 1, 10, 945, 935)
    assert agree(rec, _ckpt("/r/exp/trial0/default/epoch0epochstep934globalstep934", 934, 0, 934)) is None


def test_agree_different_trials() -> None:
    rec = _recover("/r/exp/trial0/recover_info/step_info.json", 1, 934, 1869, 935)
    problem = agree(rec, _ckpt("/r/exp/trial1/default/epoch1epochstep934globalstep1869", 1869, 1, 934))
    assert problem is not None
    assert "different trials" in problem


def test_agree_same_step_different_positions() -> None:
    rec = _recover("/r/exp/trial0/recover_info/step_info.json", 1, 934, 1869, 935)
    problem = agree(rec, _ckpt("/r/exp/trial0/default/epoch0epochstep1869globalstep1869", 1869, 0, 1869))
    assert problem is not None
    assert "epoch" in problem


def test_agree_converts_hf_step_counts() -> None:
    rec = _recover("/out/recover_info/step_info.json", 0, 19, 19, 100)
    assert agree(rec, _ckpt("/out/checkpoint-20", 20)) is None
    problem = agree(rec, _ckpt("/out/checkpoint-30", 30))
    assert problem is not None
    assert "behind" in problem


def test_agree_without_a_checkpoint_has_nothing_to_say() -> None:
    rec = _recover("/r/exp/trial0/recover_info/step_info.json", 1, 934, 1869, 935)
    assert agree(rec, None) is None


def test_unrepresentable_path_is_an_error_line() -> None:
    assert find_step_info(Path("bad\0name")) is None
    state, error = read_recover(Path("bad\0name"))
    assert state is None
    assert error is not None
