"""The ``t`` screen: where each of the run's processes stands, read from their Python stacks (py-spy).

A hung run prints no error; where each rank waits is what says why ("rank 1 never reached the all-reduce that rank 0
waits in"). The stacks are read when the screen is asked for (never pausing or signalling a process) and once on
their own when a hang is declared; every dump is kept in the run's ``.rlwatch/stacks/``.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from rlwatch.common.state import StackReport
from rlwatch.tui.screens.confirm import FittedDialog
from rlwatch.widgets.format import fmt_clock, row_text


def stacks_text(report: StackReport | None, now: float) -> Text:
    out = Text(end="")
    if report is None:
        out.append("No stack has been read yet.", style="dim")
        return out
    out.append(f"read {fmt_clock(report.taken_at, now=now)} ({row_text(report.why)})", style="dim")
    if report.error and not report.summary:
        out.append("\n\n")
        out.append(row_text(report.error, 600), style="bold yellow")
        return out
    for where, labels in report.groups:
        out.append("\n\n")
        out.append(", ".join(row_text(label) for label in labels), style="bold")
        out.append(" in ")
        out.append(row_text(where, 200), style="bold cyan")
    for p in report.processes:
        out.append("\n\n")
        who = p.label if str(p.pid) in p.label else f"{p.label} (pid {p.pid})"
        out.append(row_text(who), style="bold")
        if p.error is not None:
            out.append(f": {row_text(p.error, 400)}", style="yellow")
            continue
        for frame in p.frames[:20]:
            out.append("\n  ")
            out.append(row_text(frame, 200))
    if report.path:
        out.append("\n\n")
        out.append(f"kept in {row_text(report.path, 300)}", style="dim")
    return out


class StacksScreen(FittedDialog[None]):
    BINDINGS = [
        Binding("escape,t", "close", "Close"),
        Binding("up", "scroll(-1)", show=False),
        Binding("down", "scroll(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown,space", "page(1)", show=False),
    ]

    def __init__(self, report: StackReport | None, now: float) -> None:
        super().__init__()
        self.report = report
        self.now = now

    def compose(self) -> ComposeResult:
        with Vertical(id="stacks-dialog", classes="dialog"):
            yield Static(Text("Where each process of the run stands", style="bold"), classes="dialog-title")
            with VerticalScroll(id="stacks-body", classes="dialog-body"):
                yield Static(stacks_text(self.report, self.now), id="stacks-list")
            yield Static(Text("↑↓ PgUp PgDn scroll · Esc closes · q quits", style="dim"), classes="dialog-note")

    def action_close(self) -> None:
        self.dismiss(None)
