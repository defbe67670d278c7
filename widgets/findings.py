"""The findings banner: what is wrong, in words, most severe first, each with what fixes it.

Findings are the diagnosis of the whole snapshot, so they sit above every panel. Each one that an action fixes
ends with its key (``z kill zombies``); each one that a command fixes, with the command. Sources that fail are
listed after them, dimmed: a panel that shows nothing because its source is broken must say so.

On a short terminal, or above a maximised panel, the banner is one line: the worst finding cut to fit, its key or
command kept whole, and how many more there are (``d`` lists them all). It never clips a sentence at the third
line and loses the key at its end.
"""

from __future__ import annotations

import io
import os
import shlex
from pathlib import Path

from rich.console import Console
from rich.text import Text

from rlwatch.common.state import Finding, Snapshot, SourceStatus
from rlwatch.engine.diagnosis.verdict import order_key
from rlwatch.widgets.format import SEVERITY_LABEL, SEVERITY_STYLE, clean_text, fmt_clock
from rlwatch.widgets.text_block import TextBlock

MESSAGE_LIMIT = 600
OWN_LINE = frozenset({"gpu", "server"})

# The dashboard's action keys, by action (the same table as tui/keys.py, which this layer cannot import).
ACTION_KEY: dict[str, str] = {
    "restart-workers": "w",
    "kill-zombies": "z",
    "resume": "r",
    "restart-server": "s",
}
ACTION_WORDS: dict[str, str] = {
    "restart-workers": "restart workers",
    "kill-zombies": "kill zombies",
    "resume": "resume",
    "restart-server": "restart server",
}
KEY_STYLE = "bold black on cyan"
_MEASURE = Console(file=io.StringIO(), width=500, legacy_windows=False)  # wraps text to measure it, prints nothing


def ordered(findings: tuple[Finding, ...]) -> list[Finding]:
    """The findings in the verdict's order (engine/diagnosis/verdict: a restart loop first at its severity), so the
    banner's first line is the verdict's headline, carrying its one remedy."""
    return sorted(findings, key=order_key)


def command_line(command: str, run_dir: str | None) -> str:
    """An ``rlwatch`` command as a person should type it here: with the run directory, unless it is where they are."""
    if not run_dir or not command.startswith("rlwatch "):
        return command
    try:
        here = Path(run_dir).resolve() == Path(os.getcwd()).resolve()
    except OSError:
        here = False
    if here:
        return command
    words = command.split(" ")
    # ``rlwatch act kill-zombies --pid 5``: the directory goes after the action's name, before its options.
    at = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
    return " ".join([*words[:at], shlex.quote(run_dir), *words[at:]])


def fix_text(f: Finding, run_dir: str | None = None, *, readonly: bool = False) -> Text | None:
    """``z kill zombies`` for a finding an action fixes (its key on this screen); ``$ rlwatch act rearm …`` for one a
    command fixes; None for one neither does. Read-only, the action is said as the command to run elsewhere."""
    out = Text(no_wrap=True, end="")
    if f.action in ACTION_KEY and not readonly:
        out.append(f" {ACTION_KEY[f.action]} ", style=KEY_STYLE)
        out.append(f" {ACTION_WORDS[f.action]}", style="bold")
        return out
    command = f.fix_command()
    if command is None:
        if f.fix is None:
            return None
        out.append(clean_text(f.fix), style="bold")  # what fixes it where no key or command does
        return out
    out.append("$ ", style="dim")
    out.append(clean_text(command_line(command, run_dir)), style="bold")
    return out


def findings_text(
    findings: tuple[Finding, ...],
    sources: tuple[SourceStatus, ...] = (),
    now: float | None = None,
    *,
    run_dir: str | None = None,
    readonly: bool = False,
    width: int | None = None,
) -> Text:
    """Every finding, whole, with its key or command after it; then the sources that fail. With ``width``, a key or
    command that would be split at the end of a line starts the next one instead (` w ` at one line's end and
    `restart workers` at the next's start reads as nothing)."""
    out = Text(end="")
    shown = ordered(findings)
    if not shown:
        out.append("✓ No problems found", style="bold green")
    for i, f in enumerate(shown):
        if i:
            out.append("\n")
        one = Text(end="")
        one.append(f"● {SEVERITY_LABEL[f.severity]:<8} ", style=SEVERITY_STYLE[f.severity])
        one.append(clean_text(f.message, MESSAGE_LIMIT))
        if f.since is not None:
            one.append(f"  (since {fmt_clock(f.since, now=now)})", style="dim")
        fix = fix_text(f, run_dir, readonly=readonly)
        if fix is not None:
            arrow = Text("  → ", style="dim", end="")
            arrow.append_text(fix)
            if width is not None and fix.cell_len < width - 12:
                last = _last_line_cells(one, width)
                if last + arrow.cell_len > width:
                    one.append("\n" + " " * 9)  # under the message, past the severity
                    arrow = Text("→ ", style="dim", end="")
                    arrow.append_text(fix)
            one.append_text(arrow)
        out.append_text(one)
    broken = broken_sources(sources, bool(shown))
    if broken:
        out.append("\n")
        out.append(
            "sources: " + "; ".join(f"{clean_text(s.name)}: {clean_text(s.error or '', 120)}" for s in broken),
            style="dim",
        )
    return out


def _last_line_cells(text: Text, width: int) -> int:
    """How many cells the last line of ``text`` takes once wrapped at ``width`` (as the banner wraps it)."""
    lines = text.wrap(_MEASURE, width)
    return lines[-1].cell_len if lines else 0


def broken_sources(sources: tuple[SourceStatus, ...], any_finding: bool) -> list[SourceStatus]:
    """Broken sources are listed when nothing else is (so "no problems" never hides a blind spot), and always for
    sources without a panel line of their own (the GPU and server panels already show their errors)."""
    return [s for s in sources if not s.ok and s.error and (not any_finding or s.name not in OWN_LINE)]


def compact_text(
    findings: tuple[Finding, ...],
    sources: tuple[SourceStatus, ...],
    width: int,
    *,
    run_dir: str | None = None,
    readonly: bool = False,
) -> Text:
    """One line of ``width`` cells: the worst finding cut to fit, its key or command whole, and how many more."""
    shown = ordered(findings)
    broken = broken_sources(sources, bool(shown))
    line = Text(no_wrap=True, end="")
    if not shown:
        line.append("✓ No problems found", style="bold green")
        if broken:
            line.append(f"  · {len(broken)} source{'s' if len(broken) != 1 else ''} not available (d)", style="dim")
        line.truncate(width, overflow="ellipsis")
        return line
    first = shown[0]
    tail = Text(no_wrap=True, end="")
    fix = fix_text(first, run_dir, readonly=readonly)
    if fix is not None:
        tail.append(" → ", style="dim")
        tail.append_text(fix)
    more = len(shown) - 1 + (1 if broken else 0)
    if more:
        tail.append(f"  +{more} more (d)", style="bold")
    head = Text(f"● {SEVERITY_LABEL[first.severity]} ", style=SEVERITY_STYLE[first.severity], no_wrap=True, end="")
    room = width - head.cell_len - tail.cell_len
    if room < 12 and fix is not None and fix.cell_len > 8:
        # Too narrow for the command too: keep the key (or the command's start) and what is left of the message.
        tail = Text(no_wrap=True, end="")
        tail.append(" → ", style="dim")
        tail.append_text(fix)
        tail.truncate(max(8, width // 3), overflow="ellipsis")
        if more:
            tail.append(f" +{more}", style="bold")
        room = width - head.cell_len - tail.cell_len
    message = Text(clean_text(first.message, MESSAGE_LIMIT), no_wrap=True, end="")
    if room > 0:
        message.truncate(room, overflow="ellipsis")
        line.append_text(head)
        line.append_text(message)
    else:
        line.append_text(head)
    line.append_text(tail)
    line.truncate(width, overflow="ellipsis")
    return line


def one_line_each(
    findings: tuple[Finding, ...],
    sources: tuple[SourceStatus, ...],
    width: int,
    rows: int,
    *,
    run_dir: str | None = None,
    readonly: bool = False,
) -> Text:
    """Up to ``rows`` lines: each finding on one line, its key or command kept whole; the last line says how many
    more there are when they do not all fit."""
    shown = ordered(findings)
    broken = broken_sources(sources, bool(shown))
    fit = shown if len(shown) + (1 if broken else 0) <= rows else shown[: max(1, rows - 1)]
    lines: list[Text] = []
    for i, f in enumerate(fit):
        rest = len(shown) - len(fit) + (1 if broken else 0) if i == len(fit) - 1 and len(fit) < len(shown) else 0
        lines.append(compact_text((f,), (), width, run_dir=run_dir, readonly=readonly))
        if rest:
            lines.append(Text(f"  +{rest} more: d lists every finding", style="bold", no_wrap=True, end=""))
    if broken and len(fit) == len(shown):
        srcs = "; ".join(f"{clean_text(s.name)}: {clean_text(s.error or '', 120)}" for s in broken)
        src_line = Text("sources: " + srcs, style="dim", no_wrap=True, end="")
        src_line.truncate(width, overflow="ellipsis")
        lines.append(src_line)
    return Text("\n", end="").join(lines)


class FindingsBanner(TextBlock):
    """The banner. ``rows`` (set by the screen from the terminal's height, 1 over a maximised panel) bounds it: the
    findings in full when they fit, else one line each with their keys, else the worst one and a count."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._key: object = None
        self.snapshot: Snapshot | None = None
        self.readonly = False
        self.rows = 5

    @property
    def compact(self) -> bool:
        return self.rows <= 1

    def show(self, snap: Snapshot) -> None:
        self.snapshot = snap
        self._draw()
        worst = snap.worst
        self.set_class(worst is None, "-ok")
        self.set_class(worst is not None and worst.rank == 0, "-critical")
        self.set_class(worst is not None and worst.rank == 1, "-warning")

    def set_rows(self, rows: int) -> None:
        if rows != self.rows:
            self.rows = rows
            self.set_class(rows <= 1, "-compact")
            self.styles.max_height = rows
            self._draw()

    def set_compact(self, compact: bool) -> None:
        self.set_rows(1 if compact else 5)

    def on_resize(self) -> None:
        # Drawn once laid out: an update made while the resize is handled did not always lay the banner out again.
        self.call_after_refresh(self._draw)

    def _draw(self) -> None:
        snap = self.snapshot
        if snap is None:
            return
        # Not laid out yet: drawn for the screen's width less the border and padding (the first resize redraws it).
        width = max(20, self.content_size.width or self.app.size.width - 3)
        key = (snap.findings, snap.sources, self.rows, width, self.readonly)
        if key == self._key:
            return
        self._key = key
        kw = {"run_dir": snap.run_dir, "readonly": self.readonly}
        if self.rows <= 1:
            self.update(compact_text(snap.findings, snap.sources, width, **kw))  # type: ignore[arg-type]
            return
        full = findings_text(snap.findings, snap.sources, snap.time, width=width, **kw)  # type: ignore[arg-type]
        if len(full.wrap(self.app.console, width)) <= self.rows:
            self.update(full)
        else:
            self.update(one_line_each(snap.findings, snap.sources, width, self.rows, **kw))  # type: ignore[arg-type]
