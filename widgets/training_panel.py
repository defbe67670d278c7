"""Training progress: where the run is, whether it is still moving, and whether weight updates near their limit.

Incident 2 looked like "a crash at step 57"; what a person needed was the step counter, a STALLED marker that
does not depend on reading logs, and the weight-update durations against the 120 s timeout they must stay under.
"""

from __future__ import annotations

from rich.text import Text

from rlwatch.common.state import RunState, Snapshot, TrainingState, Verdict
from rlwatch.widgets.format import fmt_age, fmt_duration, fmt_number, row_text
from rlwatch.widgets.graph import spark
from rlwatch.widgets.text_block import TextBlock

BAR_WIDTH = 16
ADVANCING_MIN_S = 10.0  # a step this recent is on pace whatever the rate (the log is read within a second or two)
TREND_SHOWN = 24


def progress_bar(done: int, total: int, width: int = BAR_WIDTH) -> Text:
    frac = min(1.0, max(0.0, done / total)) if total > 0 else 0.0
    full = round(frac * width)
    bar = Text(no_wrap=True, end="")
    bar.append("█" * full, style="green")
    bar.append("░" * (width - full), style="dim")
    bar.append(f" {100 * frac:.1f}%", style="bold")
    return bar


_STATE_BADGE = {"crashed": "CRASHED", "hung": "HUNG", "stopped": "STOPPED"}


def step_line(tr: TrainingState, now: float, run: RunState | None = None, verdict: Verdict | None = None) -> Text:
    """The step every view says (the verdict's, from the best evidence), its total and bar, and the run's state."""
    line = Text("step ", style="bold", no_wrap=True, end="")
    step = verdict.step if verdict is not None and verdict.step is not None else tr.last_step
    if step is None:
        line.append("no step yet", style="dim")
    else:
        line.append(str(step), style="bold")
        line.append(f"/{tr.total_steps}" if tr.total_steps else "/?", style="dim")
        if tr.total_steps:
            line.append(" ")
            line.append_text(progress_bar(step, tr.total_steps))
        if verdict is not None and verdict.step_from == "checkpoint":
            line.append("  (checkpoint)", style="dim")
        elif tr.step_source:
            line.append(f"  from {row_text(tr.step_source)}", style="dim")  # the field the step was read from
    if tr.finished:
        line.append("  FINISHED", style="bold green")
    elif run is not None and run.state in _STATE_BADGE:  # what the banner's state rests on, said the same here
        line.append("  ")
        line.append(f" {_STATE_BADGE[run.state]} ", style="bold white on red")
        if run.since is not None:
            line.append(f" {fmt_duration(now - run.since)}", style="bold red")
    elif tr.stalled:
        since = tr.last_step_at or tr.last_line_at
        line.append("  ")
        line.append(" STALLED ", style="bold white on red")
        if since is not None:
            line.append(f" {fmt_duration(now - since)}", style="bold red")
    return line


def advancing(tr: TrainingState, now: float) -> bool:
    """Steps are coming at their own pace: the last one no older than three of its intervals (ten seconds at least).
    A rate and an ETA are said only then: beside a dead server or a crash they would say what is not so. A log
    whose lines carry no time has only its bar's own speed: the run's state (the caller's) says it moves."""
    if tr.finished or tr.stalled or not tr.steps_per_hour:
        return False
    if tr.last_step_at is None:
        return tr.rate_from == "bar"
    interval = 3600.0 / tr.steps_per_hour
    return now - tr.last_step_at <= max(ADVANCING_MIN_S, 3 * interval)


def rate_line(tr: TrainingState, now: float) -> Text:
    line = Text("rate ", style="bold", no_wrap=True, end="")
    moving = advancing(tr, now)
    if moving and tr.steps_per_hour:
        line.append(f"{tr.steps_per_hour:.0f} steps/h")
        if tr.rate_from == "bar":
            line.append(" (bar)", style="dim")  # the speed the run's own progress bar printed
    elif tr.finished:
        line.append("–", style="dim")
    elif tr.last_step_at is not None:
        line.append(f"– no step for {fmt_duration(now - tr.last_step_at)}", style="bold yellow")
    else:
        line.append("–", style="dim")
    line.append("  ETA ", style="bold")
    if tr.finished:
        line.append("done", style="green")
    elif not moving or not tr.steps_per_hour or tr.last_step is None or not tr.total_steps:
        line.append("–", style="dim")
    else:
        left = max(0, tr.total_steps - tr.last_step) / tr.steps_per_hour * 3600
        line.append(fmt_duration(left))
    line.append(f"  last line {fmt_age(tr.last_line_at, now)}", style="dim")
    return line


def reward_line(tr: TrainingState) -> Text:
    line = Text("reward ", style="bold", no_wrap=True, end="")
    line.append(fmt_number(tr.reward), style="bold")
    trend = tr.rewards[-TREND_SHOWN:]
    if trend:
        lo, hi = min(trend), max(trend)
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        line.append(f"  {fmt_number(lo)} ", style="dim")
        line.append_text(spark(list(trend), lo=lo, hi=hi, style="cyan"))
        line.append(f" {fmt_number(hi)}", style="dim")
    return line


def weight_update_line(tr: TrainingState) -> Text:
    """``weights 10.5 s / 120 s limit ▂▂▃▅ max 14.2 s``: the last weight update against its timeout."""
    line = Text("weights ", style="bold", no_wrap=True, end="")
    durations = tr.weight_update_s
    if not durations:
        line.append("no timings yet", style="dim")
        return line
    last = durations[-1]
    limit = tr.weight_update_timeout_s
    frac = last / limit if limit else 0.0
    style = "bold red" if frac >= 0.75 else "bold yellow" if frac >= 0.5 else "bold"
    line.append(f"{last:.1f} s", style=style)
    if limit:
        line.append(f" / {limit:.0f} s limit", style="dim")
        line.append("  ")
        line.append_text(spark(list(durations[-TREND_SHOWN:]), lo=0.0, hi=limit, style="yellow"))
    line.append(f"  max {max(durations):.1f} s", style="dim")
    rising = len(durations) >= 3 and durations[-1] > durations[-2] > durations[-3]
    if rising:
        line.append("  rising", style="bold yellow")
    return line


def knobs_line(tr: TrainingState) -> Text | None:
    if not tr.knobs:
        return None
    line = Text("knobs ", style="bold", no_wrap=True, end="")
    line.append(row_text("  ".join(f"{k}={v}" for k, v in tr.knobs.items())), style="dim")
    return line


def training_text(
    tr: TrainingState | None, now: float, run: RunState | None = None, verdict: Verdict | None = None
) -> Text:
    if tr is None:
        return Text("training: no trainer log found", style="dim", no_wrap=True)
    if verdict is not None and run is not None:
        run = RunState(verdict.state, verdict.why, run.since, run.evidence)  # the verdict's state, said the same
    moving = run is None or run.state == "progressing"
    rate = rate_line(tr, now) if moving else Text("rate —  (no progress now)", style="dim", no_wrap=True, end="")
    rows = [step_line(tr, now, run, verdict), rate, reward_line(tr), weight_update_line(tr)]
    knobs = knobs_line(tr)
    if knobs is not None:
        rows.append(knobs)
    return Text("\n", end="").join(rows)


class TrainingSection(TextBlock):
    """The training part of the run panel."""

    def show(self, snap: Snapshot) -> None:
        self.update(training_text(snap.training, snap.time, snap.run_state, snap.verdict))
