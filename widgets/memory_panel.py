"""Host memory: RAM and swap over time, who is growing, and when the host runs out.

Incident 3 is the reason for the layout: RAM sat just under the workers' emergency-brake line for hours while two
workers leaked. So the RAM graph draws the brake line, each process shows its growth rate next to its size, and
the forecast says in words when memory runs out.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from rlwatch.common.state import MemoryState, ProcessInfo, Series, Snapshot
from rlwatch.widgets.format import clean_text, fmt_bytes, fmt_clock, fmt_duration, shorten_middle
from rlwatch.widgets.graph import TimeGraph, bucket, spark
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


def ram_summary(mem: MemoryState) -> Text:
    """RAM used and free, then (when the workers' brake threshold is known) where the brake starts."""
    line = Text("RAM  ", style="bold", no_wrap=True, end="")
    if mem.total_bytes is None or mem.available_bytes is None:
        line.append("not available", style="dim")
        return line
    used = mem.total_bytes - mem.available_bytes
    pct = 100.0 * used / mem.total_bytes if mem.total_bytes else 0.0
    style = "bold red" if pct >= 95 else "bold yellow" if pct >= 90 else ""
    line.append(f"{fmt_bytes(used)} of {fmt_bytes(mem.total_bytes)} ({pct:.1f}%)", style=style)
    line.append(f"  {fmt_bytes(mem.available_bytes)} free", style="dim")
    if mem.brake_free_bytes is not None:
        below = mem.available_bytes < mem.brake_free_bytes
        line.append("\nbrake ", style="bold")
        line.append(f"fires below {fmt_bytes(mem.brake_free_bytes)} free", style="bold red" if below else "dim")
        if below:
            line.append("  ")
            line.append(" BRAKE ZONE ", style="bold white on red")
    return line


def swap_summary(mem: MemoryState, history: Series, now: float) -> Text:
    """Swap with its last 10 minutes (0-100 %), and the cgroup OOM-kill count."""
    line = Text("swap ", style="bold", no_wrap=True, end="")
    if not mem.swap_total_bytes:
        line.append("none" if mem.swap_total_bytes == 0 else "–", style="dim")
    else:
        line.append(f"{fmt_bytes(mem.swap_used_bytes)} of {fmt_bytes(mem.swap_total_bytes)} ")
        line.append_text(spark(bucket(history, now, SPAN_S, INLINE_COLUMNS), style="magenta"))
    line.append("  OOM kills ", style="dim")
    kills = mem.oom_kills
    line.append("–" if kills is None else str(kills), style="bold red" if kills else "")
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
    return line


def process_line(p: ProcessInfo, history: Series | None, total: int | None, now: float) -> Text:
    """``worker-0 15.1 +520 ▃▄▅▆▇█``: GB now, MB/h growth, and the last 10 minutes on a 0..RAM scale."""
    line = Text(no_wrap=True, end="")
    line.append(f"{shorten_middle(clean_text(p.name), 9):<9}", style="bold" if p.alive else "dim strike")
    line.append(" –    " if p.rss_bytes is None else f" {p.rss_bytes / 1e9:>5.1f}")
    growth = p.rss_growth_bytes_per_hour
    gstyle = "bold red" if growth is not None and growth >= 5e8 else "yellow" if growth and growth >= 1e8 else "dim"
    line.append("     –" if growth is None else f" {growth / 1e6:>+5.0f}", style=gstyle)
    if history is not None and total:
        scaled = Series(history.times, tuple(None if v is None else 100.0 * v / total for v in history.values))
        line.append(" ")
        line.append_text(spark(bucket(scaled, now, SPAN_S, RSS_COLUMNS), style="yellow"))
    return line


class MemoryPanel(Panel):
    def compose(self) -> ComposeResult:
        yield TextBlock(id="mem-summary", classes="body")
        with Horizontal(classes="graphs", id="mem-graphs"):
            yield TimeGraph("RAM used", id="ram-graph", style="yellow")
            yield TextBlock(id="mem-processes", classes="body")

    def data_key(self, snap: Snapshot) -> object:
        return (
            snap.memory,
            snap.processes,
            snap.history.ram_used,
            snap.history.swap_used,
            snap.history.rss,
            snap.limits,
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
                ram_summary(mem),
                swap_summary(mem, snap.history.swap_used, snap.time),
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
        total = snap.memory.total_bytes if snap.memory else None
        head = Text(f"{'process':<9} {'GB':>5} {'MB/h':>5} 10m", style="dim", no_wrap=True)
        rows = [process_line(p, snap.history.rss.get(p.name), total, snap.time) for p in procs[:MAX_PROCESSES]]
        return Text("\n", end="").join([head, *rows])
