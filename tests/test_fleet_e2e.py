"""The fleet end to end: four simulated hosts, each with a live engine and its exporter, scraped by a real Prometheus
server on loopback, read back through Prometheus' HTTP API into the fleet view.

One host is healthy, one has lost its inference server, two crash at start-up with the same exception. The fleet
must show each for what it is, group the two crashes under their shared signature, and turn a host stale (with its
age, keeping its last known values) once its exporter stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.export.exporter import Exporter, start_exporter
from rlwatch.export.fleet import FleetHost, FleetSnapshot, HostStatus, PrometheusFleet
from rlwatch.tui.fleet import FleetApp
from tests.promserver import PromServer, free_port, need_prometheus
from tests.simhost import Sim, settled, start, wait_until

pytestmark = pytest.mark.slow

HOSTS = {
    "pod-healthy": ("healthy", 40.0),
    "pod-server": ("server-crash", 20.0),
    "pod-crash-a": ("startup-crash", 25.0),
    "pod-crash-b": ("startup-crash", 25.0),
}


class Pod:
    """A simulated host with its own engine and exporter, as `rlwatch watch --prometheus` runs on a pod."""

    def __init__(self, name: str, sim: Sim) -> None:
        self.name = name
        self.sim = sim
        cfg, _ = resolve_config(sim.dir, None)
        self.engine = Engine(cfg, sim.dir, host=name)
        self.engine.drain_logs()
        self.engine.sample()
        self.engine.build()
        self.engine.start()
        self.exporter: Exporter = start_exporter(self.engine.snapshot, "127.0.0.1", 0)

    def stop(self) -> None:
        self.exporter.close()
        self.engine.stop()


@pytest.fixture
def pods(tmp_path: Path, sims: list[Sim]) -> Iterator[dict[str, Pod]]:
    need_prometheus()
    started: dict[str, Pod] = {}
    try:
        for name, (scenario, speed) in HOSTS.items():
            where = tmp_path / name
            where.mkdir()
            started[name] = Pod(name, start(sims, where, scenario, speed))
        yield started
    finally:
        for pod in started.values():
            pod.stop()


def by_name(snap: FleetSnapshot) -> dict[str, FleetHost]:
    return {h.name: h for h in snap.hosts}


def test_four_hosts_through_prometheus(tmp_path: Path, pods: dict[str, Pod]) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # a pod whose exporter never came up
    prom = PromServer(tmp_path, {"rlwatch": [*(f"127.0.0.1:{p.exporter.port}" for p in pods.values()), nobody]})
    try:
        fleet = PrometheusFleet(prom.url, stale_after_s=60)
        ledgers = {name: pod.sim.wait(settled, timeout=90) for name, pod in pods.items()}

        def everyone_as_expected() -> FleetSnapshot | None:
            snap = fleet.read()
            hosts = by_name(snap)
            if set(hosts) != {*HOSTS, nobody} or any(h.stale for n, h in hosts.items() if n != nobody):
                return None
            if not (hosts[nobody].error or "").startswith("scrape failed"):
                return None
            statuses = {n: h.status for n, h in hosts.items()}
            want = {"pod-healthy": HostStatus.OK, "pod-server": HostStatus.CRITICAL}
            if any(statuses[n] != s for n, s in want.items()):
                return None
            crash = [hosts["pod-crash-a"], hosts["pod-crash-b"]]
            if any(h.status != HostStatus.CRITICAL or h.exception is None for h in crash):
                return None
            return snap

        snap = wait_until(everyone_as_expected, 60, interval=0.5)
        assert snap.error is None and snap.source == f"prometheus {prom.url}"
        hosts = by_name(snap)
        assert hosts[nobody].status is HostStatus.NO_DATA and "connection refused" in (hosts[nobody].error or "")

        healthy = hosts["pod-healthy"]
        assert healthy.step == ledgers["pod-healthy"]["facts"]["total_steps"]
        assert healthy.server_up is True and healthy.simulated
        assert healthy.gpus and healthy.mem_available_bytes

        server = hosts["pod-server"]
        assert server.server_up is False
        assert server.worst is not None and server.worst.severity.value == "critical"
        assert "server_down" in {f.code for f in server.findings}
        assert server.events.get("connection_refused", 0) > 0
        assert server.resume_step == ledgers["pod-server"]["facts"]["recover_global_step"] + 1

        a, b = hosts["pod-crash-a"], hosts["pod-crash-b"]
        assert a.exception is not None and b.exception is not None
        assert a.exception.signature == b.exception.signature
        assert a.exception.title == "AttributeError: 'Namespace' object has no attribute 'model_id'"
        assert a.exception.type == "AttributeError"
        assert "crash_repeating" in {f.code for f in a.findings}

        groups = snap.groups
        shared = next(g for g in groups if g.signature == a.exception.signature)
        assert {h.name for h in shared.hosts} == {"pod-crash-a", "pod-crash-b"}
        assert groups[0] is shared  # two hosts failing the same way come first
        assert all(len(g.hosts) == 1 for g in groups if g is not shared and g.signature is not None)

        table = asyncio.run(table_rows(snap))
        assert table[0].startswith("▾ 2 hosts") and "AttributeError" in table[0]
        assert {row.split("|")[0].strip() for row in table[1:3]} == {"pod-crash-a", "pod-crash-b"}
        assert len(table) == 6 and all(any(row.startswith(n) for row in table) for n in ("pod-healthy", "pod-server"))

        # One host's exporter stops: Prometheus' next scrape fails, and the fleet turns that host stale.
        pods["pod-server"].exporter.close()

        def server_stale() -> FleetHost | None:
            host = by_name(fleet.read()).get("pod-server")
            return host if host is not None and host.stale else None

        stale = wait_until(server_stale, 30, interval=0.5)
        assert stale.status == HostStatus.STALE
        assert stale.error is not None and stale.error.startswith("scrape failed")
        assert stale.age_s is not None and stale.age_s > 0
        assert stale.server_up is False and stale.step == server.step  # the last known values, kept
        now = by_name(fleet.read())
        assert not any(now[n].stale for n in HOSTS if n != "pod-server") and now[nobody].status is HostStatus.NO_DATA

        # Prometheus itself goes away: the fleet says so and keeps the last known hosts, every one stale.
        prom.stop()
        after = fleet.read()
        assert after.error is not None and after.error.endswith("connection refused")
        assert set(by_name(after)) == {*HOSTS, nobody} and all(h.stale for h in after.hosts)
        assert by_name(after)["pod-healthy"].step == healthy.step
    finally:
        prom.stop()


async def table_rows(snap: FleetSnapshot) -> list[str]:
    """The fleet screen's table as text, one ``|``-joined line per row."""
    app = FleetApp(lambda: snap, live=False)
    async with app.run_test(headless=True, size=(160, 30)) as pilot:
        await pilot.pause()
        table = app.fleet_screen.table
        return ["|".join(cell.plain.strip() for cell in table.get_row_at(i)) for i in range(table.row_count)]
