"""The run chooser: a directory that holds several separate runs opens on a list of them, and the person picks one.

Watching them as one run would make one "run" of one run's crash and another's restart loop, so discovery refuses
(``SeveralRuns``); the dashboard used to exit there with the list printed. A person who typed ``rlwatch`` in a
directory of runs wants to watch one of them: the list is offered on screen, Enter watches the one under the
cursor, and ``q`` (or Escape) leaves without watching any, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from rlwatch.widgets.format import row_text

HINT = "↑↓ move · enter watch it · q quit"


def run_label(run_dir: Path, path: Path, what: str) -> Text:
    """One run as a line: its path below the directory (whole, the part a person tells runs apart by) and why it
    is a run of its own, dimmed."""
    try:
        shown = str(path.relative_to(run_dir))
    except ValueError:
        shown = str(path)
    line = Text(row_text(shown), style="bold")
    line.append(f"   {row_text(what)}", style="dim")
    return line


class ChooseRunScreen(Screen[Path | None]):
    """The runs below one directory, one per line; dismissed with the chosen run's directory, or None."""

    BINDINGS = [
        Binding("q,escape", "leave", "quit", show=True),
    ]
    AUTO_FOCUS = "#runs"
    DEFAULT_CSS = """
    ChooseRunScreen { layout: vertical; }
    ChooseRunScreen #runs-title { padding: 0 1; height: auto; }
    ChooseRunScreen #runs { height: 1fr; border: round $accent; }
    ChooseRunScreen #runs-hint { padding: 0 1; height: 1; color: $text-muted; }
    """

    def __init__(self, run_dir: Path, runs: Sequence[tuple[Path, str]]) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.runs = tuple(runs)

    def compose(self) -> ComposeResult:
        title = Text("rlwatch", style="bold reverse")
        title.append(f"  {row_text(str(self.run_dir))} holds {len(self.runs)} separate runs, not one.")
        title.append(" Pick the one to watch:", style="bold")
        yield Static(title, id="runs-title")
        yield OptionList(
            *(Option(run_label(self.run_dir, path, what), id=str(n)) for n, (path, what) in enumerate(self.runs)),
            id="runs",
        )
        yield Static(HINT, id="runs-hint")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.runs[event.option_index][0])

    def action_leave(self) -> None:
        self.dismiss(None)


class ChooseRunApp(App[Path]):
    """The chooser on its own, before any engine runs: its return value is the run to watch (None: leave)."""

    ENABLE_COMMAND_PALETTE = False

    def __init__(self, run_dir: Path, runs: Sequence[tuple[Path, str]]) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.runs = tuple(runs)

    def on_mount(self) -> None:
        self.push_screen(ChooseRunScreen(self.run_dir, self.runs), self._chosen)

    def _chosen(self, path: Path | None) -> None:
        self.exit(path)
