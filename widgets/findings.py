"""The findings banner: what is wrong, in words, most severe first, each with what fixes it.

Findings are the diagnosis of the whole snapshot, so they sit above every panel. Each one that an action fixes
ends with its key (``z kill zombies``); each one that a command fixes, with the command. Sources that fail are
listed after them, dimmed: a panel that shows nothing because its source is broken must say so.

On a short terminal the banner is two lines, above a maximised panel one: the worst finding's message cut to fit,
its key, command or remedy in words kept whole at the end, and how many more there are (``d`` lists them all); the
message gives way, never the remedy. Taller, the findings show in full when they fit, else the headline with as
much of its message as its share of the rows holds, then the others one line each. It never clips a sentence at
the last line and loses the key at its end.
"""

from __future__ import annotations

import io
import os
import shlex
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from rlwatch.common.state import Finding, Snapshot, SourceStatus
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.verdict import order_key
from rlwatch.widgets.format import SEVERITY_LABEL, SEVERITY_STYLE, fmt_clock, row_text
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


def ordered_findings(findings: tuple[Finding, ...]) -> list[Finding]:
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
        out.append(row_text(f.fix), style="bold")  # what fixes it where no key or command does
        return out
    out.append("$ ", style="dim")
    out.append(row_text(command_line(command, run_dir)), style="bold")
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
    shown = ordered_findings(findings)
    if not shown:
        out.append("✓ No problems found", style="bold green")
    for i, f in enumerate(shown):
        if i:
            out.append("\n")
        one = Text(end="")
        one.append(f"● {SEVERITY_LABEL[f.severity]:<8} ", style=SEVERITY_STYLE[f.severity])
        one.append(row_text(f.message, MESSAGE_LIMIT))
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
            "sources: " + "; ".join(f"{row_text(s.name)}: {row_text(s.error or '', 120)}" for s in broken),
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


def _tail(fix: Text | None, more: int) -> Text:
    """`` → z  kill zombies  +2 more (d)``: what goes whole at the end of a finding cut to fit."""
    tail = Text(no_wrap=True, end="")
    if fix is not None:
        tail.append(" → ", style="dim")
        tail.append_text(fix)
    if more:
        tail.append(f"  +{more} more (d)", style="bold")
    return tail


def _wrap_words(text: str, first: int, rest: int) -> list[str]:
    """``text`` cut into lines at spaces: the first ``first`` cells wide, the others ``rest``; a word longer than a
    line (a path) is split where the line ends."""
    lines: list[str] = []
    line = ""
    room = first
    for whole in text.split(" "):
        word = whole
        candidate = f"{line} {word}" if line else word
        if cell_len(candidate) <= room:
            line = candidate
            continue
        if line:
            lines.append(line)
            room = rest
            line = ""
        while cell_len(word) > room:  # a word longer than a whole line
            cut = _cells_prefix(word, room)
            lines.append(cut)
            word = word[len(cut) :]
            room = rest
        line = word
    lines.append(line)
    return lines


def _cells_prefix(text: str, cells: int) -> str:
    """The longest start of ``text`` that takes at most ``cells`` cells (at least one character)."""
    n = 0
    for i, ch in enumerate(text):
        n += cell_len(ch)
        if n > cells:
            return text[: max(1, i)]
    return text


def _cut(text: str, cells: int) -> str:
    """``text`` cut to ``cells`` cells, at a space where one is near, ending with ``…``."""
    if cell_len(text) <= cells:
        return text
    if cells <= 1:
        return "…"[:cells]
    head = _cells_prefix(text, cells - 1)
    space = head.rfind(" ")
    if space >= len(head) - 12 and space > 0:
        head = head[:space]
    return head.rstrip(" ,;:") + "…"


def fitted_text(
    f: Finding,
    width: int,
    lines: int,
    *,
    more: int = 0,
    run_dir: str | None = None,
    readonly: bool = False,
) -> Text:
    """One finding in at most ``lines`` lines of ``width`` cells: its severity, as much of its message as fits, and
    at the end what fixes it (its key, command or words) whole, then how many more findings there are. The message
    gives way, never the remedy; only a remedy longer than a whole line is cut."""
    head = Text(f"● {SEVERITY_LABEL[f.severity]} ", style=SEVERITY_STYLE[f.severity], no_wrap=True, end="")
    fix = fix_text(f, run_dir, readonly=readonly)
    message = row_text(f.message, MESSAGE_LIMIT)
    count = Text(f"  +{more} more (d)", style="bold", no_wrap=True, end="") if more else Text(end="")
    tail = _tail(fix, 0)
    tail.append_text(count)
    if lines == 1:
        return _one_line(head, message, fix, more, width)
    if count and tail.cell_len > width and fix is not None and _tail(fix, 0).cell_len <= width + 1:
        # A long remedy (a command holding the run directory): the count ends the first line, the remedy has the last.
        first = width - head.cell_len - count.cell_len
        words = _wrap_words(message, first, width)
        keep = words[: lines - 1]
        if len(words) > len(keep):
            room = first if len(keep) == 1 else width
            keep[-1] = _cut(keep[-1] + " " + " ".join(words[len(keep) :]), room)
        out = [Text(w, no_wrap=True, end="") for w in keep]
        out[0].append_text(count)
        out.append(_own_line(_tail(fix, 0)))
        return _joined(head, out, width)
    words = _wrap_words(message, width - head.cell_len, width)
    if len(words) <= lines:
        last = words[-1]
        if cell_len(last) + tail.cell_len <= width - (head.cell_len if len(words) == 1 else 0):
            out = [Text(w, no_wrap=True, end="") for w in words]
            out[-1].append_text(tail)
            return _joined(head, out, width)
        if len(words) < lines and tail.cell_len <= width + 1:
            out = [Text(w, no_wrap=True, end="") for w in words]
            out.append(_own_line(tail))
            return _joined(head, out, width)
    # Cut the message: its lines up to the last, then on the last as much as fits before the remedy.
    keep = words[: lines - 1]
    rest = " ".join(words[lines - 1 :])
    room = width - tail.cell_len
    if room >= 8:
        out = [Text(w, no_wrap=True, end="") for w in keep]
        final = Text(_cut(rest, room), no_wrap=True, end="")
        final.append_text(tail)
        out.append(final)
    else:  # the remedy takes the last line of its own; the message ends on the line before it
        keep = words[: lines - 1]
        keep[-1] = _cut(keep[-1] + " " + rest, width - (head.cell_len if lines == 2 else 0))
        out = [Text(w, no_wrap=True, end="") for w in keep]
        out.append(_own_line(tail))
    return _joined(head, out, width)


def _one_line(head: Text, message: str, fix: Text | None, more: int, width: int) -> Text:
    """The one-line form (over a maximised panel, and each other finding in a full banner): the severity, the
    message cut to what is left, the remedy whole, the count. Where the remedy leaves no room for even the severity's
    word, the dot of its colour stands for it; only a remedy wider than the line itself is cut, at its end."""
    tail = _tail(fix, more)
    if more and width - head.cell_len - tail.cell_len < 16:
        tail = _tail(fix, 0)  # the count in short (``+2``): the remedy and a few words of the message first
        tail.append(f"  +{more}", style="bold")
    room = width - head.cell_len - tail.cell_len
    line = head.copy()
    if room >= 2:
        line.append(_cut(message, room))
        line.append_text(tail)
    else:
        line = Text("● ", style=head.style, no_wrap=True, end="")
        line.append_text(_own_line(tail)[2:] if fix is not None else _own_line(tail))  # without its arrow
    line.truncate(width, overflow="ellipsis")
    return line


def _joined(head: Text, out: list[Text], width: int) -> Text:
    """The lines of a finding, the severity before the first, each cut at ``width`` (none is wider but a remedy
    longer than a whole line)."""
    line0 = head.copy()
    line0.append_text(out[0])
    out[0] = line0
    for line in out:
        line.truncate(width, overflow="ellipsis")
    return Text("\n", end="").join(out)


def _own_line(tail: Text) -> Text:
    """The remedy on a line of its own: ``→ z  kill zombies  +2 more (d)``."""
    line = Text(no_wrap=True, end="")
    line.append_text(tail[1:] if tail.plain.startswith(" ") else tail)
    return line


def compact_text(
    findings: tuple[Finding, ...],
    sources: tuple[SourceStatus, ...],
    width: int,
    *,
    run_dir: str | None = None,
    readonly: bool = False,
    lines: int = 1,
) -> Text:
    """The worst finding in ``lines`` lines (one by default) of ``width`` cells: its message cut to fit, its key or
    command whole, and how many more there are."""
    shown = ordered_findings(findings)
    broken = broken_sources(sources, bool(shown))
    if not shown:
        line = Text(no_wrap=True, end="")
        line.append("✓ No problems found", style="bold green")
        if broken:
            line.append(f"  · {plural(len(broken), 'source')} not available (d)", style="dim")
        line.truncate(width, overflow="ellipsis")
        return line
    more = len(shown) - 1 + (1 if broken else 0)
    return fitted_text(shown[0], width, lines, more=more, run_dir=run_dir, readonly=readonly)


def headline_first(
    findings: tuple[Finding, ...],
    sources: tuple[SourceStatus, ...],
    width: int,
    rows: int,
    *,
    run_dir: str | None = None,
    readonly: bool = False,
) -> Text:
    """Up to ``rows`` lines when the findings in full do not fit: the headline (the verdict's finding) with as much of
    its message as its share of the rows holds and its remedy whole, then the others one line each, and how many more
    there are. A headline whose remedy is in its words (the NaN loss's "resume from step 10") is read whole where it
    fits, instead of being cut to one line like the rest."""
    shown = ordered_findings(findings)
    broken = broken_sources(sources, bool(shown))
    others = len(shown) - 1 + (1 if broken else 0)
    if not shown or rows <= 1:
        return compact_text(findings, sources, width, run_dir=run_dir, readonly=readonly)
    if others == 0 or rows == 2:
        return compact_text(findings, sources, width, run_dir=run_dir, readonly=readonly, lines=rows)
    budget = min(rows - 1, max(2, rows - others))
    out: list[Text] = list(
        fitted_text(shown[0], width, budget, run_dir=run_dir, readonly=readonly).split("\n", allow_blank=True)
    )
    left = rows - len(out)
    rest: list[Finding] = shown[1:]
    fit = rest if len(rest) + (1 if broken else 0) <= left else rest[: left - 1]
    for f in fit:
        out.append(fitted_text(f, width, 1, run_dir=run_dir, readonly=readonly))
    unshown = len(rest) - len(fit) + (1 if broken else 0)
    if unshown and len(fit) < len(rest):
        out.append(Text(f"  +{unshown} more: d lists every finding", style="bold", no_wrap=True, end=""))
    elif broken:
        srcs = "; ".join(f"{row_text(s.name)}: {row_text(s.error or '', 120)}" for s in broken)
        src_line = Text("sources: " + srcs, style="dim", no_wrap=True, end="")
        src_line.truncate(width, overflow="ellipsis")
        out.append(src_line)
    return Text("\n", end="").join(out)


class FindingsBanner(TextBlock):
    """The banner. ``rows`` (set by the screen from the terminal's height: 2 on a short one, 1 over a maximised
    panel) bounds it: the findings in full when they fit, else the headline first and the others one line each,
    each remedy whole."""

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
            self.update(headline_first(snap.findings, snap.sources, width, self.rows, **kw))  # type: ignore[arg-type]
