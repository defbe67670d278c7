"""The fleet's reading side and its screen, without Prometheus: exporter URLs on loopback, grouping, staleness,
errors, and the keys of the fleet screen.

Rows are checked against the snapshots the exporters served (tests/snapshot_data.py), so a value that goes missing
anywhere between the engine's snapshot and the fleet row fails here.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import Severity, Snapshot
from rlwatch.config.models import FleetConfig
from rlwatch.export.exporter import Exporter, SnapshotCollector, last_exception, start_exporter
from rlwatch.export.fleet import (
    ExporterFleet,
    FleetError,
    FleetException,
    FleetFinding,
    FleetHost,
    FleetSnapshot,
    HostStatus,
    PrometheusFleet,
    exporter_url,
    group_hosts,
    host_from_samples,
    make_fleet_source,
    parse_exposition,
)
from rlwatch.tui.fleet import FleetApp
from rlwatch.tui.launch import main
from tests import fleet_data
from tests import snapshot_data as data
from tests.promserver import free_port

CRIT, WARN, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO


def snapshot(name: str) -> Snapshot:
    return data.SCENARIOS[name][0]()


def exposed(snap: Snapshot, *, now: float | None = None) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, clock=FakeClock(snap.time if now is None else now)))
    return generate_latest(reg).decode()


# --------------------------------------------------------------------------------------------- rows


@pytest.mark.parametrize("scenario", list(data.SCENARIOS))
def test_a_row_carries_what_the_snapshot_said(scenario: str) -> None:
    snap = snapshot(scenario)
    host = host_from_samples("pod:9410", parse_exposition(exposed(snap)), data_age_s=0.0, stale_after_s=60)
    assert host.host == snap.host and host.profile == snap.profile and host.run_dir == snap.run_dir
    assert not host.stale and host.age_s == 0.0
    assert host.step == (snap.training.last_step if snap.training else None)
    assert host.server_up == (snap.server.up if snap.server else None)
    assert host.events == {k: e.count for k, e in snap.events.items()}
    assert {(f.severity, f.code) for f in host.findings} == {(f.severity, f.code) for f in snap.findings}
    worst = snap.worst
    if worst is None or worst is INFO:
        assert host.status is HostStatus.OK
    else:
        assert host.status.value == worst.value
    assert len(host.gpus) == len(snap.gpus)
    if snap.memory is not None:
        assert host.mem_available_bytes == snap.memory.available_bytes
    if snap.recover is not None:
        assert host.resume_step == snap.recover.resume_global_step
    inc = last_exception(snap)
    if inc is None:
        assert host.exception is None
    else:
        assert host.exception is not None
        assert (host.exception.signature, host.exception.title) == (inc.signature, inc.title)
    alive = {(p.role, p.name) for p in snap.processes if p.alive}
    assert {(p.role, p.name) for p in host.processes if p.up} == alive


def test_an_exporter_serving_an_old_snapshot_is_stale() -> None:
    snap = snapshot("healthy")
    samples = parse_exposition(exposed(snap, now=snap.time + 90))
    host = host_from_samples("pod", samples, data_age_s=5.0, stale_after_s=60)
    assert host.stale and host.status is HostStatus.STALE
    assert host.age_s == pytest.approx(95.0)
    assert host.error == "no new data for 95s"


def test_samples_without_rlwatch_info_are_no_data() -> None:
    host = host_from_samples("pod", [("node_load1", {}, 0.5)], data_age_s=0.0, stale_after_s=60)
    assert host.status is HostStatus.NO_DATA and host.error == "no rlwatch metrics"


def host(name: str, *findings: FleetFinding, sig: str | None = None, **changes: object) -> FleetHost:
    exc = FleetException(sig, "E", f"E: {sig}") if sig else None
    base = FleetHost(key=f"{name}:9410", host=name, stale=False, age_s=1.0, findings=findings, exception=exc)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_status_is_the_worst_finding_unless_the_data_is_stale() -> None:
    assert host("a").status is HostStatus.OK
    assert host("a", FleetFinding(INFO, "no_watchdog")).status is HostStatus.OK
    assert host("a", FleetFinding(WARN, "w")).status is HostStatus.WARNING
    assert host("a", FleetFinding(CRIT, "c")).status is HostStatus.CRITICAL
    assert host("a", FleetFinding(CRIT, "c"), stale=True).status is HostStatus.STALE
    assert FleetHost(key="x:1").status is HostStatus.NO_DATA


def test_hosts_failing_the_same_way_are_one_group_and_come_first() -> None:
    hosts = [
        host("ok-1"),
        host("lone", FleetFinding(CRIT, "server_down"), sig="bbb"),
        host("crash-b", FleetFinding(CRIT, "crash_repeating"), sig="aaa"),
        host("warn", FleetFinding(WARN, "memory_high")),
        host("crash-a", FleetFinding(CRIT, "crash_repeating"), sig="aaa"),
        host("old", FleetFinding(WARN, "x"), sig="ccc", stale=True),
    ]
    groups = group_hosts(hosts)
    assert [g.signature for g in groups] == ["aaa", "bbb", "ccc", None]
    assert [h.name for h in groups[0].hosts] == ["crash-a", "crash-b"]
    assert groups[0].title == "E: aaa" and groups[0].status is HostStatus.CRITICAL
    assert [h.name for h in groups[-1].hosts] == ["warn", "ok-1"]  # worst first within a group


# ------------------------------------------------------------------------------------ exporter URLs


@pytest.fixture
def exporters() -> Iterator[list[Exporter]]:
    started: list[Exporter] = []
    yield started
    for ex in started:
        ex.close()


def serve(exporters: list[Exporter], snap: Snapshot) -> Exporter:
    ex = start_exporter(lambda: snap, "127.0.0.1", 0, clock=FakeClock(snap.time + 1))
    exporters.append(ex)
    return ex


def test_reads_every_exporter_and_turns_a_stopped_one_stale(exporters: list[Exporter]) -> None:
    crash, healthy = snapshot("server-crash"), snapshot("healthy")
    a = serve(exporters, replace(crash, host="pod-a"))
    b = serve(exporters, replace(healthy, host="pod-b"))
    clock = FakeClock()
    fleet = ExporterFleet([a.url, f"127.0.0.1:{b.port}"], stale_after_s=60, clock=clock)
    first = fleet.read()
    assert first.source == "2 exporters" and first.error is None
    rows = {h.name: h for h in first.hosts}
    assert rows["pod-a"].status is HostStatus.CRITICAL and rows["pod-a"].server_up is False
    assert rows["pod-b"].status is HostStatus.OK and rows["pod-b"].key == b.url

    a.close()
    clock.advance(42)
    second = {h.name: h for h in fleet.read().hosts}
    gone = second["pod-a"]
    assert gone.stale and gone.status is HostStatus.STALE
    assert gone.error == "connection refused"
    assert gone.age_s is not None and gone.age_s >= 42
    assert gone.server_up is False and gone.step == rows["pod-a"].step  # last known values, kept
    assert not second["pod-b"].stale


def test_an_exporter_never_reached_is_a_row_with_its_error() -> None:
    port = free_port()
    fleet = ExporterFleet([f"127.0.0.1:{port}"], timeout_s=2)
    (row,) = fleet.read().hosts
    assert row.status is HostStatus.NO_DATA
    assert row.key == f"http://127.0.0.1:{port}/metrics" and row.error == "connection refused"


class _Canned(BaseHTTPRequestHandler):
    body = b""
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[Callable[[bytes, int], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(body: bytes, status: int = 200) -> str:
        handler = type("H", (_Canned,), {"body": body, "status": status})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_garbage_answers_are_errors_not_exceptions(canned: Callable[[bytes, int], str]) -> None:
    html = canned(b"<html><body>login</body></html>\n", 200)
    other = canned(b"# TYPE node_load1 gauge\nnode_load1 0.5\n", 200)
    failing = canned(b"oops", 503)
    fleet = ExporterFleet([html, other, failing], timeout_s=5)
    rows = {h.key: h for h in fleet.read().hosts}
    assert all(h.status is HostStatus.NO_DATA for h in rows.values())
    assert (rows[f"{html}/metrics"].error or "").startswith("not a Prometheus exposition")
    assert rows[f"{other}/metrics"].error == "no rlwatch metrics there"
    assert rows[f"{failing}/metrics"].error == "HTTP 503"


def test_prometheus_errors_are_one_line_and_keep_nothing_made_up(canned: Callable[[bytes, int], str]) -> None:
    port = free_port()
    down = PrometheusFleet(f"127.0.0.1:{port}", timeout_s=2).read()
    assert down.hosts == ()
    assert down.error == f"http://127.0.0.1:{port}/api/v1/query: connection refused"
    rejected = canned(b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}', 400)
    assert PrometheusFleet(rejected).read().error == f"{rejected}/api/v1/query: HTTP 400: parse error at char 3"
    failed = canned(b'{"status":"error","error":"query timed out"}', 200)
    assert PrometheusFleet(failed).read().error == f"{failed}/api/v1/query: query timed out"
    junk = canned(b"<html>", 200)
    assert PrometheusFleet(junk).read().error == f"{junk}/api/v1/query: not a Prometheus API answer"


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("10.0.0.5:9410", "http://10.0.0.5:9410/metrics"),
        ("http://pod-0:9410", "http://pod-0:9410/metrics"),
        ("https://pod-0/rlwatch/metrics", "https://pod-0/rlwatch/metrics"),
    ],
)
def test_exporter_urls_are_completed(text: str, url: str) -> None:
    assert exporter_url(text) == url


def test_exporter_urls_must_be_http() -> None:
    with pytest.raises(FleetError):
        exporter_url("file:///etc/passwd")


def test_the_config_picks_the_source() -> None:
    prom = make_fleet_source(FleetConfig(prometheus="prom:9090", exporters=["a:1"]))
    assert isinstance(prom, PrometheusFleet) and prom.url == "http://prom:9090"
    direct = make_fleet_source(FleetConfig(exporters=["a:1", "b:2"]))
    assert isinstance(direct, ExporterFleet) and direct.urls == ["http://a:1/metrics", "http://b:2/metrics"]
    with pytest.raises(FleetError):
        make_fleet_source(FleetConfig())


# ---------------------------------------------------------------------------------------------- command


def test_fleet_without_a_source_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet"]) == 2
    assert "give --prometheus URL" in capsys.readouterr().err


def test_fleet_config_errors_name_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text("fleet:\n  exporters: [a:1]\n  promethues: http://x\n")
    assert main(["fleet", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rlwatch: {cfg}:3: fleet.promethues") and "\n" not in err
    assert main(["fleet", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_fleet_runs_the_screen_on_the_configured_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlwatch.tui.launch

    ran: list[FleetApp] = []
    monkeypatch.setattr(rlwatch.tui.launch, "need_terminal", lambda: None)  # pytest's stdin is no terminal
    monkeypatch.setattr(rlwatch.tui.launch, "run_app", ran.append)
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text("fleet:\n  exporters: [10.0.0.5:9410]\n  refresh_s: 2.5\n")
    assert main(["fleet", "--config", str(cfg)]) == 0
    assert main(["fleet", "--config", str(cfg), "--prometheus", "prom:9090"]) == 0
    direct, prom = (app.read.__self__ for app in ran)  # type: ignore[attr-defined]
    assert isinstance(direct, ExporterFleet) and direct.urls == ["http://10.0.0.5:9410/metrics"]
    assert isinstance(prom, PrometheusFleet) and prom.url == "http://prom:9090"
    assert ran[0].refresh_s == 2.5 and ran[0].live


# ----------------------------------------------------------------------------------------------- screen


async def test_enter_shows_a_host_and_escape_closes_it() -> None:
    app = FleetApp(fleet_data.fleet, live=False)
    async with app.run_test(size=(160, 36)) as pilot:
        screen = app.fleet_screen
        await pilot.press("down", "down", "down", "enter")
        assert screen.detail_key == "host:" + next(h.key for h in fleet_data.fleet().hosts if h.name == "pod-1")
        assert app.query_one("#fleet-detail").has_class("-shown")
        await pilot.press("escape")
        assert not app.query_one("#fleet-detail").has_class("-shown")
        await pilot.press("up", "up", "up", "enter")
        assert screen.detail_key == f"group:{fleet_data.SHARED_SIG}"


async def test_a_refresh_keeps_the_cursor_on_the_same_host() -> None:
    reads = [fleet_data.fleet()]

    def read() -> FleetSnapshot:
        return reads[-1]

    app = FleetApp(read, live=True, refresh_s=3600)
    async with app.run_test(size=(160, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.fleet_screen
        while screen.table.selected_key() != "host:" + fleet_data.fleet().hosts[0].key:  # pod-0, the last row
            await pilot.press("down")
        # pod-0 now fails: it moves up the table, and the cursor goes with it.
        pod0 = replace(fleet_data.fleet().hosts[0], findings=(FleetFinding(CRIT, "server_down"),))
        reads.append(replace(reads[0], hosts=(pod0, *reads[0].hosts[1:])))
        await pilot.press("r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert screen.table.selected_key() == f"host:{pod0.key}"
        assert screen.table.cursor_row < len(screen.table.row_keys) - 1


async def test_a_failing_read_leaves_the_screen_up_with_the_error() -> None:
    def read() -> FleetSnapshot:
        raise RuntimeError("boom")

    app = FleetApp(read, live=True, refresh_s=3600)
    async with app.run_test(size=(120, 20)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        status = str(app.query_one("#fleet-status").render())
        assert "reading the fleet failed" in status and "boom" in status


async def test_a_hanging_read_is_not_repeated_and_the_screen_says_how_old_the_fleet_is() -> None:
    clock = FakeClock(fleet_data.NOW)
    release = threading.Event()
    calls: list[float] = []

    def read() -> FleetSnapshot:
        calls.append(clock.time())
        if len(calls) > 1:
            release.wait(10)
        return fleet_data.fleet()

    app = FleetApp(read, live=True, refresh_s=3600, clock=clock)
    async with app.run_test(size=(120, 20)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.press("r")  # the second read hangs
        clock.advance(20000)
        await pilot.press("r", "r")
        await pilot.pause()
        assert len(calls) == 2  # no pile-up behind the hanging read
        assert "last read 5h33m ago" in str(app.query_one("#fleet-status").render())
        release.set()
        await app.workers.wait_for_complete()
        await pilot.press("q")
        await pilot.pause()
        assert app.return_code == 0 and not app.is_running


# ------------------------------------------------------------------------------------------------- fuzz

_NAMES = st.sampled_from(
    [
        "rlwatch_info",
        "rlwatch_findings",
        "rlwatch_last_exception_info",
        "rlwatch_events_total",
        "rlwatch_gpu_utilization_ratio",
        "rlwatch_process_up",
        "rlwatch_snapshot_age_seconds",
        "rlwatch_training_step",
        "rlwatch_budget_gave_up",
        "rlwatch_",
        "other",
    ]
)
_LABELS = st.dictionaries(
    st.sampled_from(["host", "severity", "code", "signature", "type", "title", "kind", "gpu", "role", "name", "x"]),
    st.text(max_size=30),
    max_size=5,
)
_VALUES = st.floats(allow_nan=True, allow_infinity=True)


@given(st.lists(st.tuples(_NAMES, _LABELS, _VALUES), max_size=30), st.floats(0, 1e6) | st.none())
@example(
    [("rlwatch_info", {}, 1.0), ("rlwatch_training_step", {}, math.inf), ("rlwatch_events_total", {}, -math.inf)], 0
)
def test_any_samples_make_a_row_and_never_raise(
    samples: list[tuple[str, dict[str, str], float]], age: float | None
) -> None:
    row = host_from_samples("pod", samples, data_age_s=age, stale_after_s=60)
    assert row.key == "pod"
    assert row.has_data == any(name == "rlwatch_info" and math.isfinite(v) for name, _, v in samples)
    assert isinstance(row.status, HostStatus)


@given(st.text(max_size=300))
def test_any_text_is_samples_or_one_fleet_error(text: str) -> None:
    try:
        parse_exposition(text)
    except FleetError as exc:
        assert "\n" not in str(exc)
