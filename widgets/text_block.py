"""A Static that ignores an update to the text it already shows.

``Static.update`` always asks for a new layout of the whole screen. Panels repaint every second on a live host, yet
most of their lines read the same as a second earlier (no GPU, the same server state, the same checkpoint), and
re-laying out the screen for them was most of the dashboard's idle cost. Text that changed but takes the same
cells (an age ticking on a stopped run) is repainted without a new layout.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.visual import VisualType
from textual.widgets import Static

__all__ = ["TextBlock"]


class TextBlock(Static):
    _shown: object = None  # what the last update showed

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        # Rich Text compares by characters and styles; anything else (a table) is always redrawn.
        if isinstance(content, Text) and isinstance(self._shown, Text) and content == self._shown:
            return
        if layout and isinstance(content, Text) and isinstance(self._shown, Text) and _same_shape(content, self._shown):
            layout = False  # an age that ticks ("16m55s" → "16m56s"): the same cells, so the same size
        self._shown = content
        super().update(content, layout=layout)


def _same_shape(a: Text, b: Text) -> bool:
    """Whether two texts take the same cells line by line: then one replaces the other without a new layout of the
    screen (issue 35: a stopped run's ages tick every second, and each tick laid the whole screen out again)."""
    la, lb = a.plain.split("\n"), b.plain.split("\n")
    return len(la) == len(lb) and all(cell_len(x) == cell_len(y) for x, y in zip(la, lb, strict=True))
