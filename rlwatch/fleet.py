"""Many hosts at once: every pod's exporter, read through one Prometheus server or straight from the exporters.

Both ways end in the same place: for each host, the rlwatch series of its newest sample, turned into one
:class:`FleetHost` row. Hosts that fail the same way are grouped by the signature of their last exception (the
signature is stable across hosts, see :mod:`rlwatch.incidents`), so "the same crash on twelve pods" reads as one
line with twelve hosts under it, not twelve unrelated alarms.

Stale data never looks healthy. A host is stale when its data stopped arriving (Prometheus' scrape fails, so its
series end with a staleness marker; or the exporter does not answer) or when the data that arrives is old (the
exporter answers but the engine behind it stopped moving). A stale host keeps its last known values, marked, with
the age of its newest data.

Reading Prometheus takes three small queries per refresh, plus two per stale host: the current value of every
``rlwatch_`` series (staleness-aware, so a dead exporter's series and a resolved finding vanish at once), the
timestamps of the live hosts' last scrapes, and which hosts reported at all within a look-back window. For a host
that stopped, its ``rlwatch_info`` samples in the window give its last good scrape, and an instant query at exactly
that time gives its last known values. The active targets add the scrape error, and the hosts that never answered.
"""

from __future__ import annotations

import json
import math
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from rlwatch.clock import Clock, SystemClock
from rlwatch.config import FleetConfig
from rlwatch.state import Severity
from rlwatch.textsafe import clean_line

__all__ = [
    "ExporterFleet",
    "FleetError",
    "FleetException",
    "FleetFinding",
    "FleetGroup",
    "FleetHost",
    "FleetSnapshot",
    "FleetSource",
    "HostStatus",
    "PrometheusFleet",
    "exporter_url",
    "group_hosts",
    "host_from_samples",
    "make_fleet_source",
]

PREFIX = "rlwatch_"
MAX_BODY = 16 * 1024 * 1024  # an exposition or an API answer this big is not what we asked for
ERROR_MAX = 200

# The event kinds a fleet row shows when they are non-zero: failures, not progress.
FAILURE_KINDS = (
    "traceback",
    "connection_refused",
    "cuda_oom",
    "cuda_busy",
    "nccl_timeout",
    "nccl_error",
    "engine_dead",
    "child_failed",
    "oom_kill",
    "emergency_brake",
    "timeout",
    "restart",
)

Labels = Mapping[str, str]
Sample = tuple[str, Labels, float]


class FleetError(Exception):
    """A source could not be read; one line."""


class HostStatus(StrEnum):
    CRITICAL = "critical"
    STALE = "stale"
    NO_DATA = "no data"
    WARNING = "warning"
    OK = "ok"

    @property
    def rank(self) -> int:
        """Lower needs a person sooner; unknown hosts sort right after the failing ones."""
        return {"critical": 0, "stale": 1, "no data": 2, "warning": 3, "ok": 4}[self.value]


@dataclass(frozen=True, slots=True)
class FleetFinding:
    severity: Severity
    code: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class FleetException:
    """The last exception a host logged, as its exporter labels it."""

    signature: str
    type: str
    title: str
    at: float | None = None
    occurrences: int | None = None


@dataclass(frozen=True, slots=True)
class FleetGpu:
    index: str
    util_ratio: float | None
    mem_used_bytes: float | None
    mem_total_bytes: float | None


@dataclass(frozen=True, slots=True)
class FleetProcess:
    role: str
    name: str
    up: bool | None
    rss_bytes: float | None
    restarts: float | None


@dataclass(frozen=True, slots=True)
class FleetHost:
    """One row of the fleet: what a host's exporter said last, and how old that is."""

    key: str  # the target: a Prometheus instance or an exporter URL; unique within a fleet
    host: str | None = None  # the name the host gives itself
    job: str | None = None
    profile: str | None = None
    run_dir: str | None = None
    simulated: bool = False
    stale: bool = True
    age_s: float | None = None  # age of the newest data, at the fleet snapshot's time
    error: str | None = None  # why data stopped arriving
    step: int | None = None
    total_steps: int | None = None
    steps_per_hour: float | None = None
    stalled: bool | None = None
    finished: bool | None = None
    reward: float | None = None
    server_up: bool | None = None
    gpus: tuple[FleetGpu, ...] = ()
    mem_total_bytes: float | None = None
    mem_available_bytes: float | None = None
    events: Mapping[str, int] = field(default_factory=dict)
    findings: tuple[FleetFinding, ...] = ()  # worst first
    exception: FleetException | None = None
    checkpoint_step: int | None = None
    checkpoint_age_s: float | None = None
    resume_step: int | None = None
    processes: tuple[FleetProcess, ...] = ()
    budgets_gave_up: tuple[str, ...] = ()

    @property
    def has_data(self) -> bool:
        return self.host is not None

    @property
    def name(self) -> str:
        return self.host or self.key

    @property
    def worst(self) -> FleetFinding | None:
        return self.findings[0] if self.findings else None

    @property
    def status(self) -> HostStatus:
        if not self.has_data:
            return HostStatus.NO_DATA
        if self.stale:
            return HostStatus.STALE
        worst = self.worst
        if worst is None or worst.severity is Severity.INFO:
            return HostStatus.OK
        return HostStatus.CRITICAL if worst.severity is Severity.CRITICAL else HostStatus.WARNING

    @property
    def signature(self) -> str | None:
        return self.exception.signature if self.exception else None

    @property
    def gpu_util_ratio(self) -> float | None:
        utils = [g.util_ratio for g in self.gpus if g.util_ratio is not None]
        return sum(utils) / len(utils) if utils else None

    @property
    def gpu_mem_used_bytes(self) -> float | None:
        used = [g.mem_used_bytes for g in self.gpus if g.mem_used_bytes is not None]
        return sum(used) if used else None

    @property
    def gpu_mem_total_bytes(self) -> float | None:
        total = [g.mem_total_bytes for g in self.gpus if g.mem_total_bytes is not None]
        return sum(total) if total else None

    def failure_counts(self) -> list[tuple[str, int]]:
        """The non-zero failure event counts, in the order of :data:`FAILURE_KINDS`."""
        return [(k, self.events[k]) for k in FAILURE_KINDS if self.events.get(k)]


@dataclass(frozen=True, slots=True)
class FleetGroup:
    """Hosts whose last exception has one signature (``signature`` None: hosts with no exception)."""

    signature: str | None
    title: str | None
    hosts: tuple[FleetHost, ...]

    @property
    def status(self) -> HostStatus:
        return min((h.status for h in self.hosts), key=lambda s: s.rank)


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    time: float
    source: str  # "prometheus http://…" or "3 exporters"
    hosts: tuple[FleetHost, ...] = ()
    error: str | None = None  # the source as a whole could not be read (the hosts are the last known ones)

    @property
    def groups(self) -> tuple[FleetGroup, ...]:
        return group_hosts(self.hosts)

    def counts(self) -> dict[HostStatus, int]:
        out: dict[HostStatus, int] = {}
        for h in self.hosts:
            out[h.status] = out.get(h.status, 0) + 1
        return out


def _host_order(h: FleetHost) -> tuple[int, str, str]:
    return (h.status.rank, h.name, h.key)


def group_hosts(hosts: Iterable[FleetHost]) -> tuple[FleetGroup, ...]:
    """Hosts grouped by the signature of their last exception; the groups that need a person first.

    Groups are ordered by their worst host, then by size (the same crash on many hosts is the bigger story), then
    by title; the hosts with no exception come after every group of equal urgency.
    """
    by_sig: dict[str | None, list[FleetHost]] = defaultdict(list)
    for h in hosts:
        by_sig[h.signature].append(h)
    groups = []
    for sig, members in by_sig.items():
        members.sort(key=_host_order)
        title = next((m.exception.title for m in members if m.exception is not None), None)
        groups.append(FleetGroup(sig, title, tuple(members)))
    groups.sort(key=lambda g: (g.status.rank, g.signature is None, -len(g.hosts), g.title or "", g.signature or ""))
    return tuple(groups)


# ------------------------------------------------------------------------------------------------- samples


class _Series:
    """The samples of one host, by metric name."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self._by_name: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
        for name, labels, value in samples:
            if name.startswith(PREFIX):
                self._by_name[name[len(PREFIX) :]].append((labels, value))

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def all(self, name: str) -> list[tuple[Labels, float]]:
        return [(labels, value) for labels, value in self._by_name.get(name, []) if math.isfinite(value)]

    def one(self, name: str) -> float | None:
        found = self.all(name)
        return found[0][1] if found else None

    def by(self, name: str, label: str) -> dict[str, float]:
        return {labels.get(label, ""): value for labels, value in self.all(name)}


def _int(value: float | None) -> int | None:
    return None if value is None else round(value)


def _bool(value: float | None) -> bool | None:
    return None if value is None else value != 0


def _severity(text: str) -> Severity | None:
    try:
        return Severity(text)
    except ValueError:
        return None


def _findings(series: _Series) -> tuple[FleetFinding, ...]:
    found = []
    for labels, value in series.all("findings"):
        sev = _severity(labels.get("severity", ""))
        if sev is not None and value > 0:
            found.append(FleetFinding(sev, clean_line(labels.get("code", "?")), max(1, round(value))))
    found.sort(key=lambda f: (f.severity.rank, f.code))
    return tuple(found)


def _exception(series: _Series) -> FleetException | None:
    info = series.all("last_exception_info")
    if not info:
        return None
    labels = info[0][0]
    sig = labels.get("signature")
    if not sig:
        return None
    return FleetException(
        signature=clean_line(sig),
        type=clean_line(labels.get("type", "")),
        title=clean_line(labels.get("title", "")) or clean_line(labels.get("type", "")),
        at=series.one("last_exception_timestamp_seconds"),
        occurrences=_int(series.one("last_exception_occurrences")),
    )


def _gpus(series: _Series) -> tuple[FleetGpu, ...]:
    util = series.by("gpu_utilization_ratio", "gpu")
    used = series.by("gpu_memory_used_bytes", "gpu")
    total = series.by("gpu_memory_total_bytes", "gpu")
    indexes = sorted(set(util) | set(used) | set(total), key=lambda i: (len(i), i))
    return tuple(FleetGpu(i, util.get(i), used.get(i), total.get(i)) for i in indexes)


def _processes(series: _Series) -> tuple[FleetProcess, ...]:
    def key(labels: Labels) -> tuple[str, str]:
        return (labels.get("role", ""), labels.get("name", ""))

    up = {key(lab): v for lab, v in series.all("process_up")}
    rss = {key(lab): v for lab, v in series.all("process_rss_bytes")}
    restarts = {key(lab): v for lab, v in series.all("process_restarts_total")}
    keys = sorted(set(up) | set(rss) | set(restarts))
    return tuple(
        FleetProcess(clean_line(r), clean_line(n), _bool(up.get((r, n))), rss.get((r, n)), restarts.get((r, n)))
        for r, n in keys
    )


def host_from_samples(
    key: str,
    samples: Iterable[Sample],
    *,
    data_age_s: float | None,
    stale_after_s: float,
    stale: bool = False,
    error: str | None = None,
    job: str | None = None,
) -> FleetHost:
    """One fleet row from the ``rlwatch_`` samples of one host.

    ``data_age_s`` is how long ago the samples were read; the exporter's own snapshot age is added to it, so a host
    whose exporter answers while its engine stands still turns stale too.
    """
    s = _Series(samples)
    info = s.all("info")
    if not info:
        return FleetHost(key=key, job=job, stale=True, age_s=data_age_s, error=error or "no rlwatch metrics")
    labels = info[0][0]
    snap_age = s.one("snapshot_age_seconds")
    age = None if data_age_s is None else data_age_s + (snap_age or 0.0)
    if age is not None and age > stale_after_s:
        stale = True
        error = error or f"no new data for {age:.0f}s"
    rate = s.one("training_steps_per_second")
    events = {clean_line(k): round(v) for k, v in s.by("events_total", "kind").items()}
    gave_up = tuple(sorted(clean_line(k) for k, v in s.by("budget_gave_up", "target").items() if v))
    return FleetHost(
        key=key,
        host=clean_line(labels.get("host", "")) or key,
        job=job,
        profile=clean_line(labels.get("profile", "")) or None,
        run_dir=clean_line(labels.get("run_dir", "")) or None,
        simulated=labels.get("simulated") == "true",
        stale=stale,
        age_s=age,
        error=error if stale else None,
        step=_int(s.one("training_step")),
        total_steps=_int(s.one("training_total_steps")),
        steps_per_hour=None if rate is None else rate * 3600.0,
        stalled=_bool(s.one("training_stalled")),
        finished=_bool(s.one("training_finished")),
        reward=s.one("training_reward"),
        server_up=_bool(s.one("server_up")),
        gpus=_gpus(s),
        mem_total_bytes=s.one("memory_total_bytes"),
        mem_available_bytes=s.one("memory_available_bytes"),
        events=events,
        findings=_findings(s),
        exception=_exception(s),
        checkpoint_step=_int(s.one("checkpoint_global_step")),
        checkpoint_age_s=s.one("checkpoint_age_seconds"),
        resume_step=_int(s.one("resume_global_step")),
        processes=_processes(s),
        budgets_gave_up=gave_up,
    )


# ----------------------------------------------------------------------------------------------------- HTTP


def _one_line(text: str) -> str:
    line = " ".join(clean_line(text).split())
    return line if len(line) <= ERROR_MAX else line[: ERROR_MAX - 1] + "…"


def _reason(exc: BaseException) -> str:
    """A failed request as a person reads it: "connection refused", "timed out", "HTTP 503"."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host: {exc.strerror}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return _one_line(str(exc)) or type(exc).__name__


def _http_error(exc: urllib.error.HTTPError) -> str:
    """``HTTP 400``, with the Prometheus API's own one-line error where the answer carries one."""
    try:
        doc = json.loads(exc.read(64 * 1024))
    except (OSError, ValueError):
        doc = None
    detail = doc.get("error") if isinstance(doc, dict) else None
    return f"HTTP {exc.code}: {_one_line(str(detail))}" if detail else f"HTTP {exc.code}"


def _get(url: str, timeout_s: float, *, name: str | None = None) -> bytes:
    """The body at ``url``; every failure is a one-line :class:`FleetError` naming ``name`` (default: the URL)."""
    where = _one_line(name or url)
    req = urllib.request.Request(url, headers={"User-Agent": "rlwatch-fleet"})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310  (http(s) checked by callers)
            body: bytes = resp.read(MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        raise FleetError(f"{where}: {_http_error(exc)}") from None
    except (OSError, ValueError) as exc:
        raise FleetError(f"{where}: {_reason(exc)}") from None
    if len(body) > MAX_BODY:
        raise FleetError(f"{where}: answer larger than {MAX_BODY} bytes")
    return body


def _check_http(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FleetError(f"{_one_line(url)}: expected an http:// or https:// URL")
    return url


def exporter_url(text: str) -> str:
    """``host:port`` or a URL without a path, completed to the exporter's ``/metrics`` URL."""
    url = text.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/metrics", parts.query, ""))
    return _check_http(url)


def parse_exposition(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition; raises :class:`FleetError` on anything else."""
    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        ]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise FleetError(f"not a Prometheus exposition: {_one_line(str(exc))}") from None


# ----------------------------------------------------------------------------------------------- sources


class FleetSource(Protocol):
    description: str

    def read(self) -> FleetSnapshot:
        """The fleet now. Never raises: a source that cannot be read says so in ``error``."""
        ...


class ExporterFleet:
    """Reads each exporter URL directly, all at once; remembers each host's last good answer."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        stale_after_s: float = 60.0,
        timeout_s: float = 5.0,
        clock: Clock | None = None,
    ) -> None:
        self.urls = [exporter_url(u) for u in urls]
        self.stale_after_s = stale_after_s
        self.timeout_s = timeout_s
        self.clock: Clock = clock or SystemClock()
        self._last: dict[str, tuple[float, list[Sample]]] = {}
        n = len(self.urls)
        self.description = f"{n} exporter{'s' if n != 1 else ''}"

    def _read_one(self, url: str) -> list[Sample]:
        body = _get(url, self.timeout_s)
        samples = parse_exposition(body.decode("utf-8", "replace"))
        if not any(name == PREFIX + "info" for name, _, _ in samples):
            raise FleetError(f"{_one_line(url)}: no rlwatch metrics there")
        return samples

    def read(self) -> FleetSnapshot:
        now = self.clock.time()
        results: dict[str, list[Sample] | FleetError] = {}
        if self.urls:
            with ThreadPoolExecutor(max_workers=min(16, len(self.urls))) as pool:
                futures = {url: pool.submit(self._read_one, url) for url in self.urls}
                for url, fut in futures.items():
                    try:
                        results[url] = fut.result()
                    except FleetError as exc:
                        results[url] = exc
                    except Exception as exc:  # a bug in one host's answer must not hide the others
                        results[url] = FleetError(f"{_one_line(url)}: {_reason(exc)}")
        hosts = []
        for url in self.urls:
            got = results.get(url)
            if isinstance(got, list):
                self._last[url] = (now, got)
                hosts.append(host_from_samples(url, got, data_age_s=0.0, stale_after_s=self.stale_after_s))
                continue
            error = str(got) if got is not None else "not read"
            error = error.removeprefix(f"{_one_line(url)}: ")
            if url in self._last:
                at, samples = self._last[url]
                host = host_from_samples(
                    url, samples, data_age_s=now - at, stale_after_s=self.stale_after_s, stale=True, error=error
                )
            else:
                host = FleetHost(key=url, error=error)
            hosts.append(host)
        return FleetSnapshot(time=now, source=self.description, hosts=tuple(hosts))


def _promql_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class PrometheusFleet:
    """Reads every host's ``rlwatch_`` series from a Prometheus server's HTTP API."""

    def __init__(
        self,
        url: str,
        *,
        job: str | None = None,
        stale_after_s: float = 60.0,
        timeout_s: float = 5.0,
        lookback_s: float = 3600.0,
        clock: Clock | None = None,
    ) -> None:
        url = url.strip().rstrip("/")
        self.url = _check_http(url if "://" in url else "http://" + url)
        self.job = job
        self.stale_after_s = stale_after_s
        self.timeout_s = timeout_s
        self.lookback_s = lookback_s
        self.clock: Clock = clock or SystemClock()
        self.description = f"prometheus {_one_line(self.url)}"
        self._last: FleetSnapshot | None = None

    # -------------------------------------------------------------------- API

    def _api(self, path: str, params: Mapping[str, str]) -> Any:
        query = urllib.parse.urlencode(params)
        body = _get(f"{self.url}{path}?{query}", self.timeout_s, name=f"{self.url}{path}")
        try:
            doc = json.loads(body)
        except ValueError:
            raise FleetError(f"{self.url}{path}: not a Prometheus API answer") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            detail = doc.get("error", "failed") if isinstance(doc, dict) else "failed"
            raise FleetError(f"{self.url}{path}: {_one_line(str(detail))}")
        return doc.get("data")

    def query(self, promql: str, at: float) -> list[dict[str, Any]]:
        """The result of an instant query at time ``at`` (vector or matrix)."""
        data = self._api("/api/v1/query", {"query": promql, "time": f"{at:.3f}"})
        result = data.get("result") if isinstance(data, dict) else None
        return [r for r in result if isinstance(r, dict)] if isinstance(result, list) else []

    def _targets(self) -> list[dict[str, Any]]:
        try:
            data = self._api("/api/v1/targets", {"state": "active"})
        except FleetError:
            return []  # the targets only add scrape errors; the series alone are enough
        active = data.get("activeTargets") if isinstance(data, dict) else None
        return [t for t in active if isinstance(t, dict)] if isinstance(active, list) else []

    # ------------------------------------------------------------------- read

    def _selector(self, extra: str = "") -> str:
        matchers = [f'__name__=~"{PREFIX}.+"']
        if self.job is not None:
            matchers.append(f"job={_promql_string(self.job)}")
        if extra:
            matchers.append(extra)
        return "{" + ",".join(matchers) + "}"

    def read(self) -> FleetSnapshot:
        now = self.clock.time()
        try:
            hosts = self._read(now)
        except FleetError as exc:
            return self._failed(now, str(exc))
        snap = FleetSnapshot(time=now, source=self.description, hosts=hosts)
        self._last = snap
        return snap

    def _failed(self, now: float, error: str) -> FleetSnapshot:
        """Prometheus itself cannot be read: the last known hosts, every one stale."""
        hosts: tuple[FleetHost, ...] = ()
        if self._last is not None:
            gap = now - self._last.time
            hosts = tuple(
                replace(
                    h,
                    stale=True,
                    age_s=None if h.age_s is None else h.age_s + gap,
                    error=h.error or "prometheus not answering",
                )
                for h in self._last.hosts
            )
        return FleetSnapshot(time=now, source=self.description, hosts=hosts, error=error)

    def _samples(self, selector: str, at: float) -> dict[tuple[str, str], list[Sample]]:
        """The instant query's samples, by target."""
        out: dict[tuple[str, str], list[Sample]] = defaultdict(list)
        for r in self.query(selector, at):
            metric = r.get("metric") or {}
            value = _value(r.get("value"))
            if value is not None and "__name__" in metric:
                out[_target(metric)].append((metric["__name__"], metric, value[1]))
        return out

    def _read(self, now: float) -> tuple[FleetHost, ...]:
        live = self._samples(self._selector(), now)
        info = PREFIX + "info" + ("" if self.job is None else "{job=" + _promql_string(self.job) + "}")
        # When each live host was last scraped: the samples' own timestamps, exact.
        scraped = {_target(r.get("metric") or {}): v[1] for r, v in self._vector(f"timestamp({info})", now)}
        # Every host that reported within the look-back window, live or not (one sample per series: cheap).
        known = {
            _target(r.get("metric") or {}) for r, _ in self._vector(f"last_over_time({info}[{self._window}])", now)
        }
        jobs = {self.job} if self.job is not None else {job for job, _ in (*live, *known)}
        scrape: dict[tuple[str, str], dict[str, Any]] = {}
        for t in self._targets():
            key = _target(t.get("labels") or {})
            if key[0] in jobs:
                scrape[key] = t
        return tuple(
            self._host(key, now, live.get(key), scraped.get(key), scrape.get(key))
            for key in sorted(set(live) | known | set(scrape))
        )

    @property
    def _window(self) -> str:
        return f"{max(1, round(self.lookback_s))}s"

    def _vector(self, promql: str, at: float) -> list[tuple[dict[str, Any], tuple[float, float]]]:
        out = []
        for r in self.query(promql, at):
            value = _value(r.get("value"))
            if value is not None:
                out.append((r, value))
        return out

    def _last_scrape(self, job: str, instance: str, now: float) -> float | None:
        """When a host that stopped reporting was last scraped: the newest of its info samples in the window."""
        selector = f"{PREFIX}info{{job={_promql_string(job)},instance={_promql_string(instance)}}}[{self._window}]"
        stamps = [
            v[0] for r in self.query(selector, now) for v in (_value(x) for x in r.get("values") or []) if v is not None
        ]
        return max(stamps) if stamps else None

    def _host(
        self,
        key: tuple[str, str],
        now: float,
        live: list[Sample] | None,
        scraped: float | None,
        target: dict[str, Any] | None,
    ) -> FleetHost:
        job, instance = key
        scrape_error = _one_line(str(target.get("lastError") or "")) if target else ""
        down = target is not None and target.get("health") == "down"
        if live and not down:
            age = max(0.0, now - scraped) if scraped is not None else 0.0
            return host_from_samples(instance, live, data_age_s=age, stale_after_s=self.stale_after_s, job=job)
        seen = self._last_scrape(job, instance, now)
        if scrape_error:
            error = f"scrape failed: {scrape_error}"
        elif seen is not None:
            error = "no longer scraped"
        elif target is not None and target.get("health") == "unknown":
            error = "not scraped yet"
        else:
            error = "no rlwatch metrics"
        if seen is None:
            return FleetHost(key=instance, job=job, error=error)
        # The last scrape that worked, exactly: its samples carry that timestamp and precede the staleness markers.
        selector = self._selector(f"job={_promql_string(job)},instance={_promql_string(instance)}")
        samples = self._samples(selector, seen).get(key, [])
        return host_from_samples(
            instance,
            samples,
            data_age_s=max(0.0, now - seen),
            stale_after_s=self.stale_after_s,
            stale=True,
            error=error,
            job=job,
        )


def _target(labels: Mapping[str, Any]) -> tuple[str, str]:
    return (str(labels.get("job", "")), str(labels.get("instance", "")))


def _value(pair: object) -> tuple[float, float] | None:
    """A Prometheus API ``[timestamp, "value"]`` pair; None for anything malformed."""
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return None
    try:
        return float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        return None


def make_fleet_source(cfg: FleetConfig, *, clock: Clock | None = None) -> FleetSource:
    """The source the configuration names: Prometheus when given, else the exporter URLs."""
    if cfg.prometheus:
        return PrometheusFleet(
            cfg.prometheus,
            job=cfg.job,
            stale_after_s=cfg.stale_after_s,
            timeout_s=cfg.timeout_s,
            lookback_s=cfg.lookback_s,
            clock=clock,
        )
    if cfg.exporters:
        return ExporterFleet(cfg.exporters, stale_after_s=cfg.stale_after_s, timeout_s=cfg.timeout_s, clock=clock)
    raise FleetError("no fleet to read: give fleet.prometheus or fleet.exporters")
