"""The inference-server probe against a real HTTP server on loopback that can answer, fail, hang or misbehave."""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import ServerConfig
from rlwatch.sources.server import ServerProbe, health_url


class StandIn:
    """A loopback server whose behaviour the test switches: ok, 503, hang, garbage, close, reset."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.paths: list[str] = []
        self.release = threading.Event()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stand_in.paths.append(self.path)
                mode = stand_in.mode
                if mode == "ok":
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif mode == "503":
                    self.send_error(503, "Health check failed")
                elif mode == "hang":
                    stand_in.release.wait(30)
                    self.close_connection = True
                elif mode == "garbage":
                    self.wfile.write(b"\x00\xffnot http at all\r\n\r\n")
                    self.close_connection = True
                elif mode == "close":
                    self.close_connection = True
                elif mode == "reset":
                    # Linger 0 and a close of the descriptor itself: the kernel answers with RST, not FIN.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    os.close(self.connection.detach())
                    self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def server() -> Iterator[StandIn]:
    stand_in = StandIn()
    yield stand_in
    stand_in.stop()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe_for(url: str | None, clock: FakeClock | None = None, **kw: object) -> ServerProbe:
    cfg = ServerConfig.model_validate({"kind": "sglang", "url": url, "timeout_s": 2.0, **kw})
    return ServerProbe(cfg, clock or FakeClock())


def test_up(server: StandIn) -> None:
    state = probe_for(server.url).probe(process_alive=True, pid=4242)
    assert state.up is True
    assert (state.status_code, state.error, state.down_since) == (200, None, None)
    assert (state.kind, state.url, state.pid, state.process_alive) == ("sglang", server.url, 4242, True)
    assert state.latency_s is not None and state.latency_s >= 0
    assert server.paths == ["/health"]


def test_http_503_while_the_process_lives(server: StandIn) -> None:
    server.mode = "503"
    state = probe_for(server.url).probe(process_alive=True)
    assert (state.up, state.status_code, state.error) == (False, 503, "HTTP 503")
    assert state.process_alive is True  # incident 5: alive but not healthy


def test_hang_times_out(server: StandIn) -> None:
    server.mode = "hang"
    state = probe_for(server.url, timeout_s=0.3).probe()
    assert (state.up, state.status_code, state.error) == (False, None, "timed out after 0.3s")


def test_garbage_is_a_bad_response(server: StandIn) -> None:
    server.mode = "garbage"
    state = probe_for(server.url).probe()
    assert (state.up, state.error) == (False, "bad response")


def test_closed_without_answer(server: StandIn) -> None:
    server.mode = "close"
    state = probe_for(server.url).probe()
    assert (state.up, state.error) == (False, "closed without a response")


def test_reset_by_peer(server: StandIn) -> None:
    server.mode = "reset"
    state = probe_for(server.url).probe()
    assert (state.up, state.error) == (False, "reset by peer")


def test_connection_refused() -> None:
    state = probe_for(f"http://127.0.0.1:{closed_port()}").probe(process_alive=False)
    assert (state.up, state.error, state.status_code, state.process_alive) == (
        False,
        "connection refused",
        None,
        False,
    )


def test_down_since_follows_the_first_failure(server: StandIn) -> None:
    clock = FakeClock()
    probe = probe_for(server.url, clock, timeout_s=0.3)
    assert probe.probe().down_since is None
    clock.advance(60)
    server.mode = "503"
    went_down = clock.time()
    assert probe.probe().down_since == went_down
    clock.advance(60)
    server.mode = "hang"
    assert probe.probe().down_since == went_down  # still the same outage, whatever the symptom
    server.mode = "ok"
    server.release.set()
    clock.advance(60)
    assert probe.probe().down_since is None
    clock.advance(60)
    server.mode = "503"
    assert probe.probe().down_since == clock.time()


def test_first_failure_ever_starts_the_outage() -> None:
    clock = FakeClock()
    state = probe_for(f"http://127.0.0.1:{closed_port()}", clock).probe()
    assert state.down_since == clock.time()


def test_environment_proxy_is_ignored(server: StandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert probe_for(server.url).probe().up is True


@pytest.mark.parametrize(
    ("kind", "path", "expected"),
    [("sglang", None, "/health"), ("vllm", None, "/health"), ("trl", None, "/health/"), ("trl", "ping", "/ping")],
)
def test_health_path_by_kind(server: StandIn, kind: str, path: str | None, expected: str) -> None:
    cfg = ServerConfig(kind=kind, url=server.url + "/", health_path=path)  # type: ignore[arg-type]
    assert health_url(cfg) == server.url + expected
    assert ServerProbe(cfg, FakeClock()).probe().up is True
    assert server.paths == [expected]


def test_nothing_configured() -> None:
    state = ServerProbe(ServerConfig(), FakeClock()).probe(pid=7)
    assert (state.up, state.url, state.error, state.pid) == (None, None, "no server configured", 7)


def test_bad_url_never_raises() -> None:
    state = probe_for("not a url").probe()
    assert state.up is False
    assert state.error is not None and state.error.startswith("bad url") and "\n" not in state.error
