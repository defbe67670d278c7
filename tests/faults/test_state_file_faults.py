"""The run's own state files under fault: recover info and trainer state half-written or corrupt, checkpoint
directories deleted while they are being scanned."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from rlwatch.report import to_json_dict, to_text
from tests.faults.conftest import FaultRow, make_engine, source_error

pytestmark = pytest.mark.faults

STEP_INFO = {"epoch": 1, "epoch_step": 934, "global_step": 1869, "steps_per_epoch": 935}


def step_info_text(info: dict[str, int]) -> str:
    return json.dumps(info, indent=4)  # as AReaL's rank 0 writes it, in place


@pytest.mark.parametrize("damage", ["half-written", "corrupt"])
def test_step_info(tmp_path: Path, fault_row: Callable[[str, str], FaultRow], damage: str) -> None:
    row = fault_row(
        f"files: step_info.json {damage}",
        "recover shown as not available with the reason (never a guessed step); back as soon as it is whole",
    )
    recover = tmp_path / "ckpt" / "recover_info" / "step_info.json"
    recover.parent.mkdir(parents=True)
    recover.write_text(step_info_text(STEP_INFO))
    engine = make_engine(
        tmp_path, {"training": {"checkpoint_dirs": ["ckpt"], "recover_info": "ckpt/recover_info/step_info.json"}}
    )
    snap = engine.collect_once()
    assert snap.recover is not None and snap.recover.resume_global_step == 1870
    whole = step_info_text(STEP_INFO)
    recover.write_text(whole[: len(whole) // 2] if damage == "half-written" else "\x00\xff{garbage")
    engine.sample()
    snap = engine.build()
    error = source_error(snap, "recover")
    assert snap.recover is None and error is not None and "incomplete or corrupt" in error
    assert to_json_dict(snap)["recover"] is None
    assert "recover: recover info incomplete or corrupt" in to_text(snap)
    row.saw(f"recover null; report says {error.split(':')[0]!r}")
    recover.write_text(step_info_text({**STEP_INFO, "epoch_step": 0, "epoch": 2, "global_step": 1870}))
    engine.sample()
    snap = engine.build()
    engine.stop()
    assert snap.recover is not None and snap.recover.resume_global_step == 1871
    assert source_error(snap, "recover") is None
    row.saw("rewritten whole: resume step 1871, error cleared")


def test_step_info_rewritten_while_read(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "files: step_info.json rewritten in place while it is read",
        "every read is either a whole record or 'not available'; never an exception or a wrong step",
    )
    recover = tmp_path / "recover_info" / "step_info.json"
    recover.parent.mkdir(parents=True)
    recover.write_text(step_info_text(STEP_INFO))
    engine = make_engine(tmp_path, {"training": {"recover_info": "recover_info/step_info.json"}})
    stop = threading.Event()
    written: set[int] = {1869}

    def writer() -> None:
        step = 1869
        while not stop.is_set():
            step += 1
            text = step_info_text({**STEP_INFO, "epoch_step": step % 935, "global_step": step})
            written.add(step)
            with recover.open("w") as f:  # truncate, then two writes: a reader can land between them
                f.write(text[:20])
                f.flush()
                f.write(text[20:])

    thread = threading.Thread(target=writer)
    thread.start()
    whole = broken = 0
    try:
        for _ in range(300):
            engine.sample()
            snap = engine.build()
            if snap.recover is None:
                assert source_error(snap, "recover") is not None
                broken += 1
            else:
                assert snap.recover.global_step in written
                whole += 1
    finally:
        stop.set()
        thread.join()
        engine.stop()
    assert whole > 0
    row.saw(f"300 reads during rewrites: {whole} whole records, {broken} 'not available', 0 wrong, 0 exceptions")


@pytest.mark.parametrize("damage", ["half-written", "corrupt"])
def test_trainer_state(tmp_path: Path, fault_row: Callable[[str, str], FaultRow], damage: str) -> None:
    row = fault_row(
        f"files: trainer_state.json {damage}",
        "the checkpoint still listed, the state file named as unreadable, last known total kept; clears when whole",
    )
    ckpt = tmp_path / "out" / "checkpoint-25"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"\0" * 1000)
    state = {"global_step": 25, "max_steps": 250, "logging_steps": 5, "log_history": [{"loss": 0.5, "step": 25}]}
    (ckpt / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    engine = make_engine(tmp_path, {"training": {"checkpoint_dirs": ["out"]}})
    snap = engine.collect_once()
    assert snap.training is not None and snap.training.total_steps == 250
    text = json.dumps({**state, "global_step": 30}, indent=2, sort_keys=True)
    (ckpt / "trainer_state.json").write_text(text[: len(text) // 2] if damage == "half-written" else "[1, 2")
    engine.sample()
    snap = engine.build()
    error = source_error(snap, "checkpoints")
    assert error is not None and "trainer_state.json" in error
    assert snap.checkpoint is not None and snap.checkpoint.latest is not None
    assert snap.checkpoint.latest.global_step == 25 and snap.training is not None and snap.training.total_steps == 250
    row.saw("checkpoint-25 still the latest; 'checkpoints: trainer_state.json incomplete or corrupt'; total 250 kept")
    (ckpt / "trainer_state.json").write_text(text)
    engine.sample()
    snap = engine.build()
    engine.stop()
    assert source_error(snap, "checkpoints") is None
    row.saw("whole again: error cleared")


@pytest.mark.slow
def test_checkpoints_deleted_while_scanned(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "files: a checkpoint directory deleted while being scanned",
        "no error escapes; the latest checkpoint that still exists is shown; none once all are gone; found again",
    )
    root = tmp_path / "out"
    for step in range(10, 410, 10):
        d = root / f"checkpoint-{step}"
        (d / "shards").mkdir(parents=True)
        for i in range(30):
            (d / "shards" / f"part-{i}.bin").write_bytes(b"\0" * 100)
    engine = make_engine(tmp_path, {"training": {"checkpoint_dirs": ["out"]}})
    snap = engine.collect_once()
    assert snap.checkpoint is not None and snap.checkpoint.latest is not None
    assert snap.checkpoint.latest.global_step == 400

    def deleter() -> None:
        # File by file, newest checkpoint first: the scanner keeps sizing a directory that is emptying under it.
        for step in range(400, 0, -10):
            ckpt = root / f"checkpoint-{step}"
            for part in sorted((ckpt / "shards").iterdir()):
                part.unlink()
                os.sched_yield()
            shutil.rmtree(ckpt, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)

    thread = threading.Thread(target=deleter)
    thread.start()
    seen: list[int] = []
    scans = 0
    while thread.is_alive():
        engine.sample()
        snap = engine.build()
        latest = snap.checkpoint.latest if snap.checkpoint else None
        if latest is not None and latest.global_step is not None:
            seen.append(latest.global_step)
        scans += 1
    thread.join()
    engine.sample()
    snap = engine.build()
    assert snap.checkpoint is not None and snap.checkpoint.latest is None and snap.checkpoint.count == 0
    error = source_error(snap, "checkpoints")
    assert error is not None and "not found" in error
    assert seen == sorted(seen, reverse=True)  # never a checkpoint that was already gone coming back
    row.saw(
        f"{scans} scans while 1200 files were deleted, latest shown falling {max(seen, default=0)}→"
        f"{min(seen, default=0)}; then none and 'checkpoint dir not found: …/out'"
    )
    (root / "checkpoint-500").mkdir(parents=True)
    (root / "checkpoint-500" / "model.safetensors").write_bytes(b"\0" * 10)
    engine.sample()
    snap = engine.build()
    engine.stop()
    assert snap.checkpoint is not None and snap.checkpoint.latest is not None
    assert snap.checkpoint.latest.global_step == 500 and source_error(snap, "checkpoints") is None
    row.saw("re-created: checkpoint-500 found, error cleared")
