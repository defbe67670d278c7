"""The engine's threads and their waits, so slow probes never delay counting: the *log loop* wakes on file changes
(watchfiles, or polling) and feeds new lines to the counter within tens of milliseconds; the *sample loop* runs a
host round every ``interval_s`` (backing off while nothing of the run moves); the inference server's probe and
Ray's State API, which can block for their whole timeout, have threads of their own. Each loop publishes a fresh
snapshot; readers only ever take the latest reference, so the UI thread never waits on I/O. A failing step degrades
its source and never kills its loop.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from rlwatch.common.heap import release_free_heap
from rlwatch.engine.once import OneShot
from rlwatch.sources import procfs

# Bytes counted since the last heap release after which catching up returns free heap to the system
# (rlwatch.common.heap).
RELEASE_AFTER_BYTES = 64 << 20
RELEASE_EVERY_S = 60.0  # and once a minute, for what a long run's churn leaves free (rlwatch.common.heap)
# A dashboard's engine, while nothing of the run moves (no log line, the same processes alive), reads every source at
# most this often; it still looks every interval whether a process of the run ended or the logs moved (issue 35).
IDLE_SAMPLE_S = 5.0
# ... and this far apart while no process of the run is alive either (a stopped run): a round then reads only the
# host (memory, disk, GPU holders) and looks for the run's processes, and a relaunch that writes a log or a process
# of the table that ends still cuts the wait within a second (issue 35: the dashboard idle on a stopped run).
STOPPED_SAMPLE_S = 10.0


class Loops(OneShot):
    """Starting and stopping the loops, and what each loop does between its waits."""

    def _stacks_on_hang(self) -> None:
        """Once per hang, as soon as it is declared: where each process waits, read while it still waits."""
        snap = self._snapshot
        if not self._hang_unread(snap):
            return
        assert snap.run_state is not None
        self._stacks_for = snap.run_state.since
        self._guard("stacks", lambda: self.capture_stacks("hang declared"))
        self._guard("build", self.build)

    def start(self) -> None:
        """Run the loops in daemon threads until :meth:`stop`."""
        self.waker.start()
        loops = (
            ("logs", self._log_loop),
            ("sample", self._sample_loop),
            ("server", self._server_loop),
            ("ray", self._ray_loop),
        )
        # Every loop is listed before any starts: `running` is true from a loop's first step (the log loop's
        # preview waits for the sample loop's first round only where it runs).
        self._threads += [threading.Thread(target=t, name=f"rlwatch-{name}", daemon=True) for name, t in loops]
        for thread in self._threads:
            thread.start()
        if self.stack_sampler is not None:
            self.stack_sampler.start()

    def wait_first_look(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the running engine has published its first look: the host sources
        sampled once, and the logs' first pass, which for a big backlog is the diagnosis of its newest part (the
        preview). True when it has.

        The dashboard waits here, briefly, before its first frame: Textual's start and the preview's count would
        otherwise share the interpreter, and the first frame would show a backlog being read with nothing said
        about it (on a 16-core host the diagnosis came 0.4 to 0.6 s after the first frame, for 0.15 s of
        counting)."""
        deadline = time.monotonic() + timeout  # a real wait on other threads: the real clock, whatever is injected
        return self._first_sample.wait(timeout) and self._first_look.wait(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._first_look.set()
        self._first_sample.set()
        self.waker.stop()
        if self.stack_sampler is not None:
            self.stack_sampler.stop()
        for t in self._threads:
            t.join(timeout=5)
        if self.preview is not None:
            self.preview.close()
        self.tailer.close()
        self.gpu_backend.close()
        self.kernel_log.close()
        self.launches.close()

    def _guard(self, name: str, fn: Callable[[], object]) -> None:
        """Run one loop step; a failure degrades that source, it never kills the loop."""
        try:
            fn()
        except Exception as exc:
            with self._lock:
                self._ok(name, f"{type(exc).__name__}: {exc}")

    def _log_loop(self) -> None:
        while not self._stop.is_set():
            handled = 0
            try:
                if self.advance_preview():  # the diagnosis of now goes out before another chunk of the backlog
                    self._guard("build", self.build)
                    self._first_look.set()
                    continue
                self._first_look.set()
                handled = self.poll_logs()
            except Exception as exc:
                with self._lock:
                    self._ok("logs", f"{type(exc).__name__}: {exc}")
            if handled:
                self._guard("build", self.build)
                continue  # more may be waiting (back-pressure: the tailer reads a bounded amount per poll)
            if self._unreleased >= RELEASE_AFTER_BYTES:  # caught up after a big backlog
                self._unreleased = 0
                release_free_heap()
            # With every log directory watched, a write wakes this loop at once; the poll is only the safety net
            # for writes inotify never sees (another host's on NFS): a second is enough, and 4 polls a second
            # were 0.13 % of a core on a quiet run (issue 35).
            self.waker.wait(1.0 if self.waker.mode == "inotify" else 0.25)

    def _sample_loop(self) -> None:
        released_at = self.clock.monotonic()
        last: tuple[int, frozenset[tuple[int, int]]] | None = None  # (log moves, processes alive) after a round
        while not self._stop.is_set():
            self._guard("sample", self.sample)
            self._guard("build", self.build)
            self._stacks_on_hang()
            self._first_sample.set()
            self.rounds += 1
            if self.clock.monotonic() - released_at >= RELEASE_EVERY_S:
                released_at = self.clock.monotonic()
                release_free_heap()
            last = self._next_round(last)

    def _alive_marks(self) -> frozenset[tuple[int, int]]:
        """The processes of the table that were alive at the last round, as (pid, start ticks) of those still
        running now: a few reads of ``/proc/PID/stat``, no scan of the host."""
        out = set()
        for p in self._procs:
            if p.alive:
                st = procfs.read_stat(p.pid, self._proc_root)
                if st is not None and st.state not in ("Z", "X"):
                    out.add((p.pid, st.starttime_ticks))
        return frozenset(out)

    def _next_round(
        self, last: tuple[int, frozenset[tuple[int, int]]] | None
    ) -> tuple[int, frozenset[tuple[int, int]]] | None:
        """Wait for the next whole round: ``interval_s``, or, with ``idle_sample_s`` set and a run that did not move
        since the round before (no log line counted, the same processes alive), up to ``idle_sample_s`` (up to
        ``stopped_sample_s`` while none of them is alive) with a look every ``interval_s`` that ends the wait as
        soon as a process of the run ends or a log moves (issue 35: a
        round reads /proc of every process, the memory, the disk, the checkpoints and diagnoses, 8 ms here, and on
        a quiet run every one of them read what the last one did; a process's end still shows within a second).
        While it backs off, GPU holders are scanned every HOLDER_IDLE_SCAN_S instead of HOLDER_SCAN_S. Returns what
        this round saw, for the next one to compare."""
        interval, idle = self.cfg.interval_s, self.idle_sample_s
        self._quiet = False
        if idle is None or idle <= interval:
            self._stop.wait(interval)
            return None
        now = (self.log_moves, self._alive_marks())
        if now != last:
            self._stop.wait(interval)
            return now
        self._quiet = True  # the GPU-holder scan backs off too (_holders_now)
        if not now[1] and self.stopped_sample_s is not None:
            idle = max(idle, self.stopped_sample_s)  # nothing of the run alive to watch between rounds
        for _ in range(max(1, math.floor(idle / interval + 1e-9))):
            if self._stop.wait(interval):
                break
            if self.log_moves != now[0] or self._alive_marks() != now[1] or self._holders_at is None:
                self._quiet = False  # (or an action asked for the GPU holders afresh: rescan_holders)
                return None  # moved: the next round is a whole one, and the one after it compares afresh
            self.looks += 1
        return now

    def _ray_loop(self) -> None:
        """The State API, every ray.interval_s while the run is a Ray run (a request may take ray.timeout_s)."""
        if not self.ray_source.enabled or not self.cfg.ray.state_api:
            return
        while not self._stop.is_set():
            self._guard("ray", self.poll_ray)
            self._stop.wait(min(self.cfg.ray.interval_s, 2.0))

    def _server_loop(self) -> None:
        if self.server_probe is None:
            return
        while not self._stop.is_set():
            self._guard("server", self.probe_server)
            self._guard("build", self.build)
            self._stop.wait(self.cfg.server.interval_s)
