"""Processes of the run and the inference server's health.

The server line leads because incidents 1 and 5 turned on it: the server gone (since when, with which error), or
alive as a process while its health check fails. The table lists the run's processes with their memory, age and
restart count; a process that died stays listed, struck through, so its absence is visible.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from rlwatch.common.state import LiveRun, ProcessInfo, ServerState, Snapshot, WatchdogStatus
from rlwatch.engine.diagnosis import percent_read
from rlwatch.widgets.format import clean_text, fmt_age, fmt_bytes, fmt_clock, fmt_cmdline, fmt_duration
from rlwatch.widgets.panel import Panel
from rlwatch.widgets.table_fill import fill_rows
from rlwatch.widgets.text_block import TextBlock

COMMAND_WIDTH = 60
EVIDENCE_WIDTH = 28


def server_line(srv: ServerState | None, now: float) -> Text:
    """Which server, then its state: down since when and why (and whether its process lives), or up."""
    line = Text("server ", style="bold", no_wrap=True, end="")
    if srv is None or (srv.url is None and srv.kind is None):
        unexpected = srv is not None and not srv.expected
        line.append("none expected" if unexpected else "none configured or found", style="dim")
        if srv is not None and srv.evidence:  # why none is expected: colocated generation, no evidence of one
            line.append("\n  " + clean_text(srv.evidence[0], 120), style="dim")
        return line
    line.append(f"{srv.kind or '?'} ", style="bold")
    line.append(clean_text(srv.url or "no url"), style="dim")
    line.append("\n")
    if srv.up is None:
        line.append(" NOT CHECKED ", style="bold black on yellow")
    elif srv.up:
        line.append(" UP ", style="bold black on green")
        if srv.latency_s is not None:
            line.append(f" {srv.latency_s * 1000:.0f} ms", style="dim")
    else:
        line.append(" DOWN ", style="bold white on red")
        if srv.down_since is not None:
            line.append(
                f" since {fmt_clock(srv.down_since, now=now)}, {fmt_age(srv.down_since, now)}", style="bold red"
            )
        why = [clean_text(srv.error, 120)] if srv.error else []
        if srv.status_code is not None:
            why.append(f"HTTP {srv.status_code}")
        if why:
            line.append("\n  " + " · ".join(why), style="red")
    if srv.process_alive is not None:
        alive = srv.process_alive
        pid = f" {srv.pid}" if srv.pid is not None else ""
        line.append(f"  process{pid} {'alive' if alive else 'gone'}", style="dim" if alive else "bold red")
    return line


def watchdog_line(wd: WatchdogStatus | None, now: float) -> Text | None:
    """Whether the headless watchdog keeps this run, and since when (incident 3: it had died unnoticed)."""
    if wd is None:
        return None  # none was ever started here; an expected one that is missing is a finding already
    line = Text("watchdog ", style="bold", no_wrap=True, end="")
    if wd.running and not wd.stale:
        line.append(" RUNNING ", style="bold black on green")
        since = f" since {fmt_clock(wd.since, now=now)}" if wd.since is not None else ""
        line.append(f"{since}  pid {wd.pid}", style="dim")
        if wd.reading_backlog is not None:
            line.append(f"  reading its logs ({percent_read(*wd.reading_backlog)} %): no action yet", style="yellow")
    elif wd.running:
        line.append(" STUCK ", style="bold white on red")
        line.append(f"  pid {wd.pid}, no heartbeat for {fmt_duration(wd.heartbeat_age_s)}", style="red")
    elif wd.stopped is not None:
        line.append(" STOPPED ", style="bold black on yellow")
        line.append(f"  {fmt_clock(wd.stopped, now=now)}", style="dim")
    else:
        line.append(" GONE ", style="bold white on red")
        line.append("  died without stopping", style="red")
    if wd.gave_up:
        line.append(f"  gave up on {', '.join(clean_text(g.target) for g in wd.gave_up)}", style="bold red")
    elif wd.last_action:
        line.append(f"  last: {clean_text(wd.last_action, 80)}", style="dim")
    n = wd.notify
    if n is not None:  # whom it tells, and when it last did (targets arrive redacted: tgram://***)
        if n.targets:
            line.append("\n  notify ", style="bold")
            line.append(clean_text(", ".join(n.targets), 60), style="dim")
            if n.error:
                line.append(f"  FAILING: {clean_text(n.error, 80)}", style="bold red")
            elif n.last_sent_at is not None:
                line.append(f"  last {fmt_clock(n.last_sent_at)}: {clean_text(n.last_message or '', 70)}", style="dim")
            else:
                line.append("  nothing sent yet", style="dim")
        if n.heartbeat:
            line.append("\n  heartbeat ", style="bold")
            line.append(clean_text(n.heartbeat, 40), style="dim")
            if n.heartbeat_error:
                line.append(f"  FAILING: {clean_text(n.heartbeat_error, 80)}", style="bold red")
            else:
                ping = "never answered" if n.heartbeat_at is None else f"last ping {fmt_clock(n.heartbeat_at)}"
                line.append(f"  {ping}", style="dim")
    return line


def label(p: ProcessInfo) -> str:
    """The name, with the role when the name does not already say it (``pool (launcher)``, ``worker-0``)."""
    name, role = clean_text(p.name), clean_text(p.role)
    return name if name.startswith(role) else f"{name} ({role})"


def process_row(p: ProcessInfo, now: float) -> tuple[Text, ...]:
    dead = "dim strike" if not p.alive else ""
    return (
        Text(label(p), style=dead or "bold"),
        Text(str(p.pid), justify="right", style=dead),
        Text("alive", style="green") if p.alive else Text("DEAD", style="bold red"),
        Text(fmt_bytes(p.rss_bytes), justify="right", style=dead),
        Text(fmt_duration(now - p.started_at) if p.alive else "–", justify="right", style=dead),
        Text(str(p.restarts), justify="right", style="bold yellow" if p.restarts else "dim"),
        Text(fmt_cmdline(p.cmdline, COMMAND_WIDTH, full_path=False), style="dim"),
        evidence_cell(p),
    )


def evidence_cell(p: ProcessInfo) -> Text:
    """How the process was recognised as the run's; a role rule alone is said, because it proves little."""
    if not p.alive:
        return Text("–", style="dim")
    if p.evidence is None:
        return Text("role rule only", style="yellow")
    return Text(clean_text(p.evidence, EVIDENCE_WIDTH), style="dim green", no_wrap=True, overflow="ellipsis")


def live_run_line(run: LiveRun | None) -> Text | None:
    """What rlwatch takes to be the live run, on what evidence, or that it cannot tell."""
    if run is None:
        return None
    if not run.identified:
        return Text(f"live run: UNKNOWN — {clean_text(run.why_unknown or '', 140)}", style="bold yellow", no_wrap=True)
    pid, why = run.members[0] if run.members else (None, "")
    # The evidence may count its own files ("writes a.log (+1 more)"): the other processes are said apart from it.
    others = len(run.members) - 1
    line = Text("live run: ", style="dim", no_wrap=True, end="")
    line.append(f"pid {pid}", style="bold")
    if others:
        line.append(f" and {others} other process{'es' if others > 1 else ''}", style="bold")
    line.append(": " + clean_text(why, 100), style="green")
    earlier = [a for a in run.attempts if not a.current and a.pids]
    if earlier:
        n = sum(len(a.pids) for a in earlier)
        line.append(
            f"  + {len(earlier)} earlier attempt{'s' if len(earlier) > 1 else ''} still running "
            f"({n} process{'es' if n > 1 else ''}), listed apart",
            style="bold red",
        )
    return line


def attempt_heading(run: LiveRun | None, index: int | None, now: float) -> Text:
    """The row that opens an attempt's group in the processes table: the live run, or an earlier attempt with its
    launcher (gone since when, where rlwatch saw it go) and what it holds."""
    if index is None or run is None or index >= len(run.attempts):
        return Text("live run", style="bold green")
    a = run.attempts[index]
    name = f"{a.launcher} " if a.launcher else ""
    who = f"launcher {name}pid {a.launcher_pid}" if a.launcher_pid is not None else "launcher"
    gone = f" since {fmt_clock(a.launcher_gone_at, now=now)}" if a.launcher_gone_at is not None else ""
    head = "strays of an earlier attempt" if a.stray else "earlier attempt"
    text = Text(f"{head} ({who} gone{gone})", style="bold red")
    if a.gpus:
        text.append(f" holds GPU {','.join(map(str, a.gpus))} {fmt_bytes(a.gpu_mem_bytes)}", style="red")
    return text


class ProcessPanel(Panel):
    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(title, id=id, focusable=False)

    def compose(self) -> ComposeResult:
        yield TextBlock(id="server-line", classes="body")
        table: DataTable[Text] = DataTable(id="process-table", cursor_type="row", show_cursor=False)
        # The command says which process it is; the evidence (how rlwatch knows it is the run's) follows it, and is
        # summed up for the run as a whole in the live-run line above the table when the panel is too narrow.
        for label in ("name", "pid", "state", "RSS", "up", "restarts", "command", "the run's by"):
            table.add_column(label, key=label)
        yield table

    def data_key(self, snap: Snapshot) -> object:
        return (snap.server, snap.processes, snap.watchdog, snap.live_run)

    def show(self, snap: Snapshot) -> None:
        text = server_line(snap.server, snap.time)
        watchdog = watchdog_line(snap.watchdog, snap.time)
        if watchdog is not None:
            text.append("\n")
            text.append_text(watchdog)
        run = live_run_line(snap.live_run)
        if run is not None:
            text.append("\n")
            text.append_text(run)
        self.query_one("#server-line", Static).update(text)
        table = self.query_one("#process-table", DataTable)
        # Grouped by attempt: the live run first, then each earlier attempt still running beside it under a heading.
        order = sorted(
            snap.processes,
            key=lambda p: (p.attempt is not None, p.attempt or 0, not p.alive, p.role, p.name, p.pid),
        )
        grouped = any(p.attempt is not None for p in order)
        group: object = object()
        rows: list[tuple[str, tuple[object, ...]]] = []
        for p in order:
            if grouped and p.attempt != group:
                group = p.attempt
                heading = attempt_heading(snap.live_run, p.attempt, snap.time)
                rows.append((f"attempt:{p.attempt}", (heading, *(Text("") for _ in range(7)))))
            rows.append((f"{p.pid}:{p.create_time}", tuple(process_row(p, snap.time))))
        if not order:
            rows.append(("", (Text("no processes found", style="dim"), *(Text("") for _ in range(7)))))
        fill_rows(table, rows)  # the same processes: only the cells that changed are set
