"""The process table and the GPU-holder scan under /proc races, huge tables, zombies and odd command lines."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import ProcessRule
from rlwatch.export.report import to_json_dict
from rlwatch.sources import procfs
from rlwatch.sources.holders import HolderScanner
from rlwatch.sources.processes import ProcessTable
from tests.faults.conftest import FaultRow, make_engine, run_cli, source_error
from tests.simhost import wait_until

pytestmark = pytest.mark.faults

BTIME = 1_763_700_000


def fake_proc(
    root: Path,
    pid: int,
    cmdline: bytes,
    *,
    ppid: int = 1,
    start: int = 1000,
    comm: str = "python",
    pgid: int = 0,
    sid: int = 0,
    cwd: Path | None = None,
) -> Path:
    """One /proc/<pid> as the kernel lays it out, for the parts rlwatch reads. Process group and session 0 are what
    a process shows whose session began outside this PID namespace."""
    d = root / str(pid)
    (d / "fd").mkdir(parents=True, exist_ok=True)
    rest = ["S", str(ppid), str(pgid), str(sid), *["0"] * 15, str(start), "0", "0"]
    if cwd is not None:
        (d / "cwd").symlink_to(cwd)
    (d / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
    (d / "cmdline").write_bytes(cmdline)
    (d / "status").write_text("Name:\tpython\nUid:\t0\t0\t0\t0\n")
    (d / "statm").write_text("1000 250 0 0 0 0 0\n")
    return d


def fake_root(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu 0 0 0 0\nbtime {BTIME}\n")
    (root / "uptime").write_text("5000.00 9000.00\n")
    fake_proc(root, 1, b"/sbin/init\0", ppid=0, start=1)
    return root


def rule(role: str, regex: str) -> ProcessRule:
    return ProcessRule(role=role, cmdline_regex=regex)


def test_processes_exiting_between_listing_and_reading(
    tmp_path: Path, fault_row: Callable[[str, str], FaultRow], procs: list[subprocess.Popen[bytes]]
) -> None:
    row = fault_row(
        "process: processes exiting or replaced between listing and reading /proc",
        "no error, no flicker: the watched process stays 'alive' with 0 restarts while hundreds come and go",
    )
    marker = f"faults-trainer-{uuid.uuid4().hex}"
    trainer = subprocess.Popen(  # works in the run directory: what, with its role, makes it the run's
        [sys.executable, "-c", "import sys; sys.stdin.read()", marker],
        stdin=subprocess.PIPE,
        start_new_session=True,
        cwd=tmp_path,
    )
    procs.append(trainer)
    churn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, time\nend = time.monotonic() + 30\n"
            "while time.monotonic() < end:\n    subprocess.Popen(['true']).wait()\n",
        ],
        start_new_session=True,
    )
    procs.append(churn)
    engine = make_engine(tmp_path, {"processes": [{"role": "trainer", "cmdline_regex": marker}]})
    seen = set()
    started = time.monotonic()
    rounds = 0
    while time.monotonic() - started < 2.0:
        engine.sample()
        snap = engine.build()
        (p,) = snap.processes
        assert (p.pid, p.alive, p.restarts) == (trainer.pid, True, 0)
        assert source_error(snap, "processes") is None
        seen.update(procfs.list_pids())
        rounds += 1
    engine.stop()
    assert churn.poll() is None, "the churn must have run during the whole test"
    row.saw(f"{rounds} samples while {len(seen)} pids came and went: trainer alive, 0 restarts, no source error")


def test_pid_replaced_by_another_process(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "process: a pid reused by a new process between two samples",
        "seen as a restart (new start time), never as the old process",
    )
    root = fake_root(tmp_path / "proc")
    fake_proc(root, 4242, b"python\0train.py\0", start=1000)
    clock = FakeClock()
    table = ProcessTable([rule("trainer", r"train\.py")], clock, proc_root=str(root))
    (first,) = table.sample()
    fake_proc(root, 4242, b"python\0train.py\0", start=2000)
    (vanished := root / "4243").mkdir()  # listed, then gone before its files are read
    clock.advance(2)
    (second,) = table.sample()
    assert second.pid == first.pid == 4242
    assert second.restarts == 1 and second.started_at == first.started_at + 10
    assert vanished.exists() and table.error is None
    row.saw(f"restarts 0→1, start time {first.started_at:.0f}→{second.started_at:.0f}; empty /proc entry skipped")


@pytest.mark.slow
def test_ten_thousand_processes(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "process: ten thousand processes (a fake /proc tree of 10,000 entries)",
        "one sample in a few seconds at most; the trainer and the GPU holders among them found, each judged",
    )
    root = fake_root(tmp_path / "proc")
    for pid in range(100, 10_100):
        fake_proc(root, pid, f"python\0worker.py\0--id\0{pid}\0".encode(), start=pid)
    # The trainer works in the run directory: the live run, from evidence.
    fake_proc(root, 10_100, b"python\0train.py\0", start=20_000, pgid=10_100, sid=10_100, cwd=tmp_path)
    # A leftover of an earlier attempt: its session's leader (pid 50) is gone, it was re-parented to init, and it
    # started before the trainer.
    fake_proc(root, 5001, b"python\0worker.py\0--id\x005001\0", start=5001, pgid=5001, sid=50)
    # A CUDA context holds the GPU node and /dev/nvidia-uvm (a monitor reading NVML holds no uvm node).
    for pid, fd in (("10100", 3), ("5000", 7), ("5001", 7)):
        (root / pid / "fd" / str(fd)).symlink_to("/dev/nvidia0")
        (root / pid / "fd" / str(fd + 1)).symlink_to("/dev/nvidia-uvm")
    engine = make_engine(
        tmp_path, {"processes": [{"role": "trainer", "cmdline_regex": r"train\.py"}]}, proc_root=str(root)
    )
    t0 = time.monotonic()
    engine.sample()
    snap = engine.build()
    took = time.monotonic() - t0
    engine.stop()
    assert [p.pid for p in snap.processes] == [10_100]
    holders = {h.pid: h for h in snap.holders}
    assert set(holders) == {5000, 5001, 10_100}
    assert holders[10_100].in_run and holders[10_100].status == "run"
    stray = holders[5001]
    assert stray.status == "stray" and stray.reason is not None and not stray.in_run
    assert stray.reason.startswith("orphaned: the session that started it (leader pid 50) is gone")
    assert "before the live run (pid 10100: python train.py)" in stray.reason
    # Session 0: the session began outside this PID namespace, so nothing shows it is gone, and its parent, pid 1,
    # is alive (a python init: the container's own program, whose children these are). Not a sure stray.
    other = holders[5000]
    assert other.status == "unknown" and other.reason is None and not other.in_run
    assert (other.evidence or "").startswith("not part of the live run, but not orphaned")
    assert took < 20
    row.saw(
        f"10,002 entries sampled in {took:.1f}s; trainer found, 3 holders: the trainer the run's, "
        f"pid 5001 a stray ({stray.reason}), pid 5000 unknown ({other.evidence})"
    )


def test_zombie(
    tmp_path: Path, fault_row: Callable[[str, str], FaultRow], procs: list[subprocess.Popen[bytes]]
) -> None:
    row = fault_row(
        "process: a zombie (defunct) process",
        "a trainer that exited but was not reaped shows as gone; the scans skip the zombie without error",
    )
    marker = f"faults-zombie-{uuid.uuid4().hex}"
    child = subprocess.Popen(  # works in the run directory: what, with its role, makes it the run's
        [sys.executable, "-c", "import sys; sys.stdin.read()", marker],
        stdin=subprocess.PIPE,
        start_new_session=True,
        cwd=tmp_path,
    )
    procs.append(child)
    engine = make_engine(tmp_path, {"processes": [{"role": "trainer", "cmdline_regex": marker}]})
    engine.sample()
    assert [p.alive for p in engine.build().processes] == [True]
    assert child.stdin is not None
    child.stdin.close()  # it exits; nobody reaps it yet

    def zombie() -> bool:
        stat = procfs.read_stat(child.pid)
        return stat is not None and stat.state == "Z"

    wait_until(zombie, 10)
    engine.sample()
    snap = engine.build()
    engine.stop()
    (p,) = snap.processes
    assert p.pid == child.pid and not p.alive
    assert source_error(snap, "processes") is None and source_error(snap, "holders") is None
    assert to_json_dict(snap)["processes"][0]["alive"] is False
    row.saw(f"pid {child.pid} in state Z: trainer alive=false, no source error")
    child.wait(timeout=5)


def test_empty_and_binary_command_lines(
    tmp_path: Path, fault_row: Callable[[str, str], FaultRow], procs: list[subprocess.Popen[bytes]]
) -> None:
    row = fault_row(
        "process: a command line that is empty or binary",
        "shown with replacement characters or as [comm], never raw control bytes; JSON stays valid",
    )
    root = fake_root(tmp_path / "proc")
    fake_proc(root, 300, b"", comm="kworker/0:1")
    (root / "300" / "fd" / "3").symlink_to("/dev/nvidia0")
    fake_proc(root, 301, b"\xff\xfe\x1b[2J\x07train.py\0--x\0", cwd=tmp_path)
    (root / "301" / "fd" / "3").symlink_to("/dev/nvidia0")
    clock = FakeClock()
    raw = HolderScanner("/dev/nvidia*", clock, proc_root=str(root)).scan().holders
    assert set(raw) == {300, 301}
    engine = make_engine(
        tmp_path, {"processes": [{"role": "trainer", "cmdline_regex": r"train\.py"}]}, proc_root=str(root)
    )
    engine.sample()
    snap = engine.build()
    engine.stop()
    by_pid = {h.pid: h for h in snap.holders}
    assert by_pid[300].cmdline == ("[kworker/0:1]",)
    assert by_pid[301].cmdline[0].startswith("\ufffd\ufffd")
    (trainer,) = snap.processes
    assert trainer.pid == 301
    json.loads(json.dumps(to_json_dict(snap)))
    row.saw("empty cmdline shown as '[kworker/0:1]'; binary argv decoded with U+FFFD")
    marker = f"faults-binary-{uuid.uuid4().hex}"
    live = subprocess.Popen(
        [sys.executable.encode(), b"-c", b"import sys; sys.stdin.read()", marker.encode(), b"\xff\x1b[2J\x07bell"],
        stdin=subprocess.PIPE,
        start_new_session=True,
        cwd=tmp_path,
    )
    procs.append(live)
    (tmp_path / "rlwatch.yaml").write_text(
        f"gpu:\n  backend: none\nprocesses:\n  - role: trainer\n    cmdline_regex: {marker}\n"
    )
    text = run_cli("report", str(tmp_path))
    js = run_cli("report", str(tmp_path), "--json")
    assert "\x1b" not in text.stdout and "\x07" not in text.stdout and "Traceback" not in text.stderr
    rep = json.loads(js.stdout)
    (proc,) = rep["processes"]
    assert proc["pid"] == live.pid and "\ufffd" in proc["cmdline"]
    row.saw("real process with argv b'\\xff\\x1b[2J\\x07': report text has no escape bytes, JSON valid")


def test_process_churn_does_not_stop_the_holder_scan(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "process: /proc entries deleted while the holder scan reads them",
        "entries that vanish are dropped silently (not 'unreadable'); the rest are found",
    )
    root = fake_root(tmp_path / "proc")
    for pid in range(200, 600):
        d = fake_proc(root, pid, b"python\0x.py\0")
        (d / "fd" / "3").symlink_to("/dev/nvidia0")
    stop = threading.Event()

    def deleter() -> None:
        import shutil

        for pid in range(599, 199, -2):
            if stop.is_set():
                return
            shutil.rmtree(root / str(pid), ignore_errors=True)

    scanner = HolderScanner("/dev/nvidia*", FakeClock(), proc_root=str(root))
    thread = threading.Thread(target=deleter)
    thread.start()
    try:
        while thread.is_alive():
            found = scanner.scan().holders
            assert set(found) <= set(range(200, 600))
    finally:
        stop.set()
        thread.join()
    found = scanner.scan().holders
    assert set(found) == set(range(200, 600, 2)) and scanner.skipped == 0
    row.saw("200 of 400 entries deleted during scans: no error; the 200 left found, 0 reported unreadable")
