"""The Prometheus exporter: the latest snapshot, as metrics, for one Prometheus to scrape from every pod.

A custom collector on a private registry reads the newest :class:`~rlwatch.common.state.Snapshot` on every scrape, so
what Prometheus stores is exactly what the dashboard would show at that moment, and nothing in the process's
default registry (or anything a library registered there) leaks into it.

Conventions, so that the series read well next to node_exporter and dcgm-exporter: an ``rlwatch_`` prefix, base
units (bytes, seconds, ratios from 0 to 1), ``_total`` counters, ``_info`` metadata at value 1, and stable labels
only. Processes are labelled by role and name (``worker-0``), never by pid: a pid label would start a new series
on every restart. Absent data is an absent series, never a made-up zero. Every source's age is exported, so a
stalled source never looks healthy.

prometheus_client switches to its multiprocess mode when ``PROMETHEUS_MULTIPROC_DIR`` is set, and SGLang sets it
in its own environment; an rlwatch started from such a shell would serve broken metrics without a word. The
exporter refuses to start instead.
"""

from __future__ import annotations

import errno
import math
import os
import re
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_wsgi_server
from prometheus_client.registry import Collector

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.common.redact import redact
from rlwatch.common.state import Incident, ProcessInfo, Snapshot
from rlwatch.common.textsafe import clean_line
from rlwatch.engine.diagnosis import occurrences
from rlwatch.engine.diagnosis.collectives import job_of, standings
from rlwatch.engine.diagnosis.jobwide import job_evidence, last_collectives
from rlwatch.engine.job import moving
from rlwatch.logs.collectives import op_name

__all__ = [
    "BudgetState",
    "Exporter",
    "ExporterError",
    "ExporterExtras",
    "SnapshotCollector",
    "parse_listen",
    "start_exporter",
]

PREFIX = "rlwatch_"
DEFAULT_HOST = "127.0.0.1"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LABEL_MAX = 160  # a label value is an identifier, not a log line: bounded so one long message cannot bloat a series
_TYPE_NAME = re.compile(r"[^A-Za-z0-9_.:]+")


class ExporterError(Exception):
    """The exporter cannot start; the message is one line a person can act on."""


@dataclass(frozen=True, slots=True)
class BudgetState:
    """One restart budget of the watchdog, as the exporter shows it."""

    target: str
    gave_up: bool
    restarts_in_window: int | None = None
    delay_s: float | None = None  # the delay before the next allowed restart


@dataclass(frozen=True, slots=True)
class ExporterExtras:
    """What the watchdog knows beyond the snapshot: remediations done, and the state of each restart budget.

    ``remediations`` maps ``(action, target, result)`` to how many times that happened since the watchdog started.
    """

    remediations: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    budgets: tuple[BudgetState, ...] = ()


def label_safe(value: object, limit: int = LABEL_MAX) -> str:
    """A label value that is one clean line: secrets redacted (a fleet scrapes these), no control characters,
    bounded length."""
    text = clean_line(redact(str(value))).replace("\t", " ").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def exception_type(name: str) -> str:
    """An exception's type as a label: only the characters a dotted Python name may have."""
    return _TYPE_NAME.sub("_", name)[:LABEL_MAX] or "unknown"


def last_exception(snap: Snapshot) -> Incident | None:
    """The most recent traceback: the failure a person (or a fleet view) most needs to see first."""
    blocks = [i for i in snap.incidents if i.kind == "traceback"]
    return max(blocks, key=lambda i: (i.last, i.first, i.lineno)) if blocks else None


def _exc_type(incident: Incident) -> str:
    head = incident.title.split(":", 1)[0].strip()
    return exception_type(head.rsplit(".", 1)[-1] if head else "unknown")


# A pid in a label: "train.py (pid 7511)" (a rank without RANK in its environment) and "train.py 7511" (a member
# of the run no role rule names) are told apart from one another by it, in the views, but a label must not be.
_PID_WORDS = re.compile(r"\s*\(pid \d+\)|\s+\d+$")
_RANK = re.compile(r"rank \d+")


def stable_label(label: str) -> str:
    """A process's or a rank's label without the pid the views tell it by: a pid label starts a new series on every
    restart, and says nothing a dashboard can follow. "rank 3" stays; "train.py (pid 7511)" is "train.py"."""
    text = clean_line(label).strip()
    return text if _RANK.fullmatch(text) else _PID_WORDS.sub("", text).strip()


def _one_per_name(processes: Iterable[ProcessInfo]) -> list[tuple[str, ProcessInfo]]:
    """One process per stable name (its pid left out): the live one if any, else the newest, so label sets never
    repeat."""
    best: dict[str, ProcessInfo] = {}
    for p in processes:
        name = stable_label(p.name)
        cur = best.get(name)
        if cur is None or (p.alive, p.started_at) > (cur.alive, cur.started_at):
            best[name] = p
    return [(name, best[name]) for name in sorted(best)]


class _Families:
    """Collects metric families by name; families that end up with no sample are never exposed.

    Label values are cleaned on the way in, so two raw values can become one; the first wins, because Prometheus
    rejects a scrape that repeats a series.
    """

    def __init__(self) -> None:
        self._order: list[GaugeMetricFamily | CounterMetricFamily] = []
        self._by_name: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        self._seen: set[tuple[str, tuple[str, ...]]] = set()

    def gauge(self, name: str, doc: str, labels: Mapping[str, object] | None, value: float | None) -> None:
        self._add(GaugeMetricFamily, name, doc, labels, value)

    def counter(self, name: str, doc: str, labels: Mapping[str, object] | None, value: float | None) -> None:
        self._add(CounterMetricFamily, name, doc, labels, value)

    def _add(
        self,
        kind: type[GaugeMetricFamily] | type[CounterMetricFamily],
        name: str,
        doc: str,
        labels: Mapping[str, object] | None,
        value: float | None,
    ) -> None:
        if value is None:
            return
        keys = list(labels or {})
        values = tuple(label_safe(v) for v in (labels or {}).values())
        if (name, values) in self._seen:
            return
        self._seen.add((name, values))
        fam = self._by_name.get(name)
        if fam is None:
            fam = kind(PREFIX + name, doc, labels=keys)
            self._by_name[name] = fam
            self._order.append(fam)
        fam.add_metric(list(values), float(value))

    def __iter__(self) -> Iterator[Metric]:
        return (f for f in self._order if f.samples)


def _flag(value: bool | None) -> float | None:
    return None if value is None else float(value)


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


def _age(now: float, then: float | None) -> float | None:
    return None if then is None else max(0.0, now - then)


class SnapshotCollector(Collector):
    """Turns the newest snapshot into metric families, fresh on every scrape."""

    def __init__(
        self,
        source: Callable[[], Snapshot],
        *,
        extra: Callable[[], ExporterExtras] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._source = source
        self._extra = extra
        self._clock: Clock = clock or SystemClock()
        self._errors = 0
        self._lock = threading.Lock()

    def describe(self) -> list[Metric]:
        # Returning nothing keeps registration from calling collect() (and so the source) before serving starts.
        return []

    def collect(self) -> Iterator[Metric]:
        try:
            snap = self._source()
            extras = self._extra() if self._extra is not None else None
            families = self.families(snap, extras)
        except Exception:
            # A broken source must not look like a healthy host: expose no data, only that collection failed.
            with self._lock:
                self._errors += 1
                errors = self._errors
            fam = CounterMetricFamily(PREFIX + "collect_errors", "Scrapes whose snapshot could not be read.")
            fam.add_metric([], errors)
            yield fam
            return
        yield from families

    def families(self, snap: Snapshot, extras: ExporterExtras | None = None) -> list[Metric]:
        """Every family for one snapshot (exposed for tests and for rendering without a server)."""
        now = self._clock.time()
        f = _Families()
        self._run(f, snap, now)
        self._events(f, snap)
        self._training(f, snap)
        self._checkpoints(f, snap, now)
        self._server(f, snap)
        self._gpus(f, snap)
        self._memory(f, snap)
        self._machine(f, snap)
        self._processes(f, snap)
        self._findings(f, snap)
        self._stacks(f, snap)
        self._job(f, snap)
        self._sources(f, snap, now)
        if extras is not None:
            self._extras(f, extras)
        with self._lock:
            errors = self._errors
        f.counter("collect_errors", "Scrapes whose snapshot could not be read.", None, errors)
        return list(f)

    # ----------------------------------------------------------------------------------------------- sections

    @staticmethod
    def _run(f: _Families, snap: Snapshot, now: float) -> None:
        info = {
            "host": snap.host,
            "profile": snap.profile,
            "run_dir": snap.run_dir,
            "simulated": "true" if snap.simulated else "false",
        }
        f.gauge("info", "The monitored host and run (value 1).", info, 1)
        f.gauge("snapshot_timestamp_seconds", "When the exported snapshot was taken (epoch).", None, snap.time)
        f.gauge("snapshot_age_seconds", "Age of the exported snapshot at scrape time.", None, _age(now, snap.time))
        f.gauge("uptime_seconds", "Uptime of the container (pid 1).", None, snap.uptime_s)
        f.gauge("run_uptime_seconds", "Uptime of the trainer or launcher.", None, snap.run_uptime_s)

    @staticmethod
    def _events(f: _Families, snap: Snapshot) -> None:
        for kind in sorted(snap.events):
            ev = snap.events[kind]
            f.counter("events", "Matching log lines, per event kind.", {"kind": kind}, ev.count)
            f.gauge("event_streak", "Consecutive lines of a kind with no progress between.", {"kind": kind}, ev.streak)
            exact = ev.last if ev.last is not None and (not ev.approximate or ev.last_by == ev.last) else None
            # A bound is not a time: an undated backlog line exports no timestamp rather than a guess or -Inf.
            last = exact if exact is not None and math.isfinite(exact) else None
            f.gauge("event_last_timestamp_seconds", "Last line of a kind (epoch).", {"kind": kind}, last)

    @staticmethod
    def _training(f: _Families, snap: Snapshot) -> None:
        tr = snap.training
        if tr is None:
            return
        rate = None if tr.steps_per_hour is None else tr.steps_per_hour / 3600.0
        v = snap.verdict  # the step every view says: the log's own, else the latest checkpoint's (one step everywhere)
        step = v.step if v is not None and v.step is not None else tr.last_step
        f.gauge("training_step", "Last completed training step.", None, step)
        f.gauge("training_total_steps", "Steps the run is configured for.", None, tr.total_steps)
        f.gauge("training_steps_per_second", "Recent training speed.", None, rate)
        f.gauge("training_reward", "Last reported mean reward.", None, tr.reward)
        f.gauge("training_stalled", "1 when no step and no log line arrived for the stall threshold.", None, tr.stalled)
        f.gauge("training_finished", "1 when the trainer reported the end of training.", None, tr.finished)
        f.gauge("training_last_step_timestamp_seconds", "When the last step completed (epoch).", None, tr.last_step_at)

    @staticmethod
    def _checkpoints(f: _Families, snap: Snapshot, now: float) -> None:
        ck = snap.checkpoint
        if ck is not None:
            f.gauge("checkpoints", "Checkpoints found.", None, ck.count)
            latest = ck.latest
            if latest is not None:
                f.gauge("checkpoint_global_step", "Global step of the newest checkpoint.", None, latest.global_step)
                age = _age(now, latest.saved_at)
                f.gauge("checkpoint_age_seconds", "Age of the newest checkpoint.", None, age)
                f.gauge("checkpoint_size_bytes", "Size of the newest checkpoint.", None, latest.size_bytes)
        rec = snap.recover
        if rec is not None:
            f.gauge("recover_global_step", "Last completed step in the recover info (0-based).", None, rec.global_step)
            f.gauge("resume_global_step", "The global step a resume starts at.", None, rec.resume_global_step)

    @staticmethod
    def _server(f: _Families, snap: Snapshot) -> None:
        srv = snap.server
        if srv is None:
            return
        f.gauge("server_up", "1 when the inference server's health check passes.", None, _flag(srv.up))
        f.gauge("server_latency_seconds", "Duration of the last health check.", None, srv.latency_s)
        f.gauge("server_down_since_timestamp_seconds", "When the server went down (epoch).", None, srv.down_since)
        f.gauge("server_process_up", "1 while the server's process lives.", None, _flag(srv.process_alive))

    @staticmethod
    def _gpus(f: _Families, snap: Snapshot) -> None:
        gpu = snap.gpu
        if gpu is None:
            return
        f.gauge("gpu_source_up", "1 when the GPU backend answers.", None, gpu.available)
        for g in gpu.gpus:
            lab = {"gpu": g.index}
            f.gauge("gpu_utilization_ratio", "GPU utilisation, 0 to 1.", lab, _ratio(g.util))
            f.gauge("gpu_memory_used_bytes", "GPU memory in use.", lab, g.mem_used_bytes)
            f.gauge("gpu_memory_total_bytes", "GPU memory in all.", lab, g.mem_total_bytes)
            f.gauge("gpu_temperature_celsius", "GPU temperature.", lab, g.temp_c)
            f.gauge("gpu_power_watts", "GPU power draw.", lab, g.power_w)
        f.gauge("gpu_stray_processes", "Processes outside the run holding a GPU.", None, len(snap.zombies))

    @staticmethod
    def _memory(f: _Families, snap: Snapshot) -> None:
        mem = snap.memory
        if mem is not None:
            f.gauge("memory_total_bytes", "Host (or cgroup) memory in all.", None, mem.total_bytes)
            f.gauge("memory_available_bytes", "Memory available to new allocations.", None, mem.available_bytes)
            f.gauge("swap_total_bytes", "Swap in all.", None, mem.swap_total_bytes)
            f.gauge("swap_used_bytes", "Swap in use.", None, mem.swap_used_bytes)
            f.counter("oom_kills", "OOM kills in the cgroup.", None, mem.oom_kills)
            f.gauge(
                "memory_exhaustion_timestamp_seconds",
                "When available memory reaches zero at the current trend (epoch).",
                None,
                mem.forecast_exhausted_at,
            )
        disk = snap.disk
        if disk is not None:
            f.gauge("disk_free_bytes", "Free space on the output volume.", None, disk.free_bytes)
            f.gauge("disk_total_bytes", "Size of the output volume.", None, disk.total_bytes)

    @staticmethod
    def _machine(f: _Families, snap: Snapshot) -> None:
        """The machine under the run (issue #28): GPU hardware health, the kernel's events, the pod's limits, and
        the learning metrics' last values. Base units; a metric a GPU or host does not report is absent."""
        for g in snap.gpus:
            h = g.health
            if h is None:
                continue
            lab = {"gpu": g.index}
            f.gauge("gpu_lost", "1 when NVML says the GPU is lost (fell off the bus).", lab, 1 if h.lost else 0)
            for kind, counter, value in (
                ("uncorrected", "volatile", h.ecc_volatile_uncorrected),
                ("corrected", "volatile", h.ecc_volatile_corrected),
                ("uncorrected", "aggregate", h.ecc_aggregate_uncorrected),
                ("corrected", "aggregate", h.ecc_aggregate_corrected),
            ):
                f.gauge(
                    "gpu_ecc_errors",
                    "ECC errors (volatile: since the driver loaded; aggregate: over the board's life).",
                    {**lab, "type": kind, "counter": counter},
                    value,
                )
            f.gauge(
                "gpu_retired_pages", "Retired memory pages (single/double bit).", {**lab, "cause": "sbe"}, h.retired_sbe
            )
            f.gauge(
                "gpu_retired_pages", "Retired memory pages (single/double bit).", {**lab, "cause": "dbe"}, h.retired_dbe
            )
            f.gauge(
                "gpu_retired_pages_pending",
                "1 when a page retirement waits for a driver reload.",
                lab,
                _flag(h.retired_pending),
            )
            f.gauge("gpu_remapped_rows", "Memory rows remapped.", {**lab, "cause": "correctable"}, h.remap_correctable)
            f.gauge(
                "gpu_remapped_rows", "Memory rows remapped.", {**lab, "cause": "uncorrectable"}, h.remap_uncorrectable
            )
            f.gauge(
                "gpu_remap_pending", "1 when a row remap waits for the next GPU reset.", lab, _flag(h.remap_pending)
            )
            f.gauge(
                "gpu_remap_failure",
                "1 when a row could not be remapped (an RMA condition).",
                lab,
                _flag(h.remap_failure),
            )
            f.gauge("gpu_pcie_link_generation", "PCIe link generation now.", lab, h.pcie_gen)
            f.gauge("gpu_pcie_link_generation_max", "PCIe link generation possible.", lab, h.pcie_gen_max)
            f.gauge("gpu_pcie_link_width", "PCIe lanes now.", lab, h.pcie_width)
            f.gauge("gpu_pcie_link_width_max", "PCIe lanes possible.", lab, h.pcie_width_max)
            for reason in h.clock_events or ():
                f.gauge(
                    "gpu_clock_event",
                    "An active clock event (throttle) reason (value 1).",
                    {**lab, "reason": reason},
                    1,
                )
        k = snap.kernel
        if k is not None and k.available:  # no kernel log read: absent series, not a made-up zero
            counts = Counter(e.kind for e in k.events)
            for kind in ("oom_kill", "xid", "fallen_off_bus", "segfault", "gpf", "sigbus"):
                f.gauge(
                    "kernel_events",
                    "Kernel log events kept, by kind (bounded: the newest 500).",
                    {"kind": kind},
                    counts.get(kind, 0),
                )
            xids = Counter(e.xid for e in k.events if e.kind == "xid" and e.xid is not None)
            for xid, n in sorted(xids.items()):
                f.gauge("kernel_xid_events", "Xid events in the kernel log kept, by Xid.", {"xid": xid}, n)
        lim = snap.limits
        if lim is not None:
            f.gauge("shm_total_bytes", "Size of /dev/shm (the shared-memory mount).", None, lim.shm_total_bytes)
            f.gauge("shm_free_bytes", "Free space on /dev/shm.", None, lim.shm_free_bytes)
            for m in lim.memlock:
                if m.soft_bytes is not None:
                    f.gauge(
                        "process_memlock_bytes",
                        "RLIMIT_MEMLOCK of a run process where RDMA is in use.",
                        {"name": m.name},
                        m.soft_bytes,
                    )
        mem = snap.memory
        if mem is not None:
            f.gauge(
                "cgroup_memory_limit_bytes",
                "The container's memory limit (absent: none).",
                None,
                mem.cgroup_limit_bytes,
            )
            f.gauge(
                "cgroup_memory_usage_bytes",
                "The container's memory use (page cache included).",
                None,
                mem.cgroup_usage_bytes,
            )
            f.gauge(
                "cgroup_memory_working_set_bytes",
                "The container's memory use less inactive file cache.",
                None,
                mem.cgroup_working_set_bytes,
            )
        disk = snap.disk
        if disk is not None:
            f.gauge("disk_free_inodes", "Inodes free on the output volume.", None, disk.inodes_free)
            f.gauge("disk_total_inodes", "Inodes on the output volume.", None, disk.inodes_total)
        ls = snap.learning
        if ls is not None:
            for name, points in sorted(ls.series.items()):
                if points:
                    last = points[-1]
                    shown: float | None = last.value if math.isfinite(last.value) else None
                    f.gauge(
                        "learning_metric",
                        "The last logged value of a learning metric (absent: NaN/inf).",
                        {"metric": name},
                        shown,
                    )
                    f.gauge(
                        "learning_metric_nonfinite",
                        "1 when the last logged value of a learning metric is NaN or infinite.",
                        {"metric": name},
                        0 if math.isfinite(last.value) else 1,
                    )

    @staticmethod
    def _processes(f: _Families, snap: Snapshot) -> None:
        for name, p in _one_per_name(snap.processes):
            lab = {"role": p.role, "name": name}
            f.gauge("process_up", "1 while the process lives.", lab, p.alive)
            f.gauge("process_rss_bytes", "Resident memory of the process.", lab, p.rss_bytes if p.alive else None)
            f.gauge(
                "process_rss_growth_bytes_per_second",
                "Trend of the resident memory.",
                lab,
                None if p.rss_growth_bytes_per_hour is None else p.rss_growth_bytes_per_hour / 3600.0,
            )
            f.counter("process_restarts", "Times the process was seen starting again.", lab, p.restarts)

    @staticmethod
    def _findings(f: _Families, snap: Snapshot) -> None:
        counts = Counter((x.severity.value, x.code) for x in snap.findings)
        for (severity, code), n in sorted(counts.items()):
            f.gauge("findings", "Current findings, per severity and code.", {"severity": severity, "code": code}, n)
        v = snap.verdict
        if v is not None:  # the engine's one decision, as every other view says it (engine/diagnosis/verdict)
            lab = {
                "status": v.status.lower().replace(" ", "_"),
                "state": v.state,
                "finding": v.finding or "",
                "action": v.action or "",
            }
            f.gauge("verdict_info", "The run's state, headline finding and remedy, decided once (value 1).", lab, 1)
        inc = last_exception(snap)
        if inc is not None:
            lab = {"signature": inc.signature, "type": _exc_type(inc), "title": inc.title}
            f.gauge("last_exception_info", "The last exception seen in the logs (value 1).", lab, 1)
            if not inc.approximate and math.isfinite(inc.last):  # an undated traceback has no time to export
                f.gauge("last_exception_timestamp_seconds", "When the last exception was seen (epoch).", None, inc.last)
            f.gauge(
                "last_exception_occurrences",
                "Tracebacks with the same signature as the last one.",
                None,
                occurrences(snap.incidents, snap.dropped_incidents, "traceback", inc.signature),
            )

    @staticmethod
    def _stacks(f: _Families, snap: Snapshot) -> None:
        """Where each rank spends its time, from its sampled stacks: the straggler, with its numbers."""
        sampling = snap.sampling
        if sampling is not None:
            f.gauge(
                "stack_sampling_up",
                "1 while the run's stacks can be sampled (py-spy present, ptrace allowed).",
                None,
                sampling.available,
            )
            f.gauge(
                "stack_sampling_cpu_ratio",
                "CPU the stack sampling costs, as a share of one core.",
                None,
                sampling.cpu_fraction,
            )
            f.gauge(
                "stack_sampling_interval_seconds", "Time between two rounds of stack reads.", None, sampling.interval_s
            )
        for r in snap.rank_times:
            lab = {"rank": stable_label(r.label)}
            f.gauge(
                "rank_collective_wait_ratio",
                "Share of the rank's stack reads waiting in a collective, over the straggler window.",
                lab,
                r.collective_share,
            )
            f.gauge("rank_straggler", "1 when the other ranks wait for this one (a straggler).", lab, r.straggler)

    @staticmethod
    def _job(f: _Families, snap: Snapshot) -> None:
        """The distributed job this host's ranks belong to and where each of them stands, by its global rank (never a
        pid): what ``rlwatch fleet`` joins across hosts into one verdict for the job."""
        job = job_of(snap)
        if job is None:
            return
        info = {
            "job": job.job,
            "launcher": job.launcher,
            "master": job.master or "",
            "node_rank": "" if job.node_rank is None else str(job.node_rank),
        }
        f.gauge("job_info", "The distributed job this host's ranks belong to (value 1).", info, 1)
        f.gauge("job_world_size", "How many ranks the job has in all (its WORLD_SIZE).", None, job.world_size)
        for r in standings(snap):
            lab = {"rank": str(r.rank)}
            where = {
                **lab,
                "local_rank": "" if r.local_rank is None else str(r.local_rank),
                "state": r.state,
                "where": r.where,
                "wait": r.wait or "",
            }
            f.gauge(
                "rank_standing_info",
                "Where a rank of this host stands: waiting in a collective, still elsewhere, or moving (value 1).",
                where,
                1,
            )
            f.gauge("rank_still_seconds", "How long the rank has stood in the same frames.", lab, r.still_s)
            f.gauge(
                "rank_collective_seq",
                "The last collective the rank entered in its default process group (its flight record, else NCCL RAS's "
                "count of the operations it launched).",
                lab,
                r.collective_seq,
            )
        rs = snap.run_state
        if rs is not None:  # the host's own state, for the job's verdict: "progressing" only where a host says so
            f.gauge(
                "job_host_state_info",
                "This host's run's state (label state), for the job's verdict (value 1).",
                {"state": rs.state},
                1,
            )
            f.gauge(
                "job_host_state_seconds",
                "How long this host's run has been in its state, from the time its evidence gives: a hang since its "
                "last progress.",
                None,
                None if rs.since is None else max(0.0, snap.time - rs.since),
            )
        ras = snap.ras
        if ras is not None and ras.error is None and ras.ranks and not moving(snap):
            # Kept, with the time it was asked, until the run moves again (engine/job): a stable answer to scrape.
            f.gauge(
                "job_evidence_timestamp_seconds",
                "When the job's collective evidence was read (epoch), per source: NCCL RAS asked, flight records read.",
                {"source": "nccl_ras"},
                ras.asked_at,
            )
            for x in ras.ranks:
                f.gauge(
                    "job_rank_launched",
                    "Operations of the job's collective (label op) that each rank of the whole job launched, as NCCL "
                    "RAS answered on suspicion (label status: ok, behind, missing, dead).",
                    {"rank": str(x.rank), "status": x.status, "node": x.node or "", "op": op_name(ras.operation or "")},
                    x.collectives,
                )
        flight = snap.flight
        if flight is not None and flight.ranks and not moving(snap):
            f.gauge(
                "job_evidence_timestamp_seconds",
                "When the job's collective evidence was read (epoch), per source: NCCL RAS asked, flight records read.",
                {"source": "flight"},
                flight.read_at,
            )
        for e in job_evidence(snap):
            f.gauge(
                "job_collective_issue_info",
                "Ranks of the job its collectives name on this host (value 1): behind or missing from the collective "
                "the others entered (label seq, op), or calling another; from NCCL RAS, flight records or the log.",
                {
                    "code": e.code,
                    "source": e.source,
                    "ranks": ",".join(str(r) for r in e.ranks),
                    "op": e.op or "",
                    "seq": str(e.seq),
                },
                1,
            )
        for rank, o in sorted(last_collectives(snap).items()):
            f.gauge(
                "rank_last_collective_info",
                "The last collective this host's rank entered in its default group (label seq, op, numel: its input "
                "elements), from its flight record or the watchdog's lines, while the run does not progress.",
                {
                    "rank": str(rank),
                    "seq": str(o.seq),
                    "op": o.op,
                    "numel": "" if o.numel_in is None else str(o.numel_in),
                },
                1,
            )

    @staticmethod
    def _sources(f: _Families, snap: Snapshot, now: float) -> None:
        # Ages are measured at the scrape, not at the snapshot: if the engine stops, they keep growing.
        for src in sorted(snap.sources, key=lambda s: s.name):
            lab = {"source": src.name}
            f.gauge("source_up", "1 when the source's last read succeeded.", lab, src.ok)
            f.gauge("source_age_seconds", "Age of the source's last sample.", lab, _age(now, src.last_sample))

    @staticmethod
    def _extras(f: _Families, extras: ExporterExtras) -> None:
        for (action, target, result), n in sorted(extras.remediations.items()):
            lab = {"action": action, "target": target, "result": result}
            f.counter("remediations", "Remediations the watchdog carried out.", lab, n)
        seen: set[str] = set()
        for b in extras.budgets:
            if b.target in seen:
                continue
            seen.add(b.target)
            lab = {"target": b.target}
            f.gauge("budget_gave_up", "1 when the restart budget is spent and a person must re-arm it.", lab, b.gave_up)
            f.gauge("budget_restarts_in_window", "Restarts counted in the budget's window.", lab, b.restarts_in_window)
            f.gauge("budget_delay_seconds", "Delay before the next allowed restart.", lab, b.delay_s)


# --------------------------------------------------------------------------------------------------- serving


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT``, ``PORT`` or ``[V6]:PORT`` to (host, port); the host defaults to loopback."""
    raw = text.strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep:
        host, port_text = "", raw
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ExporterError(f"{text}: write an IPv6 address in brackets, like [::1]:9400")
    try:
        port = int(port_text)
    except ValueError:
        raise ExporterError(f"{text}: expected HOST:PORT, like 127.0.0.1:9400") from None
    if not 0 <= port <= 65535:
        raise ExporterError(f"{text}: port must be between 0 and 65535")
    return host or DEFAULT_HOST, port


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Exporter:
    """A running exporter: its collector served over HTTP on one address until :meth:`close`."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, host: str, registry: CollectorRegistry) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.registry = registry
        self.port: int = int(server.server_address[1])
        self._closed = False

    @property
    def url(self) -> str:
        """Where Prometheus (or ``rlwatch fleet``) reads the metrics."""
        return f"http://{_where(self.host, self.port)}/metrics"

    def close(self) -> None:
        """Stop serving and free the port; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def start_exporter(
    source: Callable[[], Snapshot],
    host: str = DEFAULT_HOST,
    port: int = 0,
    *,
    extra: Callable[[], ExporterExtras] | None = None,
    clock: Clock | None = None,
) -> Exporter:
    """Serve ``source``'s latest snapshot as Prometheus metrics on ``host:port`` (port 0: any free port).

    Raises :class:`ExporterError` with one line (``127.0.0.1:9400: address already in use``) when it cannot serve.
    """
    if os.environ.get(MULTIPROC_ENV) is not None:
        raise ExporterError(
            f"{MULTIPROC_ENV} is set ({label_safe(os.environ[MULTIPROC_ENV], 80)}): prometheus_client would run in "
            "multiprocess mode and serve broken metrics; unset it for rlwatch"
        )
    if not 0 <= port <= 65535:
        raise ExporterError(f"{_where(host, port)}: port must be between 0 and 65535")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source, extra=extra, clock=clock))
    try:
        server, thread = start_wsgi_server(port, addr=host, registry=registry)
    except socket.gaierror as exc:
        raise ExporterError(f"{_where(host, port)}: cannot resolve host: {exc.strerror}") from None
    except OSError as exc:
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise ExporterError(f"{_where(host, port)}: {reason.lower() if exc.errno else reason}") from None
    thread.name = f"rlwatch-exporter-{port}"
    return Exporter(server, thread, host, registry)
