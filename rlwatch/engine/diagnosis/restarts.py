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
    hhmm,
    human_duration,
)

SAME_START_S = 5.0  # start lines closer than this are one start (a launcher prints two banners as it comes up)
SAME_START_SHARE = 0.1  # … and closer than this share of the usual time between starts (a sped-up simulator)


def _distinct(starts: list[float]) -> list[float]:
    """Starts, with the several lines of one start (a container's banner, then its launcher's) counted once."""
    gaps = sorted(b - a for a, b in itertools.pairwise(starts))
    if not gaps:
        return starts
    window = min(SAME_START_S, SAME_START_SHARE * gaps[len(gaps) // 2])
    out: list[float] = []
    for t in starts:
        if not out or t - out[-1] > window:
            out.append(t)
    return out


def restart_loop(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    th = ctx.thresholds
    short = th.restart_loop_uptime_s * 1.5
    for role, all_starts in ctx.starts.items():
        # an undated start line of a backlog is NaN; two banners of one start are one start
        starts = _distinct(sorted(t for t in all_starts if math.isfinite(t)))
        if len(starts) < th.restart_loop_count:
            continue
        recent = starts[-th.restart_loop_count :]
        gaps = [b - a for a, b in itertools.pairwise(recent)]
        # The life before the first of these restarts may have been long (a run that trained for hours, then broke):
        # what makes a loop is that the lives after it are short. So at the second restart (three starts, the
        # default count) one short life after a restart names it, not a third restart a minute later.
        lives = gaps[1:] if len(gaps) >= 2 else gaps
        if lives and max(lives) <= short:
            period = sum(lives) / len(lives)
            # since the first restart of this run of short lives: when the loop began
            first = len(starts) - 1
            while first > 0 and starts[first] - starts[first - 1] <= short:
                first -= 1
            since = starts[first]
            how = (
                f"restarted {len(starts) - first} times since {hhmm(since, s.time)}"  # after a long first life
                if first
                else f"started {len(starts)} times"
            )
            yield Finding(
                CRIT,
                "restart_loop",
                f"Restart loop: the {role} {how}, every ~{human_duration(period)}, never staying up past "
                f"{human_duration(th.restart_loop_uptime_s)}. "
                "This is not a crash at a training step: look at what the start command does.",
                since,
            )
