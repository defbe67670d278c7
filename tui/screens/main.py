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
from textual.widgets import Input, Static

from rlwatch.common.clock import Clock
from rlwatch.common.state import ActionPlan, ActionResult, Finding, Snapshot, StackReport
from rlwatch.engine.feed import Feed
from rlwatch.tui.keys import ACTION_KEYS, ACTION_LABELS, ACTION_TITLES, bindings
from rlwatch.tui.screens.confirm import ConfirmScreen, RunningScreen
from rlwatch.tui.screens.findings import FindingsScreen
from rlwatch.tui.screens.help import HelpScreen
from rlwatch.tui.screens.stacks import StacksScreen
from rlwatch.widgets.events_panel import EventsPanel
from rlwatch.widgets.findings import FindingsBanner, command_line, ordered_findings
from rlwatch.widgets.format import row_text
from rlwatch.widgets.gpu_panel import GpuPanel
from rlwatch.widgets.header import HeaderBar
from rlwatch.widgets.keybar import KeyBar
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
NEXT_STEP_FOR_S = 600.0  # after an action, the status line says what comes next for this long
IDLE_HINT = "d findings · m maximize · 1-6 panels · / search log · ? help"
IDLE_HINT_MAXIMIZED = "d findings · m restore the panels · 1-6 panels · / search log · ? help"
ACTION_KEY_OF = {action: key for key, action in ACTION_KEYS.items()}


def banner_rows(height: int, maximized: bool) -> int:
    """How many rows the findings banner may take: one over a maximised panel, two on a short terminal (the worst
    finding's words on the first, and its remedy whole after the rest of them on the second: in one line of 80
    columns a remedy left the headline two words)."""
    if maximized:
        return 1
    if height < SHORT_BELOW:
        return 2
    return 5 if height < 50 else 8


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
        self.running: ActionPlan | None = None  # the action being executed, if any
        self._done: tuple[ActionResult, float] | None = None  # the last action's result and when (monotonic)
        self._hinting = False  # the status line shows the idle hint (which says what m does now)
        # The panel a digit key chose, until the focus it asked for arrives (Textual moves focus after the key is
        # handled, so `5` then `m` typed at once would maximise the panel focused before).
        self._chosen: Panel | None = None

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
        yield KeyBar(id="keybar")

    def on_mount(self) -> None:
        self._fit(self.app.size.width, self.app.size.height)
        if self.app.size.width < NARROW_BELOW:
            self.query_one("#p1").focus()  # stacked panels: start at the top, not scrolled to the events table
        self.query_one("#log-filter", Input).cursor_blink = self.live
        self.query_one(FindingsBanner).readonly = self.feed.readonly
        self._show_hint()
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
        """Small terminals stack the panels in one scrolling column instead of squeezing them, and keep the banner
        to two lines (its first finding, its key, how many more)."""
        self.set_class(width < NARROW_BELOW, "-narrow")
        self.set_class(height < SHORT_BELOW, "-short")
        self.query_one(FindingsBanner).set_rows(banner_rows(height, self.has_class("-max")))

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
            self.set_status(Text(f"snapshot failed: {row_text(str(exc), 200)}", style="bold red"))
            if self.snapshot is not None:
                self._mark_staleness(self.snapshot)
            return
        if snap is not self.snapshot:
            self.apply(snap)
        try:
            lines = self.feed.lines_after(self.log_view.last_seq)
        except Exception as exc:
            self.set_status(Text(f"log lines failed: {row_text(str(exc), 200)}", style="bold red"))
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
        headline = ordered_findings(snap.findings)[0] if snap.findings else None
        remedy = headline.action if headline is not None and not self.feed.readonly else None
        self.query_one(KeyBar).set_remedy(ACTION_KEY_OF.get(remedy) if remedy else None)
        if self._done is not None and self.running is None:
            self._say_done()
        self.log_view.severity.update({kind: e.severity for kind, e in snap.events.items()})
        for panel in self.query(Panel):
            try:
                panel.update_from(snap)
            except Exception as exc:  # one panel's bug must not take the dashboard down mid-incident
                title = row_text(str(panel.border_title or panel.id))
                self.set_status(Text(f"{title}: cannot draw: {row_text(repr(exc), 200)}", style="bold red"))

    def set_status(self, text: Text) -> None:
        self._hinting = False
        self.query_one("#status-line", Static).update(text)

    def _show_hint(self) -> None:
        """The idle hint; over a maximised panel ``m`` restores the layout, and the hint says so."""
        readonly = "read-only: actions disabled · " if self.feed.readonly else ""
        hint = IDLE_HINT_MAXIMIZED if self.has_class("-max") else IDLE_HINT
        self.set_status(Text(readonly + hint, style="dim"))
        self._hinting = True

    # ------------------------------------------------------------------ keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Read-only hides the action keys from the key bar; the key then reaches on_key for the notice.
        return not (action == "request" and self.feed.readonly)

    def on_key(self, event: events.Key) -> None:
        if self.feed.readonly and event.key in ACTION_KEYS:
            event.stop()
            self.notify("read-only: actions are disabled", severity="warning", timeout=3)
            self.set_status(Text("read-only: actions are disabled", style="bold yellow"))

    def action_quit(self) -> None:
        """q and Ctrl-C quit (as in htop and k9s); an action that runs finishes first."""
        if self.running is not None:
            self.notify(f"{self.running.action} is running: it finishes first", severity="warning", timeout=4)
            return
        self.app.exit()

    def action_request(self, action: str) -> None:
        if self.feed.readonly:  # pragma: no cover - check_action hides it; kept as the last guard
            return
        self._done = None
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
                self.running = plan
                self.app.push_screen(RunningScreen(plan))
                self._execute(plan)
            elif plan.runnable:
                self.set_status(Text(f"{title}: cancelled, nothing was done", style="dim"))
            else:
                self.set_status(Text(f"{title}: refused: {row_text(plan.refused or '', 200)}", style="yellow"))

        title = ACTION_TITLES.get(plan.action, plan.action)
        waiting = "waiting for Confirm or Cancel" if plan.runnable else "refused"
        self.set_status(Text(f"{title}: {waiting}", style="dim"))
        verdict = self.snapshot.verdict if self.snapshot is not None else None
        self.app.push_screen(ConfirmScreen(plan, verdict=verdict if plan.runnable else None), done)

    @work(thread=True, group="execute")
    def _execute(self, plan: ActionPlan) -> None:
        try:
            result = self.feed.execute(plan)
        except Exception as exc:
            result = ActionResult(plan.action, False, f"{plan.action} failed: {exc}")
        self.app.call_from_thread(self._report, result)

    def _report(self, result: ActionResult) -> None:
        self.running = None
        self._done = (result, time.monotonic())
        dialog = self.app.screen
        if isinstance(dialog, RunningScreen):
            dialog.result = result
        self._say_done()

    def _say_done(self) -> None:
        """The last action's outcome, and what to do next: the worst finding that a key or command fixes (not the
        action just done: its own finding may take a sampling round to clear)."""
        if self._done is None:
            return
        result, at = self._done
        if time.monotonic() - at > NEXT_STEP_FOR_S:
            self._done = None
            return
        step = banner_next_step(self.snapshot, result.action, readonly=self.feed.readonly)
        dialog = self.app.screen
        if isinstance(dialog, RunningScreen) and dialog.result is result:
            dialog.show_result(result, step)  # the dialog that ran it follows the findings too, while it is open
        tail = Text(no_wrap=True, end="")
        if step is not None:
            tail.append("  next: ", style="bold")
            tail.append_text(step)
        elif result.ok and self.snapshot is not None and not any(f.severity.rank <= 1 for f in self.snapshot.findings):
            tail.append("  nothing else to do", style="dim")
        # The result in full is in the dialog that ran it; here the outcome in two words, and the next step.
        line = Text(
            f"{'✓' if result.ok else '✗'} {result.action} {'done' if result.ok else 'failed'}",
            style="bold green" if result.ok else "bold red",
            no_wrap=True,
            end="",
        )
        line.append_text(tail)
        self.set_status(line)

    def action_findings(self) -> None:
        if self.snapshot is None:
            return

        def chosen(action: str | None) -> None:
            if action is not None:
                self.action_request(action)

        self.app.push_screen(FindingsScreen(self.snapshot, readonly=self.feed.readonly), chosen)

    def action_stacks(self) -> None:
        self.set_status(Text("reading each process's stack…", style="dim"))
        self._read_stacks()

    @work(thread=True, exclusive=True, group="stacks")
    def _read_stacks(self) -> None:
        report = self.feed.stacks()
        now = self.snapshot.time if self.snapshot is not None else report.taken_at if report else 0.0
        self.app.call_from_thread(self._show_stacks, report, now)

    def _show_stacks(self, report: StackReport | None, now: float) -> None:
        self.set_status(Text("", style="dim"))
        self.app.push_screen(StacksScreen(report, now))

    def _log_panel(self) -> LogPanel:
        return self.query_one(LogPanel)

    def action_search(self) -> None:
        self._log_panel().open_search()

    def action_filter(self) -> None:
        self._log_panel().open_filter()

    def action_next_error(self) -> None:
        self.log_view.focus()
        self.log_view.next_error(1)

    def action_previous_error(self) -> None:
        self.log_view.focus()
        self.log_view.next_error(-1)

    def action_cycle_kind(self) -> None:
        view = self.log_view
        kinds = self.query_one(EventsPanel).kinds_in_order()
        view.set_filter(replace(view.filter, kind=_next_in_cycle(kinds, view.filter.kind)))

    def action_cycle_file(self) -> None:
        view = self.log_view
        paths = list(dict.fromkeys([*(self.snapshot.logs if self.snapshot else ()), *view.paths]))
        view.set_filter(replace(view.filter, path=_next_in_cycle(paths, view.filter.path)))

    def action_toggle_pause(self) -> None:
        self.log_view.set_paused(self.log_view.following)

    def action_toggle_zero(self) -> None:
        self.query_one(EventsPanel).toggle_zero()

    # ------------------------------------------------------------------ maximise

    @property
    def maximized_panel(self) -> Panel | None:
        found = [p for p in self.query(Panel) if p.has_class("-maximized")]
        return found[0] if found else None

    def _panel_of(self, widget: object) -> Panel | None:
        node = widget
        while node is not None and not isinstance(node, Panel):
            node = getattr(node, "parent", None)
        return node

    def action_toggle_maximize(self) -> None:
        """Fill the body with the focused panel. Unlike Textual's own maximise, the header and a one-line alert stay
        above it: a new CRITICAL must not be hidden behind a full-screen log."""
        if self.maximized_panel is not None:
            self._set_maximized(None)
        else:
            self._set_maximized(self._chosen or self._panel_of(self.focused))

    def on_descendant_focus(self, _: events.DescendantFocus) -> None:
        self._chosen = None  # the focus arrived (or moved by Tab or the mouse): it says which panel is chosen

    def _set_maximized(self, panel: Panel | None) -> None:
        for p in self.query(Panel):
            p.set_class(p is panel, "-maximized")
        for row in self.query(".row"):
            row.set_class(panel is not None and panel in row.children, "-max-row")
        self.set_class(panel is not None, "-max")
        self.query_one(FindingsBanner).set_rows(banner_rows(self.size.height, panel is not None))
        if self._hinting:
            self._show_hint()
        self.log_view.set_maximized(isinstance(panel, LogPanel))
        if panel is not None:
            self.query_one("#body").scroll_to(y=0, animate=False)

    def action_focus_panel(self, number: int) -> None:
        target = FOCUS_TARGETS.get(number)
        if not target:
            return
        widget = self.query_one(target)
        panel = self._chosen = self._panel_of(widget)
        if self.maximized_panel is not None and panel is not None:
            self._set_maximized(panel)
        widget.focus(scroll_visible=False)
        if panel is not None:
            # the whole panel, its title first: the focused table inside may be lower than the panel's top
            self.query_one("#body").scroll_to_widget(panel, animate=False, top=True)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(readonly=self.feed.readonly))

    def on_events_panel_kind_selected(self, message: EventsPanel.KindSelected) -> None:
        view = self.log_view
        view.set_filter(replace(view.filter, kind=message.kind))
        self.set_status(Text(f"log: showing {row_text(message.kind)} lines (k cycles, then all)", style="dim"))


def banner_next_step(snap: Snapshot | None, done: str | None, *, readonly: bool = False) -> Text | None:
    """``r resume — Inference server … is down``: the worst finding a key or command fixes, other than ``done``."""
    if snap is None:
        return None
    candidates: list[Finding] = [
        f for f in snap.findings if (f.action and f.action != done) or (not f.action and f.command)
    ]
    if not candidates:
        return None
    f = min(candidates, key=lambda f: f.severity.rank)
    out = Text(no_wrap=True, end="")
    if f.action and not readonly:
        key = next(k for k, a in ACTION_KEYS.items() if a == f.action)
        out.append(f" {key} ", style="bold black on cyan")
        out.append(f" {ACTION_LABELS[f.action]}", style="bold")
    else:
        out.append("$ " + row_text(command_line(f.fix_command() or "", snap.run_dir)), style="bold")
    out.append(f" — {row_text(f.message, 120)}", style="dim")
    return out
