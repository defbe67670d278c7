"""Policies on a fake clock: which conditions fire for which target, stale evidence after an action, ``for_s``;
and the watchdog's decision loop over a real engine (real log files, real worker processes) with an actions
stand-in that records what it was asked to do."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from pydantic import ValidationError

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import (
    ActionPlan,
    ActionResult,
    EventSummary,
    MemoryState,
    ProcessInfo,
    ServerState,
    Severity,
    Snapshot,
    TrainingState,
)
from rlwatch.config.models import BudgetConfig, Config, Policy, PolicyWhen, ProcessRule, WatchdogConfig
from rlwatch.engine.engine import Engine
from rlwatch.remedy.actions.audit import AuditLog
from rlwatch.remedy.actions.plan import Prepared, refused
from rlwatch.remedy.policies import Evidence, PolicyEngine
from rlwatch.remedy.watchdog import Notifier, Watchdog, WatchdogError
from rlwatch.sources.watchdog_state import read_status, request_rearm
from tests.simhost import wait_until

MB = 1024**2


def proc(
    name: str, pid: int, *, role: str = "worker", rss: int | None = 50 * MB, alive: bool = True, **kw: Any
) -> ProcessInfo:
    return ProcessInfo(
        pid=pid,
        create_time=1000.0 + pid,
        role=role,
        name=name,
        rss_bytes=rss,
        rss_growth_bytes_per_hour=kw.get("growth"),
        started_at=1000.0 + pid,
        restarts=0,
        cmdline=("python", f"{name}.py"),
        cwd=None,
        user="me",
        alive=alive,
    )


def events(kind: str, files: dict[str, int]) -> dict[str, EventSummary]:
    total = sum(files.values())
    return {kind: EventSummary(kind, Severity.WARNING, total, 1.0, 2.0, 0.0, 0, dict(files))}


def snap(**kw: Any) -> Snapshot:
    return Snapshot(host="h", time=2000.0, profile="workers", run_dir="/run", **kw)


def policy(name: str = "p", actions: tuple[str, ...] = ("restart-workers",), **when: Any) -> Policy:
    return Policy(name=name, when=PolicyWhen(**when), actions=list(actions))  # type: ignore[arg-type]


WORKERS = (proc("worker-0", 100), proc("worker-1", 101))
OWNERS = {"/run/logs/w0.log": "worker-0", "/run/logs/w1.log": "worker-1"}


def brake_evidence(w0: int, w1: int, *, streak0: int | None = None, streak1: int | None = None) -> Evidence:
    s = snap(processes=WORKERS, events=events("emergency_brake", {"/run/logs/w0.log": w0, "/run/logs/w1.log": w1}))
    streaks = {
        "/run/logs/w0.log": w0 if streak0 is None else streak0,
        "/run/logs/w1.log": w1 if streak1 is None else streak1,
    }
    return Evidence(s, {"emergency_brake": streaks}, OWNERS)


# --------------------------------------------------------------------------------------------- per worker


def test_a_brake_streak_restarts_that_worker_only() -> None:
    engine = PolicyEngine([policy(event="emergency_brake", streak=10)], FakeClock())
    (firing,) = engine.evaluate(brake_evidence(3, 12))
    assert firing.target == "worker-1" and firing.only == ("worker-1",)
    assert firing.key == "restart-workers:worker-1"
    assert firing.reason == "emergency_brake 12 times in a row in w1.log"
    assert firing.files == ("/run/logs/w1.log",)


def test_a_streak_below_the_threshold_or_ended_by_progress_does_not_fire() -> None:
    engine = PolicyEngine([policy(event="emergency_brake", streak=10)], FakeClock())
    assert engine.evaluate(brake_evidence(9, 40, streak1=2)) == []  # 40 brakes, but a trial finished since


def test_evidence_from_before_an_action_does_not_fire_again() -> None:
    engine = PolicyEngine([policy(event="emergency_brake", streak=10)], FakeClock())
    ev = brake_evidence(0, 12)
    (firing,) = engine.evaluate(ev)
    engine.acting(firing, ev)
    engine.done(firing)
    assert engine.evaluate(brake_evidence(0, 15)) == []  # the streak goes on in the file, but only 3 are new
    (again,) = engine.evaluate(brake_evidence(0, 22))  # ten since the restart: the new worker brakes too
    assert again.reason == "emergency_brake 10 times in a row in w1.log"


def test_an_action_on_one_worker_keeps_the_other_workers_evidence() -> None:
    engine = PolicyEngine([policy(event="emergency_brake", streak=10)], FakeClock())
    ev = brake_evidence(9, 12)
    (firing,) = engine.evaluate(ev)
    engine.acting(firing, ev)
    (other,) = engine.evaluate(brake_evidence(10, 12))
    assert other.target == "worker-0"


def test_a_file_no_worker_is_known_to_write_falls_back_to_all_workers() -> None:
    engine = PolicyEngine([policy(event="emergency_brake", streak=10)], FakeClock())
    s = snap(processes=WORKERS, events=events("emergency_brake", {"/run/pool.log": 11}))
    (firing,) = engine.evaluate(Evidence(s, {"emergency_brake": {"/run/pool.log": 11}}, {}))
    assert firing.target == "workers" and firing.only is None
    assert "no worker is known to write /run/pool.log" in firing.reason


def test_a_file_written_by_a_process_of_another_role_is_nobodys_worker() -> None:
    engine = PolicyEngine([policy(event="emergency_brake", streak=10)], FakeClock())
    trainer = proc("trainer", 7, role="trainer")
    s = snap(processes=(*WORKERS, trainer), events=events("emergency_brake", {"/run/train.log": 11}))
    ev = Evidence(s, {"emergency_brake": {"/run/train.log": 11}}, {"/run/train.log": "trainer"})
    assert engine.evaluate(ev) == []


def test_over_the_memory_limit_restarts_that_worker_until_it_is_replaced() -> None:
    engine = PolicyEngine([policy(over_memory_limit=True)], FakeClock())
    big = proc("worker-1", 101, rss=900 * MB)
    ev = Evidence(snap(processes=(WORKERS[0], big)), limits={"worker-0": 500 * MB, "worker-1": 500 * MB})
    (firing,) = engine.evaluate(ev)
    assert firing.target == "worker-1" and firing.idents == ((101, 1101.0),)
    assert "over its 524.3 MB limit" in firing.reason
    engine.acting(firing, ev)
    assert engine.evaluate(ev) == []  # a stale snapshot still shows the old process: not evidence
    fresh = proc("worker-1", 202, rss=900 * MB)  # its replacement leaks past the limit too
    ev2 = Evidence(snap(processes=(WORKERS[0], fresh)), limits={"worker-1": 500 * MB})
    (again,) = engine.evaluate(ev2)
    assert again.idents == ((202, 1202.0),)


def test_rss_and_growth_conditions_must_both_hold() -> None:
    engine = PolicyEngine([policy(rss_above_bytes=100 * MB, growth_above_bytes_per_hour=10 * MB)], FakeClock())
    steady = proc("worker-0", 100, rss=300 * MB, growth=1 * MB)
    leaking = proc("worker-1", 101, rss=300 * MB, growth=50 * MB)
    small = proc("worker-2", 102, rss=20 * MB, growth=50 * MB)
    firings = engine.evaluate(Evidence(snap(processes=(steady, leaking, small))))
    assert [f.target for f in firings] == ["worker-1"]


def test_role_limits_which_processes_are_targets() -> None:
    engine = PolicyEngine([policy(rss_above_bytes=100 * MB, role="sampler")], FakeClock())
    sampler = proc("sampler", 9, role="sampler", rss=300 * MB)
    worker = proc("worker-0", 100, rss=300 * MB)
    assert [f.target for f in engine.evaluate(Evidence(snap(processes=(sampler, worker))))] == ["sampler"]


def test_dead_workers_are_not_restarted_by_a_per_worker_policy() -> None:
    engine = PolicyEngine([policy(rss_above_bytes=1)], FakeClock())
    assert engine.evaluate(Evidence(snap(processes=(proc("worker-0", 100, alive=False),)))) == []


# ---------------------------------------------------------------------------------------------- host-wide


def test_server_down_fires_once_for_the_host_after_for_s() -> None:
    clock = FakeClock()
    engine = PolicyEngine([policy("server-down", ("restart-server", "resume"), server_down=True, for_s=60)], clock)
    down = Evidence(snap(server=ServerState("sglang", "http://x", False, 1.0, None, error="connection refused")))
    assert engine.evaluate(down) == []
    clock.advance(59)
    assert engine.evaluate(down) == []
    clock.advance(1)
    (firing,) = engine.evaluate(down)
    assert (firing.target, firing.key, firing.only) == ("host", "restart-server+resume", None)
    assert firing.reason == "inference server down (connection refused) for 60s"


def test_for_s_starts_over_when_the_condition_clears_and_after_an_action() -> None:
    clock = FakeClock()
    engine = PolicyEngine([policy("s", ("restart-server",), server_down=True, for_s=10)], clock)
    down = Evidence(snap(server=ServerState("sglang", "http://x", False, 1.0, None)))
    up = Evidence(snap(server=ServerState("sglang", "http://x", True, None, None)))
    engine.evaluate(down)
    clock.advance(8)
    engine.evaluate(up)  # a blip of health
    clock.advance(8)
    assert engine.evaluate(down) == []
    clock.advance(10)
    (firing,) = engine.evaluate(down)
    engine.acting(firing, down)
    clock.advance(30)  # the restart took a while
    engine.done(firing)
    assert engine.evaluate(down) == []  # must hold for for_s again after the action
    clock.advance(10)
    assert len(engine.evaluate(down)) == 1


def test_server_not_checked_yet_is_not_down() -> None:
    engine = PolicyEngine([policy("s", ("restart-server",), server_down=True)], FakeClock())
    assert engine.evaluate(Evidence(snap(server=ServerState(None, "http://x", None, None, None)))) == []
    assert engine.evaluate(Evidence(snap())) == []


def test_a_count_within_a_window_counts_only_what_arrived_while_watching() -> None:
    clock = FakeClock()
    p = policy("refused", ("restart-server",), event="connection_refused", count=5, window_s=60)
    engine = PolicyEngine([p], clock)

    def ev(a: int, b: int) -> Evidence:
        files = {"/run/trainer.log": a, "/run/output.log": b}
        return Evidence(snap(events=events("connection_refused", files)))

    assert engine.evaluate(ev(500, 500)) == []  # the backlog found at start is history
    clock.advance(10)
    assert engine.evaluate(ev(504, 504)) == []
    clock.advance(10)
    (firing,) = engine.evaluate(ev(505, 506))  # one host-wide firing, whichever files hold the evidence
    assert firing.target == "host" and firing.files == ("/run/output.log", "/run/trainer.log")
    clock.advance(61)
    assert engine.evaluate(ev(506, 507)) == []  # the window moved past them


def test_available_memory_dead_role_and_stall() -> None:
    eng = PolicyEngine(
        [
            policy("ram", ("kill-zombies",), available_below_bytes=2 * 1024**3),
            policy("dead", ("resume",), dead="trainer"),
            policy("stall", ("resume",), stalled=True),
        ],
        FakeClock(),
    )
    training = TrainingState(41, 60, None, None, True, None, None)
    s = snap(
        memory=MemoryState(32 * 1024**3, 1024**3, None, None, None, None),
        processes=(proc("trainer", 5, role="trainer", alive=False),),
        training=training,
    )
    assert {f.policy for f in eng.evaluate(Evidence(s))} == {"ram", "dead", "stall"}
    finished = replace(s, training=replace(training, finished=True, stalled=False))
    assert {f.policy for f in eng.evaluate(Evidence(finished))} == {"ram"}  # a finished run is not dead
    never_seen = replace(s, processes=(), memory=None, training=None)
    assert eng.evaluate(Evidence(never_seen)) == []  # absent data is no evidence


def test_disabled_policies_do_nothing() -> None:
    p = Policy(name="off", when=PolicyWhen(server_down=True), actions=["restart-server"], enabled=False)
    assert (
        PolicyEngine([p], FakeClock()).evaluate(Evidence(snap(server=ServerState(None, "u", False, 1.0, None)))) == []
    )


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ({}, "at least one condition"),
        ({"event": "emergency_brake"}, "give streak or count"),
        ({"streak": 3}, "need an event"),
        ({"event": "timeout", "count": 3}, "count and window_s go together"),
        ({"server_down": True, "for_s": -1}, "greater than or equal to 0"),
    ],
)
def test_incoherent_conditions_are_config_errors(when: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PolicyWhen(**when)


def test_unknown_actions_are_config_errors() -> None:
    with pytest.raises(ValidationError):
        Policy.model_validate({"name": "x", "when": {"server_down": True}, "actions": ["reboot"]})


# ------------------------------------------------------------------------------------- the decision loop


class RecordingActions:
    """Stands in for the actions API: plans every action, runs none, records the calls (supervisor's
    DummyOptions pattern); ``gate`` holds an execution until the test lets it go."""

    def __init__(self, audit: AuditLog) -> None:
        self.audit = audit
        self.prepared: list[tuple[str, tuple[str, ...] | None]] = []
        self.executed: list[tuple[str, tuple[str, ...] | None]] = []
        self.refuse: dict[str, str] = {}
        self.fail: set[str] = set()
        self.gate: threading.Event | None = None
        self.running = threading.Event()

    def prepare(self, action: str, *, force: bool = False, only: list[str] | None = None) -> Prepared:
        names = tuple(only) if only else None
        self.prepared.append((action, names))
        if action in self.refuse:
            return refused(action, self.refuse[action])
        return Prepared(ActionPlan(action, (), ("stop", "start")), only=names)

    def execute(self, prepared: Prepared, progress: object = None) -> ActionResult:
        self.running.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        self.executed.append((prepared.plan.action, prepared.only))
        self.running.clear()
        ok = prepared.plan.action not in self.fail
        return ActionResult(prepared.plan.action, ok, f"{prepared.plan.action}: {'done' if ok else 'FAILED'}")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """Two real, idle processes that the config's worker rules select by a token of this test."""
    token = f"rlwatch-test-worker-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", token, "--index", str(i)])
        for i in range(2)
    ]
    yield token, procs
    for p in procs:
        p.kill()
        p.wait()


def loop_config(tmp_path: Path, token: str, policies: list[Policy], budget: BudgetConfig | None = None) -> Config:
    (tmp_path / "logs").mkdir(exist_ok=True)
    rules = [ProcessRule(role="worker", cmdline_regex=rf"{token} --index {i}$", log=f"logs/w{i}.log") for i in range(2)]
    return Config(
        profile="workers",
        processes=rules,
        gpu={"backend": "none"},  # type: ignore[arg-type]
        policies=policies,
        watchdog=WatchdogConfig(budget=budget or BudgetConfig(), heartbeat_s=1.0),
    )


class Loop:
    """A watchdog over a real engine, ticked by the test (no timers): log lines in, decisions out."""

    def __init__(self, tmp_path: Path, cfg: Config) -> None:
        self.dir = tmp_path
        self.clock = FakeClock()
        self.engine = Engine(cfg, tmp_path, clock=self.clock)
        self.actions = RecordingActions(AuditLog(tmp_path / ".rlwatch" / "audit.jsonl", self.clock))
        self.records: list[dict[str, Any]] = []
        self.wd = Watchdog(self.engine, actions=self.actions, emit=self.records.append, notifier=Notifier(env={}))  # type: ignore[arg-type]

    def brake(self, worker: int, n: int) -> None:
        with (self.dir / "logs" / f"w{worker}.log").open("a") as f:
            f.write("WARNING EMERGENCY BRAKE: only 1.8 GB free, refusing to start a trial\n" * n)

    def trial(self, worker: int) -> None:
        with (self.dir / "logs" / f"w{worker}.log").open("a") as f:
            f.write("trial 7 done in 3.1 s\n")

    def tick(self) -> None:
        self.wd.on_snapshot(self.engine.collect_once())
        self.wd.tick()

    def settle(self) -> None:
        """Wait for the running action (if any) to finish."""
        wait_until(lambda: self.wd._running_key is None, 10)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["type"] == kind]

    def close(self) -> None:
        self.wd.stop()
        self.engine.stop()


@pytest.fixture
def brake_loop(tmp_path: Path, workers: tuple[str, list[subprocess.Popen[bytes]]]) -> Iterator[Loop]:
    cfg = loop_config(
        tmp_path,
        workers[0],
        [policy("brake", event="emergency_brake", streak=3)],
        BudgetConfig(burst=2, window_s=600, delay_s=5, startup_s=1, reset_after_s=100),
    )
    loop = Loop(tmp_path, cfg)
    assert loop.wd.claim()
    yield loop
    loop.close()


def test_the_loop_restarts_the_braking_worker_and_records_it(brake_loop: Loop) -> None:
    loop = brake_loop
    loop.brake(1, 3)
    loop.tick()
    loop.settle()
    assert loop.actions.executed == [("restart-workers", ("worker-1",))]
    (pol,) = loop.of("policy")
    assert (pol["decision"], pol["key"]) == ("act", "restart-workers:worker-1")
    (act,) = loop.of("action")
    assert act["ok"] is True and act["message"] == "restart-workers: done"
    loop.tick()  # the streak is still 3 in the file: evidence from before the restart
    loop.settle()
    assert len(loop.actions.executed) == 1


def test_no_policy_decides_while_the_backlog_is_read_or_before_the_host_was_seen(brake_loop: Loop) -> None:
    """A snapshot of a backlog still being read holds partial counts, one built before the first sample holds no
    processes: a streak there is no evidence to act on. The state file says it is reading."""
    loop = brake_loop
    loop.brake(1, 3)
    snap = loop.engine.collect_once()
    for partial in (
        replace(snap, backlog=(10 << 20, 64 << 20)),
        replace(snap, preview="now from the newest 2.0 MiB of w1.log"),
        replace(snap, sources=tuple(s for s in snap.sources if s.name != "processes")),
    ):
        loop.wd.on_snapshot(partial)
        loop.wd.tick()
        loop.settle()
        assert loop.actions.executed == [] and not loop.of("policy"), partial
    assert loop.wd.state()["reading_backlog"] is None  # the last one was read, only not sampled
    loop.wd.on_snapshot(replace(snap, backlog=(10 << 20, 64 << 20)))
    loop.wd.tick()
    assert loop.wd.state()["reading_backlog"] == [10 << 20, 64 << 20]
    loop.wd.on_snapshot(snap)  # read and sampled: now it acts
    loop.wd.tick()
    loop.settle()
    assert loop.actions.executed == [("restart-workers", ("worker-1",))]
    assert loop.wd.state()["reading_backlog"] is None


def test_backing_off_then_giving_up_then_rearmed_by_request(brake_loop: Loop) -> None:
    loop = brake_loop
    loop.brake(0, 3)
    loop.tick()
    loop.settle()
    loop.clock.advance(2)  # the restarted worker brakes again right after start-up
    loop.brake(0, 3)
    loop.tick()
    assert loop.of("policy")[-1]["decision"] == "wait"
    loop.clock.advance(5)
    loop.tick()
    loop.settle()
    assert len(loop.actions.executed) == 2
    loop.clock.advance(50)
    loop.brake(0, 3)
    loop.tick()  # the burst of 2 is spent
    (gave,) = loop.of("gave_up")
    assert gave["key"] == "restart-workers:worker-0" and gave["reason"].startswith("2 restarts in")
    for _ in range(3):
        loop.clock.advance(1000)
        loop.brake(0, 3)
        loop.tick()
    assert len(loop.actions.executed) == 2 and len(loop.of("gave_up")) == 1  # nothing more, said once
    status, _ = read_status(loop.dir, loop.clock.time())
    assert status is not None and [g.target for g in status.gave_up] == ["restart-workers:worker-0"]
    audit = (loop.dir / ".rlwatch" / "audit.jsonl").read_text()
    assert '"event": "gave_up"' in audit

    assert request_rearm(loop.dir, None, loop.clock.time()) is None  # what `rlwatch act rearm` does
    loop.tick()
    assert loop.of("rearmed")[-1]["targets"] == ["restart-workers:worker-0"]
    loop.brake(0, 3)
    loop.tick()
    loop.settle()
    assert len(loop.actions.executed) == 3  # acting again
    status, _ = read_status(loop.dir, loop.clock.time())
    assert status is not None and status.gave_up == ()


def test_one_action_at_a_time_and_the_other_target_waits(brake_loop: Loop) -> None:
    loop = brake_loop
    loop.actions.gate = threading.Event()
    loop.brake(0, 3)
    loop.brake(1, 3)
    loop.tick()
    assert loop.actions.running.wait(5)
    loop.tick()
    loop.tick()
    assert loop.actions.prepared == [("restart-workers", ("worker-0",))]  # worker-1 waits its turn
    loop.actions.gate.set()
    loop.settle()
    loop.tick()
    loop.settle()
    assert loop.actions.executed == [("restart-workers", ("worker-0",)), ("restart-workers", ("worker-1",))]


def test_a_refused_plan_is_not_charged_and_is_said_once(brake_loop: Loop) -> None:
    loop = brake_loop
    loop.actions.refuse["restart-workers"] = "no start command known for worker-1"
    loop.brake(1, 3)
    for _ in range(4):
        loop.tick()
        loop.clock.advance(1)
    assert loop.actions.executed == []
    refusals = [r for r in loop.of("policy") if r["decision"] == "refused"]
    assert len(refusals) == 1 and "no start command known" in refusals[0]["detail"]
    del loop.actions.refuse["restart-workers"]
    loop.clock.advance(5)
    loop.tick()
    loop.settle()
    assert loop.actions.executed == [("restart-workers", ("worker-1",))]


def test_a_later_action_refused_is_skipped_and_a_failed_one_stops_the_sequence(
    tmp_path: Path, workers: tuple[str, list[subprocess.Popen[bytes]]]
) -> None:
    cfg = loop_config(
        tmp_path, workers[0], [policy("both", ("restart-workers", "resume"), event="emergency_brake", streak=2)]
    )
    loop = Loop(tmp_path, cfg)
    try:
        assert loop.wd.claim()
        loop.actions.refuse["resume"] = "the trainer is alive"
        loop.brake(0, 2)
        loop.tick()
        loop.settle()
        acts = loop.of("action")
        assert [(a["action"], a["skipped"]) for a in acts] == [("restart-workers", False), ("resume", True)]
        assert acts[1]["message"] == "resume: skipped: the trainer is alive"
        loop.actions.fail.add("restart-workers")
        loop.clock.advance(100)
        loop.brake(0, 2)
        loop.tick()
        loop.settle()
        assert [a["action"] for a in loop.of("action")][2:] == ["restart-workers"]  # no resume after a failure
        state = loop.wd.state()
        assert state["budgets"]["restart-workers+resume:worker-0"]["total_restarts"] == 2
    finally:
        loop.close()


def test_a_policy_acts_from_its_first_action_that_may_run(
    tmp_path: Path, workers: tuple[str, list[subprocess.Popen[bytes]]]
) -> None:
    """restart-server refused (resume brings the server back with the run) must not keep the resume from running:
    the refused one is recorded as skipped with its reason, the next one runs (when none may run, the policy is
    refused: test_a_refused_plan_is_not_charged_and_is_said_once)."""
    both = ("kill-zombies", "restart-workers")
    budget = BudgetConfig(burst=2, window_s=600, delay_s=5, startup_s=1, reset_after_s=100)
    cfg = loop_config(tmp_path, workers[0], [policy("brake", both, event="emergency_brake", streak=3)], budget)
    loop = Loop(tmp_path, cfg)
    try:
        assert loop.wd.claim()
        loop.actions.refuse["kill-zombies"] = "nothing to stop"
        loop.brake(0, 3)
        loop.tick()
        loop.settle()
        assert loop.actions.executed == [("restart-workers", ("worker-0",))]
        skipped, ran = loop.of("action")
        assert (skipped["action"], skipped["skipped"], skipped["message"]) == (
            "kill-zombies",
            True,
            "kill-zombies: skipped: nothing to stop",
        )
        assert (ran["action"], ran["ok"]) == ("restart-workers", True)
        assert [r["decision"] for r in loop.of("policy")] == ["act"]

    finally:
        loop.close()


def test_a_second_watchdog_of_the_same_run_only_watches(brake_loop: Loop, tmp_path: Path) -> None:
    other = Watchdog(brake_loop.engine, actions=brake_loop.actions, emit=lambda r: None, notifier=Notifier(env={}))  # type: ignore[arg-type]
    assert other.claim() is False
    assert other.why_not_acting is not None and "another watchdog" in other.why_not_acting
    brake_loop.brake(0, 3)
    other.on_snapshot(brake_loop.engine.collect_once())
    other.tick()
    assert brake_loop.actions.prepared == []


def test_state_file_heartbeat_and_clean_stop(brake_loop: Loop) -> None:
    loop = brake_loop
    loop.tick()
    status, error = read_status(loop.dir, loop.clock.time())
    assert error is None and status is not None
    assert status.running and not status.stale and status.heartbeat_age_s == 0
    loop.clock.advance(120)  # no tick for two minutes: the heartbeat is stale
    status, _ = read_status(loop.dir, loop.clock.time())
    assert status is not None and status.stale
    loop.wd.stop()
    status, _ = read_status(loop.dir, loop.clock.time())
    assert status is not None and not status.running and status.stopped is not None


def test_a_policy_on_an_event_kind_nobody_counts_is_refused(tmp_path: Path) -> None:
    cfg = Config(gpu={"backend": "none"}, policies=[policy(event="emergncy_brake", streak=3)])  # type: ignore[arg-type]
    engine = Engine(cfg, tmp_path)
    try:
        with pytest.raises(WatchdogError, match="no event kind 'emergncy_brake'"):
            Watchdog(engine, actions=RecordingActions(AuditLog(tmp_path / "a", FakeClock())), notifier=Notifier(env={}))  # type: ignore[arg-type]
    finally:
        engine.stop()


# --------------------------------------------------------------------------------------- shipped profiles


def test_the_shipped_profiles_encode_the_incidents(tmp_path: Path) -> None:
    from rlwatch.config.profiles import profile_defaults

    workers = profile_defaults("workers", tmp_path)
    by_name = {p.name: p for p in workers.policies}
    brake = by_name["brake-restarts-worker"]
    assert (brake.when.event, brake.when.streak, brake.actions) == ("emergency_brake", 10, ["restart-workers"])
    over = by_name["worker-over-memory"]
    assert over.when.over_memory_limit and over.actions == ["restart-workers"]
    assert next(r for r in workers.processes if r.role == "worker").memory_limit_bytes == 8 * 1024**3
    for name in ("areal", "trl"):
        (down,) = profile_defaults(name, tmp_path).policies
        assert down.when.server_down and down.when.for_s == 60 and down.actions == ["restart-server", "resume"]


def test_the_workers_profile_restarts_one_worker_per_streak_of_ten() -> None:
    from rlwatch.config.profiles import BRAKE_RESTARTS_WORKER

    engine = PolicyEngine([BRAKE_RESTARTS_WORKER], FakeClock())
    assert engine.evaluate(brake_evidence(9, 9)) == []
    assert [f.only for f in engine.evaluate(brake_evidence(10, 9))] == [("worker-0",)]


# ------------------------------------------------------------------------------------------- a policy model


class StreakPolicyModel(RuleBasedStateMachine):
    """Brake lines and finished trials arrive in two workers' logs at random; the policy is evaluated and acted on
    at random moments. The model keeps its own per-file counts and checks every firing against them: a worker is
    restarted only with N brakes in a row in its own log, all of them after its previous restart."""

    N = 4

    @initialize()
    def setup(self) -> None:
        self.engine = PolicyEngine([policy(event="emergency_brake", streak=self.N)], FakeClock())
        self.count = [0, 0]
        self.streak = [0, 0]
        self.at_restart = [0, 0]  # brakes counted in each file when that worker was last restarted

    @rule(worker=st.integers(0, 1), n=st.integers(1, 6))
    def brake(self, worker: int, n: int) -> None:
        self.count[worker] += n
        self.streak[worker] += n

    @rule(worker=st.integers(0, 1))
    def trial_done(self, worker: int) -> None:
        self.streak[worker] = 0

    @rule()
    def evaluate_and_act(self) -> None:
        ev = brake_evidence(self.count[0], self.count[1], streak0=self.streak[0], streak1=self.streak[1])
        due = {f"worker-{i}" for i in range(2) if min(self.streak[i], self.count[i] - self.at_restart[i]) >= self.N}
        firings = self.engine.evaluate(ev)
        assert {f.target for f in firings} == due  # exactly the workers with N fresh brakes in a row
        for firing in firings:
            i = int(firing.target[-1])
            assert firing.only == (firing.target,)
            self.engine.acting(firing, ev)
            self.engine.done(firing)
            self.at_restart[i] = self.count[i]


TestStreakPolicyModel = StreakPolicyModel.TestCase
TestStreakPolicyModel.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)


def test_the_state_file_carries_the_straggler_the_live_stacks_name(brake_loop: Loop) -> None:
    from dataclasses import replace

    from rlwatch.common.state import Finding, Severity

    loop = brake_loop
    said = "A straggler slows the run (rank 1): rank 0 spends 80 % of its time waiting in all_reduce for rank 1."
    snap = loop.engine.collect_once()
    loop.engine._snapshot = replace(snap, findings=(Finding(Severity.WARNING, "straggler", said, None),))
    loop.wd._write_state()
    status, error = read_status(loop.dir, loop.clock.time())
    assert error is None and status is not None and status.straggler == said
