"""A simulated training host for tests: start `python -m rlwatch.sim`, wait on its ledger, stop it cleanly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import yaml

from rlwatch.sim.common import tagged
from rlwatch.sim.ledger import read_ledger
from rlwatch.sources import procfs


def wait_until(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """The value of ``pred`` once truthy; AssertionError when it is not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def kill_job(job: subprocess.Popen[bytes]) -> None:
    """SIGKILL a job this test started and every process under it, its own process group and the sessions its
    children started (torchrun starts each rank in a session of its own, which a group's SIGKILL never reaches), so
    no rank lives on into the next test holding its GPU."""
    try:
        tree = psutil.Process(job.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    for p in [psutil.Process(job.pid), *tree] if job.poll() is None else tree:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    job.wait(timeout=60)


def younger_from_now_on(pid: int) -> None:
    """Wait until a process started from now on has a later start time than ``pid``. Start times count clock ticks
    since boot (10 ms), as /proc/uptime does; the wall clock is no guide, since a start time is the boot time (whole
    seconds) plus ticks, so it may read up to a second early."""
    stat = procfs.read_stat(pid)
    assert stat is not None, f"pid {pid} is gone"

    def later() -> bool:
        up = procfs.parse_uptime(Path("/proc/uptime").read_text())
        return up is not None and up * procfs.clk_tck() > stat.starttime_ticks + 1.5

    wait_until(later, 5)


def ledger(run_dir: Path) -> dict[str, Any] | None:
    return read_ledger(run_dir)


def ledger_where(run_dir: Path, pred: Callable[[dict[str, Any]], bool]) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        data = ledger(run_dir)
        return data if data is not None and pred(data) else None

    return check


def settled(data: dict[str, Any]) -> bool:
    return bool(data["phase"] == "settled")


def with_id(sim_id: str) -> list[psutil.Process]:
    """Live processes of one simulation: its id in their argv, or in their environment (``python3 train.py``)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            environ = proc.environ()
        except psutil.Error:
            environ = None
        if tagged(environ, proc.info["cmdline"], sim_id):
            found.append(proc)
    return found


def alive(*names: str) -> Callable[[dict[str, Any]], bool]:
    """A ledger predicate: every named piece has registered and is alive. Each piece writes its own record, so one
    being there says nothing of its siblings (rank 1 may register before rank 0)."""

    def check(data: dict[str, Any]) -> bool:
        pieces = data["facts"]["pieces"]
        return all(any(p["name"] == name and p["alive"] for p in pieces) for name in names)

    return check


def piece(data: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [p for p in data["facts"]["pieces"] if p["name"] == name]
    return found[-1]


class Sim:
    """One ``python -m rlwatch.sim`` process started by a test."""

    def __init__(self, tmp_path: Path, scenario: str, speed: float) -> None:
        self.dir = tmp_path / "run"
        self.out = open(tmp_path / "sim.out", "wb")  # noqa: SIM115  (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rlwatch.sim", scenario, str(self.dir), "--speed", str(speed), "--seed", "7"],
            stdout=self.out,
            stderr=subprocess.STDOUT,
        )
        first = wait_until(lambda: ledger(self.dir), 20)
        self.sim_id: str = first["sim_id"]

    def wait(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
        data: dict[str, Any] = wait_until(ledger_where(self.dir, pred), timeout)
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            assert self.proc.wait(timeout=30) == 0
        finally:
            self.out.close()
        wait_until(lambda: not with_id(self.sim_id), 10)

    def rlwatch_yaml(self) -> dict[str, Any]:
        data = yaml.safe_load((self.dir / "rlwatch.yaml").read_text())
        assert isinstance(data, dict)
        return data

    def run_resume(self) -> subprocess.Popen[bytes]:
        """What `rlwatch act resume` does: the recorded launcher argv, in its directory, output to its log."""
        actions = self.rlwatch_yaml()["actions"]
        with open(self.dir / actions["resume_log"], "ab") as log:
            return subprocess.Popen(
                actions["resume_command"],
                cwd=actions["resume_cwd"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


def start(sims: list[Sim], tmp_path: Path, scenario: str, speed: float) -> Sim:
    sim = Sim(tmp_path, scenario, speed)
    sims.append(sim)
    return sim


def rlwatch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real `rlwatch ARGS…` in another process, as a person runs it (no terminal on stdin)."""
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def run_report(run_dir: Path, timeout: float = 60) -> tuple[int, dict[str, Any]]:
    """The real `rlwatch report --json` in another process: its exit status (0, 1 or 3 for unknown; never 2) and its
    JSON."""
    out = subprocess.run(
        [sys.executable, "-m", "rlwatch", "report", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.returncode in (0, 1, 3), out.stderr  # 3: unknown
    data: dict[str, Any] = json.loads(out.stdout)
    return out.returncode, data


def report(run_dir: Path) -> dict[str, Any]:
    return run_report(run_dir)[1]


class StartedProcesses:
    """The processes a test started, by (pid, start time): only those are ever signalled, and a pid reused by another
    process since is left alone."""

    def __init__(self) -> None:
        self.idents: list[tuple[int, float]] = []

    def add(self, pid: int) -> int:
        self.idents.append((pid, psutil.Process(pid).create_time()))
        return pid

    def signal(self, pid: int, sig: int) -> None:
        created = next(c for p, c in self.idents if p == pid)
        proc = psutil.Process(pid)
        assert proc.create_time() == created
        proc.send_signal(sig)

    def kill(self, pid: int) -> None:
        """SIGKILL one of them and reap it (a child of the test) or wait for it to go."""
        self.signal(pid, signal.SIGKILL)
        try:
            psutil.Process(pid).wait(10)
        except psutil.NoSuchProcess:
            pass

    def kill_all(self) -> None:
        for pid, created in self.idents:
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created:
                    proc.kill()
            except psutil.Error:
                pass
