"""`rlwatch fleet`: many hosts on one screen, read from Prometheus or straight from each pod's exporter.

The screen never waits on the network: reads run in a thread worker and their result comes back as a call on the
UI thread, so a slow or dead Prometheus leaves the last fleet on screen with the error above it. ``live=False`` reads
once at start and runs no timers, which is what snapshot tests need.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from rlwatch.common.clock import Clock
from rlwatch.export.fleet import FleetSnapshot
from rlwatch.export.fleet.job import JobVerdict
from rlwatch.tui.base import MonitorApp
from rlwatch.widgets.fleet_table import FleetTable, group_detail, host_detail, host_job, job_lines, jobs, summary
from rlwatch.widgets.format import fmt_duration, row_text

ReadFleet = Callable[[], FleetSnapshot]
HINT = Text("enter: detail · escape: close it · r: refresh now · q: quit", style="dim")


class FleetScreen(Screen[None]):
    BINDINGS = [
        Binding("enter", "detail", "detail", show=True),
        Binding("escape", "close_detail", "close", show=True),
        Binding("r", "refresh", "refresh", show=True),
        Binding("q", "app.quit", "quit", show=True),
    ]
    AUTO_FOCUS = "#fleet-table"
    DEFAULT_CSS = """
    FleetScreen {
        layout: vertical;
    }
    #fleet-summary {
        height: 1;
        padding: 0 1;
        background: $boost;
    }
    #fleet-error {
        height: auto;
        padding: 0 1;
        display: none;
        background: $error 15%;
        color: $text;
    }
    #fleet-error.-shown {
        display: block;
    }
    #fleet-jobs {
        height: auto;
        max-height: 8;
        padding: 0 1;
        display: none;
        border-bottom: solid $primary 40%;
    }
    #fleet-jobs.-shown {
        display: block;
    }
    #fleet-detail {
        height: auto;
        max-height: 60%;
        display: none;
        border: round $accent;
        border-title-color: $text;
        padding: 0 1;
    }
    #fleet-detail.-shown {
        display: block;
    }
    #fleet-status {
        height: 1;
        padding: 0 1;
    }
    """

    def __init__(self, read: ReadFleet, *, clock: Clock, refresh_s: float, live: bool) -> None:
        super().__init__()
        self.read = read
        self.clock = clock
        self.refresh_s = refresh_s
        self.live = live
        self.fleet: FleetSnapshot | None = None
        self.detail_key: str | None = None
        self.verdicts: tuple[JobVerdict, ...] = ()  # each distributed job's verdict across its hosts
        self._reading = False  # one read at a time: a slow Prometheus must not pile up threads

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-summary")
        yield Static(id="fleet-error")
        yield Static(id="fleet-jobs")
        yield FleetTable(id="fleet-table")
        with VerticalScroll(id="fleet-detail"):
            yield Static(id="fleet-detail-body")
        yield Static(HINT, id="fleet-status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#fleet-detail").border_title = "detail"
        if self.live:
            self.action_refresh()
            self.set_interval(self.refresh_s, self.action_refresh)
        else:
            self.apply(self.read())

    @property
    def table(self) -> FleetTable:
        return self.query_one(FleetTable)

    # ------------------------------------------------------------------ data

    def action_refresh(self) -> None:
        self._mark_age()
        if not self._reading:
            self._reading = True
            self._read()

    @work(thread=True, group="fleet-read")
    def _read(self) -> None:
        try:
            fleet = self.read()
        except Exception as exc:  # the sources never raise; a bug must still not take the screen down
            self.app.call_from_thread(self._failed, f"reading the fleet failed: {exc!r}")
            return
        self.app.call_from_thread(self.apply, fleet)

    def _failed(self, message: str) -> None:
        self._reading = False
        self.query_one("#fleet-status", Static).update(Text(row_text(message, 200), style="bold red"))

    def apply(self, fleet: FleetSnapshot) -> None:
        self._reading = False
        self.fleet = fleet
        self.query_one("#fleet-summary", Static).update(summary(fleet))
        error = self.query_one("#fleet-error", Static)
        error.set_class(fleet.error is not None, "-shown")
        if fleet.error is not None:
            error.update(Text(f"cannot read the fleet: {row_text(fleet.error, 300)} (showing the last known)"))
        self.verdicts = jobs(fleet)
        verdicts = self.query_one("#fleet-jobs", Static)
        verdicts.set_class(bool(self.verdicts), "-shown")
        verdicts.update(job_lines(self.verdicts))
        self.table.show(fleet)
        status = HINT
        if not fleet.hosts:
            status = Text("no hosts yet: is Prometheus scraping an `rlwatch watch --prometheus` exporter?", "yellow")
        self.query_one("#fleet-status", Static).update(status)
        self._show_detail()
        self._mark_age()

    def _mark_age(self) -> None:
        """A live screen whose last read is old says so (only live: renders stay fixed)."""
        if not self.live or self.fleet is None:
            return
        age = self.clock.time() - self.fleet.time
        if age > 3 * self.refresh_s:
            note = Text(f"last read {fmt_duration(age)} ago", style="bold yellow")
            self.query_one("#fleet-status", Static).update(note)

    # ---------------------------------------------------------------- detail

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_detail()

    def action_detail(self) -> None:
        self.detail_key = self.table.selected_key()
        self._show_detail()

    def action_close_detail(self) -> None:
        self.detail_key = None
        self._show_detail()

    def _show_detail(self) -> None:
        panel = self.query_one("#fleet-detail")
        body = self.query_one("#fleet-detail-body", Static)
        fleet = self.fleet
        found = None
        if fleet is not None and self.detail_key is not None:
            kind, _, ident = self.detail_key.partition(":")
            if kind == "host":
                host = next((h for h in fleet.hosts if h.key == ident), None)
                if host is not None:
                    found = host_detail(host, fleet.time, host_job(self.verdicts, host))
                    panel.border_title = f"detail · {row_text(host.name)}"
            else:
                group = next((g for g in fleet.groups if str(g.signature) == ident), None)
                if group is not None:
                    found = group_detail(group)
                    panel.border_title = "detail · group"
        panel.set_class(found is not None, "-shown")
        if found is not None:
            body.update(found)


class FleetApp(MonitorApp):
    """The fleet over one read function (a :class:`~rlwatch.export.fleet.FleetSource`'s ``read``, or fixed data)."""

    TITLE = "rlwatch fleet"

    def __init__(
        self,
        read: ReadFleet,
        *,
        clock: Clock | None = None,
        refresh_s: float = 5.0,
        live: bool = True,
    ) -> None:
        super().__init__(clock=clock, refresh_s=refresh_s, live=live)
        self.read = read

    def get_default_screen(self) -> Screen[None]:
        return FleetScreen(self.read, clock=self.clock, refresh_s=self.refresh_s, live=self.live)

    @property
    def fleet_screen(self) -> FleetScreen:
        return self.bottom_screen(FleetScreen)
