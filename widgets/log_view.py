"""The live log view: a bounded tail of every watched log, filterable by text, event kind and file.

Log text is data, never markup: each line is cleaned of escape sequences and control characters when it arrives
and drawn as plain text, so a line holding ``[bold red]`` or a terminal-title escape shows up literally instead of
restyling or hijacking the terminal. Lines are drawn one screen row each (cut with an ellipsis at the width), and
only the rows on screen are rendered, so a 5000-line buffer costs nothing while it scrolls past.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Static

from rlwatch.common.state import Severity, Snapshot, TaggedLine
from rlwatch.widgets.format import SEVERITY_STYLE, basename, clean_text, shorten_middle
from rlwatch.widgets.panel import Panel
from rlwatch.widgets.text_block import TextBlock

MAX_LINES = 5000
PATH_WIDTH = 12
MATCH_CONTEXT = 16  # characters kept before a filter match that had to be brought into view
LINE_LIMIT = 2000  # characters kept per line; the screen shows at most a row of them anyway

DEFAULT_SEVERITY: dict[str, Severity] = {
    "connection_refused": Severity.CRITICAL,
    "cuda_oom": Severity.CRITICAL,
    "cuda_busy": Severity.CRITICAL,
    "nccl_timeout": Severity.CRITICAL,
    "nccl_error": Severity.CRITICAL,
    "child_failed": Severity.CRITICAL,
    "engine_dead": Severity.CRITICAL,
    "oom_kill": Severity.CRITICAL,
    "traceback": Severity.WARNING,
    "timeout": Severity.WARNING,
    "emergency_brake": Severity.WARNING,
    "restart": Severity.WARNING,
}


@dataclass(frozen=True, slots=True)
class Row:
    """A log line as the view keeps it: already cleaned, so rendering never sees raw control characters."""

    seq: int
    path: str
    lineno: int
    text: str
    kinds: frozenset[str]


@dataclass(frozen=True, slots=True)
class LogFilter:
    """What the view shows: a text/regex, an event kind and a file, each optional."""

    text: str = ""
    kind: str | None = None
    path: str | None = None

    def pattern(self) -> tuple[re.Pattern[str] | None, bool]:
        """The compiled text filter and whether it fell back to literal text (an invalid regex never fails).

        Matching is case-insensitive unless the filter has an upper-case letter (smart case, as in less and rg).
        """
        if not self.text:
            return None, False
        flags = 0 if any(c.isupper() for c in self.text) else re.IGNORECASE
        try:
            return re.compile(self.text, flags), False
        except re.error:
            return re.compile(re.escape(self.text), flags), True

    def describe(self) -> Text:
        """``all files · connection_refused · /refused/``: the filter bar's words."""
        out = Text(no_wrap=True, end="")
        out.append(basename(self.path) if self.path else "all files", style="bold" if self.path else "dim")
        out.append(" · ", style="dim")
        out.append(self.kind or "all kinds", style="bold" if self.kind else "dim")
        out.append(" · ", style="dim")
        if not self.text:
            out.append("no filter", style="dim")
        else:
            _, literal = self.pattern()
            out.append(f"/{clean_text(self.text, 40)}/", style="bold")
            if literal:
                out.append(" bad regex, literal text", style="yellow")
        return out


def to_row(line: TaggedLine) -> Row:
    return Row(line.seq, line.path, line.lineno, clean_text(line.text, LINE_LIMIT), line.kinds)


class LogView(ScrollView, can_focus=True):
    """A tail of tagged log lines with filters; draws only the rows on screen."""

    DEFAULT_CSS = """
    LogView {
        background: $surface;
        overflow-y: auto;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
    }
    """

    BINDINGS = [
        Binding("home", "scroll_home", "Top", show=False),
        Binding("end", "scroll_end", "Bottom", show=False),
    ]

    @dataclass
    class Changed(Message):
        """Shown lines, filter or follow state changed: the bar above redraws."""

        view: LogView

    def __init__(self, *, max_lines: int = MAX_LINES, id: str | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self._rows: deque[Row] = deque(maxlen=max_lines)
        self._visible: deque[Row] = deque(maxlen=max_lines)
        self._pending: deque[Row] = deque(maxlen=max_lines)
        self._filter = LogFilter()
        self._pattern: re.Pattern[str] | None = None
        self.paused = False
        self.severity: dict[str, Severity] = dict(DEFAULT_SEVERITY)
        self.last_seq = 0
        self.paths: list[str] = []
        self._widest = 0

    # ------------------------------------------------------------------ data

    @property
    def filter(self) -> LogFilter:
        return self._filter

    @property
    def visible_count(self) -> int:
        return len(self._visible)

    @property
    def total_count(self) -> int:
        return len(self._rows)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def visible_text(self) -> list[str]:
        """The cleaned text of every shown line, oldest first (what a person could scroll through)."""
        return [r.text for r in self._visible]

    def add_lines(self, lines: Iterable[TaggedLine]) -> int:
        """Take new lines (in seq order); returns how many arrived. While paused they wait, unseen."""
        rows = [to_row(line) for line in lines if line.seq > self.last_seq]
        if not rows:
            return 0
        self.last_seq = rows[-1].seq
        for r in rows:
            if r.path not in self.paths:
                self.paths.append(r.path)
        if self.paused:
            self._pending.extend(rows)
        else:
            self._append(rows)
        self._changed()
        return len(rows)

    def _append(self, rows: Sequence[Row]) -> None:
        self._rows.extend(rows)
        shown = [r for r in rows if self._matches(r)]
        self._visible.extend(shown)
        self._widest = max([self._widest, *(len(r.text) for r in shown)])
        oldest = self._rows[0].seq if self._rows else 0
        while self._visible and self._visible[0].seq < oldest:
            self._visible.popleft()
        self._resize()
        if not self.paused:
            self._follow()

    def _matches(self, r: Row) -> bool:
        f = self._filter
        if f.kind is not None and f.kind not in r.kinds:
            return False
        if f.path is not None and r.path != f.path:
            return False
        return self._pattern is None or self._pattern.search(r.text) is not None

    def set_filter(self, new: LogFilter) -> None:
        """Apply a filter to everything kept, and jump to the newest matching line."""
        self._filter = new
        self._pattern, _ = new.pattern()
        self._visible = deque((r for r in self._rows if self._matches(r)), maxlen=self.max_lines)
        self._widest = max((len(r.text) for r in self._visible), default=0)
        self._resize()
        self._follow()
        self._changed()

    def set_paused(self, paused: bool) -> None:
        """Pause holds new lines back (so the screen stays still to read); resuming shows them and follows."""
        self.paused = paused
        if not paused and self._pending:
            pending = list(self._pending)
            self._pending.clear()
            self._append(pending)
        elif not paused:
            self._follow()
        self._changed()

    def _resize(self) -> None:
        # Lines are one row each; the width is the longest shown line, so left/right can pan to the rest of it.
        width = self.scrollable_content_region.width
        self.virtual_size = Size(max(width, self._widest + self._prefix_width()), len(self._visible))
        self.refresh()

    @property
    def allow_horizontal_scroll(self) -> bool:
        """Pan with the arrow keys or shift+wheel without giving up a row to a horizontal scrollbar."""
        return self.max_scroll_x > 0

    def _follow(self) -> None:
        """Show the newest line, now and again once layout has settled (the size may not be known yet)."""
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.call_after_refresh(self.scroll_end, animate=False, immediate=True, x_axis=False)

    def _changed(self) -> None:
        self.post_message(self.Changed(self))

    # ------------------------------------------------------------------ drawing

    def on_resize(self) -> None:
        self._resize()
        if not self.paused:
            self._follow()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        style = self.rich_style
        if index >= len(self._visible) or width <= 0:
            return Strip.blank(width, style)
        text = self._line_text(self._visible[index])
        strip = Strip(Segment.apply_style(list(text.render(self.app.console)), style), text.cell_len)
        if strip.cell_length > scroll_x + width:
            # Cut at the edge with a visible mark, so a long line never looks complete when it is not.
            cut = strip.crop(scroll_x, scroll_x + width - 1)
            return Strip([*cut, Segment("…", style + _ELLIPSIS)], width)
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    def _prefix_width(self) -> int:
        return 1 + (PATH_WIDTH + 1 if len(self.paths) > 1 and self._filter.path is None else 0)

    def _line_text(self, r: Row) -> Text:
        sev = self._worst(r.kinds)
        line = Text(no_wrap=True, end="")
        mark_style = SEVERITY_STYLE[sev] if sev is not None else "dim"
        line.append("▌" if r.kinds else " ", style=mark_style)
        if len(self.paths) > 1 and self._filter.path is None:
            line.append(f"{shorten_middle(basename(r.path), PATH_WIDTH):<{PATH_WIDTH}} ", style="dim")
        text, shift = r.text, 0
        room = self.scrollable_content_region.width - len(line) - 1
        if self._pattern is not None and self.scroll_offset.x == 0 and room > 0:
            # A match past the right edge would be invisible: start the line near it instead, marked with "…".
            first = self._pattern.search(text)
            if first is not None and first.end() > room:
                shift = max(0, first.start() - MATCH_CONTEXT)
                text = "…" + text[shift + 1 :]
        start = len(line)
        line.append(text, style=_LINE_STYLE.get(sev, "") if sev is not None else "")
        if self._pattern is not None:
            for m in self._pattern.finditer(r.text):
                if m.end() > m.start() and m.start() > shift:
                    line.stylize("reverse", start + m.start() - shift, start + m.end() - shift)
        return line

    def _worst(self, kinds: frozenset[str]) -> Severity | None:
        found = [self.severity.get(k, Severity.INFO) for k in kinds]
        return min(found, key=lambda s: s.rank) if found else None


_ELLIPSIS = RichStyle(dim=True)
_LINE_STYLE: dict[Severity, str] = {Severity.CRITICAL: "red", Severity.WARNING: "yellow"}  # info: only the mark


class LogPanel(Panel):
    """The log view with its status bar and the filter input that ``/`` opens."""

    BINDINGS = [Binding("escape", "cancel_filter", "Cancel filter", show=False)]

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(title, id=id, focusable=False)
        self._before_edit: LogFilter | None = None

    def compose(self) -> ComposeResult:
        yield TextBlock(id="log-bar", classes="body")
        yield Input(placeholder="filter: text or regex (enter keeps, escape restores)", id="log-filter")
        yield LogView(id="log-view")

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    @property
    def input(self) -> Input:
        return self.query_one("#log-filter", Input)

    def on_mount(self) -> None:
        self.input.display = False
        self._redraw_bar()

    def data_key(self, snap: Snapshot) -> object:
        return None  # lines arrive through add_lines, not the snapshot

    def show(self, snap: Snapshot) -> None:
        pass

    def open_filter(self) -> None:
        self._before_edit = self.view.filter
        box = self.input
        box.display = True
        box.value = self.view.filter.text
        box.focus()

    def close_filter(self, *, restore: bool) -> None:
        if restore and self._before_edit is not None:
            self.view.set_filter(self._before_edit)
        self._before_edit = None
        self.input.display = False
        self.view.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.view.set_filter(replace(self.view.filter, text=event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.close_filter(restore=False)

    def action_cancel_filter(self) -> None:
        if self.input.display:
            self.close_filter(restore=True)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_filter":
            return bool(self.input.display)
        return True

    def on_log_view_changed(self, event: LogView.Changed) -> None:
        event.stop()
        self._redraw_bar()

    def _redraw_bar(self) -> None:
        view = self.view
        bar = view.filter.describe()
        bar.append(" ")
        if view.paused:
            bar.append(" PAUSED ", style="bold black on yellow")
            if view.pending_count:
                bar.append(f" +{view.pending_count} new", style="bold yellow")
        else:
            bar.append(" FOLLOW ", style="bold black on green")
        bar.append(f" {view.visible_count}/{view.total_count}", style="dim")
        self.query_one("#log-bar", Static).update(bar)
