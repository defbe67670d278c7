"""Health of the inference server (SGLang, vLLM, ``trl vllm-serve``) by its HTTP health endpoint.

A server process that lives while its health check fails is one of the incidents rlwatch exists for, so the probe
reports the HTTP answer and the process's liveness side by side and never infers one from the other. Failures are
put in the words a person would use ("connection refused", "timed out after 2.0s", "HTTP 503") because they are
shown as they are. Proxies from the environment are ignored: a pod's ``http_proxy`` must never swallow a probe of a
server on the same host.
"""

from __future__ import annotations

import functools
import socket
import threading
from typing import TYPE_CHECKING

from rlwatch.common.clock import Clock
from rlwatch.common.state import ServerState
from rlwatch.config.models import ServerConfig
from rlwatch.sources import one_line

if TYPE_CHECKING:
    import urllib.request

DEFAULT_HEALTH_PATHS = {"sglang": "/health", "vllm": "/health", "trl": "/health/"}

MAX_STUCK = 3  # requests left hanging on a server that never finishes its answer


@functools.cache
def _opener() -> urllib.request.OpenerDirector:
    """urllib's opener without the environment's proxies, built at the first probe: urllib.request, http.client and
    ssl cost 20-40 ms of the start of a command that may never probe a server (a report of a run without one)."""
    import urllib.request

    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def health_url(cfg: ServerConfig) -> str | None:
    if not cfg.url:
        return None
    path = cfg.health_path if cfg.health_path is not None else DEFAULT_HEALTH_PATHS.get(cfg.kind or "", "/health")
    if path and not path.startswith("/"):
        path = "/" + path
    return cfg.url.rstrip("/") + path


def _describe(exc: BaseException, timeout_s: float) -> str:
    """An exception from urllib in the words of a person looking at a server."""
    import http.client
    import urllib.error

    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        reason = exc.reason
        if isinstance(reason, BaseException):
            return _describe(reason, timeout_s)
        return str(reason) or "unreachable"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"timed out after {timeout_s:g}s"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "closed without a response"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "reset by peer"
    if isinstance(exc, http.client.HTTPException):
        return "bad response"
    if isinstance(exc, socket.gaierror):
        return f"host not found ({exc.strerror or exc})"
    if isinstance(exc, ValueError):
        return f"bad url ({one_line(exc)})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return one_line(exc)


def _request(url: str, timeout: float) -> tuple[int | None, str | None]:
    import urllib.error
    import urllib.request

    try:
        request = urllib.request.Request(url, method="GET", headers={"User-Agent": "rlwatch"})  # noqa: S310
        with _opener().open(request, timeout=timeout) as response:
            return int(response.status), None
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code), None
    except Exception as exc:  # every failure is an answer about the server, never an error of rlwatch
        return None, _describe(exc, timeout)


class ServerProbe:
    """One blocking GET per :meth:`probe`; remembers since when the server has been down."""

    def __init__(self, cfg: ServerConfig, clock: Clock) -> None:
        self._cfg = cfg
        self._clock = clock
        self._url = health_url(cfg)
        self._down_since: float | None = None
        self._stuck: list[threading.Thread] = []

    @property
    def url(self) -> str | None:
        return self._url

    def _ask(self, url: str, timeout: float) -> tuple[int | None, str | None]:
        """The health endpoint's status code, or why there is none, within about ``timeout`` whatever happens.

        The socket timeout bounds each wait, not the whole answer: a server that trickles a byte at a time would
        hold a probe for ever and leave the last state on screen as if fresh. So the request runs on a thread of
        its own that is waited on with a deadline. A few stuck requests are let be (the server may answer new
        connections again while an old one hangs); beyond that no other is started until one of them ends.
        """
        self._stuck = [t for t in self._stuck if t.is_alive()]
        if len(self._stuck) >= MAX_STUCK:
            return None, f"timed out after {timeout:g}s"
        answer: list[tuple[int | None, str | None]] = []
        thread = threading.Thread(
            target=lambda: answer.append(_request(url, timeout)), name="rlwatch-server-probe", daemon=True
        )
        thread.start()
        thread.join(timeout + 1.0)
        if not answer:
            self._stuck.append(thread)
            return None, f"timed out after {timeout:g}s"
        return answer[0]

    def probe(self, process_alive: bool | None = None, pid: int | None = None) -> ServerState:
        """Ask the health endpoint once. ``up`` is None only when no server URL is configured."""
        if self._url is None:
            return ServerState(
                kind=self._cfg.kind,
                url=None,
                up=None,
                down_since=None,
                pid=pid,
                error="no server configured",
                process_alive=process_alive,
            )
        timeout = self._cfg.timeout_s
        started = self._clock.monotonic()
        status, error = self._ask(self._url, timeout)
        latency = max(0.0, self._clock.monotonic() - started)
        up = status is not None and 200 <= status < 300
        if status is not None and not up:
            error = f"HTTP {status}"
        if up:
            self._down_since = None
        elif self._down_since is None:
            self._down_since = self._clock.time()
        return ServerState(
            kind=self._cfg.kind,
            url=self._cfg.url,
            up=up,
            down_since=self._down_since,
            pid=pid,
            status_code=status,
            error=error,
            latency_s=latency,
            process_alive=process_alive,
        )
