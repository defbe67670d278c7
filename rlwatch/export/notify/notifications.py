"""The orchestrator: findings and watchdog records in, messages out to every target, and the heartbeat.

:class:`Notifications` is what `rlwatch watch` holds. Each round it waits for a settled picture (:func:`settled`),
asks the tracker what changed enough, turns it into one :class:`~rlwatch.export.notify.message.Notice` of safe text
(with evidence lines only under ``include_lines: true``) and hands it to each target's channel; actions taken and
give-ups are told at once. It never blocks its caller, and it is where the state file's ``notify`` section and the
degraded ``notify`` and ``heartbeat`` sources come from. :func:`send_test` is `rlwatch notify --test`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.common.state import Severity, Snapshot, line_ref
from rlwatch.common.textsafe import redact_url
from rlwatch.common.vocab import FindingCode
from rlwatch.config.models import NotifyConfig
from rlwatch.export.notify.delivery import Channel, Send, apprise_send, check_target
from rlwatch.export.notify.heartbeat import Get, Heartbeat, http_get
from rlwatch.export.notify.message import Item, Notice
from rlwatch.export.notify.targets import Target
from rlwatch.export.notify.text import LINE_MAX, scrub, secrets_of, sendable_line
from rlwatch.export.notify.tracker import FindingTracker

LOG_LINES = 3  # with include_lines: the last lines of each finding's event kind
# The event kind whose lines are the evidence of a finding (sent only with include_lines: true).
EVIDENCE: dict[FindingCode, str] = {
    "brake": "emergency_brake",
    "brake_no_relief": "emergency_brake",
    "crash_repeating": "traceback",
}
EVIDENCE |= {"crashed": "traceback", "connection_errors": "connection_refused"}


def settled(snap: Snapshot) -> bool:
    """The backlog is read and an expected server has been probed: the findings are a whole picture."""
    srv = snap.server
    unprobed = srv is not None and srv.expected and srv.url is not None and srv.up is None
    return snap.backlog is None and not unprobed


class Notifications:
    """Findings and watchdog records in, messages out to every target; never blocks its caller."""

    def __init__(
        self,
        targets: Sequence[Target],
        cfg: NotifyConfig,
        *,
        host: str,
        run_dir: str,
        clock: Clock | None = None,
        send: Send | None = None,
        heartbeat: str | None = None,
        get: Get | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.cfg = cfg
        self.host = host
        self.run_dir = run_dir
        self.clock: Clock = clock or SystemClock()
        self.tracker = FindingTracker(cfg.update_every_s, cfg.clear_after_s, self.clock)
        self.secrets = [s for t in targets for s in secrets_of(t.url)]
        url = heartbeat or cfg.heartbeat
        if url:
            self.secrets += secrets_of(url)
        self.secrets.sort(key=len, reverse=True)
        self.on_change = on_change  # called from the delivery threads after each attempt (the watchdog marks its
        # state file dirty): it must return at once
        self.channels = [
            Channel(t, cfg, send=send or apprise_send, clock=self.clock, secrets=self.secrets, on_change=self._changed)
            for t in targets
        ]
        self.heartbeat = (
            None
            if not url
            else Heartbeat(
                url,
                cfg.heartbeat_every_s,
                cfg.heartbeat_timeout_s,
                clock=self.clock,
                get=get or http_get,
                on_change=self._changed,
            )
        )
        self._lock = threading.Lock()
        self._queued = 0

    def _changed(self) -> None:
        self.on_change()

    @property
    def shown(self) -> list[str]:
        """The targets as a person may see them (redacted)."""
        return [ch.target.shown for ch in self.channels]

    @property
    def active(self) -> bool:
        return bool(self.channels) or self.heartbeat is not None

    def start(self) -> None:
        for ch in self.channels:
            ch.start()
        if self.heartbeat is not None:
            self.heartbeat.start()

    def close(self, flush_s: float = 2.0) -> None:
        for ch in self.channels:
            ch.close(flush_s)
        if self.heartbeat is not None:
            self.heartbeat.close()

    def idle(self) -> bool:
        """Every queue is empty and nothing is being delivered (tests wait on this, with a deadline)."""
        return all(ch.idle() for ch in self.channels)

    # ------------------------------------------------------------------------------------------------ input
    def safe(self, text: str, limit: int = LINE_MAX) -> str:
        return sendable_line(scrub(text, self.secrets), limit)

    def observe(self, snap: Snapshot, done: str) -> Notice | None:
        """One round of findings: whatever changed enough goes out as one message. Returns it (tests read it).

        Nothing is told before the first settled snapshot (:func:`settled`): half a backlog, or a server not yet
        probed, would make a first message that the next round contradicts.
        """
        if not self.channels or not settled(snap):
            return None
        changes = self.tracker.observe(snap.findings)
        if not changes:
            return None
        items = []
        for change, rec in changes:
            severity = rec.worst_sent if change == "recovered" else rec.severity
            lines: tuple[str, ...] = ()
            if self.cfg.include_lines and change != "recovered":
                lines = self._lines(snap, rec.code)
            text = rec.message
            v = snap.verdict
            if change != "recovered" and v is not None and v.finding == rec.code:
                fix = v.fix_command() or v.fix  # the verdict's one remedy, as the dashboard's banner says it
                text = f"{text} Fix: {fix}" if fix else text
            items.append(Item(change, severity, rec.code, self.safe(text), rec.since, lines))
        return self._post(Notice(self.clock.time(), self.host, self.run_dir, tuple(items), self.safe(done)))

    def _lines(self, snap: Snapshot, code: FindingCode) -> tuple[str, ...]:
        ev = snap.events.get(EVIDENCE.get(code, code))
        if ev is None:
            return ()
        return tuple(
            self.safe(f"{line_ref(line.path, line.lineno)}: {line.text}", 200) for line in ev.recent[-LOG_LINES:]
        )

    def record(self, rec: Mapping[str, Any], done: str = "") -> Notice | None:
        """A watchdog record: an action taken (or failed) and a give-up are told at once."""
        if not self.channels:
            return None
        kind = rec.get("type")
        if kind == "action" and not rec.get("skipped"):
            ok = bool(rec.get("ok"))
            item = Item(
                "acted" if ok else "failed",
                Severity.WARNING if ok else Severity.CRITICAL,
                str(rec.get("action") or "action"),
                self.safe(
                    f"{rec.get('action')} on {rec.get('key')} (policy {rec.get('policy')}): {rec.get('message')}"
                ),
                self.clock.time(),
            )
            what = f"the watchdog ran {rec.get('action')}: {'ok' if ok else 'failed'}"
        elif kind == "gave_up":
            item = Item(
                "gave_up",
                Severity.CRITICAL,
                "watchdog_gave_up",
                self.safe(f"the watchdog gave up on {rec.get('key')}: {rec.get('reason')}"),
                self.clock.time(),
            )
            what = "nothing more until a person runs `rlwatch act rearm`"
        else:
            return None
        return self._post(Notice(self.clock.time(), self.host, self.run_dir, (item,), self.safe(done or what)))

    def test(self) -> Notice:
        """A test message to every target."""
        item = Item("test", Severity.CRITICAL, "test", "a test message from rlwatch: this target works", None)
        notice = Notice(self.clock.time(), self.host, self.run_dir, (item,), "nothing: this is a test")
        self._post(notice)
        return notice

    def _post(self, notice: Notice) -> Notice:
        for ch in self.channels:
            mine = notice.for_target(ch.target)
            if mine is None:
                continue
            title, body = mine.render()
            ch.put(scrub(title, self.secrets), scrub(body, self.secrets), mine.severity)
        return notice

    def tick(self) -> None:
        """From the decision loop: the heartbeat, when due."""
        if self.heartbeat is not None:
            self.heartbeat.due()

    # ---------------------------------------------------------------------------------------------- output
    def error(self) -> str | None:
        """Why notifications are degraded (one line), or None: shown as the ``notify`` source."""
        bad = [ch.snapshot() for ch in self.channels]
        problems = [f"{s.shown}: {s.error}" for s in bad if s.error]
        problems += [f"{s.shown}: {s.dropped} dropped (queue full)" for s in bad if s.dropped and not s.error]
        return "; ".join(problems) or None

    def heartbeat_error(self) -> str | None:
        if self.heartbeat is None:
            return None
        st = self.heartbeat.snapshot()
        return None if st.error is None else f"{st.shown}: {st.error}"

    def state(self) -> dict[str, Any]:
        """The ``notify`` section of the watchdog's state file: nothing secret in it."""
        chans = [ch.snapshot() for ch in self.channels]
        sent = [c for c in chans if c.last_sent_at is not None]
        last = max(sent, key=lambda c: c.last_sent_at or 0.0) if sent else None
        hb = self.heartbeat.snapshot() if self.heartbeat is not None else None
        return {
            "targets": [
                {
                    "name": c.shown,
                    "min_severity": c.min_severity,
                    "sent": c.sent,
                    "failed": c.failed,
                    "dropped": c.dropped,
                    "last_sent_at": c.last_sent_at,
                    "error": c.error,
                    "error_at": c.error_at,
                }
                for c in chans
            ],
            "last_sent_at": last.last_sent_at if last else None,
            "last_message": last.last_title if last else None,
            "error": self.error(),
            "heartbeat": None
            if hb is None
            else {
                "url": hb.shown,
                "every_s": hb.every_s,
                "last_ok_at": hb.last_ok_at,
                "last_attempt_at": hb.last_attempt_at,
                "error": hb.error,
            },
        }


def send_test(url: str, *, host: str, run_dir: str, timeout_s: float = 10.0, send: Send | None = None) -> str | None:
    """`rlwatch notify --test URL`: one message, sent now, no retry; the error as one redacted line, or None."""
    problem = check_target(url) if send is None else None
    if problem:
        return problem
    item = Item("test", Severity.INFO, "test", "a test message from rlwatch: this target works", None)
    title, body = Notice(SystemClock().time(), host, run_dir, (item,), "nothing: this is a test").render()
    secrets = secrets_of(url)
    try:
        error = (send or apprise_send)(url, scrub(title, secrets), scrub(body, secrets), Severity.INFO, timeout_s)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return None if error is None else f"{redact_url(url)}: {sendable_line(scrub(error, secrets), 200)}"
