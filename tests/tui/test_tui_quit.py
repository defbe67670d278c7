"""``q`` quits from every state whose key bar says ``q quit``: over the findings list, the help and the stacks, after
Escape, and when Escape and ``q`` arrive together (tmux's ``send-keys Escape q``, or a quick hand)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from textual._xterm_parser import XTermParser
from textual.events import Key

from rlwatch.tui.driver import split_alt_key
from rlwatch.tui.screens.findings import FindingsScreen
from rlwatch.tui.screens.help import HelpScreen
from rlwatch.tui.screens.main import MainScreen
from rlwatch.tui.screens.stacks import StacksScreen
from tests import snapshot_data as data
from tests.tui.test_tui_pilot import make_app, recording, settle, wait_until

SIZES = [(120, 40), (80, 24)]


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def typed(*reads: str) -> list[str]:
    """The keys the dashboard's driver hands on for ``reads`` arriving from the terminal: Textual's parser (what
    Textual's input thread runs, the pinned version's), then the driver's own step."""
    parser = XTermParser(False)
    events = [e for text in reads for e in parser.feed(text)]
    deadline = time.monotonic() + 2.0
    while parser._timeout_time is not None and time.monotonic() < deadline:
        events += parser.tick()  # the parser's own wait for a lone Escape at the very end
    return [k.key for e in events if isinstance(e, Key) for k in split_alt_key(e)]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scenario", ["healthy", "gpu-zombie"])
async def test_q_quits_over_the_findings_list(size: tuple[int, int], scenario: str) -> None:
    """Repro 1 and 2: ``d`` (on a healthy run, or with findings), then ``q``."""
    app = make_app(recording(scenario))
    async with app.run_test(size=size) as pilot:
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, FindingsScreen)
        await pilot.press("q")
        await pilot.pause()
        assert app._exit


@pytest.mark.parametrize("size", SIZES)
async def test_escape_then_q_typed_together_closes_the_list_and_quits(size: tuple[int, int]) -> None:
    """Repro 3: ``d``, then Escape and ``q`` in one read (tmux ``send-keys Escape q``) are two keys, not ``alt+q``."""
    app = make_app(recording("gpu-zombie"))
    async with app.run_test(size=size) as pilot:
        await pilot.press("d")
        await pilot.pause()
        keys = typed("\x1bq")
        assert keys == ["escape", "q"]
        await pilot.press(keys[0])
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        await pilot.press(keys[1])
        await pilot.pause()
        assert app._exit


@pytest.mark.parametrize("opener", ["question_mark", "t", "f1"])
async def test_q_quits_over_the_help_and_the_stacks(opener: str) -> None:
    app = make_app(recording("gpu-zombie"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(opener)
        await settle(pilot)
        await wait_until(pilot, lambda: isinstance(app.screen, (HelpScreen, StacksScreen)))
        await pilot.press("q")
        await pilot.pause()
        assert app._exit


async def test_escape_still_closes_the_dialogs_and_d_toggles_the_list() -> None:
    app = make_app(recording("gpu-zombie"))
    async with app.run_test(size=(120, 40)) as pilot:
        for opener, closer in (("d", "escape"), ("d", "d"), ("question_mark", "escape"), ("t", "escape")):
            await pilot.press(opener)
            await settle(pilot)
            await wait_until(pilot, lambda: not isinstance(app.screen, MainScreen))
            await pilot.press(closer)
            await pilot.pause()
            assert isinstance(app.screen, MainScreen), (opener, closer)
        assert not app._exit


def test_an_escape_then_a_key_is_two_keys_and_sequences_stay_whole() -> None:
    assert typed("\x1bq") == ["escape", "q"]
    assert typed("\x1bd") == ["escape", "d"]
    # A key Textual names with a word (? is question_mark) loses the Escape before it in Textual's parser, and
    # nothing public brings it back: the dashboard's keys that close or quit are letters.
    assert typed("\x1b?") == ["question_mark"]
    assert typed("\x1b[A") == ["up"]  # an arrow key's sequence
    assert typed("\x1bOP") == ["f1"]
    assert typed("\x1b") == ["escape"]  # a lone Escape, by the parser's timeout
    assert typed("a\x1b\x1bq") == ["a", "escape", "escape", "q"]


def test_an_escape_at_the_end_of_one_read_and_a_key_in_the_next_are_two_keys() -> None:
    assert typed("\x1b", "q") == ["escape", "q"]
