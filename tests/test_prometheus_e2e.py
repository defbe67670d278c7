"""A real Prometheus server (Debian's `prometheus`) scrapes the exporter on loopback; its HTTP API must return the
snapshot's values, and `promtool check metrics` must pass on what the exporter serves."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.common.state import Snapshot
from rlwatch.export.exporter import BudgetState, Exporter, ExporterExtras, start_exporter
from tests import snapshot_data as data
from tests.promserver import PromServer, need_prometheus
from tests.simhost import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def exporter() -> Iterator[tuple[Exporter, list[Snapshot]]]:
    current = [data.SCENARIOS["server-crash"][0]()]
    extras = ExporterExtras(
        remediations={("restart-server", "server", "ok"): 2, ("restart-server", "server", "failed"): 1},
        budgets=(BudgetState("server", gave_up=True, restarts_in_window=3),),
    )
    ex = start_exporter(lambda: current[0], "127.0.0.1", 0, extra=lambda: extras)
    yield ex, current
    ex.close()


def test_prometheus_scrapes_the_exporter_and_returns_its_values(
    tmp_path: Path, exporter: tuple[Exporter, list[Snapshot]]
) -> None:
    ex, current = exporter
    snap = current[0]
    prom = PromServer(tmp_path, {"rlwatch": [f"127.0.0.1:{ex.port}"]})
    try:
        wait_until(lambda: prom.value('up{job="rlwatch"}') == 1, 30)
        wait_until(lambda: prom.value("rlwatch_training_step") is not None, 30)

        assert snap.training is not None and snap.server is not None and snap.recover is not None
        assert prom.value("rlwatch_training_step") == snap.training.last_step
        assert prom.value("rlwatch_server_up") == 0
        assert prom.value("rlwatch_resume_global_step") == snap.recover.resume_global_step
        refused = snap.events["connection_refused"].count
        assert prom.value('rlwatch_events_total{kind="connection_refused"}') == refused
        gpu = snap.gpus[0]
        assert gpu.util is not None
        assert prom.value(f'rlwatch_gpu_utilization_ratio{{gpu="{gpu.index}"}}') == pytest.approx(gpu.util / 100)
        for f in snap.findings:
            query = f'rlwatch_findings{{severity="{f.severity.value}",code="{f.code}"}}'
            assert (prom.value(query) or 0) >= 1, query
        assert prom.value('rlwatch_remediations_total{action="restart-server",result="ok"}') == 2
        assert prom.value('rlwatch_budget_gave_up{target="server"}') == 1

        (info,) = prom.query("rlwatch_info")
        assert info["metric"]["host"] == snap.host
        assert info["metric"]["instance"] == f"127.0.0.1:{ex.port}"
        assert "pid" not in info["metric"]

        # The exporter reads the newest snapshot on every scrape: Prometheus sees the server come back.
        current[0] = data.SCENARIOS["healthy"][0]()
        wait_until(lambda: prom.value("rlwatch_server_up") == 1, 30)
        # A finding that is resolved disappears with the next scrape (a staleness marker), it does not linger.
        wait_until(lambda: prom.value('rlwatch_findings{code="server_down"}') is None, 30)
    finally:
        prom.stop()


def test_promtool_passes_on_the_served_exposition(exporter: tuple[Exporter, list[Snapshot]]) -> None:
    need_prometheus()
    ex, current = exporter
    for name in data.SCENARIOS:
        current[0] = data.SCENARIOS[name][0]()
        with urllib.request.urlopen(ex.url, timeout=5) as resp:
            text = resp.read().decode()
        out = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, (name, out.stdout, out.stderr)
        assert "rlwatch_info" in text


def test_the_example_prometheus_config_is_valid() -> None:
    need_prometheus()
    config = Path(__file__).resolve().parent.parent / "configs" / "prometheus.yml"
    out = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr
