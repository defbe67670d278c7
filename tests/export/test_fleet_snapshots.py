"""SVG snapshots of the fleet screen: every host status, a failure shared by two hosts, the detail panel, and a
Prometheus that stopped answering.

The app reads a fixed fleet once and runs no timers, so a screen depends only on fixed data and the code that
renders it. Update the baselines with ``pytest --snapshot-update`` after a deliberate change, and look at them
before accepting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from rlwatch.export.fleet import FleetSnapshot
from rlwatch.tui.fleet import FleetApp
from tests import fleet_data
from tests.snapshot_data import utc_timezone

SnapCompare = Callable[..., bool]


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with utc_timezone():
        yield


def app_for(read: Callable[[], FleetSnapshot]) -> FleetApp:
    return FleetApp(read, live=False)


def test_fleet_screen(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(fleet_data.fleet), terminal_size=(160, 30))


def test_fleet_screen_120_columns(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(fleet_data.fleet), terminal_size=(120, 30))


def test_host_detail(snap_compare: SnapCompare) -> None:
    # Rows: the shared group, its two hosts, then pod-1 (the lost server).
    keys = ["down", "down", "down", "enter"]
    assert snap_compare(app_for(fleet_data.fleet), press=keys, terminal_size=(160, 36))


def test_stale_host_detail(snap_compare: SnapCompare) -> None:
    keys = ["down", "down", "down", "down", "enter"]
    assert snap_compare(app_for(fleet_data.fleet), press=keys, terminal_size=(160, 36))


def test_group_detail(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(fleet_data.fleet), press=["enter"], terminal_size=(160, 30))


def test_prometheus_not_answering(snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(fleet_data.broken), terminal_size=(160, 30))


def test_no_hosts_yet(snap_compare: SnapCompare) -> None:
    empty = FleetSnapshot(time=fleet_data.NOW, source="prometheus http://127.0.0.1:9090")
    assert snap_compare(app_for(lambda: empty), terminal_size=(120, 20))
