"""Checkpoints and the resume point: what is saved, how old it is, and where a resume would start.

After incident 1 the people had to work out by hand that a resume starts at global step 1870 (the step after the
last completed one, rolled over into the next epoch). The recover record already carries that; this section says
it in one line, next to the checkpoint's age and the free space on the volume it is written to.
"""

from __future__ import annotations

from rich.text import Text

from rlwatch.common.state import CheckpointState, DiskState, RecoverState, Snapshot, TimelineEntry
from rlwatch.engine.diagnosis import when_text
from rlwatch.widgets.format import basename, fmt_age, fmt_bytes, fmt_clock, row_text, shorten_path
from rlwatch.widgets.text_block import TextBlock

TIMELINE_SHOWN = 4


def checkpoint_lines(cp: CheckpointState | None, now: float) -> Text:
    """The newest checkpoint's name, then its age and size (the name is long, the age must not be cut off)."""
    line = Text("checkpoint ", style="bold", no_wrap=True, end="")
    if cp is None or cp.latest is None:
        line.append("none found", style="dim")
        return line
    latest = cp.latest
    line.append(basename(latest.path), style="bold")
    line.append("\n  saved ", style="dim")
    line.append(fmt_age(latest.saved_at, now))
    if latest.saved_at is not None:
        line.append(f" ({fmt_clock(latest.saved_at, now=now)})", style="dim")
    if latest.size_bytes is not None:
        line.append(f"  {fmt_bytes(latest.size_bytes)}")
    line.append(f"  {cp.count} kept", style="dim")
    return line


def resume_line(rec: RecoverState | None) -> Text:
    line = Text("resume ", style="bold", no_wrap=True, end="")
    if rec is None:
        line.append("no recover info", style="dim")
        return line
    line.append(f"starts at global step {rec.resume_global_step}", style="bold green")
    line.append(f" (epoch {rec.resume_epoch}, step {rec.resume_epoch_step})")
    return line


def disk_line(disk: DiskState | None) -> Text | None:
    if disk is None:
        return None
    line = Text("disk ", style="bold", no_wrap=True, end="")
    line.append(shorten_path(disk.path, 30), style="dim")
    low = disk.free_bytes is not None and disk.free_bytes < 10e9
    line.append(f"  {fmt_bytes(disk.free_bytes)} free", style="bold red" if low else "")
    line.append(f" of {fmt_bytes(disk.total_bytes)}", style="dim")
    return line


def timeline_text(entries: tuple[TimelineEntry, ...], now: float | None = None) -> Text | None:
    if not entries:
        return None
    out = Text("timeline", style="bold", no_wrap=True, end="")
    for e in entries[-TIMELINE_SHOWN:]:
        out.append("\n")
        when = (
            when_text(e.time, e.by, True) if e.approximate else fmt_clock(e.time, now=now)
        )  # undated: bounds, never a guess
        out.append(f" {when} ", style="cyan")
        out.append(row_text(e.text, 200))
    return out


def checkpoint_text(snap: Snapshot) -> Text:
    rows: list[Text] = [checkpoint_lines(snap.checkpoint, snap.time), resume_line(snap.recover)]
    for extra in (disk_line(snap.disk), timeline_text(snap.timeline, snap.time)):
        if extra is not None:
            rows.append(extra)
    return Text("\n", end="").join(rows)


class CheckpointSection(TextBlock):
    """The checkpoint part of the run panel."""

    def show(self, snap: Snapshot) -> None:
        self.update(checkpoint_text(snap))
