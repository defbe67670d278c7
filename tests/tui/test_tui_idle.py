"""The idle dashboard (issue 35): a tick that changes only an age must not lay the screen out again, nor clear and
refill a table. A stopped run's ages move every second, and each such tick cost a layout of the whole screen. On a
quiet run the engine builds no snapshot and the screen draws nothing, yet a new line or a process's end still shows."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.renderables.styled import Styled
from textual.strip import Strip

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import Severity, Snapshot
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.live import LiveFeed
from rlwatch.tui.app import RlwatchApp
from rlwatch.widgets.row_table import RowTable, TableColumn
from rlwatch.widgets.text_block import TextBlock
from tests import snapshot_data as data
from tests.simhost import wait_until
from tests.tui.test_tui_pilot import make_app, recording


class _Probe(App[None]):
    def compose(self) -> ComposeResult:
        yield TextBlock(id="block")
        yield RowTable([TableColumn("kind", "kind"), TableColumn("last", "last")], id="table")


async def test_an_age_that_ticks_repaints_without_a_layout_and_a_longer_text_relays_out() -> None:
    app = _Probe()
    async with app.run_test() as pilot:
        block = app.query_one(TextBlock)
        layouts: list[bool] = []
        real = block.refresh

        def spy(*args: Any, layout: bool = False, **kw: Any) -> Any:
            layouts.append(layout)
            return real(*args, layout=layout, **kw)

        block.refresh = spy  # type: ignore[method-assign]
        block.update(Text("STOPPED  16m55s"))
        await pilot.pause()
        layouts.clear()
        block.update(Text("STOPPED  16m56s"))  # the same cells
        assert layouts and not any(layouts)
        layouts.clear()
        block.update(Text("STOPPED  1h00m00s"))  # wider: its size may change
        assert any(layouts)
        layouts.clear()
        block.update(Text("STOPPED  1h00m00s"))  # the same text: nothing at all
        assert layouts == []


async def test_rows_read_again_repaint_only_the_rows_that_changed() -> None:
    app = _Probe()
    async with app.run_test() as pilot:
        table = app.query_one(RowTable)
        table.set_rows([("a", (Text("a"), Text("1s ago"))), ("b", (Text("b"), Text("2s ago")))])
        await pilot.pause()
        refreshed: list[tuple[tuple[Any, ...], bool]] = []
        real = table.refresh

        def spy(*regions: Any, layout: bool = False, **kw: Any) -> Any:
            refreshed.append((regions, layout))
            return real(*regions, layout=layout, **kw)

        table.refresh = spy  # type: ignore[method-assign]
        table.set_rows([("a", (Text("a"), Text("1s ago"))), ("b", (Text("b"), Text("3s ago")))])
        assert [c.plain for c in table.get_row("b")] == ["b", "3s ago"]
        assert [(r[0].y, r[0].height) for r, _ in refreshed] == [(2, 1)]  # row b's line (the header is line 0)
        assert not any(layout for _, layout in refreshed)
        refreshed.clear()
        table.set_rows([("a", (Text("a"), Text("1s ago"))), ("b", (Text("b"), Text("3s ago")))])
        assert refreshed == []  # the same rows: nothing at all
        table.set_rows([("a", (Text("a"), Text("1s ago"))), ("b", (Text("b"), Text("1h00m ago")))])
        assert any(layout for _, layout in refreshed)  # a column wider: laid out again
        refreshed.clear()
        table.set_rows([("b", (Text("b"), Text("4s ago")))])  # another set of rows
        assert any(layout for _, layout in refreshed)
        assert table.row_keys == ["b"]
        await pilot.pause()
        assert "4s ago" in table.render_line(1).text


def _cells_rendered(app: RlwatchApp) -> list[str]:
    """Spy on the events table: the text of every cell it renders through Rich (a render cache miss) from now on.
    A render that its caches answer costs no such call."""
    table = app.main.query_one("#events-table", RowTable)
    rendered: list[str] = []
    inside = [False]
    real_lines, real_console = table.render_lines, app.console.render_lines

    def render_lines(crop: Region) -> list[Strip]:
        inside[0] = True
        try:
            return real_lines(crop)
        finally:
            inside[0] = False

    def console_lines(renderable: Any, *args: Any, **kw: Any) -> Any:
        if inside[0] and isinstance(renderable, Styled):  # Styled(Padding(cell)): a cell (Padding renders within)
            cell = getattr(renderable.renderable, "renderable", None)
            rendered.append(cell.plain if isinstance(cell, Text) else str(cell))
        return real_console(renderable, *args, **kw)

    table.render_lines = render_lines  # type: ignore[method-assign]
    app.console.render_lines = console_lines  # type: ignore[method-assign]
    return rendered


def _table_lines(app: RlwatchApp) -> list[str]:
    table = app.main.query_one("#events-table", RowTable)
    return [table.render_line(y).text for y in range(table.size.height)]


async def test_a_snapshot_that_moves_only_ages_renders_only_the_age_cells_that_changed() -> None:
    """Issue 35: one changed age made Textual's DataTable render every cell of every row again (its render caches are
    keyed by a count of updates that ``update_cell`` bumps). A snapshot a second on changes the ages of three of the five
    kinds ("19s ago" → "20s ago"; "2h07m ago" stays): three cells rendered, and the screen shows them."""
    feed = recording("healthy")
    base = feed.snapshot()
    app = make_app(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        before = _table_lines(app)
        assert any("19s ago" in line for line in before) and any("2h07m ago" in line for line in before)
        rendered = _cells_rendered(app)
        feed.set_snapshot(dataclasses.replace(base, time=base.time + 1))
        app.main.refresh_data()
        await pilot.pause()
        await pilot.pause()
        assert sorted(rendered) == ["19m01s ago", "20s ago", "31s ago"]
        after = _table_lines(app)
        assert any("20s ago" in line for line in after) and not any("19s ago" in line for line in after)
        changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        assert len(changed) == 3  # the three rows whose age moved, nothing else
        rendered.clear()
        feed.set_snapshot(dataclasses.replace(base, time=base.time + 1))  # the same second again: nothing
        app.main.refresh_data()
        await pilot.pause()
        assert rendered == []


async def test_a_count_that_moves_in_place_shows_and_a_new_kind_still_reaches_the_table() -> None:
    feed = recording("healthy")
    base = feed.snapshot()
    app = make_app(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        step = base.events["step"]
        events = {**base.events, "step": dataclasses.replace(step, count=step.count + 1)}
        feed.set_snapshot(dataclasses.replace(base, events=events))
        app.main.refresh_data()
        await pilot.pause()
        assert any(" step " in f" {line} " and "1201" in line for line in _table_lines(app))
        refused = data.event("connection_refused", Severity.CRITICAL, 3, base.time - 9, base.time - 2)
        feed.set_snapshot(dataclasses.replace(base, time=base.time + 1, events={**events, refused.kind: refused}))
        app.main.refresh_data()
        await pilot.pause()
        assert any("connection_refused" in line for line in _table_lines(app))


# ------------------------------------------------------------------------ the live dashboard on a quiet run
# A real engine over a real run directory, its loops on their threads, the clock injected (snapshot times stand
# still, so only what the sources read can change a panel). interval 0.02 s, and a whole round at most every 1000
# intervals while nothing moves: within a test, only a look that saw a change can bring one.
INTERVAL_S = 0.02


async def _until(pilot: Any, pred: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"condition not met in time: {getattr(pred, '__doc__', '')}"
        await pilot.pause(0.02)


def _engine(run_dir: Path) -> tuple[Engine, list[Snapshot]]:
    cfg, _ = resolve_config(run_dir, None, "auto")
    cfg = cfg.model_copy(update={"interval_s": INTERVAL_S, "stacks": cfg.stacks.model_copy(update={"sample": False})})
    engine = Engine(cfg, run_dir, clock=FakeClock(), force_polling=True)
    engine.idle_sample_s = 1000 * INTERVAL_S
    built: list[Snapshot] = []
    engine.on_snapshot(built.append)
    return engine, built


async def test_idle_ticks_build_no_snapshot_and_draw_nothing_and_a_new_line_after_the_idle_still_shows(
    tmp_path: Path,
) -> None:
    log = tmp_path / "trainer.log"
    log.write_text("".join(f"step {i} loss 0.5\n" for i in range(20)))
    engine, built = _engine(tmp_path)
    engine.start()
    try:
        feed = LiveFeed(engine)
        ticks: list[int] = []  # every tick of the screen asks the feed for its snapshot

        def snapshot() -> Snapshot:
            ticks.append(1)
            return engine.snapshot()

        feed.snapshot = snapshot  # type: ignore[method-assign]
        app = RlwatchApp(feed, clock=engine.clock, refresh_s=INTERVAL_S)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.main
            applied: list[Snapshot] = []
            real_apply = screen.apply

            def apply(snap: Snapshot) -> None:
                applied.append(snap)
                real_apply(snap)

            screen.apply = apply  # type: ignore[method-assign]
            await _until(pilot, lambda: engine.looks >= 1 and "step 19" in _log_text(app))  # settled, and quiet
            rounds, n_built, n_applied, n_ticks = engine.rounds, len(built), len(applied), len(ticks)
            await _until(pilot, lambda: engine.looks >= 20 and len(ticks) >= n_ticks + 10)  # a long idle
            assert engine.rounds == rounds  # no whole round of the sources ...
            assert len(built) == n_built  # ... no snapshot built ...
            assert len(applied) == n_applied  # ... and none drawn, though the screen ticked all along
            with log.open("a") as fh:
                fh.write("step 20 loss 0.4\nConnectionRefusedError: [Errno 111] Connection refused\n")
            await _until(pilot, lambda: "step 20" in _log_text(app))  # the log view has it ...
            # ... and a snapshot with it reached the panels
            await _until(pilot, lambda: applied[-1].events["connection_refused"].count == 1)
            assert applied[-1].events["connection_refused"].count == 1  # counted, diagnosed and handed to the panels
            await _until(pilot, lambda: engine.rounds > rounds)  # the run moved: the sources are read again
    finally:
        engine.stop()


def _log_text(app: RlwatchApp) -> str:
    return "\n".join(row.text for row in app.main.log_view._rows)


@pytest.mark.slow
async def test_a_process_of_the_run_that_ends_after_a_long_idle_shows_as_ended(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    log.write_text("step 1 loss 0.5\n")
    code = "import sys, time; f = open(sys.argv[1], 'a'); time.sleep(120)"  # writes the run's log: one of the run
    proc = subprocess.Popen([sys.executable, "-c", code, str(log)])
    engine, _ = _engine(tmp_path)
    try:
        engine.start()
        app = RlwatchApp(LiveFeed(engine), clock=engine.clock, refresh_s=INTERVAL_S)
        async with app.run_test(size=(120, 40)) as pilot:

            def shown() -> dict[int, bool]:
                snap = app.main.snapshot
                return {} if snap is None else {p.pid: p.alive for p in snap.processes}

            await _until(pilot, lambda: shown().get(proc.pid) is True)
            looks = engine.looks
            await _until(pilot, lambda: engine.looks >= looks + 20)  # quiet for a while: only looks, no rounds
            rounds = engine.rounds
            proc.kill()
            proc.wait()
            await _until(pilot, lambda: shown().get(proc.pid, False) is False)  # a look saw it end: a round drew it
            assert engine.rounds > rounds
    finally:
        engine.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_a_stopped_run_is_read_less_often_than_a_live_quiet_one(tmp_path: Path) -> None:
    """Rounds of the sources come up to ``idle_sample_s`` apart while a live run is quiet, and up to the longer
    ``stopped_sample_s`` while no process of the run is alive: counted in looks (one per interval) between rounds."""
    log = tmp_path / "trainer.log"
    log.write_text("step 1 loss 0.5\n")

    def looks_per_round(engine: Engine) -> float:
        """Looks per round over three quiet rounds, once the engine settled."""
        assert wait_until(lambda: engine.looks >= 1, 20)
        rounds, looks = engine.rounds, engine.looks
        assert wait_until(lambda: engine.rounds >= rounds + 3, 30)
        return (engine.looks - looks) / (engine.rounds - rounds)

    def engine_for(run: Path) -> Engine:
        engine, _ = _engine(run)
        engine.idle_sample_s, engine.stopped_sample_s = 5 * INTERVAL_S, 40 * INTERVAL_S
        return engine

    stopped = engine_for(tmp_path)
    stopped.start()
    try:
        assert looks_per_round(stopped) >= 20  # up to 39 looks between rounds: nothing of the run to watch
    finally:
        stopped.stop()

    code = "import sys, time; f = open(sys.argv[1], 'a'); time.sleep(120)"  # writes the run's log: one of the run
    proc = subprocess.Popen([sys.executable, "-c", code, str(log)])
    live = engine_for(tmp_path)
    try:
        live.start()
        assert wait_until(lambda: any(p.pid == proc.pid and p.alive for p in live.snapshot().processes), 20)
        assert looks_per_round(live) <= 6  # up to 4 looks: a process of the run alive, rounds 5 intervals apart
    finally:
        live.stop()
        proc.kill()
        proc.wait()
