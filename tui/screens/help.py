"""The ``?`` screen: every key of every panel and what it does, built from the same tables as the bindings.

It scrolls (arrows, PgUp/PgDn) when the terminal is too short to show it all, and says so at the bottom.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from rlwatch.tui.keys import help_sections
from rlwatch.tui.screens.confirm import FittedDialog


def help_text(readonly: bool) -> Group:
    """One table per section: keys in a column of their own, what they do wrapped beside them."""
    sections = help_sections(readonly)
    width = max(len(key) for _, rows in sections for key, _ in rows)
    parts: list[RenderableType] = []
    for n, (title, rows) in enumerate(sections):
        parts.append(Text(("\n" if n else "") + title, style="bold underline"))
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
        table.add_column(no_wrap=True, min_width=width, style="bold cyan")
        table.add_column(ratio=1)
        for key, text in rows:
            table.add_row(key, text)
        parts.append(table)
    return Group(*parts)


def help_plain(readonly: bool) -> str:
    """The help as plain text (what a test or a screen reader reads)."""
    return "\n".join(f"{key}  {text}" for _, rows in help_sections(readonly) for key, text in rows)


class HelpScreen(FittedDialog[None]):
    BINDINGS = [
        Binding("escape,question_mark,f1", "close", "Close"),
        Binding("up", "scroll(-1)", show=False),
        Binding("down", "scroll(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown,space", "page(1)", show=False),
    ]

    def __init__(self, *, readonly: bool) -> None:
        super().__init__()
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog", classes="dialog"):
            yield Static(Text("rlwatch keys", style="bold"), classes="dialog-title")
            with VerticalScroll(id="help-body", classes="dialog-body"):
                yield Static(help_text(self.readonly), id="help-table")
            note = "Read-only: actions are disabled." if self.readonly else "Every action asks before it runs."
            yield Static(
                Text(
                    f"{note} ↑↓ PgUp PgDn scroll · Esc closes · q quits · click an event row to filter the log",
                    style="dim",
                ),
                classes="dialog-note",
            )

    @property
    def plain(self) -> str:
        return help_plain(self.readonly)

    def action_close(self) -> None:
        self.dismiss(None)
