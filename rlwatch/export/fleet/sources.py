"""Where the fleet is read from: every pod's exporter directly, or one Prometheus server."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Protocol

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.config.models import FleetConfig
from rlwatch.export.fleet.http import check_http, error_line, exporter_url, fetch_body, parse_exposition, reason_of
from rlwatch.export.fleet.model import PREFIX, FleetError, FleetHost, FleetSnapshot, Sample
from rlwatch.export.fleet.samples import host_from_samples


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
        body = fetch_body(url, self.timeout_s)
        samples = parse_exposition(body.decode("utf-8", "replace"))
        if not any(name == PREFIX + "info" for name, _, _ in samples):
            raise FleetError(f"{error_line(url)}: no rlwatch metrics there")
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
                        results[url] = FleetError(f"{error_line(url)}: {reason_of(exc)}")
        hosts = []
        for url in self.urls:
            got = results.get(url)
            if isinstance(got, list):
                self._last[url] = (now, got)
                hosts.append(host_from_samples(url, got, data_age_s=0.0, stale_after_s=self.stale_after_s))
                continue
            error = str(got) if got is not None else "not read"
            error = error.removeprefix(f"{error_line(url)}: ")
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
        self.url = check_http(url if "://" in url else "http://" + url)
        self.job = job
        self.stale_after_s = stale_after_s
        self.timeout_s = timeout_s
        self.lookback_s = lookback_s
        self.clock: Clock = clock or SystemClock()
        self.description = f"prometheus {error_line(self.url)}"
        self._last: FleetSnapshot | None = None

    # -------------------------------------------------------------------- API

    def _api(self, path: str, params: Mapping[str, str]) -> Any:
        query = urllib.parse.urlencode(params)
        body = fetch_body(f"{self.url}{path}?{query}", self.timeout_s, name=f"{self.url}{path}")
        try:
            doc = json.loads(body)
        except ValueError:
            raise FleetError(f"{self.url}{path}: not a Prometheus API answer") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            detail = doc.get("error", "failed") if isinstance(doc, dict) else "failed"
            raise FleetError(f"{self.url}{path}: {error_line(str(detail))}")
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
        scrape_error = error_line(str(target.get("lastError") or "")) if target else ""
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
