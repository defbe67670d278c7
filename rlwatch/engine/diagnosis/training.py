"""Training progress: stalled, finished, or no step seen."""

from __future__ import annotations

from collections.abc import Iterator

from rlwatch.common.state import (
    Finding,
    Snapshot,
)
from rlwatch.engine.diagnosis.base import (
    WARN,
    Context,
)
from rlwatch.engine.diagnosis.wording import (
    hhmm,
)


def training(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    if ctx.no_run is not None:
        # Not "healthy": there is nothing here to be healthy. Say where rlwatch looked, so a person can point it.
        yield Finding(WARN, "no_run", f"No training run found here: {ctx.no_run}.", None)
        return
    tr = s.training
    if tr is None:
        return
    if tr.stalled and ctx.trainer_alive is not False:
        idle = " and the GPU is idle" if ctx.gpu_idle else ""
        last = tr.last_step_at or tr.last_line_at
        yield Finding(
            WARN,
            "stalled",
            f"Training stalled: no step since {hhmm(last, s.time)} (step {tr.last_step}){idle}.",
            last,
        )
    if tr.weight_update_s and tr.weight_update_timeout_s:
        last_wu = tr.weight_update_s[-1]
        if last_wu >= ctx.thresholds.weight_update_warn_fraction * tr.weight_update_timeout_s:
            yield Finding(
                WARN,
                "weight_update_slow",
                f"Weight update took {last_wu:.1f}s, near its {tr.weight_update_timeout_s:.0f}s timeout.",
                None,
            )
