"""The dashboard: every panel on one screen, fed from one :class:`~rlwatch.engine.feed.Feed`.

The feed pokes the screen when it has something new (a line counted, a sampling round), and a tick every
``refresh_s`` keeps the staleness mark moving: either way the screen asks the feed for the latest snapshot (a
reference, so unchanged data costs one identity check) and for log lines after the last one it has, and hands each
panel the snapshot; panels repaint only when their part of it changed. Pokes are coalesced: one waits in the queue
at most, so a log flood cannot bury the screen in refreshes. Actions never block the screen: the plan and the
execution run in thread workers, and their results come back as calls on the UI thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.containers import Horizontal, ScrollableContainer
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from rlwatch.common.clock import Clock
from rlwatch.common.state import ActionPlan, ActionResult, Snapshot
from rlwatch.engine.feed import Feed
from rlwatch.tui.keys import ACTION_KEYS, ACTION_TITLES, bindings
from rlwatch.tui.screens.confirm import ConfirmScreen
from rlwatch.tui.screens.help import HelpScreen
from rlwatch.widgets.events_panel import EventsPanel
from rlwatch.widgets.findings import FindingsBanner
from rlwatch.widgets.format import clean_text
from rlwatch.widgets.gpu_panel import GpuPanel
from rlwatch.widgets.header import HeaderBar
from rlwatch.widgets.log_view import LogPanel, LogView
from rlwatch.widgets.memory_panel import MemoryPanel
from rlwatch.widgets.panel import Panel
from rlwatch.widgets.process_panel import ProcessPanel
from rlwatch.widgets.run_panel import RunPanel
from rlwatch.widgets.text_block import TextBlock

MIN_REDRAW_S = 0.1  # the feed's pokes redraw at most this often
STALE_AFTER_S = 15.0  # a live snapshot older than this is flagged: the engine has stopped moving
NARROW_BELOW = 100
SHORT_BELOW = 32
FOCUS_TARGETS = {1: "#p1", 2: "#p2", 3: "#events-table", 4: "#p4", 5: "#process-table", 6: "#log-view"}


def _next_in_cycle(items: list[str], current: str | None) -> str | None:
    """The filter a cycling key moves to: no filter, then each item in turn, then no filter again."""
    if current is None:
        return items[0] if items else None
    if current not in items:
        return None
    i = items.index(current)
    return items[i + 1] if i + 1 < len(items) else None


class MainScreen(Screen[None]):
    BINDINGS = bindings()
    AUTO_FOCUS = "#events-table"

    class Changed(Message):
        """The feed has something new (posted from the feed's thread)."""

    def __init__(self, feed: Feed, *, clock: Clock, refresh_s: float, live: bool) -> None:
        super().__init__()
        self.feed = feed
        self.clock = clock
        self.refresh_s = refresh_s
        self.live = live
        self.snapshot: Snapshot | None = None
        self._poked = threading.Event()  # a Changed message is queued and not yet handled
        self._drawn_at = float("-inf")  # monotonic time of the last refresh (pacing, not data: the real clock)

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield FindingsBanner(id="findings")
        with ScrollableContainer(id="body", can_focus=False):
            with Horizontal(classes="row", id="row1"):
                yield GpuPanel("1 GPU", id="p1")
                yield MemoryPanel("2 memory", id="p2")
            with Horizontal(classes="row", id="row2"):
                yield EventsPanel("3 events", id="p3")
                yield RunPanel("4 training · checkpoint", id="p4")
            with Horizontal(classes="row", id="row3"):
                yield ProcessPanel("5 processes", id="p5")
                yield LogPanel("6 log", id="p6")
        yield TextBlock(id="status-line")
        yield Footer()

    def on_mount(self) -> None:
        self._fit(self.app.size.width, self.app.size.height)
        if self.app.size.width < NARROW_BELOW:
            self.query_one("#p1").focus()  # stacked panels: start at the top, not scrolled to the events table
        self.query_one("#log-filter", Input).cursor_blink = self.live
        readonly = " · read-only: actions disabled" if self.feed.readonly else ""
        self.set_status(Text(f"? help · m maximize panel · / filter log{readonly}", style="dim"))
        self.refresh_data()
        if self.live:
            self.set_interval(self.refresh_s, self.refresh_data)
            self.feed.on_change(self._poke)

    def _poke(self) -> None:
        if not self._poked.is_set():
            self._poked.set()
            try:
                self.post_message(self.Changed())
            except RuntimeError:  # the app's event loop has closed: the dashboard is going away
                pass

    def on_main_screen_changed(self, message: Changed) -> None:
        message.stop()
        # While a backlog streams in the engine has news every few milliseconds: redraw at most every MIN_REDRAW_S,
        # so the screen does not take the counting thread's time (and the pending poke keeps the others out).
        wait = self._drawn_at + MIN_REDRAW_S - time.monotonic()
        if wait > 0:
            self.set_timer(wait, self._redraw_after_poke)
        else:
            self._redraw_after_poke()

    def _redraw_after_poke(self) -> None:
        self._poked.clear()
        self.refresh_data()

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        """Small terminals stack the panels in one scrolling column instead of squeezing them."""
        self.set_class(width < NARROW_BELOW, "-narrow")
        self.set_class(height < SHORT_BELOW, "-short")

    # ------------------------------------------------------------------ data

    @property
    def log_view(self) -> LogView:
        return self.query_one(LogView)

    def refresh_data(self) -> None:
        """One tick: new snapshot (if any) to the panels, new lines to the log view."""
        self._drawn_at = time.monotonic()
        try:
            snap = self.feed.snapshot()
        except Exception as exc:
            self.set_status(Text(f"snapshot failed: {clean_text(str(exc), 200)}", style="bold red"))
            if self.snapshot is not None:
                self._mark_staleness(self.snapshot)
            return
        if snap is not self.snapshot:
            self.apply(snap)
        try:
            lines = self.feed.lines_after(self.log_view.last_seq)
        except Exception as exc:
            self.set_status(Text(f"log lines failed: {clean_text(str(exc), 200)}", style="bold red"))
            return
        if lines:
            self.log_view.add_lines(lines)
        self._mark_staleness(snap)

    def _mark_staleness(self, snap: Snapshot) -> None:
        """A live dashboard whose snapshot stops moving says so in the header (only live: renders stay fixed)."""
        age = self.clock.time() - snap.time if self.live else 0.0
        self.query_one(HeaderBar).show(snap, age if age > STALE_AFTER_S else None)

    def apply(self, snap: Snapshot) -> None:
        self.snapshot = snap
        self.query_one(FindingsBanner).show(snap)
        self.log_view.severity.update({kind: e.severity for kind, e in snap.events.items()})
        for panel in self.query(Panel):
            try:
                panel.update_from(snap)
            except Exception as exc:  # one panel's bug must not take the dashboard down mid-incident
                title = clean_text(str(panel.border_title or panel.id))
                self.set_status(Text(f"{title}: cannot draw: {clean_text(repr(exc), 200)}", style="bold red"))

    def set_status(self, text: Text) -> None:
        self.query_one("#status-line", Static).update(text)

    # ------------------------------------------------------------------ keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Read-only hides the action keys from the footer; the key then reaches on_key for the notice.
        return not (action == "request" and self.feed.readonly)

    def on_key(self, event: events.Key) -> None:
        if self.feed.readonly and event.key in ACTION_KEYS:
            event.stop()
            self.notify("read-only: actions are disabled", severity="warning", timeout=3)
            self.set_status(Text("read-only: actions are disabled", style="bold yellow"))

    def action_request(self, action: str) -> None:
        if self.feed.readonly:  # pragma: no cover - check_action hides it; kept as the last guard
            return
        self.set_status(Text(f"{ACTION_TITLES.get(action, action)}: planning…", style="dim"))
        self._plan(action)

    @work(thread=True, exclusive=True, group="plan")
    def _plan(self, action: str) -> None:
        try:
            plan = self.feed.plan(action)
        except Exception as exc:
            plan = ActionPlan(action, (), (), refused=f"could not plan: {exc}")
        self.app.call_from_thread(self._confirm, plan)

    def _confirm(self, plan: ActionPlan) -> None:
        def done(confirmed: bool | None) -> None:
            title = ACTION_TITLES.get(plan.action, plan.action)
            if confirmed and plan.runnable:
                self.set_status(Text(f"{title}: running…", style="bold"))
                self._execute(plan)
            elif plan.runnable:
                self.set_status(Text(f"{title}: cancelled, nothing was done", style="dim"))
            else:
                self.set_status(Text(f"{title}: refused: {clean_text(plan.refused or '', 200)}", style="yellow"))

        title = ACTION_TITLES.get(plan.action, plan.action)
        waiting = "waiting for Confirm or Cancel" if plan.runnable else "refused"
        self.set_status(Text(f"{title}: {waiting}", style="dim"))
        self.app.push_screen(ConfirmScreen(plan), done)

    @work(thread=True, group="execute")
    def _execute(self, plan: ActionPlan) -> None:
        try:
            result = self.feed.execute(plan)
        except Exception as exc:
            result = ActionResult(plan.action, False, f"{plan.action} failed: {exc}")
        self.app.call_from_thread(self._report, result)

    def _report(self, result: ActionResult) -> None:
        message = clean_text(result.message, 300)
        self.notify(message, severity="information" if result.ok else "error", markup=False)
        style = "bold green" if result.ok else "bold red"
        self.set_status(Text(("✓ " if result.ok else "✗ ") + message, style=style))

    def action_filter(self) -> None:
        self.query_one(LogPanel).open_filter()

    def action_cycle_kind(self) -> None:
        view = self.log_view
        kinds = self.query_one(EventsPanel).kinds_in_order()
        view.set_filter(replace(view.filter, kind=_next_in_cycle(kinds, view.filter.kind)))

    def action_cycle_file(self) -> None:
        view = self.log_view
        paths = list(dict.fromkeys([*(self.snapshot.logs if self.snapshot else ()), *view.paths]))
        view.set_filter(replace(view.filter, path=_next_in_cycle(paths, view.filter.path)))

    def action_toggle_pause(self) -> None:
        self.log_view.set_paused(not self.log_view.paused)

    def action_toggle_zero(self) -> None:
        self.query_one(EventsPanel).toggle_zero()

    def action_toggle_maximize(self) -> None:
        if self.maximized is not None:
            self.minimize()
        elif self.focused is not None:
            self.maximize(self.focused)

    def action_focus_panel(self, number: int) -> None:
        target = FOCUS_TARGETS.get(number)
        if target:
            self.query_one(target).focus()

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(readonly=self.feed.readonly))

    def on_events_panel_kind_selected(self, message: EventsPanel.KindSelected) -> None:
        view = self.log_view
        view.set_filter(replace(view.filter, kind=message.kind))
        self.set_status(Text(f"log: showing {clean_text(message.kind)} lines (e cycles, then all)", style="dim"))
