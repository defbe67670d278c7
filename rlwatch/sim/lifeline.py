"""Ties every simulator process to the supervisor, so a crashed supervisor never leaves processes behind for ever.

The supervisor keeps ``.sim/alive`` fresh (its pid and the sim id, touched every half second). Each piece checks it
from a daemon thread and ends itself once the file is gone, stale, names another simulation, or names a pid that no
longer exists. Orphaned stray holders watch the supervisor pid given in their argv instead, because the point of a
stray is that nothing in the run remembers it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from rlwatch.sim.common import atomic_write_text

STALE_S = 15.0  # generous: a loaded 2-core machine may starve the heartbeat thread for a while
CHECK_S = 0.5


def supervisor_alive(alive_file: Path, sim_id: str) -> bool:
    try:
        st = alive_file.stat()
        data = json.loads(alive_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or data.get("sim_id") != sim_id:
        return False
    if time.time() - st.st_mtime > STALE_S:
        return False
    pid = data.get("pid")
    return isinstance(pid, int) and psutil.pid_exists(pid)


def _exit_now() -> None:
    os._exit(0)


def watch(
    alive_file: Path,
    sim_id: str,
    on_lost: Callable[[], None] = _exit_now,
    *,
    supervisor_pid: int | None = None,
) -> threading.Thread:
    """Start the watcher thread; ``on_lost`` runs once when the supervisor is gone (default: exit at once)."""

    def gone() -> bool:
        if supervisor_pid is not None:
            return not psutil.pid_exists(supervisor_pid)
        return not supervisor_alive(alive_file, sim_id)

    def loop() -> None:
        while not gone():
            time.sleep(CHECK_S)
        try:
            on_lost()
        finally:
            os._exit(0)

    thread = threading.Thread(target=loop, name="sim-lifeline", daemon=True)
    thread.start()
    return thread


class SupervisorHeartbeat:
    """The supervisor's side: keeps the alive file fresh until stopped, then removes it."""

    def __init__(self, alive_file: Path, sim_id: str) -> None:
        self.alive_file = alive_file
        self.sim_id = sim_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sim-heartbeat", daemon=True)

    def start(self) -> None:
        self.write_file()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(CHECK_S):
            try:
                os.utime(self.alive_file)
            except OSError:  # removed under us: put it back, a piece would otherwise end itself
                try:
                    self.write_file()
                except OSError:
                    pass

    def write_file(self) -> None:
        atomic_write_text(self.alive_file, json.dumps({"pid": os.getpid(), "sim_id": self.sim_id}) + "\n")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        try:
            self.alive_file.unlink()
        except OSError:
            pass
