"""The log view as a pager (less, lnav): follow mode that scrolling leaves and End/F resumes, search apart from
filter with n/N, jumps to errors, wrap and pan, the position it is at; and log text that stays data."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from textual import events
from textual.scrollbar import ScrollTo
from textual.widgets import Static

from rlwatch.common.state import TaggedLine
from rlwatch.tui.app import RlwatchApp
from rlwatch.widgets.log_view import WHEEL_ROWS, LogView
from tests import snapshot_data as data
from tests.tui.test_tui_pilot import RecordingFeed, make_app, recording, settle, text_of, wait_until

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def numbered(n: int, *, every_error: int = 0, long_every: int = 0) -> list[TaggedLine]:
    """``n`` lines ``line 1`` … with a traceback every ``every_error`` lines and a very long one every ``long_every``."""
    out = []
    for i in range(1, n + 1):
        text = f"line {i}"
        kinds: frozenset[str] = frozenset()
        if every_error and i % every_error == 0:
            text = f"line {i} Traceback (most recent call last):"
            kinds = frozenset({"traceback"})
        if long_every and i % long_every == 0:
            text = f"line {i} " + "x" * 300 + " END"
        out.append(TaggedLine(i, "/logs/trainer.log", i, text, kinds))
    return out


def app_with(lines: list[TaggedLine], *, live: bool = False) -> tuple[RlwatchApp, RecordingFeed]:
    feed = RecordingFeed(data.healthy(), lines)
    return make_app(feed, live=live), feed


def bar(app: RlwatchApp) -> str:
    return text_of(app.main.query_one("#log-bar", Static))


async def test_page_up_and_home_leave_follow_mode_and_stay_put_while_lines_arrive() -> None:
    app, feed = app_with(numbered(300), live=True)
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await wait_until(pilot, lambda: view.total_count == 300)
        await pilot.press("6")
        assert view.following and view.scroll_y == view.max_scroll_y
        await pilot.press("pageup")
        await pilot.pause()
        assert not view.following
        at = view.scroll_y
        feed.append([f"more {i}" for i in range(20)])
        await wait_until(pilot, lambda: view.new_below == 20)
        assert view.scroll_y == at  # not snapped back to the newest line
        assert "+20 new" in bar(app)
        await pilot.press("home")
        await pilot.pause()
        assert view.scroll_y == 0 and not view.following
        assert "lines 1–" in bar(app)
        await pilot.press("end")
        await pilot.pause()
        assert view.following and view.scroll_y == view.max_scroll_y and view.new_below == 0
        await pilot.press("up", "F")
        await pilot.pause()
        assert view.following and view.scroll_y == view.max_scroll_y


async def test_scrolling_back_down_to_the_last_line_follows_again() -> None:
    app, _ = app_with(numbered(200))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("6", "up", "up")
        await pilot.pause()
        assert not view.following
        await pilot.press("down", "down")
        await pilot.pause()
        assert view.following


async def test_mouse_wheel_up_leaves_follow_mode() -> None:
    app, _ = app_with(numbered(200))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.pause()
        view.post_message(events.MouseScrollUp(view, 2, 2, 0, -1, 0, False, False, False))
        await pilot.pause()
        assert not view.following
        assert view.scroll_y < view.max_scroll_y


async def test_position_is_shown_as_lines_of_total() -> None:
    app, _ = app_with(numbered(500))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.pause()
        first, last, of = view.position() or (0, 0, 0)
        assert last == of == 500 and first > 1
        assert f"lines {first}–500 of 500" in bar(app)


async def test_search_highlights_and_n_N_move_between_matches_with_wrap_around() -> None:
    lines = numbered(400)
    app, _ = app_with(lines)
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("slash")
        await pilot.pause()
        assert app.focused is not None and app.focused.id == "log-filter"
        await pilot.press(*"line 1[0-9]0$", "enter")  # line 100, 110, …, 190
        await pilot.pause()
        assert view.visible_count == 400  # a search filters nothing
        assert app.focused is view and not view.following
        # a forward search from the newest lines wraps to the top, and says so
        assert view.current is not None and view._visible[view.current].text == "line 100"
        assert "wrapped" in bar(app)
        await pilot.press("n")
        assert view._visible[view.current].text == "line 110"
        await pilot.press("N", "N")
        assert view._visible[view.current].text == "line 190"  # before the first: wraps to the last
        assert "/line 1[0-9]0$" in bar(app)
        svg = app.export_screenshot()
        assert "line&#160;190" in svg or "line 190" in svg
        await pilot.press("escape")  # clears the highlight
        await pilot.pause()
        assert view.search_text == ""


async def test_question_mark_in_the_log_searches_backwards_and_F1_is_help() -> None:
    app, _ = app_with(numbered(300))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("6", "question_mark")
        await pilot.pause()
        assert app.focused is not None and app.focused.id == "log-filter"
        await pilot.press(*"line 2.0$", "enter")
        await pilot.pause()
        assert view.search_backward
        assert view._visible[view.current].text == "line 290"  # the nearest above the bottom
        await pilot.press("n")
        assert view._visible[view.current].text == "line 280"  # n goes on in the search's direction
        await pilot.press("N")
        assert view._visible[view.current].text == "line 290"
        await pilot.press("f1")
        await pilot.pause()
        assert type(app.screen).__name__ == "HelpScreen"


async def test_a_search_that_finds_nothing_says_so() -> None:
    app, _ = app_with(numbered(50))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash", *"nowhere", "enter")
        await pilot.pause()
        assert "pattern not found: nowhere" in bar(app)


async def test_filter_is_apart_from_search() -> None:
    app, _ = app_with(numbered(300))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("ampersand", *"line 1", "enter")
        await pilot.pause()
        assert all(t.startswith("line 1") for t in view.visible_text())
        await pilot.press("slash", *"line 15", "enter")
        await pilot.pause()
        assert view.filter.text == "line 1" and view.search_text == "line 15"
        assert view._visible[view.current].text.startswith("line 15")
        assert "&line 1" in bar(app)


async def test_e_and_E_jump_between_error_lines() -> None:
    app, _ = app_with(numbered(300, every_error=50))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("6", "home", "e")
        await pilot.pause()
        assert view._visible[view.current].text.startswith("line 50 Traceback")
        await pilot.press("e")
        assert view._visible[view.current].text.startswith("line 100 Traceback")
        await pilot.press("E")
        assert view._visible[view.current].text.startswith("line 50 Traceback")
        await pilot.press("E")
        await pilot.pause()
        assert "no earlier error line" in bar(app)


async def test_e_works_from_another_panel_and_focuses_the_log() -> None:
    app, _ = app_with(numbered(100, every_error=40))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("1", "E")
        await pilot.pause()
        assert app.focused is view
        assert view._visible[view.current].text.startswith("line 80 Traceback")


async def test_wrap_shows_the_whole_line_and_maximised_wraps_by_itself() -> None:
    app, _ = app_with(numbered(40, long_every=40))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("6")
        await pilot.pause()
        assert not view.wrapped
        assert " END" not in app.export_screenshot()  # cut at the edge
        await pilot.press("minus")
        await pilot.pause()
        assert view.wrapped and "wrap" in bar(app)
        assert "END" in app.export_screenshot()
        await pilot.press("minus", "m")  # cut again, then maximise: the person's choice holds
        await pilot.pause()
        assert not view.wrapped
        view.set_wrap(None)  # no choice made: a maximised log wraps
        await pilot.pause()
        assert view.wrapped and "END" in app.export_screenshot()


async def test_left_and_right_pan_cut_lines() -> None:
    app, _ = app_with(numbered(40, long_every=40))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("6", "right", "right")
        await pilot.pause()
        assert view.scroll_x > 0
        await pilot.press("left", "left")
        await pilot.pause()
        assert view.scroll_x == 0


async def test_markup_in_log_text_is_never_interpreted_in_search_or_wrap() -> None:
    hostile = "[bold red]boom[/] [link=http://x]click[/link] \x1b[31mred\x1b[0m [reverse]x[/reverse] " + "y" * 200
    feed = RecordingFeed(data.healthy(), [TaggedLine(1, "/l/t.log", 1, hostile, frozenset({"traceback"}))])
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash", *"boom", "enter", "m")
        await pilot.pause()
        svg = app.export_screenshot().replace("&#160;", " ")
        assert "[bold red]" in svg and "[/]" in svg and "[link=http://x]click[/link]" in svg
        assert "[reverse]x[/reverse]" in svg
        assert "\x1b" not in svg


async def test_live_lines_dropped_from_the_front_keep_the_view_on_the_same_lines() -> None:
    feed = RecordingFeed(data.healthy(), numbered(100))
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        view.max_lines = 100
        view._rows = type(view._rows)(view._rows, maxlen=100)
        await pilot.press("6", "home", "pagedown", "pagedown", "pagedown", "pagedown")
        await pilot.pause()
        top = view._visible[round(view.scroll_y)].text
        assert top not in [f"line {i}" for i in range(1, 11)]  # not among the lines about to be dropped
        view.add_lines([TaggedLine(100 + i, "/logs/trainer.log", 100 + i, f"new {i}") for i in range(1, 11)])
        await pilot.pause()
        assert view._visible[round(view.scroll_y)].text == top


async def test_kind_selected_in_the_events_panel_still_filters_the_log() -> None:
    feed = recording("server-crash")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "enter")
        await settle(pilot)
        view = app.main.query_one(LogView)
        assert view.filter.kind == "connection_refused"


async def test_n_past_the_only_match_says_it_wrapped_and_ampersand_starts_empty() -> None:
    app, _ = app_with(numbered(300))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("slash", *"line 7$", "enter")
        await pilot.pause()
        assert view._visible[view.current].text == "line 7"
        await pilot.press("n")  # past the last (and only) match: back to it, and said
        await pilot.pause()
        assert view._visible[view.current].text == "line 7" and "wrapped" in bar(app)
        await pilot.press("ampersand", *"line 1", "enter")
        await pilot.pause()
        await pilot.press("ampersand")
        await pilot.pause()
        assert app.focused is not None and app.focused.id == "log-filter"
        assert getattr(app.focused, "value", None) == ""  # a new filter, not the last one to edit
        await pilot.press("escape")  # Esc keeps the filter there was
        await pilot.pause()
        assert view.filter.text == "line 1"


async def test_the_wheel_moves_its_own_rows_and_the_scrollbar_follows_only_at_the_bottom() -> None:
    """The view's handlers replace the widget's own (one wheel turn is WHEEL_ROWS lines, not those and the widget's
    three), and a scrollbar dragged to the bottom follows again, dragged up it stops following."""
    app, _ = app_with(numbered(300))
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.pause()
        bottom = view.scroll_y
        view.post_message(events.MouseScrollUp(view, 2, 2, 0, -1, 0, False, False, False))
        await pilot.pause()
        assert view.scroll_y == bottom - WHEEL_ROWS
        view.post_message(events.MouseScrollDown(view, 2, 2, 0, 1, 0, False, False, False))
        await pilot.pause()
        assert view.scroll_y == bottom and view.following
        view.post_message(ScrollTo(y=0, animate=False))
        await wait_until(pilot, lambda: not view.following)
        view.post_message(ScrollTo(y=view.max_scroll_y, animate=False))
        await wait_until(pilot, lambda: view.following)
