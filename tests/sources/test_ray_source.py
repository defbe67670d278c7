"""Ray's view of a run (rlwatch/sources/ray.py): where its cluster is (process command lines in a /proc of our own),
its token (found where Ray's client finds it, sent only where it may go), and the State API's HTTP rules (no proxy,
no redirect followed with the token, one line for every failure)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import Config, Provenance, RayConfig
from rlwatch.sources.ray import RaySource, auth_token, find_cluster, query_state_api

SESSION = "/tmp/ray/session_2026-11-26_13-08-50_697416_19311"


def _proc(root: Path, pid: int, *argv: str, uid: int | None = None) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    who = os.geteuid() if uid is None else uid
    (d / "status").write_text(f"Name:\t{os.path.basename(argv[0])}\nUid:\t{who}\t{who}\t{who}\t{who}\n")


def test_the_cluster_from_its_command_lines(tmp_path: Path) -> None:
    """The raylet's and the dashboard's command lines as ps.txt of tests/real/ray shows them."""
    _proc(
        tmp_path,
        19773,
        "/srv/run/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet",
        f"--raylet_socket_name={SESSION}/sockets/raylet",
        "--node_id=30049a14da9ce1a88e0ebcfb2bbcd1a66da414fa4d5e89a91c8f4ecc",
        f"--log_dir={SESSION}/logs",
        "--webui=127.0.0.1:8265",
    )
    _proc(
        tmp_path,
        19482,
        "/srv/run/venv/bin/python3",
        "/srv/run/venv/lib/python3.11/site-packages/ray/dashboard/dashboard.py",
        "--host=0.0.0.0",
        "--port=8275",
    )
    _proc(tmp_path, 20063, "ray::TaskRunner.run", "", "")
    _proc(tmp_path, 99, "vim", "/srv/run/ray/core/src/ray/raylet/raylet")  # a name on a command line is no raylet
    c = find_cluster(str(tmp_path))
    assert c.running and set(c.pids) == {19773, 19482}
    assert c.log_dirs == (f"{SESSION}/logs",)
    assert c.dashboard == "http://127.0.0.1:8275"  # the dashboard's own --port; 0.0.0.0 is reached on loopback
    assert c.node_ids == ("30049a14da9ce1a88e0ebcfb2bbcd1a66da414fa4d5e89a91c8f4ecc",)
    assert not find_cluster(str(tmp_path / "nothing")).running


def test_the_token_where_rays_client_finds_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    assert auth_token({}, home) is None
    (home / ".ray" / "auth_token").write_text("from-home\n")
    assert auth_token({}, home) == "from-home"
    other = tmp_path / "tok"
    other.write_text("from-path")
    assert auth_token({"RAY_AUTH_TOKEN_PATH": str(other)}, home) == "from-path"
    assert auth_token({"RAY_AUTH_TOKEN": " from-env ", "RAY_AUTH_TOKEN_PATH": str(other)}, home) == "from-env"
    (home / ".ray" / "auth_token").unlink()
    (home / ".ray" / "auth_token").symlink_to("/etc/hostname")  # read only as trust.open_read allows
    auth_token({}, home)  # never raises


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    made: list[_Server] = []
    yield made
    for s in made:
        s.close()


def _handler(status: int, body: bytes, seen: list[dict[str, str]], location: str | None = None) -> type:
    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return H


def test_no_redirect_is_followed_and_no_proxy_used(servers: list[_Server], monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere_seen: list[dict[str, str]] = []
    elsewhere = _Server(_handler(200, b"[]", elsewhere_seen))
    servers.append(elsewhere)
    seen: list[dict[str, str]] = []
    moved = _Server(_handler(302, b"", seen, location=elsewhere.url + "/api/v0/actors"))
    servers.append(moved)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a proxy would be refused: it is never asked
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    data, why = query_state_api(moved.url, "/api/v0/actors?detail=1", token="secret-token", timeout_s=2)
    assert data is None and why == "HTTP 302"
    assert seen[0]["authorization"] == "Bearer secret-token" and elsewhere_seen == []


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (401, b"Unauthorized: Missing authentication token", "HTTP 401: the cluster uses token authentication"),
        (403, b"Forbidden: Invalid authentication token", "HTTP 403: the cluster refused the token"),
        (500, b"", "HTTP 500"),
        (200, b"<html>", "the answer is not JSON"),
        (200, b'{"result": false, "msg": "boom"}', "the State API failed: boom"),
    ],
)
def test_every_failure_is_one_line(servers: list[_Server], status: int, body: bytes, said: str) -> None:
    s = _Server(_handler(status, body, []))
    servers.append(s)
    data, why = query_state_api(s.url, "/api/v0/actors", token=None, timeout_s=2)
    assert data is None and why is not None and why.startswith(said) and "\n" not in why


def test_unreachable_and_not_http() -> None:
    assert query_state_api("http://127.0.0.1:9", "/x", token=None, timeout_s=1)[1] == (
        "connection refused (no dashboard there)"
    )
    assert (query_state_api("file:///etc/passwd", "/x", token=None, timeout_s=1)[1] or "").startswith("not an http")


def test_the_token_goes_only_to_this_hosts_dashboard_or_a_trusted_configurations(tmp_path: Path) -> None:
    def dashboard(url: str, distrust: str | None) -> tuple[str | None, bool]:
        cfg = Config(profile="verl", ray=RayConfig(dashboard=url))
        cfg = cfg.with_provenance(Provenance(source="rlwatch.yaml", distrust=distrust))
        return RaySource(cfg, tmp_path, FakeClock(), proc_root=str(tmp_path / "p"), env={}, home=None)._dashboard()

    # An untrusted file names no dashboard at all, not even on loopback (another user's listener may be there).
    assert dashboard("http://127.0.0.1:8265/", "owned by uid 1001") == (None, False)
    assert dashboard("http://10.0.0.5:8265", None) == ("http://10.0.0.5:8265", True)
    assert dashboard("http://10.0.0.5:8265", "owned by uid 1001") == (None, False)
    # No cluster here and none configured: nothing is asked at all.
    cfg = Config(profile="verl")
    src = RaySource(cfg, tmp_path, FakeClock(), proc_root=str(tmp_path / "p"), env={}, home=None)
    assert src._dashboard() == (None, False)


def test_a_run_without_ray_reads_nothing(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 0.3\n")
    src = RaySource(Config(profile="generic"), tmp_path, FakeClock(), proc_root=str(tmp_path / "p"), env={}, home=None)
    assert src.sample([str(log)]) is None and not src.active
    off = RaySource(
        Config(profile="verl", ray=RayConfig(enabled=False)),
        tmp_path,
        FakeClock(),
        proc_root=str(tmp_path / "p"),
        env={},
        home=None,
    )
    assert off.sample([str(log)]) is None


def test_a_generic_run_whose_log_is_a_ray_drivers_becomes_a_ray_run(tmp_path: Path) -> None:
    log = tmp_path / "driver.log"
    real = Path(__file__).resolve().parents[1] / "real" / "ray" / "verl-actor-sigkill" / "driver.log"
    log.write_bytes(real.read_bytes())
    src = RaySource(Config(profile="generic"), tmp_path, FakeClock(), proc_root=str(tmp_path / "p"), env={}, home=None)
    state = src.sample([str(log)])
    assert src.active and state is not None and state.failure is not None
    assert state.failure.actor is not None and state.failure.actor.pid == 20101
    assert state.driver_logs == (str(log),)
    assert os.path.basename(state.driver_logs[0]) == "driver.log"
