"""The ``d`` screen: every finding in full, most severe first, each with the key or the command that fixes it.

The banner above the panels keeps one line on a short terminal ("+3 more (d)"); this is where the rest is read. An
action key pressed here closes the list and asks for that action, as it would on the dashboard.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from rlwatch.common.state import Snapshot
from rlwatch.tui.keys import ACTION_KEYS
from rlwatch.tui.screens.confirm import FittedDialog
from rlwatch.widgets.findings import broken_sources, fix_text, ordered_findings
from rlwatch.widgets.format import SEVERITY_LABEL, SEVERITY_STYLE, finding_title, fmt_clock, row_text


def findings_list(snap: Snapshot, *, readonly: bool) -> Text:
    out = Text(end="")
    shown = ordered_findings(snap.findings)
    if not shown:
        out.append("✓ No problems found", style="bold green")
    for i, f in enumerate(shown):
        if i:
            out.append("\n\n")
        out.append(f"● {SEVERITY_LABEL[f.severity]}", style=SEVERITY_STYLE[f.severity])
        if f.since is not None:
            out.append(f"  since {fmt_clock(f.since, now=snap.time)}", style="dim")
        out.append(f"  {finding_title(f.code)}", style="dim")
        out.append("\n")
        out.append(row_text(f.message, 2000))
        fix = fix_text(f, snap.run_dir, readonly=readonly)
        out.append("\n")
        if fix is not None:
            out.append("fix: ", style="dim")
            out.append_text(fix)
        else:
            out.append("fix: no key or command fixes this; the words above say what to look at", style="dim")
    broken = broken_sources(snap.sources, bool(shown))
    if broken:
        out.append("\n\n")
        out.append("Not available (what is shown may be missing or stale):", style="bold")
        for s in broken:
            out.append(f"\n  {row_text(s.name)}: {row_text(s.error or '', 300)}", style="dim")
    return out


class FindingsScreen(FittedDialog[str | None]):
    """Returns the action a key asked for, or None when closed."""

    BINDINGS = [
        Binding("escape,d", "close", "Close"),
        Binding("up", "scroll(-1)", show=False),
        Binding("down", "scroll(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown,space", "page(1)", show=False),
        *(Binding(key, f"act('{action}')", show=False) for key, action in ACTION_KEYS.items()),
    ]

    def __init__(self, snap: Snapshot, *, readonly: bool) -> None:
        super().__init__()
        self.snap = snap
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        n = len(self.snap.findings)
        with Vertical(id="findings-dialog", classes="dialog"):
            yield Static(Text(f"Findings ({n})", style="bold"), classes="dialog-title")
            with VerticalScroll(id="findings-body", classes="dialog-body"):
                yield Static(findings_list(self.snap, readonly=self.readonly), id="findings-list")
            keys = "" if self.readonly else "an action key asks for that action · "
            yield Static(Text(f"{keys}↑↓ PgUp PgDn scroll · Esc closes · q quits", style="dim"), classes="dialog-note")

    def action_act(self, action: str) -> None:
        self.dismiss(None if self.readonly else action)

    def action_close(self) -> None:
        self.dismiss(None)
