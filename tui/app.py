"""The rlwatch dashboard application."""

from __future__ import annotations

from textual.screen import Screen

from rlwatch.common.clock import Clock
from rlwatch.engine.feed import Feed
from rlwatch.tui.base import MonitorApp
from rlwatch.tui.screens.main import MainScreen


class RlwatchApp(MonitorApp):
    """The dashboard over one feed.

    ``live=False`` runs no timers at all (one read of the feed at start), which is what snapshot tests and
    ``rlwatch snapshot`` need: the same data renders to the same screen every time.
    """

    CSS_PATH = ["app.tcss", "dialogs.tcss"]
    TITLE = "rlwatch"

    def __init__(
        self,
        feed: Feed,
        *,
        clock: Clock | None = None,
        refresh_s: float = 1.0,
        live: bool = True,
    ) -> None:
        super().__init__(clock=clock, refresh_s=refresh_s, live=live)
        self.feed = feed

    def get_default_screen(self) -> Screen[None]:
        return MainScreen(self.feed, clock=self.clock, refresh_s=self.refresh_s, live=self.live)

    @property
    def main(self) -> MainScreen:
        """The dashboard screen (the bottom of the stack, whatever dialog is open)."""
        return self.bottom_screen(MainScreen)
