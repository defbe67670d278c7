"""Findings that say what fixes them, and findings that do not say what is not so: a server that is starting is
starting, a restart loop is named by its second restart, a forecast rests on a trend it can defend, and times and
positions read once."""

from __future__ import annotations

import math

from rlwatch.common import forecast
from rlwatch.common.state import (
    EventSummary,
    Finding,
    GpuHolder,
    Incident,
    ProcessInfo,
    ServerState,
    Severity,
    Snapshot,
    WatchdogStatus,
)
from rlwatch.config.models import Thresholds
from rlwatch.engine.diagnosis import Context, diagnose, incident_text, when_text
from rlwatch.engine.diagnosis.restarts import restart_loop
from rlwatch.engine.diagnosis.server import server_down

NOW = 1_763_700_000.0
URL = "http://127.0.0.1:30000"


def proc(pid: int, role: str, age: float, *, alive: bool = True) -> ProcessInfo:
    return ProcessInfo(
        pid, NOW - age, role, role, 25_000_000, None, NOW - age, 0, ("python3", role), "/run", "root", alive=alive
    )


def snap(**fields: object) -> Snapshot:
    return Snapshot(host="h", time=NOW, profile="areal", run_dir="/run", **fields)  # type: ignore[arg-type]


def down(pid: int | None = None, alive: bool | None = False) -> ServerState:
    return ServerState("sglang", URL, False, NOW - 3, pid, error="connection refused", process_alive=alive)


def codes(found: list[Finding]) -> dict[str, Finding]:
    return {f.code: f for f in found}


# ------------------------------------------------------------------------------------------------ server


def test_a_run_a_few_seconds_into_its_start_has_a_server_starting_not_down() -> None:
    """4 s into a normal start: the launcher lives, the server process is not even there yet, nothing refused."""
    s = snap(server=down(), processes=(proc(10, "launcher", 4),))
    found = codes(list(server_down(s, Context())))
    assert set(found) == {"server_starting"}
    assert found["server_starting"].severity is Severity.INFO
    assert "started 4s ago" in found["server_starting"].message


def test_a_server_process_the_probe_has_not_matched_yet_is_starting() -> None:
    """The probe ran before the process list saw the server (its pid unknown to it): still the live server's."""
    s = snap(server=down(pid=None, alive=False), processes=(proc(10, "launcher", 6), proc(11, "server", 4)))
    found = codes(list(server_down(s, Context())))
    assert set(found) == {"server_starting"}
    assert "process 11 started 4s ago" in found["server_starting"].message


def test_a_server_gone_after_steps_is_down_and_says_what_brings_it_back() -> None:
    step = EventSummary("step", Severity.INFO, 40, NOW - 100, NOW - 30, 1.0, 0, {})
    gone_trainer = snap(
        server=down(),
        processes=(proc(10, "launcher", 900), proc(12, "trainer", 800, alive=False)),
        events={"step": step},
    )
    found = codes(list(server_down(gone_trainer, Context(trainer_alive=False))))
    assert found["server_down"].severity is Severity.CRITICAL
    assert found["server_down"].action == "resume"  # AReaL's launcher brings its own server back
    live_trainer = snap(server=down(), processes=(proc(12, "trainer", 800),), events={"step": step})
    found = codes(list(server_down(live_trainer, Context(trainer_alive=True))))
    assert found["server_down"].action == "restart-server"


def test_a_start_that_takes_too_long_is_down() -> None:
    s = snap(server=down(), processes=(proc(10, "launcher", 700),))
    assert "server_down" in codes(list(server_down(s, Context(server_start_timeout_s=600))))


# ----------------------------------------------------------------------------------------------- restarts


def test_a_restart_loop_is_named_by_its_second_restart() -> None:
    """Trained for two minutes, then the container failed: restarts 17 s apart. The second restart names it."""
    t0 = NOW - 200
    ctx = Context(starts={"container": (t0, t0 + 133)})
    assert not list(restart_loop(snap(), ctx))  # one restart: not yet a loop
    ctx = Context(starts={"container": (t0, t0 + 133, t0 + 150)})
    found = list(restart_loop(snap(), ctx))
    assert [f.code for f in found] == ["restart_loop"]
    assert "restarted 2 times since" in found[0].message and "every ~17s" in found[0].message
    assert found[0].since == t0 + 133  # when the loop began: the first restart


def test_two_banners_of_one_start_are_one_start() -> None:
    """The simulated container printed two start banners 0.6 s apart: 'started 4 times' after two restarts."""
    t0 = NOW - 200
    ctx = Context(starts={"container": (t0 - 0.3, t0 + 0.3, t0 + 133)})
    assert not list(restart_loop(snap(), ctx))  # one restart only
    ctx = Context(starts={"container": (t0 - 0.3, t0 + 0.3, t0 + 133, t0 + 150)})
    found = list(restart_loop(snap(), ctx))
    assert "restarted 2 times" in found[0].message


def test_a_loop_from_the_first_start_counts_every_start() -> None:
    ctx = Context(starts={"container": tuple(NOW - 17 * k for k in range(6, -1, -1))})
    found = list(restart_loop(snap(), ctx))
    assert "the container started 7 times, every ~17s" in found[0].message


def test_restarts_far_apart_are_not_a_loop() -> None:
    t0 = NOW - 10_000
    ctx = Context(starts={"container": (t0, t0 + 3000, t0 + 6000)})
    assert not list(restart_loop(snap(), ctx))


def test_the_loop_count_threshold_still_holds() -> None:
    t0 = NOW - 200
    ctx = Context(thresholds=Thresholds(restart_loop_count=4), starts={"container": (t0, t0 + 133, t0 + 150)})
    assert not list(restart_loop(snap(), ctx))


# --------------------------------------------------------------------------------------- keys and commands


def test_findings_carry_the_action_or_the_command_that_fixes_them() -> None:
    stray = GpuHolder(31337, NOW - 600, "root", ("python3",), ("/dev/nvidia0",), None, False, "stray", gpus=(0,))
    brake = EventSummary("emergency_brake", Severity.WARNING, 12, NOW - 60, NOW - 1, 12.0, 12, {})
    worker = ProcessInfo(20, NOW - 900, "worker", "worker-0", 3_000_000_000, 9e8, NOW - 900, 0, ("w",), "/run", "u")
    wd = WatchdogStatus(running=False, pid=99, since=NOW - 3600, heartbeat_age_s=600.0)
    busy = EventSummary("cuda_busy", Severity.CRITICAL, 3, NOW - 30, NOW - 5, 1.0, 3, {})
    s = snap(holders=(stray,), events={"emergency_brake": brake, "cuda_busy": busy}, processes=(worker,), watchdog=wd)
    found = codes(list(diagnose(s, Context(missing_expected=("watchdog",)))))
    assert found["gpu_strays"].action == "kill-zombies"
    assert "key z" not in found["gpu_strays"].message  # the views say the key (or the command), not the message
    assert found["device_busy"].action == "kill-zombies"  # the strays hold the device
    assert found["brake_no_relief"].action == "restart-workers"
    assert found["memory_leak"].action == "restart-workers"
    assert found["expected_missing"].command == "rlwatch service install"
    assert found["expected_missing"].fix_command() == "rlwatch service install"
    assert found["gpu_strays"].fix_command() == "rlwatch act kill-zombies"


def test_a_finding_is_still_built_from_its_four_fields() -> None:
    f = Finding(Severity.WARNING, "x", "y", None)
    assert f.action is None and f.command is None and f.fix_command() is None


# ----------------------------------------------------------------------------------------------- forecast


def falling(span_s: float, n: int, start: float, per_s: float, noise: float = 0.0) -> list[tuple[float, float, float]]:
    step = span_s / (n - 1)
    return [
        (i * step, NOW - span_s + i * step, start - per_s * i * step + noise * math.sin(i * 2.1) * (1 if i % 2 else -1))
        for i in range(n)
    ]


def test_a_minute_of_fall_is_not_an_hour_s_forecast() -> None:
    """At 4 % used, 24 GB free falling 0.36 GB/min for one minute: "exhausted in ~1h06m" was the answer; no more."""
    points = falling(70, 35, 24e9, 6e6)
    assert forecast.exhausted_at(points, min_drop=256 * 1024**2) is None
    assert forecast.exhausted_at(points, min_drop=256 * 1024**2, max_extrapolation=1e9) is not None  # the old answer


def test_a_steady_ten_minute_fall_still_forecasts_hours_ahead() -> None:
    points = falling(600, 120, 8e9, 8e9 / (3 * 3600))
    at = forecast.exhausted_at(points, min_drop=256 * 1024**2)
    assert at is not None and 2 * 3600 < at - NOW < 3 * 3600


def test_a_noisy_wander_is_no_trend() -> None:
    points = falling(600, 120, 8e9, 1e6, noise=2e9)  # another tenant's processes coming and going
    assert forecast.exhausted_at(points, min_drop=256 * 1024**2) is None


# ------------------------------------------------------------------------------------------------ wording


def test_bounds_within_one_second_read_as_that_second() -> None:
    assert when_text(NOW + 0.2, NOW + 0.7, True) == when_text(NOW, None, False)
    assert "between" not in when_text(NOW + 0.2, NOW + 0.7, True)


def test_an_incident_s_position_is_not_said_twice_beside_its_file_and_line() -> None:
    i = Incident(
        "traceback",
        "/run/train.log",
        6,
        -math.inf,
        -math.inf,
        3,
        "ValueError: x",
        None,
        "s",
        approximate=True,
        by=NOW,
        position="train.log:6",
        first_exact=False,
    )
    assert incident_text(i, said="train.log:6") == when_text(-math.inf, NOW, True)
    after = Incident(
        "traceback",
        "/run/train.log",
        6,
        -math.inf,
        -math.inf,
        3,
        "ValueError: x",
        None,
        "s",
        approximate=True,
        by=NOW,
        position="train.log:6, after step 7",
        first_exact=False,
    )
    assert incident_text(after, said="train.log:6").endswith("(after step 7)")


def test_report_json_and_the_stream_carry_what_fixes_each_finding() -> None:
    from rlwatch.export.report import to_json_dict
    from rlwatch.export.stream import changes

    f = Finding(Severity.CRITICAL, "gpu_strays", "strays", NOW, action="kill-zombies")
    g = Finding(Severity.CRITICAL, "expected_missing", "no watchdog", None, command="rlwatch service install")
    s = snap(findings=(f, g))
    rep = to_json_dict(s)["findings"]
    assert rep[0]["action"] == "kill-zombies" and rep[0]["command"] == "rlwatch act kill-zombies"
    assert rep[1]["action"] is None and rep[1]["command"] == "rlwatch service install"
    records = [r for r in changes(None, s) if r["type"] == "finding"]
    assert {r["command"] for r in records} == {"rlwatch act kill-zombies", "rlwatch service install"}


def test_a_server_that_said_ready_but_does_not_answer_yet_is_named_by_its_process() -> None:
    ready = EventSummary("server_ready", Severity.INFO, 1, NOW - 1, NOW - 1, 1.0, 0, {})
    srv = ServerState("sglang", URL, False, NOW - 2, None, error="connection refused", process_alive=False)
    s = snap(server=srv, processes=(proc(10, "launcher", 6), proc(11, "server", 4)), events={"server_ready": ready})
    found = codes(list(server_down(s, Context())))
    assert found["server_unhealthy"].severity is Severity.INFO
    assert "process 11 has not answered" in found["server_unhealthy"].message


def test_brake_firings_before_the_workers_restarted_are_history_with_no_key() -> None:
    """After a successful `w` the banner kept asking for `w` for a brake that fired only in the old workers' time."""
    brake = EventSummary("emergency_brake", Severity.WARNING, 24, NOW - 120, NOW - 40, 4.8, 0, {})
    fresh = ProcessInfo(21, NOW - 10, "worker", "worker-0", 18_000_000, None, NOW - 10, 0, ("w",), "/run", "u")
    found = codes(list(diagnose(snap(events={"emergency_brake": brake}, processes=(fresh,)), Context())))
    assert found["brake"].severity is Severity.INFO and found["brake"].action is None
    assert "has not fired since" in found["brake"].message
    old = ProcessInfo(20, NOW - 900, "worker", "worker-0", 3_000_000_000, None, NOW - 900, 0, ("w",), "/run", "u")
    found = codes(list(diagnose(snap(events={"emergency_brake": brake}, processes=(old,)), Context())))
    assert found["brake"].severity is Severity.WARNING and found["brake"].action == "restart-workers"
