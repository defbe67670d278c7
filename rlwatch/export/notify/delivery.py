"""Delivering messages without ever blocking the watchdog: one bounded queue and one thread per target.

The watchdog only appends to a :class:`Channel`'s queue; the channel's own thread delivers through Apprise with a
timeout, and retries with a doubling backoff; when the queue is full the oldest message is dropped and counted. So a
target that hangs, refuses or answers 500 costs the watchdog nothing: the failure is kept in the channel's status and
shown as the degraded source ``notify``. Apprise is imported only when something is sent or checked, so the core
stays quick to start without notifications.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlwatch.common.clock import Clock
from rlwatch.common.state import Severity
from rlwatch.common.textsafe import URL_SCHEME, redact_url
from rlwatch.config.models import NotifyConfig
from rlwatch.export.notify.targets import Target
from rlwatch.export.notify.text import scrub, sendable_line

MAX_BACKOFF_S = 300.0

Send = Callable[[str, str, str, Severity, float], str | None]  # (url, title, body, severity, timeout) -> error

_SCHEME = URL_SCHEME


def check_target(url: str) -> str | None:
    """Why Apprise cannot send to ``url`` (one line, redacted), or None."""
    if not _SCHEME.match(url):
        return f"{redact_url(url)}: not a URL (an Apprise URL is SCHEME://…)"
    import apprise

    if apprise.Apprise.instantiate(url, asset=_asset(10.0)) is None:
        return f"{redact_url(url)}: not a URL Apprise can send to (unknown scheme or missing parts)"
    return None


def _asset(timeout_s: float) -> Any:
    import apprise

    # In memory only: Apprise would otherwise keep a cache under the home directory.
    return apprise.AppriseAsset(storage_mode="memory", service_timeout=timeout_s, result_log_disk_size=0)


def apprise_send(url: str, title: str, body: str, severity: Severity, timeout_s: float) -> str | None:
    """One delivery through Apprise, bounded by ``timeout_s`` as a whole; the error as one line, or None."""
    import apprise

    kind = {
        Severity.CRITICAL: apprise.NotifyType.FAILURE,
        Severity.WARNING: apprise.NotifyType.WARNING,
        Severity.INFO: apprise.NotifyType.INFO,
    }[severity]
    ap = apprise.Apprise(asset=_asset(timeout_s))
    if not ap.add(url):
        return "not a URL Apprise can send to"
    for server in ap:
        server.socket_connect_timeout = timeout_s
        server.socket_read_timeout = timeout_s
    result = ap.notify(
        body=body, title=title, notify_type=kind, body_format=apprise.NotifyFormat.TEXT, timeout=timeout_s
    )
    if result:
        return None
    problems = [e.message for e in result.logs() if e.level in ("WARNING", "ERROR", "CRITICAL")]
    return problems[-1] if problems else "delivery failed"


@dataclass(slots=True)
class ChannelStatus:
    """What one target has been through, for the state file, the report and the dashboard."""

    shown: str
    min_severity: str
    sent: int = 0
    failed: int = 0
    dropped: int = 0
    last_sent_at: float | None = None
    last_title: str | None = None
    error: str | None = None  # the last failure, until a delivery succeeds again
    error_at: float | None = None


@dataclass(frozen=True, slots=True)
class _Outgoing:
    title: str
    body: str
    severity: Severity


class Channel:
    """One target's bounded queue and the thread that drains it, with timeouts, retries and a doubling backoff."""

    def __init__(
        self,
        target: Target,
        cfg: NotifyConfig,
        *,
        send: Send,
        clock: Clock,
        secrets: Sequence[str],
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.target = target
        self.cfg = cfg
        self._send = send
        self._clock = clock
        self._secrets = list(secrets)
        self._on_change = on_change
        self._queue: deque[_Outgoing] = deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._busy = False
        self.status = ChannelStatus(target.shown, target.min_severity)
        self._thread = threading.Thread(target=self._run, name="rlwatch-notify", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, title: str, body: str, severity: Severity) -> None:
        """Queue a message; never blocks. A full queue drops its oldest message (counted)."""
        with self._cond:
            if len(self._queue) >= self.cfg.queue_size:
                self._queue.popleft()
                self.status.dropped += 1
            self._queue.append(_Outgoing(title, body, severity))
            self._cond.notify()

    def idle(self) -> bool:
        with self._cond:
            return not self._queue and not self._busy

    def close(self, flush_s: float = 2.0) -> None:
        """Give queued messages ``flush_s`` to go out, then stop (a delivery under way ends by its timeout)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._queue and not self._busy, timeout=flush_s)
            self._stop.set()
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=0.5)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._stop.is_set())
                if self._stop.is_set():
                    return
                item = self._queue.popleft()
                self._busy = True
            try:
                self._deliver(item)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                self._on_change()

    def _deliver(self, item: _Outgoing) -> None:
        error: str | None = None
        for attempt in range(self.cfg.retries + 1):
            try:
                error = self._send(self.target.url, item.title, item.body, item.severity, self.cfg.timeout_s)
            except Exception as exc:  # a plugin's bug must not end the thread: it is one more failed delivery
                error = f"{type(exc).__name__}: {exc}"
            if error is None:
                break
            if attempt < self.cfg.retries:
                delay = min(MAX_BACKOFF_S, self.cfg.backoff_s * 2**attempt)
                if self._stop.wait(delay):
                    break
        with self._cond:
            st = self.status
            if error is None:
                st.sent += 1
                st.last_sent_at = self._clock.time()
                st.last_title = item.title
                st.error, st.error_at = None, None
            else:
                st.failed += 1
                st.error = sendable_line(scrub(error, self._secrets), 200)
                st.error_at = self._clock.time()

    def snapshot(self) -> ChannelStatus:
        with self._cond:
            s = self.status
            return ChannelStatus(
                s.shown, s.min_severity, s.sent, s.failed, s.dropped, s.last_sent_at, s.last_title, s.error, s.error_at
            )
