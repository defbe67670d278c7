"""A table drawn line by line, that repaints only the rows whose cells changed.

The dashboard's tables (the event kinds, the processes) are read again every snapshot, and on a stopped run the
only thing that moves is an age in one column ("≥16m55s ago" → "≥16m56s ago"). Textual's ``DataTable`` renders every
cell of every row again after any change (its render caches are keyed by one count of updates), which was a third
of the idle screen's time (issue 35); making it do less meant writing its private caches. This table is a
``ScrollView`` on Textual's public line API (``render_line``, as the log view): it keeps each cell's render beside
the cell it was made from, and each row's assembled line, so a row read again with one new cell renders that cell,
assembles that row, and repaints that one line.

It draws as ``DataTable`` did (the same padding, header, cursor and hover styles, the same segments), so the
dashboard looks the same: one header line that stays while the rows scroll, a row cursor (or none), Enter and a
click select a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.cells import cell_len
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size, Spacing
from textual.message import Message
from textual.renderables.styled import Styled
from textual.scroll_view import ScrollView
from textual.strip import Strip

__all__ = ["RowTable", "TableColumn"]

Cells = tuple[Text, ...]


@dataclass(frozen=True, slots=True)
class TableColumn:
    key: str
    label: str
    width: int | None = None  # None: as wide as its label or widest cell
    # Where the table is wider than its place, this column gives up what is missing (down to its label, or
    # GIVE_WAY_FLOOR cells), its cells cut with an ellipsis, so the columns after it stay in sight.
    gives_way: bool = False


GIVE_WAY_FLOOR = 6


def _width(cell: Text) -> int:
    return max((cell_len(line) for line in cell.plain.split("\n")), default=0)


def _cell(value: object) -> Text:
    return value if isinstance(value, Text) else Text(str(value), end="")


class RowTable(ScrollView, can_focus=True):
    """Rows of cells under a header; see the module's docstring."""

    # The styles of Textual's DataTable, under this table's names.
    DEFAULT_CSS = """
    RowTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .row-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .row-table--header {
                background-tint: $foreground 5%;
            }
        }
        & > .row-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .row-table--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .row-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .row-table--hover {
            background: $block-hover-background;
        }
    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {"row-table--header", "row-table--cursor", "row-table--hover"}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "first", "Top", show=False),
        Binding("end,ctrl+end", "last", "Bottom", show=False),
    ]
    CELL_PADDING = 1  # cells on each side of every column, as DataTable's

    @dataclass
    class RowHighlighted(Message):
        """The cursor moved to another row."""

        table: RowTable
        cursor_row: int
        row_key: str

        @property
        def control(self) -> RowTable:
            return self.table

    @dataclass
    class RowSelected(Message):
        """A row was chosen: Enter on it, or a click."""

        table: RowTable
        cursor_row: int
        row_key: str

        @property
        def control(self) -> RowTable:
            return self.table

    def __init__(
        self,
        columns: Sequence[TableColumn] = (),
        *,
        show_cursor: bool = True,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.show_cursor = show_cursor
        self._columns: tuple[TableColumn, ...] = tuple(columns)
        self._keys: list[str] = []
        self._rows: list[Cells] = []
        self._widths: list[int] = []  # each column's width on screen, padding included
        self._natural: list[int] = []  # each column's width for its label and widest cell
        self._fitted_to = -1  # the width of the place the widths were fitted to
        self._cursor = 0
        self._hover: int | None = None  # the row under the mouse, shown only after the mouse moved
        # Renders: (row index, column index, cursor, hover) -> (the cell rendered, its segments); a cell set anew is a
        # new object, so a stale render is never used. Row index -> (cursor, hover, the row's whole line).
        self._cell_cache: dict[tuple[int, int, bool, bool], tuple[Text, list[Segment]]] = {}
        self._line_cache: dict[int, tuple[bool, bool, int, Strip]] = {}
        self._styles: tuple[Style, Style, Style, Style] | None = None  # what the caches were rendered with
        self._measure()

    # ------------------------------------------------------------------ contents

    @property
    def columns(self) -> tuple[TableColumn, ...]:
        return self._columns

    @property
    def column_keys(self) -> list[str]:
        return [c.key for c in self._columns]

    @property
    def column_widths(self) -> list[int]:
        """Each column's width on screen, its padding included."""
        return list(self._widths)

    @property
    def row_keys(self) -> list[str]:
        return list(self._keys)

    @property
    def row_count(self) -> int:
        return len(self._rows)

    def get_row_at(self, index: int) -> list[Text]:
        return list(self._rows[index])

    def get_row(self, key: str) -> list[Text]:
        return list(self._rows[self._keys.index(key)])

    def set_columns(self, columns: Sequence[TableColumn]) -> None:
        """New columns: the rows go with the old ones."""
        self._columns = tuple(columns)
        self._keys, self._rows = [], []
        self._relayout()

    def set_rows(self, rows: Sequence[tuple[str, Sequence[object]]]) -> None:
        """Show ``rows`` (key, cells). Where the keys are those shown and every column keeps its width, only the rows
        with a changed cell are rendered and repainted; otherwise the whole table is laid out again."""
        keys = [key for key, _ in rows]
        new = [tuple(_cell(c) for c in cells) for _, cells in rows]
        n = len(self._columns)
        if any(len(cells) != n for cells in new):
            raise ValueError(f"table {self.id or ''}: a row has not {n} cells")
        old_widths = self._widths
        if keys != self._keys:
            self._keys, self._rows = keys, new
            self._relayout()
            return
        changed: list[int] = []
        for i, (before, after) in enumerate(zip(self._rows, new, strict=True)):
            if before != after:
                # unchanged cells keep their objects: their renders stay valid
                self._rows[i] = tuple(b if b == a else a for b, a in zip(before, after, strict=True))
                changed.append(i)
        if not changed:
            return
        self._measure()
        if self._widths != old_widths:
            self._relayout()
            return
        for i in changed:
            self._line_cache.pop(i, None)
            self.refresh_line(i + 1)  # the header is line 0

    def _measure(self) -> None:
        pad = 2 * self.CELL_PADDING
        widths = []
        for c, column in enumerate(self._columns):
            if column.width is not None:
                widths.append(column.width + pad)
            else:
                widths.append(pad + max([cell_len(column.label), *(_width(row[c]) for row in self._rows)]))
        self._natural = widths
        self._fit()

    def _fit(self) -> None:
        """The columns' widths on screen: their natural ones, less what a column that gives way gives up where the
        table is wider than its place. Asked where the place may have changed (a maximised panel)."""
        pad = 2 * self.CELL_PADDING
        widths = list(self._natural)
        room = self._fitted_to = self.size.width
        excess = sum(widths) - room
        for c, column in enumerate(self._columns):
            if excess <= 0 or room <= 0:
                break
            if column.gives_way:
                floor = pad + max(cell_len(column.label), GIVE_WAY_FLOOR)
                cut = min(excess, widths[c] - floor)
                if cut > 0:
                    widths[c] -= cut
                    excess -= cut
        if widths != self._widths:
            self._widths = widths
            self._cell_cache.clear()
            self._line_cache.clear()
            self.virtual_size = Size(sum(widths), 1 + len(self._rows))

    def _relayout(self) -> None:
        self._measure()
        self._cell_cache.clear()
        self._line_cache.clear()
        self._cursor = min(self._cursor, max(0, len(self._rows) - 1))
        if self._hover is not None and self._hover >= len(self._rows):
            self._hover = None
        self.virtual_size = Size(sum(self._widths), 1 + len(self._rows))
        self.refresh(layout=True)

    # ------------------------------------------------------------------ the cursor

    @property
    def cursor_row(self) -> int:
        return self._cursor

    def move_cursor(self, *, row: int, scroll: bool = True) -> None:
        """Put the cursor on ``row`` (clamped to the rows), telling whoever listens when it moved."""
        row = max(0, min(row, len(self._rows) - 1))
        if row != self._cursor:
            before, self._cursor = self._cursor, row
            self._repaint_row(before)
            self._repaint_row(row)
            self.post_message(self.RowHighlighted(self, row, self._keys[row]))
        if scroll:
            self._scroll_to_row(row)

    def _scroll_to_row(self, row: int) -> None:
        region = Region(round(self.scroll_x), row + 1, 1, 1)
        self.scroll_to_region(region, spacing=Spacing(top=1), animate=False, immediate=True)

    def _repaint_row(self, row: int | None) -> None:
        if row is not None and 0 <= row < len(self._rows):
            self._line_cache.pop(row, None)
            self.refresh_line(row + 1)

    def _set_hover(self, row: int | None) -> None:
        if row != self._hover:
            before, self._hover = self._hover, row
            self._repaint_row(before)
            self._repaint_row(row)

    def action_cursor_up(self) -> None:
        self._set_hover(None)
        if self.show_cursor:
            self.move_cursor(row=self._cursor - 1)
        else:
            self.scroll_up(animate=False)

    def action_cursor_down(self) -> None:
        self._set_hover(None)
        if self.show_cursor:
            self.move_cursor(row=self._cursor + 1)
        else:
            self.scroll_down(animate=False)

    def action_page_up(self) -> None:
        page = max(1, self.scrollable_content_region.height - 1)
        if self.show_cursor:
            self.move_cursor(row=self._cursor - page)
        else:
            self.scroll_to(y=self.scroll_y - page, animate=False)

    def action_page_down(self) -> None:
        page = max(1, self.scrollable_content_region.height - 1)
        if self.show_cursor:
            self.move_cursor(row=self._cursor + page)
        else:
            self.scroll_to(y=self.scroll_y + page, animate=False)

    def action_first(self) -> None:
        if self.show_cursor:
            self.move_cursor(row=0)
        else:
            self.scroll_home(animate=False)

    def action_last(self) -> None:
        if self.show_cursor:
            self.move_cursor(row=len(self._rows) - 1)
        else:
            self.scroll_end(animate=False)

    def action_select_cursor(self) -> None:
        if self.show_cursor and self._rows:
            self.post_message(self.RowSelected(self, self._cursor, self._keys[self._cursor]))

    def _row_under(self, style: Style) -> int | None:
        row = style.meta.get("row")
        return row if isinstance(row, int) and 0 <= row < len(self._rows) else None

    def on_click(self, event: events.Click) -> None:
        row = self._row_under(event.style)
        if row is None or not self.show_cursor:
            return
        event.stop()
        self.move_cursor(row=row)
        self.post_message(self.RowSelected(self, row, self._keys[row]))

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._set_hover(self._row_under(event.style) if self.show_cursor else None)

    def on_leave(self, _event: events.Leave) -> None:
        self._set_hover(None)

    # ------------------------------------------------------------------ drawing

    def render_lines(self, crop: Region) -> list[Strip]:
        if self.size.width != self._fitted_to:
            self._fit()
        styles = (
            self.rich_style,
            self.get_component_styles("row-table--header").rich_style,
            self.get_component_rich_style("row-table--cursor"),
            self.get_component_rich_style("row-table--hover"),
        )
        if styles != self._styles:  # focus, a theme, a class: every render is stale
            self._styles = styles
            self._cell_cache.clear()
            self._line_cache.clear()
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        index = -1 if y == 0 else y - 1 + round(self.scroll_y)  # the header stays while the rows scroll
        if index >= len(self._rows):
            return Strip.blank(width, base)
        x = round(self.scroll_x)
        line = self._line(index, width)
        return line.crop(x, x + width).adjust_cell_length(width, base).simplify()

    def _line(self, index: int, width: int) -> Strip:
        """Row ``index``'s whole line (the header's at -1), filled to ``width`` with the row's style."""
        cursor = self.show_cursor and index == self._cursor and index >= 0
        hover = self.show_cursor and index == self._hover and index >= 0
        cached = self._line_cache.get(index)
        if cached is not None and cached[:3] == (cursor, hover, width):
            return cached[3]
        base, header, cursor_style, hover_style = self._styles or (self.rich_style, Style(), Style(), Style())
        row_style = header if index < 0 else base
        component = Style()
        if hover:
            component += hover_style
        if cursor:
            component += cursor_style
        segments: list[Segment] = []
        cells: Sequence[Text] = [Text(c.label) for c in self._columns] if index < 0 else self._rows[index]
        for c, (cell, cell_width) in enumerate(zip(cells, self._widths, strict=True)):
            segments += self._render_cell(index, c, cell, cell_width, row_style, component, (cursor, hover))
        extend = row_style + component + Style.from_meta({"row": index, "column": 0, "out_of_bounds": True})
        segments.append(Segment(" " * max(0, width - sum(self._widths)), extend))
        strip = Strip(segments)
        self._line_cache[index] = (cursor, hover, width, strip)
        return strip

    def _render_cell(
        self,
        row: int,
        column: int,
        cell: Text,
        width: int,
        row_style: Style,
        component: Style,
        flags: tuple[bool, bool],
    ) -> list[Segment]:
        key = (row, column, *flags)
        cached = self._cell_cache.get(key)
        if cached is not None and cached[0] is cell:
            return cached[1]
        post = Style.from_color(color=component.color) + Style.from_color(bgcolor=component.bgcolor)
        pre = row_style + Style.from_meta({"row": row, "column": column}) + component
        options = self.app.console_options.update_dimensions(width, 1).update(no_wrap=True, overflow="ellipsis")
        rendered = self.app.console.render_lines(
            Styled(Padding(cell, (0, self.CELL_PADDING)), pre_style=pre, post_style=post), options
        )
        segments = rendered[0] if rendered else [Segment(" " * width, pre)]
        self._cell_cache[key] = (cell, segments)
        return segments
