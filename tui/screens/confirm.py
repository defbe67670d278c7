"""The confirmation dialog every action goes through, and the one that stays while the action runs.

It lists each process the action would signal (pid, user, age, command line, GPU memory, role, why) and the
steps in order, with Cancel focused, so a stray Enter never kills anything. A refused plan shows why and offers
only Close. Command lines come from other processes and are shown as escaped plain text.

The plan scrolls (↑ ↓ PgUp PgDn) between a title and buttons that always stay on screen: on an 80x24 terminal a
plan of two targets and three steps is taller than the room, and Cancel and Confirm must never be pushed off it.
On a narrow screen each target is a block of lines (its command whole, its reason wrapped) instead of a table row
whose command would be cut to a few characters.
"""

from __future__ import annotations

from typing import Any, TypeVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Static

from rlwatch.common.state import ActionPlan, ActionResult, ActionTarget, Verdict
from rlwatch.common.words import plural
from rlwatch.tui.keys import ACTION_TITLES
from rlwatch.widgets.format import fmt_bytes, fmt_cmdline, fmt_duration, row_text

ResultT = TypeVar("ResultT")

COMMAND_WIDTH = 72
NARROW_BELOW = 100  # terminal columns under which targets are blocks of lines, not table rows
SHORT_BELOW = 32  # terminal rows under which dialogs drop their padding and margins


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
    # The command is cut at the edge; the reason under it wraps whole (a path cut mid-way says nothing).
    table.add_column("command", justify="left", ratio=1)
    for t in targets:
        table.add_row(
            Text(str(t.pid) if t.pid is not None else "new", style="bold"),
            Text(row_text(t.user or "?")),
            Text(fmt_duration(t.age_s)),
            Text(fmt_bytes(t.gpu_mem_bytes)),
            Text(row_text(t.role or "–")),
            Text(fmt_cmdline(t.cmdline, COMMAND_WIDTH), no_wrap=True, overflow="ellipsis"),
        )
        if t.reason:
            # A long path folds whole, and the plan scrolls: a reason is never cut.
            why = Text("↳ " + row_text(t.reason, 1500), style="yellow", overflow="fold")
            table.add_row(Text(""), Text(""), Text(""), Text(""), Text(""), why)
    return table


def targets_blocks(targets: tuple[ActionTarget, ...]) -> Text:
    """Each target as lines: ``pid 31337  root  1h49m  18.2 GB  stray``, its whole command, why (wrapped)."""
    out = Text(end="")
    for i, t in enumerate(targets):
        if i:
            out.append("\n")
        out.append(f"pid {t.pid}" if t.pid is not None else "new process", style="bold")
        facts = [row_text(t.user) if t.user else "", fmt_duration(t.age_s) if t.age_s is not None else ""]
        if t.gpu_mem_bytes is not None:
            facts.append(f"{fmt_bytes(t.gpu_mem_bytes)} GPU")
        facts.append(row_text(t.role or "–"))
        out.append("  " + "  ".join(f for f in facts if f))
        out.append("\n  " + fmt_cmdline(t.cmdline, 400), style="dim")
        if t.reason:
            out.append("\n  ↳ " + row_text(t.reason, 1500), style="yellow")
    return out


def verdict_note(verdict: Verdict | None, action: str) -> Text | None:
    """What the diagnosis says the remedy is, where this action is not it: a resume offered beside a restart loop
    must say that the loop is the trouble, and that a resume starts into it again."""
    if verdict is None or verdict.finding is None or verdict.action == action or not verdict.message:
        return None
    out = Text(end="")
    out.append("The diagnosis: ", style="bold yellow")
    out.append(row_text(verdict.message, 300))
    if verdict.action:
        out.append(
            f"\nIts remedy is {ACTION_TITLES.get(verdict.action, verdict.action).lower()}, not this.", style="bold"
        )
    elif verdict.fix or verdict.command:
        out.append(f"\nWhat fixes it: {row_text(verdict.command or verdict.fix or '', 200)}.", style="bold")
    return out


def steps_text(steps: tuple[str, ...]) -> Text:
    out = Text(no_wrap=False, end="")
    for i, step in enumerate(steps, start=1):
        if i > 1:
            out.append("\n")
        out.append(f"{i}. ", style="bold")
        out.append(row_text(step, 400))
    return out


def fit_body(screen: ModalScreen[Any], body: Widget, dialog: Widget) -> None:
    """Cap a dialog's scrolling body so that the whole dialog fits the screen: its title and buttons never leave
    it. (CSS cannot say "what is left of an auto-height box"; this measures it once laid out.)"""
    others = sum(c.outer_size.height for c in dialog.children if c is not body and c.display)
    around = dialog.styles.gutter.height + dialog.styles.margin.height + body.styles.margin.height + others
    room = max(3, screen.size.height - around)
    if body.styles.max_height is None or body.styles.max_height.value != room:
        body.styles.max_height = room


class FittedDialog(ModalScreen[ResultT]):
    """A modal whose ``.dialog-body`` scrolls between a title and buttons that always stay on screen. ``q`` and
    Ctrl-C quit from it too: a modal screen hides the app's own keys, and the key bar under it still says ``q quit``
    (a ``q`` that only closed the list read as a dashboard that would not quit)."""

    BINDINGS = [Binding("ctrl+c,q", "app.help_quit", "quit", show=False)]

    def on_mount(self) -> None:
        self.set_class(self.app.size.height < SHORT_BELOW, "-short-dialog")
        self.call_after_refresh(self._fit)

    def on_resize(self) -> None:
        self.set_class(self.app.size.height < SHORT_BELOW, "-short-dialog")
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        for body in self.query(".dialog-body"):
            dialog = body.parent
            if isinstance(dialog, Widget):
                fit_body(self, body, dialog)

    @property
    def body(self) -> Widget:
        """The part that scrolls: the dialog's ``.dialog-body``."""
        return self.query_one(".dialog-body")

    def action_scroll(self, rows: int) -> None:
        self.body.scroll_relative(y=rows, animate=False)

    def action_page(self, pages: int) -> None:
        self.body.scroll_relative(y=pages * max(1, self.body.size.height - 1), animate=False)

    def action_scroll_to(self, where: int) -> None:
        body = self.body
        body.scroll_to(y=0 if where == 0 else body.max_scroll_y, animate=False)


class ConfirmScreen(FittedDialog[bool]):
    """Returns ``True`` only when Confirm is pressed."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("q,ctrl+c", "quit_app", show=False, priority=True),
        Binding("up", "scroll(-1)", show=False),
        Binding("down", "scroll(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "scroll_to(0)", show=False),
        Binding("end", "scroll_to(-1)", show=False),
        Binding("left", "app.focus_previous", show=False),
        Binding("right", "app.focus_next", show=False),
    ]

    def __init__(self, plan: ActionPlan, *, narrow: bool | None = None, verdict: Verdict | None = None) -> None:
        super().__init__()
        self.plan = plan
        self.narrow = narrow
        self.verdict = verdict

    def compose(self) -> ComposeResult:
        plan = self.plan
        title = ACTION_TITLES.get(plan.action, plan.action)
        narrow = self.narrow if self.narrow is not None else self.app.size.width < NARROW_BELOW
        with Vertical(id="confirm-dialog", classes="dialog"):
            if not plan.runnable:
                yield Static(Text(f"{title}: refused", style="bold"), classes="dialog-title")
                with VerticalScroll(id="confirm-body", classes="dialog-body", can_focus=False):
                    yield Static(Text(row_text(plan.refused or "", 600), style="yellow"), id="refused")
                with Horizontal(classes="dialog-buttons"):
                    yield Button("Close", id="close", variant="primary", compact=narrow)
                return
            heading = Text(f"{title}?", style="bold")
            what = [f"signals {plural(len(plan.targets), 'process')}"] if plan.targets else []
            what += [f"starts {plural(len(plan.start), 'process')}"] if plan.start else []
            if what:
                heading.append(f"  ({', '.join(what)})", style="dim")
            yield Static(heading, classes="dialog-title")
            with VerticalScroll(id="confirm-body", classes="dialog-body", can_focus=False):
                said = verdict_note(self.verdict, plan.action)
                if said is not None:
                    yield Static(said, id="verdict-note")
                if plan.targets:
                    yield Static(Text("Will signal", style="bold underline"), classes="dialog-section")
                    yield Static(targets_blocks(plan.targets) if narrow else targets_table(plan.targets), id="targets")
                if plan.start:
                    yield Static(Text("Will start", style="bold underline"), classes="dialog-section")
                    yield Static(targets_blocks(plan.start) if narrow else targets_table(plan.start), id="start")
                if plan.steps:
                    yield Static(Text("Steps", style="bold underline"), classes="dialog-section")
                    yield Static(steps_text(plan.steps), id="steps")
            with Horizontal(classes="dialog-buttons"):
                yield Static(Text("↑↓ scroll the plan · Esc cancels", style="dim"), classes="dialog-hint")
                yield Button("Cancel", id="cancel", variant="primary", compact=narrow)
                yield Button("Confirm", id="confirm", variant="error", compact=narrow)

    def on_mount(self) -> None:
        super().on_mount()
        # Cancel (or Close) has the focus, whatever the widget order: Enter alone never confirms.
        self.query_one("#cancel" if self.plan.runnable else "#close", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)

    def action_quit_app(self) -> None:
        """q quits with the dialog open, as everywhere else: the plan is cancelled first (nothing was done)."""
        self.dismiss(False)
        self.app.exit()


class RunningScreen(ModalScreen[None]):
    """Shown while a confirmed action runs: nothing else can be asked for, and quitting waits for it. When the result
    comes it stays, saying what was done in full and what comes next, until Enter or Esc closes it (a notification
    in a corner is easy to miss after a night without sleep, and it covered the next step)."""

    BINDINGS = [
        Binding("ctrl+c,q", "quit_when_done", show=False, priority=True),
        Binding("escape,enter", "close", show=False, priority=True),
    ]

    def __init__(self, plan: ActionPlan) -> None:
        super().__init__()
        self.plan = plan
        self.result: ActionResult | None = None

    def compose(self) -> ComposeResult:
        title = ACTION_TITLES.get(self.plan.action, self.plan.action)
        with Vertical(id="running-dialog", classes="dialog"):
            yield Static(Text(f"{title}: running…", style="bold"), classes="dialog-title", id="running-title")
            yield Static(
                Group(
                    steps_text(self.plan.steps),
                    Text(
                        "\nEvery signal and start is written to the audit log. The result shows here when it is done; "
                        "quitting waits for it.",
                        style="dim",
                    ),
                ),
                id="running-steps",
            )

    def show_result(self, result: ActionResult, next_step: Text | None) -> None:
        """The action ended: say how, in full, and what to do next."""
        self.result = result
        title = ACTION_TITLES.get(self.plan.action, self.plan.action)
        head = Text(f"{'✓' if result.ok else '✗'} {title}: {'done' if result.ok else 'failed'}", style="bold")
        head.stylize("green" if result.ok else "red", 0, 1)
        self.query_one("#running-title", Static).update(head)
        body = Text(row_text(result.message, 2000), style="" if result.ok else "red")
        body.append("\n\n")
        if next_step is not None:
            body.append("Next: ", style="bold")
            body.append_text(next_step)
        else:
            body.append("Nothing else to do, by the findings so far.", style="dim")
        body.append("\n\nEnter or Esc closes.", style="dim")
        self.query_one("#running-steps", Static).update(body)

    def action_close(self) -> None:
        if self.result is not None:
            self.dismiss(None)

    def action_quit_when_done(self) -> None:
        if self.result is not None:
            self.app.exit()
            return
        self.notify(
            f"{self.plan.action} is running: it finishes first (it stops nothing halfway)",
            severity="warning",
            timeout=4,
        )
