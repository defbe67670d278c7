"""The key bar carries the banner's remedy and says true things in every state (a maximised panel, the search
prompt); the demo's mark is not CRITICAL's red; counts and finding names are said in words."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from rich.color import Color
from textual.widgets import Static

from rlwatch.common.state import Finding, Severity, Snapshot
from rlwatch.common.words import plural
from rlwatch.tui.screens.confirm import ConfirmScreen
from rlwatch.tui.screens.findings import FindingsScreen
from rlwatch.widgets.format import finding_title
from rlwatch.widgets.header import header_text
from rlwatch.widgets.keybar import KeyBar
from tests import snapshot_data as data
from tests.tui.test_tui_pilot import RecordingFeed, make_app, settle, status_text, text_of

SMALL = (80, 24)


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def snapshot_with(*findings: Finding, simulated: bool = False) -> Snapshot:
    base = data.SCENARIOS["healthy"][0]()
    return dataclasses.replace(base, findings=findings, sources=(), simulated=simulated)


def bar(app: object) -> str:
    return app.main.query_one(KeyBar).render().plain  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("action", "shown"),
    [("restart-server", " s  restart server"), ("resume", " r  resume"), ("kill-zombies", " z  kill zombies")],
)
async def test_at_80x24_the_key_bar_carries_the_remedy_the_banner_names(action: str, shown: str) -> None:
    down = Finding(Severity.CRITICAL, "server_down", "Inference server down since 21:57:26.", None, action=action)
    app = make_app(RecordingFeed(snapshot_with(down)))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        text = bar(app)
        assert shown in text, text
        assert text.rstrip().endswith("q  quit")


async def test_readonly_names_no_action_key_in_the_bar() -> None:
    down = Finding(Severity.CRITICAL, "server_down", "down", None, action="restart-server")
    app = make_app(RecordingFeed(snapshot_with(down), readonly=True))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        assert " s  restart server" not in bar(app)


async def test_a_maximised_panel_says_m_restores_and_restoring_says_m_maximizes() -> None:
    app = make_app(RecordingFeed(snapshot_with()))
    async with app.run_test(size=(120, 40)) as pilot:
        assert "m maximize" in status_text(app)
        await pilot.press("6", "m")
        await pilot.pause()
        assert "m restore" in status_text(app) and "m maximize" not in status_text(app)
        await pilot.press("m")
        await pilot.pause()
        assert "m maximize" in status_text(app)


@pytest.mark.parametrize(("key", "word"), [("slash", "search"), ("ampersand", "filter")])
async def test_the_prompts_bar_says_how_it_ends_and_nothing_of_textuals_quit(key: str, word: str) -> None:
    app = make_app(RecordingFeed(snapshot_with()))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press(key)
        await pilot.pause()
        text = bar(app)
        assert "ctrl+q" not in text and "Quit" not in text
        assert "q  quit" not in text  # q types a letter here
        assert f"Enter  {word}" in text and "Esc  cancel" in text
        await pilot.press("escape")
        await pilot.pause()
        assert bar(app).rstrip().endswith("q  quit")


def test_simulated_is_not_criticals_red() -> None:
    down = Finding(Severity.CRITICAL, "server_down", "down", None)
    text = header_text(snapshot_with(down, simulated=True), 120)
    styles = {text.plain[span.start : span.end].strip(): span.style for span in text.spans}
    simulated, critical = styles["SIMULATED"], styles["CRITICAL"]
    assert not isinstance(simulated, str) or simulated != critical
    sim_bg = Color.parse(str(simulated).rsplit(" on ", 1)[-1])
    crit_bg = Color.parse(str(critical).rsplit(" on ", 1)[-1])
    # Textual's theme draws the ANSI reds and magentas alike: the mark must be a colour of its own
    assert sim_bg.name not in ("red", "magenta", "bright_red", "bright_magenta") and sim_bg != crit_bg


def test_plural_agrees_with_its_count() -> None:
    assert plural(1, "timeout error") == "1 timeout error"
    assert plural(2, "timeout error") == "2 timeout errors"
    assert plural(1, "process") == "1 process"
    assert plural(3, "other process") == "3 other processes"
    assert plural(0, "stray") == "0 strays"
    assert plural(2, "person", "people") == "2 people"


async def test_the_confirm_title_says_what_it_does_in_words_not_1_target() -> None:
    plan = dataclasses.replace(data.zombie_plan(), action="resume")
    plan = dataclasses.replace(plan, targets=plan.targets[:1], start=plan.targets[:1])
    feed = RecordingFeed(snapshot_with(), plans={"resume": plan})
    app = make_app(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        title = text_of(app.screen.query_one(".dialog-title", Static))
        assert "target" not in title
        assert title.startswith("Resume training?") and "signals 1 process, starts 1 process" in title


async def test_the_findings_list_names_each_finding_in_words_not_its_code() -> None:
    findings = (
        Finding(Severity.CRITICAL, "expected_missing", "The expected watchdog is not running.", None),
        Finding(Severity.CRITICAL, "torchrun_failed", "torchrun's root cause: rank 1.", None),
        Finding(Severity.WARNING, "run_lost_launcher", "The run has lost its launcher.", None),
    )
    app = make_app(RecordingFeed(snapshot_with(*findings)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, FindingsScreen)
        listed = text_of(app.screen.query_one("#findings-list", Static))
        for f in findings:
            assert f.code not in listed
            assert finding_title(f.code) in listed
    assert finding_title("xid_79") == "GPU Xid 79"
    assert finding_title("some_new_code") == "some new code"
