"""Filling a DataTable with rows that mostly read as they did a second ago.

Clearing a table and adding its rows again re-lays it out and drops its render cache; on a stopped run the only
thing that moves is an age in one column ("≥16m55s ago" → "≥16m56s ago"), every new snapshot (issue 35: the idle
dashboard's cost). When the rows are the same rows in the same order, only the cells that differ are set.

Even one ``DataTable.update_cell`` makes the table render every cell of every row again: all of its render caches
are keyed by one count of updates, which ``update_cell`` bumps (a third of the screen's time on such a snapshot
went there). A cell whose new text keeps its column's width is therefore set here without that count: the value
is stored, the cached render of that cell and its row's lines are dropped, and only that row is repainted. The pinned
Textual's private caches are used for it; where they are not as expected, ``update_cell`` does the work as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.cache import LRUCache
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

__all__ = ["fill_rows"]


def _width(cell: object) -> int:
    return cell_len(cell.plain) if isinstance(cell, Text) else cell_len(str(cell))


def fill_rows(table: DataTable[Any], rows: Sequence[tuple[str, Sequence[object]]]) -> None:
    """Show ``rows`` (key, cells) in ``table``: cell by cell where the keys are those shown, else cleared and
    refilled."""
    keys = [key for key, _ in rows]
    shown = [k.value for k in table.rows]
    columns = list(table.columns)
    if keys != shown or any(len(cells) != len(columns) for _, cells in rows):
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        return
    changed: list[tuple[str, ColumnKey, object, object]] = []
    for key, cells in rows:
        old = table.get_row(key)
        changed += [
            (key, c, cell, before) for c, cell, before in zip(columns, cells, old, strict=True) if cell != before
        ]
    if not changed:
        return
    if _widths_kept(table, rows) and all(_set_in_place(table, RowKey(k), c, cell) for k, c, cell, _ in changed):
        return
    for key, column, cell, before in changed:
        table.update_cell(key, column, cell, update_width=_width(cell) != _width(before))


def _widths_kept(table: DataTable[Any], rows: Sequence[tuple[str, Sequence[object]]]) -> bool:
    """Whether every column keeps its width with the new rows (then no cell moves but the ones set)."""
    for i, column in enumerate(table.columns.values()):
        if not column.auto_width:
            continue
        need = max([_width(column.label), *(_width(cells[i]) for _, cells in rows)])
        if need != column.content_width:
            return False
    return True


def _set_in_place(table: DataTable[Any], row_key: RowKey, column_key: ColumnKey, value: object) -> bool:
    """Store one cell's value and repaint its row alone: drop the cached renders of that cell and of its row's
    lines, leaving every other cell's render cached. False, with nothing changed, where the table's internals are
    not those of the pinned Textual."""
    try:
        data: dict[ColumnKey, object] = table._data[row_key]
        row_index = table._row_locations.get(row_key)
        caches = (table._row_render_cache, table._cell_render_cache, table._row_renderable_cache, table._line_cache)
    except (AttributeError, KeyError):
        return False
    if row_index is None or column_key not in data:
        return False
    row_cache, cell_cache, renderable_cache, line_cache = caches
    data[column_key] = value
    _drop(row_cache, lambda k: k[0] == row_key)  # (row_key, line_no, style, cursor, …)
    _drop(cell_cache, lambda k: k[0] == row_key and k[1] == column_key)  # (row_key, column_key, style, …)
    _drop(renderable_cache, lambda k: k[1] == row_index)  # (update_count, row_index)
    line_cache.clear()  # keyed by screen line: cheap to assemble again from the rows' cached renders
    table.refresh_row(row_index)
    return True


def _drop(cache: LRUCache[Any, Any], stale: Callable[[Any], bool]) -> None:
    # LRUCache has keys() but no iteration of its own
    for key in [k for k in cache.keys() if stale(k)]:  # noqa: SIM118
        cache.discard(key)
