"""A restart loop: a process that keeps starting and never stays up, which looks like a crash at one step."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from rlwatch.common.state import (
    Finding,
    Snapshot,
)
from rlwatch.engine.diagnosis.base import (
    CRIT,
    Context,
)
from rlwatch.engine.diagnosis.wording import (
    human_duration,
)


def restart_loop(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    th = ctx.thresholds
    for role, all_starts in ctx.starts.items():
        starts = sorted(t for t in all_starts if math.isfinite(t))  # an undated start line of a backlog is NaN
        if len(starts) < th.restart_loop_count:
            continue
        recent = starts[-th.restart_loop_count :]
        gaps = [b - a for a, b in itertools.pairwise(recent)]
        # The life before the first of these restarts may have been long (a run that trained for hours, then broke):
        # what makes a loop is that the lives after it are short. So at the second restart (three starts, the
        # default count) one short life after a restart names it, not a third restart a minute later.
        lives = gaps[1:] if len(gaps) >= 2 else gaps
        if lives and max(lives) <= th.restart_loop_uptime_s * 1.5:
            period = sum(lives) / len(lives)
            yield Finding(
                CRIT,
                "restart_loop",
                f"Restart loop: the {role} started {len(starts)} times, lately every ~{human_duration(period)}, "
                f"never staying up past {human_duration(th.restart_loop_uptime_s)}. "
                "This is not a crash at a training step: look at what the start command does.",
                recent[1],
            )
