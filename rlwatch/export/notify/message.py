"""What one message says: everything one round of the watchdog has to tell, as a title and a body.

A :class:`Notice` holds the round's :class:`Item` records (a finding new, worse, still there or recovered; an action;
a give-up) and lists at most :data:`MAX_ITEMS` of them; each target gets only the severities it asked for. The body
says the host, the run, what happened in one line, since when, what was done, and the command to look. Items arrive
already made safe (:mod:`rlwatch.export.notify.text`): rendering lays them out and keeps the title to one line.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from rlwatch.common.state import Severity
from rlwatch.export.notify.targets import Target
from rlwatch.export.notify.text import sendable_line

MAX_ITEMS = 10  # findings listed in one message; the rest are counted
TITLE_MAX = 120


def _clock_text(t: float | None, now: float) -> str:
    if t is None:
        return "unknown"
    from rlwatch.engine.diagnosis import hhmm, human_duration
    from rlwatch.export.report import iso

    return f"{hhmm(t, now)} ({human_duration(max(0.0, now - t))} ago; {iso(t)})"


@dataclass(frozen=True, slots=True)
class Item:
    """One change in a notice: a finding new, worse, still there (update) or recovered; an action; a give-up."""

    change: str  # "new" | "worse" | "update" | "recovered" | "acted" | "failed" | "gave_up" | "test"
    severity: Severity
    code: str
    text: str  # one line, already made safe
    since: float | None
    lines: tuple[str, ...] = ()  # evidence lines (include_lines only), already made safe


WORDS = {
    "new": "new",
    "worse": "WORSE",
    "update": "still",
    "recovered": "recovered",
    "acted": "acted",
    "failed": "action FAILED",
    "gave_up": "GAVE UP",
    "test": "test",
}


@dataclass(frozen=True, slots=True)
class Notice:
    """Everything one round of the watchdog has to tell, rendered per target (each sees its severities only)."""

    time: float
    host: str
    run_dir: str
    items: tuple[Item, ...]
    done: str  # what was done about it, one line

    def for_target(self, target: Target) -> Notice | None:
        """The items this target wants: a recovery goes wherever the finding went, at its worst severity."""
        items = tuple(i for i in self.items if target.wants(i.severity))
        return None if not items else Notice(self.time, self.host, self.run_dir, items, self.done)

    @property
    def severity(self) -> Severity:
        live = [i.severity for i in self.items if i.change != "recovered"]
        if not live:
            return Severity.INFO
        return min(live, key=lambda s: s.rank)

    def render(self) -> tuple[str, str]:
        """(title, body): host, run, what happened in one line, since when, what was done, the command to look."""
        first = self.items[0]
        if len(self.items) == 1:
            what = f"{WORDS[first.change]}: {first.text}"
            quiet = first.change in ("recovered", "test")
            head = what if quiet else f"{first.severity.value.upper()} {what}"
        else:
            counts: dict[str, int] = {}
            for i in self.items:
                counts[WORDS[i.change]] = counts.get(WORDS[i.change], 0) + 1
            head = f"{self.severity.value.upper()} " + ", ".join(f"{n} {w}" for w, n in counts.items())
            what = head
        title = sendable_line(f"rlwatch {self.host}: {head}", TITLE_MAX)
        body = [f"host: {self.host}", f"run: {self.run_dir}"]
        if len(self.items) == 1:
            body.append(f"what: {what}")
            body.append(f"since: {_clock_text(first.since, self.time)}")
            body.extend(f"  | {line}" for line in first.lines)
        else:
            body.append(f"what: {what}")
            for i in self.items[:MAX_ITEMS]:
                body.append(f"- [{i.severity.value.upper()}] {WORDS[i.change]}: {i.text}")
                body.append(f"  since {_clock_text(i.since, self.time)}")
                body.extend(f"  | {line}" for line in i.lines)
            if len(self.items) > MAX_ITEMS:
                body.append(f"- … and {len(self.items) - MAX_ITEMS} more")
        body.append(f"done: {self.done}")
        body.append(f"look: rlwatch report {shlex.quote(self.run_dir)}")
        return title, "\n".join(body)
