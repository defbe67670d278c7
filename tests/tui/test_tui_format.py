"""The dashboard's pure helpers: safe text, numbers in words, and fixed-scale graphs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlwatch.common.state import Series
from rlwatch.widgets.format import (
    fmt_age,
    fmt_bytes,
    fmt_clock,
    fmt_cmdline,
    fmt_duration,
    fmt_rate_per_hour,
    row_text,
    shorten_middle,
    shorten_path,
)
from rlwatch.widgets.graph import BLOCKS, ZERO, bucket, fit_span, plot_rows, render_graph, span_label, spark, time_axis
from tests.snapshot_data import utc_timezone


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with utc_timezone():
        yield


# ------------------------------------------------------------------------------------------------ row_text


def test_clean_text_drops_escape_sequences_and_keeps_markup_literal() -> None:
    raw = "[bold red]boom[/] \x1b[2J\x1b[31mred\x1b[0m \x1b]0;pwned\x07 end"
    assert row_text(raw) == "[bold red]boom[/] red  end"


def test_clean_text_shows_other_controls_as_visible_glyphs() -> None:
    assert row_text("a\x00b\rc\nd\x7fe\x07") == "a\u2400b\u240dc\u240ad\u2421e\u2407"
    assert row_text("tab\there") == "tab    here"


def test_clean_text_removes_unterminated_and_8bit_sequences() -> None:
    assert row_text("x\x1b]2;title") == "x"
    assert row_text("x\x9b31my") == "xy"
    assert row_text("x\x1bcy") == "xy"  # RIS


def test_clean_text_limit_bounds_length_with_ellipsis() -> None:
    out = row_text("a" * 10_000, 50)
    assert len(out) == 50
    assert out.endswith("…")


@given(st.text())
def test_clean_text_never_leaves_control_characters(s: str) -> None:
    out = row_text(s, 500)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in out)
    assert len(out) <= 500


# ----------------------------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "–"), (0, "0s"), (45.4, "45s"), (312, "5m12s"), (7800, "2h10m"), (3 * 86400 + 4 * 3600 + 60, "3d4h")],
)
def test_fmt_duration(seconds: float | None, text: str) -> None:
    assert fmt_duration(seconds) == text


def test_sizes_rates_and_ages_read_like_the_findings() -> None:
    assert fmt_bytes(29_400_000_000) == "29.4 GB"
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(None) == "–"
    assert fmt_rate_per_hour(5.2e8) == "+520 MB/h"
    assert fmt_rate_per_hour(-2.5e9) == "-2.5 GB/h"
    assert fmt_age(100.0, 400.0) == "5m00s ago"
    assert fmt_age(500.0, 400.0) == "in 1m40s"


def test_clock_uses_the_given_time_not_the_wall_clock() -> None:
    assert fmt_clock(1_763_701_454.0) == "05:04:14"  # UTC under the fixture
    assert fmt_clock(1_763_701_454.0, seconds=False) == "05:04"


def test_a_clock_time_on_another_day_carries_its_date() -> None:
    """A backlog's "since 08:00:10" may be weeks ago; beside a header clock of today it read as this morning."""
    t = 1_763_701_454.0  # 2025-11-21 05:04:14 UTC
    assert fmt_clock(t, now=t + 3600) == "05:04:14"  # the same day
    assert fmt_clock(t, now=t + 86_400) == "2025-11-21 05:04:14"
    assert fmt_clock(t, now=t - 6 * 3600) == "2025-11-21 05:04:14"  # the day before now: also dated
    assert fmt_clock(t, now=float("nan")) == "05:04:14"  # no usable now: as before


def test_paths_and_commands_are_shortened_keeping_what_identifies_them() -> None:
    assert shorten_path("/data/areal/experiments/logs/root/gsm8k-grpo/trial0", 30) == "…/logs/root/gsm8k-grpo/trial0"
    assert shorten_middle("abcdefghijklmnop", 9) == "ab…klmnop"
    assert fmt_cmdline(["python3", "-c", "print('a b')"]) == "python3 -c 'print('\"'\"'a b'\"'\"')'"
    assert fmt_cmdline(["x" * 100], 20) == "x" * 19 + "…"
    assert fmt_cmdline(["echo", "\x1b]0;t\x07hi"]) == "echo 'hi'"  # the title escape is gone, quoting stays


# ------------------------------------------------------------------------------------------------- graphs


def test_bucket_places_samples_by_time_and_leaves_gaps() -> None:
    s = Series(times=(0.0, 1.0, 55.0, 59.0), values=(10.0, 30.0, 80.0, None))
    cols = bucket(s, now=60.0, span_s=60.0, columns=6)
    assert cols == [30.0, None, None, None, None, 80.0]


def test_bucket_drops_samples_older_than_the_window() -> None:
    s = Series(times=(-100.0, 50.0), values=(99.0, 5.0))
    assert bucket(s, now=60.0, span_s=60.0, columns=3) == [None, None, 5.0]


def test_plot_is_fixed_scale_not_min_max() -> None:
    # A busy GPU between 90 and 100 % must fill the graph, not swing from bottom to top as an auto-scaled
    # sparkline would.
    rows = plot_rows([90.0, 100.0, 94.0], 2)
    assert [r.plain for r in rows] == ["▆█▇", "███"]
    half = plot_rows([50.0], 2)
    assert [r.plain for r in half] == [" ", "█"]


def test_plot_distinguishes_zero_from_no_data_and_draws_threshold() -> None:
    rows = plot_rows([0.0, None, 10.0], 1, threshold=None)
    assert rows[0].plain == f"{ZERO} {BLOCKS[1]}"
    line = plot_rows([None, 20.0], 2, threshold=90.0)
    assert line[0].plain == "╌╌"
    assert line[1].plain[1] == BLOCKS[3]


def test_spark_is_one_row_on_the_given_scale() -> None:
    assert spark([0.0, 50.0, 100.0, None]).plain == f"{ZERO}{BLOCKS[4]}{BLOCKS[8]} "
    assert spark([5.0], lo=0.0, hi=10.0).plain == BLOCKS[4]


def test_time_axis_fits_a_short_history_to_a_round_window() -> None:
    young = Series(times=(95.0, 100.0), values=(1.0, 2.0))
    assert fit_span(young, now=100.0, max_span_s=600.0) == 60.0
    older = Series(times=(0.0, 100.0), values=(1.0, 2.0))
    assert fit_span(older, now=200.0, max_span_s=600.0) == 300.0
    assert fit_span(older, now=5000.0, max_span_s=600.0) == 600.0
    assert fit_span(Series(), now=5000.0, max_span_s=600.0) == 600.0


def test_time_axis_and_labels() -> None:
    assert span_label(600) == "-10m"
    assert span_label(3600) == "-1h"
    assert span_label(90) == "-1m30s"
    axis = time_axis(30, 600).plain
    assert axis.startswith("-10m") and axis.endswith("now") and "-5m" in axis
    assert time_axis(5, 600).plain == "  now"


def test_render_graph_has_axes_and_exact_width() -> None:
    s = Series(times=tuple(float(t) for t in range(0, 600, 10)), values=tuple(50.0 for _ in range(60)))
    lines = render_graph(s, now=600.0, width=40, rows=3)
    plain = [line.plain for line in lines]
    assert plain[0].startswith("100%┤") and plain[1].startswith(" 50%┤") and plain[2].startswith("  0%┤")
    assert all(len(p) == 40 for p in plain)
    assert plain[3].strip().startswith("-10m") and plain[3].endswith("now")
    assert set(plain[2][5:]) == {"█"}  # 50 % fills the bottom third completely


def test_an_svg_snapshot_keeps_its_spaces_in_plain_renderers() -> None:
    from rlwatch.tui.snapshot import preserve_spaces

    svg = '<svg class="rich-terminal" viewBox="0 0 10 10" xmlns="http://www.w3.org/2000/svg"><text>a  b</text></svg>'
    kept = preserve_spaces(svg)
    assert kept.startswith('<svg xml:space="preserve" class="rich-terminal"') and preserve_spaces(kept) == kept
