"""Learning metrics from the run's own lines (TRL dicts, verl step lines, AReaL's stats table, OpenRLHF's bar) and the
findings that say learning broke: non-finite values and for how long, spikes, reward collapse, KL blowing up, entropy
collapsing, responses cut at the length limit; each with the step it began at and the checkpoint before it."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import (
    CheckpointInfo,
    CheckpointState,
    LearningState,
    LogLine,
    MetricPoint,
    Snapshot,
)
from rlwatch.config.models import EventsConfig, LearningConfig
from rlwatch.engine.diagnosis import Context, diagnose
from rlwatch.engine.diagnosis.learning import checkpoint_before
from rlwatch.logs.events import EventCounter, build_kinds
from rlwatch.logs.learning import LearningTracker, parse_postfix, parse_verl
from rlwatch.logs.tailer import Chunk
from rlwatch.sim.formats import fancy_grid

NAN = math.nan


def track(lines: Sequence[str], step_of: object = None) -> LearningState | None:
    """Lines through the real event counter, delivered to the tracker as the engine wires it."""
    counter = EventCounter(build_kinds(EventsConfig()), FakeClock())
    tracker = LearningTracker(step_of=step_of)  # type: ignore[arg-type]
    for kind in ("step", "_reward", "_learning"):
        counter.subscribe(kind, tracker.on_line)
    counter.feed(Chunk("/run/train.log", ("\n".join(lines) + "\n").encode(), 1, len(lines)))
    return tracker.state()


def snap(
    series: dict[str, Sequence[float]], *, steps: Sequence[int] | None = None, ckpt: Sequence[int] = ()
) -> Snapshot:
    points = {
        name: tuple(MetricPoint(step=(steps[i] if steps else i + 1), value=v, time=NAN) for i, v in enumerate(vals))
        for name, vals in series.items()
    }
    latest = CheckpointInfo(f"/run/output/checkpoint-{ckpt[-1]}", ckpt[-1], None, None, None, None) if ckpt else None
    return Snapshot(
        host="h",
        time=0.0,
        profile="trl",
        run_dir="/run",
        learning=LearningState(series=points, keys={}),
        checkpoint=CheckpointState(latest, len(ckpt), tuple(ckpt)),
    )


def codes(s: Snapshot, cfg: LearningConfig | None = None) -> dict[str, str]:
    return {f.code: f.severity.value for f in diagnose(s, Context(learning=cfg or LearningConfig()))}


# -------------------------------------------------------------------------------------------------------- parsing
def test_trl_dicts_with_bare_nan_and_the_training_trackers_step() -> None:
    steps = iter([40, 41, 42])
    state = track(
        [
            "{'loss': 0.2051, 'grad_norm': nan, 'learning_rate': 9.77e-06, 'epoch': 0.53}",
            "{'loss': '0.0', 'grad_norm': 'nan', 'reward': '0.5', 'completions/clipped_ratio': '1', 'epoch': '0.53'}",
            "{'train_runtime': 1.0, 'train_loss': 0.1, 'epoch': 1.0}",
            "{'loss': 0.1, 'kl': 0.01, 'entropy': 2.5, 'completion_length': 232.8, 'epoch': 0.54}",
        ],
        step_of=lambda: next(steps),
    )
    assert state is not None and state.steps_exact
    assert [(p.step, p.value) for p in state.series["loss"]] == [(40, 0.2051), (41, 0.0), (42, 0.1)]
    assert [p.step for p in state.series["grad_norm"]] == [40, 41] and all(
        math.isnan(p.value) for p in state.series["grad_norm"]
    )
    assert state.series["clip_ratio"][0].value == 1.0 and state.keys["response_length"] == "completion_length"


def test_without_a_step_number_steps_are_ordinals() -> None:
    state = track(["{'loss': 1.0, 'epoch': 0.1}", "{'loss': 2.0, 'epoch': 0.2}"])
    assert state is not None and not state.steps_exact and [p.step for p in state.series["loss"]] == [1, 2]


def test_verl_step_lines() -> None:
    line = (
        "(TaskRunner pid=3591053) step:59 - global_seqlen/min:16268.000 - actor/kl_loss:nan - actor/entropy_loss:nan "
        "- actor/pg_loss:nan - actor/ppo_kl:0.001 - actor/grad_norm:nan - critic/score/mean:0.104 - "
        "response_length/mean:512.25 - response_length/clip_ratio:0.97 - perf/cpu_memory_used_gb:43.031 -"
    )
    step, values = parse_verl(line)  # type: ignore[misc]
    assert step == 59 and values["critic/score/mean"] == 0.104 and math.isnan(values["actor/pg_loss"])
    state = track([line, "step:0 - val-core/openai/gsm8k/acc/mean@1:0.508"])
    assert state is not None
    assert state.keys == {
        "loss": "actor/pg_loss",
        "grad_norm": "actor/grad_norm",
        "reward": "critic/score/mean",
        "kl": "actor/kl_loss",  # the KL to the reference, before the PPO ratio's
        "entropy": "actor/entropy_loss",
        "response_length": "response_length/mean",
        "clip_ratio": "response_length/clip_ratio",
    }
    assert {p.step for pts in state.series.values() for p in pts} == {59}  # the validation line holds none of them


def test_areal_stats_table_after_its_step_line() -> None:
    table = fancy_grid(
        [
            ("ppo_actor/task_reward/avg", 0.61),
            ("ppo_actor/update/actor_loss/avg", 0.012),
            ("ppo_actor/update/approx_kl/avg", 0.002),
            ("ppo_actor/update/entropy/avg", 0.44),
            ("ppo_actor/update/grad_norm", NAN),
            ("ppo_actor/no_eos_ratios/avg", 0.1),
            ("timeperf/update_weights", 9.5),
        ]
    )
    state = track(["StatsLogger INFO: Epoch 1/2 Step 7/30 Train step 7/60 done.", *table.splitlines()])
    assert state is not None
    assert {name: (pts[-1].step, pts[-1].value) for name, pts in state.series.items() if name != "grad_norm"} == {
        "reward": (7, 0.61),
        "loss": (7, 0.012),
        "kl": (7, 0.002),
        "entropy": (7, 0.44),
        "clip_ratio": (7, 0.1),
    }
    assert math.isnan(state.series["grad_norm"][-1].value)


def test_openrlhf_bar_postfix() -> None:
    bar = (
        "Train epoch [1/1]: 100%|██████████| 8/8 [00:10<00:00,  1.31s/it, act_loss=nan, reward=0.5, return=0.5, "
        "gen_len=512, tot_len=1.02e+3, kl=0.00123, act_lr=3e-7, grad_norm=0.123]"
    )
    assert parse_postfix(bar)["tot_len"] == 1020.0
    state = track([bar, bar])  # a bar drawn twice is one point
    assert state is not None and len(state.series["loss"]) == 1 and math.isnan(state.series["loss"][0].value)


@given(st.text(max_size=300))
def test_the_tracker_never_raises(text: str) -> None:
    tracker = LearningTracker()
    for line in (text, "step:1 - " + text, "{'loss': " + text, "act_loss=" + text, "│" + text + "│ a │ b │"):
        tracker.on_line(LogLine("/x", 1, line, NAN))


# ------------------------------------------------------------------------------------------------------- findings
def test_nan_loss_for_enough_steps_is_critical_with_its_start_and_the_checkpoint_before() -> None:
    s = snap(
        {"loss": [0.5, 0.4, 0.3, NAN, NAN, NAN, NAN, NAN, NAN]},
        steps=[5, 10, 15, 20, 25, 30, 35, 40, 45],
        ckpt=[10, 20, 40],
    )
    (f,) = diagnose(s, Context())
    assert f.code == "learning_nonfinite" and f.severity.value == "critical"
    assert "NaN for the last 6 logged steps, since step 20" in f.message
    assert "checkpoint before it, at step 10" in f.message  # the one at 20 was saved with the NaN already there


def test_a_lone_nan_grad_norm_is_fp16_loss_scaling_not_a_finding() -> None:
    assert codes(snap({"grad_norm": [1.0, 1.1, NAN, 1.0, 1.2], "loss": [1.0] * 5})) == {}
    assert codes(snap({"grad_norm": [1.0, NAN, NAN]}), LearningConfig(nonfinite_steps=2)) == {
        "learning_nonfinite": "critical"
    }
    inf = diagnose(snap({"reward": [0.1, math.inf, math.inf, math.inf]}), Context())
    assert "infinite" in inf[0].message


def test_a_spike_far_above_the_rolling_median() -> None:
    grads = [1.0, 1.2, 0.9, 1.1, 1.0, 0.95, 1.05, 1.0, 1.1, 1.0, 40.0]
    (f,) = diagnose(snap({"grad_norm": grads}), Context())
    assert f.code == "learning_spike" and "spiked to 40 at step 11" in f.message
    assert codes(snap({"grad_norm": [*grads[:-1], 5.0]})) == {}  # 5x is not 10x
    assert codes(snap({"loss": [0.0] * 10 + [3.0]})) == {}  # no median to compare with (GRPO's loss of 0)


def test_reward_collapse_after_it_rose() -> None:
    rising = [0.1, 0.2, 0.35, 0.5, 0.6, 0.65, 0.7, 0.7, 0.72, 0.71]
    collapsed = [*rising, 0.05, 0.02, 0.0, 0.01, 0.0, 0.0]
    (f,) = diagnose(snap({"reward": collapsed}), Context())
    assert f.code == "learning_reward_collapse" and "since step 11" in f.message
    assert codes(snap({"reward": rising})) == {}
    assert codes(snap({"reward": [0.0] * 20})) == {}  # never rose: nothing collapsed
    assert codes(snap({"reward": [*rising, 0.05, 0.02, 0.6]})) == {}  # a dip, not a collapse


def test_kl_entropy_and_clipping() -> None:
    assert codes(snap({"kl": [0.01] * 5 + [2.0, 3.0, 5.0, 9.0, 20.0]})) == {"learning_kl_blowup": "warning"}
    assert codes(snap({"kl": [0.01] * 5 + [2.0, 3.0, 0.1, 9.0, 20.0]})) == {}
    assert codes(snap({"entropy": [0.8, 0.6, 0.4, 0.005, 0.004, 0.003, 0.002, 0.001]})) == {
        "learning_entropy_collapse": "warning"
    }
    assert codes(snap({"entropy": [0.005] * 8})) == {}  # low from the start: nothing collapsed
    clip = snap({"clip_ratio": [0.2, 0.5, 0.95, 0.97, 1.0, 1.0, 0.99], "response_length": [100.0] * 6 + [1024.0]})
    (f,) = diagnose(clip, Context())
    assert f.code == "learning_length_clipped" and "99% of responses" in f.message and "mean length 1024" in f.message


def test_the_checkpoint_before_a_step() -> None:
    hf = snap({}, ckpt=[5, 10, 15])
    assert checkpoint_before(hf, 12).endswith("at step 10")
    assert checkpoint_before(hf, 10).endswith("at step 5")  # saved at the very step it began: already bad
    assert checkpoint_before(hf, 3).startswith("No checkpoint was saved before it")
    areal = Snapshot(
        host="h",
        time=0.0,
        profile="areal",
        run_dir="/r",
        checkpoint=CheckpointState(CheckpointInfo("/c/epoch0epochstep9globalstep9", 9, 0, 9, None, None), 2, (4, 9)),
    )
    # AReaL names checkpoints 0-based (globalstep9 holds the printed "Train step 10")
    assert checkpoint_before(areal, 11).endswith("at step 9 (/c/epoch0epochstep9globalstep9)")
    assert checkpoint_before(areal, 10).endswith("at step 4")
