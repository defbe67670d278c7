"""The idle dashboard (issue 35): a tick that changes only an age must not lay the screen out again, nor clear and
refill a table. A stopped run's ages move every second, and each such tick cost a layout of the whole screen."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from rlwatch.widgets.table_fill import fill_rows
from rlwatch.widgets.text_block import TextBlock


class _Probe(App[None]):
    def compose(self) -> ComposeResult:
        yield TextBlock(id="block")
        yield DataTable(id="table")


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


async def test_rows_read_again_set_only_their_changed_cells() -> None:
    app = _Probe()
    async with app.run_test() as pilot:
        table: DataTable[Any] = app.query_one(DataTable)
        table.add_column("kind", key="kind")
        table.add_column("last", key="last")
        fill_rows(table, [("a", (Text("a"), Text("1s ago"))), ("b", (Text("b"), Text("2s ago")))])
        await pilot.pause()
        cleared: list[int] = []
        real = table.clear

        def spy(*args: Any, **kw: Any) -> Any:
            cleared.append(1)
            return real(*args, **kw)

        table.clear = spy  # type: ignore[method-assign]
        fill_rows(table, [("a", (Text("a"), Text("2s ago"))), ("b", (Text("b"), Text("3s ago")))])
        assert cleared == []
        assert [c.plain for c in table.get_row("b")] == ["b", "3s ago"]
        fill_rows(table, [("b", (Text("b"), Text("4s ago")))])  # another set of rows: cleared and refilled
        assert cleared == [1]
        assert [k.value for k in table.rows] == ["b"]
