"""The processes table fits its panel at every size (issue 34: at 120x40 it lost its `up` column, at 80x24 its command
even maximised): which one (name, pid), whether it lives, its memory (RSS, GPU) and age are always shown, the command
gets what is left with its executable's name first, and the evidence and a zero restart count give way first."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from rlwatch.common.state import Attempt, LiveRun
from rlwatch.tui.app import RlwatchApp
from rlwatch.widgets.process_panel import COMMAND_FLOOR, NO_PROCESSES, attempt_heading, table_layout
from rlwatch.widgets.row_table import RowTable
from tests import snapshot_data as data
from tests.tui.test_tui_pilot import make_app, recording, wait_until

ALWAYS = ["name", "pid", "state", "RSS", "GPU", "up", "command"]


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def _shown(app: RlwatchApp) -> tuple[list[str], list[list[str]], int, int]:
    """The columns' keys, each row's cells as text, the columns' total width, and the width inside the panel."""
    table = app.main.query_one("#process-table", RowTable)
    keys = table.column_keys
    rows = [[c.plain for c in table.get_row_at(i)] for i in range(table.row_count)]
    used = sum(table.column_widths)
    return keys, rows, used, app.main.query_one("#p5").scrollable_content_region.width


def _check(keys: list[str], rows: list[list[str]], used: int, room: int) -> None:
    assert [k for k in keys if k in ALWAYS] == ALWAYS
    assert used <= room, f"columns take {used} cells of {room}: the last ones are cut off"
    command = keys.index("command")
    executables = {"launcher": "python3", "trainer": "torchrun", "server": "python3"}
    for row in rows:
        name, cmd = row[0], row[command]
        assert cmd.startswith(executables[name]), (name, cmd)  # cut at the right: the executable's name stays
        assert len(cmd) >= COMMAND_FLOOR


@pytest.mark.parametrize(
    ("size", "normal_extra", "maxed_extra"),
    [
        ((80, 24), set(), set()),  # stacked panels, as wide as the screen: a zero restart count gives way
        ((120, 40), set(), {"restarts"}),  # half the screen; maximised, the restart count comes back
        ((200, 60), set(), {"restarts", "evidence"}),  # maximised at 200 columns, everything
    ],
)
async def test_the_columns_fit_each_size_normal_and_maximised(
    size: tuple[int, int], normal_extra: set[str], maxed_extra: set[str]
) -> None:
    app = make_app(recording("server-crash"))
    async with app.run_test(size=size) as pilot:
        await pilot.press("5")
        await wait_until(pilot, lambda: _shown(app)[1] != [])
        keys, rows, used, room = _shown(app)
        _check(keys, rows, used, room)
        assert set(keys) - set(ALWAYS) == normal_extra
        await pilot.press("m")
        await wait_until(pilot, lambda: _shown(app)[3] > room)  # laid out again for the new width
        keys, rows, used, maxed_room = _shown(app)
        _check(keys, rows, used, maxed_room)
        assert set(keys) - set(ALWAYS) == maxed_extra
        await pilot.press("m")  # back beside the other panels: laid out for the narrower width again
        await wait_until(pilot, lambda: _shown(app)[3] == room and _shown(app)[2] <= room)
        keys, rows, used, room = _shown(app)
        _check(keys, rows, used, room)
        assert set(keys) - set(ALWAYS) == normal_extra


def test_what_gives_way_first_as_the_width_shrinks() -> None:
    snap = data.server_crash()
    procs, now = snap.processes, snap.time
    gpu = {4711: 1_400_000_000}
    wide = table_layout(196, procs, now, gpu=gpu)
    assert wide.keys == ("name", "pid", "state", "RSS", "GPU", "up", "restarts", "command", "evidence")
    assert not wide.compact
    assert table_layout(116, procs, now, gpu=gpu).keys == (*ALWAYS[:-1], "restarts", "command")
    narrow = table_layout(56, procs, now, gpu=gpu)
    assert narrow.keys == tuple(ALWAYS) and narrow.compact  # "6.1G", not "6.1 GB"
    assert table_layout(56, procs, now, gpu=None).keys == tuple(k for k in ALWAYS if k != "GPU")  # no GPU host
    for width in range(30, 200):
        layout = table_layout(width, procs, now, gpu=gpu)
        assert [k for k in layout.keys if k in ALWAYS] == ALWAYS, width
        if width >= 56:
            assert sum(c.width + 2 for c in layout.columns) <= width, width


def test_a_restart_count_above_zero_stays_where_a_zero_one_gives_way() -> None:
    snap = data.server_crash()
    procs = tuple(dataclasses.replace(p, restarts=3) if p.role == "trainer" else p for p in snap.processes)
    gpu = {4711: 1_400_000_000}
    assert "restarts" not in table_layout(75, snap.processes, snap.time, gpu=gpu).keys
    assert "restarts" in table_layout(75, procs, snap.time, gpu=gpu).keys


def test_an_attempt_heading_is_a_short_title_and_its_detail_goes_to_the_command_column() -> None:
    """A table has no cell spanning columns: the heading's title stays short enough for the name column."""
    snap = data.server_crash()
    stray = Attempt(
        pids=(878,),
        current=False,
        started_at=snap.time - 3600,
        launcher_pid=837,
        launcher="torchrun",
        launcher_alive=False,
        launcher_gone_at=data.at(9, 12, 10),
        gpus=(0,),
        gpu_mem_bytes=7_800_000_000,
        stray="it stopped writing for the hang window",
    )
    run = LiveRun(True, None, snap.time - 60, attempts=(stray,))
    title, detail = attempt_heading(run, 0, snap.time)
    assert title.plain == "strays"
    assert detail.plain == "of an earlier attempt: launcher torchrun pid 837 gone since 09:12:10; holds GPU 0 7.8 GB"
    title, detail = attempt_heading(run, None, snap.time)
    assert (title.plain, detail.plain) == ("live run", "")
    layout = table_layout(116, snap.processes, snap.time, titles=["strays"], details=[detail.plain])
    assert layout.width_of("name") == len("launcher")  # the longest process name, not a heading's words


def test_no_process_is_said_whole_in_a_narrow_panel() -> None:
    layout = table_layout(56, (), 0.0, gpu={}, titles=[NO_PROCESSES])
    assert layout.width_of("name") == len(NO_PROCESSES)
