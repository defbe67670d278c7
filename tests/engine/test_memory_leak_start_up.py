"""A leak is growth sustained across the run's steps, never its start-up: live on the GPU host (the two-node job,
tests/real/job-2node-1gpu-watched/job-stall) `memory_leak` fired on torchrun 63 s after it started — "trainer (pid 3)
grows 919.1 MB/h, now 538.8 MB" on node-a, 1.7 GB/h on node-b — its ranks' first steps 6 to 13 s in, the run hung
at step 10 a minute later."""

from __future__ import annotations

from rlwatch.common.state import ProcessInfo, RunState, Snapshot, TrainingState
from rlwatch.engine.diagnosis import Context
from rlwatch.engine.diagnosis.memory import memory

NOW = 1_795_908_874.0  # 23:34:34, when it fired
MB = 1024**2


def _trainer(age_s: float, growth_mb_h: float, rss_mb: float) -> ProcessInfo:
    return ProcessInfo(
        3,
        NOW - age_s,
        "trainer",
        "trainer",
        int(rss_mb * MB),
        growth_mb_h * MB,
        NOW - age_s,
        0,
        ("torchrun",),
        "/r",
        "u",
    )


def _snap(p: ProcessInfo, state: str, last_step_at: float, step: int = 10) -> Snapshot:
    return Snapshot(
        host="node-a",
        time=NOW,
        profile="generic",
        run_dir="/r",
        processes=(p,),
        training=TrainingState(step, 100, None, None, False, last_step_at, last_step_at),
        run_state=RunState(state, "x", last_step_at),
    )


def _leaks(s: Snapshot) -> list[str]:
    return [f.message for f in memory(s, Context()) if f.code == "memory_leak"]


def test_torch_s_start_up_growth_is_no_leak() -> None:
    # The real shape: 63 s old, its steps 10 at +13 s; then still stepping, or hung (as it was a minute later).
    assert _leaks(_snap(_trainer(63, 919.1, 538.8), "progressing", NOW - 50)) == []
    assert _leaks(_snap(_trainer(75, 1740, 538.5), "hung", NOW - 60)) == []
    # Ten minutes in, the fit's window still holds the start-up's rise.
    assert _leaks(_snap(_trainer(600, 919.1, 700), "progressing", NOW - 5, step=500)) == []


def test_growth_sustained_across_steps_is_a_leak() -> None:
    (said,) = _leaks(_snap(_trainer(3600, 919.1, 4000), "progressing", NOW - 5, step=3000))
    assert said.startswith("trainer (pid 3) grows")


def test_a_still_run_s_growth_is_not_called_a_leak() -> None:
    assert _leaks(_snap(_trainer(3600, 919.1, 4000), "hung", NOW - 300, step=3000)) == []
