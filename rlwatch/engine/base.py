"""What every part of the engine shares: the run it watches, its clock, one lock, the sources' health and the
latest snapshot.

The engine is built in layers, each a class in a module of its own concern that inherits the one below it
(base ← reading ← tracking ← stack_targets ← host_round ← assembly ← once ← loops ← :class:`~rlwatch.engine.engine.
Engine`): a part uses only what is below it, so the modules never import each other in a circle (an import-linter
contract in pyproject keeps that order). The state a layer keeps is set up by that layer's ``_setup_*`` method,
which the engine calls bottom-up.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.common.state import Snapshot, SourceStatus
from rlwatch.config.models import Config


class EngineBase:
    """The watched run and what every layer reads or writes under one lock: the sources' status and the snapshot."""

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        *,
        clock: Clock | None = None,
        proc_root: str = "/proc",
        host: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir.resolve()
        self.clock: Clock = clock or SystemClock()
        self.host = host or socket.gethostname()
        # An untrusted configuration file still says how to watch, but not what to execute: no action at all.
        self.readonly = cfg.actions.readonly or cfg.provenance.distrust is not None
        self._untrusted = cfg.provenance.distrust is not None  # its expressions run by RE2 (rlwatch.common.patterns)
        # Role rules name the run's processes (with a process of their family working with the run directory) unless
        # an untrusted file wrote them: then a writer in the family must back them.
        self._rules_named = not self._untrusted
        self._proc_root = proc_root
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._first_look = threading.Event()  # the log loop's first pass (the preview included) is published
        self._first_sample = threading.Event()  # the host sources' first round is published
        self._listeners: list[Callable[[Snapshot], None]] = []
        # None: every source is read every interval_s. A number (the dashboard's IDLE_SAMPLE_S): while the run is
        # quiet, whole rounds come at most this far apart, with a cheap look each interval (see _next_round).
        self.idle_sample_s: float | None = None
        self.stopped_sample_s: float | None = None  # the same, longer, while no process of the run is alive
        self.rounds = 0  # whole sampling rounds so far
        self.looks = 0  # cheap looks taken instead of a round while the run was quiet
        self._quiet = False  # the sample loop is backing off: nothing of the run moved over the last round
        self._status: dict[str, SourceStatus] = {}
        self._snapshot = Snapshot(
            host=self.host,
            time=self.clock.time(),
            profile=cfg.profile,
            run_dir=str(self.run_dir),
            simulated=cfg.simulated,
        )

    def _ok(self, name: str, error: str | None = None) -> None:
        self._status[name] = SourceStatus(name, error is None, self.clock.time(), error)

    def note_source(self, name: str, error: str | None = None) -> None:
        """Record how the source ``name`` fares (``error`` None: it works), for the next snapshot's sources: for what
        runs beside the engine and reports through it (the watchdog's notifications and heartbeat)."""
        with self._lock:
            self._ok(name, error)

    @property
    def running(self) -> bool:
        """True while the background loops run (then callers read snapshots instead of sampling themselves)."""
        return bool(self._threads) and not self._stop.is_set()

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def on_snapshot(self, listener: Callable[[Snapshot], None]) -> None:
        self._listeners.append(listener)
