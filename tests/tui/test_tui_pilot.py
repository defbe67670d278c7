"""Driving the dashboard with the keyboard and mouse: every binding, the dialogs, read-only mode, live updates."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import pytest
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Button, Static

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import (
    ActionPlan,
    ActionResult,
    CheckpointInfo,
    CheckpointState,
    DiskState,
    EventSummary,
    Finding,
    GpuHolder,
    GpuState,
    GpuStatus,
    History,
    Incident,
    LogLine,
    MemoryState,
    ProcessInfo,
    Series,
    ServerState,
    Severity,
    Snapshot,
    TaggedLine,
    TrainingState,
)
from rlwatch.engine.feed import StaticFeed
from rlwatch.tui.app import RlwatchApp
from rlwatch.tui.screens.confirm import ConfirmScreen, RunningScreen
from rlwatch.tui.screens.help import HelpScreen
from rlwatch.tui.screens.main import MainScreen
from rlwatch.widgets.gpu_panel import GpuPanel
from rlwatch.widgets.header import HeaderBar
from rlwatch.widgets.log_view import LogView
from rlwatch.widgets.memory_panel import MemoryPanel
from rlwatch.widgets.row_table import RowTable
from tests import snapshot_data as data

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


class RecordingFeed(StaticFeed):
    """Fixed data that can change under the app, and remembers what was asked of it."""

    def __init__(
        self,
        snapshot: Snapshot,
        lines: Sequence[TaggedLine] = (),
        plans: dict[str, ActionPlan] | None = None,
        *,
        readonly: bool = False,
    ) -> None:
        super().__init__(snapshot, lines, plans, readonly=readonly)
        self.planned: list[str] = []

    def set_snapshot(self, snap: Snapshot) -> None:
        self._snapshot = snap

    def append(self, texts: Sequence[str], kinds: frozenset[str] = frozenset()) -> None:
        seq = self._lines[-1].seq if self._lines else 0
        for i, text in enumerate(texts, start=1):
            self._lines.append(TaggedLine(seq + i, "/logs/trainer.log", seq + i, text, kinds))

    def plan(self, action: str) -> ActionPlan:
        self.planned.append(action)
        return super().plan(action)

    def execute(self, plan: ActionPlan) -> ActionResult:
        self.executed.append(plan)
        return ActionResult(plan.action, True, f"{plan.action}: done, 2 processes stopped")


def recording(name: str, **kwargs: object) -> RecordingFeed:
    base = data.feed(name)
    plans = kwargs.pop("plans", None)
    return RecordingFeed(
        base.snapshot(),
        base.lines_after(0),
        plans if plans is not None else base._plans,  # type: ignore[arg-type]
        **kwargs,
    )  # type: ignore[arg-type]


def make_app(feed: StaticFeed, *, live: bool = False, refresh_s: float = 0.02) -> RlwatchApp:
    return RlwatchApp(feed, clock=FakeClock(feed.snapshot().time), live=live, refresh_s=refresh_s)


async def wait_until(pilot: Pilot[None], pred: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition (letting the app process its messages) until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await pilot.pause()
        await asyncio.sleep(0.01)


async def settle(pilot: Pilot[None]) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def text_of(widget: Widget) -> str:
    return str(widget.render())


def status_text(app: RlwatchApp) -> str:
    return text_of(app.main.query_one("#status-line", Static))


# ------------------------------------------------------------------------------------------------ actions


@pytest.mark.parametrize(
    ("key", "action"),
    [("w", "restart-workers"), ("z", "kill-zombies"), ("r", "resume"), ("s", "restart-server")],
)
async def test_action_key_opens_its_dialog_with_cancel_focused_and_escape_does_nothing(key: str, action: str) -> None:
    feed = recording("healthy")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(key)
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.plan.action == action
        assert app.focused is not None and app.focused.id == "cancel"
        assert feed.planned == [action]
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
    assert feed.executed == []


async def test_enter_on_the_default_focus_cancels() -> None:
    feed = recording("healthy")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("z")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        assert "cancelled" in status_text(app)
    assert feed.executed == []


async def test_q_quits_with_a_confirm_dialog_open_and_executes_nothing() -> None:
    feed = recording("healthy")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("q")
        await pilot.pause()
        assert app.return_code is not None  # the app was told to exit, from inside the dialog
    assert feed.executed == []


async def test_clicking_cancel_closes_without_executing() -> None:
    feed = recording("gpu-zombie")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("z")
        await settle(pilot)
        assert await pilot.click("#cancel")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
    assert feed.executed == []


async def test_confirm_executes_the_shown_plan_exactly_once_and_reports_the_result() -> None:
    feed = recording("gpu-zombie")
    app = make_app(feed)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("z")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        shown = dialog.plan
        assert [t.pid for t in shown.targets] == [31337, 31402]
        assert await pilot.click("#confirm")
        await settle(pilot)
        await wait_until(pilot, lambda: "done" in status_text(app))
        assert status_text(app).startswith("✓ kill-zombies done")
        result = app.screen  # the dialog that ran it says the result in full, until Enter closes it
        assert isinstance(result, RunningScreen)
        assert "kill-zombies: done, 2 processes stopped" in text_of(result.query_one("#running-steps", Static))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
    assert feed.executed == [shown]


async def test_refused_plan_shows_why_and_only_close() -> None:
    feed = recording("server-crash")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("z")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        assert not dialog.query("#confirm")
        assert [b.id for b in dialog.query(Button)] == ["close"]
        assert "no stray process" in text_of(dialog.query_one("#refused", Static))
        assert app.focused is not None and app.focused.id == "close"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        assert "refused" in status_text(app)
    assert feed.executed == []


async def test_a_failing_execute_is_reported_not_raised() -> None:
    class Failing(RecordingFeed):
        def execute(self, plan: ActionPlan) -> ActionResult:
            raise PermissionError("operation not permitted")

    base = data.feed("gpu-zombie")
    feed = Failing(base.snapshot(), base.lines_after(0), {"kill-zombies": data.zombie_plan()})
    app = make_app(feed)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("z")
        await settle(pilot)
        await pilot.click("#confirm")
        await settle(pilot)
        await wait_until(pilot, lambda: "failed" in status_text(app))
        assert status_text(app).startswith("✗ kill-zombies failed")
        assert "operation not permitted" in text_of(app.screen.query_one("#running-steps", Static))


async def test_readonly_hides_action_keys_and_refuses_them() -> None:
    feed = recording("gpu-zombie", readonly=True)
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        shown = {b.binding.key for b in app.screen.active_bindings.values() if b.binding.show}
        assert not shown & {"w", "z", "r", "s"}
        assert {"slash", "e", "k", "d", "q", "question_mark"} <= shown
        for key in ("w", "z", "r", "s"):
            await pilot.press(key)
            await settle(pilot)
            assert isinstance(app.screen, MainScreen)
        assert "read-only" in status_text(app)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        help_text = app.screen.plain
        assert "Kill GPU zombies" not in help_text
        assert "Show only the log lines that match" in help_text
    assert feed.planned == []
    assert feed.executed == []


# ---------------------------------------------------------------------------------------------- log view


async def test_ampersand_filter_narrows_the_log_and_escape_restores() -> None:
    feed = recording("server-crash")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        total = view.visible_count
        await pilot.press("ampersand")
        await pilot.pause()
        assert app.focused is not None and app.focused.id == "log-filter"
        await pilot.press(*"sigquit", "enter")
        await pilot.pause()
        assert view.visible_count == 1
        assert "sigquit" in view.visible_text()[0]
        assert app.focused is view
        await pilot.press("ampersand", *"engine", "escape")
        await pilot.pause()
        assert view.filter.text == "sigquit"  # escape restores the filter from before the edit
        await pilot.press("ampersand", "ctrl+a", "ctrl+k", "enter")
        await pilot.pause()
        assert view.visible_count == total


async def test_invalid_regex_falls_back_to_literal_text() -> None:
    feed = recording("healthy")
    feed.append(["value ab[c here", "abc without bracket"])
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ampersand", *"ab[c", "enter")
        await pilot.pause()
        view = app.main.query_one(LogView)
        assert view.visible_text() == ["value ab[c here"]
        bar = text_of(app.main.query_one("#log-bar", Static))
        assert "bad regex" in bar


async def test_k_cycles_the_event_kind_filter_most_severe_first() -> None:
    feed = recording("server-crash")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        seen: list[str | None] = []
        for _ in range(8):
            await pilot.press("k")
            await pilot.pause()
            seen.append(view.filter.kind)
            if view.filter.kind is not None:
                assert all(view.filter.kind in r.kinds for r in view._visible)
            if view.filter.kind is None:
                break
        assert seen[:2] == ["connection_refused", "traceback"]
        assert seen[-1] is None


async def test_clicking_an_event_row_filters_the_log_to_that_kind() -> None:
    feed = recording("server-crash")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.query_one("#events-table", RowTable)
        second = table.get_row_at(1)[0].plain
        assert await pilot.click("#events-table", offset=(4, 2))
        await pilot.pause()
        view = app.main.query_one(LogView)
        assert view.filter.kind == second == "traceback"
        detail = text_of(app.main.query_one("#events-detail", Static))
        assert "traceback" in detail and "64 total" in detail


async def test_p_stops_following_new_lines_wait_below_and_p_follows_again() -> None:
    feed = recording("healthy")
    app = make_app(feed, live=True)
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await wait_until(pilot, lambda: view.total_count == len(feed.lines_after(0)))
        await pilot.press("6", "home")  # to the top: following stops
        await pilot.pause()
        assert not view.following and view.scroll_y == 0
        feed.append(["new line one", "new line two"])
        await wait_until(pilot, lambda: view.new_below == 2)
        assert view.scroll_y == 0  # the view stays where the person put it
        bar = text_of(app.main.query_one("#log-bar", Static))
        assert "STILL" in bar and "+2 new" in bar
        await pilot.press("p")
        await pilot.pause()
        assert view.following and view.scroll_y == view.max_scroll_y
        assert view.visible_text()[-1] == "new line two"
        await pilot.press("p")
        assert not view.following


class PokingFeed(RecordingFeed):
    """A feed that says when it changed, from a thread of its own, as the live engine does."""

    def __init__(self, base: RecordingFeed) -> None:
        super().__init__(base.snapshot(), base.lines_after(0), base._plans)
        self.callbacks: list[Callable[[], None]] = []

    def on_change(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def poke_from_thread(self) -> None:
        threads = [threading.Thread(target=cb) for cb in self.callbacks for _ in range(50)]  # a burst, coalesced
        for t in threads:
            t.start()
        for t in threads:
            t.join()


async def test_new_lines_show_when_the_feed_pokes_not_at_the_next_tick() -> None:
    feed = PokingFeed(recording("healthy"))
    app = make_app(feed, live=True, refresh_s=3600)  # the tick never comes during the test
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await wait_until(pilot, lambda: view.total_count == len(feed.lines_after(0)))
        assert feed.callbacks, "the screen did not ask to be told of changes"
        before = view.total_count
        feed.append(["pushed line"])
        await pilot.pause()
        assert view.total_count == before  # nothing shows it until the feed says so
        feed.poke_from_thread()
        await wait_until(pilot, lambda: view.total_count == before + 1)
        assert view.visible_text()[-1] == "pushed line"


async def test_f_cycles_files() -> None:
    feed = recording("server-crash")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        view = app.main.query_one(LogView)
        await pilot.press("f")
        await pilot.pause()
        assert view.filter.path is not None and view.filter.path.endswith("trainer.log")
        assert all(r.path == view.filter.path for r in view._visible)


async def test_hostile_log_text_is_shown_literally_and_never_reaches_the_terminal() -> None:
    base = data.server_crash()
    hostile = "[bold red]boom[/] \x1b[2J\x1b]0;pwned\x07 [link=http://x]y[/link]"
    recent = (LogLine("/logs/trainer.log", 7, "[i]recent[/i]\x1b[31m line", base.time),)
    snap = dataclasses.replace(
        base,
        events={"traceback": EventSummary("traceback", Severity.WARNING, 1, base.time, base.time, 0.0, 1, {}, recent)},
        findings=(Finding(Severity.CRITICAL, "x", "[blink]finding[/blink] \x1b[5m", None),),
        incidents=(
            Incident("traceback", "/l/t.log", 3, base.time, base.time, 2, "[red]Title[/] \x1b]0;x\x07", None, "s"),
        ),
        processes=(dataclasses.replace(base.processes[0], name="[b]proc[/b]"),),
        holders=(dataclasses.replace(base.holders[0], cmdline=("[u]a[/u]\x1b[1m",)),),
    )
    feed = RecordingFeed(snap, [TaggedLine(1, "/logs/trainer.log", 1, hostile, frozenset({"traceback"}))])
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        svg = app.export_screenshot().replace("&#160;", " ")
        view = app.main.query_one(LogView)
        assert view.visible_text() == ["[bold red]boom[/]  [link=http://x]y[/link]"]
        for literal in (
            "[bold red]boom[/]",
            "[blink]finding[/blink]",
            "[red]Title[/]",
            "[i]recent[/i] line",
            "[b]proc[/b]",
            "[u]a[/u]",
        ):
            assert literal in svg, literal
        assert "\x1b" not in svg
        assert "pwned" not in svg


# ------------------------------------------------------------------------------------------- other keys


async def test_question_mark_opens_help_listing_every_key() -> None:
    app = make_app(recording("healthy"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert isinstance(app.screen, HelpScreen)
        help_text = app.screen.plain
        for fragment in (
            "Restart workers",
            "Kill GPU zombies",
            "Resume training",
            "Restart inference server",
            "Search the log",
            "Show only the log lines that match",
            "event kind",
            "Stop following",
            "error or failure line",
            "Wrap long lines",
            "List every finding",
            "Scroll the plan",
            "Focus a panel",
            "next panel",
            "Quit",
        ):
            assert fragment in help_text
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


async def test_q_quits() -> None:
    app = make_app(recording("healthy"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert app._exit


async def test_number_keys_and_tab_move_focus_between_panels() -> None:
    app = make_app(recording("healthy"))
    async with app.run_test(size=SIZE) as pilot:
        expected = {"1": "p1", "2": "p2", "3": "events-table", "4": "p4", "5": "process-table", "6": "log-view"}
        for key, target in expected.items():
            await pilot.press(key)
            assert app.focused is not None and app.focused.id == target
        await pilot.press("1", "tab")
        assert app.focused is not None and app.focused.id == "p2"
        await pilot.press("shift+tab")
        assert app.focused is not None and app.focused.id == "p1"


async def test_m_maximizes_the_focused_panel_and_restores() -> None:
    app = make_app(recording("healthy"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6", "m")
        await pilot.pause()
        panel = app.main.maximized_panel
        assert panel is not None and panel.id == "p6"
        # the header and a one-line alert stay above it
        assert app.main.query_one(HeaderBar).region.height == 1
        banner = app.main.query_one("#findings")
        assert banner.region.height == 1 and banner.region.y == 1
        assert panel.region.y == 2
        await pilot.press("m")
        await pilot.pause()
        assert app.main.maximized_panel is None


async def test_a_digit_then_m_typed_at_once_maximise_the_panel_the_digit_chose() -> None:
    """Textual moves the focus after the key that asked for it is handled: `5` and `m` arriving together (tmux
    send-keys, a fast typist) maximised the panel focused before `5`."""
    app = make_app(recording("healthy"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await pilot.pause()
        app.main.action_focus_panel(5)  # both in one turn of the loop, before the focus arrives
        app.main.action_toggle_maximize()
        await pilot.pause()
        panel = app.main.maximized_panel
        assert panel is not None and panel.id == "p5"
        await pilot.press("m", "2", "m")  # and once the focus came, it is what m follows
        await pilot.pause()
        panel = app.main.maximized_panel
        assert panel is not None and panel.id == "p2"


async def test_the_event_kind_gives_way_so_every_column_stays_in_sight() -> None:
    """In a half-width panel `checkpoint_saved` made the events table wider than its place: the last column was cut
    and a scrollbar appeared. The kind gives way (cut with an ellipsis), and takes its width back when maximised."""
    app = make_app(recording("healthy"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        table = app.main.query_one("#events-table", RowTable)
        await wait_until(pilot, lambda: "checkpoint_saved" in table.row_keys)
        await wait_until(pilot, lambda: sum(table.column_widths) <= table.size.width)
        narrow = table.column_widths[0]
        await pilot.press("3", "m")
        await wait_until(pilot, lambda: table.column_widths[0] > narrow)
        assert table.column_widths[0] == 2 + len("checkpoint_saved")  # its widest cell, padding included
        await pilot.press("m")
        await wait_until(pilot, lambda: table.column_widths[0] == narrow)


async def test_a_shows_event_kinds_at_zero() -> None:
    app = make_app(recording("server-crash"))
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.query_one("#events-table", RowTable)
        before = table.row_count
        await pilot.press("a")
        await pilot.pause()
        assert table.row_count == before + 3  # cuda_oom, oom_kill, nccl_timeout never happened


# ------------------------------------------------------------------------------------------ data updates


async def test_live_feed_change_is_shown_after_the_refresh_interval() -> None:
    feed = recording("healthy")
    app = make_app(feed, live=True)
    async with app.run_test(size=SIZE) as pilot:
        header = app.main.query_one(HeaderBar)
        await wait_until(pilot, lambda: "gpu-pod-7f3c" in text_of(header))
        changed = data.server_crash()
        feed.set_snapshot(changed)
        await wait_until(pilot, lambda: "gsm8k-pod-0" in text_of(header))
        assert "CRITICAL" in text_of(header)
        findings = text_of(app.main.query_one("#findings", Static))
        assert "Inference server http://10.244.3.17:17331 is down" in findings


async def test_panels_repaint_only_when_their_data_changed() -> None:
    feed = recording("memory-leak")
    app = make_app(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        snap = feed.snapshot()
        gpu = app.main.query_one(GpuPanel)
        mem = app.main.query_one(MemoryPanel)
        same = dataclasses.replace(snap)  # equal records, new object
        assert not gpu.update_from(same)
        assert not mem.update_from(same)
        assert snap.memory is not None
        leaner = dataclasses.replace(snap, memory=dataclasses.replace(snap.memory, available_bytes=900_000_000))
        assert mem.update_from(leaner)
        assert not gpu.update_from(leaner)


async def test_feed_errors_are_shown_not_raised() -> None:
    class Broken(RecordingFeed):
        def snapshot(self) -> Snapshot:
            if self.fail:
                raise OSError("engine went away")
            return super().snapshot()

        fail = False

    base = data.feed("healthy")
    feed = Broken(base.snapshot(), base.lines_after(0))
    app = make_app(feed, live=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        feed.fail = True
        await wait_until(pilot, lambda: "snapshot failed" in status_text(app))
        assert "engine went away" in status_text(app)


async def test_no_gpu_is_a_dim_line_not_a_crash() -> None:
    app = make_app(recording("memory-leak"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "no GPU: NVML library not found" in text_of(app.main.query_one("#gpu-lines", Static))
        assert not app.main.query_one("#gpu-graphs").display


async def test_header_says_simulated_and_flags_a_stale_live_snapshot() -> None:
    snap = dataclasses.replace(data.healthy(), simulated=True)
    feed = RecordingFeed(snap)
    clock = FakeClock(snap.time + 95)  # the engine stopped 95 s ago
    app = RlwatchApp(feed, clock=clock, live=True, refresh_s=0.02)
    async with app.run_test(size=SIZE) as pilot:
        header = app.main.query_one(HeaderBar)
        await wait_until(pilot, lambda: "STALE" in text_of(header))
        assert "SIMULATED" in text_of(header)
        assert "STALE 1m35s" in text_of(header)
        clock.jump_wall(-95)
        await wait_until(pilot, lambda: "STALE" not in text_of(header))


async def test_log_view_keeps_a_bounded_tail() -> None:
    app = make_app(recording("healthy"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        view = app.main.query_one(LogView)
        start = view.last_seq + 1
        for batch in range(3):  # as the live poll delivers them: at most 2000 per call
            lines = [
                TaggedLine(start + n, "/l/t.log", n, f"line {n}") for n in range(batch * 2000, batch * 2000 + 2000)
            ]
            view.add_lines(lines)
        await pilot.pause()
        assert view.total_count == view.visible_count == 5000
        assert view.visible_text()[-1] == "line 5999"
        await pilot.press("ampersand", *"line 1", "enter")
        await pilot.pause()
        assert view.visible_text()[0] == "line 1000"  # filtering works on what is kept


async def test_many_gpus_have_per_device_history_and_mean_graphs() -> None:
    app = make_app(recording("startup-crash"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        lines = text_of(app.main.query_one("#gpu-lines", Static)).splitlines()
        assert lines[0].startswith("8× H200")
        assert [ln.split()[0] for ln in lines[1:]] == [str(i) for i in range(8)]
        graphs = app.main.query_one("#gpu-graphs")
        assert graphs.display
        assert "util, mean of 8" in str(graphs.query_one("#gpu-util-graph").render())


def _sparse_snapshots() -> list[Snapshot]:
    """A bare snapshot (nothing found yet) and one whose records hold only None: both must draw, not crash."""
    bare = Snapshot(host="h", time=1000.0, profile="auto", run_dir="/r")
    nones = dataclasses.replace(
        bare,
        training=TrainingState(None, 0, None, None, True, None, None, weight_update_s=(5.0,)),
        checkpoint=CheckpointState(CheckpointInfo("/c/ckpt", None, None, None, None, None), 1),
        server=ServerState(None, None, False, None, None),
        gpu=GpuStatus("nvml", True, None, (GpuState(0, None, None, None, None, None, None, None, None),)),
        holders=(GpuHolder(5, 0.0, None, (), (), None, False, "stray"),),
        memory=MemoryState(None, None, None, None, None, None),
        processes=(ProcessInfo(9, 0.0, "worker", "worker-0", None, None, 0.0, 0, (), None, None, alive=False),),
        disk=DiskState("/", None, None),
        history=History(gpu_util={0: Series((1.0,), (None,))}, ram_used=Series((2000.0,), (50.0,))),
    )
    return [bare, nones]


@pytest.mark.parametrize("snap", _sparse_snapshots(), ids=["bare", "all-none"])
async def test_sparse_and_absent_data_draws_without_errors(snap: Snapshot) -> None:
    app = make_app(RecordingFeed(snap))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "cannot draw" not in status_text(app)
        assert "h" in text_of(app.main.query_one(HeaderBar))
        assert "No problems found" in text_of(app.main.query_one("#findings", Static))


@pytest.mark.parametrize("size", [(80, 24), (60, 20), (200, 60)])
async def test_other_terminal_sizes_render_every_panel(size: tuple[int, int]) -> None:
    app = make_app(recording("gpu-zombie"))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert app.main.has_class("-narrow") == (size[0] < 100)
        for n in range(1, 7):
            await pilot.press(str(n))
            assert app.focused is not None
        await pilot.resize_terminal(130, 45)
        await pilot.pause()
        assert not app.main.has_class("-narrow")


@pytest.mark.parametrize(
    ("status", "shown"),
    [
        (dict(running=True, pid=4242, since=0.0, heartbeat_age_s=1.0), "RUNNING"),
        (dict(running=True, pid=4242, since=0.0, heartbeat_age_s=300.0, stale=True), "STUCK"),
        (dict(running=False, pid=4242, since=0.0, heartbeat_age_s=900.0), "GONE"),
        (dict(running=True, pid=4242, since=0.0, heartbeat_age_s=1.0, reading_backlog=(41, 100)), "reading its logs"),
    ],
)
async def test_the_watchdog_line_says_whether_it_keeps_the_run(status: dict[str, object], shown: str) -> None:
    from rlwatch.common.state import WatchdogStatus

    base = data.memory_leak()
    since = base.time - 3600
    wd = WatchdogStatus(**{**status, "since": since})  # type: ignore[arg-type]
    app = make_app(StaticFeed(dataclasses.replace(base, watchdog=wd)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        line = text_of(app.main.query_one("#server-line", Static))
        assert "watchdog" in line and shown in line
        if shown == "RUNNING":
            assert "pid 4242" in line and "since" in line and "reading" not in line
        if shown == "reading its logs":
            assert "RUNNING" in line and "(41 %): no action yet" in line
