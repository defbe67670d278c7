"""Training progress from AReaL and TRL log lines, fed the way the log engine feeds them."""

from __future__ import annotations

import math

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LogLine
from rlwatch.logs.areal_lines import parse_areal_step, parse_stats_row, parse_weight_update, reward_rank
from rlwatch.logs.training import TrainingTracker, parse_metrics

T0 = 1_763_716_800.0
AREAL = "(AReaL) {ts} StatsLogger INFO: Epoch {e}/5 Step {s}/935 Train step {g}/4675 done."
DISK = (
    "(AReaL) 20251121-09:{m:02d}:30.652 [RemoteInfEngine Rank 0] INFO: "
    "Loading weights from disk done in {d}s. Respond time: 2.19s."
)
UVICORN_SYNC = 'INFO:     127.0.0.1:49876 - "POST /reset_prefix_cache/ HTTP/1.1" 200 OK'


def fancy_grid(stats: dict[str, float], col: int = 4) -> list[str]:
    """The table AReaL prints after each step: tabulate fancy_grid, 4 pairs per row, filled column-major."""
    items = list(stats.items())
    rows_n = (len(items) + col - 1) // col
    rows: list[list[str]] = []
    for i in range(rows_n):
        row: list[str] = []
        for j in range(col):
            k = i + j * rows_n
            if k < len(items):
                row += [items[k][0], f"{items[k][1]:.4e}"]
        rows.append(row)
    width = max(len(c) for r in rows for c in r)
    cells = max(len(r) for r in rows)

    def border(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (width + 2) for _ in range(cells)) + right

    out = [border("╒", "╤", "╕", "═")]
    for n, row in enumerate(rows):
        padded = row + [""] * (cells - len(row))
        out.append("│ " + " │ ".join(c.ljust(width) for c in padded) + " │")
        out.append(border("├", "┼", "┤", "─") if n < len(rows) - 1 else border("╘", "╧", "╛", "═"))
    return out


class Feed:
    """Delivers lines to a tracker like the event counter does: every line to on_any_line, matches to handlers."""

    def __init__(self, tracker: TrainingTracker, path: str = "/run/logs/trainer.log") -> None:
        self.tracker = tracker
        self.path = path
        self.lineno = 0

    def __call__(self, text: str, t: float, *handlers: str) -> LogLine:
        self.lineno += 1
        line = LogLine(self.path, self.lineno, text, t)
        self.tracker.on_any_line(t)
        for name in handlers:
            getattr(self.tracker, f"on_{name}")(line)
        return line


def make(clock: FakeClock | None = None, **kw: object) -> TrainingTracker:
    args: dict[str, object] = {"stall_s": 600.0, "weight_update_timeout_s": 120.0}
    args.update(kw)
    return TrainingTracker(clock or FakeClock(T0), **args)  # type: ignore[arg-type]


def areal_step(g: int) -> str:
    e, s = divmod(g - 1, 935)
    return AREAL.format(ts="20251121-09:15:30.652", e=e + 1, s=s + 1, g=g)


def test_parse_areal_step() -> None:
    assert parse_areal_step("Epoch 2/5 Step 935/935 Train step 1870/4675 done.") == (1870, 4675)
    assert parse_areal_step("Train step 1870/4675") is None


def test_parse_metrics_accepts_strings_and_tqdm_prefixes() -> None:
    bar = " 12%|█▏        | 30/250 [01:02<07:38,  2.08s/it]"
    text = bar + "{'loss': '0.0123', 'reward': 0.375, 'note': 'x', 'epoch': 0.02}"
    assert parse_metrics(text) == {"loss": 0.0123, "reward": 0.375, "epoch": 0.02}
    assert parse_metrics("no dict here") is None
    assert parse_metrics("{'unclosed': 1") is None
    assert parse_metrics("{1, 2}") is None  # a set, not a dict


def test_parse_metrics_reads_bare_nan_and_inf() -> None:
    parsed = parse_metrics("{'loss': nan, 'grad_norm': -inf, 'reward': 0.5, 'text': 'nan inf'}")
    assert parsed is not None
    assert math.isnan(parsed["loss"])
    assert parsed["grad_norm"] == -math.inf
    assert parsed["reward"] == 0.5


def test_parse_stats_row_reads_several_pairs() -> None:
    row = (
        "│ ppo_actor/task_reward/avg │ 4.5000e-01 │ ppo_actor/update/grad_norm │ 1.2000e-01 "
        "│ rollout/reward │ 3.0000e-01 │"
    )
    assert parse_stats_row(row) == {
        "ppo_actor/task_reward/avg": 0.45,
        "ppo_actor/update/grad_norm": 0.12,
        "rollout/reward": 0.3,
    }
    assert parse_stats_row("╒══════╤══════╕") == {}


def test_reward_rank() -> None:
    assert reward_rank("ppo_actor/task_reward/avg") > reward_rank("rollout/reward") > reward_rank("task_reward/max")


def test_parse_weight_update() -> None:
    assert parse_weight_update(DISK.format(m=1, d="10.48")) == 10.48
    assert parse_weight_update("Loading weights from disk done") is None
    assert parse_weight_update(UVICORN_SYNC) is None  # a TRL sync is counted (weight_update) but has no duration


def test_areal_steps_total_and_speed() -> None:
    tracker = make()
    feed = Feed(tracker)
    for i, g in enumerate((1868, 1869, 1870)):
        feed(areal_step(g), T0 + 60 * i, "step")
    state = tracker.state(T0 + 120)
    assert state.last_step == 1870
    assert state.total_steps == 4675
    assert state.steps_per_hour == pytest.approx(2 * 3600 / 120)
    assert state.last_step_at == T0 + 120
    assert not state.stalled
    assert not state.finished


def test_speed_needs_two_steps() -> None:
    tracker = make()
    Feed(tracker)(areal_step(5), T0, "step")
    assert tracker.state(T0).steps_per_hour is None


def test_areal_reward_from_the_stats_table_one_per_step() -> None:
    tracker = make()
    feed = Feed(tracker)
    for g, reward in ((10, 0.25), (11, 0.45)):
        feed(areal_step(g), T0 + g, "step")
        feed("Stats (1/1):", T0 + g)
        stats = {
            "ppo_actor/advantages/avg": 0.0,
            "ppo_actor/task_reward/avg": reward,
            "ppo_actor/task_reward/max": 1.0,
            "ppo_actor/update/grad_norm": 0.12,
            "rollout/reward": reward / 10,
            "timeperf/train_step": 3.5,
            "timeperf/update_weights": 1.25,
        }
        for row in fancy_grid(stats, col=2):
            feed(row, T0 + g, "reward")
    state = tracker.state(T0 + 20)
    assert state.rewards == (0.25, 0.45)
    assert state.reward == 0.45
    assert state.weight_update_s == (1.25, 1.25)  # xccl mode: the step's timing stat


def test_a_better_reward_key_later_in_the_table_replaces_a_worse_one() -> None:
    tracker = make()
    feed = Feed(tracker)
    feed(areal_step(3), T0, "step")
    feed("│ rollout/reward │ 3.0000e-01 │ a │ 1 │", T0, "reward")
    feed("│ ppo_actor/task_reward/avg │ 4.5000e-01 │ b │ 2 │", T0, "reward")
    feed("│ rollout/reward │ 3.5000e-01 │ c │ 3 │", T0, "reward")
    assert tracker.state(T0).rewards == (0.45,)


def test_disk_weight_updates_are_kept_and_copies_are_not_counted_twice() -> None:
    tracker = make()
    trainer = Feed(tracker, "/run/logs/trainer.log")
    merged = Feed(tracker, "/run/logs/merged.log")
    for m, d in ((1, "10.48"), (2, "12.5"), (3, "118.0")):
        trainer(DISK.format(m=m, d=d), T0 + m, "weight_update")
        merged("[actor]   " + DISK.format(m=m, d=d), T0 + m, "weight_update")
    trainer("│ timeperf/update_weights │ 1.3000e+01 │ x │ 1 │", T0 + 4, "reward")  # disk mode: the line wins
    state = tracker.state(T0 + 5)
    assert state.weight_update_s == (10.48, 12.5, 118.0)
    assert state.weight_update_timeout_s == 120.0


def test_trl_metric_dicts_count_steps_and_carry_the_reward() -> None:
    tracker = make()
    feed = Feed(tracker, "/run/trl/train.log")
    for i, reward in enumerate(("0.125", "0.375", "0.5")):
        feed(
            f"{{'loss': 0.0, 'grad_norm': 0.086, 'reward': {reward}, 'reward_std': 0.51, 'epoch': 0.0{i}}}",
            T0 + 30 * i,
            "step",
        )
    state = tracker.state(T0 + 60)
    assert state.last_step == 3
    assert state.rewards == (0.125, 0.375, 0.5)
    assert state.steps_per_hour == pytest.approx(2 * 3600 / 60)
    assert state.total_steps is None


def test_trl_checkpoint_hint_gives_real_step_numbers() -> None:
    tracker = make()
    feed = Feed(tracker)
    feed("{'loss': 0.1, 'reward': 0.2, 'epoch': 0.1}", T0, "step")
    tracker.set_checkpoint_hint(100, 500, logging_steps=10)
    assert tracker.state(T0).last_step == 100
    assert tracker.state(T0).total_steps == 500
    feed("{'loss': 0.1, 'reward': 0.3, 'epoch': 0.11}", T0 + 40, "step")
    feed("{'loss': 0.1, 'reward': 0.4, 'epoch': 0.12}", T0 + 80, "step")
    tracker.set_checkpoint_hint(100, 500, logging_steps=10)  # the same checkpoint again changes nothing
    state = tracker.state(T0 + 80)
    assert state.last_step == 120
    assert state.steps_per_hour == pytest.approx(20 * 3600 / 80)


def test_trl_train_runtime_means_finished_and_never_stalled() -> None:
    clock = FakeClock(T0)
    tracker = make(clock)
    feed = Feed(tracker)
    feed("{'loss': 0.1, 'reward': 0.2, 'epoch': 0.99}", T0, "step")
    feed("{'train_runtime': 3600.5, 'train_samples_per_second': 1.2, 'train_loss': 0.05, 'epoch': 1.0}", T0 + 1, "step")
    clock.advance(10_000)
    state = tracker.state()
    assert state.finished
    assert not state.stalled
    assert state.last_step == 1  # the summary dict is not a step


def test_areal_training_completes_means_finished() -> None:
    tracker = make()
    feed = Feed(tracker)
    feed(areal_step(4675), T0, "step")
    feed("(AReaL) 20251121-09:15:30.652 RLTrainer INFO: Training completes! Total time elapsed 3600.", T0, "step")
    assert tracker.state(T0 + 99_999).finished


def test_trl_syncs_carry_no_duration() -> None:
    tracker = make()
    feed = Feed(tracker, "/run/vllm-serve.log")
    for _ in range(3):
        feed(UVICORN_SYNC, T0, "weight_update", "step")  # one line delivered to two handlers
    state = tracker.state(T0)
    assert state.weight_update_s == ()
    assert state.last_step is None  # a sync is no training step


def test_same_line_through_two_handlers_is_one_step_and_one_reward() -> None:
    tracker = make()
    feed = Feed(tracker)
    feed("{'loss': 0.1, 'reward': 0.2, 'epoch': 0.1}", T0, "step", "reward")
    state = tracker.state(T0)
    assert state.last_step == 1
    assert state.rewards == (0.2,)


def test_a_copy_of_stdout_in_another_file_is_not_counted_twice() -> None:
    tracker = make()
    main = Feed(tracker, "/run/logs/trainer.log")
    wandb = Feed(tracker, "/run/logs/wandb/output.log")
    for g in (7, 8):
        main(areal_step(g), T0 + g, "step")
        wandb(areal_step(g), T0 + g, "step")
    main("{'loss': 0.1, 'reward': 0.2}", T0 + 9, "step")
    wandb("{'loss': 0.1, 'reward': 0.2}", T0 + 9, "step")
    wandb(areal_step(6), T0 + 10, "step")  # lagging copy
    state = tracker.state(T0 + 10)
    assert state.last_step == 8
    assert state.steps_per_hour == pytest.approx(3600.0)


def test_restart_in_the_same_file_starts_over() -> None:
    tracker = make()
    feed = Feed(tracker)
    for g in (1873, 1874, 1875):
        feed(areal_step(g), T0 + g, "step")
    feed(areal_step(1870), T0 + 5000, "step")  # recover run appended to the same log
    state = tracker.state(T0 + 5000)
    assert state.last_step == 1870
    assert state.steps_per_hour is None  # one point since the restart
    feed(areal_step(1871), T0 + 5060, "step")
    assert tracker.state(T0 + 5060).steps_per_hour == pytest.approx(60.0)


def test_stall_needs_silence_from_both_steps_and_lines() -> None:
    clock = FakeClock(T0)
    tracker = make(clock, stall_s=600.0)
    feed = Feed(tracker)
    assert not tracker.state().stalled  # nothing seen yet: nothing to judge
    feed(areal_step(10), T0, "step")
    assert not tracker.state(T0 + 599).stalled
    assert tracker.state(T0 + 600).stalled
    feed("HTTPUtils WARNING: HTTP request to 10.0.0.1:1/generate failed (attempt 1/3)", T0 + 590)
    state = tracker.state(T0 + 700)
    assert not state.stalled  # lines still arrive
    assert state.last_line_at == T0 + 590
    assert state.last_step_at == T0
    clock.advance(590 + 600)
    assert tracker.state().stalled


def test_configured_total_wins() -> None:
    tracker = make(total_steps=250)
    Feed(tracker)(areal_step(10), T0, "step")
    assert tracker.state(T0).total_steps == 250


def test_non_finite_reward_is_not_a_trend_point() -> None:
    tracker = make()
    feed = Feed(tracker)
    feed("{'loss': 0.1, 'reward': 0.25}", T0, "step")
    feed("{'loss': nan, 'reward': nan}", T0 + 1, "step")
    state = tracker.state(T0 + 1)
    assert state.rewards == (0.25,)
    assert state.last_step == 2


def test_history_bounds_the_trends() -> None:
    tracker = make(history=5)
    feed = Feed(tracker)
    for i in range(20):
        feed(f"{{'loss': 0.1, 'reward': {i / 100}}}", T0 + i, "step")
    assert tracker.state(T0 + 20).rewards == tuple(i / 100 for i in range(15, 20))


def test_hint_without_a_step_still_gives_the_total() -> None:
    tracker = make()
    feed = Feed(tracker)
    feed("{'loss': 0.1, 'reward': 0.2}", T0, "step")
    tracker.set_checkpoint_hint(None, 500)
    state = tracker.state(T0)
    assert state.total_steps == 500
    assert state.last_step == 1


def trl_bar(n: int, total: int = 150, speed: str = "1.36it/s") -> str:
    """transformers' Trainer bar (tqdm), as a captured log holds one redraw of it."""
    filled = n * 10 // total
    return f" {n * 100 // total:2d}%|{'█' * filled}{' ' * (10 - filled)}| {n}/{total} [00:{n:02d}<01:36,  {speed}]"


def test_the_logs_own_bar_gives_the_step_over_a_checkpoint_noticed_late() -> None:
    """Issue 34: a TRL GRPO run (logging_steps 1) checkpointed at step 20; by the time the checkpoint's
    trainer_state.json was read, step 21 had been logged. The bar and the 21 dicts say 21: so does the tracker (it
    said 20, the checkpoint's, beside a log view at 21/150)."""
    tracker = make()
    feed = Feed(tracker, "/run/trl/train.log")
    for n in range(1, 22):
        t = T0 + n / 1.36
        feed(trl_bar(n), t, "step")
        feed(f"{{'loss': 0.01, 'grad_norm': 0.2, 'reward': 0.5, 'epoch': {n / 150:.2f}}}", t, "step")
    tracker.set_checkpoint_hint(20, 150, logging_steps=1)
    state = tracker.state(T0 + 21 / 1.36)
    assert (state.last_step, state.total_steps) == (21, 150)
    assert state.steps_per_hour == pytest.approx(1.36 * 3600)
    assert state.rate_from == "lines"


def test_a_checkpoint_gives_the_step_only_where_the_log_has_no_counter() -> None:
    tracker = make()
    feed = Feed(tracker, "/run/trl/train.log")
    for n in range(1, 4):
        feed(f"{{'loss': 0.01, 'reward': 0.5, 'epoch': {n / 150:.2f}}}", T0 + n, "step")
    tracker.set_checkpoint_hint(20, 150, logging_steps=10)
    feed("{'loss': 0.01, 'reward': 0.5, 'epoch': 0.2}", T0 + 10, "step")
    assert tracker.state(T0 + 10).last_step == 30  # the checkpoint's step and one dict of 10 steps since


def test_a_bar_in_a_log_without_times_gives_its_own_speed_as_the_rate() -> None:
    """Issue 34: `rate — ETA —` beside a bar at 1.36it/s. A backlog line carries no time (NaN), so the lines give no
    rate; the bar's own speed is one, and the panel says where it came from and the ETA it gives."""
    from rlwatch.widgets.training_panel import rate_line

    tracker = make()
    feed = Feed(tracker, "/run/trl/train.log")
    for n in range(0, 22):
        feed(trl_bar(n, speed="1.36it/s" if n else "?it/s"), math.nan, "step")
    state = tracker.state(T0)
    assert state.last_step == 21
    assert state.steps_per_hour == pytest.approx(1.36 * 3600)
    assert state.rate_from == "bar"
    text = rate_line(state, T0).plain
    assert "4896 steps/h (bar)" in text
    assert "ETA 1m" in text  # (150 - 21) / 1.36 s: a minute and a half
    for n in range(22, 25):
        feed(trl_bar(n, speed="2.50s/it"), math.nan, "step")
    assert tracker.state(T0).steps_per_hour == pytest.approx(3600 / 2.5)  # tqdm's other unit, the latest redraw


def test_a_checkpoint_read_late_counts_on_from_its_own_last_log() -> None:
    """A dicts-only TRL log (no bar): the checkpoint of step 20 is read after step 21's dict was counted. Its
    trainer_state.json's last log (step 20, its epoch and loss) is the 20th dict printed: the step is 21, not the
    checkpoint's 20 plus nothing."""
    tracker = make()
    feed = Feed(tracker, "/run/trl/train.log")
    for n in range(1, 22):
        feed(f"{{'loss': {n / 1000}, 'reward': 0.5, 'epoch': {n / 150}}}", T0 + n, "step")
    tracker.set_checkpoint_hint(20, 150, logging_steps=1, last_logged=(20, 20 / 150, 20 / 1000))
    assert tracker.state(T0 + 21).last_step == 21
    tracker.set_checkpoint_hint(20, 150, logging_steps=1, last_logged=(20, 20 / 150, 20 / 1000))  # again: the same
    assert tracker.state(T0 + 21).last_step == 21


def test_a_checkpoint_read_before_its_log_is_counted_anchors_when_it_is() -> None:
    """The checkpoint noticed before the backlog's dicts were counted (a report reads the checkpoint first): its
    step stands for the dicts counted so far until its own last log is seen among the dicts."""
    tracker = make()
    feed = Feed(tracker, "/run/trl/train.log")
    tracker.set_checkpoint_hint(40, 150, logging_steps=2, last_logged=(40, 20 / 75, 0.02))
    for n in range(1, 23):  # logged every 2 steps: 2, 4, ... 44
        feed(f"{{'loss': {n / 1000}, 'reward': 0.5, 'epoch': {n / 75}}}", math.nan, "step")
    assert tracker.state(T0).last_step == 44
