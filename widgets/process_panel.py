"""Processes of the run and the inference server's health.

The server line leads because incidents 1 and 5 turned on it: the server gone (since when, with which error), or
alive as a process while its health check fails. The table lists the run's processes with their memory, age and
restart count; a process that died stays listed, struck through, so its absence is visible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from rlwatch.common.state import GpuHolder, LiveRun, ProcessInfo, ServerState, Snapshot, WatchdogStatus
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis import percent_read
from rlwatch.widgets.format import fmt_age, fmt_bytes, fmt_clock, fmt_cmdline, fmt_duration, row_text
from rlwatch.widgets.memory_panel import short_bytes
from rlwatch.widgets.panel import Panel
from rlwatch.widgets.row_table import RowTable, TableColumn
from rlwatch.widgets.text_block import TextBlock

COMMAND_WIDTH = 120  # the most a command is given, however wide the panel: past it a line is hard to read
EVIDENCE_WIDTH = 28  # the evidence column's width where the command needs the rest
EVIDENCE_MAX = 80


def server_line(srv: ServerState | None, now: float) -> Text:
    """Which server, then its state: down since when and why (and whether its process lives), or up."""
    line = Text("server ", style="bold", no_wrap=True, end="")
    if srv is None or (srv.url is None and srv.kind is None):
        unexpected = srv is not None and not srv.expected
        line.append("none expected" if unexpected else "none configured or found", style="dim")
        if srv is not None and srv.evidence:  # why none is expected: colocated generation, no evidence of one
            line.append("\n  " + row_text(srv.evidence[0], 120), style="dim")
        return line
    line.append(f"{srv.kind or '?'} ", style="bold")
    line.append(row_text(srv.url or "no url"), style="dim")
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
        why = [row_text(srv.error, 120)] if srv.error else []
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
        line.append(f"  gave up on {', '.join(row_text(g.target) for g in wd.gave_up)}", style="bold red")
    elif wd.last_action:
        line.append(f"  last: {row_text(wd.last_action, 80)}", style="dim")
    n = wd.notify
    if n is not None:  # whom it tells, and when it last did (targets arrive redacted: tgram://***)
        if n.targets:
            line.append("\n  notify ", style="bold")
            line.append(row_text(", ".join(n.targets), 60), style="dim")
            if n.error:
                line.append(f"  FAILING: {row_text(n.error, 80)}", style="bold red")
            elif n.last_sent_at is not None:
                line.append(f"  last {fmt_clock(n.last_sent_at)}: {row_text(n.last_message or '', 70)}", style="dim")
            else:
                line.append("  nothing sent yet", style="dim")
        if n.heartbeat:
            line.append("\n  heartbeat ", style="bold")
            line.append(row_text(n.heartbeat, 40), style="dim")
            if n.heartbeat_error:
                line.append(f"  FAILING: {row_text(n.heartbeat_error, 80)}", style="bold red")
            else:
                ping = "never answered" if n.heartbeat_at is None else f"last ping {fmt_clock(n.heartbeat_at)}"
                line.append(f"  {ping}", style="dim")
    return line


def process_label(p: ProcessInfo) -> str:
    """The name, with the role when the name does not already say it (``pool (launcher)``, ``worker-0``)."""
    name, role = row_text(p.name), row_text(p.role)
    return name if name.startswith(role) else f"{name} ({role})"


# The processes table fits its panel's width (issue 34: at 120x40 it lost its `up` column, at 80x24 its command, even
# maximised). What a person needs of each process comes first and is never dropped: which one (name, pid), whether it
# lives, its memory (RSS, and GPU memory on a GPU host) and its age; then as much of its command line as fits, cut at
# the right so the executable's name stays. What gives way first when space runs out: the evidence column (the
# live-run line above the table sums it up), then the restart count while it is zero everywhere, then the long units
# ("300.0 MB" becomes "300M") and long names. Each column is as wide as its widest cell, never wider than it is given.
CELL_PADDING = 2 * RowTable.CELL_PADDING  # a table's cell has padding on each side
COMMAND_MIN = 24  # below this the numbers are shortened first
COMMAND_ROOM = 40  # a zero restart count or the evidence column is shown only if the command keeps this much
COMMAND_FLOOR = 8  # the executable's name at least, however narrow
NAME_MAX = 22
NAME_MAX_COMPACT = 12
NO_PROCESSES = "no processes found"


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    width: int


@dataclass(frozen=True, slots=True)
class ColumnLayout:
    """The columns shown at one width, and whether the numbers are in their short form (``300M`` for 300.0 MB)."""

    columns: tuple[Column, ...]
    compact: bool

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.columns)

    def width_of(self, key: str) -> int:
        return next((c.width for c in self.columns if c.key == key), 0)


def gpu_memory(holders: Sequence[GpuHolder]) -> dict[int, int | None]:
    """Each GPU-holding pid's GPU memory (None where NVML does not say it)."""
    return {h.pid: h.gpu_mem_bytes for h in holders}


def _bytes(n: int | None, compact: bool) -> str:
    return short_bytes(n) if compact else fmt_bytes(n)


def _fit(text: str, width: int) -> str:
    """Cut at the right with an ellipsis: the start of a name or a command line says which it is."""
    if cell_len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def _widest(label: str, cells: Sequence[str], cap: int | None = None) -> int:
    w = max([cell_len(label), *(cell_len(c) for c in cells)])
    return w if cap is None else min(w, cap)


def table_layout(
    width: int,
    procs: Sequence[ProcessInfo],
    now: float,
    *,
    gpu: Mapping[int, int | None] | None = None,
    titles: Sequence[str] = (),
    details: Sequence[str] = (),
) -> ColumnLayout:
    """The columns of the processes table in ``width`` cells (see the comment above). ``gpu`` is each pid's GPU
    memory on a GPU host (None: not a GPU host, no column); ``titles`` and ``details`` are what heading rows show in
    the name and command columns."""
    names = [process_label(p) for p in procs] + list(titles)
    commands = [fmt_cmdline(p.cmdline, COMMAND_WIDTH, full_path=False) for p in procs] + list(details)
    restarted = any(p.restarts for p in procs)
    columns: list[Column] = []
    command = 0
    compact = False
    for compact in (False, True):
        columns = [
            Column("name", "name", _widest("name", names, NAME_MAX_COMPACT if compact else NAME_MAX)),
            Column("pid", "pid", _widest("pid", [str(p.pid) for p in procs])),
            Column("state", "state", _widest("state", ["alive", "DEAD"])),
            Column("RSS", "RSS", _widest("RSS", [_bytes(p.rss_bytes, compact) for p in procs])),
        ]
        if gpu is not None:
            cells = [_bytes(gpu[p.pid], compact) for p in procs if p.pid in gpu]
            columns.append(Column("GPU", "GPU", _widest("GPU", cells)))
        ages = [fmt_duration(now - p.started_at) for p in procs if p.alive]  # a dead one shows none
        columns.append(Column("up", "up", _widest("up", ages)))
        command = width - sum(c.width + CELL_PADDING for c in columns) - CELL_PADDING
        if command >= COMMAND_MIN or not procs:  # no process: the one row says so, whole
            break
    restarts = _widest("restarts", [str(p.restarts) for p in procs])
    if command - restarts - CELL_PADDING >= (COMMAND_FLOOR if restarted else COMMAND_ROOM):
        columns.append(Column("restarts", "restarts", restarts))
        command -= restarts + CELL_PADDING
    said = _widest("the run's by", [evidence_cell(p, EVIDENCE_MAX).plain for p in procs])
    evidence = min(said, EVIDENCE_WIDTH)
    show_evidence = command - evidence - CELL_PADDING >= COMMAND_ROOM
    if show_evidence:
        command -= evidence + CELL_PADDING
    shown = max(COMMAND_FLOOR, min(command, _widest("command", commands)))
    columns.append(Column("command", "command", shown))
    if show_evidence:  # what the command does not need, the evidence may take
        columns.append(Column("evidence", "the run's by", min(said, evidence + max(0, command - shown))))
    return ColumnLayout(tuple(columns), compact)


def process_row(
    p: ProcessInfo, now: float, layout: ColumnLayout, gpu: Mapping[int, int | None] | None = None
) -> tuple[Text, ...]:
    """The row of one process, in the layout's columns."""
    return tuple(_cell(key, p, now, layout, gpu or {}) for key in layout.keys)


def _cell(key: str, p: ProcessInfo, now: float, layout: ColumnLayout, gpu: Mapping[int, int | None]) -> Text:
    dead = "dim strike" if not p.alive else ""
    if key == "name":
        return Text(_fit(process_label(p), layout.width_of("name")), style=dead or "bold")
    if key == "pid":
        return Text(str(p.pid), justify="right", style=dead)
    if key == "state":
        return Text("alive", style="green") if p.alive else Text("DEAD", style="bold red")
    if key == "RSS":
        return Text(_bytes(p.rss_bytes, layout.compact), justify="right", style=dead)
    if key == "GPU":
        if p.pid not in gpu:
            return Text("–", justify="right", style="dim")
        return Text(_bytes(gpu[p.pid], layout.compact), justify="right", style=dead)
    if key == "up":
        return Text(fmt_duration(now - p.started_at) if p.alive else "–", justify="right", style=dead)
    if key == "restarts":
        return Text(str(p.restarts), justify="right", style="bold yellow" if p.restarts else "dim")
    if key == "command":
        return Text(fmt_cmdline(p.cmdline, layout.width_of("command"), full_path=False), style="dim")
    return evidence_cell(p, layout.width_of("evidence"))


def heading_row(title: Text, detail: Text, layout: ColumnLayout) -> tuple[Text, ...]:
    """A row that names a group: its title in the name column, what it says of the group in the command column (a
    table has no cell spanning columns; the command column is the widest)."""
    cells = []
    for key in layout.keys:
        if key == "name":
            cells.append(Text(_fit(title.plain, layout.width_of("name")), style=title.style))
        elif key == "command":
            cells.append(Text(_fit(detail.plain, layout.width_of("command")), style=detail.style))
        else:
            cells.append(Text(""))
    return tuple(cells)


def evidence_cell(p: ProcessInfo, width: int = EVIDENCE_WIDTH) -> Text:
    """How the process was recognised as the run's; a role rule alone is said, because it proves little."""
    if not p.alive:
        return Text("–", style="dim")
    if p.evidence is None:
        return Text("role rule only", style="yellow")
    return Text(row_text(p.evidence, width), style="dim green", no_wrap=True, overflow="ellipsis")


def live_run_line(run: LiveRun | None) -> Text | None:
    """What rlwatch takes to be the live run, on what evidence, or that it cannot tell."""
    if run is None:
        return None
    if not run.identified:
        return Text(f"live run: UNKNOWN — {row_text(run.why_unknown or '', 140)}", style="bold yellow", no_wrap=True)
    pid, why = run.members[0] if run.members else (None, "")
    # The evidence may count its own files ("writes a.log (+1 more)"): the other processes are said apart from it.
    others = len(run.members) - 1
    line = Text("live run: ", style="dim", no_wrap=True, end="")
    line.append(f"pid {pid}", style="bold")
    if others:
        line.append(f" and {plural(others, 'other process')}", style="bold")
    line.append(": " + row_text(why, 100), style="green")
    earlier = [a for a in run.attempts if not a.current and a.pids]
    if earlier:
        n = sum(len(a.pids) for a in earlier)
        line.append(
            f"  + {plural(len(earlier), 'earlier attempt')} still running ({plural(n, 'process')}), listed apart",
            style="bold red",
        )
    return line


def attempt_heading(run: LiveRun | None, index: int | None, now: float) -> tuple[Text, Text]:
    """The row that opens an attempt's group in the processes table, as (title, detail): the live run, or an earlier
    attempt with its launcher (gone since when, where rlwatch saw it go) and what it holds."""
    if index is None or run is None or index >= len(run.attempts):
        return Text("live run", style="bold green"), Text("")
    a = run.attempts[index]
    name = f"{a.launcher} " if a.launcher else ""
    who = f"launcher {name}pid {a.launcher_pid}" if a.launcher_pid is not None else "launcher"
    gone = f" since {fmt_clock(a.launcher_gone_at, now=now)}" if a.launcher_gone_at is not None else ""
    head = "strays" if a.stray else "earlier attempt"
    detail = Text(f"{'of an earlier attempt: ' if a.stray else ''}{who} gone{gone}", style="bold red")
    if a.gpus:
        detail.append(f"; holds GPU {','.join(map(str, a.gpus))} {fmt_bytes(a.gpu_mem_bytes)}")
    return Text(head, style="bold red"), detail


class ProcessPanel(Panel):
    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(title, id=id, focusable=False)
        self._snap: Snapshot | None = None
        self._width = 0  # the width the table was laid out for
        self._layout: ColumnLayout | None = None

    def compose(self) -> ComposeResult:
        yield TextBlock(id="server-line", classes="body")
        # The columns depend on the width (table_layout): set when the panel is first drawn, and again when its width
        # changes. The evidence (how rlwatch knows a process is the run's) is summed up for the run as a whole in the
        # live-run line above the table when the panel is too narrow for its column.
        yield RowTable(id="process-table", show_cursor=False)

    def data_key(self, snap: Snapshot) -> object:
        gpu_host = snap.gpu is not None and bool(snap.gpu.gpus)
        return (snap.server, snap.processes, snap.watchdog, snap.live_run, gpu_host and snap.holders)

    def table_width(self) -> int:
        """The cells the table has: the panel's inside, less the cell of a vertical scrollbar that may come."""
        width = self.scrollable_content_region.width
        return max(0, width - 1) if width else 200  # not laid out yet: drawn again at its first resize

    def on_resize(self) -> None:
        if self._snap is not None and self.table_width() != self._width:
            self.show(self._snap)

    def show(self, snap: Snapshot) -> None:
        self._snap = snap
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
        table = self.query_one("#process-table", RowTable)
        # Grouped by attempt: the live run first, then each earlier attempt still running beside it under a heading.
        order = sorted(
            snap.processes,
            key=lambda p: (p.attempt is not None, p.attempt or 0, not p.alive, p.role, p.name, p.pid),
        )
        headings: dict[int | None, tuple[Text, Text]] = {}
        if any(p.attempt is not None for p in order):
            headings = {
                a: attempt_heading(snap.live_run, a, snap.time) for a in dict.fromkeys(p.attempt for p in order)
            }
        gpu = gpu_memory(snap.holders) if snap.gpu is not None and snap.gpu.gpus else None
        titles = [title.plain for title, _ in headings.values()] or ([] if order else [NO_PROCESSES])
        self._width = self.table_width()
        details = [detail.plain for _, detail in headings.values()]
        layout = table_layout(self._width, order, snap.time, gpu=gpu, titles=titles, details=details)
        if layout != self._layout:
            table.set_columns([TableColumn(c.key, c.label, c.width) for c in layout.columns])
            self._layout = layout
        group: object = object()
        rows: list[tuple[str, tuple[object, ...]]] = []
        for p in order:
            if headings and p.attempt != group:
                group = p.attempt
                rows.append((f"attempt:{p.attempt}", heading_row(*headings[p.attempt], layout)))
            rows.append((f"{p.pid}:{p.create_time}", process_row(p, snap.time, layout, gpu)))
        if not order:
            rows.append(("", heading_row(Text(NO_PROCESSES, style="dim"), Text(""), layout)))
        table.set_rows(rows)  # the same processes: only the rows whose cells changed are drawn again
