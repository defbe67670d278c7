"""What the engine reads of a distributed job's ranks for each snapshot: the job they belong to and their GPUs, each
GPU's draw over a window, and — on suspicion only — the ranks' flight recorder dumps.

These are kept here, per engine, and put on the snapshot (``Snapshot.job``, ``gpu_activity``, ``flight``), so that
the rules that read them (engine/diagnosis/collectives) do no I/O and every view — the dashboard, ``watch``, the
exporter, a one-shot ``report`` — judges the same evidence.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from rlwatch.common.state import FlightState, GpuActivity, GpuHolder, GpuStatus, JobInfo, Snapshot
from rlwatch.engine.diagnosis.collectives import GPU_WINDOW_S
from rlwatch.sources import procfs
from rlwatch.sources.flight import FlightReader
from rlwatch.sources.job import job_info

__all__ = ["JobWatch", "suspicious"]

KEEP_READS = 600  # per GPU: a window of GPU_WINDOW_S at the fastest sampling rate, with room


def suspicious(s: Snapshot) -> bool:
    """An NCCL timeout was logged, or the run is hung or crashed: then the dumps are worth reading."""
    ev = s.events.get("nccl_timeout")
    hung = s.run_state is not None and s.run_state.state in ("hung", "crashed")
    return (ev is not None and ev.count > 0) or hung


class JobWatch:
    """One engine's view of its run's ranks across samples."""

    def __init__(self, proc_root: str = procfs.PROC) -> None:
        self._proc_root = proc_root
        self._environ: dict[tuple[int, float], dict[str, str]] = {}
        self._activity: dict[int, deque[GpuActivity]] = {}
        self._flight = FlightReader()
        self.job: JobInfo | None = None
        self.flight: FlightState | None = None

    def _env(self, pid: int, create_time: float) -> dict[str, str]:
        """A process's environment, read once per process (it does not change)."""
        key = (pid, create_time)
        env = self._environ.get(key)
        if env is None:
            env = procfs.read_environ(pid, self._proc_root) or {}
            self._environ[key] = env
            while len(self._environ) > 1024:
                self._environ.pop(next(iter(self._environ)))
        return env

    def add_gpus(self, now: float, gpu: GpuStatus) -> None:
        """One read of each GPU's draw, kept for the window."""
        for g in gpu.gpus:
            ring = self._activity.setdefault(g.index, deque(maxlen=KEEP_READS))
            ring.append(GpuActivity(now, g.power_w, g.sm_clock_mhz, g.util))
            while ring and ring[0].at < now - 2 * GPU_WINDOW_S:
                ring.popleft()

    def activity(self, now: float) -> dict[int, tuple[GpuActivity, ...]]:
        start = now - GPU_WINDOW_S
        return {i: tuple(r for r in ring if r.at >= start) for i, ring in self._activity.items()}

    def sample(
        self, ranks: Iterable[tuple[int, float]], holders: Iterable[GpuHolder], last: Snapshot, *, flight: bool = True
    ) -> None:
        """The job of the run's processes (``ranks``: each candidate's pid and start time; those whose environment
        names a RANK are ranks), and their flight records when ``last`` (the latest snapshot) gives a reason."""
        envs = [(pid, self._env(pid, ct)) for pid, ct in ranks]
        held = {h.pid: h.gpus for h in holders if h.gpus}
        self.job = job_info([(pid, env) for pid, env in envs if env.get("RANK", "").isdigit()], held)
        if flight:
            self.read_flight(last)

    def read_flight(self, last: Snapshot) -> None:
        """The ranks' dumps, read while ``last`` is suspicious (else forgotten); each rank asked once per hang."""
        if not suspicious(last):
            self.flight = None
            return
        by_pid = {pid: env for (pid, _), env in self._environ.items()}
        environs: Mapping[int, Mapping[str, str]] = (
            {r.rank: by_pid.get(r.pid, {}) for r in self.job.ranks} if self.job is not None else {}
        )
        rs = last.run_state
        hang = ("hung", rs.since) if rs is not None and rs.state == "hung" else None
        since = last.time - last.run_uptime_s if last.run_uptime_s is not None else None
        self.flight = self._flight.read(last.run_dir, environs, since, last.time, hang=hang)
