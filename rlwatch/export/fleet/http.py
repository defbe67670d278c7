"""Small, bounded HTTP reads and the Prometheus text format, with errors in one line."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from rlwatch.common.textsafe import clean_line
from rlwatch.export.fleet.model import ERROR_MAX, MAX_BODY, FleetError, Sample


def error_line(text: str) -> str:
    line = " ".join(clean_line(text).split())
    return line if len(line) <= ERROR_MAX else line[: ERROR_MAX - 1] + "…"


def reason_of(exc: BaseException) -> str:
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
    return error_line(str(exc)) or type(exc).__name__


def _http_error(exc: urllib.error.HTTPError) -> str:
    """``HTTP 400``, with the Prometheus API's own one-line error where the answer carries one."""
    try:
        doc = json.loads(exc.read(64 * 1024))
    except (OSError, ValueError):
        doc = None
    detail = doc.get("error") if isinstance(doc, dict) else None
    return f"HTTP {exc.code}: {error_line(str(detail))}" if detail else f"HTTP {exc.code}"


def fetch_body(url: str, timeout_s: float, *, name: str | None = None) -> bytes:
    """The body at ``url``; every failure is a one-line :class:`FleetError` naming ``name`` (default: the URL)."""
    where = error_line(name or url)
    req = urllib.request.Request(url, headers={"User-Agent": "rlwatch-fleet"})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310  (http(s) checked by callers)
            body: bytes = resp.read(MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        raise FleetError(f"{where}: {_http_error(exc)}") from None
    except (OSError, ValueError) as exc:
        raise FleetError(f"{where}: {reason_of(exc)}") from None
    if len(body) > MAX_BODY:
        raise FleetError(f"{where}: answer larger than {MAX_BODY} bytes")
    return body


def check_http(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FleetError(f"{error_line(url)}: expected an http:// or https:// URL")
    return url


def exporter_url(text: str) -> str:
    """``host:port`` or a URL without a path, completed to the exporter's ``/metrics`` URL."""
    url = text.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/metrics", parts.query, ""))
    return check_http(url)


def parse_exposition(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition; raises :class:`FleetError` on anything else."""
    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        ]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise FleetError(f"not a Prometheus exposition: {error_line(str(exc))}") from None
