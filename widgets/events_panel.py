"""Event counts: which failure kinds are piling up, how fast, and the lines behind them.

Rows are ordered most severe first, then by count, so a storm of connection-refused errors sits above a few
harmless timeouts. Highlighting a row shows its last lines; selecting it (enter or a click) asks the screen to
filter the log view to that kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.message import Message
from textual.widgets import Static

from rlwatch.common.state import EventSummary, Incident, IncidentTally, Snapshot, line_ref
from rlwatch.engine.diagnosis import failure_text, first_text, incident_text, last_text, occurrences
from rlwatch.widgets.format import SEVERITY_STYLE, basename, fmt_age, fmt_clock, row_text
from rlwatch.widgets.panel import Panel
from rlwatch.widgets.row_table import RowTable, TableColumn
from rlwatch.widgets.text_block import TextBlock

RECENT_SHOWN = 3
LINE_LIMIT = 400


def ordered_events(events: dict[str, EventSummary], *, show_zero: bool) -> list[EventSummary]:
    rows = [e for e in events.values() if show_zero or e.count]
    return sorted(rows, key=lambda e: (e.severity.rank, -e.count, e.kind))


def event_row(e: EventSummary, now: float) -> tuple[Text, Text, Text, Text, Text]:
    dim = e.count == 0
    kind_style = "dim" if dim else SEVERITY_STYLE[e.severity]
    num = "dim" if dim else ""
    return (
        Text(row_text(e.kind), style=kind_style),
        Text(str(e.count), style=num, justify="right"),
        Text(f"{e.rate_per_min:.1f}" if e.count else "–", style=num, justify="right"),
        Text(str(e.streak) if e.streak else "–", style=num, justify="right"),
        Text(last_age(e, now), style="dim"),
    )


def last_age(e: EventSummary, now: float) -> str:
    """How long ago the kind was last seen. Lines without a time of their own (a backlog's) give only a bound:
    "≥3h ago" (the file was last written then), or "?"; never the time they were read."""
    if not e.count:
        return "never"
    if not e.approximate or (e.last is not None and e.last_by == e.last):
        return fmt_age(e.last, now)
    return "≥" + fmt_age(e.last_by, now) if e.last_by is not None else "?"


def detail_text(
    e: EventSummary | None,
    incidents: tuple[Incident, ...],
    now: float | None = None,
    dropped: tuple[IncidentTally, ...] = (),
) -> Text:
    """Where the highlighted kind came from and its last lines; the latest incidents when nothing is highlighted."""
    out = Text(no_wrap=True, end="")
    if e is not None:
        out.append(row_text(e.kind), style=SEVERITY_STYLE[e.severity])
        out.append(f"  {e.count} total", style="bold")
        if e.files:
            files = ", ".join(f"{basename(p)} {n}" for p, n in sorted(e.files.items(), key=lambda kv: -kv[1]))
            out.append(f"  ({files})")
        if e.approximate and e.count:
            out.append(f"  first {first_text(e, now)} last {last_text(e, now)}", style="dim")
        elif e.first is not None:
            out.append(f"  first {fmt_clock(e.first, now=now)} last {fmt_clock(e.last, now=now)}", style="dim")
        for line in e.recent[-RECENT_SHOWN:]:
            out.append("\n")
            out.append(f"{row_text(line_ref(line.path, line.lineno))} ", style="dim")
            out.append(row_text(line.text, LINE_LIMIT))
        if not e.recent and e.count:
            out.append("\n")
            out.append("no lines kept", style="dim")
    failed = max((i for i in incidents if i.root_cause is not None), key=_latest, default=None)
    crashes = [i for i in incidents if i.kind in ("traceback", "crash")]
    if failed is not None and failed.root_cause is not None:
        # torchrun's own verdict: the rank that failed first and what it printed before, not a victim's SIGTERM.
        if out:
            out.append("\n")
        out.append("root cause ", style="bold")
        out.append(row_text(failure_text(failed.root_cause), LINE_LIMIT), style="bold red")
        cause = failed.cause
        if cause is not None:
            out.append(" after ", style="dim")
            out.append(row_text(cause.title, LINE_LIMIT), style="bold red")
            out.append(f" ({row_text(line_ref(cause.path, cause.lineno))}, {_when(cause, now)})", style="dim")
        if failed.victims:
            names = ", ".join(failure_text(v) for v in failed.victims[:4])
            out.append(f"; stopped after it: {row_text(names, LINE_LIMIT)}", style="dim")
    elif crashes:
        last = max(crashes, key=_latest)
        same = occurrences(incidents, dropped, last.kind, last.signature)
        if out:
            out.append("\n")
        out.append("last exception ", style="bold")
        out.append(row_text(last.title, LINE_LIMIT), style="bold red")
        where = f" at {row_text(last.location)}" if last.location else ""
        out.append(f"{where} ({row_text(line_ref(last.path, last.lineno))}, {_when(last, now)})", style="dim")
        if same > 1:
            out.append(f" ×{same} same signature", style="bold yellow")
    return out


def _latest(i: Incident) -> tuple[float, float, int]:
    return (i.last, i.by if i.by is not None else i.last, i.lineno)


def _when(i: Incident, now: float | None) -> str:
    """An incident's clock time, or its bounds and position where its lines carry no time of their own (its
    ``file:line`` is written beside it already)."""
    return incident_text(i, now, said=line_ref(i.path, i.lineno)) if i.approximate else fmt_clock(i.last, now=now)


class EventsPanel(Panel):
    """The table of kinds plus the lines behind the highlighted one."""

    @dataclass
    class KindSelected(Message):
        kind: str

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(title, id=id, focusable=False)
        self.show_zero = False
        self._events: dict[str, EventSummary] = {}
        self._incidents: tuple[Incident, ...] = ()
        self._dropped: tuple[IncidentTally, ...] = ()
        self._now = 0.0
        self._highlighted: str | None = None
        self._chosen: str | None = None  # the kind a person moved the cursor to; else the cursor follows the top
        self._rows: list[tuple[str, tuple[Text, ...]]] | None = None  # what the table shows

    def compose(self) -> ComposeResult:
        # a click on a row selects it at once (keyboard: arrows move the cursor, enter selects)
        columns = [("kind", "kind"), ("count", "count"), ("rate", "/min"), ("streak", "streak"), ("last", "last")]
        # the kind gives way: the count and when it was last seen stay in sight in a narrow panel
        yield RowTable([TableColumn(key, label, gives_way=key == "kind") for key, label in columns], id="events-table")
        yield TextBlock(id="events-detail", classes="body")

    @property
    def table(self) -> RowTable:
        return self.query_one("#events-table", RowTable)

    def data_key(self, snap: Snapshot) -> object:
        return (snap.events, snap.incidents, self.show_zero)

    def toggle_zero(self) -> None:
        self.show_zero = not self.show_zero
        self._fill()

    def show(self, snap: Snapshot) -> None:
        self._events = snap.events
        self._incidents = snap.incidents
        self._dropped = snap.dropped_incidents
        self._now = snap.time
        self._fill()

    def _fill(self) -> None:
        table = self.table
        rows = ordered_events(self._events, show_zero=self.show_zero)
        cells: list[tuple[str, tuple[Text, ...]]] = [(e.kind, event_row(e, self._now)) for e in rows]
        if cells != self._rows:  # most seconds it reads the same
            self._rows = cells
            table.set_rows(cells)  # the same kinds: only the rows whose cells changed are drawn again
        if not rows:
            self._highlighted = None
            quiet = "no events counted yet" if not self._events else "no events (a to show kinds at zero)"
            self.query_one("#events-detail", Static).update(Text(quiet, style="dim"))
            self._show_detail()
            return
        kinds = [e.kind for e in rows]
        # Until a person moves the cursor it stays on the top row, the most severe kind: a critical kind that
        # appears later must not sit below a highlighted server_ready.
        index = kinds.index(self._chosen) if self._chosen in kinds else 0
        if table.cursor_row != index:
            table.move_cursor(row=index)
        self._highlighted = kinds[index]
        self._show_detail()

    def _show_detail(self) -> None:
        e = self._events.get(self._highlighted) if self._highlighted else None
        text = detail_text(e, self._incidents, self._now, self._dropped)
        if text:
            self.query_one("#events-detail", Static).update(text)

    def on_row_table_row_highlighted(self, event: RowTable.RowHighlighted) -> None:
        event.stop()
        self._highlighted = event.row_key
        # a person moves the cursor only in a focused table; the panel's own moves land where _chosen says
        if self.table.has_focus:
            self._chosen = None if event.cursor_row == 0 else event.row_key
        self._show_detail()

    def on_row_table_row_selected(self, event: RowTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.KindSelected(event.row_key))

    def kinds_in_order(self) -> list[str]:
        """Kinds with a count, most severe first: the cycle the ``e`` key walks through."""
        return [e.kind for e in ordered_events(self._events, show_zero=False)]
