"""The watchdog itself: expected and not running, giving up, reading its backlog."""

from __future__ import annotations

from collections.abc import Iterator

from rlwatch.common.state import (
    Finding,
    Snapshot,
)
from rlwatch.engine.diagnosis.base import (
    CRIT,
    INFO,
    Context,
)
from rlwatch.engine.diagnosis.wording import (
    hhmm,
    human_duration,
    share,
)


def watchdog(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    for role in ctx.missing_expected:
        yield Finding(
            CRIT,
            "expected_missing",
            f"The expected {role} is not running: nothing will restart leaking or crashed processes.",
            None,
            command="rlwatch service install" if role == "watchdog" else None,
        )


def watchdog_state(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """What the headless watchdog's own state file says: it gave up, it is stuck, or it died without a word."""
    wd = s.watchdog
    if wd is None or wd.stopped is not None:
        return  # none ever ran here, or it was stopped on purpose
    for g in wd.gave_up:
        yield Finding(
            CRIT,
            "watchdog_gave_up",
            f"The watchdog gave up on {g.target} after {g.reason} — it will not act on it again until "
            "`rlwatch act rearm`.",
            g.since,
            command="rlwatch act rearm",
        )
    last_beat = s.time - wd.heartbeat_age_s if wd.heartbeat_age_s is not None else None
    if wd.running and wd.stale:
        yield Finding(
            CRIT,
            "watchdog_not_responding",
            f"The watchdog (pid {wd.pid}) is not responding: no heartbeat since {hhmm(last_beat, s.time)} "
            f"({human_duration(wd.heartbeat_age_s)}); its policies are not being applied.",
            last_beat,
        )
    elif wd.running and wd.reading_backlog is not None:
        yield Finding(
            INFO,
            "watchdog_reading",
            f"The watchdog (pid {wd.pid}) is reading the logs' backlog ({share(*wd.reading_backlog)}) and applies "
            "no policy until it is read: what it would act on must rest on the whole of what the logs say.",
            None,
        )
    elif not wd.running and "watchdog" not in ctx.missing_expected:
        yield Finding(
            CRIT,
            "watchdog_died",
            f"The watchdog (pid {wd.pid}) is gone since {hhmm(last_beat, s.time)} without stopping cleanly: "
            "nothing will restart leaking or crashed processes. "
            "Start it again (`rlwatch service install` keeps it alive).",
            last_beat,
            command="rlwatch service install",
        )
