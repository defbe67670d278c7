"""What the engine reads of a distributed job's ranks for each snapshot: the job they belong to and their GPUs, each
GPU's draw over a window, and — on suspicion only — the ranks' flight recorder dumps and NCCL's RAS service.

These are kept here, per engine, and put on the snapshot (``Snapshot.job``, ``gpu_activity``, ``flight``, ``ras``),
so that the rules that read them (engine/diagnosis/collectives) do no I/O and every view — the dashboard, ``watch``,
the exporter, a one-shot ``report`` — judges the same evidence.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from rlwatch.common.state import FlightState, GpuActivity, GpuHolder, GpuStatus, JobInfo, RasState, Snapshot
from rlwatch.engine.diagnosis.collectives import GPU_WINDOW_S, quiet_enough_to_ask
from rlwatch.engine.diagnosis.health import undated
from rlwatch.engine.diagnosis.stacks import still_ranks
from rlwatch.sources import procfs
from rlwatch.sources.flight import FlightReader
from rlwatch.sources.job import job_info
from rlwatch.sources.ras import RasAsker

__all__ = ["RAS_STILL_S", "JobWatch", "moving", "ras_suspicion", "suspicious"]

KEEP_READS = 600  # per GPU: a window of GPU_WINDOW_S at the fastest sampling rate, with room
# A rank standing still in a collective this long is reason enough to ask NCCL's RAS service where the others stand,
# before the run is declared hung: on a node whose ranks all wait, the one they wait for is on another node.
RAS_STILL_S = 60.0
_HEAD_BYTES = 1024 * 1024  # of each log, read for NCCL's version line (NCCL_DEBUG=INFO prints it at start)


def _failed_collective(s: Snapshot) -> float | None:
    """When a collective first failed in NCCL (an ``nccl_error`` line naming its ``WorkNCCL(…)``), else None.

    Over sockets (ranks on different hosts, or sharing one GPU) NCCL itself fails a collective whose sizes differ
    across ranks at once ("invalid usage"), 30 s to 10 minutes before its watchdog's timeout dumps the records."""
    ev = s.events.get("nccl_error")
    if ev is None or not ev.count or not any("WorkNCCL(" in x.text for x in ev.recent):
        return None
    return ev.first if ev.first is not None else s.time


def suspicious(s: Snapshot) -> bool:
    """An NCCL timeout or a failed collective was logged, or the run is hung or crashed: then the dumps are worth
    reading."""
    ev = s.events.get("nccl_timeout")
    hung = s.run_state is not None and s.run_state.state in ("hung", "crashed")
    return (ev is not None and ev.count > 0) or hung or _failed_collective(s) is not None


def _quiet_since(s: Snapshot) -> float | None:
    """When a run still called progressing last showed progress, where it has been silent long enough to ask NCCL
    RAS where its ranks stand (collectives.quiet_enough_to_ask), else None. A run whose steps were seen only within a
    bound (undated step lines read in one batch: "unknown", since its last step at the latest) counts from that
    bound: live on one H200 the node whose own rank had stalled stayed there, was never asked, and waited for the
    60 s floor while the other node said hung at 27 s."""
    rs = s.run_state
    if rs is None or rs.since is None or not (rs.state == "progressing" or undated(s)):
        return None
    interval = s.training.cadence_s if s.training is not None else None
    return rs.since if quiet_enough_to_ask(s.time - rs.since, interval) else None


def ras_suspicion(s: Snapshot) -> object:
    """What tells this suspicion from the next (None: nothing suspicious): a declared hang (its start), an NCCL
    timeout logged (whether: a storm of its lines is one suspicion), a rank standing still in a collective for
    :data:`RAS_STILL_S` (since when), a run silent past a few of its steps (its last progress)."""
    rs = s.run_state
    quiet = _quiet_since(s)
    hung = rs.since if rs is not None and rs.state == "hung" else quiet
    ev = s.events.get("nccl_timeout")
    timeouts = True if ev is not None and ev.count > 0 else None
    still = [
        x.since for x in still_ranks(s) if x.reads >= 2 and x.latest.collective and s.time - x.since >= RAS_STILL_S
    ]
    if hung is None and timeouts is None and not still:
        return None
    return (hung, timeouts, min(still) if still else None)


def moving(s: Snapshot) -> bool:
    """The run shows progress again (or finished): only then does a suspicion end and its evidence go. While it stays
    hung, crashed, stopped or unknown, what NCCL RAS and the flight records last said is kept with its time: the run's
    state may change its words (a hung run whose rank then logs NCCL's timeout), the answer does not."""
    rs = s.run_state
    return rs is not None and rs.state in ("progressing", "finished") and _quiet_since(s) is None


def _log_heads(s: Snapshot) -> list[str]:
    """The lines that may name the ranks' NCCL version: NCCL's errors as logged, and each log's first megabyte."""
    lines = [x.text for kind in ("nccl_timeout", "nccl_error") if (ev := s.events.get(kind)) for x in ev.recent]
    for path in s.logs[:16]:
        try:
            with open(path, "rb") as f:
                lines.extend(f.read(_HEAD_BYTES).decode("utf-8", "replace").splitlines())
        except OSError:
            continue
    return lines


class JobWatch:
    """One engine's view of its run's ranks across samples."""

    def __init__(self, proc_root: str = procfs.PROC) -> None:
        self._proc_root = proc_root
        self._environ: dict[tuple[int, float], dict[str, str]] = {}
        self._activity: dict[int, deque[GpuActivity]] = {}
        self._flight = FlightReader()
        self._ras = RasAsker(proc_root)
        self.job: JobInfo | None = None
        self.flight: FlightState | None = None
        self.ras: RasState | None = None
        self._heads: tuple[object, list[str]] = (None, [])
        self._suspicion: object = None  # the suspicion NCCL RAS is asked under, kept until the run moves again

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
            self.ask_ras(last)

    def read_flight(self, last: Snapshot) -> None:
        """The ranks' dumps, read while ``last`` is suspicious; the last read kept while the run does not move again
        (:func:`moving`), then forgotten; each rank asked once per hang."""
        if not suspicious(last):
            if moving(last) or last.run_state is None:
                self.flight = None
            return
        by_pid = {pid: env for (pid, _), env in self._environ.items()}
        environs: Mapping[int, Mapping[str, str]] = (
            {r.rank: by_pid.get(r.pid, {}) for r in self.job.ranks} if self.job is not None else {}
        )
        rs = last.run_state
        hang: object = ("hung", rs.since) if rs is not None and rs.state == "hung" else None
        failed = _failed_collective(last)
        if hang is None and failed is not None:  # ask the live ranks now, not at NCCL's timeout
            hang = ("collective failed", failed)
        since = last.time - last.run_uptime_s if last.run_uptime_s is not None else None
        self.flight = self._flight.read(last.run_dir, environs, since, last.time, hang=hang)

    def ask_ras(self, last: Snapshot, *, wait: bool = False) -> None:
        """NCCL's RAS service, asked (in a thread of its own) while ``last`` gives a reason (:func:`ras_suspicion`);
        with ``wait``, answered before this returns (a one-shot report).

        One suspicion lasts until the run moves again: its key is kept while the run's state changes its words (a
        hang whose ranks then log NCCL's timeout), so the service is asked again only every ``RasAsker.AGAIN_S``, and
        an answer that named the ranks is kept, with its time, over a later question that failed or went unanswered.
        """
        key = ras_suspicion(last)
        if moving(last):
            self._suspicion, self.ras = None, None
        elif self._suspicion is not None:
            key = self._suspicion
        else:
            self._suspicion = key
        job = self.job
        if key is None or job is None or not job.ranks:
            self._suspicion = None
            self.ras = self._ras.poll(None, {}, (), (), None, last.time)
            return
        by_pid = {pid: env for (pid, _), env in self._environ.items()}
        environs = {r.rank: by_pid.get(r.pid, {}) for r in job.ranks}
        pids = [r.pid for r in job.ranks]
        if self._heads[0] != key:  # the logs' heads read once per suspicion, not every round
            self._heads = (key, _log_heads(last))
        heads = self._heads[1]
        got = self._ras.poll(key, environs, pids, heads, job.world_size, last.time, wait=wait)
        kept = self.ras
        if (
            (got is not None and got.error is None and got.ranks)
            or kept is None
            or kept.error is not None
            or not kept.ranks
        ):
            self.ras = got
