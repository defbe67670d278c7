"""The live log view: a bounded tail of every watched log that works like a pager (less, lnav).

- **Follow mode** (as ``less +F``): the newest line stays in view. Scrolling up (keys, wheel, scrollbar) leaves it
  and the lines stay still while new ones arrive below (the bar counts them); ``End``, ``F`` or ``G`` follow again,
  and so does scrolling back down to the last line.
- **Search** apart from **filter**: ``/`` and ``?`` search forwards and backwards and highlight every match, ``n``
  and ``N`` go to the next and previous one; ``&`` shows only matching lines (as less's ``&``), with an event kind
  and a file as further filters.
- ``e`` and ``E`` jump to the next and previous error or failure line (as lnav's), ``-`` wraps long lines or cuts
  them at the edge (as ``less -S``; a maximised view wraps by itself), ``←`` ``→`` pan cut lines.
- The bar above says where the view is: ``lines 120-140 of 812``, the matches, what is filtered.

Log text is data, never markup: each line is cleaned of escape sequences and control characters when it arrives
and drawn as plain text, so a line holding ``[bold red]`` or a terminal-title escape shows up literally instead of
restyling or hijacking the terminal. Only the rows on screen are rendered, so a 5000-line buffer costs nothing while
it scrolls past.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollTo
from textual.strip import Strip
from textual.widgets import Input, Static

from rlwatch.common.state import Severity, Snapshot, TaggedLine
from rlwatch.widgets.format import SEVERITY_STYLE, basename, row_text, shorten_middle
from rlwatch.widgets.panel import Panel
from rlwatch.widgets.text_block import TextBlock

MAX_LINES = 5000
PATH_WIDTH = 12
MATCH_CONTEXT = 16  # characters kept before a match that had to be brought into view
LINE_LIMIT = 2000  # characters kept per line
WHEEL_ROWS = 3

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

SEARCH_STYLE = "black on yellow"
CURRENT_STYLE = "bold black on bright_cyan"
FILTER_STYLE = "underline"


@dataclass(frozen=True, slots=True)
class Row:
    """A log line as the view keeps it: already cleaned, so rendering never sees raw control characters."""

    seq: int
    path: str
    lineno: int
    text: str
    kinds: frozenset[str]


def search_pattern(text: str) -> tuple[re.Pattern[str] | None, bool]:
    """A text or regex, and whether it fell back to literal text (an invalid regex never fails).

    Matching is case-insensitive unless the text has an upper-case letter (smart case, as in less and rg).
    """
    if not text:
        return None, False
    flags = 0 if any(c.isupper() for c in text) else re.IGNORECASE
    try:
        return re.compile(text, flags), False
    except re.error:
        return re.compile(re.escape(text), flags), True


@dataclass(frozen=True, slots=True)
class LogFilter:
    """What the view shows: a text/regex, an event kind and a file, each optional."""

    text: str = ""
    kind: str | None = None
    path: str | None = None

    def pattern(self) -> tuple[re.Pattern[str] | None, bool]:
        return search_pattern(self.text)

    @property
    def active(self) -> bool:
        return bool(self.text or self.kind or self.path)

    def describe(self) -> Text:
        """``trainer.log · connection_refused · &refused``: the filters in force, or ``all lines``."""
        out = Text(no_wrap=True, end="")
        if not self.active:
            out.append("all lines", style="dim")
            return out
        parts: list[tuple[str, str]] = []
        if self.path:
            parts.append((basename(self.path), "bold"))
        if self.kind:
            parts.append((self.kind, "bold"))
        if self.text:
            _, literal = self.pattern()
            parts.append((f"&{row_text(self.text, 30)}" + (" (bad regex: literal)" if literal else ""), "bold"))
        for i, (word, style) in enumerate(parts):
            if i:
                out.append(" · ", style="dim")
            out.append(word, style=style)
        return out


def to_row(line: TaggedLine) -> Row:
    return Row(line.seq, line.path, line.lineno, row_text(line.text, LINE_LIMIT), line.kinds)


def _splits(text: str, width: int) -> list[int]:
    """Where each wrapped row of ``text`` starts, for rows ``width`` cells wide (wide characters count two)."""
    if width <= 0 or not text:
        return [0]
    if text.isascii():
        return list(range(0, len(text), width))
    starts, used = [0], 0
    for i, ch in enumerate(text):
        w = cell_len(ch)
        if used + w > width:
            starts.append(i)
            used = 0
        used += w
    return starts


class LogView(ScrollView, can_focus=True):
    """A tail of tagged log lines: follow, search, filter, wrap, jump to errors; draws only the rows on screen."""

    DEFAULT_CSS = """
    LogView {
        background: $surface;
        overflow-y: auto;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
    }
    """

    BINDINGS = [
        Binding("up", "line_up", "up", show=False),
        Binding("down", "line_down", "down", show=False),
        Binding("pageup", "page_up", "page up", show=False),
        Binding("pagedown", "page_down", "page down", show=False),
        Binding("home,g", "top", "top", show=False),
        Binding("end,G", "follow", "follow", show=False),
        Binding("F", "follow", "follow", key_display="F"),
        Binding("left", "pan(-1)", "left", show=False),
        Binding("right", "pan(1)", "right", show=False),
        Binding("question_mark", "search_back", "search back", key_display="?", show=False),
        Binding("n", "next_match(1)", "next", key_display="n"),
        Binding("N", "next_match(-1)", "prev", key_display="N", show=False),
        Binding("minus", "toggle_wrap", "wrap", key_display="-"),
        Binding("p", "toggle_follow", "stop/follow", show=False),
        Binding("escape", "clear_search", "clear search", show=False),
    ]

    @dataclass
    class Changed(Message):
        """Shown lines, filter, search, position or follow state changed: the bar above redraws."""

        view: LogView

    @dataclass
    class Prompt(Message):
        """A key asked for the search or filter prompt (the panel owns it)."""

        view: LogView
        mode: Literal["search", "search_back", "filter"]

    def __init__(self, *, max_lines: int = MAX_LINES, id: str | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self._rows: deque[Row] = deque(maxlen=max_lines)
        self._visible: list[Row] = []
        self._filter = LogFilter()
        self._pattern: re.Pattern[str] | None = None
        self.following = True
        self.new_below = 0  # lines that arrived while not following
        self.severity: dict[str, Severity] = dict(DEFAULT_SEVERITY)
        self.last_seq = 0
        self.paths: list[str] = []
        self._widest = 0
        # wrapping: None follows the panel (wrapped when maximised), True/False is the person's choice
        self.wrap: bool | None = None
        self.maximized = False
        self._rowmap: list[tuple[int, int]] = []  # wrapped: (visible index, start offset) per screen row
        self._wrap_width = 0
        # search
        self.search_text = ""
        self._search: re.Pattern[str] | None = None
        self.search_backward = False
        self.current: int | None = None  # visible index of the current match or jump target
        self.notice = ""  # "pattern not found", "no more errors": said once in the bar

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
    def paused(self) -> bool:
        """Not following: the view stays where the person put it."""
        return not self.following

    @property
    def wrapped(self) -> bool:
        return self.wrap if self.wrap is not None else self.maximized

    def visible_text(self) -> list[str]:
        """The cleaned text of every shown line, oldest first (what a person could scroll through)."""
        return [r.text for r in self._visible]

    def add_lines(self, lines: Iterable[TaggedLine]) -> int:
        """Take new lines (in seq order); returns how many arrived."""
        rows = [to_row(line) for line in lines if line.seq > self.last_seq]
        if not rows:
            return 0
        self.last_seq = rows[-1].seq
        paths_before = len(self.paths)
        for r in rows:
            if r.path not in self.paths:
                self.paths.append(r.path)
        top_line = self._line_at(self._top_row())
        self._rows.extend(rows)
        shown = [r for r in rows if self._matches(r)]
        self._visible.extend(shown)
        self._widest = max([self._widest, *(len(r.text) for r in shown)])
        oldest = self._rows[0].seq if self._rows else 0
        dropped = 0
        while dropped < len(self._visible) and self._visible[dropped].seq < oldest:
            dropped += 1
        if dropped:
            del self._visible[:dropped]
            if self.current is not None:
                self.current = self.current - dropped if self.current >= dropped else None
        if not self.following:
            self.new_below += len(shown)
        if len(self.paths) != paths_before or dropped or self.wrapped:
            self._relayout()
        else:
            self._resize()
        if self.following:
            self._follow()
        elif dropped and top_line is not None:
            self._scroll_to_line(max(0, top_line - dropped))
        self._changed()
        return len(rows)

    def _matches(self, r: Row) -> bool:
        f = self._filter
        if f.kind is not None and f.kind not in r.kinds:
            return False
        if f.path is not None and r.path != f.path:
            return False
        return self._pattern is None or self._pattern.search(r.text) is not None

    def set_filter(self, new: LogFilter) -> None:
        """Apply a filter to everything kept; the view follows again (the lines it was on may be gone)."""
        self._filter = new
        self._pattern, _ = new.pattern()
        self._visible = [r for r in self._rows if self._matches(r)]
        self._widest = max((len(r.text) for r in self._visible), default=0)
        self.current = None
        self._relayout()
        self.follow()

    def set_search(self, text: str, *, backward: bool | None = None) -> None:
        """Highlight every match of ``text`` (no move: :meth:`next_match` moves)."""
        self.search_text = text
        self._search, _ = search_pattern(text)
        if backward is not None:
            self.search_backward = backward
        self.refresh()
        self._changed()

    def search_literal(self) -> bool:
        return search_pattern(self.search_text)[1]

    # ------------------------------------------------------------------ moving

    def follow(self) -> None:
        """Show the newest line and keep it in view as lines arrive."""
        self.following = True
        self.new_below = 0
        self.notice = ""
        self._follow()
        self._changed()

    def stop_following(self) -> None:
        if self.following:
            self.following = False
            self.new_below = 0
            self._changed()

    def set_paused(self, paused: bool) -> None:
        """Stop following where the view is, or follow again."""
        if paused:
            self.stop_following()
        else:
            self.follow()

    def next_match(self, direction: int = 1) -> bool:
        """Go to the next match of the search (``direction`` -1: the previous one), in the search's own direction
        for ``n``; wraps around the ends (saying so). Returns whether there is a match at all."""
        if self._search is None:
            self.notice = "no search: / or ? first"
            self._changed()
            return False
        backward = self.search_backward != (direction < 0)
        found = self._find(lambda r: self._search is not None and self._search.search(r.text) is not None, backward)
        if found is None:
            self.notice = f"pattern not found: {row_text(self.search_text, 30)}"
        self._changed()
        return found is not None

    def next_error(self, direction: int = 1) -> bool:
        """Go to the next (or previous) line with an error or failure kind (critical or warning)."""
        found = self._find(self._is_error, direction < 0, wrap=False)
        if found is None:
            self.notice = "no later error line" if direction > 0 else "no earlier error line"
        self._changed()
        return found is not None

    def _is_error(self, r: Row) -> bool:
        sev = self._worst(r.kinds)
        return sev is not None and sev.rank <= Severity.WARNING.rank

    def _find(self, pred: Callable[[Row], bool], backward: bool, *, wrap: bool = True) -> int | None:
        """From the current match (or the top line on screen), the next visible line that ``pred`` holds for."""
        n = len(self._visible)
        if not n:
            return None
        start = self.current if self.current is not None and self.current < n else None
        from_current = start is not None  # then the match itself is past the end too: coming back to it wraps
        if start is None:
            top = self._line_at(self._top_row())
            bottom = self._line_at(self._top_row() + max(1, self.scrollable_content_region.height) - 1)
            start = (top if top is not None else 0) if not backward else (bottom if bottom is not None else n - 1)
            # the line the search starts from counts when nothing was found yet, as less searches from the top line
            order = list(range(start, n)) + (list(range(0, start)) if wrap else [])
            if backward:
                order = list(range(start, -1, -1)) + (list(range(n - 1, start, -1)) if wrap else [])
        else:
            order = list(range(start + 1, n)) + (list(range(0, start + 1)) if wrap else [])
            if backward:
                order = list(range(start - 1, -1, -1)) + (list(range(n - 1, start - 1, -1)) if wrap else [])
        for k, i in enumerate(order):
            if pred(self._visible[i]):
                assert start is not None
                wrapped_round = (
                    (i < start or (from_current and i == start))
                    if not backward
                    else (i > start or (from_current and i == start))
                )
                self.notice = (
                    ("search wrapped to the top" if not backward else "search wrapped to the bottom")
                    if (wrapped_round and wrap and k > 0)
                    else ""
                )
                self.current = i
                self._show_line(i)
                return i
        return None

    def _show_line(self, index: int) -> None:
        """Bring line ``index`` into view a third of the way down (context above it), leaving follow mode."""
        height = max(1, self.scrollable_content_region.height)
        row = self._first_row_of(index)
        target = max(0, row - height // 3)
        self.following = False
        self.new_below = 0
        self._set_y(target)
        if not self.wrapped and self._search is not None:
            self.scroll_to(x=0, animate=False, immediate=True)

    def _scroll_to_line(self, index: int) -> None:
        """Put line ``index`` at the top, where it was before lines were dropped from the front."""
        self._set_y(self._first_row_of(index))

    def _set_y(self, y: float) -> None:
        self.scroll_to(y=y, animate=False, immediate=True)
        self.call_after_refresh(self._changed)

    def _at_bottom(self) -> bool:
        return self.scroll_y >= self.max_scroll_y

    # ------------------------------------------------------------------ keys

    def action_line_up(self) -> None:
        self.stop_following()
        self._set_y(self.scroll_y - 1)

    def action_line_down(self) -> None:
        self._set_y(self.scroll_y + 1)
        self._resume_at_bottom()

    def action_page_up(self) -> None:
        self.stop_following()
        self._set_y(self.scroll_y - max(1, self.scrollable_content_region.height - 1))

    def action_page_down(self) -> None:
        self._set_y(self.scroll_y + max(1, self.scrollable_content_region.height - 1))
        self._resume_at_bottom()

    def action_top(self) -> None:
        self.stop_following()
        self._set_y(0)

    def action_follow(self) -> None:
        self.follow()

    def action_toggle_follow(self) -> None:
        self.set_paused(self.following)

    def action_pan(self, direction: int) -> None:
        if self.wrapped:
            return
        step = max(8, self.scrollable_content_region.width // 2)
        self.scroll_to(x=max(0, self.scroll_x + direction * step), animate=False, immediate=True)

    def action_search_back(self) -> None:
        self.post_message(self.Prompt(self, "search_back"))

    def action_next_match(self, direction: int) -> None:
        self.next_match(direction)

    def action_toggle_wrap(self) -> None:
        self.set_wrap(not self.wrapped)

    def set_wrap(self, wrap: bool | None) -> None:
        """Wrap long lines (True), cut them (False), or wrap only while maximised (None)."""
        self.wrap = wrap
        self._relayout()
        if self.following:
            self._follow()
        self._changed()

    def action_clear_search(self) -> None:
        if self.search_text:
            self.set_search("")
            self.current = None
            self.notice = ""
            self._changed()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_search":
            return bool(self.search_text)
        return True

    def _resume_at_bottom(self) -> None:
        """Scrolling down to the newest line follows again, as a tail does."""
        if self._at_bottom() and not self.following:
            self.follow()

    # The wheel is handled here, in public handlers that stop the widget's own (prevent_default): its scroll
    # neither stops nor resumes following.
    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.prevent_default()
        if event.ctrl or event.shift:
            self.action_pan(-1)
        else:
            self.stop_following()
            self._set_y(self.scroll_y - WHEEL_ROWS)
        event.stop()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.prevent_default()
        if event.ctrl or event.shift:
            self.action_pan(1)
        else:
            self._set_y(self.scroll_y + WHEEL_ROWS)
            self._resume_at_bottom()
        event.stop()

    def on_scroll_to(self, message: ScrollTo) -> None:
        """The scrollbar dragged (the widget's own handler scrolls after this): follow only at the bottom."""
        self.call_after_refresh(self._scrollbar_moved)

    def _scrollbar_moved(self) -> None:
        if self._at_bottom():
            if not self.following:
                self.follow()
        else:
            self.stop_following()

    # ------------------------------------------------------------------ layout

    def set_maximized(self, maximized: bool) -> None:
        if maximized != self.maximized:
            self.maximized = maximized
            self._relayout()
            if self.following:
                self._follow()
            self._changed()

    def _text_width(self) -> int:
        return max(1, self.scrollable_content_region.width - self._prefix_width())

    def _relayout(self) -> None:
        """Recount the screen rows (wrapping) and the scrollable size."""
        if self.wrapped:
            width = self._text_width()
            self._wrap_width = width
            self._rowmap = [(i, s) for i, r in enumerate(self._visible) for s in _splits(r.text, width)]
        else:
            self._rowmap = []
        self._resize()

    def _resize(self) -> None:
        width = self.scrollable_content_region.width
        if self.wrapped:
            if self._wrap_width != self._text_width() or len(self._rowmap) < len(self._visible):
                self._wrap_width = self._text_width()
                self._rowmap = [(i, s) for i, r in enumerate(self._visible) for s in _splits(r.text, self._wrap_width)]
            self.virtual_size = Size(width, len(self._rowmap))
        else:
            # Lines are one row each; the width is the longest shown line, so left/right can pan to the rest of it.
            self.virtual_size = Size(max(width, self._widest + self._prefix_width()), len(self._visible))
        self.refresh()

    def _first_row_of(self, index: int) -> int:
        if not self.wrapped:
            return index
        lo, hi = 0, len(self._rowmap)
        while lo < hi:  # the first screen row whose line is >= index
            mid = (lo + hi) // 2
            if self._rowmap[mid][0] < index:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _line_at(self, row: int) -> int | None:
        if row < 0:
            return None
        if not self.wrapped:
            return row if row < len(self._visible) else (len(self._visible) - 1 if self._visible else None)
        if not self._rowmap:
            return None
        return self._rowmap[min(row, len(self._rowmap) - 1)][0]

    def _top_row(self) -> int:
        return round(self.scroll_y)

    def position(self) -> tuple[int, int, int] | None:
        """(first, last, of): the 1-based shown lines on screen and how many are shown; None when none are."""
        n = len(self._visible)
        if not n:
            return None
        height = max(1, self.scrollable_content_region.height)
        top = self._line_at(self._top_row())
        bottom = self._line_at(self._top_row() + height - 1)
        if top is None or bottom is None:
            return None
        return top + 1, bottom + 1, n

    @property
    def allow_horizontal_scroll(self) -> bool:
        """Pan with the arrow keys or shift+wheel without giving up a row to a horizontal scrollbar."""
        return not self.wrapped and self.max_scroll_x > 0

    def _follow(self) -> None:
        """Show the newest line, now and again once layout has settled (the size may not be known yet)."""
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.call_after_refresh(self._follow_after_refresh)

    def _follow_after_refresh(self) -> None:
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
            self._changed()

    def _changed(self) -> None:
        self.post_message(self.Changed(self))

    # ------------------------------------------------------------------ drawing

    def on_resize(self) -> None:
        self._relayout()
        if self.following:
            self._follow()
        self._changed()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x, scroll_y = self.scroll_offset
        row = scroll_y + y
        style = self.rich_style
        if width <= 0:
            return Strip.blank(width, style)
        if self.wrapped:
            if row >= len(self._rowmap):
                return Strip.blank(width, style)
            index, start = self._rowmap[row]
            r = self._visible[index]
            line = self._line_text(r, index, wrapped=True)
            prefix = self._prefix_width()
            end = start + self._wrap_width
            nxt = row + 1
            if nxt < len(self._rowmap) and self._rowmap[nxt][0] == index:
                end = self._rowmap[nxt][1]
            piece = line[:prefix] if start == 0 else Text(" " * prefix, end="")
            piece.append_text(line[prefix + start : prefix + end])
            strip = Strip(Segment.apply_style(list(piece.render(self.app.console)), style), piece.cell_len)
            return strip.crop_extend(0, width, style)
        if row >= len(self._visible):
            return Strip.blank(width, style)
        text = self._line_text(self._visible[row], row, wrapped=False)
        strip = Strip(Segment.apply_style(list(text.render(self.app.console)), style), text.cell_len)
        if strip.cell_length > scroll_x + width:
            # Cut at the edge with a visible mark, so a long line never looks complete when it is not.
            cut = strip.crop(scroll_x, scroll_x + width - 1)
            return Strip([*cut, Segment("…", style + _ELLIPSIS)], width)
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    def _prefix_width(self) -> int:
        return 1 + (PATH_WIDTH + 1 if len(self.paths) > 1 and self._filter.path is None else 0)

    def _line_text(self, r: Row, index: int, *, wrapped: bool) -> Text:
        sev = self._worst(r.kinds)
        line = Text(no_wrap=True, end="")
        mark_style = SEVERITY_STYLE[sev] if sev is not None else "dim"
        current = index == self.current
        line.append("▶" if current else ("▌" if r.kinds else " "), style="bold cyan" if current else mark_style)
        if len(self.paths) > 1 and self._filter.path is None:
            line.append(f"{shorten_middle(basename(r.path), PATH_WIDTH):<{PATH_WIDTH}} ", style="dim")
        text, shift = r.text, 0
        room = self.scrollable_content_region.width - len(line) - 1
        lead = self._search or self._pattern
        if not wrapped and lead is not None and self.scroll_offset.x == 0 and room > 0:
            # A match past the right edge would be invisible: start the line near it instead, marked with "…".
            first = lead.search(text)
            if first is not None and first.end() > room:
                shift = max(0, first.start() - MATCH_CONTEXT)
                text = "…" + text[shift + 1 :]
        start = len(line)
        line.append(text, style=_LINE_STYLE.get(sev, "") if sev is not None else "")
        for pattern, mark in (
            (self._pattern, FILTER_STYLE),
            (self._search, CURRENT_STYLE if current else SEARCH_STYLE),
        ):
            if pattern is None:
                continue
            for m in pattern.finditer(r.text):
                if m.end() > m.start() and (m.start() > shift or shift == 0):
                    line.stylize(mark, start + m.start() - shift, start + m.end() - shift)
        return line

    def _worst(self, kinds: frozenset[str]) -> Severity | None:
        found = [self.severity.get(k, Severity.INFO) for k in kinds]
        return min(found, key=lambda s: s.rank) if found else None


_ELLIPSIS = RichStyle(dim=True)
_LINE_STYLE: dict[Severity, str] = {Severity.CRITICAL: "red", Severity.WARNING: "yellow"}  # info: only the mark

PROMPT_PLACEHOLDER = {
    "search": "search forwards: text or regex (enter goes to the first match, escape cancels)",
    "search_back": "search backwards: text or regex (enter goes to the first match, escape cancels)",
    "filter": "filter: show only lines that match (enter keeps, empty shows all, escape restores)",
}
PROMPT_MARK = {"search": "/", "search_back": "?", "filter": "&"}


class LogPanel(Panel):
    """The log view with its position bar above and the search / filter prompt below (as less's last line)."""

    BINDINGS = [Binding("escape", "cancel_prompt", "Cancel", show=False)]

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(title, id=id, focusable=False)
        self._before_edit: LogFilter | None = None
        self._search_before: tuple[str, bool] = ("", False)
        self.mode: Literal["search", "search_back", "filter"] | None = None

    def compose(self) -> ComposeResult:
        yield TextBlock(id="log-bar", classes="body")
        yield LogView(id="log-view")
        yield Input(placeholder=PROMPT_PLACEHOLDER["filter"], id="log-filter", compact=True)

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

    # the prompts ---------------------------------------------------------------------------------------------

    def open_filter(self) -> None:
        self._open("filter")

    def open_search(self, *, backward: bool = False) -> None:
        self._open("search_back" if backward else "search")

    def _open(self, mode: Literal["search", "search_back", "filter"]) -> None:
        view = self.view
        self.mode = mode
        box = self.input
        box.placeholder = PROMPT_PLACEHOLDER[mode]
        box.border_title = None
        if mode == "filter":
            self._before_edit = view.filter
            box.value = ""  # a new filter starts empty (Esc restores the one before); one typed replaces it
        else:
            self._search_before = (view.search_text, view.search_backward)
            box.value = ""
        box.display = True
        box.focus()
        self._redraw_bar()

    def close_prompt(self, *, restore: bool) -> None:
        view = self.view
        if restore:
            if self.mode == "filter" and self._before_edit is not None:
                view.set_filter(self._before_edit)
            elif self.mode in ("search", "search_back"):
                text, backward = self._search_before
                view.set_search(text, backward=backward)
        self._before_edit = None
        self.mode = None
        self.input.display = False
        view.focus()
        self._redraw_bar()

    def close_filter(self, *, restore: bool) -> None:
        self.close_prompt(restore=restore)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.mode == "filter":
            self.view.set_filter(replace(self.view.filter, text=event.value))
        elif self.mode in ("search", "search_back"):
            self.view.set_search(event.value)  # highlight as it is typed; enter moves

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        mode = self.mode
        self.close_prompt(restore=False)
        if mode in ("search", "search_back"):
            view = self.view
            if event.value:
                view.current = None
                view.set_search(event.value, backward=mode == "search_back")
                view.next_match(1)
            else:
                view.set_search("")

    def action_cancel_prompt(self) -> None:
        if self.input.display:
            self.close_prompt(restore=True)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_prompt":
            return bool(self.input.display)
        return True

    def on_log_view_prompt(self, event: LogView.Prompt) -> None:
        event.stop()
        self._open(event.mode)

    def on_log_view_changed(self, event: LogView.Changed) -> None:
        event.stop()
        self._redraw_bar()

    def _redraw_bar(self) -> None:
        view = self.view
        bar = Text(no_wrap=True, end="")
        if view.following:
            bar.append(" FOLLOW ", style="bold black on green")
        else:
            bar.append(" STILL ", style="bold black on yellow")
            if view.new_below:
                bar.append(f" +{view.new_below} new, End follows", style="bold yellow")
            else:
                bar.append(" End follows", style="dim")
        pos = view.position()
        if pos is None:
            bar.append("  no lines" + (" match" if view.filter.active else " yet"), style="dim")
        else:
            first, last, of = pos
            bar.append(f"  lines {first}–{last} of {of}", style="bold")
            if of != view.total_count:
                bar.append(f" (of {view.total_count})", style="dim")
        if view.search_text:
            mark = "?" if view.search_backward else "/"
            bar.append(f"  {mark}{row_text(view.search_text, 24)}", style="bold black on yellow")
            if view.search_literal():
                bar.append(" (literal)", style="yellow")
        if view.filter.active:
            bar.append("  ")
            bar.append_text(view.filter.describe())
        if view.wrapped:
            bar.append("  wrap", style="dim")
        if view.notice:
            bar.append(f"  {view.notice}", style="bold yellow")
        self.query_one("#log-bar", Static).update(bar)
