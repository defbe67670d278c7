"""The top line: which host and run this is, how long things have been up, and the overall verdict.

Everything comes from the snapshot (its own time, never the wall clock), so the same snapshot always renders the
same header. ``stale_s`` is the one exception, set by a live app when the snapshot stops moving: stale data must
never look healthy.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from rlwatch.common.state import Snapshot
from rlwatch.engine.diagnosis import backlog_text
from rlwatch.widgets.format import (
    SEVERITY_LABEL,
    fmt_clock,
    fmt_duration,
    row_text,
    severity_style,
    shorten_path,
)

STATUS_BADGE = {"bold red": "bold white on red", "bold yellow": "bold black on yellow", "cyan": "bold black on cyan"}
# A demo's mark, in a colour no status uses: Textual's theme draws ANSI magenta and red as the same pinkish red
# (256-colour 197), so a SIMULATED beside OK read as a second CRITICAL.
SIMULATED_STYLE = "bold white on #5f00af"


def header_text(snap: Snapshot, width: int, stale_s: float | None = None) -> Text:
    right = Text(no_wrap=True, end="")
    if snap.simulated:
        right.append(" SIMULATED ", style=SIMULATED_STYLE)
        right.append(" ")
    if stale_s is not None:
        right.append(f" STALE {fmt_duration(stale_s)} ", style="bold white on red")
        right.append(" ")
    if snap.backlog is not None:  # what is shown so far is the part read so far: say so, and how far it is
        done, total = snap.backlog
        # With a preview, what is *now* was read first from the logs' ends; only the totals are still partial.
        now = "; diagnosis from the end first" if snap.preview else ""
        if snap.preview and not snap.preview_numbered:
            now += " (line numbers: ? until counted)"
        right.append(
            f" {backlog_text(done, total)}{now} ",
            style="bold black on cyan",
        )
        right.append(" ")
    right.append(fmt_clock(snap.time), style="bold")
    right.append(" ")
    v = snap.verdict
    # The verdict's state, once the run was assessed at all (a snapshot without an assessment says no state).
    state = None if snap.run_state is None else v.state if v is not None else snap.run_state.state
    if state is not None and state != "progressing":  # the verdict's state, as report says it
        right.append(f"run {state} ", style="bold" if state in ("crashed", "hung", "stopped") else "dim")
    worst = snap.worst
    status = v.status if v is not None else None
    if worst is not None and status in (None, "CRITICAL", "WARNING", "NO RUN"):
        right.append(f" {SEVERITY_LABEL[worst]} ", style=STATUS_BADGE.get(severity_style(worst), "bold"))
    elif status == "UNKNOWN" or (
        status is None and snap.run_state is not None and not snap.run_state.healthy
    ):  # no finding, but no evidence of progress either: never "OK"
        right.append(" UNKNOWN ", style="bold black on cyan")
    else:
        right.append(" OK ", style="bold black on green")

    left = Text(no_wrap=True, end="")
    left.append(" rlwatch ", style="bold reverse")
    left.append(f" {row_text(snap.host)}", style="bold")
    left.append(f"  {row_text(snap.profile)}", style="cyan")
    up = f"  up {fmt_duration(snap.uptime_s)}"
    run = f" · run {fmt_duration(snap.run_uptime_s)}"
    room = width - right.cell_len - left.cell_len - len(up) - len(run) - 4
    if room >= 12:
        left.append(f"  {shorten_path(snap.run_dir, min(room, 60))}", style="dim")
    # The verdict on the right is what must never be cut: the uptimes give way first on a narrow terminal.
    if width - right.cell_len - left.cell_len - 1 >= len(up) + len(run):
        left.append(up, style="dim")
        left.append(run, style="dim")
    elif width - right.cell_len - left.cell_len - 1 >= len(run):
        left.append(run, style="dim")
    gap = max(1, width - left.cell_len - right.cell_len)
    left.append(" " * gap)
    left.append_text(right)
    left.truncate(width)
    return left


class HeaderBar(Widget):
    DEFAULT_CSS = """
    HeaderBar {
        dock: top;
        height: 1;
        background: $panel;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.stale_s: float | None = None

    def show(self, snap: Snapshot, stale_s: float | None = None) -> None:
        if snap is self.snapshot and stale_s == self.stale_s:  # identity: snapshots are immutable
            return
        self.snapshot = snap
        self.stale_s = stale_s
        self.refresh()

    def render(self) -> Text:
        if self.snapshot is None:
            return Text(" rlwatch  waiting for the first snapshot…", style="dim")
        return header_text(self.snapshot, self.content_size.width, self.stale_s)
