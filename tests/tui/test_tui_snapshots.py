"""SVG snapshots of the dashboard: every scenario at the smallest supported size (80x24), the README's (120x40) and
a big one (200x60); every dialog small and big; the log view filtered, searched, wrapped and maximised.

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
from rlwatch.common.state import ActionResult
from rlwatch.tui.app import RlwatchApp
from rlwatch.tui.screens.confirm import RunningScreen
from rlwatch.tui.snapshot import render_svg
from tests import snapshot_data as data

SnapCompare = Callable[..., bool]
SIZES = {"80x24": (80, 24), "120x40": (120, 40), "200x60": (200, 60)}
SMALL_BIG = {"80x24": (80, 24), "200x60": (200, 60)}


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def app_for(name: str, *, readonly: bool = False) -> RlwatchApp:
    feed = data.feed(name, readonly=readonly)
    return RlwatchApp(feed, clock=FakeClock(feed.snapshot().time), live=False)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("scenario", list(data.SCENARIOS))
def test_main_screen(snap_compare: SnapCompare, scenario: str, size: str) -> None:
    assert snap_compare(app_for(scenario), terminal_size=SIZES[size])


def test_main_screen_readonly(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for("gpu-zombie", readonly=True), terminal_size=(120, 40))


@pytest.mark.parametrize("size", list(SIZES))
def test_help_screen(snap_compare: SnapCompare, size: str) -> None:
    assert snap_compare(app_for("healthy"), press=["question_mark"], terminal_size=SIZES[size])


@pytest.mark.parametrize("size", list(SMALL_BIG))
def test_findings_screen(snap_compare: SnapCompare, size: str) -> None:
    assert snap_compare(app_for("memory-leak"), press=["d"], terminal_size=SIZES[size])


async def _wait_for_plan(pilot: Pilot[None]) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


@pytest.mark.parametrize("size", list(SMALL_BIG))
@pytest.mark.parametrize("key", ["w", "z", "r", "s"])
def test_confirm_dialog(snap_compare: SnapCompare, key: str, size: str) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        await pilot.press(key)
        await _wait_for_plan(pilot)

    assert snap_compare(app_for("healthy"), run_before=open_it, terminal_size=SIZES[size])


def test_confirm_kill_zombies(snap_compare: SnapCompare) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        await pilot.press("z")
        await _wait_for_plan(pilot)

    assert snap_compare(app_for("gpu-zombie"), run_before=open_it, terminal_size=(120, 40))


@pytest.mark.parametrize("size", list(SIZES))
def test_confirm_refused(snap_compare: SnapCompare, size: str) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        await pilot.press("w")
        await _wait_for_plan(pilot)

    assert snap_compare(app_for("server-crash"), run_before=open_it, terminal_size=SIZES[size])


@pytest.mark.parametrize("size", list(SMALL_BIG))
def test_running_dialog(snap_compare: SnapCompare, size: str) -> None:
    async def run_it(pilot: Pilot[None]) -> None:
        await pilot.app.push_screen(RunningScreen(data.zombie_plan()))
        await pilot.pause()

    assert snap_compare(app_for("gpu-zombie"), run_before=run_it, terminal_size=SIZES[size])


@pytest.mark.parametrize("size", list(SMALL_BIG))
def test_action_result_dialog(snap_compare: SnapCompare, size: str) -> None:
    """The dialog that ran an action says its result in full and the next step (after z: r resume)."""

    async def run_it(pilot: Pilot[None]) -> None:
        main = pilot.app.screen_stack[0]
        plan = data.zombie_plan()
        await pilot.app.push_screen(RunningScreen(plan))
        main.running = plan  # type: ignore[attr-defined]
        main._report(ActionResult("kill-zombies", True, "kill-zombies: done — 2 stray GPU holder(s) gone"))  # type: ignore[attr-defined]
        await pilot.pause()

    assert snap_compare(app_for("gpu-zombie"), run_before=run_it, terminal_size=SIZES[size])


def test_filtered_log_view(snap_compare: SnapCompare) -> None:
    keys = ["6", "m", "ampersand", *"refused", "enter"]
    assert snap_compare(app_for("server-crash"), press=keys, terminal_size=(120, 40))


def test_kind_filtered_log_view(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for("startup-crash"), press=["k", "6", "m"], terminal_size=(120, 40))


@pytest.mark.parametrize("size", list(SMALL_BIG))
def test_searched_log_view_maximised(snap_compare: SnapCompare, size: str) -> None:
    """A search's matches highlighted, the current one marked, the position said; the banner keeps one line above."""
    keys = ["6", "m", "question_mark", *"Connect call", "enter"]
    assert snap_compare(app_for("server-crash"), press=keys, terminal_size=SIZES[size])


def test_log_view_wrapped_at_80x24(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for("gpu-zombie"), press=["6", "minus"], terminal_size=(80, 24))


def test_render_svg_is_deterministic_and_shows_the_scenario() -> None:
    with data.utc_timezone():
        first = render_svg(data.feed("server-crash"), size=(120, 40))
        second = render_svg(data.feed("server-crash"), size=(120, 40))
    assert first.startswith("<svg")
    assert "gsm8k-pod-0" in first
    assert "epoch1epochstep934globalstep1869" in first
    ids = re.compile(r"terminal-\d+")
    assert ids.sub("", first) == ids.sub("", second)
