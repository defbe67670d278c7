"""A Static that ignores an update to the text it already shows.

``Static.update`` always asks for a new layout of the whole screen. Panels repaint every second on a live host, yet
most of their lines read the same as a second earlier (no GPU, the same server state, the same checkpoint), and
re-laying out the screen for them was most of the dashboard's idle cost.
"""

from __future__ import annotations

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
        self._shown = content
        super().update(content, layout=layout)
