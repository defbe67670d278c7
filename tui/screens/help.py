"""The ``?`` screen: every key and what it does, built from the same table as the bindings."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from rlwatch.tui.keys import help_rows


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,question_mark", "close", "Close"),
    ]

    def __init__(self, *, readonly: bool) -> None:
        super().__init__()
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        rows = help_rows(self.readonly)
        width = max(len(key) for key, _ in rows) + 2
        table = Text(end="")
        for i, (key, text) in enumerate(rows):
            table.append(("\n" if i else "") + key.ljust(width), style="bold cyan")
            table.append(text)
        with Vertical(id="help-dialog", classes="dialog"):
            yield Static(Text("rlwatch keys", style="bold"), classes="dialog-title")
            yield Static(table, id="help-table")
            note = "Read-only: actions are disabled." if self.readonly else "Every action asks before it runs."
            yield Static(
                Text(f"{note} Mouse: click an event row to filter the log, click buttons.  Esc closes.", style="dim"),
                classes="dialog-note",
            )

    def action_close(self) -> None:
        self.dismiss(None)
