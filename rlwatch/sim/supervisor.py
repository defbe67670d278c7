"""The supervisor: lays out the run directory, starts a scenario's processes, keeps the simulated GPU and the ledger
up to date, plays the platform where a scenario needs one, and stops everything it started.

Everything it starts carries ``--sim-id <uuid>`` in its argv, or, where the argv must look like a person's
(``python3 train.py``, ``torchrun ... train.py``), ``RLWATCH_SIM_ID=<uuid>`` in its environment, which its children
inherit; stopping finds processes by that exact id (never by a name), so processes started later by rlwatch from
``rlwatch.yaml`` are stopped too, and nothing else is touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

import psutil

from rlwatch.sim import commands
from rlwatch.sim.common import (
    SIM_ENV,
    Layout,
    atomic_write_json,
    python3_argv,
    read_json,
    scaled,
    spawn_piece,
    tagged,
)
from rlwatch.sim.gpu import GpuModel
from rlwatch.sim.ledger import PartsReader, latest, merge_counts
from rlwatch.sim.lifeline import SupervisorHeartbeat, supervisor_alive
from rlwatch.sim.runconfig import write_run_files
from rlwatch.sim.scenarios import ALL, Scenario

GRACE_S = 2.0
TICK_S = 0.2
GPU_EVERY_S = 1.0

# What a previous simulation left in its directory; removed before a new one starts there.
OWNED = (
    "logs",
    "checkpoints",
    "output",
    ".sim",
    "dev",
    "repo",
    "config.yaml",
    "rlwatch.yaml",
    "train_grpo.py",
    "train.py",
    "train.log",
    "torchrun.log",
    "dmesg.log",
)


class SimError(Exception):
    """A simulation that cannot start (bad directory, one already running there): a usage error, not a crash."""


def free_port() -> int:
    """A loopback port free now: chosen before the server exists, so ``rlwatch.yaml`` can name it from the start."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Simulation:
    """One scenario played out in one directory. ``prepare`` → ``start`` → (``settled`` …) → ``stop``."""

    def __init__(self, scenario: str, run_dir: str | os.PathLike[str], speed: float = 1.0, seed: int = 0) -> None:
        if scenario not in ALL:
            raise SimError(f"unknown scenario {scenario!r}; choose from: {', '.join(ALL)}")
        if not speed > 0:
            raise SimError(f"--speed must be greater than 0, got {speed}")
        self.scenario: Scenario = ALL[scenario]
        self.layout = Layout.of(run_dir)
        self.speed = float(speed)
        self.seed = int(seed)
        self.sim_id = str(uuid.uuid4())
        self.port = 0
        self.children: list[subprocess.Popen[bytes]] = []
        self.heartbeat = SupervisorHeartbeat(self.layout.alive, self.sim_id)
        self.gpu = GpuModel(self.layout.device, self.layout.gpu_state, self.seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sim-supervisor", daemon=True)
        self._entry: subprocess.Popen[bytes] | None = None
        self._restart_due: float | None = None
        self.boots = 0
        self.loops = 0
        self.phase = "running"
        self._last_ledger: dict[str, Any] | None = None
        self._next_gpu = 0.0
        self.parts = PartsReader(self.layout)

    # ------------------------------------------------------------------------------------------------ set-up
    def prepare(self) -> None:
        """Make the run directory: refuse a foreign non-empty one, clear what a previous simulation left."""
        try:
            self._prepare()
        except OSError as exc:
            raise SimError(f"{self.layout.run_dir}: cannot set up the run directory: {exc}") from None

    def _prepare(self) -> None:
        run_dir = self.layout.run_dir
        if run_dir.exists() and not run_dir.is_dir():
            raise SimError(f"{run_dir}: not a directory")
        if run_dir.exists() and any(run_dir.iterdir()):
            if not self.layout.sim_dir.is_dir():
                raise SimError(f"{run_dir}: not empty and not a simulator directory; choose a new or empty one")
            previous = read_json(self.layout.alive)
            if isinstance(previous, dict) and supervisor_alive(self.layout.alive, str(previous.get("sim_id"))):
                raise SimError(f"{run_dir}: a simulation is already running there (pid {previous.get('pid')})")
            for name in OWNED:
                path = run_dir / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif path.exists() or path.is_symlink():
                    path.unlink()
        dirs = [self.layout.sim_dir, self.layout.parts_dir, self.layout.faults_dir]
        if self.scenario.rlwatch_yaml:  # a run found from evidence alone gets no AReaL tree and no stand-in device
            dirs += [self.layout.log_dir, self.layout.device.parent]
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        if self.scenario.rlwatch_yaml:
            self.layout.device.touch()
        self.port = free_port()
        spec = {
            **self.scenario.spec,
            "sim_id": self.sim_id,
            "scenario": self.scenario.name,
            "port": self.port,
            "speed": self.speed,
            "seed": self.seed,
        }
        atomic_write_json(self.layout.spec, spec, indent=2)
        for fault in self.scenario.faults:
            (self.layout.faults_dir / fault).touch()
        write_run_files(self.layout, self.scenario, self.sim_id, port=self.port, speed=self.speed, seed=self.seed)
        self.gpu.write(stepping=False)
        self._write_ledger([])

    def spawn(self, argv: list[str], log: Path | None) -> subprocess.Popen[bytes]:
        proc = spawn_piece(argv, log, self.layout.run_dir)
        self.children.append(proc)
        return proc

    def start(self) -> None:
        self.heartbeat.start()
        run_dir, sid, speed, seed = self.layout.run_dir, self.sim_id, self.speed, self.seed
        if self.scenario.strays:
            self._start_strays(self.scenario.strays)
        flavour = self.scenario.flavour or "areal"
        if self.scenario.start == "launcher":
            self.spawn(commands.launcher(sid, run_dir, speed, seed, flavour), self.layout.launcher_log)
        elif self.scenario.start == "entrypoint":
            self._boot()
        elif self.scenario.start == "script":
            argv, python, env = python3_argv("train.py")
            self._spawn_user(argv, self.layout.user_log, python, env)
        elif self.scenario.start == "torchrun":
            argv = [sys.executable, str(self.layout.torchrun_bin), "--nproc-per-node", "2", "train.py"]
            self._spawn_user(argv, self.layout.torchrun_log, None, dict(os.environ))
        else:
            for i in range(int(self.scenario.spec["workers"])):
                self.spawn(commands.worker(sid, run_dir, speed, seed, i), self.layout.worker_log(i))
        self._thread.start()

    def _spawn_user(self, argv: list[str], log: Path, python: str | None, env: dict[str, str]) -> None:
        """A run as a person starts it by hand: in the run directory, output redirected to a log there, tagged with
        the simulation's id in its environment only."""
        proc = spawn_piece(argv, log, self.layout.run_dir, executable=python, env={**env, SIM_ENV: self.sim_id})
        self.children.append(proc)

    def _start_strays(self, n: int) -> None:
        """Leftovers of a "previous run": detached before the run starts, holding the device when it does."""
        for _ in range(n):
            proc = self.spawn(
                commands.holder(self.sim_id, self.layout.run_dir, self.speed, self.seed, os.getpid()), None
            )
            proc.wait(timeout=10)  # the first fork returns at once; the grandchild lives on, orphaned
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            holding = [p for p in self.parts.read() if p.get("role") == "holder" and p.get("state") == "holding"]
            if len(holding) >= n:
                return
            time.sleep(0.02)
        print("rlwatch sim: stray holders did not take the device in time", file=sys.stderr)

    def _boot(self) -> None:
        self.boots += 1
        self._entry = self.spawn(
            commands.entrypoint(self.sim_id, self.layout.run_dir, self.speed, self.seed, self.boots),
            self.layout.container_log,
        )

    # ------------------------------------------------------------------------------------------------ running
    def _loop(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self._tick()
            except Exception as exc:  # a bad tick must not end the simulation: report it and go on
                print(f"rlwatch sim: supervisor tick failed: {exc}", file=sys.stderr)

    def _tick(self) -> None:
        for proc in self.children:
            proc.poll()
        self.children = [p for p in self.children if p.returncode is None or p is self._entry]
        if self.scenario.restart_every_s is not None and self._entry is not None and self._entry.poll() is not None:
            now = time.monotonic()
            if self._restart_due is None:
                self._restart_due = now + scaled(self.scenario.restart_every_s, self.speed)
            elif now >= self._restart_due:
                self._restart_due = None
                self.loops += 1
                self._boot()
        parts = self.parts.read()
        if time.monotonic() >= self._next_gpu:
            self._next_gpu = time.monotonic() + GPU_EVERY_S
            self.gpu.write(stepping=self._stepping(parts))
        self._write_ledger(parts)

    def _stepping(self, parts: list[dict[str, Any]]) -> bool:
        trainer = latest(parts, "trainer")
        if trainer is None or trainer.get("state") != "running":
            return False
        last = trainer.get("facts", {}).get("last_step_at")
        window = max(1.5, 3 * scaled(float(self.scenario.spec.get("step_time", 2.0)), self.speed))
        return isinstance(last, (int, float)) and time.time() - last < window and psutil.pid_exists(trainer["pid"])

    def _write_ledger(self, parts: list[dict[str, Any]], *, stopped: bool = False) -> None:
        files, totals = merge_counts(parts)
        settled = self.scenario.settled(parts)
        self.phase = "settled" if settled else "running"
        trainer = latest(parts, "trainer")
        tfacts = trainer.get("facts", {}) if trainer else {}
        step_info = read_json(self.layout.step_info)
        facts: dict[str, Any] = {
            "server_port": self.port,
            "server_url": f"http://127.0.0.1:{self.port}" if self.scenario.flavour else None,
            "stray_pids": [
                p["facts"]["stray_pid"]
                for p in parts
                if p.get("role") == "holder" and "stray_pid" in p.get("facts", {})
            ],
            "trainer_last_step": tfacts.get("last_step"),
            "last_checkpoint_global_step": tfacts.get("last_checkpoint_global_step"),
            "recover_global_step": step_info.get("global_step") if isinstance(step_info, dict) else None,
            "total_steps": tfacts.get("total_steps"),
            "pieces": [
                {
                    "name": p.get("name"),
                    "role": p.get("role"),
                    "pid": p.get("pid"),
                    "state": p.get("state"),
                    "alive": _pid_running(p.get("pid")),
                }
                for p in parts
            ],
        }
        if self.scenario.restart_every_s is not None:
            facts.update(loops=self.loops, boots=self.boots)
        for name in ("worker-0", "worker-1"):
            part = latest(parts, name)
            if part is not None:
                facts[f"{name}_brakes"] = part.get("facts", {}).get("brakes", 0)
        body = {
            "sim_id": self.sim_id,
            "scenario": self.scenario.name,
            "profile": self.scenario.profile,
            "run_dir": str(self.layout.run_dir),
            "speed": self.speed,
            "seed": self.seed,
            "supervisor_pid": os.getpid(),
            "phase": self.phase,
            "stopped": stopped,
            "files": files,
            "totals": totals,
            "facts": facts,
        }
        if body != self._last_ledger:
            self._last_ledger = body
            atomic_write_json(self.layout.ledger, {**body, "updated": time.time()}, indent=2)

    # ------------------------------------------------------------------------------------------------ stopping
    def processes(self) -> list[psutil.Process]:
        """Every live process carrying this simulation's id in its argv or environment, wherever it came from (not
        this process). Another user's environment cannot be read; nothing of this simulation runs as another user."""
        found = []
        me = os.getpid()
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if proc.pid == me:
                continue
            cmdline = proc.info.get("cmdline") or []
            try:
                environ = None if self.sim_id in cmdline else proc.environ()
            except psutil.Error:
                environ = None
            if tagged(environ, cmdline, self.sim_id):
                found.append(proc)
        return found

    def stop(self) -> None:
        """Stop everything: SIGTERM, a grace period, SIGKILL; repeated until nothing with the sim id is left."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.heartbeat.stop()
        for _ in range(5):
            procs = self.processes()
            if not procs:
                break
            for proc in procs:
                try:
                    proc.terminate()
                except psutil.Error:
                    pass
            alive = _wait_gone(procs, GRACE_S)
            for proc in alive:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            _wait_gone(alive, GRACE_S)
        for child in self.children:
            try:
                child.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        try:
            self._write_ledger(self.parts.read(), stopped=True)
        except OSError:
            pass

    def describe(self) -> str:
        return (
            f"rlwatch sim: scenario {self.scenario.name} in {self.layout.run_dir} (speed {self.speed:g}, seed "
            f"{self.seed}, sim id {self.sim_id})\n"
            f"  watch it:  rlwatch {self.layout.run_dir}\n"
            f"  ledger:    {self.layout.ledger}\n"
            "  Ctrl+C stops every process of the simulation."
        )


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until each process is gone or a zombie (an orphaned stray is reaped by init, not by us); the rest."""
    deadline = time.monotonic() + timeout
    alive = list(procs)
    while alive:
        alive = [p for p in alive if _running(p)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    return alive


def _pid_running(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        return _running(psutil.Process(pid))
    except psutil.Error:
        return False


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def run_supervised(scenario: str, run_dir: str | os.PathLike[str], speed: float = 1.0, seed: int | None = 0) -> int:
    """Run ``scenario`` into ``run_dir`` until SIGINT/SIGTERM/SIGHUP, then stop everything it started.

    Returns 0 after a clean stop and 2 when the simulation cannot start (unknown scenario, bad speed, a foreign or
    busy directory). Signal handlers are installed only when called from the main thread; elsewhere use
    :class:`Simulation` directly.
    """
    try:
        sim = Simulation(scenario, run_dir, speed, 0 if seed is None else seed)
        sim.prepare()
    except SimError as exc:
        print(f"rlwatch sim: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        sim.start()
        print(sim.describe(), flush=True)
        while not done.wait(0.5):
            pass
    finally:
        sim.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
