"""A private Prometheus server for tests: Debian's ``prometheus`` on a loopback port, scraping given targets.

Tests that need it skip where the binary is missing; CI installs it. Prometheus hands new targets to its scrape
loop on a 5 s ticker, so the first sample arrives 5-6 s after start even with a 1 s scrape interval: wait on a
condition with a deadline of 20 s or more, never on a fixed sleep.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simhost import wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def need_prometheus() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("Debian's prometheus is not installed")
    return path


class PromServer:
    """One ``prometheus`` process with its own config, storage and port; stop() ends it."""

    def __init__(self, tmp_path: Path, jobs: dict[str, list[str]], *, interval: str = "1s") -> None:
        binary = need_prometheus()
        self.dir = tmp_path / "prometheus"
        self.dir.mkdir()
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": "10s"},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": targets}]} for job, targets in jobs.items()
            ],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115  (closed in stop)
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until(self._ready, 20)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {(self.dir / 'prometheus.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            doc = json.loads(resp.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("/api/v1/query", query=promql)["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The single value of an instant query, or None while it has no result."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
