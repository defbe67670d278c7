"""Checkpoint discovery against real directory trees laid out as AReaL and transformers write them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.sources import checkpoints
from rlwatch.sources.checkpoints import (
    CheckpointScanner,
    measure_dir,
    parse_areal_name,
    parse_hf_name,
    parse_trainer_state,
)


def _write(path: Path, size: int, mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _areal_ckpt(trial: Path, name: str, e: int, s: int, g: int, sizes: tuple[int, ...], mtime: float) -> Path:
    d = trial / name / f"epoch{e}epochstep{s}globalstep{g}"
    for i, size in enumerate(sizes):
        _write(d / f"model-0000{i}-of-0000{len(sizes)}.safetensors", size, mtime)
    _write(d / "config.json", 10, mtime)
    os.utime(d, (mtime, mtime))
    return d


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_parse_areal_name() -> None:
    assert parse_areal_name("epoch1epochstep934globalstep1869") == (1, 934, 1869)
    assert parse_areal_name("epoch0epochstep0globalstep0") == (0, 0, 0)
    for bad in (
        "epoch1epochstep934globalstep1869x",
        "epoch1epochstep934globalstep1869\n",
        "epoch-1epochstep934globalstep1869",
        "Epoch1epochstep934globalstep1869",
        "epoch1epochstep934",
        "epoch١epochstep934globalstep1869",  # a non-ASCII digit
        "recover_checkpoint",
        "",
    ):
        assert parse_areal_name(bad) is None, bad


def test_parse_hf_name() -> None:
    assert parse_hf_name("checkpoint-25") == 25
    assert parse_hf_name("checkpoint-0") == 0
    for bad in ("checkpoint-", "checkpoint-25\n", "checkpoint-2a", "checkpoint--3", "xcheckpoint-5", "checkpoint-٣"):
        assert parse_hf_name(bad) is None, bad


def _trainer_state(global_step: int, max_steps: int) -> str:
    history = [
        {"epoch": 0.01, "step": 10, "loss": 0.5, "reward": 0.125, "grad_norm": 0.3},
        {"epoch": 0.02, "step": 20, "loss": 0.25, "reward": 0.375, "grad_norm": 0.2},
        {"epoch": 0.02, "step": 20, "train_runtime": 100.0, "train_loss": 0.3},
    ]
    state = {
        "global_step": global_step,
        "max_steps": max_steps,
        "epoch": 0.02,
        "logging_steps": 10,
        "log_history": history,
        "best_metric": None,
    }
    return json.dumps(state, indent=2, sort_keys=True)


def test_parse_trainer_state_takes_last_reward_and_loss() -> None:
    summary = parse_trainer_state(_trainer_state(20, 500))
    assert summary is not None
    assert summary["global_step"] == 20
    assert summary["max_steps"] == 500
    assert summary["logging_steps"] == 10
    assert summary["reward"] == 0.375
    assert summary["loss"] == 0.25
    assert summary["epoch"] == 0.02


def test_parse_trainer_state_rejects_bad_input() -> None:
    text = _trainer_state(20, 500)
    assert parse_trainer_state(text[: len(text) // 2]) is None  # half-written
    assert parse_trainer_state("[1, 2]") is None
    assert parse_trainer_state("") is None
    odd = parse_trainer_state(json.dumps({"global_step": True, "max_steps": -1, "epoch": "x", "log_history": 3}))
    assert odd is not None
    assert (odd["global_step"], odd["max_steps"], odd["epoch"], odd["reward"]) == (None, None, None, None)
    nan = parse_trainer_state('{"global_step": 3, "log_history": [{"reward": NaN, "loss": Infinity}]}')
    assert nan is not None
    assert nan["reward"] is None
    assert nan["loss"] is None


def test_areal_layout_incident_one(tmp_path: Path, clock: FakeClock) -> None:
    trial = tmp_path / "checkpoints" / "root" / "gsm8k-grpo" / "trial0"
    old = clock.time() - 7200
    new = clock.time() - 3600
    _areal_ckpt(trial, "default", 0, 934, 934, (100, 200), old)
    latest_dir = _areal_ckpt(trial, "default", 1, 934, 1869, (300, 400), new)
    _areal_ckpt(trial, "critic", 1, 934, 1869, (5,), new + 10)  # same step, critic: not the one to show
    newest_file = _write(latest_dir / "generation_config.json", 7, new + 30)
    os.utime(latest_dir, (new, new))
    # Big, irrelevant trees that must be skipped, even if something in them looks like a checkpoint.
    _write(trial / "default" / "recover_checkpoint" / "epoch9epochstep0globalstep9999" / "x", 1)
    _write(trial / "default" / "weight_update" / "epoch9epochstep1globalstep9998" / "y", 1)
    _write(trial / "recover_info" / "step_info.json", 80)

    scanner = CheckpointScanner([tmp_path / "checkpoints"], clock)
    state = scanner.scan()

    assert state.latest is not None
    assert state.latest.path == str(latest_dir)
    assert (state.latest.epoch, state.latest.epoch_step, state.latest.global_step) == (1, 934, 1869)
    assert state.latest.size_bytes == 300 + 400 + 10 + 7
    assert state.latest.saved_at == pytest.approx(os.stat(newest_file).st_mtime)
    assert state.count == 2  # the "default" series only
    assert scanner.error is None


def test_latest_is_chosen_by_step_not_by_mtime(tmp_path: Path, clock: FakeClock) -> None:
    out = tmp_path / "out"
    _write(out / "checkpoint-40" / "model.safetensors", 40, clock.time() - 5000)
    _write(out / "checkpoint-5" / "model.safetensors", 5, clock.time() - 10)
    state = CheckpointScanner([out], clock).scan()
    assert state.latest is not None
    assert state.latest.global_step == 40
    assert state.count == 2


def test_hf_layout_with_nested_dirs_and_trainer_state(tmp_path: Path, clock: FakeClock) -> None:
    out = tmp_path / "grpo-out"
    _write(out / "checkpoint-10" / "model.safetensors", 10)
    latest = out / "checkpoint-20"
    _write(latest / "model.safetensors", 1000)
    _write(latest / "optimizer.pt", 500)
    _write(latest / "global_step20" / "zero_pp_rank_0_mp_rank_00_optim_states.pt", 250)
    (latest / "trainer_state.json").write_text(_trainer_state(20, 500))
    state_size = (latest / "trainer_state.json").stat().st_size
    os.symlink(latest / "model.safetensors", latest / "link.safetensors")  # a link is not counted twice

    scanner = CheckpointScanner([out], clock)
    state = scanner.scan()
    assert state.latest is not None
    assert state.latest.global_step == 20
    assert state.latest.epoch is None
    assert state.latest.size_bytes == 1000 + 500 + 250 + state_size
    summary = scanner.trainer_state()
    assert summary is not None
    assert summary["max_steps"] == 500
    assert summary["reward"] == 0.375

    (latest / "trainer_state.json").write_text(_trainer_state(20, 750))
    os.utime(latest / "trainer_state.json", (clock.time() + 5, clock.time() + 5))
    assert (scanner.trainer_state() or {}).get("max_steps") == 750  # re-read when it changes


def test_root_may_be_the_checkpoint_itself(tmp_path: Path, clock: FakeClock) -> None:
    d = _areal_ckpt(tmp_path, "default", 0, 4, 4, (64,), clock.time() - 100)
    state = CheckpointScanner([d], clock).scan()
    assert state.latest is not None
    assert state.latest.global_step == 4
    assert state.count == 1


def test_size_is_cached_while_the_checkpoint_is_unchanged(tmp_path: Path, clock: FakeClock) -> None:
    settled = clock.time() - 3600
    d = _areal_ckpt(tmp_path / "trial", "default", 0, 2, 2, (100,), settled)
    scanner = CheckpointScanner([tmp_path], clock)
    first = scanner.scan().latest
    assert first is not None
    assert first.size_bytes == 110

    # Grow a file in place (no directory entry changes) and put its mtime back: a cached size must be reused.
    with open(d / "model-00000-of-00001.safetensors", "ab") as fh:
        fh.write(b"\0" * 50)
    os.utime(d / "model-00000-of-00001.safetensors", (settled, settled))
    os.utime(d, (settled, settled))
    cached = scanner.scan().latest
    assert cached is not None
    assert cached.size_bytes == 110

    # A new file changes the directory's mtime: the cache entry is stale and the walk runs again.
    _write(d / "tokenizer.json", 40)
    fresh = scanner.scan().latest
    assert fresh is not None
    assert fresh.size_bytes == 100 + 50 + 10 + 40


def test_a_checkpoint_still_being_written_is_measured_again(tmp_path: Path, clock: FakeClock) -> None:
    now = clock.time()
    d = _areal_ckpt(tmp_path / "trial", "default", 0, 2, 2, (100,), now)
    scanner = CheckpointScanner([tmp_path], clock)
    first = scanner.scan().latest
    assert first is not None
    assert first.size_bytes == 110
    with open(d / "model-00000-of-00001.safetensors", "ab") as fh:
        fh.write(b"\0" * 50)
    os.utime(d, (now, now))
    clock.advance(2)
    second = scanner.scan().latest
    assert second is not None
    assert second.size_bytes == 160


def test_only_the_latest_of_many_is_sized(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    trial = tmp_path / "trial"
    for g in range(300):
        (trial / "default" / f"epoch0epochstep{g}globalstep{g}").mkdir(parents=True)
    measured: list[str] = []
    real = checkpoints.measure_dir

    def spy(path: str) -> tuple[int, float] | None:
        measured.append(path)
        return real(path)

    monkeypatch.setattr(checkpoints, "measure_dir", spy)
    state = CheckpointScanner([tmp_path], clock).scan()
    assert state.count == 300
    assert state.latest is not None
    assert state.latest.global_step == 299
    assert measured == [str(trial / "default" / "epoch0epochstep299globalstep299")]


def test_latest_deleted_during_the_scan_falls_back(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    trial = tmp_path / "trial"
    keep = _areal_ckpt(trial, "default", 0, 1, 1, (10,), clock.time() - 100)
    doomed = _areal_ckpt(trial, "default", 0, 2, 2, (10,), clock.time() - 50)
    real = checkpoints.measure_dir

    def deleting(path: str) -> tuple[int, float] | None:
        if path == str(doomed):
            shutil.rmtree(doomed)  # a cleanup job removes it between listing and sizing
        return real(path)

    monkeypatch.setattr(checkpoints, "measure_dir", deleting)
    state = CheckpointScanner([tmp_path], clock).scan()
    assert state.latest is not None
    assert state.latest.path == str(keep)


def test_measure_dir_gives_up_when_the_dir_vanishes_mid_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "checkpoint-3"
    _write(d / "sub" / "a.bin", 10)
    _write(d / "b.bin", 10)
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if path == str(d / "sub"):
            shutil.rmtree(d)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert measure_dir(str(d)) is None


def test_missing_root_is_an_error_line_not_an_exception(tmp_path: Path, clock: FakeClock) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    scanner = CheckpointScanner([tmp_path / "nope", a_file], clock)
    state = scanner.scan()
    assert state.latest is None
    assert state.count == 0
    assert scanner.error is not None
    assert "file" in scanner.error  # a file where a directory should be
    assert scanner.trainer_state() is None


def test_a_dir_not_created_yet_is_no_error_but_one_that_vanished_is(tmp_path: Path, clock: FakeClock) -> None:
    out = tmp_path / "out"
    scanner = CheckpointScanner([out], clock)
    scanner.scan()
    assert scanner.error is None  # before the first save: the engine's "does not exist (yet)" line covers it
    _write(out / "checkpoint-5" / "model.bin", 3)
    assert scanner.scan().latest is not None and scanner.error is None
    shutil.rmtree(out)
    assert scanner.scan().latest is None
    assert scanner.error == f"checkpoint dir not found: {out}"


def test_symlink_loops_are_not_followed(tmp_path: Path, clock: FakeClock) -> None:
    _write(tmp_path / "out" / "checkpoint-7" / "model.bin", 3)
    os.symlink(tmp_path, tmp_path / "out" / "loop")
    state = CheckpointScanner([tmp_path], clock).scan()
    assert state.count == 1


def test_several_trials_at_the_same_step_prefer_the_newest(tmp_path: Path, clock: FakeClock) -> None:
    root = tmp_path / "checkpoints" / "u" / "exp"
    _areal_ckpt(root / "trial0", "default", 0, 5, 5, (1,), clock.time() - 9000)
    newer = _areal_ckpt(root / "trial1", "default", 0, 5, 5, (1,), clock.time() - 60)
    state = CheckpointScanner([tmp_path], clock).scan()
    assert state.latest is not None
    assert state.latest.path == str(newer)
    assert state.count == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads through permission bits")
def test_unreadable_dir_is_reported(tmp_path: Path, clock: FakeClock) -> None:
    locked = tmp_path / "locked"
    _write(locked / "checkpoint-1" / "m.bin", 1)
    locked.chmod(0)
    try:
        scanner = CheckpointScanner([tmp_path], clock)
        state = scanner.scan()
        assert state.latest is None
        assert scanner.error is not None
        assert "locked" in scanner.error
    finally:
        locked.chmod(0o755)


def test_permission_error_while_listing_is_reported(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    _write(locked / "checkpoint-1" / "m.bin", 1)
    _write(tmp_path / "open" / "checkpoint-2" / "m.bin", 1)
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if path == str(locked):
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    scanner = CheckpointScanner([tmp_path], clock)
    state = scanner.scan()
    assert state.latest is not None
    assert state.latest.global_step == 2
    assert scanner.error == f"cannot list {locked}: Permission denied"


def test_the_walk_is_capped_and_says_so(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a", "b", "c", "d", "e"):
        (tmp_path / name / "deeper").mkdir(parents=True)
    _write(tmp_path / "out" / "checkpoint-1" / "m.bin", 1)
    monkeypatch.setattr(checkpoints, "MAX_DIRS", 3)
    scanner = CheckpointScanner([tmp_path], clock)
    scanner.scan()
    assert scanner.error is not None
    assert "stopped looking" in scanner.error


def test_unrepresentable_root_is_just_missing(clock: FakeClock) -> None:
    scanner = CheckpointScanner([Path("bad\0name")], clock)
    assert scanner.scan().latest is None
    assert scanner.error is None  # missing like any directory not made yet: the config check names it


def test_trainer_state_names_its_last_training_log() -> None:
    """The last training log of log_history (not the run's summary, not an evaluation), by which the training
    tracker finds the dict the Trainer printed for that step."""
    history = [
        {"loss": 0.5, "reward": 0.1, "epoch": 0.1, "step": 10},
        {"eval_loss": 0.4, "epoch": 0.1, "step": 10},
        {"loss": 0.25, "epoch": 0.2, "step": 20},
        {"train_runtime": 12.0, "train_loss": 0.3, "epoch": 0.2, "step": 20},
    ]
    summary = parse_trainer_state(json.dumps({"global_step": 20, "log_history": history}))
    assert summary is not None and summary["last_logged"] == (20, 0.2, 0.25)
    assert parse_trainer_state(json.dumps({"global_step": 20}))["last_logged"] is None  # type: ignore[index]
