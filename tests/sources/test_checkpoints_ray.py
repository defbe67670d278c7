"""verl's and OpenRLHF's checkpoints: the folder their tracker file names is the one a resume starts from; a folder
past it is a save that has not finished; the actor's series before the critic's at the same step."""

from __future__ import annotations

from pathlib import Path

from rlwatch.common.clock import FakeClock
from rlwatch.sources.checkpoints import CheckpointScanner, parse_tracker

REAL = Path(__file__).resolve().parents[1] / "real" / "ray"


def _scan(*roots: Path) -> tuple[str | None, int | None, str | None, int]:
    state = CheckpointScanner(list(roots), FakeClock()).scan()
    latest = state.latest
    if latest is None:
        return None, None, None, state.count
    name = Path(latest.path).name
    return name, latest.global_step, Path(latest.tracker).name if latest.tracker else None, state.count


def test_the_real_layouts() -> None:
    assert _scan(REAL / "verl-actor-sigkill" / "checkpoints") == (
        "global_step_4",
        4,
        "latest_checkpointed_iteration.txt",
        1,
    )
    assert _scan(REAL / "verl-resume" / "checkpoints") == ("global_step_12", 12, "latest_checkpointed_iteration.txt", 3)
    orl = REAL / "openrlhf-healthy" / "checkpoints" / "ckpt"
    name, step, tracker, _count = _scan(orl)
    assert (name, step, tracker) == ("global_step8", 8, "latest")


def test_a_folder_past_the_tracker_is_no_resume_point(tmp_path: Path) -> None:
    for n in (4, 8):
        (tmp_path / f"global_step_{n}" / "actor").mkdir(parents=True)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")  # step 8's save never finished
    assert _scan(tmp_path)[:3] == ("global_step_4", 4, "latest_checkpointed_iteration.txt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("8")
    assert _scan(tmp_path)[:3] == ("global_step_8", 8, "latest_checkpointed_iteration.txt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("garbage")  # unreadable: the newest folder, no tracker
    assert _scan(tmp_path)[:3] == ("global_step_8", 8, None)


def test_deepspeed_actor_before_critic(tmp_path: Path) -> None:
    for series in ("_actor", "_critic"):
        (tmp_path / series / "global_step6").mkdir(parents=True)
        (tmp_path / series / "latest").write_text("global_step6")
    name, step, tracker, _ = _scan(tmp_path)
    latest = CheckpointScanner([tmp_path], FakeClock()).scan().latest
    assert latest is not None and Path(latest.path).parent.name == "_actor"
    assert (name, step, tracker) == ("global_step6", 6, "latest")


def test_tracker_texts() -> None:
    assert parse_tracker("12", "verl") == 12 and parse_tracker("12\n", "verl") == 12
    assert parse_tracker("global_step8", "deepspeed") == 8
    assert parse_tracker("global_step_8", "deepspeed") is None and parse_tracker("-1", "verl") is None
