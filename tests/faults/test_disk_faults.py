"""A full disk under the audit log and the watchdog's state file: the work goes on, the failure is said, and the
files are written again once there is space.

The full disk is a real 64 KiB tmpfs filled to the last block when the tests may mount one (root); otherwise the
audit log is pointed at ``/dev/full``, which fails every write with ENOSPC, and the state-file case is skipped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.faults.conftest import PYTHON, FaultRow, run_cli
from tests.simhost import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]

REFUSED = "HTTPUtils WARNING: ConnectionRefusedError(111, \"Connect call failed ('10.0.0.1', 30000)\")\n"


class FullDisk:
    def __init__(self, mount: Path) -> None:
        self.mount = mount
        self.filler = mount / "filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass  # ENOSPC: full to the last block
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


def _mount_tmpfs(where: Path) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    # mode=0700: a tmpfs root is 1777 by default, and rlwatch rightly trusts no state directory others can write.
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(where)], capture_output=True
    )
    return done.returncode == 0


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Callable[[Path], FullDisk | None]]:
    mounted: list[Path] = []

    def make(where: Path) -> FullDisk | None:
        if not _mount_tmpfs(where):
            return None
        mounted.append(where)
        disk = FullDisk(where)
        disk.fill()
        return disk

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_audit_log_on_a_full_disk(
    tmp_path: Path,
    full_disk: Callable[[Path], FullDisk | None],
    procs: list[subprocess.Popen[bytes]],
    fault_row: Callable[[str, str], FaultRow],
) -> None:
    disk = full_disk(tmp_path / "full")
    how = "a full 64 KiB tmpfs" if disk is not None else "/dev/full (no tmpfs could be mounted)"
    row = fault_row(
        "files: the disk full when the audit log is written",
        f"({how}) the action is refused before its first signal, the worker left running; runs once freed",
    )
    audit = tmp_path / "full" / "audit.jsonl" if disk is not None else Path("/dev/full")
    marker = f"faults-worker-{uuid.uuid4().hex}"
    argv = [PYTHON, "-c", "import time; time.sleep(600)", marker]
    (tmp_path / "rlwatch.yaml").write_text(
        json.dumps(
            {
                "gpu": {"backend": "none"},
                "interval_s": 0.2,
                "processes": [{"role": "worker", "cmdline_regex": marker, "command": argv, "log": "worker.log"}],
                "actions": {"audit_log": str(audit), "grace_s": 2, "verify_timeout_s": 20},
            }
        )
    )
    # It works in the run directory: with its role, what makes it the run's (another run's worker is never touched).
    worker = subprocess.Popen(argv, stdout=subprocess.DEVNULL, start_new_session=True, cwd=tmp_path)
    procs.append(worker)
    try:
        wait_until(
            lambda: any(marker in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])), 10
        )
        out = run_cli("act", "restart-workers", str(tmp_path), "--yes", timeout=60)
        assert out.returncode != 0, out.stdout + out.stderr
        said = out.stdout + out.stderr
        assert "nothing was done" in said and "No space left on device" in said, said
        assert worker.poll() is None  # never signalled: nothing is done without a record of it
        row.saw(f"exit {out.returncode}, worker untouched; said '{said.strip().splitlines()[-1][:90]}'")
        if disk is not None:
            disk.free()
            again = run_cli("act", "restart-workers", str(tmp_path), "--yes", timeout=60)
            assert again.returncode == 0 and "audit log" not in again.stdout, again.stdout
            events = [json.loads(line)["event"] for line in audit.read_text().splitlines()]
            assert events[0] == "plan" and events[-1] == "result"
            row.saw(f"after freeing space: the action ran and wrote {len(events)} audit records")
    finally:
        for proc in psutil.process_iter(["cmdline"]):
            if marker in (proc.info["cmdline"] or []):  # the workers this test started, and their restarts
                proc.kill()


def _watch(run: Path, out: Path) -> subprocess.Popen[bytes]:
    """`rlwatch watch --json` of ``run`` (its logs ``*.log``, quick rounds), its stream written to ``out``."""
    (run / "rlwatch.yaml").write_text(
        "training:\n  logs: ['*.log']\ngpu:\n  backend: none\ninterval_s: 0.2\nwatchdog:\n  heartbeat_s: 0.2\n"
    )
    with out.open("wb") as sink:
        return subprocess.Popen(
            [PYTHON, "-m", "rlwatch", "watch", str(run), "--json"],
            stdout=sink,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def test_watchdog_state_on_a_full_disk(
    tmp_path: Path,
    full_disk: Callable[[Path], FullDisk | None],
    procs: list[subprocess.Popen[bytes]],
    fault_row: Callable[[str, str], FaultRow],
) -> None:
    row = fault_row(
        "files: the disk full when the watchdog's state is written",
        "(a full 64 KiB tmpfs) watch keeps running and counting, says it cannot write, writes again once freed",
    )
    run = tmp_path / "run"
    disk = full_disk(run / ".rlwatch")
    if disk is None:
        pytest.skip("no tmpfs can be mounted here (needs root)")
    (run / "trainer.log").write_text(REFUSED)
    out = tmp_path / "watch.jsonl"
    proc = _watch(run, out)
    procs.append(proc)

    def recs() -> list[dict[str, object]]:
        return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]

    def said_full() -> bool:
        return any("No space left" in str(r.get("message")) for r in recs())

    wait_until(said_full, 15)
    with (run / "trainer.log").open("a") as f:
        f.write(REFUSED)
    wait_until(lambda: any(r.get("type") == "event" and r.get("count") == 2 for r in recs()), 10)
    assert proc.poll() is None
    row.saw("'watchdog.json: cannot write: No space left on device' printed; the next event still counted")
    disk.free()
    state = run / ".rlwatch" / "watchdog.json"
    wait_until(state.exists, 10)
    assert json.loads(state.read_text())["pid"] == proc.pid
    wait_until(lambda: any("written again" in str(r.get("message")) for r in recs()), 10)
    full = [r for r in recs() if "No space left" in str(r.get("message"))]
    assert len(full) == 1, full  # said once, not on every heartbeat
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert proc.stderr is not None and b"Traceback" not in proc.stderr.read()
    row.saw("space freed: watchdog.json written by the same process; SIGTERM → exit 0")


def test_watch_starts_its_stream_when_the_disk_fills_while_it_reads_its_backlog(
    tmp_path: Path,
    full_disk: Callable[[Path], FullDisk | None],
    procs: list[subprocess.Popen[bytes]],
    fault_row: Callable[[str, str], FaultRow],
) -> None:
    """The stream waits for the watchdog's state file to say the backlog is read; a file that can no longer be
    written must not keep it waiting for ever."""
    from bench.datagen import generate

    row = fault_row(
        "files: the disk fills while watch reads a big backlog",
        "(a 64 KiB tmpfs filled once the state file says 'reading') the stream starts all the same",
    )
    run = tmp_path / "run"
    generate(run / "trainer.log", 24 << 20, dense=True)
    disk = full_disk(run / ".rlwatch")
    if disk is None:
        pytest.skip("no tmpfs can be mounted here (needs root)")
    disk.free()  # room for the first state files
    out = tmp_path / "watch.jsonl"
    proc = _watch(run, out)
    procs.append(proc)
    state = run / ".rlwatch" / "watchdog.json"

    def reading() -> bool:
        try:
            return json.loads(state.read_text()).get("reading_backlog") is not None
        except (OSError, ValueError):
            return False

    wait_until(reading, 30)
    disk.fill()

    def types() -> list[object]:
        """The complete records' types: the partial ones (the backlog's newest part) come before it is read."""
        records = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
        return [r.get("type") for r in records if not r.get("partial")]

    wait_until(lambda: "state" in types(), 60)
    assert json.loads(state.read_text()).get("reading_backlog") is not None  # the file still says reading
    row.saw("state file left saying 'reading' on a full disk; the stream started once the backlog was read")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
