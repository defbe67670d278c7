"""Fixed-scale time graphs.

Textual's Sparkline scales every series to its own min..max, so a GPU pinned between 97 % and 100 % looks like it
swings wildly and an idle one at 0 to 2 % looks busy. These graphs always draw 0 to 100 % (or another fixed
range), place samples by their timestamps on a real time axis ending at the snapshot's time, and leave a gap where
there is no data, so a stalled source shows as blank history rather than a flat healthy line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.widget import Widget

from rlwatch.common.state import Series

BLOCKS = " ▁▂▃▄▅▆▇█"
ZERO = "_"  # a sample that rounds to nothing: distinct from "no sample at all"
AXIS_WIDTH = 5  # "100%┤"

Reducer = Callable[[Sequence[float]], float]


def bucket(series: Series, now: float, span_s: float, columns: int, reduce: Reducer = max) -> list[float | None]:
    """Spread samples over ``columns`` equal time slots ending at ``now``; a slot with no sample is ``None``.

    ``max`` is the default reduction because a short spike (a memory peak, a busy GPU second) is what a person
    must not miss when many samples share one column.
    """
    if columns <= 0 or span_s <= 0:
        return []
    slots: list[list[float]] = [[] for _ in range(columns)]
    start = now - span_s
    width = span_s / columns
    for t, v in zip(series.times, series.values, strict=False):
        if v is None or t < start:
            continue
        i = min(columns - 1, max(0, int((t - start) / width)))
        slots[i].append(v)
    return [reduce(s) if s else None for s in slots]


def _eighths(value: float, lo: float, hi: float, rows: int) -> int:
    frac = (min(max(value, lo), hi) - lo) / (hi - lo) if hi > lo else 0.0
    return round(frac * rows * 8)


def _joined(cells: Sequence[tuple[str, str]]) -> Text:
    """One line from (character, style) cells, each run of one style a single span. A span per character made
    every redraw of a graph convert and paint each cell on its own: a third of the training section's cost on a
    new snapshot of an idle dashboard (issue 35), for the same characters in the same colours."""
    out = Text(no_wrap=True, end="")
    run: list[str] = []
    style = ""
    for ch, st in cells:
        if st != style and run:
            out.append("".join(run), style=style or None)
            run = []
        style = st
        run.append(ch)
    if run:
        out.append("".join(run), style=style or None)
    return out


def spark(values: Sequence[float | None], *, lo: float = 0.0, hi: float = 100.0, style: str = "green") -> Text:
    """One row of eighth-blocks on a fixed scale, for inline history next to a number."""
    cells: list[tuple[str, str]] = []
    for v in values:
        if v is None:
            cells.append((" ", ""))
            continue
        n = _eighths(v, lo, hi, 1)
        cells.append((BLOCKS[n], style) if n else (ZERO, "dim"))
    return _joined(cells)


def plot_rows(
    values: Sequence[float | None],
    rows: int,
    *,
    lo: float = 0.0,
    hi: float = 100.0,
    style: str = "green",
    threshold: float | None = None,
    threshold_style: str = "red",
) -> list[Text]:
    """The plot area, top row first. ``threshold`` draws a dashed line in empty cells at that value."""
    filled = [None if v is None else _eighths(v, lo, hi, rows) for v in values]
    line_row = None
    if threshold is not None and hi > lo:
        frac = (min(max(threshold, lo), hi) - lo) / (hi - lo)
        line_row = min(rows - 1, int(frac * rows))
    out: list[Text] = []
    for r in range(rows):
        level = rows - 1 - r  # 0 is the bottom row
        row: list[tuple[str, str]] = []
        for f in filled:
            if f is None:
                cell = 0
                has_data = False
            else:
                cell = min(8, max(0, f - level * 8))
                has_data = True
            if cell:
                # Where a bar reaches the threshold row it takes the threshold colour: "over the line" stays
                # visible even when the bars cover the dashed line itself.
                row.append((BLOCKS[cell], threshold_style if level == line_row else style))
            elif level == line_row:
                row.append(("╌", threshold_style))
            elif has_data and level == 0 and f == 0:
                row.append((ZERO, "dim"))
            else:
                row.append((" ", ""))
        out.append(_joined(row))
    return out


NICE_SPANS = (60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


def fit_span(series: Series, now: float, max_span_s: float) -> float:
    """The shortest round window (1m, 2m, 5m, ...) that holds the history, up to ``max_span_s``.

    Right after start the history is seconds long; drawing it on a 10-minute axis would squeeze it into the last
    column. The scale of the values never changes, only the length of the time axis.
    """
    if not series.times:
        return max_span_s
    extent = now - min(series.times)
    for span in NICE_SPANS:
        if extent <= span:
            return min(span, max_span_s)
    return max_span_s


def span_label(seconds: float) -> str:
    """``-10m``, ``-1h``, ``-45s``: the left end of a time axis."""
    s = round(seconds)
    if s >= 3600 and s % 3600 == 0:
        return f"-{s // 3600}h"
    if s >= 60:
        return f"-{s // 60}m" if s % 60 == 0 else f"-{s // 60}m{s % 60}s"
    return f"-{s}s"


def time_axis(columns: int, span_s: float) -> Text:
    """``-10m`` at the left, the middle mark if it fits, ``now`` at the right."""
    left, right = span_label(span_s), "now"
    if columns < len(left) + len(right) + 1:
        return Text("now".rjust(columns)[:columns], style="dim", no_wrap=True, end="")
    chars = [" "] * columns
    chars[: len(left)] = left
    chars[columns - len(right) :] = right
    mid = span_label(span_s / 2)
    start = columns // 2 - len(mid) // 2
    if columns >= len(left) + len(mid) + len(right) + 4 and start > len(left) and start + len(mid) < columns - 3:
        chars[start : start + len(mid)] = mid
    return Text("".join(chars), style="dim", no_wrap=True, end="")


def y_labels(rows: int, lo: float, hi: float, unit: str) -> list[str]:
    """Top, middle and bottom marks of a fixed scale; other rows get a plain tick."""
    labels = [""] * rows
    labels[0] = f"{hi:.0f}{unit}"
    if rows >= 2:
        labels[-1] = f"{lo:.0f}{unit}"
    if rows >= 3:
        labels[(rows - 1) // 2] = f"{(lo + hi) / 2:.0f}{unit}"
    return labels


def render_graph(
    series: Series,
    *,
    now: float,
    width: int,
    rows: int,
    span_s: float = 600.0,
    lo: float = 0.0,
    hi: float = 100.0,
    unit: str = "%",
    style: str = "green",
    threshold: float | None = None,
    reduce: Reducer = max,
) -> list[Text]:
    """A complete graph: y-axis marks, plot rows, and the time axis; ``rows + 1`` lines of ``width`` cells."""
    columns = max(1, width - AXIS_WIDTH)
    values = bucket(series, now, span_s, columns, reduce)
    plot = plot_rows(values, max(1, rows), lo=lo, hi=hi, style=style, threshold=threshold)
    labels = y_labels(len(plot), lo, hi, unit)
    lines: list[Text] = []
    for label, row in zip(labels, plot, strict=True):
        line = Text(f"{label:>{AXIS_WIDTH - 1}}┤", style="dim", no_wrap=True, end="")
        line.append_text(row)
        lines.append(line)
    axis = Text(" " * AXIS_WIDTH, no_wrap=True, end="")
    axis.append_text(time_axis(columns, span_s))
    lines.append(axis)
    return lines


class TimeGraph(Widget):
    """A titled fixed-scale graph that sizes itself to the space the layout gives it."""

    DEFAULT_CSS = """
    TimeGraph {
        height: 6;
        text-wrap: nowrap;
        min-height: 3;
        width: 1fr;
    }
    """

    def __init__(
        self,
        title: str,
        *,
        span_s: float = 600.0,
        lo: float = 0.0,
        hi: float = 100.0,
        unit: str = "%",
        style: str = "green",
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.caption = title
        self.span_s = span_s
        self.lo = lo
        self.hi = hi
        self.unit = unit
        self.bar_style = style
        self.series = Series()
        self.now = 0.0
        self.threshold: float | None = None
        self.reduce: Reducer = max
        self.note: Text = Text()

    def set_data(
        self,
        series: Series,
        now: float,
        *,
        threshold: float | None = None,
        note: Text | None = None,
        title: str | None = None,
        reduce: Reducer = max,
    ) -> None:
        """Replace the data and repaint; ``note`` is shown after the title (the current value, a legend)."""
        self.series = series
        self.now = now
        self.threshold = threshold
        self.reduce = reduce
        self.note = note or Text()
        if title is not None:
            self.caption = title
        self.refresh()

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        head = Text(self.caption, style="bold", no_wrap=True, end="")
        if self.note:
            head.append(" ")
            head.append_text(self.note)
        head.truncate(max(1, width), overflow="ellipsis")
        rows = max(1, height - 2)
        lines = [
            head,
            *render_graph(
                self.series,
                now=self.now,
                width=width,
                rows=rows,
                span_s=fit_span(self.series, self.now, self.span_s),
                lo=self.lo,
                hi=self.hi,
                unit=self.unit,
                style=self.bar_style,
                threshold=self.threshold,
                reduce=self.reduce,
            ),
        ]
        return Text("\n", no_wrap=True, end="").join(lines[: max(1, height)])
