"""What the dashboard and the fleet view share as apps: one screen at the bottom of the stack, fed on a clock."""

from __future__ import annotations

from typing import Any, TypeVar

from textual.app import App
from textual.screen import Screen

from rlwatch.common.clock import Clock, SystemClock

ScreenT = TypeVar("ScreenT", bound=Screen[Any])


class MonitorApp(App[None]):
    """An app whose default screen refreshes from its data every ``refresh_s`` on an injectable clock.

    ``live=False`` runs no timers and no animations, so the same data renders to the same screen every time (snapshot
    tests, ``rlwatch snapshot``). Subclasses build their screen in ``get_default_screen``.
    """

    ENABLE_COMMAND_PALETTE = False

    def __init__(self, *, clock: Clock | None, refresh_s: float, live: bool) -> None:
        super().__init__()
        if self.driver_class.__name__ == "LinuxDriver" and self.driver_class.__module__.startswith("textual."):
            from rlwatch.tui.driver import KeySplittingDriver  # termios: imported where Textual's own driver was

            self.driver_class = KeySplittingDriver  # an Escape typed with the next key stays two keys
        self.clock: Clock = clock or SystemClock()
        self.refresh_s = refresh_s
        self.live = live
        if not live:
            self.animation_level = "none"

    def action_help_quit(self) -> None:
        """Ctrl-C quits, as in htop and k9s (Textual's default only says which key would). A screen that must not
        be left (an action that runs) binds Ctrl-C itself and says why."""
        quit_ = getattr(self.screen_stack[0], "action_quit", None)
        if callable(quit_):
            quit_()
        else:
            self.exit()

    def bottom_screen(self, kind: type[ScreenT]) -> ScreenT:
        """The app's own screen, whatever dialog is open above it."""
        screen = self.screen_stack[0]
        assert isinstance(screen, kind)
        return screen
