"""The processes table groups the run's processes by attempt: the live run first, then an earlier attempt still
running beside it under a heading with its launcher (gone since when) and what it holds; the live-run line counts
the live run's processes only and says the earlier attempt is listed apart."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from textual.widgets import Static

from rlwatch.common.state import Attempt, LiveRun, ProcessInfo
from rlwatch.widgets.row_table import RowTable
from tests import snapshot_data as data
from tests.tui.test_tui_pilot import RecordingFeed, make_app, text_of, wait_until


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def _rank(pid: int, start: float) -> ProcessInfo:
    argv = ("/usr/bin/python3", "-u", "train.py")
    return ProcessInfo(pid, start, "member", "python3", 7_800_000_000, 0.0, start, 0, argv, "/job/run", "root",
                       evidence="writes train.log", attempt=0)  # fmt: skip


async def test_the_processes_table_shows_an_earlier_attempt_apart_under_its_launcher() -> None:
    base = data.healthy()
    now = base.time
    earlier = Attempt(
        pids=(878, 879),
        current=False,
        started_at=now - 3600,
        launcher_pid=837,
        launcher="torchrun",
        launcher_alive=False,
        launcher_gone_at=data.at(9, 12, 10),
        orphaned="a torchrun rank whose elastic agent is gone: it was re-parented to init (pid 1)",
        writes=("train.log",),
        gpus=(0, 1),
        gpu_mem_bytes=15_600_000_000,
    )
    live = Attempt(pids=(4601, 4650, 4711), current=True, started_at=data.at(6, 0), launcher_pid=4601)
    run = LiveRun(
        True,
        None,
        data.at(6, 0),
        members=((4711, "writes train.log"), (4601, "an ancestor of pid 4711"), (4650, "a descendant of pid 4601")),
        attempts=(earlier, live),
    )
    snap = dataclasses.replace(
        base, live_run=run, processes=(*base.processes, _rank(878, now - 3600), _rank(879, now - 3600))
    )
    app = make_app(RecordingFeed(snap, data.healthy_lines()))
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.press("5", "m")  # maximised: the heading's detail whole in the command column
        table = app.main.query_one("#process-table", RowTable)
        await wait_until(pilot, lambda: table.row_count >= 6 and "evidence" in table.column_keys)
        first = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        pids = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
        assert first[0] == "live run"
        heading = next(i for i, text in enumerate(first) if text.startswith("earlier attempt"))
        assert first[heading] == "earlier attempt"
        command = table.column_keys.index("command")  # a heading's detail: the widest column
        detail = str(table.get_row_at(heading)[command])
        assert detail == "launcher torchrun pid 837 gone since 09:12:10; holds GPU 0,1 15.6 GB"
        assert set(pids[1:heading]) == {"4601", "4650", "4711"}  # the live run's rows, before the heading
        assert set(pids[heading + 1 :]) == {"878", "879"}
        line = text_of(app.main.query_one("#server-line", Static))
        assert "pid 4711 and 2 other processes" in line
        assert "+ 1 earlier attempt still running (2 processes), listed apart" in line
