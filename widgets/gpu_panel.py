"""GPUs: what each device is doing now, its recent history on a fixed scale, and who holds it.

The holder list is the part incident 4 needed: processes of the live run versus strays left behind by an earlier
run, which ``nvidia-smi`` inside a container does not show, plus the compute mode that turns one stray into a
"device busy" error for everyone else.
"""

from __future__ import annotations

from statistics import fmean

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from rlwatch.common.state import GpuHolder, GpuState, GpuStatus, History, Series, Snapshot
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis import OUTSIDE_MIN_BYTES
from rlwatch.widgets.format import fmt_age, fmt_bytes, fmt_cmdline, fmt_percent, row_text
from rlwatch.widgets.graph import TimeGraph, bucket, spark
from rlwatch.widgets.panel import Panel
from rlwatch.widgets.text_block import TextBlock

INLINE_COLUMNS = 12
INLINE_SPAN_S = 600.0


def short_gpu_name(name: str | None) -> str:
    if not name:
        return "GPU"
    return name.removeprefix("NVIDIA ").removeprefix("Tesla ")


def _mem_percent(g: GpuState) -> float | None:
    if g.mem_used_bytes is None or not g.mem_total_bytes:
        return None
    return 100.0 * g.mem_used_bytes / g.mem_total_bytes


def gpu_line(g: GpuState, history: Series | None, now: float) -> Text:
    """`` 0 ▅▆▇███▇▆▇▇██  97%  61.4/85.5 GB 72%  71°C  612 W``; the history is the last 10 minutes, 0-100 %."""
    line = Text(no_wrap=True, end="")
    line.append(f"{g.index:>2} ", style="bold")
    if g.health is not None and g.health.lost:
        # A lost GPU answers nothing: the last numbers read before would be shown as now. Say it is lost instead.
        line.append("LOST — no reading (the values before it was lost are not current)", style="bold red")
        return line
    values = bucket(history, now, INLINE_SPAN_S, INLINE_COLUMNS) if history is not None else [None] * INLINE_COLUMNS
    line.append_text(spark(values, style="green"))
    line.append(f" {fmt_percent(g.util):>4}", style="bold")
    mem = _mem_percent(g)
    mem_style = "bold red" if mem is not None and mem >= 95 else ""
    used = "–" if g.mem_used_bytes is None else f"{g.mem_used_bytes / 1e9:.1f}"
    line.append(f"  {used}/{fmt_bytes(g.mem_total_bytes)}", style=mem_style)
    line.append(f" {fmt_percent(mem):>4}", style=mem_style or "dim")
    if g.temp_c is not None:
        line.append(f"  {g.temp_c:.0f}°C", style="bold red" if g.temp_c >= 85 else "")
    if g.power_w is not None:
        line.append(f"  {g.power_w:.0f} W", style="dim")
    return line


def health_line(g: GpuState) -> Text | None:
    """What is wrong with a GPU's hardware, in one red or yellow line; None when NVML reports nothing wrong (the
    findings say why and what to do)."""
    h = g.health
    if h is None:
        return None
    if h.lost:
        return Text(f"  GPU{g.index} LOST: {row_text(h.lost, 60)}: drain the node", style="bold red", no_wrap=True)
    bad = []
    if h.ecc_volatile_uncorrected:
        bad.append(f"{h.ecc_volatile_uncorrected} uncorrectable ECC")
    if h.remap_failure:
        bad.append("remap FAILED")
    if h.remap_pending or h.retired_pending:
        bad.append("memory repair pending reset")
    if h.pcie_width is not None and h.pcie_width_max and h.pcie_width < h.pcie_width_max:
        bad.append(f"PCIe x{h.pcie_width}/x{h.pcie_width_max}")
    slow = [r for r in h.clock_events or () if r.startswith("hw_") or r == "sw_thermal"]
    if slow:
        bad.append("throttled " + ",".join(slow))
    if h.xids:
        bad.append("Xid " + ",".join(str(x) for x in dict.fromkeys(e.xid for e in h.xids)))
    if not bad:
        return None
    hard = bool(h.ecc_volatile_uncorrected or h.remap_failure)
    return Text(f"  GPU{g.index} " + "; ".join(bad), style="bold red" if hard else "bold yellow", no_wrap=True)


def summary_line(status: GpuStatus) -> Text:
    """``2x H100 80GB HBM3, compute DEFAULT, nvml``: what the device lines below have in common."""
    gpus = status.gpus
    line = Text(no_wrap=True, end="")
    names = sorted({short_gpu_name(g.name) for g in gpus})
    line.append(f"{len(gpus)}× {' / '.join(names)}", style="bold")
    modes = sorted({g.compute_mode for g in gpus if g.compute_mode})
    line.append("  compute ", style="dim")
    if modes:
        for i, mode in enumerate(modes):
            line.append((", " if i else "") + mode, style="bold yellow" if mode != "DEFAULT" else "")
    else:
        line.append("–")
    line.append(f"  {status.backend}", style="dim")
    if status.error:  # some GPUs report while one is lost, or the driver hangs and the values are stale
        line.append(f"  {row_text(status.error, 120)}", style="bold yellow")
    return line


_TAGS = {
    "run": ("run", "green"),
    "protected": ("prot", "dim"),
    "stray": ("STRAY", "bold white on red"),
    "unknown": ("?", "bold yellow"),
}
_WHY_STYLE = {"run": "dim green", "protected": "dim", "stray": "red", "unknown": "yellow"}


def holder_line(h: GpuHolder, now: float) -> Text:
    """One process holding a device: the run's own, a STRAY, protected, or unknown (?) — each with why (how it
    was recognised as the run's, its positive stray reasons, or why rlwatch cannot tell) on a second line."""
    line = Text(no_wrap=True, end="")
    status = h.status
    tag, style = _TAGS[status]
    line.append(f"{tag:^7}", style=style)
    line.append(f" {h.pid:>7}", style="bold")
    line.append(f" {h.user or '?'}", style="dim")
    gpus = ",".join(map(str, h.gpus))
    # GPUs from NVML's per-process memory are exact; from device nodes only a guess (a CUDA process opens them all).
    line.append(f" gpu{gpus or ' –'}" + ("" if h.attribution == "nvml" or not gpus else "~"))
    line.append(f" {fmt_bytes(h.gpu_mem_bytes)}")
    line.append(f" {fmt_age(h.create_time, now).removesuffix(' ago')} ", style="dim")
    line.append(fmt_cmdline(h.cmdline, 80, full_path=False))
    # Why a holder is not the run's (or may not be) is what a person needs before pressing z; the run's own
    # evidence is in the processes panel and the live-run line, and would only push the GPU charts off the screen.
    why = h.protected or h.reason or (h.evidence if status != "run" else None)
    if why:
        line.append("\n")
        line.append(f"        ↳ {row_text(why, 160)}", style=_WHY_STYLE[status])
    return line


def outside_line(g: GpuState) -> Text:
    """Memory NVML counts on a GPU that no process visible here explains (incident 4 after a container restart)."""
    pids = f" (NVML pid {', '.join(map(str, g.outside_pids[:4]))}, not visible here)" if g.outside_pids else ""
    return Text(
        f"OUTSIDE gpu{g.index} {fmt_bytes(g.outside_bytes)} held outside this container{pids}: a pod restart frees it",
        style="bold yellow",
        no_wrap=True,
        end="",
    )


def no_holders_lines(snap: Snapshot, outside: bool) -> list[Text]:
    """What to say when no holder is listed: not scanned yet, none (and the memory in use that says otherwise), or
    nothing at all without a GPU. Never "no process holds a GPU" beside gigabytes in use: say what was looked at."""
    scan = next((s for s in snap.sources if s.name == "holders"), None)
    status = snap.gpu
    if status is None or not status.available:
        return []  # no GPU here: the line above says why, and nothing can hold one
    if scan is None:
        return [Text("GPU holders: the first scan has not run yet", style="dim", no_wrap=True)]
    if not scan.ok:
        return [Text(f"GPU holders: {row_text(scan.error or 'scan failed', 120)}", style="yellow", no_wrap=True)]
    # A driver keeps a few hundred MB on an idle device: only a device using more than that asks for a holder.
    used = sum(g.mem_used_bytes or 0 for g in snap.gpus if (g.mem_used_bytes or 0) >= OUTSIDE_MIN_BYTES)
    when = f" (scanned {fmt_age(scan.last_sample, snap.time)})" if scan.last_sample is not None else ""
    if used and not outside:
        return [
            Text(
                f"no holder found{when}, yet {fmt_bytes(used)} of GPU memory is in use: scanning again",
                style="yellow",
                no_wrap=True,
            )
        ]
    return [Text(f"no process holds a GPU device{when}", style="dim", no_wrap=True)]


def _is_gpu_node(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("nvidia") and name.removeprefix("nvidia").isdigit()


def merged(series: dict[int, Series]) -> Series:
    """All GPUs' samples in one series, so a graph bucket averages over devices (and time)."""
    times: list[float] = []
    values: list[float | None] = []
    for s in series.values():
        times.extend(s.times)
        values.extend(s.values)
    return Series(tuple(times), tuple(values))


class GpuPanel(Panel):
    def compose(self) -> ComposeResult:
        yield TextBlock(id="gpu-lines", classes="body")
        yield TextBlock(id="gpu-holders", classes="body")
        with Horizontal(classes="graphs", id="gpu-graphs"):
            yield TimeGraph("util", id="gpu-util-graph", style="green")
            yield TimeGraph("memory", id="gpu-mem-graph", style="magenta")

    def data_key(self, snap: Snapshot) -> object:
        h = snap.history
        return (snap.gpu, snap.holders, h.gpu_util, h.gpu_mem)

    def show(self, snap: Snapshot) -> None:
        lines = self.query_one("#gpu-lines", Static)
        holders = self.query_one("#gpu-holders", Static)
        graphs = self.query_one("#gpu-graphs", Horizontal)
        status = snap.gpu
        if status is None or not status.available or not status.gpus:
            reason = "not checked yet" if status is None else (status.error or "no GPUs found")
            lines.update(Text(f"no GPU: {reason}", style="dim", no_wrap=True))
            graphs.display = False
            self.add_class("-empty")
            holders.update(self._holders_text(snap))
            return
        self.remove_class("-empty")
        rows = [summary_line(status)]
        for g in status.gpus:
            rows.append(gpu_line(g, snap.history.gpu_util.get(g.index), snap.time))
            health = health_line(g)
            if health is not None:
                rows.append(health)
        lines.update(Text("\n", end="").join(rows))
        holders.update(self._holders_text(snap))
        # With many devices the per-GPU lines carry each one's history and the graphs (below the holders, which
        # matter more) show the mean over all of them.
        graphs.display = True
        self._show_graphs(snap.history, status.gpus, snap.time)

    def _show_graphs(self, history: History, gpus: tuple[GpuState, ...], now: float) -> None:
        util = self.query_one("#gpu-util-graph", TimeGraph)
        mem = self.query_one("#gpu-mem-graph", TimeGraph)
        if len(gpus) == 1:
            g = gpus[0]
            # A lost GPU's last numbers are history, not now: the graph keeps them, the figure beside it says lost.
            lost = g.health is not None and bool(g.health.lost)
            util.set_data(
                history.gpu_util.get(g.index, Series()),
                now,
                title=f"GPU{g.index} util",
                note=Text("LOST", style="bold red") if lost else Text(fmt_percent(g.util), style="bold"),
            )
            mem.set_data(
                history.gpu_mem.get(g.index, Series()),
                now,
                title=f"GPU{g.index} memory",
                note=Text("LOST", style="bold red") if lost else Text(fmt_percent(_mem_percent(g)), style="bold"),
            )
            return
        live = [g for g in gpus if g.health is None or not g.health.lost]  # a lost GPU's stale numbers are no mean
        utils = [g.util for g in live if g.util is not None]
        mems = [m for m in (_mem_percent(g) for g in live) if m is not None]
        util.set_data(
            merged(history.gpu_util),
            now,
            title=f"util, mean of {len(gpus)}",
            reduce=fmean,
            note=Text(fmt_percent(fmean(utils) if utils else None), style="bold"),
        )
        mem.set_data(
            merged(history.gpu_mem),
            now,
            title=f"memory, mean of {len(gpus)}",
            reduce=fmean,
            note=Text(fmt_percent(fmean(mems) if mems else None), style="bold"),
        )

    def _holders_text(self, snap: Snapshot) -> Text:
        strays = len(snap.zombies)
        unknown = len(snap.unknown_holders)
        n = len(snap.holders)
        subtitle = f"{plural(n, 'holder')} · {plural(strays, 'stray')}" + (f" · {unknown} unknown" if unknown else "")
        if (self.border_subtitle or "") != (subtitle if n else ""):  # setting it repaints the panel, even to the same
            self.border_subtitle = subtitle if n else ""
        self.set_class(strays > 0, "-alert")
        outside = [outside_line(g) for g in snap.gpus if g.outside_bytes and g.outside_bytes >= OUTSIDE_MIN_BYTES]
        if not snap.holders:
            return Text("\n", end="").join([*outside, *no_holders_lines(snap, bool(outside))])
        rank = {"stray": 0, "unknown": 1, "protected": 2, "run": 3}
        order = sorted(snap.holders, key=lambda h: (rank[h.status], h.pid))
        return Text("\n", end="").join([*outside, *(holder_line(h, snap.time) for h in order)])
