"""Panels that agree with the diagnosis: a rate and an ETA only while steps advance, GPU holders said as far as they
were looked for, memory in units that fit and the brake's own reading, the events panel on the kind that matters."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from textual.widgets import Static

from rlwatch.common.state import (
    EventSummary,
    HostEvent,
    KernelLogState,
    LogLine,
    Series,
    Severity,
    SourceStatus,
    TrainingState,
)
from rlwatch.sources.memory import with_growth_forecast
from rlwatch.widgets.events_panel import EventsPanel
from rlwatch.widgets.gpu_panel import no_holders_lines
from rlwatch.widgets.memory_panel import (
    brake_reading,
    forecast_line,
    process_line,
    ram_summary,
    short_bytes,
    swap_summary,
)
from rlwatch.widgets.training_panel import advancing, rate_line
from tests import snapshot_data as data
from tests.tui.test_tui_pilot import RecordingFeed, make_app, text_of, wait_until


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def training(last_step_ago: float, *, sph: float = 1800.0, stalled: bool = False) -> TrainingState:
    return TrainingState(57, 250, 0.5, sph, stalled, 1000.0 - last_step_ago, 1000.0)


def test_rate_and_eta_while_steps_come_at_their_pace() -> None:
    tr = training(1.5)
    assert advancing(tr, 1000.0)
    line = rate_line(tr, 1000.0).plain
    assert "1800 steps/h" in line and "ETA 6m26s" in line


def test_no_rate_or_eta_once_steps_stop_coming_long_before_the_stall_threshold() -> None:
    """Incident 1 at 2 s a step: 14 s without a step beside "Training cannot make progress" is not 1800 steps/h."""
    tr = training(14.0)
    assert not advancing(tr, 1000.0)
    line = rate_line(tr, 1000.0).plain
    assert "steps/h" not in line and "ETA –" in line
    assert "no step for 14s" in line


def test_slow_steps_keep_their_rate_for_three_of_their_intervals() -> None:
    tr = training(25 * 60, sph=6.0)  # a step every 10 minutes, the last 25 minutes ago: still on pace
    assert advancing(tr, 1000.0)
    assert not advancing(training(31 * 60, sph=6.0), 1000.0)


def test_stalled_or_finished_has_no_rate() -> None:
    assert not advancing(training(1.0, stalled=True), 1000.0)
    done = dataclasses.replace(training(1.0), finished=True)
    assert "ETA done" in rate_line(done, 1000.0).plain


def test_gpu_holders_not_scanned_yet_are_not_called_none() -> None:
    snap = dataclasses.replace(data.gpu_zombie(), holders=(), sources=())
    text = " ".join(t.plain for t in no_holders_lines(snap, False))
    assert "first scan has not run yet" in text and "no process holds" not in text


def test_no_holder_found_beside_memory_in_use_says_both() -> None:
    base = data.gpu_zombie()
    snap = dataclasses.replace(base, holders=(), sources=(SourceStatus("holders", True, base.time - 4),))
    text = " ".join(t.plain for t in no_holders_lines(snap, False))
    assert "no holder found (scanned 4s ago), yet 89.5 GB of GPU memory is in use" in text


def test_idle_devices_without_holders_say_none_hold_them() -> None:
    snap = data.nccl_timeout()  # two devices at 0.6 GB each: what a driver keeps, no holder's
    text = " ".join(t.plain for t in no_holders_lines(snap, False))
    assert text.startswith("no process holds a GPU device")


@pytest.mark.parametrize(
    ("n", "text"), [(25e6, "25M"), (512e3, "512k"), (15.1e9, "15.1G"), (0, "0"), (None, "–"), (2.3e12, "2.3T")]
)
def test_memory_in_units_that_fit(n: float | None, text: str) -> None:
    assert short_bytes(n) == text


def test_a_small_leaking_process_shows_its_size_and_a_rising_line() -> None:
    proc = dataclasses.replace(data.memory_leak().processes[1], rss_bytes=400_000_000, rss_growth_bytes_per_hour=4.7e8)
    now = 10_000.0
    history = Series(tuple(now - 600 + 10 * i for i in range(61)), tuple(25e6 + 6.25e6 * i for i in range(61)))
    line = process_line(proc, history, now).plain
    assert " 400M " in line and "+470M" in line
    spark = line[-6:]
    assert spark[0] in "_▁▂" and spark[-1] == "█"  # from near nothing to its own peak, not flat


def test_the_brake_s_own_reading_is_shown_beside_the_host_s() -> None:
    base = data.memory_leak()
    assert base.memory is not None
    line = LogLine(
        "/srv/optim/worker-0.log", 7, "EMERGENCY BRAKE: only 1.8 GB free (< 2.0 GB), refusing trial 4", base.time
    )
    brake = EventSummary("emergency_brake", Severity.WARNING, 3, base.time, base.time, 1.0, 3, {}, (line,))
    roomy = dataclasses.replace(base.memory, available_bytes=23_800_000_000, total_bytes=25_300_000_000)
    snap = dataclasses.replace(base, events={"emergency_brake": brake}, memory=roomy)
    reading = brake_reading(snap)
    assert reading is not None and reading[0] == pytest.approx(1.8e9)
    text = ram_summary(roomy, reading, snap.time).plain
    assert "23.8 GB free" in text
    # The zone by the log's word, marked as such: the red badge is for this host's own figure (issue 34).
    assert "its last line saw 1.8 GB free at 13:32:00 (its brake zone, not this host's)" in text
    assert "BRAKE ZONE" not in text
    tight = dataclasses.replace(roomy, available_bytes=1_500_000_000)
    assert "BRAKE ZONE" in ram_summary(tight, reading, snap.time).plain


def test_the_memory_panel_shows_the_numbers_the_findings_rest_on() -> None:
    """OOM kills from the kernel's word when the cgroup counter says fewer; the forecast from the processes that
    grow when the host's trend is flat."""
    base = data.memory_leak()
    assert base.memory is not None
    mem = dataclasses.replace(base.memory, oom_kills=0, cgroup_oom_events=None, forecast_exhausted_at=None)
    kill = HostEvent("oom_kill", base.time - 60, "Out of memory: Killed process 4242 (python3)", "kmsg", pid=4242)
    kernel = KernelLogState("kmsg", True, events=(kill,))
    assert swap_summary(mem, base.history.swap_used, base.time, kernel).plain.endswith("OOM kills 1 (kernel log)")
    assert swap_summary(mem, base.history.swap_used, base.time, None).plain.endswith("OOM kills 0")
    worker = dataclasses.replace(base.processes[0], alive=True, rss_growth_bytes_per_hour=3.25e9, name="worker-0")
    other = dataclasses.replace(worker, pid=worker.pid + 1, name="worker-1")
    roomy = dataclasses.replace(mem, available_bytes=22_000_000_000, cgroup_limit_bytes=None)
    forecast = with_growth_forecast(roomy, (worker, other), 512 * 1024**2, base.time)
    assert forecast.forecast_exhausted_at == pytest.approx(base.time + 22e9 / 6.5e9 * 3600)
    said = forecast_line(forecast, base.time).plain
    assert "RAM exhausted in ~3h" in said and "(worker-0, worker-1 growing 6.5 GB/h)" in said
    assert with_growth_forecast(roomy, (), 512 * 1024**2, base.time) is roomy


async def test_the_events_detail_follows_the_most_severe_kind_until_a_person_moves() -> None:
    base = data.healthy()
    quiet = dataclasses.replace(base, events={"server_ready": base.events["server_ready"]})
    feed = RecordingFeed(quiet, data.healthy_lines())
    app = make_app(feed, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        detail = app.main.query_one("#events-detail", Static)
        await wait_until(pilot, lambda: "server_ready" in text_of(detail))
        feed.set_snapshot(data.server_crash())
        await wait_until(pilot, lambda: text_of(detail).startswith("connection_refused"))
        await pilot.press("3", "down")
        await pilot.pause()
        chosen = app.main.query_one(EventsPanel)._highlighted
        assert chosen == "traceback"
        feed.set_snapshot(dataclasses.replace(data.server_crash(), time=data.server_crash().time + 5))
        await wait_until(
            pilot, lambda: app.main.snapshot is not None and app.main.snapshot.time > feed.snapshot().time - 1
        )
        await pilot.pause()
        assert app.main.query_one(EventsPanel)._highlighted == "traceback"  # the person's choice holds


def test_a_flat_process_draws_a_level_line_half_way_up() -> None:
    proc = data.memory_leak().processes[0]
    now = 10_000.0
    flat = Series(tuple(now - 600 + 10 * i for i in range(61)), tuple(25e6 for _ in range(61)))
    assert process_line(proc, flat, now).plain.endswith("▄▄▄▄▄▄")


def test_a_lost_gpu_shows_no_stale_numbers() -> None:
    from rlwatch.common.state import GpuHealth, GpuState
    from rlwatch.widgets.gpu_panel import gpu_line

    g = GpuState(0, "NVIDIA H100", None, 97.0, 61_400_000_000, 85_500_000_000, 71.0, 612.0, "DEFAULT")
    assert "97%" in gpu_line(g, None, 0.0).plain
    lost = dataclasses.replace(g, health=GpuHealth(lost="GPU is lost"))
    said = gpu_line(lost, None, 0.0).plain
    assert "LOST" in said and "97%" not in said and "612 W" not in said


async def test_a_lost_gpus_graphs_say_lost_not_its_last_numbers() -> None:
    from rlwatch.common.state import GpuHealth, GpuStatus
    from rlwatch.widgets.graph import TimeGraph

    base = data.healthy()
    assert base.gpu is not None
    g = base.gpu.gpus[0]
    lost = dataclasses.replace(g, health=GpuHealth(lost="GPU is lost"))
    snap = dataclasses.replace(base, gpu=GpuStatus("nvml", True, None, (lost,)))
    app = make_app(RecordingFeed(snap, data.healthy_lines()), live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        graph = app.main.query_one("#gpu-util-graph", TimeGraph)
        await wait_until(pilot, lambda: graph.note.plain != "")
        assert graph.note.plain == "LOST"
        assert app.main.query_one("#gpu-mem-graph", TimeGraph).note.plain == "LOST"
