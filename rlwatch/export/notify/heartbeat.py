"""The dead man's switch: a GET to a URL (healthchecks.io style) every ``heartbeat_every_s``.

In incident 3 the watchdog itself had died and nobody knew. :class:`Heartbeat` is asked for each ping by the decision
loop (:meth:`Heartbeat.due`) and a thread of its own sends it, so a hung loop stops the pings, which is the point: the
service on the other end notices that the watchdog is gone. It carries no message and has its own degraded source
(``heartbeat``), so it is kept apart from the message channels.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from rlwatch.common.clock import Clock
from rlwatch.common.textsafe import redact_url
from rlwatch.export.notify.text import scrub, secrets_of, sendable_line

Get = Callable[[str, float], str | None]  # (url, timeout) -> error


def http_get(url: str, timeout_s: float) -> str | None:
    """The heartbeat's GET: None when it answered 2xx/3xx, else why not (one line)."""
    req = urllib.request.Request(url, headers={"User-Agent": "rlwatch-heartbeat"})  # noqa: S310 (http(s) checked)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310
            resp.read(4096)
            return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        return str(exc.reason)
    except (OSError, ValueError) as exc:
        return str(exc) or type(exc).__name__


@dataclass(slots=True)
class HeartbeatStatus:
    shown: str
    every_s: float
    last_ok_at: float | None = None
    last_attempt_at: float | None = None
    error: str | None = None


class Heartbeat:
    """The dead man's switch: the decision loop asks (:meth:`due`), a thread of its own GETs the URL."""

    def __init__(
        self,
        url: str,
        every_s: float,
        timeout_s: float,
        *,
        clock: Clock,
        get: Get = http_get,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.url = url
        self.every_s = every_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._get = get
        self._on_change = on_change
        self._secrets = secrets_of(url)
        self._asked_at: float | None = None
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.status = HeartbeatStatus(redact_url(url), every_s)
        self._thread = threading.Thread(target=self._run, name="rlwatch-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def due(self) -> bool:
        """Called from the decision loop: ask for a ping when one is due. Returns at once."""
        now = self._clock.monotonic()
        if self._asked_at is not None and now - self._asked_at < self.every_s:
            return False
        self._asked_at = now
        self._wanted.set()
        return True

    def close(self) -> None:
        self._stop.set()
        self._wanted.set()
        if self._thread.is_alive():
            self._thread.join(timeout=0.5)

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._stop.is_set():
                return
            try:
                error = self._get(self.url, self.timeout_s)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            with self._lock:
                now = self._clock.time()
                self.status.last_attempt_at = now
                if error is None:
                    self.status.last_ok_at, self.status.error = now, None
                else:
                    self.status.error = sendable_line(scrub(error, self._secrets), 200)
            self._on_change()

    def snapshot(self) -> HeartbeatStatus:
        with self._lock:
            s = self.status
            return HeartbeatStatus(s.shown, s.every_s, s.last_ok_at, s.last_attempt_at, s.error)
