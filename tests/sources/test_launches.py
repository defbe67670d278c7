"""Launch records outlive the rlwatch process that saw them, so a later one can start a dead process again."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlwatch.common.clock import SystemClock
from rlwatch.config.models import Config, GpuConfig, ProcessRule
from rlwatch.engine.engine import Engine
from rlwatch.sources.launches import LaunchBook
from rlwatch.sources.processes import LaunchRecord
from tests.simhost import wait_until


def record(argv: tuple[str, ...] = ("python3", "-m", "trainer")) -> LaunchRecord:
    return LaunchRecord(
        argv=argv, cwd="/srv/run", env={"TOKEN": "x"}, first_seen=1.0, pid=42, create_time=2.0, uid=os.geteuid()
    )


def test_book_round_trips_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / ".rlwatch" / "launches.json"
    assert LaunchBook(path).remember("trainer", record())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # environments may hold tokens
    again = LaunchBook(path)
    assert again.get("trainer") == record()
    assert not again.remember("trainer", record(("other",)))  # the first launch is the one kept
    assert LaunchBook(path).get("trainer") == record()
    under = replace(record(("python3", "-m", "sglang.launch_server")), started_by="launcher")
    assert LaunchBook(path).remember("server", under)
    assert LaunchBook(path).get("server") == under  # who started it survives a restart of rlwatch


def test_corrupt_book_is_ignored_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "launches.json"
    path.write_bytes(b"\x00{garbage")
    book = LaunchBook(path)
    assert book.get("trainer") is None and book.error and "unreadable" in book.error
    path.write_text('{"trainer": {"argv": 5}, "ok": {"argv": ["a"], "first_seen": 1, "pid": 1, "create_time": 1}}')
    book = LaunchBook(path)
    assert book.get("trainer") is None and book.get("ok") is not None


def test_unwritable_book_keeps_working_from_memory(tmp_path: Path) -> None:
    (tmp_path / ".rlwatch").write_text("a file where the directory should be")
    book = LaunchBook(tmp_path / ".rlwatch" / "launches.json")
    assert book.remember("trainer", record())
    assert book.get("trainer") == record() and book.error and "cannot write" in book.error


def test_a_fresh_engine_knows_how_a_dead_process_was_started(tmp_path: Path) -> None:
    marker = f"rlwatch-launch-test-{os.getpid()}"
    argv = [sys.executable, "-c", "import sys, time; time.sleep(60)", marker]
    cfg = Config(
        gpu=GpuConfig(backend="none"),
        processes=[ProcessRule(role="launcher", cmdline_regex=marker)],
    )
    child = subprocess.Popen(argv, cwd=tmp_path)
    try:
        first = Engine(cfg, tmp_path, clock=SystemClock())
        first.sample()
        seen = first.launch_record("launcher")
        assert seen is not None and list(seen.argv) == argv
        first.stop()
    finally:
        child.kill()
        child.wait()
    later = Engine(cfg, tmp_path, clock=SystemClock())
    later.sample()
    assert later.processes.launch_record("launcher") is None  # this engine never saw it alive
    remembered = later.launch_record("launcher")
    assert remembered is not None and list(remembered.argv) == argv and remembered.cwd == str(tmp_path)
    later.stop()


def rlwatch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def watch_output(run: Path, secret: str) -> str:
    """Everything `rlwatch watch --json --prometheus` says about the run: its records and one scrape of /metrics."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlwatch", "watch", str(run), "--json", "--prometheus", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        lines.extend(proc.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        records = lambda: [json.loads(x) for x in list(lines)]  # noqa: E731
        url = wait_until(lambda: next((r["url"] for r in records() if r.get("type") == "exporter"), None), 30)
        wait_until(lambda: any(r.get("type") == "state" for r in records()), 30)
        with urllib.request.urlopen(url if url.endswith("/metrics") else url.rstrip("/") + "/metrics") as got:
            metrics = got.read().decode()
        assert "rlwatch" in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(timeout=10)
    return "".join(lines) + metrics


@pytest.mark.slow
def test_kept_environments_are_never_copied_anywhere(tmp_path: Path) -> None:
    """The launch book keeps each process's environment (tokens included) to start it again, privately; no report,
    stream, metric, audit record or written configuration ever carries it."""
    secret = f"s3cret-{uuid.uuid4().hex}"
    marker = f"rlwatch-env-test-{uuid.uuid4().hex[:8]}"
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(
        "gpu: {backend: none}\ninterval_s: 0.2\nactions: {verify_timeout_s: 1, grace_s: 1}\n"
        f"processes:\n  - {{role: launcher, cmdline_regex: {marker}}}\n"
    )
    argv = [sys.executable, "-c", "import time; time.sleep(120)", marker]
    env = {**os.environ, "RLWATCH_TEST_SECRET": secret}
    child = subprocess.Popen(argv, cwd=run, env=env, start_new_session=True)
    outputs: dict[str, str] = {}
    try:
        report = rlwatch("report", str(run), "--json")
        assert "Traceback" not in report.stderr and json.loads(report.stdout)["processes"]
        outputs["report --json"] = report.stdout + report.stderr
        book = run / ".rlwatch" / "launches.json"
        assert secret in book.read_text()  # kept, for a restart with the same environment
        assert stat.S_IMODE(book.stat().st_mode) == 0o600 and stat.S_IMODE(book.parent.stat().st_mode) == 0o700
        outputs["watch --json and /metrics"] = watch_output(run, secret)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    resumed = rlwatch("act", "resume", str(run), "--yes")
    outputs["act resume"] = resumed.stdout + resumed.stderr
    started: list[dict[str, Any]] = []
    audit = (run / ".rlwatch" / "audit.jsonl").read_text()
    try:
        started = [r for r in map(json.loads, audit.splitlines()) if r["event"] == "spawn" and r.get("pid")]
        assert started and list(started[0]["argv"]) == argv
        environ = psutil.Process(started[0]["pid"]).environ()
        assert environ.get("RLWATCH_TEST_SECRET") == secret  # started again with the kept environment
    finally:
        for rec in started:
            try:
                os.killpg(rec["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    outputs["audit log"] = audit
    init = rlwatch("init", str(run), "--force")
    assert init.returncode == 0, init.stderr
    outputs["init's rlwatch.yaml"] = (run / "rlwatch.yaml").read_text() + init.stdout
    leaked = [name for name, text in outputs.items() if secret in text]
    assert leaked == []
