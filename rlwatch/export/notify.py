"""Telling a person: notifications from the watchdog, and its dead man's switch.

In incident 1 a server crash burned thirteen hours of GPU time because nobody was looking; in incident 3 the
watchdog itself had died and nobody knew. rlwatch saw both. This module is how `rlwatch watch` tells someone:

- **What is sent.** A finding that appears, worsens or clears, and each action the watchdog takes or gives up on,
  through Apprise (one URL per target: Slack, Discord, Telegram, ntfy, mailto, a JSON webhook, …). Each message says
  the host, the run, what happened in one line, since when, what was done, and the command to look.
- **A storm is one message.** :class:`FindingTracker` keeps one record per finding (951 brake events are one
  finding): it is told when it appears, at once when it gets worse than anything told before, again at most every
  ``update_every_s`` while it persists and changes, and once when it has been gone ``clear_after_s``. Everything that
  changed in one round of the watchdog is one message, listing at most :data:`MAX_ITEMS` findings.
- **Never blocking.** Each target has a bounded queue drained by a thread of its own (:class:`Channel`): delivery
  has a timeout and retries with a doubling backoff; when the queue is full the oldest message is dropped and
  counted. The watchdog only appends to the queue, so a target that hangs, refuses or answers 500 costs it nothing;
  the failure is shown as the degraded source ``notify``.
- **No secrets, no raw logs.** Target URLs usually hold a token: they are shown only as ``tgram://***`` (or the
  target's configured name), and every outgoing text is scrubbed of them, of credentials in URLs and of
  ``token=…``-style values. Log lines are sent only with ``include_lines: true``; every text that comes from a log
  (finding messages quote exception titles) is cleaned of control characters, kept to one line, trimmed, and its
  ``@mentions`` defused.
- **Dead man's switch.** :class:`Heartbeat` GETs a URL (healthchecks.io style) every ``heartbeat_every_s``. The
  decision loop asks for each ping and a thread of its own sends it, so a hung loop stops the pings — which is the
  point: the service on the other end notices that the watchdog is gone.

Apprise is imported only when something is sent, so the core stays quick to start without notifications.
"""

from __future__ import annotations

import re
import shlex
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.common.state import Finding, Severity, Snapshot
from rlwatch.common.textsafe import URL_SCHEME, clean_line, redact
from rlwatch.config.models import NotifyConfig

ENV = "RLWATCH_NOTIFY"
MAX_ITEMS = 10  # findings listed in one message; the rest are counted
LINE_MAX = 300  # one line of a message
TITLE_MAX = 120
LOG_LINES = 3  # with include_lines: the last lines of each finding's event kind
MAX_BACKOFF_S = 300.0
RANK = {"critical": 0, "warning": 1, "info": 2}

# Findings that are one story under two codes: a brake that stops helping is the brake storm getting worse.
FAMILY = {
    "brake_no_relief": "brake",
    "crashed": "crash_repeating",
    "server_unhealthy": "server_down",
    "server_starting": "server_down",
    # Before the first probe answers, a dead server shows only as refused connections; then as server_down.
    "connection_refused": "server_down",
}
# Told by their own message (the gave_up record), not a second time as a finding.
SKIP = frozenset({"watchdog_gave_up"})
# The event kind whose lines are the evidence of a finding (sent only with include_lines: true).
EVIDENCE = {"brake": "emergency_brake", "brake_no_relief": "emergency_brake", "crash_repeating": "traceback"}
EVIDENCE |= {"crashed": "traceback", "connection_errors": "connection_refused"}

Send = Callable[[str, str, str, Severity, float], str | None]  # (url, title, body, severity, timeout) -> error
Get = Callable[[str, float], str | None]  # (url, timeout) -> error


# ----------------------------------------------------------------------------------------------- secrets & text
_SCHEME = URL_SCHEME
_ANY_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s'\"<>]+)")
_KEY_VALUE = re.compile(
    r"(?i)\b((?:api[_-]?)?(?:token|key|secret|password|passwd|pwd|auth|authorization|credentials?)\s*[=:]\s*)"
    r"([^\s,;&'\"]+)"
)
_FLAG_VALUE = re.compile(r"(?i)(--?(?:api[_-]?key|[a-z]*[_-]?token|secret|password|passwd|auth)[= ])(\S+)")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}")
_MENTION = re.compile(r"@(?=[A-Za-z0-9_])")
_SPACE = re.compile(r"\s+")
_HOSTNAME = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")  # a host name or address names a place, not a secret


def _url_shown(m: re.Match[str]) -> str:
    """A URL found in text: without credentials and query (``http://***@host/path?***``)."""
    scheme, rest = m.group(1), m.group(2)
    auth, at, hostpath = rest.rpartition("@")
    if at and "/" not in auth:
        rest = "***@" + hostpath
    path, q, _ = rest.partition("?")
    return f"{scheme}://{path}" + ("?***" if q else "")


def secrets_of(url: str) -> list[str]:
    """The parts of a target URL that may be secret, longest first, to be cut from any text that leaves."""
    url = url.strip()
    rest = url.split("://", 1)[-1]
    parts = [p for p in re.split(r"[/:@?&=#]+", rest) if len(p) >= 8 and not _HOSTNAME.fullmatch(p)]
    return sorted({url, rest, *parts}, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove secrets: the given strings, credentials and queries of URLs, ``token=…`` values, bearer tokens."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = _ANY_URL.sub(_url_shown, text)
    text = _BEARER.sub(lambda m: m.group(1) + " ***", text)
    text = _KEY_VALUE.sub(lambda m: m.group(1) + "***", text)
    return _FLAG_VALUE.sub(lambda m: m.group(1) + "***", text)


def one_line(text: str, limit: int = LINE_MAX) -> str:
    """Text that may come from a log, made safe to send: no control characters, one line, trimmed, and no
    ``@everyone``/``<!channel>`` that a chat service would turn into a ping (a zero-width space defuses it)."""
    out = _SPACE.sub(" ", clean_line(text.replace("\n", " ").replace("\r", " "))).strip()
    out = _MENTION.sub("@\u200b", out).replace("<!", "<\u200b!")
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _clock_text(t: float | None, now: float) -> str:
    if t is None:
        return "unknown"
    from rlwatch.engine.diagnosis import hhmm, human_duration
    from rlwatch.export.report import iso

    return f"{hhmm(t, now)} ({human_duration(max(0.0, now - t))} ago; {iso(t)})"


# ------------------------------------------------------------------------------------------------------ targets
@dataclass(frozen=True, slots=True)
class Target:
    """One destination: the URL (kept secret), the least severity sent there, and how it is shown."""

    url: str
    min_severity: str = "warning"
    name: str | None = None

    @property
    def shown(self) -> str:
        return self.name or redact(self.url)

    def wants(self, severity: Severity) -> bool:
        return RANK[severity.value] <= RANK[self.min_severity]


def split_urls(text: str | None) -> list[str]:
    """``RLWATCH_NOTIFY``: URLs separated by whitespace or commas."""
    return [u for u in re.split(r"[\s,]+", text or "") if u]


def targets_from(cfg: NotifyConfig, cli: Sequence[str] = (), env: str | None = None) -> list[Target]:
    """Every target, from the file, ``--notify`` and ``RLWATCH_NOTIFY``, each URL once (the file's entry wins)."""
    out: dict[str, Target] = {}
    for t in cfg.targets:
        out.setdefault(t.url, Target(t.url, t.min_severity, t.name))
    for given in [*cli, *split_urls(env)]:
        url = given.strip()
        if url:
            out.setdefault(url, Target(url))
    return list(out.values())


def check_target(url: str) -> str | None:
    """Why Apprise cannot send to ``url`` (one line, redacted), or None."""
    if not _SCHEME.match(url):
        return f"{redact(url)}: not a URL (an Apprise URL is SCHEME://…)"
    import apprise

    if apprise.Apprise.instantiate(url, asset=_asset(10.0)) is None:
        return f"{redact(url)}: not a URL Apprise can send to (unknown scheme or missing parts)"
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


# ------------------------------------------------------------------------------------------------------ notices
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
        title = one_line(f"rlwatch {self.host}: {head}", TITLE_MAX)
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


def settled(snap: Snapshot) -> bool:
    """The backlog is read and an expected server has been probed: the findings are a whole picture."""
    srv = snap.server
    unprobed = srv is not None and srv.expected and srv.url is not None and srv.up is None
    return snap.backlog is None and not unprobed


# ------------------------------------------------------------------------------------------------------ tracker
@dataclass(slots=True)
class _Open:
    code: str
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
        self.open: dict[str, _Open] = {}

    def observe(self, findings: Iterable[Finding]) -> list[tuple[str, _Open]]:
        """The changes worth telling this round, as (change, record), most severe first."""
        now = self.clock.monotonic()
        current: dict[str, Finding] = {}
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


# ------------------------------------------------------------------------------------------------------ channel
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
                st.error = one_line(scrub(error, self._secrets), 200)
                st.error_at = self._clock.time()

    def snapshot(self) -> ChannelStatus:
        with self._cond:
            s = self.status
            return ChannelStatus(
                s.shown, s.min_severity, s.sent, s.failed, s.dropped, s.last_sent_at, s.last_title, s.error, s.error_at
            )


# ---------------------------------------------------------------------------------------------------- heartbeat
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
        self.status = HeartbeatStatus(redact(url), every_s)
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
                    self.status.error = one_line(scrub(error, self._secrets), 200)
            self._on_change()

    def snapshot(self) -> HeartbeatStatus:
        with self._lock:
            s = self.status
            return HeartbeatStatus(s.shown, s.every_s, s.last_ok_at, s.last_attempt_at, s.error)


# ------------------------------------------------------------------------------------------------ notifications
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
        return one_line(scrub(text, self.secrets), limit)

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
            items.append(Item(change, severity, rec.code, self.safe(rec.message), rec.since, lines))
        return self._post(Notice(self.clock.time(), self.host, self.run_dir, tuple(items), self.safe(done)))

    def _lines(self, snap: Snapshot, code: str) -> tuple[str, ...]:
        ev = snap.events.get(EVIDENCE.get(code, code))
        if ev is None:
            return ()
        return tuple(
            self.safe(f"{line.path.rsplit('/', 1)[-1]}:{line.lineno}: {line.text}", 200)
            for line in ev.recent[-LOG_LINES:]
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
    return None if error is None else f"{redact(url)}: {one_line(scrub(error, secrets), 200)}"


__all__ = [
    "ENV",
    "Channel",
    "FindingTracker",
    "Heartbeat",
    "Item",
    "Notice",
    "Notifications",
    "Target",
    "apprise_send",
    "check_target",
    "http_get",
    "one_line",
    "redact",
    "scrub",
    "secrets_of",
    "send_test",
    "split_urls",
    "targets_from",
]
