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
from rlwatch.engine.diagnosis.health import last_progress
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


# The roles whose start is the run's own start again (a container's banner, its trainer or launcher process).
_RUN_ROLES = ("container", "trainer", "launcher")


def restarting(s: Snapshot, ctx: Context) -> str | None:
    """What to do while the run restarts by itself, or None: a role of the run started again after the run's last
    progress, and has not yet lived past a restart loop's short life. The loop is named only at the next start
    (restart_loop); until then a resume would start a second copy into what may be a loop (restart-loop: for the
    first 30-40 s after the crash the one remedy shown was the resume)."""
    short = ctx.thresholds.restart_loop_uptime_s * 1.5
    # Progress known for sure: an undated line's latest bound (a log's modification time) is no progress after a
    # restart (a one-shot report kept offering the resume the dashboard held back).
    progress_at, _ = last_progress(s, ctx)
    for role in _RUN_ROLES:
        starts = _distinct(sorted(t for t in ctx.starts.get(role, ()) if math.isfinite(t)))
        if len(starts) < 2:
            continue
        newest = starts[-1]
        if (progress_at is None or newest >= progress_at) and s.time - newest <= short:  # (its own banner line)
            return (
                f"The {role} started again by itself at {hhmm(newest, s.time)} and has shown no progress since: "
                f"wait up to {human_duration(short)} to see whether it stays up (a restart loop is named at its "
                "next start); a resume now would start a second copy into it."
            )
    return None
