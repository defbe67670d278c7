"""The fleet table: one row per host, hosts that fail the same way under one group row, and a host's detail.

Rows are built from a :class:`~rlwatch.export.fleet.FleetSnapshot` only, with ages measured from the snapshot's own
time, so the same fleet renders to the same characters every time. A group row appears only where two or more hosts
share an exception signature (a group of one says nothing its host row does not); hosts with no exception follow without
a group row. Stale hosts keep their last known values, dimmed, with the age of their newest data where the status would
be.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import DataTable

from rlwatch.common.state import Severity
from rlwatch.common.words import plural
from rlwatch.export.fleet import FleetGroup, FleetHost, FleetSnapshot, HostStatus
from rlwatch.export.fleet.job import JobVerdict, join_jobs
from rlwatch.widgets.format import (
    SEVERITY_STYLE,
    UNKNOWN,
    fmt_age,
    fmt_bytes,
    fmt_clock,
    fmt_duration,
    fmt_number,
    row_text,
    shorten_path,
)

COLUMNS: tuple[tuple[str, str, int], ...] = (
    # key, heading, width: 160 columns show them all; narrower terminals scroll to the last ones
    ("host", "host", 14),
    ("status", "status", 11),
    ("step", "step", 9),
    ("rate", "rate", 6),
    ("server", "server", 6),
    ("gpu", "GPU", 4),
    ("gpu_mem", "GPU mem", 7),
    ("ram", "RAM", 4),
    ("events", "events", 16),
    ("finding", "worst finding", 18),
    ("exception", "last exception", 38),  # the minimum; it grows with the screen
)
EXCEPTION_MIN = 38
CELL_PADDING = 1  # DataTable's default, on each side of every column

SHORT_KIND = {
    "traceback": "tb",
    "connection_refused": "refused",
    "cuda_oom": "oom",
    "cuda_busy": "busy",
    "nccl_timeout": "nccl-to",
    "nccl_error": "nccl",
    "engine_dead": "engine",
    "child_failed": "child",
    "oom_kill": "oomkill",
    "emergency_brake": "brake",
    "timeout": "timeout",
    "restart": "restart",
}

STATUS_STYLE: dict[HostStatus, str] = {
    HostStatus.CRITICAL: "bold white on red",
    HostStatus.WARNING: "bold black on yellow",
    HostStatus.OK: "bold black on green",
    HostStatus.STALE: "bold black on grey50",
    HostStatus.NO_DATA: "bold white on grey30",
}

STATUS_COLOR: dict[HostStatus, str] = {
    HostStatus.CRITICAL: "bold red",
    HostStatus.WARNING: "bold yellow",
    HostStatus.OK: "green",
    HostStatus.STALE: "grey50",
    HostStatus.NO_DATA: "grey50",
}

SEVERITY_SHORT = {Severity.CRITICAL: "CRIT", Severity.WARNING: "WARN", Severity.INFO: "info"}


def host_row_key(host: FleetHost) -> str:
    return f"host:{host.key}"


def group_row_key(group: FleetGroup) -> str:
    return f"group:{group.signature}"


def _clip(text: str, width: int) -> str:
    text = row_text(text)
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def fmt_rate(steps_per_hour: float | None) -> str:
    if steps_per_hour is None:
        return UNKNOWN
    if steps_per_hour >= 1000:
        return f"{steps_per_hour / 1000:.1f}k/h"
    return f"{steps_per_hour:.0f}/h"


def fmt_step(host: FleetHost) -> str:
    if host.step is None:
        return UNKNOWN
    return f"{host.step}/{host.total_steps}" if host.total_steps else str(host.step)


def fmt_pair(used: float | None, total: float | None) -> str:
    """``120/150 GB``: one unit for both, taken from the total."""
    if used is None:
        return UNKNOWN
    if not total:
        return fmt_bytes(used)
    unit, scale = next(((u, s) for u, s in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)) if total >= s), ("kB", 1e3))
    return f"{used / scale:.0f}/{total / scale:.0f} {unit}"


def fmt_used(used: float | None, total: float | None) -> str:
    """The share in use, as a percentage: comparable across hosts of different sizes."""
    return UNKNOWN if used is None or not total else f"{100 * used / total:.0f}%"


def fmt_gpus(host: FleetHost) -> str:
    """Per GPU, with neighbours that read the same merged: ``0-7: 87% 118/141 GB`` rather than eight repeats."""
    runs: list[tuple[str, str, str]] = []  # (first index, last index, text)
    for g in host.gpus:
        util = UNKNOWN if g.util_ratio is None else f"{g.util_ratio * 100:.0f}%"
        text = f"{util} {fmt_pair(g.mem_used_bytes, g.mem_total_bytes)}"
        if runs and runs[-1][2] == text:
            runs[-1] = (runs[-1][0], g.index, text)
        else:
            runs.append((g.index, g.index, text))
    return "  ".join(f"{a}-{b}: {t}" if a != b else f"{a}: {t}" for a, b, t in runs)


def fmt_events(host: FleetHost, width: int) -> str:
    parts = [f"{SHORT_KIND.get(kind, kind)} {count}" for kind, count in host.failure_counts()]
    return _clip(" · ".join(parts), width) if parts else ""


def status_cell(host: FleetHost) -> Text:
    status = host.status
    if status is HostStatus.STALE and host.age_s is not None:
        label = f"stale {fmt_duration(host.age_s)}"
    else:
        label = status.value.upper() if status in (HostStatus.CRITICAL, HostStatus.WARNING) else status.value
    return Text(label, style=STATUS_STYLE[status], no_wrap=True)


def host_cells(host: FleetHost, *, grouped: bool = False, exc_width: int = EXCEPTION_MIN) -> tuple[Text, ...]:
    """The cells of one host's row; a grouped host leaves its exception to the group row above it."""
    widths = {key: width for key, _, width in COLUMNS}
    dim = "dim" if host.stale or not host.has_data else ""
    indent = "  " if grouped else ""
    name = Text(indent + _clip(host.name, widths["host"] - len(indent)), style=dim or "bold")
    if not host.has_data:
        blanks = [Text("") for _ in range(8)]
        return (name, status_cell(host), *blanks, Text(_clip(host.error or "no data", exc_width), style="red"))
    server = Text(UNKNOWN, style=dim)
    if host.server_up is True:
        server = Text("up", style=dim or "green")
    elif host.server_up is False:
        server = Text("DOWN", style=dim or "bold red")
    worst = host.worst
    finding = Text("", style=dim)
    if worst is not None:
        finding = Text(
            _clip(f"{SEVERITY_SHORT[worst.severity]} {worst.code}", widths["finding"]),
            style=dim or SEVERITY_STYLE[worst.severity],
        )
    exc = Text("", style=dim)
    if host.exception is not None:
        exc = (
            Text("″ same", style="dim") if grouped else Text(_clip(host.exception.title, exc_width), style=dim or "red")
        )
    gpu = "" if host.gpu_util_ratio is None else f"{host.gpu_util_ratio * 100:.0f}%"
    used_ram = None
    if host.mem_total_bytes is not None and host.mem_available_bytes is not None:
        used_ram = host.mem_total_bytes - host.mem_available_bytes
    step_style = dim or ("bold yellow" if host.stalled else "")
    return (
        name,
        status_cell(host),
        Text(fmt_step(host), justify="right", style=step_style),
        Text(fmt_rate(host.steps_per_hour), justify="right", style=dim),
        server,
        Text(gpu or UNKNOWN, justify="right", style=dim),
        Text(fmt_used(host.gpu_mem_used_bytes, host.gpu_mem_total_bytes), justify="right", style=dim),
        Text(fmt_used(used_ram, host.mem_total_bytes), justify="right", style=dim or _ram_style(host)),
        Text(fmt_events(host, widths["events"]), style=dim or "yellow"),
        finding,
        exc,
    )


def _ram_style(host: FleetHost) -> str:
    total, avail = host.mem_total_bytes, host.mem_available_bytes
    return "bold yellow" if total and avail is not None and avail < 0.1 * total else ""


def group_cells(group: FleetGroup, *, exc_width: int = EXCEPTION_MIN) -> tuple[Text, ...]:
    widths = {key: width for key, _, width in COLUMNS}
    head = Text(f"▾ {len(group.hosts)} hosts", style="bold magenta")
    blanks = [Text("") for _ in range(6)]
    same = Text("same exception", style="magenta")
    sig = Text(_clip(f"sig {group.signature}", widths["finding"]), style="magenta")
    title = Text(_clip(group.title or "", exc_width), style="bold magenta")
    return (head, Text(""), *blanks, same, sig, title)


def rows(fleet: FleetSnapshot, *, exc_width: int = EXCEPTION_MIN) -> list[tuple[str, tuple[Text, ...]]]:
    """(row key, cells) in display order: shared failures first, each under its group row."""
    out: list[tuple[str, tuple[Text, ...]]] = []
    for group in fleet.groups:
        shared = group.signature is not None and len(group.hosts) > 1
        if shared:
            out.append((group_row_key(group), group_cells(group, exc_width=exc_width)))
        for host in group.hosts:
            out.append((host_row_key(host), host_cells(host, grouped=shared, exc_width=exc_width)))
    return out


def exception_width(total: int) -> int:
    """The last column takes what the others leave, so an exception's title is read whole where the screen allows."""
    fixed = sum(width + 2 * CELL_PADDING for key, _, width in COLUMNS if key != "exception")
    return max(EXCEPTION_MIN, total - fixed - 2 * CELL_PADDING - 2)


def summary(fleet: FleetSnapshot) -> Text:
    """``4 hosts: 3 critical · 1 stale`` with the source and the time of the read."""
    counts = fleet.counts()
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append("rlwatch fleet", style="bold")
    line.append(f"  {row_text(fleet.source)}", style="dim")
    n = len(fleet.hosts)
    line.append(f"  {plural(n, 'host')}")
    shown = [(s, counts[s]) for s in sorted(counts, key=lambda s: s.rank)]
    if shown:
        line.append(": ")
        for i, (status, count) in enumerate(shown):
            if i:
                line.append(" · ", style="dim")
            line.append(f"{count} {status.value}", style=STATUS_COLOR[status])
    line.append(f"  read {fmt_clock(fleet.time)}", style="dim")
    return line


JOB_STYLE = {"hung": "bold red", "waiting": "bold yellow", "unknown": "grey50", "progressing": "green"}
JOB_MARK = {"hung": "✖", "waiting": "▲", "unknown": "?", "progressing": "●"}


def jobs(fleet: FleetSnapshot) -> tuple[JobVerdict, ...]:
    """Each distributed job the fleet's hosts report, joined across them into one verdict, the hung first: the same
    verdicts ``rlwatch fleet --json`` prints."""
    return join_jobs(fleet.hosts)


def job_lines(verdicts: tuple[JobVerdict, ...]) -> Text:
    """One line per job, above the host rows: its verdict in the words ``fleet --json`` gives it (the node, rank and
    collective the others wait for), cut at the screen's edge with an ellipsis; a host's detail says what the verdict
    says of that host's own ranks."""
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, v in enumerate(verdicts):
        if i:
            out.append("\n")
        style = JOB_STYLE.get(v.state, "")
        line = Text(f"{JOB_MARK.get(v.state, '?')} ", style=style)
        line.append(row_text(v.message, 2000), style=style if v.state != "progressing" else "")
        out.append_text(line)
    return out


def host_job(verdicts: tuple[JobVerdict, ...], host: FleetHost) -> str | None:
    """What the job's verdict says of this host's own ranks ("its ranks 0-1 wait for node-b rank 3")."""
    for v in verdicts:
        said = dict(v.per_host).get(host.name)
        if said is not None:
            return f"{v.job}: {said}"
    return None


class FleetTable(DataTable[Text]):
    """The fleet, one row per host; keeps the cursor on the same host across refreshes."""

    DEFAULT_CSS = """
    FleetTable {
        height: 1fr;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self.fleet: FleetSnapshot | None = None
        self.row_keys: list[str] = []
        self._exc_width: int | None = None

    def _columns(self, exc_width: int) -> None:
        self.clear(columns=True)
        for key, heading, width in COLUMNS:
            self.add_column(heading, key=key, width=exc_width if key == "exception" else width)
        self._exc_width = exc_width

    def show(self, fleet: FleetSnapshot) -> None:
        selected = self.selected_key()
        self.fleet = fleet
        exc_width = exception_width(self.size.width or self.app.size.width)
        if exc_width != self._exc_width:
            self._columns(exc_width)
        else:
            self.clear()
        self.row_keys = []
        for key, cells in rows(fleet, exc_width=exc_width):
            self.add_row(*cells, key=key)
            self.row_keys.append(key)
        if selected in self.row_keys:
            self.move_cursor(row=self.row_keys.index(selected), animate=False)

    def on_resize(self) -> None:
        if self.fleet is not None and exception_width(self.size.width) != self._exc_width:
            self.show(self.fleet)

    def selected_key(self) -> str | None:
        if not self.row_keys or not 0 <= self.cursor_row < len(self.row_keys):
            return None
        return self.row_keys[self.cursor_row]


# ---------------------------------------------------------------------------------------------------- detail


def _kv(table: Table, key: str, value: str | Text, style: str = "") -> None:
    table.add_row(Text(key, style="dim"), value if isinstance(value, Text) else Text(value, style=style))


def host_detail(host: FleetHost, now: float, job: str | None = None) -> Group:
    """Everything the fleet knows about one host, for the detail panel (``job``: what its job's verdict says of its
    own ranks)."""
    head = Text(no_wrap=True)
    head.append(row_text(host.name), style="bold")
    head.append("  ")
    head.append_text(status_cell(host))
    where = f"  {row_text(host.key)}" + (f" (job {row_text(host.job)})" if host.job else "")
    head.append(where, style="dim")
    if host.simulated:
        head.append("  SIMULATED", style="bold magenta")
    parts: list[Text | Table] = [head]
    if host.error:
        parts.append(Text(row_text(host.error, 200), style="red"))
    if not host.has_data:
        return Group(*parts)

    facts = Table.grid(padding=(0, 2))
    facts.add_column(no_wrap=True)
    facts.add_column()
    if host.age_s is not None:
        _kv(facts, "data age", fmt_duration(host.age_s), "bold yellow" if host.stale else "")
    _kv(facts, "run", f"{row_text(host.profile or UNKNOWN)} · {shorten_path(host.run_dir or UNKNOWN, 80)}")
    if job is not None:
        _kv(facts, "job", row_text(job, 300))
    training = f"step {fmt_step(host)} · rate {fmt_rate(host.steps_per_hour)} · reward {fmt_number(host.reward)}"
    if host.stalled:
        training += " · STALLED"
    if host.finished:
        training += " · finished"
    _kv(facts, "training", training, "bold yellow" if host.stalled else "")
    ck = UNKNOWN if host.checkpoint_step is None else f"global step {host.checkpoint_step}"
    if host.checkpoint_age_s is not None:
        ck += f", {fmt_duration(host.checkpoint_age_s)} old"
    if host.resume_step is not None:
        ck += f" · resume at step {host.resume_step}"
    _kv(facts, "checkpoint", ck)
    server = {True: "up", False: "DOWN", None: UNKNOWN}[host.server_up]
    _kv(facts, "server", server, "bold red" if host.server_up is False else "")
    _kv(facts, "GPUs", fmt_gpus(host) or UNKNOWN)
    if host.mem_total_bytes is not None:
        _kv(facts, "RAM", f"{fmt_bytes(host.mem_available_bytes)} available of {fmt_bytes(host.mem_total_bytes)}")
    events = "  ".join(f"{row_text(k)} {v}" for k, v in sorted(host.events.items()) if v)
    _kv(facts, "events", events or "none")
    if host.processes:
        procs = "  ".join(
            f"{row_text(p.name)} {'up' if p.up else 'DEAD'} {fmt_bytes(p.rss_bytes) if p.up else ''}".rstrip()
            for p in host.processes
        )
        _kv(facts, "processes", procs)
    if host.budgets_gave_up:
        _kv(facts, "watchdog", "gave up on " + ", ".join(host.budgets_gave_up), "bold red")
    if host.findings:
        findings = Text()
        for i, f in enumerate(host.findings):
            if i:
                findings.append(" · ", style="dim")
            findings.append(SEVERITY_SHORT[f.severity] + " ", style=SEVERITY_STYLE[f.severity])
            findings.append(row_text(f.code) + (f" ×{f.count}" if f.count > 1 else ""))
        _kv(facts, "findings", findings)
    exc = host.exception
    if exc is not None:
        line = Text()
        line.append(row_text(exc.title, 300), style="bold red")
        more = [f"signature {row_text(exc.signature)}"]
        if exc.occurrences:
            more.append(f"{exc.occurrences}×")
        if exc.at is not None:
            more.append(f"last at {fmt_clock(exc.at)}, {fmt_age(exc.at, now)}")
        line.append("\n" + " · ".join(more), style="dim")
        _kv(facts, "exception", line)
    parts.append(facts)
    return Group(*parts)


def group_detail(group: FleetGroup) -> Group:
    head = Text()
    head.append(f"{len(group.hosts)} hosts with the same exception\n", style="bold magenta")
    head.append(row_text(group.title or "", 300), style="bold red")
    head.append(f"\nsignature {row_text(group.signature or UNKNOWN)}", style="dim")
    names = Text("\n" + "  ".join(row_text(h.name) for h in group.hosts))
    return Group(head, names)
