"""Learning that breaks while the run stays alive: non-finite loss or reward, spikes, reward collapse, KL blowing up,
entropy collapsing, responses running to the length limit.

Each finding names the logged step it began at and the last checkpoint saved before it: the one to resume from,
since the checkpoints after it hold what went wrong. Thresholds are the ``learning:`` section of the configuration.
A lone non-finite grad norm is not a finding: fp16 loss scaling skips such steps on purpose.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Sequence

from rlwatch.common.state import Finding, MetricPoint, Snapshot
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import CRIT, WARN, Context

_SHOWN = {
    "loss": "Loss",
    "grad_norm": "Grad norm",
    "reward": "Reward",
    "kl": "KL",
    "entropy": "Entropy",
    "response_length": "Response length",
    "clip_ratio": "Clip ratio",
}


def _trailing(points: Sequence[MetricPoint], test: object) -> list[MetricPoint]:
    """The longest run of points at the end of the series for which ``test`` holds."""
    out: list[MetricPoint] = []
    for p in reversed(points):
        if not test(p.value):  # type: ignore[operator]
            break
        out.append(p)
    return out[::-1]


def checkpoint_before(s: Snapshot, step: int) -> str:
    """The last checkpoint saved before ``step`` (the one to resume from), as a sentence."""
    ck = s.checkpoint
    if ck is None or not ck.steps:
        return "No checkpoint was found to resume from"
    areal = ck.latest is not None and ck.latest.epoch is not None  # AReaL counts from 0, its logs from 1
    before = [c for c in ck.steps if (c + 1 if areal else c) < step]
    if not before:
        return f"No checkpoint was saved before it (the first is at step {ck.steps[0]})"
    best = before[-1]
    latest = ck.latest
    where = f" ({latest.path})" if latest is not None and latest.global_step == best else ""
    return f"Resume from the last checkpoint before it, at step {best}{where}"


def _where(s: Snapshot, step: int) -> str:
    if s.learning is not None and not s.learning.steps_exact:
        return f"since logged metrics #{step} (the log prints no step number)"
    return f"since step {step}"


def _key(s: Snapshot, name: str) -> str:
    key = s.learning.keys.get(name) if s.learning else None
    return f" ({key})" if key and key != name else ""


def _resume(s: Snapshot, step: int) -> str:
    if s.learning is not None and not s.learning.steps_exact:
        return "Resume from the last checkpoint saved before it"
    return checkpoint_before(s, step)


def _resume_fix(s: Snapshot, step: int) -> str:
    """:func:`_resume` in the few words a one-line banner keeps whole, the step included: at 80 columns the finding's
    "Resume from the last checkpoint before it, at step 10" was cut, and no key says it (``r`` resumes from the
    latest checkpoint, which may hold the NaN already)."""
    ck = s.checkpoint
    if s.learning is not None and not s.learning.steps_exact:
        return "resume from the checkpoint before it"
    if ck is None or not ck.steps:
        return "no checkpoint: start again"
    areal = ck.latest is not None and ck.latest.epoch is not None  # as checkpoint_before counts
    before = [c for c in ck.steps if (c + 1 if areal else c) < step]
    return f"resume from step {before[-1]}" if before else "no checkpoint before it: start again"


def learning(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    ls = s.learning
    if ls is None:
        return
    cfg = ctx.learning
    series = ls.series
    for name in ("loss", "reward", "grad_norm"):
        points = series.get(name, ())
        bad = _trailing(points, lambda v: not math.isfinite(v))
        if bad and len(bad) < cfg.nonfinite_steps and name != "grad_norm":
            # A NaN loss is no loss-scaling skip (those give an infinite grad norm): a warning until it lasts.
            yield Finding(
                WARN,
                "learning_nonfinite",
                f"{_SHOWN[name]}{_key(s, name)} is {'NaN' if math.isnan(bad[-1].value) else 'infinite'} at the last "
                f"{plural(len(bad), 'logged step')}, {_where(s, bad[0].step)}; critical if it stays so for "
                f"{plural(cfg.nonfinite_steps, 'logged step')}. {_resume(s, bad[0].step)} if it does.",
                _time(bad[0]),
            )
            continue
        if len(bad) >= cfg.nonfinite_steps:
            first = bad[0]
            value = "NaN" if math.isnan(bad[-1].value) else "infinite"
            # Said for what the run is doing now: a run that finished (or crashed) is not "alive".
            rs = s.run_state.state if s.run_state is not None else None
            was = {"finished": "the run finished without", "crashed": "the run crashed after"}.get(rs or "")
            doing = (
                f"{was} learning from then on"
                if rs == "finished"
                else (f"{was} it stopped learning" if was else "the run is alive but no longer learning")
            )
            yield Finding(
                CRIT,
                "learning_nonfinite",
                f"{_SHOWN[name]}{_key(s, name)} has been {value} for the last {len(bad)} logged steps, "
                f"{_where(s, first.step)}: {doing}. {_resume(s, first.step)}; "
                "try a lower learning rate, bf16 instead of fp16, or gradient clipping.",
                _time(first),
                fix=_resume_fix(s, first.step),
            )
    for name in ("loss", "grad_norm"):
        yield from _spike(s, ctx, name, series.get(name, ()))
    yield from _reward_collapse(s, ctx, series.get("reward", ()))
    sustained = cfg.sustained_steps
    kl = _trailing(series.get("kl", ()), lambda v: math.isfinite(v) and v > cfg.kl_max)
    if len(kl) >= sustained:
        yield Finding(
            WARN,
            "learning_kl_blowup",
            f"KL{_key(s, 'kl')} is {kl[-1].value:.3g}, above {cfg.kl_max:g} for the last {len(kl)} logged steps, "
            f"{_where(s, kl[0].step)}: the policy is running away from its reference. {_resume(s, kl[0].step)}; "
            "try a larger KL coefficient or a lower learning rate.",
            _time(kl[0]),
        )
    points = series.get("entropy", ())
    low = _trailing(points, lambda v: math.isfinite(v) and v < cfg.entropy_min)
    earlier = [p.value for p in points[: len(points) - len(low)] if math.isfinite(p.value)]
    if len(low) >= sustained and earlier and max(earlier) >= 10 * max(cfg.entropy_min, 1e-12):
        yield Finding(
            WARN,
            "learning_entropy_collapse",
            f"Entropy{_key(s, 'entropy')} has collapsed to {low[-1].value:.3g} (it was {max(earlier):.3g}) for the "
            f"last {len(low)} logged steps, {_where(s, low[0].step)}: the policy answers the same way every time and "
            f"stops exploring. {_resume(s, low[0].step)}; consider an entropy bonus or a higher temperature.",
            _time(low[0]),
        )
    clipped = _trailing(series.get("clip_ratio", ()), lambda v: math.isfinite(v) and v >= cfg.clip_ratio_max)
    if len(clipped) >= sustained:
        length = series.get("response_length", ())
        mean = f" (mean length {length[-1].value:.0f})" if length and math.isfinite(length[-1].value) else ""
        yield Finding(
            WARN,
            "learning_length_clipped",
            f"{clipped[-1].value:.0%} of responses are cut at the length limit{mean}{_key(s, 'clip_ratio')} for the "
            f"last {len(clipped)} logged steps, {_where(s, clipped[0].step)}: responses run to the maximum and their "
            f"rewards mean little. {_resume(s, clipped[0].step)}; raise the length limit or penalise length.",
            _time(clipped[0]),
        )


def _time(p: MetricPoint) -> float | None:
    return p.time if math.isfinite(p.time) else None


def _spike(s: Snapshot, ctx: Context, name: str, points: Sequence[MetricPoint]) -> Iterator[Finding]:
    """A value far above its rolling median, among the last few logged steps. A loss is judged only while it keeps
    one sign: a policy-gradient loss (GRPO, PPO) swings around zero by design, so its median says nothing of a spike
    (a real TRL GRPO run, tests/real/trl-grpo-colocated, goes from 0.02 to -0.35 and back, healthy)."""
    cfg = ctx.learning
    window = cfg.spike_window
    recent_from = max(0, len(points) - cfg.sustained_steps)
    for i in range(len(points) - 1, recent_from - 1, -1):
        value = points[i].value
        raw = [p.value for p in points[max(0, i - window) : i] if math.isfinite(p.value)]
        if not math.isfinite(value) or len(raw) < max(3, window // 2):
            continue
        if name == "loss" and not (all(v > 0 for v in (*raw, value)) or all(v < 0 for v in (*raw, value))):
            continue
        before = [abs(v) for v in raw]
        median = statistics.median(before)
        if median > 1e-8 and abs(value) > cfg.spike_factor * median:
            yield Finding(
                WARN,
                "learning_spike",
                f"{_SHOWN[name]}{_key(s, name)} spiked to {value:.3g} at step {points[i].step}, "
                f"{abs(value) / median:.0f}× its median of {median:.3g} over the {len(before)} logged steps before. "
                f"If it does not come back down: {_resume(s, points[i].step)}.",
                _time(points[i]),
            )
            return


def _reward_collapse(s: Snapshot, ctx: Context, points: Sequence[MetricPoint]) -> Iterator[Finding]:
    """Mean reward fallen to near its floor and staying there, after it had risen."""
    cfg = ctx.learning
    values = [p.value for p in points if math.isfinite(p.value)]
    n = cfg.sustained_steps
    if len(values) < 2 * n:
        return
    means = [statistics.fmean(values[i : i + n]) for i in range(len(values) - n + 1)]
    floor, peak = min(values), max(means)
    span = peak - floor
    if span <= 1e-9:
        return
    near = floor + cfg.reward_collapse_fraction * span
    finite = [p for p in points if math.isfinite(p.value)]
    low = _trailing(finite, lambda v: v <= near)
    peak_at = means.index(peak)
    if len(low) >= n and peak_at + n <= len(finite) - len(low):
        yield Finding(
            WARN,
            "learning_reward_collapse",
            f"Reward{_key(s, 'reward')} has collapsed to {low[-1].value:.3g} (its floor {floor:.3g}; it had reached "
            f"{peak:.3g}) for the last {len(low)} logged steps, {_where(s, low[0].step)}. "
            f"{_resume(s, low[0].step)}; check the reward function and the rollouts (empty or degenerate outputs).",
            _time(low[0]),
        )
