"""The confirmation dialog every action goes through.

It lists each process the action would signal (pid, user, age, command line, GPU memory, role, why) and the
steps in order, with Cancel focused, so a stray Enter never kills anything. A refused plan shows why and offers
only Close. Command lines come from other processes and are shown as escaped plain text.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from rlwatch.common.state import ActionPlan, ActionTarget
from rlwatch.tui.keys import ACTION_TITLES
from rlwatch.widgets.format import clean_text, fmt_bytes, fmt_cmdline, fmt_duration

COMMAND_WIDTH = 72


def targets_table(targets: tuple[ActionTarget, ...]) -> Table:
    table = Table(box=None, padding=(0, 1, 0, 0), header_style="bold", expand=True)
    # The identifying columns keep their width; only the command line (and the reason under it) gives way.
    for name, justify, width in (
        ("pid", "right", 7),
        ("user", "left", 6),
        ("age", "right", 6),
        ("GPU mem", "right", 8),
        ("role", "left", 16),
    ):
        table.add_column(name, justify=justify, no_wrap=True, min_width=width)  # type: ignore[arg-type]
    table.add_column("command", justify="left", no_wrap=True, overflow="ellipsis", ratio=1)
    for t in targets:
        table.add_row(
            Text(str(t.pid) if t.pid is not None else "new", style="bold"),
            Text(clean_text(t.user or "?")),
            Text(fmt_duration(t.age_s)),
            Text(fmt_bytes(t.gpu_mem_bytes)),
            Text(clean_text(t.role or "–")),
            Text(fmt_cmdline(t.cmdline, COMMAND_WIDTH)),
        )
        if t.reason:
            table.add_row(
                Text(""), Text(""), Text(""), Text(""), Text(""), Text("↳ " + clean_text(t.reason, 120), style="yellow")
            )
    return table


def steps_text(steps: tuple[str, ...]) -> Text:
    out = Text(no_wrap=False, end="")
    for i, step in enumerate(steps, start=1):
        if i > 1:
            out.append("\n")
        out.append(f"{i}. ", style="bold")
        out.append(clean_text(step, 200))
    return out


class ConfirmScreen(ModalScreen[bool]):
    """Returns ``True`` only when Confirm is pressed."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, plan: ActionPlan) -> None:
        super().__init__()
        self.plan = plan

    def compose(self) -> ComposeResult:
        plan = self.plan
        title = ACTION_TITLES.get(plan.action, plan.action)
        with Vertical(id="confirm-dialog", classes="dialog"):
            if not plan.runnable:
                yield Static(Text(f"{title}: refused", style="bold"), classes="dialog-title")
                yield Static(Text(clean_text(plan.refused or "", 300), style="yellow"), id="refused")
                with Horizontal(classes="dialog-buttons"):
                    yield Button("Close", id="close", variant="primary")
                return
            count = len(plan.targets)
            heading = f"{title}: {count} target{'s' if count != 1 else ''}" if count else title
            yield Static(Text(heading + "?", style="bold"), classes="dialog-title")
            with VerticalScroll(id="confirm-body", can_focus=False):
                if plan.targets:
                    yield Static(Text("Will signal", style="bold underline"), classes="dialog-section")
                    yield Static(targets_table(plan.targets), id="targets")
                if plan.start:
                    yield Static(Text("Will start", style="bold underline"), classes="dialog-section")
                    yield Static(targets_table(plan.start), id="start")
                if plan.steps:
                    yield Static(Text("Steps", style="bold underline"), classes="dialog-section")
                    yield Static(steps_text(plan.steps), id="steps")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button("Confirm", id="confirm", variant="error")

    def on_mount(self) -> None:
        # Cancel (or Close) has the focus, whatever the widget order: Enter alone never confirms.
        self.query_one("#cancel" if self.plan.runnable else "#close", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)
