"""Host memory: RAM and swap over time, who is growing, and when the host runs out.

Incident 3 is the reason for the layout: RAM sat just under the workers' emergency-brake line for hours while two
workers leaked. So the RAM graph draws the brake line, each process shows its growth rate next to its size, and
the forecast says in words when memory runs out.
"""

from __future__ import annotations

import re

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from rlwatch.common.state import KernelLogState, LogLine, MemoryState, ProcessInfo, Series, Snapshot
from rlwatch.widgets.format import fmt_bytes, fmt_clock, fmt_duration, row_text, shorten_middle
from rlwatch.widgets.graph import TimeGraph, bucket, fit_span, spark
from rlwatch.widgets.panel import Panel
from rlwatch.widgets.text_block import TextBlock

MAX_PROCESSES = 8
SPAN_S = 600.0
INLINE_COLUMNS = 12
RSS_COLUMNS = 6


def brake_line_percent(mem: MemoryState) -> float | None:
    """Used-RAM percentage at which the brake starts firing (free memory below its threshold)."""
    if mem.brake_free_bytes is None or not mem.total_bytes:
        return None
    return max(0.0, 100.0 * (1 - mem.brake_free_bytes / mem.total_bytes))


def limits_line(snap: Snapshot) -> Text | None:
    """The container's own memory limit and a small /dev/shm, when either is there to see (the findings say more)."""
    mem, lim = snap.memory, snap.limits
    parts = []
    if mem is not None and mem.cgroup_limit_bytes:
        held = mem.cgroup_working_set_bytes or mem.cgroup_usage_bytes
        parts.append(f"limit {fmt_bytes(mem.cgroup_limit_bytes)} ({fmt_bytes(held)} used)")
    if lim is not None and lim.shm_total_bytes is not None and lim.frameworks and lim.shm_total_bytes < 1024**3:
        parts.append(f"/dev/shm only {fmt_bytes(lim.shm_total_bytes)}")
    if not parts:
        return None
    return Text("pod  " + "  ".join(parts), style="bold yellow", no_wrap=True, end="")


_BRAKE_READING = re.compile(r"(\d+(?:\.\d+)?)\s*([kKMGT])i?B\s+(?:free|available)\b")
_UNITS = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def brake_reading(snap: Snapshot) -> tuple[float, LogLine] | None:
    """The free memory the brake itself last reported (``only 1.8 GB free``) and its line, if its lines say one."""
    ev = snap.events.get("emergency_brake")
    if ev is None or not ev.recent:
        return None
    line = ev.recent[-1]
    m = _BRAKE_READING.search(line.text)
    if m is None:
        return None
    return float(m.group(1)) * _UNITS[m.group(2)], line


def ram_summary(mem: MemoryState, reading: tuple[float, LogLine] | None = None, now: float | None = None) -> Text:
    """RAM used and free, then (when the workers' brake threshold is known) where the brake starts, and what the
    brake's own last line said it saw: the banner's brake finding rests on that number, not on this host's."""
    line = Text("RAM  ", style="bold", no_wrap=True, end="")
    if mem.total_bytes is None or mem.available_bytes is None:
        line.append("not available", style="dim")
        return line
    used = mem.total_bytes - mem.available_bytes
    pct = 100.0 * used / mem.total_bytes if mem.total_bytes else 0.0
    style = "bold red" if pct >= 95 else "bold yellow" if pct >= 90 else ""
    line.append(f"{fmt_bytes(used)} of {fmt_bytes(mem.total_bytes)} ({pct:.1f}%)", style=style)
    line.append(f"  {fmt_bytes(mem.available_bytes)} free", style="dim")
    if mem.brake_free_bytes is not None or reading is not None:
        below = mem.brake_free_bytes is not None and mem.available_bytes < mem.brake_free_bytes
        line.append("\nbrake ", style="bold")
        if mem.brake_free_bytes is not None:
            line.append(f"fires below {fmt_bytes(mem.brake_free_bytes)} free", style="bold red" if below else "dim")
        own = Text(no_wrap=True, end="")
        if reading is not None:
            seen, at = reading
            own_below = mem.brake_free_bytes is not None and seen < mem.brake_free_bytes
            when = f" at {fmt_clock(at.time, now=now)}" if at.time is not None else ""
            own.append("\n  its last line saw ", style="dim")
            own.append(f"{fmt_bytes(seen)} free{when}", style="bold red" if own_below else "")
            if own_below and not below:
                # The zone by the brake's own word only: said as the log's, never the badge this host's RAM earns.
                own.append(" (its brake zone, not this host's)", style="yellow")
            elif abs(seen - mem.available_bytes) > max(1e9, 0.25 * mem.available_bytes):
                own.append(" (not this host's figure)", style="yellow")
        if below:
            line.append("  ")
            line.append(" BRAKE ZONE ", style="bold white on red")
        line.append_text(own)
    return line


def oom_kills(mem: MemoryState, kernel: KernelLogState | None) -> tuple[int | None, str | None]:
    """How many OOM kills, and whose word it is: the kernel log's when it saw more than the cgroup's counter (a
    cgroup of another level, a counter reset, none readable), so the panel never says 0 under a kill the banner
    names."""
    said = sum(1 for e in kernel.events if e.kind == "oom_kill") if kernel is not None else 0
    counters = [n for n in (mem.oom_kills, mem.cgroup_oom_events) if n is not None]
    counted = max(counters) if counters else None
    if said and (counted is None or said > counted):
        return said, "kernel log"
    return counted, None


def swap_summary(mem: MemoryState, history: Series, now: float, kernel: KernelLogState | None = None) -> Text:
    """Swap with its last 10 minutes (0-100 %), and the OOM-kill count (the cgroup's, or the kernel log's)."""
    line = Text("swap ", style="bold", no_wrap=True, end="")
    if not mem.swap_total_bytes:
        line.append("none" if mem.swap_total_bytes == 0 else "–", style="dim")
    else:
        line.append(f"{fmt_bytes(mem.swap_used_bytes)} of {fmt_bytes(mem.swap_total_bytes)} ")
        line.append_text(spark(bucket(history, now, SPAN_S, INLINE_COLUMNS), style="magenta"))
    line.append("  OOM kills ", style="dim")
    kills, whose = oom_kills(mem, kernel)
    line.append("–" if kills is None else str(kills), style="bold red" if kills else "")
    if whose:
        line.append(f" ({whose})", style="dim")
    return line


def forecast_line(mem: MemoryState, now: float) -> Text:
    line = Text("forecast ", style="bold", no_wrap=True, end="")
    at = mem.forecast_exhausted_at
    if at is None:
        line.append("RAM is not running out at the current trend", style="dim")
        return line
    left = at - now
    style = "bold red" if left < 3 * 3600 else "bold yellow"
    line.append(f"RAM exhausted in ~{fmt_duration(left)} at {fmt_clock(at, seconds=False)}", style=style)
    if mem.forecast_from:  # the processes that grow, as the leak findings say: the same figure
        line.append(f" ({row_text(mem.forecast_from)})", style="dim")
    return line


def short_bytes(n: float | None, *, signed: bool = False) -> str:
    """Four or five cells in a unit that fits: ``25M``, ``512k``, ``15.1G``; never ``0.0`` for a 25 MB process."""
    if n is None:
        return "–"
    sign = ("+" if n >= 0 else "-") if signed else ("-" if n < 0 else "")
    v = abs(n)
    if v < 500:
        return "0"
    if v < 1e6:
        return f"{sign}{v / 1e3:.0f}k"
    if v < 1e9:
        return f"{sign}{v / 1e6:.0f}M"
    if v < 1e12:
        return f"{sign}{v / 1e9:.1f}G"
    return f"{sign}{v / 1e12:.1f}T"


def process_line(p: ProcessInfo, history: Series | None, now: float) -> Text:
    """``worker-0  15.1G  +520M ▃▄▅▆▇█``: RSS now, growth per hour, and the last 10 minutes from zero to its own
    peak (on a scale of the whole host's RAM a 25 MB worker leaking to 400 MB is a flat line)."""
    line = Text(no_wrap=True, end="")
    line.append(f"{shorten_middle(row_text(p.name), 9):<9}", style="bold" if p.alive else "dim strike")
    line.append(f" {short_bytes(p.rss_bytes):>6}")
    growth = p.rss_growth_bytes_per_hour
    gstyle = "bold red" if growth is not None and growth >= 5e8 else "yellow" if growth and growth >= 1e8 else "dim"
    line.append(f" {short_bytes(growth, signed=True) if growth is not None else '–':>6}", style=gstyle)
    if history is not None:
        values = [v for v in history.values if v is not None]
        peak = max(values, default=0.0)
        if peak > 0 and peak - min(values) < 0.05 * peak:
            peak *= 2  # flat: a level line half way up, not full bars that read as "high"
        if peak > 0:
            line.append(" ")
            # the history so far, on the round window that holds it (1m, 2m, 5m, 10m), not squeezed into a column
            span = fit_span(history, now, SPAN_S)
            line.append_text(spark(bucket(history, now, span, RSS_COLUMNS), lo=0.0, hi=peak, style="yellow"))
    return line


class MemoryPanel(Panel):
    def compose(self) -> ComposeResult:
        yield TextBlock(id="mem-summary", classes="body")
        with Horizontal(classes="graphs", id="mem-graphs"):
            yield TimeGraph("RAM used", id="ram-graph", style="yellow")
            yield TextBlock(id="mem-processes", classes="body")

    def data_key(self, snap: Snapshot) -> object:
        brake = snap.events.get("emergency_brake")
        return (
            snap.memory,
            snap.processes,
            snap.history.ram_used,
            snap.history.swap_used,
            snap.history.rss,
            snap.limits,
            brake.recent[-1:] if brake is not None else None,
            snap.kernel.events if snap.kernel is not None else None,
        )

    def show(self, snap: Snapshot) -> None:
        summary = self.query_one("#mem-summary", Static)
        graph = self.query_one("#ram-graph", TimeGraph)
        mem = snap.memory
        if mem is None:
            summary.update(Text("memory: not available", style="dim"))
            graph.display = False
        else:
            graph.display = True
            lines = [
                ram_summary(mem, brake_reading(snap), snap.time),
                swap_summary(mem, snap.history.swap_used, snap.time, snap.kernel),
                forecast_line(mem, snap.time),
            ]
            limits = limits_line(snap)
            if limits is not None:
                lines.append(limits)
            summary.update(Text("\n", end="").join(lines))
            ram_now = None
            if mem.total_bytes and mem.available_bytes is not None:
                ram_now = 100.0 * (1 - mem.available_bytes / mem.total_bytes)
            note = Text("–" if ram_now is None else f"{ram_now:.1f}%", style="bold")
            threshold = brake_line_percent(mem)
            if threshold is not None:
                note.append(" ╌ brake", style="red")
            graph.set_data(snap.history.ram_used, snap.time, threshold=threshold, note=note)
        self.query_one("#mem-processes", Static).update(self._processes(snap))

    def _processes(self, snap: Snapshot) -> Text:
        procs = sorted((p for p in snap.processes if p.rss_bytes is not None), key=lambda p: -(p.rss_bytes or 0))
        if not procs:
            return Text("processes: none found", style="dim", no_wrap=True)
        head = Text(f"{'process':<9} {'RSS':>6} {'per h':>6} 10m", style="dim", no_wrap=True)
        rows = [process_line(p, snap.history.rss.get(p.name), snap.time) for p in procs[:MAX_PROCESSES]]
        return Text("\n", end="").join([head, *rows])
