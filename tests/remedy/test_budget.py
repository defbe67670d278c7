"""Restart budgets on a fake monotonic clock: burst within a window, capped doubling delay, start-up failures,
gave up until re-armed — and a Hypothesis model of the invariants."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import BudgetConfig
from rlwatch.remedy.budget import BudgetVerdict, Decision, RestartBudget

KEY = "restart-workers:worker-1"


def budget(**kw: float) -> tuple[RestartBudget, FakeClock]:
    clock = FakeClock()
    return RestartBudget(BudgetConfig(**kw), clock), clock  # type: ignore[arg-type]


def restart(b: RestartBudget, key: str = KEY, ok: bool = True) -> Decision:
    """A failure of ``key``: request, and restart it when allowed (verified ``ok``)."""
    d = b.request(key)
    if d.verdict is BudgetVerdict.ACT:
        b.started(key)
        b.finished(key, ok)
    return d


def test_the_first_failure_is_acted_on_at_once() -> None:
    b, _ = budget()
    assert b.request(KEY).verdict is BudgetVerdict.ACT


def test_burst_spent_within_the_window_gives_up_with_the_numbers() -> None:
    b, clock = budget(burst=3, window_s=1800, delay_s=1, startup_s=5, reset_after_s=10_000)
    for _ in range(3):
        assert restart(b).verdict is BudgetVerdict.ACT
        clock.advance(100)  # each ran longer than startup_s: healthy, then failed again
    d = b.request(KEY)
    assert d.verdict is BudgetVerdict.GAVE_UP and d.new
    assert d.reason == "3 restarts in 5 min (budget: 3 per 30 min)"
    assert b.gave_up(KEY) == d.reason


def test_restarts_older_than_the_window_do_not_count() -> None:
    b, clock = budget(burst=2, window_s=600, delay_s=1, startup_s=5)
    for _ in range(6):
        assert restart(b).verdict is BudgetVerdict.ACT
        clock.advance(400)  # two restarts never fall within one 600 s window
    assert b.gave_up(KEY) is None


def test_restarts_in_a_row_wait_a_doubling_delay_up_to_the_cap() -> None:
    b, clock = budget(burst=100, window_s=10_000, delay_s=10, max_delay_s=35, startup_s=1, reset_after_s=1000)
    waits = []
    assert restart(b).verdict is BudgetVerdict.ACT
    for _ in range(4):
        clock.advance(2)  # failing again soon after each restart, but after start-up
        d = b.request(KEY)
        assert d.verdict is BudgetVerdict.WAIT
        waits.append(round(d.wait_s + 2))
        clock.advance(d.wait_s)
        assert restart(b).verdict is BudgetVerdict.ACT
    assert waits == [10, 20, 35, 35]


def test_a_healthy_period_ends_the_row_and_the_next_restart_is_at_once() -> None:
    b, clock = budget(burst=100, window_s=100_000, delay_s=10, startup_s=1, reset_after_s=600)
    restart(b)
    clock.advance(20)
    clock.advance(b.request(KEY).wait_s)
    restart(b)  # second in a row
    clock.advance(600)  # healthy for reset_after_s
    assert b.request(KEY).verdict is BudgetVerdict.ACT


def test_start_up_failures_in_a_row_give_up_before_the_burst_is_spent() -> None:
    b, clock = budget(burst=10, window_s=10_000, delay_s=10, startup_s=60, startup_retries=2)
    restart(b)
    clock.advance(5)  # died during start-up
    d = b.request(KEY)
    assert d.verdict is BudgetVerdict.WAIT
    clock.advance(d.wait_s)
    assert restart(b).verdict is BudgetVerdict.ACT
    clock.advance(5)  # and again
    d = b.request(KEY)
    assert d.verdict is BudgetVerdict.GAVE_UP
    assert d.reason == "2 restarts in a row that failed during start-up"


def test_a_death_after_running_healthy_resets_the_start_up_count() -> None:
    b, clock = budget(burst=10, window_s=10_000, delay_s=1, startup_s=60, startup_retries=2, reset_after_s=10_000)
    restart(b)
    clock.advance(5)  # start-up failure 1
    clock.advance(b.request(KEY).wait_s)
    restart(b)
    clock.advance(120)  # ran past start-up this time
    assert b.request(KEY).verdict is BudgetVerdict.ACT
    restart(b)
    clock.advance(5)  # a start-up failure again, but only the first in a row
    assert b.request(KEY).verdict is not BudgetVerdict.GAVE_UP


def test_a_restart_whose_verification_failed_makes_the_next_failure_a_start_up_one() -> None:
    b, clock = budget(burst=10, window_s=10_000, delay_s=1, startup_s=60, startup_retries=1)
    restart(b, ok=False)
    clock.advance(500)  # long after start-up, but it never came back
    assert b.request(KEY).verdict is BudgetVerdict.GAVE_UP


def test_repeated_requests_for_one_failure_are_judged_once() -> None:
    b, clock = budget(burst=10, window_s=10_000, delay_s=30, startup_s=60, startup_retries=2)
    restart(b)
    for _ in range(20):  # the condition holds on every evaluation while backing off
        clock.advance(1)
        assert b.request(KEY).verdict is BudgetVerdict.WAIT
    assert b.states()[0].startup_failures == 1


def test_gave_up_is_terminal_until_rearmed() -> None:
    b, clock = budget(burst=1, window_s=1000, startup_s=1)
    restart(b)
    clock.advance(10)
    assert b.request(KEY).new
    for _ in range(5):
        clock.advance(3600)  # the window passing changes nothing: a person must re-arm it
        d = b.request(KEY)
        assert d.verdict is BudgetVerdict.GAVE_UP and not d.new
    assert b.rearm(["restart-server"]) == []
    assert b.rearm() == [KEY]
    assert b.request(KEY).verdict is BudgetVerdict.ACT
    assert b.states()[0].total_restarts == 1  # the history is forgotten, the total is kept


def test_targets_have_budgets_of_their_own() -> None:
    b, clock = budget(burst=1, window_s=1000, startup_s=1)
    restart(b, "restart-workers:worker-0")
    clock.advance(10)
    assert b.request("restart-workers:worker-0").verdict is BudgetVerdict.GAVE_UP
    assert b.request("restart-workers:worker-1").verdict is BudgetVerdict.ACT


def test_a_wall_clock_jump_opens_no_window() -> None:
    b, clock = budget(burst=1, window_s=1000, startup_s=1)
    restart(b)
    clock.jump_wall(10**6)  # NTP or a person moves the wall clock a long way
    clock.advance(10)
    assert b.request(KEY).verdict is BudgetVerdict.GAVE_UP


def test_state_shows_the_next_allowed_time_while_backing_off() -> None:
    b, clock = budget(burst=5, window_s=1000, delay_s=10, startup_s=1)
    restart(b)
    (state,) = b.states()
    assert state.next_allowed == clock.monotonic() + 10 and state.restarts_in_window == 1
    clock.advance(11)
    assert b.states()[0].next_allowed is None


# ------------------------------------------------------------------------------------------------ the model


class BudgetModel(RuleBasedStateMachine):
    """Random failures, waits, verification results and re-arms against one budget. The model keeps its own
    record of every restart and of "gave up", independent of the budget's internals."""

    cfg = BudgetConfig(
        burst=3, window_s=100.0, delay_s=2.0, max_delay_s=16.0, reset_after_s=50.0, startup_s=5.0, startup_retries=2
    )

    @initialize()
    def setup(self) -> None:
        self.clock = FakeClock()
        self.budget = RestartBudget(self.cfg, self.clock)
        self.restarts: list[float] = []
        self.gave_up = False
        self.since_rearm: list[float] = []

    @rule(seconds=st.floats(min_value=0.0, max_value=60.0))
    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(ok=st.booleans())
    def fail(self, ok: bool) -> None:
        d = self.budget.request(KEY)
        if self.gave_up:
            assert d.verdict is BudgetVerdict.GAVE_UP and not d.new, "acted after gave up without a re-arm"
            return
        if d.verdict is BudgetVerdict.GAVE_UP:
            assert d.new
            self.gave_up = True
        elif d.verdict is BudgetVerdict.ACT:
            self.budget.started(KEY)
            self.budget.finished(KEY, ok)
            now = self.clock.monotonic()
            self.restarts.append(now)
            self.since_rearm.append(now)
        else:
            assert d.wait_s > 0

    @precondition(lambda self: self.gave_up)
    @rule()
    def rearm(self) -> None:
        assert self.budget.rearm() == [KEY]
        self.gave_up = False
        self.since_rearm = []
        assert self.budget.request(KEY).verdict is BudgetVerdict.ACT  # re-armed: the next failure is acted on

    @invariant()
    def never_more_than_the_burst_in_any_window(self) -> None:
        times = self.since_rearm
        for i, start in enumerate(times):
            in_window = [t for t in times[i:] if t - start < self.cfg.window_s]
            assert len(in_window) <= self.cfg.burst

    @invariant()
    def restarts_close_together_are_spaced_by_the_delay(self) -> None:
        times = self.since_rearm
        for a, b in itertools.pairwise(times):
            if b - a < self.cfg.reset_after_s:
                assert b - a >= self.cfg.delay_s

    @invariant()
    def the_budget_agrees_it_gave_up(self) -> None:
        assert (self.budget.gave_up(KEY) is not None) == self.gave_up


TestBudgetModel: Callable[[], object] = BudgetModel.TestCase
TestBudgetModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)  # type: ignore[attr-defined]
