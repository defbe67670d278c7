"""A job over two "nodes", tested as it will run: each node is a PID namespace of its own (``unshare --pid --fork
--mount-proc --uts``) with its hostname, its two ranks (plain Python processes with torchrun's environment), its run
directory and its own ``rlwatch watch --prometheus``; a real Prometheus scrapes both exporters, and ``rlwatch fleet
--json`` joins them, over Prometheus and over the exporters read directly (``--config``). Rank 3 on node-b stands in
``fetch_batch_from_service``; the three others wait in ``all_reduce``. The job's verdict must name node-b, rank 3 and
the collective within 60 s of the last step, and never blame node-a, whose ranks all wait."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.promserver import PromServer, free_port, need_prometheus
from tests.simhost import wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
JOBNODE = REPO / "tests" / "jobnode.py"
LAST_STEP = 16
VERDICT_WITHIN_S = 60.0


def _unshare() -> list[str]:
    """The unshare command that makes a node: a new PID and UTS namespace (and, for a user who is not root, a user
    namespace mapping them to root in it); skipped where the kernel refuses."""
    cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--uts", "--kill-child"]
    if os.geteuid() != 0:
        cmd[1:1] = ["--user", "--map-root-user"]
    try:
        probe = subprocess.run([*cmd, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"unshare: {e}")
    if probe.returncode != 0:
        pytest.skip(f"unshare refused: {probe.stderr.decode(errors='replace').strip()[:200]}")
    return cmd


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[dict[str, tuple[Path, int]]]:
    """node-a (ranks 0-1) and node-b (ranks 2-3, rank 3 stuck), each in its namespaces with its exporter's port."""
    need_prometheus()
    cmd = _unshare()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    started: list[subprocess.Popen[bytes]] = []
    out: dict[str, tuple[Path, int]] = {}
    try:
        for n, name in enumerate(("node-a", "node-b")):
            run = tmp_path / name
            run.mkdir()
            port = free_port()
            argv = [sys.executable, str(JOBNODE), name, str(run), str(port), str(n), "2", "3", str(LAST_STEP)]
            started.append(subprocess.Popen([*cmd, *argv], env=env, start_new_session=True))
            out[name] = (run, port)
        yield out
    finally:
        for p in started:  # unshare --kill-child takes the namespace, and every process in it, along
            p.kill()
            p.wait(timeout=30)


def _last_step_at(runs: list[Path]) -> float | None:
    """When the last rank wrote its last step, once every rank has."""
    want = {f"[rank{r}]: step {LAST_STEP}/" for r in range(4)}
    seen: set[str] = set()
    at = 0.0
    for run in runs:
        log = run / "train.log"
        try:
            text = log.read_text()
            at = max(at, log.stat().st_mtime)
        except OSError:
            return None
        seen |= {w for w in want if w in text}
    return at if seen == want else None


def _fleet(*how: str) -> dict[str, Any] | None:
    done = subprocess.run(
        [sys.executable, "-m", "rlwatch", "fleet", *how, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert "Traceback" not in done.stderr, done.stderr
    try:
        return dict(json.loads(done.stdout))
    except json.JSONDecodeError:
        return None


def _named(out: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job's verdict once it names node-b's rank 3 and the collective."""
    for job in (out or {}).get("jobs", ()):
        named = job["state"] == "hung" and job["culprit_host"] == "node-b" and job["culprit_ranks"] == [3]
        if named and (job["collective"] or "").startswith("all_reduce"):
            return dict(job)
    return None


def test_two_nodes_joined_by_prometheus_and_by_their_exporters(
    tmp_path: Path, nodes: dict[str, tuple[Path, int]]
) -> None:
    targets = [f"127.0.0.1:{port}" for _, port in nodes.values()]
    prom = PromServer(tmp_path, {"rlwatch": targets})
    try:
        last = wait_until(lambda: _last_step_at([run for run, _ in nodes.values()]), 120, interval=0.2)
        config = tmp_path / "fleet.yaml"
        config.write_text(f"fleet:\n  exporters: [{', '.join(targets)}]\n")
        direct = wait_until(lambda: _named(_fleet("--config", str(config))), VERDICT_WITHIN_S + 30, interval=0.5)
        direct_s = time.time() - last
        over_prom = wait_until(lambda: _named(_fleet("--prometheus", prom.url)), 60, interval=0.5)
        prom_s = time.time() - last
    finally:
        prom.stop()
    for job in (direct, over_prom):
        assert job["job"] == "rdzv:exp-42" and job["missing_ranks"] == [] and job["world_size"] == 4
        assert re.match(
            r"job rdzv:exp-42: hung \d+ s; node-b rank 3 never reached all_reduce(?: #\d+)? \(in "
            r"fetch_batch_from_service, train\.py:\d+\); the 3 others wait for it$",
            job["message"],
        ), job["message"]
        assert job["per_host"]["node-a"] == "its ranks 0-1 wait for node-b rank 3"  # never blamed
        assert re.match(r"rank 3 never reached all_reduce(?: #\d+)?$", job["per_host"]["node-b"])
        assert set(job["host_states"]) == {"node-a", "node-b"}  # each host's own state, said beside the verdict
    print(f"\nverdict after the last step: {direct_s:.1f} s (exporters), {prom_s:.1f} s (Prometheus)")
    assert direct_s <= VERDICT_WITHIN_S, f"the job's verdict came {direct_s:.0f} s after the last step"
