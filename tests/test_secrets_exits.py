"""No secret leaves the host: a run whose logs and command lines are full of fake secrets, seen through every exit.

The security review's case, re-tried as written: a traceback ending in ``RuntimeError: … HF_TOKEN=hf_… WANDB_API_KEY=…
Authorization: Bearer … AWS_SECRET_ACCESS_KEY=…``, a worker started with ``--hf_token hf_… --wandb_key=…``, and the
watchdog's own ``--heartbeat …?token=``. Then every way rlwatch speaks to others — `report` and `report --json`,
the `watch --json` stream, the Prometheus exporter, the fleet's reading of it, notifications (log lines included),
the watchdog's state file, an SVG snapshot and the audit log of an action — is read whole and must hold none of the
secrets, while still carrying what the secrets were part of (the exception, the command line), so a test that
never saw the text could not pass.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.export.fleet.samples import host_from_samples
from tests.export.test_notify_real import Receiver
from tests.promserver import free_port
from tests.secrets_corpus import HF, LINES, QUERY_TOKEN, SECRETS, WANDB
from tests.simhost import rlwatch, wait_until

pytestmark = pytest.mark.slow

WORKER = """
import sys, time
log = open('worker.log', 'a')
print('worker up', file=log, flush=True)
time.sleep(300)
"""
CONFIG = """\
profile: workers
interval_s: 0.5
gpu: {backend: none}
training: {logs: ['*.log']}
processes:
  - role: worker
    cmdline_regex: 'worker\\.py'
  - role: watchdog
    cmdline_regex: 'rlwatch watch'
notify: {timeout_s: 2, retries: 0, include_lines: true, heartbeat_every_s: 1}
watchdog: {heartbeat_s: 0.5}
actions: {grace_s: 2, verify_timeout_s: 20}
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _svg_text(svg: str) -> str:
    """The words an SVG shows, one line of the screen per line (Rich splits a line into a <text> per style)."""
    rows: dict[str, list[str]] = {}
    for m in re.finditer(r'<text[^>]*\by="([0-9.]+)"[^>]*>(.*?)</text>', svg, re.DOTALL):
        rows.setdefault(m.group(1), []).append(html.unescape(re.sub(r"<[^>]+>", "", m.group(2))))
    return "\n".join(
        "".join(parts).replace("\xa0", " ") for _, parts in sorted(rows.items(), key=lambda kv: float(kv[0]))
    )


def test_no_secret_leaves_through_any_exit(tmp_path: Path, receiver: Receiver) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(CONFIG)
    (run / "worker.py").write_text(WORKER)
    traceback = 'Traceback (most recent call last):\n  File "/srv/train.py", line 9, in <module>\n    fetch()\n'
    (run / "train.log").write_text("\n".join(LINES[1:]) + "\n" + traceback + LINES[0] + "\n")
    worker = subprocess.Popen(
        [sys.executable, "worker.py", "--hf_token", HF, f"--wandb_key={WANDB}"],
        cwd=run,
        start_new_session=True,
    )
    port = free_port()
    watch: subprocess.Popen[str] | None = None
    out: dict[str, str] = {}
    try:
        wait_until(lambda: (run / "worker.log").exists(), 30)
        out["report"] = rlwatch("report", str(run)).stdout
        out["report --json"] = rlwatch("report", str(run), "--json").stdout
        watch = subprocess.Popen(
            [
                sys.executable, "-m", "rlwatch", "watch", str(run), "--json", "--duration", "120",
                "--prometheus", f"127.0.0.1:{port}", "--notify", receiver.url(),
                "--heartbeat", receiver.url("http", f"ping?token={QUERY_TOKEN}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

        def scrape() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    text = resp.read().decode()
            except OSError:
                return None
            return text if "rlwatch_last_exception_info{" in text else None

        out["exporter"] = wait_until(scrape, 60)
        samples = [
            (m.group(1), dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")), float(m.group(3)))
            for m in re.finditer(r"^(\w+)(?:\{(.*)\})? (\S+)$", out["exporter"], re.MULTILINE)
        ]
        out["fleet"] = repr(host_from_samples("pod", samples, data_age_s=0.0, stale_after_s=60.0))
        wait_until(lambda: receiver.json() and any(m == "GET" for m, _, _ in receiver.got()), 60)
        out["report while watching"] = wait_until(
            lambda: r if "rlwatch watch" in (r := rlwatch("report", str(run), "--json").stdout) else None, 60
        )
        out["watchdog state"] = (run / ".rlwatch" / "watchdog.json").read_text()
    finally:
        if watch is not None:
            watch.send_signal(signal.SIGTERM)
            stream, err = watch.communicate(timeout=60)
            out["watch --json"] = stream + err
    out["notifications"] = json.dumps(receiver.json())
    svg = tmp_path / "snap.svg"
    shot = rlwatch("snapshot", str(run), "--out", str(svg), "--size", "200x60")
    assert shot.returncode == 0, shot.stderr
    out["snapshot"] = _svg_text(svg.read_text())
    try:
        acted = rlwatch("act", "restart-workers", str(run), "--yes")
        out["act"] = acted.stdout + acted.stderr
        out["audit"] = (run / ".rlwatch" / "audit.jsonl").read_text()
    finally:
        for pid in [worker.pid, *_restarted(run)]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        worker.wait(timeout=30)

    leaks = {name: [s for s in SECRETS if s in text] for name, text in out.items()}
    assert {name: found for name, found in leaks.items() if found} == {}
    # Each exit carried what the secrets were part of, redacted: the test saw the text it judges.
    assert "RuntimeError: download failed HF_TOKEN=***" in out["report"]
    assert "HF_TOKEN=***" in json.loads(out["report --json"])["findings"].__repr__()
    assert "worker.py --hf_token *** --wandb_key=***" in out["report while watching"]
    assert "ping?token=***" in out["report while watching"] and QUERY_TOKEN not in out["report while watching"]
    assert "rlwatch_last_exception_info{" in out["exporter"] and "HF_TOKEN=***" in out["exporter"]
    assert "RuntimeError" in out["fleet"]
    assert "HF_TOKEN=***" in out["notifications"]
    assert '"type"' in out["watch --json"] and "HF_TOKEN=***" in out["watch --json"]
    assert "RuntimeError" in out["snapshot"]
    assert "--hf_token" in out["audit"] and '"***"' in out["audit"]


def _restarted(run: Path) -> list[int]:
    """Pids restart-workers started, from its audit log (the test stops what it started)."""
    path = run / ".rlwatch" / "audit.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["pid"] for r in records if r.get("event") == "spawn" and isinstance(r.get("pid"), int)]
