"""Filling a DataTable with rows that mostly read as they did a second ago.

Clearing a table and adding its rows again re-lays it out and drops its render cache; on a stopped run the only
thing that moves is an age in one column ("≥16m55s ago" → "≥16m56s ago"), every second (issue 35: the idle
dashboard's cost). When the rows are the same rows in the same order, only the cells that differ are set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable

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
    for key, cells in rows:
        old = table.get_row(key)
        for column, cell, before in zip(columns, cells, old, strict=True):
            if cell != before:
                table.update_cell(key, column, cell, update_width=_width(cell) != _width(before))
