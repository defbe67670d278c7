"""rlwatch itself under fault: signals, a closed terminal, resize storms, no terminal, stdout closed, clock jumps."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import termios
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.export.report import to_json_dict
from tests.faults.conftest import PYTHON, FaultRow, make_engine, rlwatch_cmd, run_cli
from tests.simhost import wait_until

pytestmark = pytest.mark.faults

REFUSED = "HTTPUtils WARNING: ConnectionRefusedError(111, \"Connect call failed ('10.0.0.1', 30000)\")\n"
LEAVE_ALT_SCREEN = b"\x1b[?1049l"  # what a dashboard that put the terminal back prints last


def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "trainer.log").write_text(REFUSED)
    (run / "rlwatch.yaml").write_text("training:\n  logs: ['*.log']\ngpu:\n  backend: none\ninterval_s: 0.2\n")
    return run


class Terminal:
    """A real pseudo-terminal with rlwatch running in it as the session leader, like an SSH login."""

    def __init__(self, *args: str, rows: int = 40, cols: int = 120) -> None:
        self.master, slave = pty.openpty()
        self.resize(rows, cols, fd=slave)
        self.proc = subprocess.Popen(
            rlwatch_cmd(*args),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.output = b""

    def resize(self, rows: int, cols: int, *, fd: int | None = None) -> None:
        fcntl.ioctl(self.master if fd is None else fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def read(self, wait: float = 0.02) -> bytes:
        got = b""
        while select.select([self.master], [], [], wait)[0]:
            try:
                data = os.read(self.master, 1 << 16)
            except OSError:
                break
            if not data:
                break
            got += data
            wait = 0.0
        self.output += got
        return got

    def wait_for(self, needle: bytes, timeout: float = 20, *, after: int = 0) -> None:
        """Until ``needle`` is in what was written to the terminal since ``after`` bytes of it."""
        wait_until(lambda: self.read() is not None and needle in self.output[after:], timeout)

    def write(self, keys: bytes) -> None:
        """Type ``keys`` at the terminal."""
        os.write(self.master, keys)

    def exited(self, timeout: float = 15) -> int:
        rc = wait_until(lambda: self.read() is not None and self.proc.poll() is not None and True, timeout)
        assert rc
        return int(self.proc.returncode)

    def close(self) -> None:
        """Kill what is left, the demo's simulator too (it runs in a session of its own), even after a failure."""
        family: list[psutil.Process] = []
        if self.proc.poll() is None:
            try:
                family = psutil.Process(self.proc.pid).children(recursive=True)
            except psutil.Error:
                pass
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        for child in family:
            try:
                child.kill()
            except psutil.Error:
                pass
        try:
            os.close(self.master)
        except OSError:
            pass


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_dashboard_signals(tmp_path: Path, fault_row: Callable[[str, str], FaultRow], sig: signal.Signals) -> None:
    row = fault_row(
        f"process: {sig.name} to the dashboard",
        "exits 0 at once with the terminal put back (alternate screen left, mouse off)",
    )
    term = Terminal(str(run_dir(tmp_path)))
    try:
        term.wait_for(b"connection_refused")
        term.proc.send_signal(sig)
        rc = term.exited()
        assert rc == 0
        assert LEAVE_ALT_SCREEN in term.output[-4000:]
        row.saw(f"exit {rc}; terminal restored (ESC[?1049l written)")
    finally:
        term.close()


@pytest.mark.slow
def test_demo_resize_storm_then_terminal_closed(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    storm = fault_row("process: terminal resize storm", "the dashboard keeps drawing and answering keys")
    hangup = fault_row(
        "process: the terminal closed under the demo (SIGHUP)",
        "rlwatch exits promptly and stops every simulated process it started",
    )
    term = Terminal("demo", "--scenario", "healthy", "--speed", "10")
    try:
        term.wait_for(b"SIMULATED", 30)
        family = psutil.Process(term.proc.pid).children(recursive=True)
        assert family, "the demo runs a simulator"
        for i in range(300):
            term.resize(8 + (i * 7) % 60, 20 + (i * 13) % 220)
            if i % 10 == 0:
                term.read(0)
        term.resize(30, 100)
        term.read(0.2)
        before = len(term.output)
        term.wait_for(b"SIMULATED", 10)
        os.write(term.master, b"?")  # the help screen: it still answers keys
        wait_until(lambda: term.read() is not None and b"rlwatch keys" in term.output[before:], 15)
        assert term.proc.poll() is None
        storm.saw(f"300 resizes (8..67 rows, 20..239 cols): still drawing, '?' opened help; {len(family)} children")
        os.close(term.master)  # the SSH connection drops: the kernel hangs up the session
        rc = term.proc.wait(timeout=30)
        gone = wait_until(lambda: not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], 20)
        assert gone
        hangup.saw(f"exit status {rc} after the hangup; all {len(family)} simulated processes gone")
    finally:
        term.close()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_watch_signals(
    tmp_path: Path, fault_row: Callable[[str, str], FaultRow], procs: list[subprocess.Popen[bytes]], sig: signal.Signals
) -> None:
    row = fault_row(
        f"process: {sig.name} to the headless watchdog",
        "exit 0, no traceback, its state file marked stopped, no child left behind",
    )
    run = run_dir(tmp_path)
    proc = subprocess.Popen(
        [PYTHON, "-m", "rlwatch", "watch", str(run), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    procs.append(proc)
    assert proc.stdout is not None and proc.stderr is not None
    while json.loads(proc.stdout.readline())["type"] != "state":  # the watchdog's own word comes first
        pass
    state = run / ".rlwatch" / "watchdog.json"
    wait_until(state.exists, 10)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(sig)
    rc = proc.wait(timeout=15)
    err = proc.stderr.read().decode(errors="replace")
    assert rc == 0 and "Traceback" not in err, err
    assert json.loads(state.read_text()).get("stopped_at") is not None
    assert not [c for c in children if c.is_running()]
    row.saw(f"exit {rc} within the deadline; watchdog.json stopped_at set; {len(children)} children, none left")


def test_no_terminal(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "process: no TTY (the dashboard run from a script or cron)",
        "one line pointing at report/watch, exit 2, nothing started",
    )
    run = run_dir(tmp_path)
    for args in ([str(run)], ["demo"]):
        out = run_cli(*args, timeout=30)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and "needs a terminal" in lines[0], out.stderr
        assert out.stdout == ""
    report = run_cli("report", str(run), "--json")
    assert report.returncode in (0, 1, 3) and json.loads(report.stdout)["events"]["connection_refused"]["count"] == 1
    row.saw(f"dashboard and demo: exit 2, {lines[0]!r}; report works without a terminal")


def test_stdout_closed(
    tmp_path: Path, fault_row: Callable[[str, str], FaultRow], procs: list[subprocess.Popen[bytes]]
) -> None:
    row = fault_row(
        "process: stdout closed (or its reader gone)",
        "report finishes quietly; watch keeps watching and exits 0 without a traceback",
    )
    run = run_dir(tmp_path)
    closed = subprocess.run(
        [PYTHON, "-m", "rlwatch", "report", str(run)],
        preexec_fn=lambda: os.close(1),
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert closed.returncode in (0, 1, 3) and b"Traceback" not in closed.stderr
    proc = subprocess.Popen(
        [PYTHON, "-m", "rlwatch", "watch", str(run), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    procs.append(proc)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away: every later write meets a broken pipe
    state = run / ".rlwatch" / "watchdog.json"
    wait_until(state.exists, 10)
    for _ in range(3):
        with (run / "trainer.log").open("a") as f:
            f.write(REFUSED)
    beat = json.loads(state.read_text())["heartbeat"]
    wait_until(lambda: json.loads(state.read_text())["heartbeat"] > beat, 20)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=15)
    err = proc.stderr.read().decode(errors="replace")
    assert rc == 0 and "Traceback" not in err and "Exception ignored" not in err, err
    row.saw(f"report with fd 1 closed: exit {closed.returncode}, no traceback; watch: heartbeat went on, exit 0")


def test_wall_clock_jumps(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "process: the wall clock jumping forward or back",
        "no false stall after a jump forward, a real stall still seen after a jump back; counts exact",
    )
    log = tmp_path / "trainer.log"
    log.write_text(REFUSED)
    clock = FakeClock()
    engine = make_engine(tmp_path, {"training": {"logs": ["*.log"]}, "thresholds": {"stall_s": 600}}, clock=clock)
    engine.collect_once()
    clock.advance(5)
    clock.jump_wall(3 * 3600)  # NTP steps the clock forward three hours
    with log.open("a") as f:
        f.write(REFUSED)
    engine.drain_logs()
    snap = engine.build()
    assert snap.training is not None and not snap.training.stalled
    assert "stalled" not in {f.code for f in snap.findings}
    assert snap.events["connection_refused"].count == 2
    forward = "after +3 h: not stalled, 2 events"
    clock.jump_wall(-6 * 3600)  # and back six
    clock.advance(601)  # then nothing for ten minutes: a real stall
    snap = engine.build()
    assert snap.training is not None and snap.training.stalled
    rep: dict[str, Any] = to_json_dict(snap)
    assert rep["events"]["connection_refused"]["count"] == 2
    assert all(e["rate_per_min"] >= 0 for e in rep["events"].values())
    engine.stop()
    row.saw(f"{forward}; after -6 h and 601 s of silence: stalled=true; rates never negative")
