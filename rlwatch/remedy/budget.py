"""Restart budgets: how often the watchdog may act on one target before it stops and waits for a person.

Supervisors that restart for ever turn a broken start command into a restart storm (supervisord after RUNNING,
runit, daemontools); supervisors that give up after a handful of instant tries give up on a slow GPU job that would
have come back (systemd's 5 starts in 10 s). A budget here combines what works (reliability notes §1):

- **Burst within a window** (systemd's start limit, at GPU scale): at most ``burst`` restarts of one target in any
  ``window_s``. A failure that arrives when the burst is spent means restarting does not help: the budget *gives up*.
- **Capped exponential delay** (Kubernetes' CrashLoopBackOff): the first restart is at once; each further restart
  in a row waits ``delay_s``, doubling, up to ``max_delay_s``, counted from the previous restart. ``reset_after_s``
  without a failure after a restart ends the row, so an occasional failure is always acted on at once.
- **A death during start-up is not a death after running** (supervisord's ``startsecs``/``startretries``): a failure
  within ``startup_s`` of a restart, or after a restart whose verification failed, means the restart did not take;
  ``startup_retries`` of them in a row give up at once, without spending the rest of the burst. A failure after the
  target ran longer resets that count: it was healthy, and only the burst and the delay bound it.
- **Gave up is terminal** (monit's unmonitor, systemd's reset-failed): nothing more is done for that target until
  :meth:`RestartBudget.rearm` (``rlwatch act rearm``) or the watchdog restarts.

Every time comes from an injected monotonic clock, so wall-clock steps cannot open or close a window, and tests
drive the whole state machine with :class:`~rlwatch.common.clock.FakeClock`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from rlwatch.common.clock import Clock
from rlwatch.common.words import plural
from rlwatch.config.models import BudgetConfig


class BudgetVerdict(StrEnum):
    """The restart budget's answer to one restart request: act now, wait (backing off), or given up."""

    ACT = "act"
    WAIT = "wait"
    GAVE_UP = "gave_up"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: BudgetVerdict
    reason: str
    wait_s: float = 0.0  # with WAIT: how long until a restart is allowed
    new: bool = False  # with GAVE_UP: this request is the one that gave up (report it once)


@dataclass(slots=True)
class _Target:
    restarts: deque[float] = field(default_factory=deque)  # monotonic times, oldest first, within the window
    total: int = 0
    last_restart: float | None = None
    last_ok: bool | None = None  # the verification of the last restart; None while it runs
    judged: bool = False  # the failure after the last restart has been classified (one per restart)
    in_a_row: int = 0  # restarts without a healthy period of reset_after_s between them
    startup_failures: int = 0  # in a row
    gave_up: str | None = None
    gave_up_at: float | None = None


@dataclass(frozen=True, slots=True)
class TargetState:
    """One target's budget, for the state file, the exporter and tests. Times are monotonic."""

    key: str
    restarts_in_window: int
    total_restarts: int
    last_restart: float | None
    in_a_row: int
    startup_failures: int
    next_allowed: float | None  # a restart is held back until then (None: at once)
    gave_up: str | None
    gave_up_at: float | None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


class RestartBudget:
    """The budgets of every target (keyed like ``restart-workers:worker-1``), sharing one configuration."""

    def __init__(self, cfg: BudgetConfig, clock: Clock) -> None:
        self.cfg = cfg
        self.clock = clock
        self._targets: dict[str, _Target] = {}

    def _get(self, key: str) -> _Target:
        return self._targets.setdefault(key, _Target())

    def _prune(self, t: _Target, now: float) -> None:
        while t.restarts and now - t.restarts[0] >= self.cfg.window_s:
            t.restarts.popleft()

    def delay_for(self, in_a_row: int) -> float:
        """The wait, counted from the previous restart, before the next one when ``in_a_row`` restarts preceded it."""
        if in_a_row <= 0:
            return 0.0
        return float(min(self.cfg.delay_s * 2 ** (in_a_row - 1), self.cfg.max_delay_s))

    def _give_up(self, t: _Target, now: float, why: str) -> Decision:
        t.gave_up, t.gave_up_at = why, now
        return Decision(BudgetVerdict.GAVE_UP, why, new=True)

    def request(self, key: str) -> Decision:
        """A policy's condition holds for ``key``: may the watchdog act now?

        Calling it again while the failure goes on (every evaluation) is expected: the first failure seen after a
        restart is the one classified (start-up or not); later sightings before the next restart are the same one.
        """
        now = self.clock.monotonic()
        t = self._get(key)
        if t.gave_up is not None:
            return Decision(BudgetVerdict.GAVE_UP, t.gave_up)
        cfg = self.cfg
        if not t.judged:
            t.judged = True
            if t.last_restart is not None:
                ran = now - t.last_restart
                if ran >= cfg.reset_after_s:
                    t.in_a_row = 0
                if ran < cfg.startup_s or t.last_ok is False:
                    t.startup_failures += 1
                else:
                    t.startup_failures = 0
        if t.startup_failures >= cfg.startup_retries:
            return self._give_up(t, now, f"{t.startup_failures} restarts in a row that failed during start-up")
        self._prune(t, now)
        if len(t.restarts) >= cfg.burst:
            span = now - t.restarts[0]
            return self._give_up(
                t,
                now,
                f"{len(t.restarts)} restarts in {_minutes(span)} (budget: {cfg.burst} per {_minutes(cfg.window_s)})",
            )
        if t.last_restart is not None:
            ready_at = t.last_restart + self.delay_for(t.in_a_row)
            if now < ready_at:
                return Decision(
                    BudgetVerdict.WAIT, f"backing off after {plural(t.in_a_row, 'restart')} in a row", ready_at - now
                )
        return Decision(BudgetVerdict.ACT, "within budget")

    def started(self, key: str) -> None:
        """The watchdog restarted ``key`` now (call only after :meth:`request` said ACT)."""
        now = self.clock.monotonic()
        t = self._get(key)
        t.restarts.append(now)
        t.total += 1
        t.in_a_row += 1
        t.last_restart = now
        t.last_ok = None
        t.judged = False

    def finished(self, key: str, ok: bool) -> None:
        """The restart of ``key`` was verified (``ok``) or not; a failed one makes the next failure a start-up one."""
        self._get(key).last_ok = ok

    def gave_up(self, key: str) -> str | None:
        t = self._targets.get(key)
        return t.gave_up if t else None

    def rearm(self, keys: list[str] | None = None) -> list[str]:
        """Clear "gave up" (all targets when ``keys`` is None) and forget their history; returns what was cleared."""
        cleared = []
        for key, t in list(self._targets.items()):
            if t.gave_up is not None and (keys is None or key in keys):
                self._targets[key] = _Target(total=t.total)
                cleared.append(key)
        return cleared

    def states(self) -> list[TargetState]:
        now = self.clock.monotonic()
        out = []
        for key, t in sorted(self._targets.items()):
            self._prune(t, now)
            next_allowed = None
            if t.gave_up is None and t.last_restart is not None:
                ready = t.last_restart + self.delay_for(t.in_a_row)
                next_allowed = ready if ready > now else None
            out.append(
                TargetState(
                    key=key,
                    restarts_in_window=len(t.restarts),
                    total_restarts=t.total,
                    last_restart=t.last_restart,
                    in_a_row=t.in_a_row,
                    startup_failures=t.startup_failures,
                    next_allowed=next_allowed,
                    gave_up=t.gave_up,
                    gave_up_at=t.gave_up_at,
                )
            )
        return out
