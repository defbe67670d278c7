"""SVG snapshots of the dashboard for every incident scenario, the dialogs and the filtered log view.

Each app runs with no timers and a clock fixed at the snapshot's time, so a screen depends only on fixed data and
the code that renders it. Update the baselines with ``pytest --snapshot-update`` after a deliberate change, and look
at them (``snapshot_report.html``) before accepting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from textual.pilot import Pilot

from rlwatch.common.clock import FakeClock
from rlwatch.tui.app import RlwatchApp
from rlwatch.tui.snapshot import render_svg
from tests import snapshot_data as data

SnapCompare = Callable[..., bool]


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def app_for(name: str, *, readonly: bool = False) -> RlwatchApp:
    feed = data.feed(name, readonly=readonly)
    return RlwatchApp(feed, clock=FakeClock(feed.snapshot().time), live=False)


@pytest.mark.parametrize("scenario", list(data.SCENARIOS))
def test_main_screen(snap_compare: SnapCompare, scenario: str) -> None:
    assert snap_compare(app_for(scenario), terminal_size=(120, 40))


def test_main_screen_small_terminal(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for("server-crash"), terminal_size=(80, 24))


def test_main_screen_readonly(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for("gpu-zombie", readonly=True), terminal_size=(120, 40))


def test_help_screen(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for("healthy"), press=["question_mark"], terminal_size=(120, 40))


async def _open_kill_zombies(pilot: Pilot[None]) -> None:
    await pilot.press("z")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def test_confirm_kill_zombies(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for("gpu-zombie"), run_before=_open_kill_zombies, terminal_size=(120, 40))


async def _open_refused_plan(pilot: Pilot[None]) -> None:
    await pilot.press("w")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def test_confirm_refused(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for("server-crash"), run_before=_open_refused_plan, terminal_size=(120, 40))


def test_filtered_log_view(snap_compare: SnapCompare) -> None:
    keys = ["6", "m", "slash", *"refused", "enter"]
    assert snap_compare(app_for("server-crash"), press=keys, terminal_size=(120, 40))


def test_kind_filtered_log_view(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for("startup-crash"), press=["e", "6", "m"], terminal_size=(120, 40))


def test_render_svg_is_deterministic_and_shows_the_scenario() -> None:
    with data.utc_timezone():
        first = render_svg(data.feed("server-crash"), size=(120, 40))
        second = render_svg(data.feed("server-crash"), size=(120, 40))
    assert first.startswith("<svg")
    assert "gsm8k-pod-0" in first
    assert "epoch1epochstep934globalstep1869" in first
    ids = re.compile(r"terminal-\d+")
    assert ids.sub("", first) == ids.sub("", second)
