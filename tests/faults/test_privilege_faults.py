"""rlwatch run as an unprivileged user (``setpriv``): logs it may not read, other users' /proc entries.

The run directory is made outside pytest's private temporary tree, since an unprivileged user cannot enter that.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import CAN_DROP_PRIVILEGES, NOBODY, PYTHON, FaultRow, as_nobody
from tests.simhost import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]

REFUSED = "HTTPUtils WARNING: ConnectionRefusedError(111, \"Connect call failed ('10.0.0.1', 30000)\")\n"


if not CAN_DROP_PRIVILEGES:
    pytest.skip("needs root, setpriv and a 'nobody' user to run rlwatch unprivileged", allow_module_level=True)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A run directory the unprivileged user owns."""
    assert NOBODY is not None
    base = Path(tempfile.mkdtemp(prefix="rlwatch-faults-"))
    base.chmod(0o755)
    run = base / "run"
    run.mkdir()
    os.chown(run, NOBODY.pw_uid, NOBODY.pw_gid)
    yield run
    shutil.rmtree(base, ignore_errors=True)


def records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def test_unprivileged_watch_with_an_unreadable_log(
    run_dir: Path, tmp_path: Path, procs: list[subprocess.Popen[bytes]], fault_row: Callable[[str, str], FaultRow]
) -> None:
    denied = fault_row(
        "files: permission denied on a log",
        "a 'logs' source record names the file; the other log counted; its lines counted once readable",
    )
    unpriv = fault_row(
        "process: running as an unprivileged user",
        "watch runs, other users' processes are a named blind spot (holders), exits cleanly on SIGTERM",
    )
    secret = run_dir / "trainer.log"
    secret.write_text(REFUSED * 2)
    secret.chmod(0o600)  # root's, unreadable for the watcher
    open_log = run_dir / "server.log"
    open_log.write_text(REFUSED)
    assert NOBODY is not None
    os.chown(open_log, NOBODY.pw_uid, NOBODY.pw_gid)
    (run_dir / "rlwatch.yaml").write_text(
        "training:\n  logs: ['trainer.log', 'server.log']\ngpu:\n  backend: none\ninterval_s: 0.2\n"
    )
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            as_nobody(PYTHON, "-m", "rlwatch", "watch", str(run_dir), "--json"),
            stdout=sink,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    procs.append(proc)

    def source(name: str, ok: bool) -> dict[str, Any] | None:
        return next(
            (r for r in records(out) if r.get("type") == "source" and r["name"] == name and r["ok"] is ok), None
        )

    down = wait_until(lambda: source("logs", False), 15)
    assert "trainer.log" in down["error"] and "permission denied" in down["error"]
    first = next(r for r in records(out) if r.get("type") == "state")
    assert first["events"].get("connection_refused") == 1
    denied.saw(f"source record {down['error'].rsplit('/', 1)[-1]!r}; server.log's 1 event counted")
    holders = wait_until(lambda: source("holders", False), 15)
    assert "not readable" in holders["error"]
    secret.chmod(0o644)
    wait_until(lambda: source("logs", True), 15)
    events = [r for r in records(out) if r.get("type") == "event" and r["kind"] == "connection_refused"]
    assert events and events[-1]["count"] == 3
    denied.saw("after chmod 644: 'logs' available again, total exactly 3")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    assert "Traceback" not in err
    unpriv.saw(f"ran as uid {NOBODY.pw_uid}; holders: {holders['error']!r}; SIGTERM → exit 0, no traceback")


def test_unprivileged_report(run_dir: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "process: permission denied on other users' /proc/<pid>/fd",
        "report still complete JSON; the holder scan says it could not look into those processes",
    )
    (run_dir / "trainer.log").write_text(REFUSED)
    out = subprocess.run(
        as_nobody(PYTHON, "-m", "rlwatch", "report", str(run_dir), "--json"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode in (0, 1), out.stderr
    assert "Traceback" not in out.stderr
    rep = json.loads(out.stdout)
    holders = next(s for s in rep["sources"] if s["name"] == "holders")
    assert not holders["ok"] and "not readable" in holders["error"]
    assert rep["events"]["connection_refused"]["count"] == 1
    row.saw(f"exit {out.returncode}, JSON complete; holders: {holders['error']!r}")
