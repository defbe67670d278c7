"""One sampling round of the host: memory, GPUs (with their holders), the run's processes, checkpoints and recover
info, the disk, the kernel log, the pod's limits, Ray, the watchdog's state and how each log ends, read once and
kept as the latest parts a snapshot is assembled from; and the inference server's probe, which has a loop of its
own because it can block for its whole timeout.

Every source's failure becomes a degraded source with a one-line reason (``_ok``), never an exception into the
engine. The round does its I/O before it takes the engine's lock, and holds the lock only to replace the parts.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from rlwatch.common.globbing import glob_paths
from rlwatch.common.state import (
    CheckpointState,
    DiskState,
    GpuHolder,
    GpuStatus,
    History,
    HostLimits,
    KernelLogState,
    LogEnding,
    MemoryState,
    ProcessInfo,
    RayState,
    RecoverState,
    Series,
    ServerState,
    WatchdogStatus,
)
from rlwatch.discover.knobs import read_knobs
from rlwatch.discover.load import missing_paths, resolve
from rlwatch.engine.diagnosis.base import StepSeen
from rlwatch.engine.job import JobWatch
from rlwatch.engine.seen import exchange
from rlwatch.engine.stack_targets import StackTargets
from rlwatch.logs.ending import read_ending
from rlwatch.sources import hostwide, procfs
from rlwatch.sources.checkpoints import CheckpointScanner
from rlwatch.sources.disk import disk_state
from rlwatch.sources.gpu import GpuBackend, make_gpu_backend
from rlwatch.sources.holders import HolderScanner, attribute, classify_holders
from rlwatch.sources.kernel import KernelLog, with_gpus
from rlwatch.sources.limits import LimitsSource
from rlwatch.sources.membership import RunView
from rlwatch.sources.memory import MemorySource, with_growth_forecast
from rlwatch.sources.procfs import container_uptime_s
from rlwatch.sources.recover import find_step_info, read_recover
from rlwatch.sources.server import ServerProbe
from rlwatch.sources.stacks import latest_kept
from rlwatch.sources.watchdog_state import read_status

HOLDER_SCAN_S = 5.0
HOLDER_IDLE_SCAN_S = 30.0  # ... and scans for GPU holders (every process's descriptors) at most this often
HISTORY = 600


def _newest(paths: Iterable[Path]) -> Path | None:
    """The most recently modified of ``paths``; files that vanish while we look are skipped."""
    best: tuple[float, Path] | None = None
    for p in paths:
        try:
            m = p.stat().st_mtime
        except OSError:
            continue
        if best is None or m > best[0]:
            best = (m, p)
    return best[1] if best else None


class Ring:
    """A fixed-length time series (oldest dropped), for the graphs."""

    def __init__(self, size: int = HISTORY) -> None:
        self.times: deque[float] = deque(maxlen=size)
        self.values: deque[float | None] = deque(maxlen=size)

    def add(self, t: float, v: float | None) -> None:
        self.times.append(t)
        self.values.append(v)

    def series(self) -> Series:
        return Series(tuple(self.times), tuple(self.values))


def _pct(part: int | None, whole: int | None) -> float | None:
    if part is None or not whole:
        return None
    return 100.0 * part / whole


class HostRound(StackTargets):
    """The host's sources and the latest part each gave: what one round reads, and the server's probe."""

    def _setup_host_round(self, gpu_backend: GpuBackend | None) -> None:
        """The host's sources (``gpu_backend`` as given, else the configured one) and their latest parts, empty."""
        cfg = self.cfg
        self.memory_source = MemorySource(self.clock)
        self.gpu_backend = gpu_backend or make_gpu_backend(cfg.gpu, self.run_dir)
        hcfg = cfg.host
        # Where this process works as the run's owner, root's helper reads the kernel log for it (hostwide).
        helper = hostwide.current()
        self.kernel_log = KernelLog(
            self.run_dir,
            mode=hcfg.kernel_log,
            patterns=hcfg.kernel_log_files,
            timeout_s=hcfg.command_timeout_s,
            clock=self.clock,
            live=None if helper is None else hostwide.readers(helper),
        )
        self.limits_source = LimitsSource(
            shm_path=hcfg.shm_path, simulated_shm_bytes=hcfg.simulated_shm_bytes, proc_root=self._proc_root
        )
        self.holder_scanner = HolderScanner(cfg.gpu.device_glob, self.clock, proc_root=self._proc_root)
        self.checkpoints = CheckpointScanner(
            [resolve(self.run_dir, d) for d in cfg.training.checkpoint_dirs], self.clock
        )
        # Probed only where a server is expected: a default port probed for a run that never had a server (TRL's
        # colocated generation) would report it "down".
        expected = cfg.server_expected
        self.server_probe = ServerProbe(cfg.server, self.clock) if cfg.server.url and expected else None
        self._ray: RayState | None = None
        knobs_path = cfg.training.config_file
        self.knobs = read_knobs(resolve(self.run_dir, knobs_path)) if knobs_path else {}
        # Configured paths that do not exist (yet): each a degraded "config <key>" source until it appears.
        self._missing = missing_paths(cfg.model_copy(update={"run_dir": str(self.run_dir)}), self.run_dir)

        # Latest parts, replaced whole by the loops.
        self._memory: MemoryState | None = None
        self._gpu: GpuStatus | None = None
        self._holders: tuple[GpuHolder, ...] = ()
        self._holders_at: float | None = None  # monotonic time of the last /proc scan for GPU holders
        self._checkpoint: CheckpointState | None = None
        self._recover: RecoverState | None = None
        self._server: ServerState | None = None
        if self.server_probe is None:  # none to probe: say whether one is expected (its address unknown) or not
            self._server = ServerState(
                kind=cfg.server.kind if expected else None,
                url=None,
                up=None,
                down_since=None,
                pid=None,
                expected=expected,
                evidence=cfg.provenance.server,
            )
        self._server_last_up: float | None = None  # wall time the probe last saw it healthy
        self._disk: DiskState | None = None
        self._kernel: KernelLogState | None = None
        self._limits: HostLimits | None = None
        self._watchdog: WatchdogStatus | None = None
        self._endings: tuple[LogEnding, ...] = ()
        self.job_watch = JobWatch(self._proc_root)  # the job of the run's ranks, their GPUs' draw, their flight records
        # path -> (what the file was when read, its ending, when read (monotonic)); a growing file is read again at
        # most every _ending_every_s, one that stopped changing once more when it stops.
        self._ending_cache: dict[str, tuple[tuple[int, int, int, int, bool], LogEnding | None, float]] = {}
        self._ending_every_s = max(1.0, 5 * cfg.interval_s)
        self._gone_read: set[int] = set()  # the run's processes seen gone when the endings were last read
        self._hist_gpu_util: dict[int, Ring] = {}
        self._hist_gpu_mem: dict[int, Ring] = {}
        # Both change only when the sources are sampled, so they are made there, not on every (frequent) build.
        self._history = History()
        self._container_started: float | None = None  # wall time; the uptime is derived from it at build
        self._seen: StepSeen | None = None

    def _read_endings(self, now: float, *, fresh: bool = False) -> tuple[LogEnding, ...]:
        """How each followed log ends, read again only for a file that changed (its newest 64 KiB at most).

        ``fresh``: every file that changed is read again now, however recently it was read. For a run whose
        processes are all gone: a launcher writes its failure report (torchrun's ChildFailedError) as its last act,
        and the ending read a few seconds before it would call the run stopped, a clean end, until the next read."""
        out = []
        seen = set()
        for path in self.tailer.files:
            if self.ray_source.is_cluster_log(path):
                continue  # Ray's own logs (raylet, a dead actor's stderr): diagnosis/ray reads what they mean
            try:
                st = os.stat(path)
            except OSError:
                continue
            position = self.tailer.position(path)
            # Read again when the file changed, and once the count reaches its end (its lines then get numbers).
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, position is not None and position[0] == st.st_size)
            seen.add(path)
            cached = self._ending_cache.get(path)
            mono = self.clock.monotonic()
            recent = cached is not None and mono - cached[2] < self._ending_every_s and path not in self._ending_stale
            self._ending_stale.discard(path)
            numbered = key[4] and cached is not None and not cached[0][4]  # the count reached its end: line numbers
            if (
                not fresh
                and cached is not None
                and recent
                and not numbered
                and cached[0] != key
                and cached[0][:2] == key[:2]
            ):
                # The same file, still growing, read moments ago: its newest 64 KiB again every round is most of
                # what watching a growing run costs. What it said stands a little longer, with the file's new time.
                ending = cached[1]
                if ending is not None:
                    out.append(replace(ending, mtime=st.st_mtime))
                continue
            if cached is None or cached[0] != key:
                cached = (key, read_ending(path, now, position), mono)
                self._ending_cache[path] = cached
            if cached[1] is not None:
                out.append(cached[1])
        for gone in set(self._ending_cache) - seen:
            del self._ending_cache[gone]
        return tuple(out)

    def sample(self, *, fresh_holders: bool = False) -> None:
        """Read every host source once (not the server probe)."""
        now = self.clock.time()
        mem = self.memory_source.sample()
        gpu = self.gpu_backend.sample()
        procs = self.processes.sample()
        self._ok("memory", None if mem.total_bytes is not None else "memory not readable")
        # Degraded also when one GPU is lost or the driver stopped answering while the others still report; a host
        # configured without GPUs (backend "none") is not degraded at all.
        self._ok("gpu", gpu.error if gpu.backend != "none" else None)
        self._ok("processes", self.processes.error)
        # The launch book refused (not this user's, writable by others, a link) or not writable: shown, never hidden.
        book = "; ".join(x for x in (self.launches.distrust, self.launches.error) if x) or None
        if book is not None or "state files" in self._status:
            self._ok("state files", book)
        if fresh_holders:
            self._holders_at = None
        holders = self._holders_now(procs, gpu)
        self.job_watch.add_gpus(now, gpu)
        self.job_watch.sample(self._rank_candidates(), holders, self._snapshot)
        role_procs = procs
        view = self._view
        gone = {} if view is None else self._gone_since(view)
        self.attempts.notice_gone(now)
        if view is not None:
            procs = self._table(procs, view)
        for p in procs:
            # Remembered only for the run's own processes: a resume must never run another run's command line.
            record = self.processes.launch_record(p.name) if p.alive and p.evidence is not None else None
            if record is not None:
                self.launches.remember(p.name, record)
        ckpt = self.checkpoints.scan()
        recover, rec_err = self._read_recover()
        self._ok("recover", rec_err)
        trainer_state = self.checkpoints.trainer_state()
        self._ok("checkpoints", self.checkpoints.error)
        if self._missing:  # checked until every configured path has appeared, then never again
            before = self._missing
            self._missing = missing_paths(self.cfg.model_copy(update={"run_dir": str(self.run_dir)}), self.run_dir)
            for line in dict.fromkeys(before + self._missing):
                key, _, why = line.partition(": ")
                self._ok(f"config {key}", why if line in self._missing else None)
        volume = self.cfg.training.output_volume
        disk = disk_state(str(resolve(self.run_dir, volume) if volume else self.run_dir))
        ray = self._sample_ray()
        # A process of the run went since the last read: its log's last words (a traceback, a launcher's report)
        # came as it went, and an ending read moments before must not stand for them (startup-crash: a warning on
        # the dashboard for 5 s after each crash while report, reading afresh, said crashed).
        went, self._gone_read = bool(set(gone) - self._gone_read), set(gone)
        endings = self._read_endings(now, fresh=view is not None and (went or _all_gone(view, gone)))
        kept = latest_kept(self.run_dir, self._stacks.taken_at if self._stacks is not None else None)
        watchdog, wd_err = read_status(self.run_dir, now)  # the headless watchdog's state file, if one ever ran
        if watchdog is not None or wd_err is not None:
            self._ok("watchdog", wd_err)
        kernel = with_gpus(self.kernel_log.sample(), gpu.gpus)
        if self.cfg.host.kernel_log != "off":
            self._ok("kernel", kernel.error if not kernel.available or kernel.source == "none" else None)
        limits = self.limits_source.sample(procs, self.cfg.server.kind if self.cfg.server_expected else None)
        self._ok("limits", self.limits_source.error)
        with self._lock:
            if trainer_state:
                self.training.set_checkpoint_hint(
                    trainer_state.get("global_step"),
                    trainer_state.get("max_steps"),
                    trainer_state.get("logging_steps"),
                    trainer_state.get("last_logged"),
                )
            if gpu.gpus:
                gpu = replace(
                    gpu, gpus=attribute(gpu.gpus, self.gpu_backend.last_processes or {}, holders, self._exists)
                )
            self._role_procs = role_procs
            if view is not None:
                for p in procs:  # a start is the run's restart only when the process started was the run's
                    if p.alive and p.evidence is not None and p.role:
                        self._member_starts.setdefault(p.role, set()).add(round(p.started_at, 2))
            if self.cfg.profile == "workers" or any(r.role == "worker" for r in self.cfg.processes):
                mem = replace(mem, brake_free_bytes=self.cfg.thresholds.brake_free_bytes)
            mem = with_growth_forecast(mem, procs, self.cfg.thresholds.leak_bytes_per_hour, now)
            self._memory, self._gpu, self._procs, self._holders = mem, gpu, procs, holders
            self._gone_members = gone
            self._checkpoint, self._recover, self._disk = ckpt, recover, disk
            self._kernel, self._limits = kernel, limits
            self._watchdog = watchdog
            self._endings = endings
            if kept is not None:
                self._stacks = kept  # another rlwatch (the watchdog, the dashboard) read them since
            sampled = self.stack_sampler.state() if self.stack_sampler is not None and self.running else None
            if sampled is not None and (sampled.reason is not None or "stacks" in self._status):
                self._ok("stacks", sampled.reason)  # py-spy missing or refused: shown, never hidden
            self._ray = ray
            for g in gpu.gpus:
                self._hist_gpu_util.setdefault(g.index, Ring()).add(now, g.util)
                self._hist_gpu_mem.setdefault(g.index, Ring()).add(now, _pct(g.mem_used_bytes, g.mem_total_bytes))
            self._history = History(
                gpu_util={i: r.series() for i, r in self._hist_gpu_util.items()},
                gpu_mem={i: r.series() for i, r in self._hist_gpu_mem.items()},
                ram_used=self.memory_source.ram_history(),
                swap_used=self.memory_source.swap_history(),
                rss=self.processes.history(),
            )
            uptime = container_uptime_s(self._proc_root)
            self._container_started = None if uptime is None else now - uptime
        self._seen = exchange(self.run_dir, self._snapshot)  # when earlier reads saw the last step line (engine/seen)

    def _sample_ray(self) -> RayState | None:
        """What Ray says of the run, and the files of Ray's it gives to follow (raylet.out, dead actors' stderr)."""
        ray = self.ray_source.sample(self.tailer.files)
        for path in self.ray_source.follow():
            self.tailer.follow(path)
        if ray is not None or self.ray_source.error is not None:
            api = ray.api if ray is not None else None
            self._ok("ray", self.ray_source.error or (f"State API: {api}" if api else None))
        return ray

    def poll_ray(self, *, force: bool = False) -> None:
        """Ask Ray's State API (a network request bounded by ray.timeout_s): its own loop, or once for a report."""
        self.ray_source.poll_api(force=force)

    def _holders_now(self, procs: Sequence[ProcessInfo], gpu: GpuStatus) -> tuple[GpuHolder, ...]:
        """GPU holders, scanned at most every HOLDER_SCAN_S: reading every /proc/<pid>/fd is the costliest part of a
        sample, and holders change rarely. Actions never trust this list: they re-check each target's identity."""
        now = self.clock.monotonic()
        every = HOLDER_IDLE_SCAN_S if self._quiet else HOLDER_SCAN_S
        if self._holders_at is not None and now - self._holders_at < every:
            # Between scans, a holder whose process ended is dropped at once: its descriptors went with it (after
            # kill-zombies the dashboard listed both strays, and offered `z`, for up to 30 s after they exited).
            return tuple(h for h in self._holders if self._running(h.pid, h.create_time))
        self._holders_at = now
        return self._sample_holders(procs, gpu)

    def rescan_holders(self) -> None:
        """Scan the GPU holders afresh at the next round (an action just stopped some)."""
        self._holders_at = None

    def _running(self, pid: int, create_time: float | None) -> bool:
        """``pid`` is still the process seen (not gone, not a zombie, its number not reused)."""
        stat = procfs.read_stat(pid, self._proc_root)
        if stat is None or stat.state in ("Z", "X"):
            return False
        start = procfs.start_time_from_ticks(stat.starttime_ticks, procfs.boot_time(self._proc_root))
        return create_time is None or start is None or abs(start - create_time) <= 1

    def _exists(self, pid: int) -> bool:
        return os.path.lexists(f"{self._proc_root}/{pid}")

    def _sample_holders(self, procs: Sequence[ProcessInfo], gpu: GpuStatus) -> tuple[GpuHolder, ...]:
        try:
            scan = self.holder_scanner.scan(under=os.path.realpath(self.run_dir))
        except Exception as exc:  # a source must never take the engine down
            self._ok("holders", f"cannot scan for GPU holders: {exc}")
            return ()
        raw = dict(scan.holders)
        skipped = self.holder_scanner.skipped
        helper = hostwide.current()
        if helper is not None and skipped:
            # This process works as the run's owner and could not read other users' descriptors: root's helper
            # scanned them (the NVIDIA nodes only) and says which of those hold a GPU.
            seen = helper.holders()
            if seen is not None:
                raw.update({pid: devices for pid, devices in seen.items() if pid not in raw})
                skipped = 0
        raw.pop(os.getpid(), None)  # rlwatch's own NVML handle opens /dev/nvidia*: the observer is not a holder
        view = self._view = self._assess(procs, scan.opened)
        holders = classify_holders(
            raw,
            view=view,
            nvml_procs=self.gpu_backend.last_processes or {},
            protected_names=self.cfg.actions.protected_names,
            self_pid=os.getpid(),
            owners=self.owners,
            proc_root=self._proc_root,
        )
        # Unreadable processes (another user's, without root) may hold a GPU too: say the list is partial.
        self._ok(
            "holders",
            f"{skipped} processes not readable (other users'): GPU holders among them not shown" if skipped else None,
        )
        return holders

    def _read_recover(self) -> tuple[RecoverState | None, str | None]:
        path_s = self.cfg.training.recover_info
        if path_s:
            path: Path | None = resolve(self.run_dir, path_s)
            if any(ch in path_s for ch in "*?["):
                path = _newest(Path(p) for p in glob_paths(str(path)))
        else:
            roots = [resolve(self.run_dir, d) for d in self.cfg.training.checkpoint_dirs]
            path = next((p for p in (find_step_info(r) for r in roots) if p), None)
        if path is None or not path.exists():
            return None, None  # no recover info yet is normal before the first save, not a source failure
        return read_recover(path)

    def probe_server(self) -> None:
        if self.server_probe is None:
            return
        server_procs = [p for p in self._procs if p.role == "server" and p.alive]
        pid = server_procs[0].pid if server_procs else None
        alive: bool | None = bool(server_procs) if any(r.role == "server" for r in self.cfg.processes) else None
        state = replace(self.server_probe.probe(process_alive=alive, pid=pid), evidence=self.cfg.provenance.server)
        with self._lock:
            if state.up:
                self._server_last_up = self.clock.time()
            self._server = state
            self._ok("server", None)


def _all_gone(view: RunView, gone: dict[int, str]) -> bool:
    """Whether no process of the run is alive now: all it saw are gone, or it sees none (a launcher it never saw as
    the run's, a run whose every process died before the first look). Its logs are then at their last words, and
    an ending read moments before (torchrun's report half written) must not stand for them."""
    return not [pid for pid in view.members if pid not in view.weak and pid not in gone]
