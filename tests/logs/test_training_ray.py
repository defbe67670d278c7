"""Progress of verl and OpenRLHF runs from their own lines, through the whole counter as the engine wires it."""

from __future__ import annotations

import math

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import EventsConfig
from rlwatch.logs.events import EventCounter, build_kinds
from rlwatch.logs.tailer import Chunk
from rlwatch.logs.training import TrainingTracker

T = "\x1b[36m(TaskRunner pid=16754)\x1b[0m "


def _track(lines: list[str], live: bool = True) -> TrainingTracker:
    clock = FakeClock()
    counter = EventCounter(build_kinds(EventsConfig()), clock)
    tracker = TrainingTracker(clock, stall_s=600, weight_update_timeout_s=120)
    for kind in ("step", "_reward", "weight_update", "_finished", "_progress"):
        counter.subscribe(kind, tracker.on_step)
    lineno = 1
    for line in lines:
        clock.advance(1.0)
        data = (line + "\n").encode()
        counter.feed(Chunk("/run/driver.log", data, lineno, 1, backlog_mtime=None if live else clock.time() + 99))
        lineno += 1
    return tracker


def test_verl_full_precision_and_three_decimals() -> None:
    s = _track(
        [
            f"{T}Total training steps: 12",
            f"{T}step:0 - val-core/openai/gsm8k/acc/mean@1:0.2965",
            f"{T}step:1 - actor/pg_loss:0.0423 - critic/rewards/mean:0.25 - critic/score/mean:0.1",
            f"{T}step:2 - actor/pg_loss:0.042 - critic/rewards/mean:0.500",
            f"{T}step:3 - global_seqlen/min:340538.000 - critic/score/mean:0.750",
        ]
    ).state()
    assert (s.last_step, s.total_steps) == (3, 12)
    assert s.rewards == (0.25, 0.5, 0.75)  # critic/rewards/mean first, critic/score/mean when it is the only one
    assert s.steps_per_hour is not None and math.isclose(s.steps_per_hour, 3600.0)  # a step a second
    assert not s.finished


def test_validation_before_training_is_no_step() -> None:
    s = _track([f"{T}step:0 - val-core/openai/gsm8k/acc/mean@1:0.2965"]).state()
    assert s.last_step is None and s.last_step_at is None


def test_an_undated_backlog_takes_its_speed_from_the_bar() -> None:
    s = _track(
        [
            f"{T}step:4 - actor/pg_loss:0.01",
            f"{T}\rTraining Progress:  42%|████▏     | 5/12 [00:05<00:08,  1.17s/it]",
            f"{T}step:5 - actor/pg_loss:0.01",
        ],
        live=False,
    ).state()
    assert s.last_step == 5 and s.total_steps == 12
    assert s.steps_per_hour is not None and math.isclose(s.steps_per_hour, 3600 / 1.17)


def test_a_resume_appended_to_the_same_log_and_verls_end() -> None:
    s = _track(
        [f"{T}step:{n} - actor/pg_loss:0.01" for n in (1, 2, 3, 4, 5)]
        + [f"{T}Setting global step to 4", f"{T}step:5 - actor/pg_loss:0.01", f"{T}step:6 - actor/pg_loss:0.01"]
        + [f"{T}('Final validation metrics: None')"]
    ).state()
    assert s.last_step == 6 and s.finished


def test_openrlhf_global_steps_and_the_jobs_success() -> None:
    line = (
        "\x1b[36m(PPOTrainer pid=31052)\x1b[0m INFO 11-26 13:14:26 openrlhf_shaped.py:587] ✨ Global step {n}: "
        "{{'critic_loss': 0.08, 'policy_loss': -0.01, 'reward': 0.5, 'rollout/reward_mean': {r}}}"
    )
    s = _track([line.format(n=1, r=0.25), line.format(n=2, r=0.375)]).state()
    assert s.last_step == 2 and s.rewards == (0.25, 0.375) and not s.finished
    done = _track(
        [line.format(n=1, r=0.25), "2026-11-26 13:14:41,221\tSUCC cli.py:67 -- Job 'raysubmit_MWp' succeeded"]
    ).state()
    assert done.finished
