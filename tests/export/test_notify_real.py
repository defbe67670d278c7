"""Notifications through real parts: Apprise to an HTTP receiver on loopback (json://, ntfy://), to a local SMTP server
(aiosmtpd, mailto://), the heartbeat's GET, `rlwatch notify --test`, and `rlwatch watch` end to end.

Faults are real too: an endpoint that hangs, refuses, answers 500 or is slow. Nothing sleeps to synchronise: tests
wait on a condition with a deadline (``wait_until``, ``Event.wait``, ``Thread.join``).
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import Finding, Severity, Snapshot
from rlwatch.config.models import NotifyConfig
from rlwatch.export.notify.heartbeat import Heartbeat
from rlwatch.export.notify.notifications import Notifications
from rlwatch.export.notify.targets import Target
from tests.simhost import wait_until

TOKEN = "T0KENabcdef123456"


class Receiver:
    """A webhook / ntfy endpoint on loopback. ``mode``: ok, 500, hang (until the test ends), slow (answers late)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[tuple[str, str, bytes]] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with receiver.lock:
                    receiver.requests.append((self.command, self.path, body))
                if receiver.mode == "hang":
                    receiver.release.wait(60)
                elif receiver.mode == "slow":
                    receiver.release.wait(0.5)  # the fault itself: an endpoint slower than usual, within the timeout
                code = 500 if receiver.mode == "500" else 200
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PUT = _any

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, scheme: str = "json", path: str = f"hook/{TOKEN}") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/{path}"

    def got(self) -> list[tuple[str, str, bytes]]:
        with self.lock:
            return list(self.requests)

    def json(self) -> list[dict[str, Any]]:
        return [json.loads(body) for method, _, body in self.got() if method == "POST"]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when this returns: nothing listens there


def notices(*targets: Target, **cfg: Any) -> Notifications:
    base: dict[str, Any] = {"retries": 0, "backoff_s": 0.01, "timeout_s": 5.0}
    n = Notifications(
        list(targets), NotifyConfig.model_validate(base | cfg), host="pod-7", run_dir="/data/run", clock=FakeClock()
    )
    n.start()
    return n


def server_down() -> Snapshot:
    f = Finding(Severity.CRITICAL, "server_down", "The inference server http://127.0.0.1:30000 is down.", 1.7e9)
    return Snapshot("pod-7", 1.7e9 + 60, "areal", "/data/run", findings=(f,))


# ---------------------------------------------------------------------------------------------- delivery


def test_json_webhook_gets_host_run_what_since_done_and_look_and_no_token(receiver: Receiver) -> None:
    n = notices(Target(receiver.url()))
    n.observe(server_down(), "nothing yet: no policy has fired")
    wait_until(lambda: receiver.json() and n.idle(), 20)
    method, path, _ = receiver.got()[0]
    msg = receiver.json()[0]
    assert method == "POST" and path == f"/hook/{TOKEN}"
    assert msg["type"] == "failure"
    assert msg["title"] == "rlwatch pod-7: CRITICAL new: The inference server http://127.0.0.1:30000 is down."
    lines = msg["message"].splitlines()
    assert lines[:3] == ["host: pod-7", "run: /data/run", f"what: new: {msg['title'].split('new: ', 1)[1]}"]
    assert lines[3].startswith("since: ")
    assert lines[-2:] == ["done: nothing yet: no policy has fired", "look: rlwatch report /data/run"]
    assert TOKEN not in json.dumps(msg)
    state = n.state()
    assert state["targets"][0]["sent"] == 1 and state["last_message"] == msg["title"] and state["error"] is None
    n.close()


def test_ntfy_gets_the_message_on_its_topic(receiver: Receiver) -> None:
    n = notices(Target(receiver.url("ntfy", "rlwatch-alerts"), "info"))
    n.observe(server_down(), "nothing")
    wait_until(lambda: receiver.json(), 20)
    msg = receiver.json()[0]
    assert msg["topic"] == "rlwatch-alerts" and "look: rlwatch report /data/run" in msg["message"]
    n.close()


def test_mailto_goes_through_a_real_smtp_server() -> None:
    from aiosmtpd.controller import Controller

    mails: list[tuple[str, list[str], bytes]] = []

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            mails.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
            return "250 OK"

    port = refused_port()
    smtp = Controller(Handler(), hostname="127.0.0.1", port=port)
    smtp.start()
    try:
        url = f"mailto://127.0.0.1:{port}?from=rlwatch@pod-7.example&to=oncall@example.com&mode=insecure"
        n = notices(Target(url))
        n.observe(server_down(), "nothing")
        wait_until(lambda: mails and n.idle(), 20)
        sender, rcpt, content = mails[0]
        text = content.decode("utf-8", "replace")
        assert sender == "rlwatch@pod-7.example" and rcpt == ["oncall@example.com"]
        assert "Subject: rlwatch pod-7: CRITICAL new: The inference server" in text
        assert "look: rlwatch report /data/run" in text.replace("=\r\n", "")
        assert n.state()["targets"][0]["name"] == "mailto://***"
        n.close()
    finally:
        smtp.stop()


# --------------------------------------------------------------------------------------------------- faults


def test_an_endpoint_answering_500_is_retried_then_shown_failing_and_recovers(receiver: Receiver) -> None:
    receiver.mode = "500"
    n = notices(Target(receiver.url()), retries=2)
    n.observe(server_down(), "nothing")
    wait_until(lambda: n.idle() and n.error(), 30)
    assert len(receiver.got()) == 3  # the first attempt and two retries
    error = n.error()
    assert error is not None and error.startswith("json://***: ") and "500" in error and TOKEN not in error
    receiver.mode = "ok"
    n.record({"type": "gave_up", "key": "restart-server:server", "reason": "3 restarts in 10 min"})
    wait_until(lambda: n.idle() and n.error() is None, 30)
    assert n.channels[0].snapshot().sent == 1
    n.close()


def test_a_refused_connection_is_one_redacted_line() -> None:
    n = notices(Target(f"json://127.0.0.1:{refused_port()}/hook/{TOKEN}"))
    n.observe(server_down(), "nothing")
    wait_until(lambda: n.idle() and n.error(), 30)
    error = n.error() or ""
    assert error.startswith("json://***: ") and "\n" not in error and TOKEN not in error
    n.close()


def test_a_slow_endpoint_within_the_timeout_is_delivered(receiver: Receiver) -> None:
    receiver.mode = "slow"
    n = notices(Target(receiver.url()), timeout_s=10)
    n.observe(server_down(), "nothing")
    wait_until(lambda: n.idle() and n.channels[0].snapshot().sent == 1, 30)
    assert n.error() is None
    n.close()


def test_a_hanging_endpoint_times_out_and_never_holds_up_the_feed(receiver: Receiver) -> None:
    receiver.mode = "hang"
    n = notices(Target(receiver.url()), timeout_s=1, queue_size=5)
    fed = threading.Event()

    def feed() -> None:  # what the watchdog's loop does every round: it must return while the endpoint hangs
        clock = n.clock
        assert isinstance(clock, FakeClock)
        for i in range(1000):
            f = Finding(Severity.CRITICAL, f"kind_{i % 50}", f"failure {i}", None)
            n.observe(Snapshot("pod-7", 1.7e9, "areal", "/data/run", findings=(f,)), "nothing")
            n.record({"type": "action", "ok": False, "key": "k", "action": "restart-workers", "message": "x"})
            n.tick()
            clock.advance(1)
        fed.set()

    worker = threading.Thread(target=feed, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert fed.is_set(), "the feed path blocked on a hanging endpoint"
    wait_until(lambda: receiver.got(), 10)
    wait_until(lambda: n.error() and "dropped" not in (n.error() or ""), 30)  # the stuck delivery timed out
    st = n.channels[0].snapshot()
    assert st.dropped > 900 and st.failed >= 1 and st.sent == 0
    assert st.error and st.error.startswith("A Connection error occurred sending JSON notification")  # a read timeout
    n.close(flush_s=0)


def test_the_heartbeat_gets_its_url_and_reports_a_failing_one(receiver: Receiver) -> None:
    clock = FakeClock()
    hb = Heartbeat(receiver.url("http", f"ping/{TOKEN}"), 60, 5, clock=clock)
    hb.start()
    assert hb.due()
    wait_until(lambda: hb.snapshot().last_ok_at is not None, 20)
    assert receiver.got()[0][:2] == ("GET", f"/ping/{TOKEN}")
    assert not hb.due()  # not again within every_s
    receiver.mode = "500"
    clock.advance(60)
    assert hb.due()
    wait_until(lambda: hb.snapshot().error, 20)
    st = hb.snapshot()
    assert st.error == "HTTP 500" and st.shown == "http://***" and st.last_ok_at == clock.time() - 60
    receiver.mode = "hang"
    clock.advance(60)
    assert hb.due()  # asking returns at once; the ping hangs on its own thread
    hb.close()


# ------------------------------------------------------------------------------------------ the commands


def _rlwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_notify_test_sends_or_fails_in_one_redacted_line(receiver: Receiver, tmp_path: Path) -> None:
    ok = _rlwatch("notify", str(tmp_path), "--test", receiver.url())
    assert ok.returncode == 0 and ok.stdout.strip() == "test message sent", ok.stderr
    assert "a test message from rlwatch" in receiver.json()[0]["message"]
    receiver.mode = "500"
    bad = _rlwatch("notify", str(tmp_path), "--test", receiver.url())
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("rlwatch: json://***: ") and bad.stderr.count("\n") == 1
    assert TOKEN not in bad.stderr
    unknown = _rlwatch("notify", str(tmp_path), "--test", f"nosuch://{TOKEN}")
    assert unknown.returncode == 1 and TOKEN not in unknown.stderr and "nosuch://***" in unknown.stderr
    receiver.mode = "ok"
    env = _rlwatch(
        "notify", str(tmp_path), "--test", env={"RLWATCH_NOTIFY": f"{receiver.url()} , {receiver.url('ntfy')}"}
    )
    assert env.returncode == 0, env.stderr
    assert env.stdout.splitlines() == ["json://***: test message sent", "ntfy://***: test message sent"]


@pytest.mark.slow
def test_watch_tells_a_webhook_pings_the_heartbeat_and_the_report_says_when(receiver: Receiver, tmp_path: Path) -> None:
    """The whole path: a run with CUDA OOMs, `rlwatch watch` with a working target and a hanging one; the working
    one hears of it at once, the heartbeat is pinged, and `rlwatch report` shows when both last went out."""
    hanging = Receiver()
    hanging.mode = "hang"
    try:
        (tmp_path / "rlwatch.yaml").write_text(
            "profile: generic\ninterval_s: 0.5\ngpu: {backend: none}\ntraining: {logs: [train.log]}\n"
            "notify: {heartbeat_every_s: 1, timeout_s: 2, retries: 0}\nwatchdog: {heartbeat_s: 0.5}\n"
        )
        (tmp_path / "train.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "rlwatch", "watch", str(tmp_path), "--json", "--duration", "120",
                "--notify", hanging.url(path="stuck"), "--heartbeat", receiver.url("http", f"ping/{TOKEN}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RLWATCH_NOTIFY": receiver.url(), "RLWATCH_HOST": "pod-7"},
        )  # fmt: skip
        try:
            wait_until(lambda: receiver.json(), 60)
            msg = receiver.json()[0]
            assert msg["title"].startswith("rlwatch pod-7: CRITICAL new: ") and "CUDA out-of-memory" in msg["title"]
            assert f"look: rlwatch report {tmp_path}" in msg["message"]
            wait_until(lambda: any(m == "GET" for m, _, _ in receiver.got()), 30)

            def notified() -> dict[str, Any] | None:
                out = _rlwatch("report", str(tmp_path), "--json")
                wd = json.loads(out.stdout)["watchdog"] or {}
                n = wd.get("notify") or {}
                return n if n.get("last_sent_at") and n.get("heartbeat_at") else None

            n = wait_until(notified, 60)
            assert n["targets"] == ["json://***", "json://***"] and n["heartbeat"] == "http://***"
            assert n["last_message"] == msg["title"]
            text = _rlwatch("report", str(tmp_path)).stdout
            assert (
                "Notifications: json://***, json://***; last sent " in text
                and "Heartbeat: http://*** last ping" in text
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        first = json.loads(out.splitlines()[0])
        assert first["type"] in ("state", "watchdog")
        assert TOKEN not in out + err
        assert "notifying json://***, json://***; heartbeat http://*** every 1s" in out
        state = (tmp_path / ".rlwatch" / "watchdog.json").read_text()
        assert TOKEN not in state and '"notify"' in state
    finally:
        hanging.close()
