"""The job verdict on the fleet screen: one line per distributed job above the host rows, in the words
``rlwatch fleet --json`` gives it (node, rank and collective), and a host's detail says what it says of that host's
ranks; a fleet with no job shows no such line."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest
from rich.console import Console
from textual.widgets import Static

from rlwatch.export.fleet.job import join_jobs
from rlwatch.tui.fleet import FleetApp
from tests import fleet_data
from tests.snapshot_data import utc_timezone

SnapCompare = Callable[..., bool]


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with utc_timezone():
        yield


def _text(widget: Static) -> str:
    """What the widget shows, as plain text (its content is a Rich renderable)."""
    console = Console(width=400, file=io.StringIO(), color_system=None)
    console.print(widget.content)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())  # type: ignore[attr-defined]


async def test_each_job_s_verdict_is_one_line_above_the_hosts() -> None:
    app = FleetApp(fleet_data.job_fleet, live=False)
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.pause()
        jobs = app.query_one("#fleet-jobs", Static)
        assert jobs.has_class("-shown") and jobs.region.y < app.fleet_screen.table.region.y
        lines = _text(jobs).splitlines()
        expected = [v.message for v in join_jobs(fleet_data.job_fleet().hosts)]
        assert [line[2:] for line in lines] == expected  # the same words as fleet --json, the hung job first
        assert lines[0].startswith(
            "✖ job rdzv:exp-42: hung 50 s; node-b rank 3 never reached all_reduce #4812 (in "
            "fetch_batch_from_service, train.py:20); the 3 others wait for it"
        )
        assert lines[1] == "● job rdzv:exp-7: progressing on 1 host"
        # node-a's detail says what the verdict says of its own ranks: it waits, it is not blamed.
        screen = app.fleet_screen
        while screen.table.selected_key() != "host:10.0.0.1:9410":
            await pilot.press("down")
        await pilot.press("enter")
        await pilot.pause()
        detail = _text(app.query_one("#fleet-detail-body", Static))
        assert "rdzv:exp-42: its ranks 0-1 wait for node-b rank 3" in detail


async def test_a_fleet_with_no_job_shows_no_job_line() -> None:
    app = FleetApp(fleet_data.fleet, live=False)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        assert not app.query_one("#fleet-jobs", Static).has_class("-shown")


def test_fleet_screen_with_a_hung_job(snap_compare: SnapCompare) -> None:
    assert snap_compare(FleetApp(fleet_data.job_fleet, live=False), terminal_size=(160, 24))
