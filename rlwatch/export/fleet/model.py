"""The fleet's records (a host row, a group of hosts failing alike, a fleet snapshot) and how hosts are grouped."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from rlwatch.common.state import Severity

PREFIX = "rlwatch_"
MAX_BODY = 16 * 1024 * 1024  # an exposition or an API answer this big is not what we asked for
ERROR_MAX = 200

# The event kinds a fleet row shows when they are non-zero: failures, not progress.
FAILURE_KINDS = (
    "traceback",
    "connection_refused",
    "cuda_oom",
    "cuda_busy",
    "nccl_timeout",
    "nccl_error",
    "engine_dead",
    "child_failed",
    "oom_kill",
    "emergency_brake",
    "timeout",
    "restart",
)

Labels = Mapping[str, str]
Sample = tuple[str, Labels, float]


class FleetError(Exception):
    """A source could not be read; one line."""


class HostStatus(StrEnum):
    CRITICAL = "critical"
    STALE = "stale"
    NO_DATA = "no data"
    WARNING = "warning"
    OK = "ok"

    @property
    def rank(self) -> int:
        """Lower needs a person sooner; unknown hosts sort right after the failing ones."""
        return {"critical": 0, "stale": 1, "no data": 2, "warning": 3, "ok": 4}[self.value]


@dataclass(frozen=True, slots=True)
class FleetFinding:
    severity: Severity
    code: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class FleetException:
    """The last exception a host logged, as its exporter labels it."""

    signature: str
    type: str
    title: str
    at: float | None = None
    occurrences: int | None = None


@dataclass(frozen=True, slots=True)
class FleetGpu:
    index: str
    util_ratio: float | None
    mem_used_bytes: float | None
    mem_total_bytes: float | None


@dataclass(frozen=True, slots=True)
class FleetProcess:
    role: str
    name: str
    up: bool | None
    rss_bytes: float | None
    restarts: float | None


@dataclass(frozen=True, slots=True)
class FleetRank:
    """One rank of a distributed job as its host's exporter says it stands (``rlwatch_rank_standing_info``)."""

    rank: int
    local_rank: int | None
    state: str  # "waiting" | "elsewhere" | "moving"
    where: str
    wait: str | None
    still_s: float | None
    collective_seq: int | None = None


@dataclass(frozen=True, slots=True)
class FleetEvidence:
    """Ranks of a job that a host's collectives name (``rlwatch_job_collective_issue_info``): behind or missing from
    collective ``seq`` the others entered, or calling another there."""

    code: str  # "collective_missing_rank" | "collective_mismatch"
    source: str  # "nccl_ras" | "flight" | "log"
    ranks: tuple[int, ...]
    op: str | None
    seq: int | None


@dataclass(frozen=True, slots=True)
class FleetCall:
    """A rank's last entered collective as its host read it (``rlwatch_rank_last_collective_info``)."""

    rank: int
    seq: int
    op: str
    numel: int | None


@dataclass(frozen=True, slots=True)
class FleetHost:
    """One row of the fleet: what a host's exporter said last, and how old that is."""

    key: str  # the target: a Prometheus instance or an exporter URL; unique within a fleet
    host: str | None = None  # the name the host gives itself
    job: str | None = None
    profile: str | None = None
    run_dir: str | None = None
    simulated: bool = False
    stale: bool = True
    age_s: float | None = None  # age of the newest data, at the fleet snapshot's time
    error: str | None = None  # why data stopped arriving
    step: int | None = None
    total_steps: int | None = None
    steps_per_hour: float | None = None
    stalled: bool | None = None
    finished: bool | None = None
    reward: float | None = None
    server_up: bool | None = None
    gpus: tuple[FleetGpu, ...] = ()
    mem_total_bytes: float | None = None
    mem_available_bytes: float | None = None
    events: Mapping[str, int] = field(default_factory=dict)
    findings: tuple[FleetFinding, ...] = ()  # worst first
    exception: FleetException | None = None
    checkpoint_step: int | None = None
    checkpoint_age_s: float | None = None
    resume_step: int | None = None
    processes: tuple[FleetProcess, ...] = ()
    budgets_gave_up: tuple[str, ...] = ()
    run_job: str | None = None  # the distributed job its ranks belong to (``rlwatch_job_info``), not the scrape job
    node_rank: int | None = None
    world_size: int | None = None
    ranks: tuple[FleetRank, ...] = ()
    run_state: str | None = None  # its run's state ("hung", "unknown", "progressing" …), None: not said
    state_s: float | None = None  # how long it has been in that state
    evidence: tuple[FleetEvidence, ...] = ()
    launched: Mapping[int, int] = field(default_factory=dict)  # NCCL RAS's count of each job rank's operations
    launched_op: str | None = None  # the collective those counts are of ("all_reduce")
    calls: tuple[FleetCall, ...] = ()

    @property
    def has_data(self) -> bool:
        return self.host is not None

    @property
    def name(self) -> str:
        return self.host or self.key

    @property
    def worst(self) -> FleetFinding | None:
        return self.findings[0] if self.findings else None

    @property
    def status(self) -> HostStatus:
        if not self.has_data:
            return HostStatus.NO_DATA
        if self.stale:
            return HostStatus.STALE
        worst = self.worst
        if worst is None or worst.severity is Severity.INFO:
            return HostStatus.OK
        return HostStatus.CRITICAL if worst.severity is Severity.CRITICAL else HostStatus.WARNING

    @property
    def signature(self) -> str | None:
        return self.exception.signature if self.exception else None

    @property
    def gpu_util_ratio(self) -> float | None:
        utils = [g.util_ratio for g in self.gpus if g.util_ratio is not None]
        return sum(utils) / len(utils) if utils else None

    @property
    def gpu_mem_used_bytes(self) -> float | None:
        used = [g.mem_used_bytes for g in self.gpus if g.mem_used_bytes is not None]
        return sum(used) if used else None

    @property
    def gpu_mem_total_bytes(self) -> float | None:
        total = [g.mem_total_bytes for g in self.gpus if g.mem_total_bytes is not None]
        return sum(total) if total else None

    def failure_counts(self) -> list[tuple[str, int]]:
        """The non-zero failure event counts, in the order of :data:`FAILURE_KINDS`."""
        return [(k, self.events[k]) for k in FAILURE_KINDS if self.events.get(k)]


@dataclass(frozen=True, slots=True)
class FleetGroup:
    """Hosts whose last exception has one signature (``signature`` None: hosts with no exception)."""

    signature: str | None
    title: str | None
    hosts: tuple[FleetHost, ...]

    @property
    def status(self) -> HostStatus:
        return min((h.status for h in self.hosts), key=lambda s: s.rank)


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    time: float
    source: str  # "prometheus http://…" or "3 exporters"
    hosts: tuple[FleetHost, ...] = ()
    error: str | None = None  # the source as a whole could not be read (the hosts are the last known ones)

    @property
    def groups(self) -> tuple[FleetGroup, ...]:
        return group_hosts(self.hosts)

    def counts(self) -> dict[HostStatus, int]:
        out: dict[HostStatus, int] = {}
        for h in self.hosts:
            out[h.status] = out.get(h.status, 0) + 1
        return out


def _host_order(h: FleetHost) -> tuple[int, str, str]:
    return (h.status.rank, h.name, h.key)


def group_hosts(hosts: Iterable[FleetHost]) -> tuple[FleetGroup, ...]:
    """Hosts grouped by the signature of their last exception; the groups that need a person first.

    Groups are ordered by their worst host, then by size (the same crash on many hosts is the bigger story), then
    by title; the hosts with no exception come after every group of equal urgency.
    """
    by_sig: dict[str | None, list[FleetHost]] = defaultdict(list)
    for h in hosts:
        by_sig[h.signature].append(h)
    groups = []
    for sig, members in by_sig.items():
        members.sort(key=_host_order)
        title = next((m.exception.title for m in members if m.exception is not None), None)
        groups.append(FleetGroup(sig, title, tuple(members)))
    groups.sort(key=lambda g: (g.status.rank, g.signature is None, -len(g.hosts), g.title or "", g.signature or ""))
    return tuple(groups)
