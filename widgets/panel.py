"""The box every dashboard section lives in: titled, focusable, scrollable, and able to fill the screen.

Panels redraw only when the part of the snapshot they show has changed: each one says which records it depends
on (``data_key``), and the screen compares that with what it drew last time. On a live host most ticks change only
a few records, so most panels skip their repaint.
"""

from __future__ import annotations

from typing import Any

from textual.containers import ScrollableContainer

from rlwatch.common.state import Snapshot

_NOTHING = object()  # "never drawn": unequal to every key, including None


class Panel(ScrollableContainer):
    """A titled section of the dashboard. Subclasses implement :meth:`data_key` and :meth:`show`."""

    ALLOW_MAXIMIZE = True
    DEFAULT_CSS = """
    Panel {
        border: round $primary 40%;
        border-title-color: $text-muted;
        padding: 0 1;
        height: 1fr;
        scrollbar-size-vertical: 1;
    }
    Panel:focus-within {
        border: round $accent;
        border-title-color: $text;
        border-title-style: bold;
    }
    """

    def __init__(self, title: str, *, id: str | None = None, focusable: bool = True) -> None:
        super().__init__(id=id, can_focus=focusable)
        self.border_title = title
        self._drawn_key: Any = _NOTHING

    def data_key(self, snap: Snapshot) -> object:
        """The records this panel renders; equal keys mean nothing visible changed."""
        return snap

    def show(self, snap: Snapshot) -> None:
        """Render the snapshot into child widgets."""
        raise NotImplementedError

    def update_from(self, snap: Snapshot) -> bool:
        """Redraw if the data this panel shows has changed; returns whether it did."""
        # Ages are shown in whole seconds, so the snapshot's second (not its exact time, new on every build) is
        # what can change them; with the exact time no panel would ever skip a repaint on a live host.
        key = (int(snap.time), self.data_key(snap))
        if key == self._drawn_key:
            return False
        self._drawn_key = key
        self.show(snap)
        return True
