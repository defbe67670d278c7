"""Which finding changes are worth a message: a storm is one message, not one per line.

:class:`FindingTracker` keeps one record per finding (951 brake events are one finding, and codes that tell one story,
:data:`FAMILY`, share one record): it is told when it appears, at once when it gets worse than anything told before,
again at most every ``update_every_s`` while it persists and changes, and once when it has been gone
``clear_after_s``. It only decides, on an injected monotonic clock; what the message says and who gets it is up to
its caller (:mod:`rlwatch.export.notify.notifications`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rlwatch.common.clock import Clock
from rlwatch.common.state import Finding, Severity
from rlwatch.common.vocab import FindingCode

# Findings that are one story under two codes: a brake that stops helping is the brake storm getting worse.
FAMILY: dict[FindingCode, FindingCode] = {
    "brake_no_relief": "brake",
    "crashed": "crash_repeating",
    "server_unhealthy": "server_down",
    "server_starting": "server_down",
    # Before the first probe answers, a dead server shows only as refused connections; then as server_down.
    "connection_refused": "server_down",
}
# Told by their own message (the gave_up record), not a second time as a finding.
SKIP: frozenset[FindingCode] = frozenset({"watchdog_gave_up"})


@dataclass(slots=True)
class _Open:
    code: FindingCode
    severity: Severity
    message: str
    since: float | None
    worst_sent: Severity
    sent_message: str
    sent_at: float  # monotonic
    gone_at: float | None = None  # monotonic, while absent


class FindingTracker:
    """Which finding changes are worth a message, on an injected monotonic clock (see the module's docstring)."""

    def __init__(self, update_every_s: float, clear_after_s: float, clock: Clock) -> None:
        self.update_every_s = update_every_s
        self.clear_after_s = clear_after_s
        self.clock = clock
        self.open: dict[FindingCode, _Open] = {}

    def observe(self, findings: Iterable[Finding]) -> list[tuple[str, _Open]]:
        """The changes worth telling this round, as (change, record), most severe first."""
        now = self.clock.monotonic()
        current: dict[FindingCode, Finding] = {}
        for f in findings:
            if f.code in SKIP:
                continue
            fam = FAMILY.get(f.code, f.code)
            have = current.get(fam)
            if have is None or f.severity.rank < have.severity.rank:
                current[fam] = f
        out: list[tuple[str, _Open]] = []
        for fam, f in current.items():
            text = f.message
            rec = self.open.get(fam)
            if rec is None:
                rec = _Open(f.code, f.severity, text, f.since, f.severity, text, now)
                self.open[fam] = rec
                out.append(("new", rec))
                continue
            rec.gone_at = None
            rec.code, rec.severity, rec.message = f.code, f.severity, text
            rec.since = rec.since if rec.since is not None else f.since
            if f.severity.rank < rec.worst_sent.rank:
                rec.worst_sent, rec.sent_message, rec.sent_at = f.severity, text, now
                out.append(("worse", rec))
            elif text != rec.sent_message and now - rec.sent_at >= self.update_every_s:
                rec.sent_message, rec.sent_at = text, now
                out.append(("update", rec))
        for fam in [k for k in self.open if k not in current]:
            rec = self.open[fam]
            if rec.gone_at is None:
                rec.gone_at = now
            if now - rec.gone_at >= self.clear_after_s:
                del self.open[fam]
                out.append(("recovered", rec))
        out.sort(key=lambda cr: (cr[0] == "recovered", cr[1].severity.rank))
        return out
