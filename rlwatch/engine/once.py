"""The one-shot look (`rlwatch report`, `act`): everything read once, synchronously, and the few things a single
look must do that the loops do over time: the backlog's newest part diagnosed first for a person waiting, a log
still being written told apart from a stopped run, the stacks of a hung run read, the ranks' flight records and
NCCL RAS asked on suspicion, and the GPUs read a few times so one read's noise is no straggler.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

from rlwatch.common.state import Snapshot
from rlwatch.engine.assembly import Assembly
from rlwatch.engine.diagnosis.collectives import GPU_MIN_READS
from rlwatch.engine.diagnosis.health import undated
from rlwatch.engine.job import ras_suspicion, suspicious
from rlwatch.engine.seen import exchange
from rlwatch.sources.stacks import capture

UNSEEN_WRITER_WAIT_S = 2.0


class OneShot(Assembly):
    """A report's look: the logs, every source and the server, once, with what only a single look needs."""

    def _setup_once(self) -> None:
        """How long a one-shot look may watch the logs for a writer it cannot see."""
        # How long a one-shot look watches a freshly written log of a run with no process seen (_writer_unseen);
        # RLWATCH_UNSEEN_WRITER_WAIT_S sets it (0: never watch, as the test suite does for logs no process writes).
        self.unseen_writer_wait_s = _seconds(os.environ.get("RLWATCH_UNSEEN_WRITER_WAIT_S"), UNSEEN_WRITER_WAIT_S)

    def collect_once(
        self,
        *,
        first_look: Callable[[Snapshot], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Snapshot:
        """Everything once, synchronously: the backlog, every source, the server probe. For `rlwatch report`.

        For a person waiting at a terminal: with ``first_look``, a big backlog's newest part is diagnosed first (the
        preview, as the dashboard does) and handed to it, sources and server included, before the rest is read;
        ``progress`` gets (bytes read, bytes) after each poll while a preview was planned. The answer is the same
        either way: once everything is read the preview is dropped, and the snapshot is the main count's alone."""
        if first_look is None:
            self.drain_logs()
        else:
            self._drain_newest_first(first_look, progress)
        self._sample_ray()  # is it a Ray run? then ask the State API once, before the sources are read
        self.poll_ray(force=True)
        self._sample_ray()  # the run's actors, as the State API lists them: evidence for the live run
        self.drain_logs()  # Ray's files it gave to follow
        self.sample()
        self.probe_server()
        snap = self.build()
        self._seen = exchange(self.run_dir, snap)  # its last step line dated by earlier reads, and noted for later ones
        if self._seen is not None:
            snap = self.build()
        if self._writer_unseen(snap):  # a log still being written proves a writer rlwatch cannot see: not stopped
            endings = self._read_endings(self.clock.time())  # the logs again, not the look: it stands as it was
            with self._lock:
                self._endings = endings
            snap = self.build()
        if self._hang_unread(snap):  # a hung run's report carries where each process waits
            self.capture_stacks("hang declared")
            snap = self.build()
        elif undated(snap):  # its step lines carry no time: where each rank stands now is the evidence there is
            report = capture(self.stack_targets(), "progress not dated", None, self.clock.time())
            with self._lock:
                self._stacks = report
            snap = self.build()
        if suspicious(snap) and snap.flight is None:  # the ranks' flight records, now that there is a reason
            self.job_watch.read_flight(snap)
            snap = self.build()
        if ras_suspicion(snap) is not None and snap.ras is None:  # NCCL RAS: where every rank of the job stands
            self.job_watch.ask_ras(snap, wait=True)
            if self.job_watch.ras is not None:
                snap = self.build()
        if self._gpu_burst(snap):  # GPUs' draws compared over a few reads: one read says nothing of a straggler
            snap = self.build()
        return snap

    def _gpu_burst(self, snap: Snapshot, reads: int = GPU_MIN_READS, every_s: float = 0.25) -> bool:
        """For a one-shot look at a progressing run whose ranks compute on two GPUs or more: the GPUs read a few
        times (about two seconds), so that a GPU-bound straggler can be told from one read's noise."""
        job, rs = snap.job, snap.run_state
        if job is None or rs is None or rs.state != "progressing" or snap.gpu is None or not snap.gpu.available:
            return False
        if len({r.gpu for r in job.ranks if r.gpu is not None}) < 2:
            return False
        for _ in range(reads):
            time.sleep(every_s)  # the GPUs' own sampling period: nothing to wait on but time
            self.job_watch.add_gpus(self.clock.time(), self.gpu_backend.sample())
        return True

    def _writer_unseen(self, snap: Snapshot) -> bool:
        """For a one-shot look: the run seems stopped (no process of it seen here, never one seen going) while a log
        was written within the hang window. A trainer killed a second ago looks exactly so — and so does a run whose
        writer rlwatch cannot see (another container or host sharing the directory). Watching the logs for a
        moment tells them apart: one that grows has a writer, and the next look says "unknown", never "stopped"."""
        rs, run = snap.run_state, snap.live_run
        if rs is None or rs.state != "stopped" or run is None or run.gone or self.unseen_writer_wait_s <= 0:
            return False
        floor = self.cfg.thresholds.hang_floor_s
        fresh = [e.path for e in snap.endings if e.mtime is not None and snap.time - e.mtime <= floor]
        if not fresh:
            return False

        def state() -> dict[str, tuple[int, int]]:
            out = {}
            for path in fresh:
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                out[path] = (st.st_size, st.st_mtime_ns)
            return out

        before = state()
        deadline = time.monotonic() + self.unseen_writer_wait_s
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if state() != before:
                return True
        return False

    def _drain_newest_first(
        self, first_look: Callable[[Snapshot], None], progress: Callable[[int, int], None] | None
    ) -> None:
        """The backlog read as the log loop reads it, the preview's diagnosis handed out as soon as it is there."""
        self.advance_preview()  # plans the preview when the backlog is big: its newest part is counted at once
        planned = self.preview is not None
        if planned:
            self.sample()
            self.probe_server()
            first_look(self.build())
        while True:
            self.advance_preview()  # line numbers as they come; the preview dropped once the main count passed it
            if not self.poll_logs():
                break
            if planned and progress is not None:
                progress(*self.tailer.backlog_progress())
        self._drop_preview()  # everything is read: the answer is the main count's alone


def _seconds(text: str | None, default: float) -> float:
    """A duration from the environment: a finite number of seconds, at least 0; else ``default``."""
    try:
        value = float(text) if text is not None else default
    except ValueError:
        return default
    return value if math.isfinite(value) and value >= 0 else default
