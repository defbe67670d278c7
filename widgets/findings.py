"""The findings banner: what is wrong, in words, most severe first.

Findings are the diagnosis of the whole snapshot, so they sit above every panel. Sources that fail are listed
after them, dimmed: a panel that shows nothing because its source is broken must say so.
"""

from __future__ import annotations

from rich.text import Text

from rlwatch.common.state import Finding, Snapshot, SourceStatus
from rlwatch.widgets.format import SEVERITY_LABEL, SEVERITY_STYLE, clean_text, fmt_clock
from rlwatch.widgets.text_block import TextBlock

MESSAGE_LIMIT = 600
OWN_LINE = frozenset({"gpu", "server"})


def findings_text(
    findings: tuple[Finding, ...], sources: tuple[SourceStatus, ...] = (), now: float | None = None
) -> Text:
    out = Text(end="")
    ordered = sorted(findings, key=lambda f: (f.severity.rank, f.since if f.since is not None else float("inf")))
    if not ordered:
        out.append("✓ No problems found", style="bold green")
    for i, f in enumerate(ordered):
        if i:
            out.append("\n")
        out.append(f"● {SEVERITY_LABEL[f.severity]:<8} ", style=SEVERITY_STYLE[f.severity])
        out.append(clean_text(f.message, MESSAGE_LIMIT))
        if f.since is not None:
            out.append(f"  (since {fmt_clock(f.since, now=now)})", style="dim")
    # Broken sources are listed when nothing else is (so "no problems" never hides a blind spot), and always for
    # sources without a panel line of their own (the GPU and server panels already show their errors).
    broken = [s for s in sources if not s.ok and s.error and (not ordered or s.name not in OWN_LINE)]
    if broken:
        out.append("\n")
        out.append(
            "sources: " + "; ".join(f"{clean_text(s.name)}: {clean_text(s.error or '', 120)}" for s in broken),
            style="dim",
        )
    return out


class FindingsBanner(TextBlock):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._key: object = None

    def show(self, snap: Snapshot) -> None:
        key = (snap.findings, snap.sources)
        if key == self._key:
            return
        self._key = key
        self.update(findings_text(snap.findings, snap.sources, snap.time))
        worst = snap.worst
        self.set_class(worst is None, "-ok")
        self.set_class(worst is not None and worst.rank == 0, "-critical")
        self.set_class(worst is not None and worst.rank == 1, "-warning")
