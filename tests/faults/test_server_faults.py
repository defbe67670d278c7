"""The inference server misbehaving on a real loopback socket: hung, 503, garbage, a port held by something else."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json_dict
from tests.faults.conftest import FaultRow, make_engine, run_cli
from tests.simhost import wait_until

pytestmark = pytest.mark.faults

REFUSED = "HTTPUtils WARNING: ConnectionRefusedError(111, \"Connect call failed ('10.0.0.1', 30000)\")\n"
ANSWERS = {
    "ok": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
    "503": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "404": b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "garbage": b"\x00\xff\x1b[2J SSH-2.0-OpenSSH_9.6\r\n\r\n",
}


class FaultServer:
    """A loopback server whose behaviour can be switched while rlwatch probes it.

    ``hang`` accepts the connection and never answers; ``trickle`` starts a 200 answer and then sends one header
    byte every 50 ms for ever; the other modes send a fixed answer and close.
    """

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.mode = "ok"
        self.requests = 0
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.requests += 1
            if self.mode == "hang":
                self._held.append(conn)
                continue
            if self.mode == "trickle":
                self._held.append(conn)
                threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()
                continue
            try:
                conn.settimeout(1.0)
                conn.recv(4096)
                conn.sendall(ANSWERS[self.mode])
            except OSError:
                pass
            finally:
                conn.close()

    def _trickle(self, conn: socket.socket) -> None:
        try:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not self._stop.wait(0.05):
                conn.sendall(b"z")
        except OSError:
            return

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()


@pytest.fixture
def server() -> Iterator[FaultServer]:
    s = FaultServer()
    yield s
    s.close()


def watched(tmp_path: Path, engines: list[Engine], url: str) -> Engine:
    (tmp_path / "trainer.log").write_text("")
    engine = make_engine(
        tmp_path,
        {
            "training": {"logs": ["*.log"]},
            "server": {"kind": "sglang", "url": url, "timeout_s": 0.3, "interval_s": 0.1},
        },
    )
    engines.append(engine)
    engine.start()
    return engine


def server_state(engine: Engine) -> tuple[bool | None, str | None]:
    srv = engine.snapshot().server
    return (None, None) if srv is None else (srv.up, srv.error)


@pytest.mark.parametrize(
    ("mode", "fault", "shown"),
    [
        ("hang", "server: accepts connections but never answers", "timed out after 0.3s"),
        ("trickle", "server: accepts and answers one byte at a time, for ever", "timed out after 0.3s"),
        ("503", "server: answers 503", "HTTP 503"),
        ("garbage", "server: answers garbage", "bad response"),
        ("404", "server: its port taken by another HTTP service", "HTTP 404"),
    ],
)
def test_sick_server(
    tmp_path: Path,
    engines: list[Engine],
    server: FaultServer,
    fault_row: Callable[[str, str], FaultRow],
    mode: str,
    fault: str,
    shown: str,
) -> None:
    row = fault_row(fault, f"server DOWN with '{shown}' and since when; logs still counted; up again by itself")
    server.mode = mode
    engine = watched(tmp_path, engines, server.url)
    wait_until(lambda: server_state(engine) == (False, shown), 10)
    t0 = time.monotonic()
    with (tmp_path / "trainer.log").open("a") as f:
        f.write(REFUSED)
    wait_until(lambda: engine.snapshot().events["connection_refused"].count == 1, 5)
    counted_in = time.monotonic() - t0
    snap = engine.snapshot()
    assert snap.server is not None and snap.server.down_since is not None
    report = to_json_dict(snap)
    assert report["server"]["up"] is False and report["server"]["error"] == shown
    # Never seen up by this engine: the outage is dated as first seen, not as a "since" no evidence gives.
    when = report["server"]["down_since"] or report["server"]["down_first_seen"]
    assert when is not None
    row.saw(
        f"up=false error {shown!r}, down (first seen {when}); a log line counted {counted_in:.2f}s after it was written"
    )
    server.mode = "ok"
    wait_until(lambda: server_state(engine) == (True, None), 10)
    srv = engine.snapshot().server
    assert srv is not None and srv.down_since is None
    row.saw("after the fix: up=true, down_since cleared")


def test_prometheus_port_taken(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row("server: the exporter's port taken by something else", "one line naming the port, exit status 2")
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        (tmp_path / "rlwatch.yaml").write_text("gpu:\n  backend: none\n")
        out = run_cli("watch", str(tmp_path), "--prometheus", f"127.0.0.1:{port}", "--duration", "5", timeout=30)
    finally:
        blocker.close()
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and str(port) in lines[0], out.stderr
    row.saw(f"exit 2: {lines[0]!r}")
