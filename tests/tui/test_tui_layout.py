"""Every size from 80x24 up, and one grammar of keys: a banner that keeps its first finding and its key on two lines,
dialogs whose buttons stay on screen, a key bar that keeps help and quit, Ctrl-C that quits, the next step said
after an action, a maximised panel under a one-line alert."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator

import pytest
from rich.console import Console
from rich.text import Text
from textual.widgets import Button, Static

from rlwatch.common.state import ActionPlan, ActionResult, Finding, Severity, Snapshot
from rlwatch.tui.app import RlwatchApp
from rlwatch.tui.screens.confirm import ConfirmScreen, RunningScreen
from rlwatch.tui.screens.findings import FindingsScreen
from rlwatch.tui.screens.main import MainScreen, banner_next_step
from rlwatch.widgets.findings import compact_text, fix_text, headline_first
from rlwatch.widgets.keybar import KeyBar
from tests import snapshot_data as data
from tests.tui.test_tui_pilot import RecordingFeed, make_app, recording, settle, status_text, text_of, wait_until

SMALL = (80, 24)
_CONSOLE = Console(file=io.StringIO(), width=200)
SCENARIOS = list(data.SCENARIOS)


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def banner(app: RlwatchApp) -> str:
    return text_of(app.main.query_one("#findings", Static))


# ---------------------------------------------------------------------------------------------------- banner


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_at_80x24_the_banner_is_two_lines_with_the_worst_finding_its_fix_and_how_many_more(scenario: str) -> None:
    app = make_app(recording(scenario))
    snap = data.SCENARIOS[scenario][0]()
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        await pilot.pause()
        shown = app.main.query_one("#findings")
        assert shown.region.height <= 2
        lines = banner(app).split("\n")
        assert len(lines) <= 2 and all(len(line) <= 80 for line in lines)
        line = " ".join(lines)
        if not snap.findings:
            assert "No problems found" in line
            return
        worst = sorted(snap.findings, key=lambda f: f.severity.rank)[0]
        assert worst.severity.name in line
        if worst.action == "kill-zombies":
            assert " z  kill zombies" in line
        if len(snap.findings) > 1:
            assert f"+{len(snap.findings) - 1} more (d)" in line


def test_compact_line_keeps_the_key_and_the_command_whole_when_the_message_is_cut() -> None:
    long = "x" * 300
    with_key = Finding(Severity.CRITICAL, "a", long, None, action="kill-zombies")
    with_cmd = Finding(Severity.WARNING, "b", long, None, command="rlwatch act rearm")
    line = compact_text((with_key, with_cmd), (), 80).plain
    assert len(line) == 80 and line.endswith(" z  kill zombies  +1 more (d)")
    line = compact_text((with_cmd,), (), 80, run_dir="/data/run").plain
    assert line.endswith("$ rlwatch act rearm /data/run")


def test_the_headline_first_then_one_line_each_says_how_many_more_when_they_do_not_fit() -> None:
    findings = tuple(Finding(Severity.WARNING, f"c{i}", f"finding {i} " + "y" * 200, None) for i in range(9))
    out = headline_first(findings, (), 100, 5).plain.splitlines()
    assert len(out) == 5
    assert out[0].startswith("● WARNING finding 0") and out[1].startswith("y")  # the headline takes two lines
    assert out[-1].strip() == "+6 more: d lists every finding"


def test_fix_text_says_the_key_or_the_command_and_readonly_says_the_command() -> None:
    f = Finding(Severity.CRITICAL, "gpu_strays", "strays", None, action="kill-zombies")
    fix = fix_text(f)
    assert fix is not None and fix.plain == " z  kill zombies"
    fix = fix_text(f, "/data/run", readonly=True)
    assert fix is not None and fix.plain == "$ rlwatch act kill-zombies /data/run"
    pid = Finding(Severity.WARNING, "gpu_unknown_holders", "?", None, command="rlwatch act kill-zombies --pid 5")
    fix = fix_text(pid, "/data/run")
    assert fix is not None and fix.plain == "$ rlwatch act kill-zombies /data/run --pid 5"
    assert fix_text(Finding(Severity.WARNING, "restart_loop", "loop", None)) is None


async def test_d_lists_every_finding_in_full_and_an_action_key_there_asks_for_it() -> None:
    feed = recording("memory-leak")
    app = make_app(feed)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, FindingsScreen)
        listed = text_of(app.screen.query_one("#findings-list", Static))
        for f in feed.snapshot().findings:
            assert f.message[:60] in listed.replace("\n", " ")
        assert "$ rlwatch service install /srv/optim" in listed
        await pilot.press("w")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and app.screen.plan.action == "restart-workers"
    assert feed.planned == ["restart-workers"]


# ---------------------------------------------------------------------------------------------------- dialogs


def long_plan() -> ActionPlan:
    base = data.zombie_plan()
    return dataclasses.replace(base, targets=base.targets * 15, steps=base.steps * 3)


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (200, 60)])
async def test_a_plan_taller_than_the_screen_scrolls_and_its_buttons_stay_on_screen(size: tuple[int, int]) -> None:
    feed = RecordingFeed(data.gpu_zombie(), data.gpu_zombie_lines(), {"kill-zombies": long_plan()})
    app = make_app(feed)
    async with app.run_test(size=size) as pilot:
        await pilot.press("z")
        await settle(pilot)
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        screen = dialog.region
        for button in dialog.query(Button):
            assert screen.contains_region(button.region), button.id
        body = dialog.body
        assert body.max_scroll_y > 0
        await pilot.press("pagedown")
        await pilot.pause()
        assert body.scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert body.scroll_y == body.max_scroll_y
        assert app.focused is not None and app.focused.id == "cancel"  # scrolling never moves the focus
        await pilot.press("right")
        assert app.focused is not None and app.focused.id == "confirm"
        await pilot.press("left")
        assert app.focused is not None and app.focused.id == "cancel"
        await pilot.press("enter")
        await settle(pilot)
    assert feed.executed == []


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_help_scrolls_at_80x24_and_lists_every_panels_keys(size: tuple[int, int]) -> None:
    app = make_app(recording("healthy"))
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.pause()
        help_screen = app.screen
        assert help_screen.region.contains_region(help_screen.query_one(".dialog-note").region)
        plain = getattr(help_screen, "plain", "")
        for fragment in ("PgUp", "End F G", "/ ?", "n N", "e E", "Tab ← →", "Enter / click", "ctrl+c"):
            assert fragment in plain, fragment


# ---------------------------------------------------------------------------------------------------- key bar


@pytest.mark.parametrize("width", [60, 80, 120, 200])
async def test_the_key_bar_keeps_help_and_quit_at_every_width(width: int) -> None:
    app = make_app(recording("gpu-zombie"))
    async with app.run_test(size=(width, 24)) as pilot:
        await pilot.pause()
        line = str(app.main.query_one(KeyBar).render())
        assert len(line) <= width
        assert line.rstrip().endswith("?  help  q  quit")
        await pilot.press("6")  # the log: the banner's remedy, then its own keys, and F1 for help (? searches there)
        await pilot.pause()
        line = str(app.main.query_one(KeyBar).render())
        assert line.startswith(" z  kill zombies  F  follow")
        assert "F1  help" in line and "q  quit" in line


async def test_clicking_a_key_in_the_key_bar_presses_it() -> None:
    app = make_app(recording("healthy"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        bar = app.main.query_one(KeyBar)
        str(bar.render())
        x = next(a for a, _, key in bar._spans if key == "question_mark")
        await pilot.click(KeyBar, offset=(x + 1, 0))
        await pilot.pause()
        assert type(app.screen).__name__ == "HelpScreen"


# ------------------------------------------------------------------------------------------------- Ctrl-C


async def test_ctrl_c_quits() -> None:
    app = make_app(recording("healthy"))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app._exit


async def test_ctrl_c_quits_from_a_dialog_too() -> None:
    app = make_app(recording("healthy"))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app._exit


async def test_ctrl_c_quits_once_the_action_has_ended_from_its_result_dialog() -> None:
    app = make_app(recording("gpu-zombie"))
    async with app.run_test(size=SMALL) as pilot:
        plan = data.zombie_plan()
        app.main.running = plan
        await app.push_screen(RunningScreen(plan))
        app.main._report(ActionResult("kill-zombies", False, "kill-zombies failed: operation not permitted"))
        await pilot.pause()
        text = text_of(app.screen.query_one("#running-steps", Static))
        assert "operation not permitted" in text and "Next:" in text
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app._exit


async def test_ctrl_c_and_q_wait_while_an_action_runs() -> None:
    app = make_app(recording("gpu-zombie"))
    async with app.run_test(size=SMALL, notifications=True) as pilot:
        main = app.main
        plan = data.zombie_plan()
        main.running = plan
        await app.push_screen(RunningScreen(plan))
        await pilot.pause()
        await pilot.press("ctrl+c", "q", "escape")
        await pilot.pause()
        assert not app._exit
        assert isinstance(app.screen, RunningScreen)
        assert any("finishes first" in n.message for n in app._notifications)
        main._report(ActionResult("kill-zombies", True, "kill-zombies: 2 stopped"))
        await pilot.pause()
        assert isinstance(app.screen, RunningScreen) and app.screen.result is not None  # the result, until closed
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app._exit


# ---------------------------------------------------------------------------------------------- next step


def after_kill(snap: Snapshot) -> Snapshot:
    """gpu-zombie once the strays are gone: the server is still down, and resuming brings it back."""
    return dataclasses.replace(snap, holders=(), findings=tuple(f for f in snap.findings if f.code == "server_down"))


async def test_after_an_action_the_status_line_says_the_next_step() -> None:
    feed = recording("gpu-zombie")
    app = make_app(feed)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("z")
        await settle(pilot)
        await pilot.click("#confirm")
        await settle(pilot)
        await wait_until(pilot, lambda: "done" in status_text(app))
        await pilot.press("enter")  # close the result
        feed.set_snapshot(after_kill(feed.snapshot()))
        app.main.refresh_data()
        await pilot.pause()
        line = status_text(app)
        assert line.startswith("✓ kill-zombies done")
        assert "next:  r  resume" in line and "Inference server" in line


def test_next_step_skips_the_action_just_done_and_says_a_command_when_no_key_fixes() -> None:
    snap = data.memory_leak()
    step = banner_next_step(snap, "restart-workers")
    assert isinstance(step, Text) and "$ rlwatch service install /srv/optim" in step.plain
    assert banner_next_step(data.healthy(), None) is None


# ---------------------------------------------------------------------------------------------- maximise, focus


@pytest.mark.parametrize("panel", ["1", "2", "3", "4", "5", "6"])
async def test_a_maximised_panel_keeps_the_header_and_a_one_line_alert(panel: str) -> None:
    app = make_app(recording("gpu-zombie"))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press(panel, "m")
        await pilot.pause()
        maxed = app.main.maximized_panel
        assert maxed is not None
        assert app.main.query_one("#header").region.y == 0
        alert = app.main.query_one("#findings")
        assert alert.region.y == 1 and alert.region.height == 1
        assert "CRITICAL" in banner(app)
        assert maxed.region.y == 2 and maxed.region.height >= 18
        await pilot.press("3")  # another panel's number moves the maximised view to it
        await pilot.pause()
        assert app.main.maximized_panel is not None and app.main.maximized_panel.id == "p3"


@pytest.mark.parametrize("number", range(1, 7))
async def test_at_80x24_a_panel_number_brings_that_panel_into_view(number: int) -> None:
    app = make_app(recording("server-crash"))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press(str(number))
        await pilot.pause()
        body = app.main.query_one("#body")
        panel = app.main.query_one(f"#p{number}")
        assert panel.region.y >= body.region.y
        assert panel.region.y < body.region.bottom  # its title is on screen
        assert app.focused is not None and panel in app.focused.ancestors_with_self


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("size", [(80, 24), (120, 35), (160, 50), (200, 60)])
async def test_every_scenario_draws_at_every_size_without_a_panel_error(scenario: str, size: tuple[int, int]) -> None:
    app = make_app(recording(scenario))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert "cannot draw" not in status_text(app)
        bar = str(app.main.query_one(KeyBar).render())
        assert "help" in bar and "quit" in bar


async def test_readonly_banner_says_the_command_not_the_key() -> None:
    app = make_app(recording("gpu-zombie", readonly=True))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        await pilot.pause()
        assert "$ rlwatch act kill-zombies" in banner(app)


def test_a_key_at_the_end_of_a_wrapped_line_moves_to_the_next_whole() -> None:
    from rlwatch.widgets.findings import findings_text

    for n in range(60, 120):  # messages of every length: the key is never split across two lines
        f = Finding(
            Severity.CRITICAL, "brake_no_relief", "m" * 20 + " " + "word " * (n // 5), None, action="restart-workers"
        )
        lines = findings_text((f,), (), width=100).wrap(_CONSOLE, 100)
        assert any(" w  restart workers" in line.plain for line in lines), n


async def test_t_reads_where_each_process_stands_and_shows_it() -> None:
    """The stacks of the real two-GPU hang (tests/real/torchrun-hang-2gpu), as the dashboard shows them on key t."""
    import json
    from pathlib import Path

    from rlwatch.common.state import ProcessStack, StackReport
    from rlwatch.sources.stacks import summarize
    from rlwatch.tui.screens.stacks import StacksScreen

    kept = json.loads(
        (Path(__file__).resolve().parent.parent / "real" / "torchrun-hang-2gpu" / "hang-2gpu-stacks.json").read_text()
    )
    stacks = tuple(
        ProcessStack(p["pid"], p["label"], tuple(p["frames"]), p["where"], p["threads"], p["error"])
        for p in kept["processes"]
    )
    groups, text = summarize(stacks)
    base = recording("healthy")
    report = StackReport(
        base.snapshot().time - 5, "hang declared", stacks, groups, text, "/srv/real/run/.rlwatch/stacks/x.json"
    )
    feed = recording("healthy")
    feed._snapshot = dataclasses.replace(base.snapshot(), stacks=report)
    app = make_app(feed)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("t")
        for _ in range(50):
            await pilot.pause()
            if isinstance(app.screen, StacksScreen):
                break
        assert isinstance(app.screen, StacksScreen)
        shown = str(app.screen.query_one("#stacks-list", Static).render())
        assert "rank 0 in train_step (hang_2gpu.py:19)" in shown and "rank 1 in never_reaches_collective" in shown
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, StacksScreen)
