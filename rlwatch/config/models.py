"""Typed configuration: what the YAML file may say, validated strictly (unknown keys are errors).

The models are the single documented reference of every key; ``configs/reference.yaml`` mirrors them with
comments. Loading and line-numbered error messages live in :mod:`rlwatch.discover.load`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator
from pydantic.fields import FieldInfo

Profile = Literal["auto", "areal", "trl", "verl", "openrlhf", "workers", "generic"]
SeverityName = Literal["critical", "warning", "info"]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S")


@dataclass(frozen=True)
class Names:
    """What a string key of the file names, where that decides what a file rlwatch does not trust may say.

    A file another user could have written still says how the run is watched, but not where rlwatch reads, whom it
    asks, which process it takes by pid, nor an expression that could keep it busy for ever (rlwatch.discover.load
    applies the rule to every key so marked, found by :func:`names_of` on the models themselves, so a key added
    later is held to it by its type alone; tests/test_untrusted_config.py fails for a string key left unmarked).
    """

    what: Literal["path", "pid", "pattern", "remote"]


# A file, directory or glob; relative to the run directory unless absolute. Untrusted: only inside the run directory.
RunPath = Annotated[str, Names("path")]
# Names a process by its pid (a pidfile). Untrusted: never used.
PidSource = Annotated[str, Names("pid")]
# A regular expression over a log line or a command line. Untrusted: run by RE2 (rlwatch.common.patterns).
UserPattern = Annotated[str, Names("pattern")]
# An address rlwatch would send a request (and what it knows) to. Untrusted: never used.
RemoteUrl = Annotated[str, Names("remote")]


def _marks(annotation: object) -> set[str]:
    found: set[str] = set()
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, Names):
            found.add(meta.what)
    for arg in get_args(annotation):
        if get_origin(annotation) is not Literal:
            found |= _marks(arg)
    return found


def names_of(field: FieldInfo) -> frozenset[str]:
    """What a field of a model names (``path``, ``pid``, ``pattern``, ``remote``), from its type: empty for most."""
    found = _marks(field.annotation)
    found.update(meta.what for meta in field.metadata if isinstance(meta, Names))
    return frozenset(found)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    except (RecursionError, OverflowError) as exc:  # groups nested thousands deep, a repetition past 2**32
        raise ValueError(f"not a usable regular expression: {str(exc) or type(exc).__name__}") from None
    return value


class CustomEvent(Strict):
    """A user-defined event kind: lines matching ``pattern`` are counted under ``name``."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    pattern: UserPattern
    severity: SeverityName = "warning"
    ignore_case: bool = False
    progress: bool = False  # a sign of progress: resets the streaks of failure kinds in the same file

    _v = field_validator("pattern")(_check_regex)


class EventsConfig(Strict):
    brake_pattern: UserPattern = r"emergency[ _-]?brake"  # case-insensitive
    custom: list[CustomEvent] = []
    recent_lines: Annotated[int, Field(ge=1, le=1000)] = 20
    rate_window_s: PositiveFloat = 300.0

    _v = field_validator("brake_pattern")(_check_regex)


class ProcessRule(Strict):
    """How to recognise one process role, and how to start it again.

    A process is selected only by an explicit rule (a regex over the whole command line, a pidfile, or both),
    never by a broad name.
    """

    role: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")]
    cmdline_regex: UserPattern | None = None
    pidfile: Annotated[PidSource, Names("path")] | None = None
    command: list[str] | None = None  # argv to start one again; recorded from the live process when absent
    cwd: RunPath | None = None
    log: RunPath | None = None  # where a started process's output is appended (and tailed)
    memory_limit_bytes: Annotated[int, Field(gt=0)] | None = None
    expected: bool = False  # a finding is raised when none is running (e.g. the watchdog)

    _v = field_validator("cmdline_regex")(lambda v: v if v is None else _check_regex(v))


class ServerConfig(Strict):
    kind: Literal["sglang", "vllm", "trl"] | None = None
    url: RemoteUrl | None = None  # e.g. http://127.0.0.1:30000
    # null: a server is expected exactly when url is set; false: the run has none (TRL's colocated generation),
    # never probed, no server finding or policy; true: expected even where its address is not known yet.
    expected: bool | None = None
    health_path: str | None = None  # default by kind: /health, /health, /health/
    timeout_s: PositiveFloat = 2.0
    interval_s: PositiveFloat = 5.0
    command: list[str] | None = None
    cwd: RunPath | None = None
    log: RunPath | None = None
    start_timeout_s: PositiveFloat = 600.0


class GpuConfig(Strict):
    backend: Literal["auto", "nvml", "simulated", "none"] = "auto"
    # JSON file a simulator writes (backend "simulated"): it names the GPUs' processes by pid.
    simulated_state: Annotated[RunPath, Names("pid")] | None = None
    device_glob: RunPath = "/dev/nvidia*"
    query_timeout_s: PositiveFloat = 2.0


class TrainingConfig(Strict):
    """Where the run keeps its state. Paths are relative to the run directory unless absolute."""

    logs: list[RunPath] = []  # globs
    checkpoint_dirs: list[RunPath] = []
    recover_info: RunPath | None = None  # path of step_info.json
    config_file: RunPath | None = None  # the training YAML, to show its key knobs
    output_volume: RunPath | None = None  # for free-disk checks; default: the run directory
    total_steps: Annotated[int, Field(gt=0)] | None = None


class RayConfig(Strict):
    """A Ray-based run (verl, OpenRLHF): where rlwatch reads what Ray says of it (rlwatch/sources/ray.py)."""

    # null: when the run shows Ray (a verl or OpenRLHF profile, a log with Ray's actor prefixes); false: never.
    enabled: bool | None = None
    # Ray's session log directory (raylet.out, gcs_server.out, worker-*.err); null: the one the raylet's command
    # line names, else $RAY_TMPDIR/session_latest/logs, else /tmp/ray/session_latest/logs.
    session_logs: RunPath | None = None
    # The dashboard whose State API (/api/v0/actors) is asked; null: the one the dashboard's command line names,
    # else http://127.0.0.1:8265 while a Ray cluster runs on this host. Its token (RAY_AUTH_TOKEN,
    # RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) is sent only to this host's dashboard or to one named here.
    dashboard: RemoteUrl | None = None
    state_api: bool = True  # false: never ask the State API (the session's logs are still read)
    timeout_s: PositiveFloat = 2.0  # one State API request
    interval_s: PositiveFloat = 10.0  # how often the State API is asked


class Thresholds(Strict):
    stall_s: PositiveFloat = 600.0
    restart_loop_uptime_s: PositiveFloat = 60.0
    restart_loop_count: Annotated[int, Field(ge=2)] = 3
    brake_streak: Annotated[int, Field(ge=1)] = 10
    brake_free_bytes: NonNegInt = 2 * 1024**3
    memory_warn_fraction: Annotated[float, Field(gt=0, le=1)] = 0.90
    leak_bytes_per_hour: NonNegInt = 512 * 1024**2
    disk_free_bytes: NonNegInt = 10 * 1024**3
    weight_update_timeout_s: PositiveFloat = 120.0
    weight_update_warn_fraction: Annotated[float, Field(gt=0, le=1)] = 0.75
    connection_storm: Annotated[int, Field(ge=1)] = 5
    # A run is hung when its processes live and it makes no progress for longer than its own cadence allows: the
    # larger of hang_factor times its step interval and hang_floor_s, whatever its logs keep printing.
    hang_factor: Annotated[float, Field(ge=1)] = 5.0
    hang_floor_s: PositiveFloat = 60.0
    # Before its first step, a run loads models and compiles: no progress for this long since it started is a hang.
    startup_s: PositiveFloat = 1800.0


class StacksConfig(Strict):
    """The run's stacks sampled while it lives (rlwatch/sources/sampler.py) and what they say: a hang from where the
    ranks stand, whatever the logs print, and stragglers (rlwatch/engine/diagnosis/stacks.py)."""

    sample: bool = True  # false: stacks are read only once a hang is declared, or on key t
    # dump: one `py-spy dump` a process a round (each read known at once); record: a `py-spy record --rate 1` a
    # process for each interval (about 15 times cheaper a sample, its samples known at the window's end).
    method: Literal["dump", "record"] = "dump"
    interval_s: PositiveFloat = 10.0  # the shortest time between two rounds of reads
    # The CPU the reads may cost, as a fraction of one core: a round that cost more waits longer (1 %: on an 8-rank
    # host py-spy's dumps then come every ~20 s; bench/stacks.py measures it).
    cpu_budget: Annotated[float, Field(gt=0, le=1)] = 0.01
    history: Annotated[int, Field(ge=4)] = 64  # reads kept per process
    # Ranks standing still in their waits for longer than the run's hang window are hung; never later than this, so
    # their stacks are read before a framework's watchdog (SGLang's at 300 s) kills them.
    hang_max_s: PositiveFloat = 240.0
    straggler_window_s: PositiveFloat = 90.0  # where each rank spent its time is taken over this window ...
    straggler_min_samples: Annotated[int, Field(ge=2)] = 5  # ... from at least this many reads of each rank
    # A rank is a straggler when the others spend at least this share of their reads waiting in a collective ...
    straggler_wait_share: Annotated[float, Field(gt=0, le=1)] = 0.5
    # ... and it spends at most this share there itself.
    straggler_own_share: Annotated[float, Field(ge=0, lt=1)] = 0.25


class HostConfig(Strict):
    """The machine under the run: the kernel's log, the pod's limits (rlwatch.sources.kernel, rlwatch.sources.limits).

    Thresholds come from what the frameworks themselves state (each cited where it is used)."""

    # Where the kernel's word is read: auto (/dev/kmsg, else `journalctl -k`, else `dmesg`, and saved logs in the
    # run directory), files (only saved logs in the run directory: the simulator), off.
    kernel_log: Literal["auto", "files", "off"] = "auto"
    kernel_log_files: list[RunPath] = ["dmesg*.log", "kern.log", "kernel.log"]  # globs in the run directory
    command_timeout_s: PositiveFloat = 5.0  # journalctl / dmesg are given this long, then killed
    shm_path: RunPath = "/dev/shm"  # the shared-memory mount whose size is checked
    simulated_shm_bytes: NonNegInt | None = None  # set by the simulator: the size /dev/shm is said to have
    shm_min_bytes: NonNegInt = 1024**3  # /dev/shm below this beside vLLM, SGLang, NCCL, Ray or PyTorch: a warning
    inodes_min_fraction: Annotated[float, Field(ge=0, le=1)] = 0.05  # warn when fewer inodes than this are free
    memlock_min_bytes: NonNegInt = 64 * 1024**3  # RLIMIT_MEMLOCK below this where RDMA is in use: a warning


class LearningConfig(Strict):
    """When the run's own metrics say learning broke (rlwatch.engine.diagnosis.learning). Defaults from what the
    frameworks' users report (see configs/reference.yaml)."""

    nonfinite_steps: Annotated[int, Field(ge=1)] = 3  # NaN/inf loss or reward this many logged steps in a row
    spike_factor: Annotated[float, Field(gt=1)] = 10.0  # a loss or grad norm this many times its rolling median
    spike_window: Annotated[int, Field(ge=3)] = 20  # logged steps the rolling median is taken over
    sustained_steps: Annotated[int, Field(ge=1)] = 5  # collapse, blow-up, clipping must hold this many logged steps
    reward_collapse_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1  # within this part of its range of its floor
    kl_max: PositiveFloat = 1.0  # KL divergence to the reference above this
    entropy_min: Annotated[float, Field(ge=0)] = 0.01  # policy entropy below this
    clip_ratio_max: Annotated[float, Field(gt=0, le=1)] = 0.9  # share of responses cut at the max length above this


class ActionsConfig(Strict):
    readonly: bool = False
    grace_s: PositiveFloat = 10.0
    allow_other_users: bool = False  # only honoured when running as root
    # With allow_other_users, under root, from a trusted file: the users (names or uids) whose processes may be the
    # run's. Nobody else's process is ever a member, recorded or started again.
    other_users: list[str | int] = []
    audit_log: RunPath | None = None  # default: <run_dir>/.rlwatch/audit.jsonl
    resume_command: list[str] | None = None
    resume_cwd: RunPath | None = None
    resume_log: RunPath | None = None
    verify_timeout_s: PositiveFloat = 120.0
    protected_names: list[str] = [
        "nvidia-persistenced",
        "nv-hostengine",
        "dcgm-exporter",
        "dcgmi",
        "nvidia-smi",
        "node_exporter",
        "nvitop-exporter",
        "nvitop",
        "nvtop",
        "gpustat",
        "glances",
    ]


ActionName = Literal["restart-workers", "kill-zombies", "resume", "restart-server"]


class BudgetConfig(Strict):
    """How often the watchdog may act on one target before it gives up and waits for a person
    (rlwatch.remedy.budget)."""

    burst: Annotated[int, Field(ge=1)] = 3  # at most this many restarts of one target ...
    window_s: PositiveFloat = 1800.0  # ... within this many seconds; one more failure = gave up
    delay_s: PositiveFloat = 10.0  # the wait before a restart after a start-up failure, doubling each time ...
    max_delay_s: PositiveFloat = 300.0  # ... up to this
    reset_after_s: PositiveFloat = 600.0  # this long healthy after a restart forgets the doubling
    startup_s: PositiveFloat = 60.0  # failing again sooner than this after a restart = the restart did not take
    startup_retries: Annotated[int, Field(ge=1)] = 2  # that many start-up failures in a row = gave up at once


class PolicyWhen(Strict):
    """The condition of a policy: every key given must hold (and keep holding for ``for_s``)."""

    event: Annotated[str, Field(pattern=r"^_?[a-z][a-z0-9_]*$")] | None = None  # an event kind, per log file
    streak: Annotated[int, Field(ge=1)] | None = None  # that kind this many times in a row in one file
    count: Annotated[int, Field(ge=1)] | None = None  # that kind this many times in one file within window_s
    window_s: PositiveFloat | None = None
    role: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")] | None = None  # only processes of this role
    over_memory_limit: bool = False  # a process above its rule's memory_limit_bytes
    rss_above_bytes: Annotated[int, Field(gt=0)] | None = None  # a process's resident memory above this
    growth_above_bytes_per_hour: Annotated[int, Field(gt=0)] | None = None  # a process growing faster than this
    available_below_bytes: Annotated[int, Field(gt=0)] | None = None  # the host's available RAM below this
    server_down: bool = False  # the inference server's health check fails
    dead: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")] | None = None  # a role seen running, none alive now
    stalled: bool = False  # training stalled (no step for thresholds.stall_s)
    for_s: Annotated[float, Field(ge=0)] = 0.0  # the condition must hold this long before the policy acts

    @model_validator(mode="after")
    def _coherent(self) -> PolicyWhen:
        if self.event is not None and self.streak is None and self.count is None:
            raise ValueError("event: give streak or count")
        if (self.streak is not None or self.count is not None) and self.event is None:
            raise ValueError("streak and count need an event")
        if (self.count is None) != (self.window_s is None):
            raise ValueError("count and window_s go together")
        conditions = (
            self.event,
            self.over_memory_limit or None,
            self.rss_above_bytes,
            self.growth_above_bytes_per_hour,
            self.available_below_bytes,
            self.server_down or None,
            self.dead,
            self.stalled or None,
        )
        if all(c is None for c in conditions):
            raise ValueError("a policy needs at least one condition")
        return self


class Policy(Strict):
    """Headless remediation: when the condition holds, run these actions, bounded by a restart budget."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")]
    when: PolicyWhen
    actions: Annotated[list[ActionName], Field(min_length=1)]  # run in order; a refused later one is skipped
    budget: BudgetConfig | None = None  # this policy's own budget; null = watchdog.budget
    enabled: bool = True


class WatchdogConfig(Strict):
    """The headless watchdog (`rlwatch watch`): its budgets and how it shows it is alive."""

    budget: BudgetConfig = BudgetConfig()
    heartbeat_s: PositiveFloat = 5.0  # how often the state file is rewritten (and systemd pinged, at most)
    stale_after_s: PositiveFloat = 60.0  # a heartbeat older than this means the watchdog is not responding


class FleetConfig(Strict):
    """Where `rlwatch fleet` reads many hosts: one Prometheus scraping every pod's exporter, or the exporters."""

    prometheus: RemoteUrl | None = None  # base URL of a Prometheus server, e.g. http://127.0.0.1:9090
    job: str | None = None  # only targets of this scrape job; null = every job with rlwatch series
    exporters: list[RemoteUrl] = []  # exporter URLs read directly when there is no Prometheus
    refresh_s: PositiveFloat = 5.0
    stale_after_s: PositiveFloat = 60.0  # a host whose newest data is older than this is stale
    timeout_s: PositiveFloat = 5.0
    lookback_s: PositiveFloat = 3600.0  # how far back Prometheus is asked about hosts that stopped reporting


class NotifyTarget(Strict):
    """One place a person hears from the watchdog: an Apprise URL (Slack, Discord, Telegram, ntfy, mailto, json …).

    The URL usually holds a token: rlwatch shows it only redacted (``tgram://***``), and never in a message.
    """

    url: Annotated[RemoteUrl, Field(min_length=1)]
    min_severity: SeverityName = "warning"  # findings below this are not sent here; recovery follows what was sent
    name: str | None = None  # shown instead of the redacted URL in the report and the dashboard

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if not _URL.match(value.strip()):
            raise ValueError("an Apprise URL is SCHEME://… (json://host/path, ntfy://topic, mailto://…, tgram://…)")
        return value.strip()


class NotifyConfig(Strict):
    """Notifications from `rlwatch watch` and its dead man's switch (rlwatch.export.notify)."""

    targets: list[NotifyTarget] = []  # also --notify URL (repeatable) and RLWATCH_NOTIFY (whitespace or commas)
    update_every_s: PositiveFloat = 900.0  # a finding that persists and changes is told again at most this often
    clear_after_s: Annotated[float, Field(ge=0)] = 60.0  # a finding gone this long is recovered (one message)
    include_lines: bool = False  # send the last log lines of a finding (log text may hold anything: off by default)
    timeout_s: PositiveFloat = 10.0  # one delivery attempt to one target
    retries: Annotated[int, Field(ge=0, le=10)] = 3  # further attempts after a failure ...
    backoff_s: PositiveFloat = 5.0  # ... waiting this long before the first, doubling each time
    queue_size: Annotated[int, Field(ge=1, le=10_000)] = 50  # per target; when full the oldest message is dropped
    # A URL the watchdog GETs every heartbeat_every_s (healthchecks-style); --heartbeat.
    heartbeat: RemoteUrl | None = None
    heartbeat_every_s: PositiveFloat = 60.0
    heartbeat_timeout_s: PositiveFloat = 10.0

    @field_validator("heartbeat")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]", value.strip()):
            raise ValueError("the heartbeat is an http:// or https:// URL (a GET is sent to it)")
        return None if value is None else value.strip()


@dataclass(frozen=True)
class Provenance:
    """Why a configuration says what it does: the evidence discovery saw, or the file it was read from.

    It is not a key of the file (a person's file needs no evidence for itself): discovery attaches it, ``rlwatch
    init`` writes it as comments, the report and the dashboard show it. ``run_found`` False means discovery saw
    nothing of a training run, and ``looked_for`` says where it looked, so a view can say so instead of "healthy".
    """

    source: str = "defaults"  # "discovered", "rlwatch.yaml", "--config FILE", "defaults"
    profile: tuple[str, ...] = ()  # why this profile
    server: tuple[str, ...] = ()  # why a server is expected, or why none is
    run_found: bool = True
    looked_for: str | None = None
    distrust: str | None = None  # why the file may not decide what rlwatch executes: actions are then off
    # What of an untrusted file was not used, a line each (FILE:LINE: key: why: ignored), said by the "config" source.
    ignored: tuple[str, ...] = ()


class Config(Strict):
    """The whole file. Every key has a default, so an empty file is valid."""

    _provenance: Provenance = PrivateAttr(default_factory=Provenance)

    profile: Profile = "auto"
    run_dir: RunPath | None = None
    interval_s: PositiveFloat = 2.0
    simulated: bool = False  # set by the simulator so every view says SIMULATED
    training: TrainingConfig = TrainingConfig()
    server: ServerConfig = ServerConfig()
    gpu: GpuConfig = GpuConfig()
    processes: list[ProcessRule] = []
    events: EventsConfig = EventsConfig()
    thresholds: Thresholds = Thresholds()
    host: HostConfig = HostConfig()
    stacks: StacksConfig = StacksConfig()
    learning: LearningConfig = LearningConfig()
    actions: ActionsConfig = ActionsConfig()
    policies: list[Policy] = []
    watchdog: WatchdogConfig = WatchdogConfig()
    fleet: FleetConfig = FleetConfig()
    notify: NotifyConfig = NotifyConfig()
    ray: RayConfig = RayConfig()

    @property
    def provenance(self) -> Provenance:
        return self._provenance

    @property
    def server_expected(self) -> bool:
        """Whether this run has an inference server to watch: only where the configuration or evidence says so."""
        if self.server.expected is not None:
            return self.server.expected
        return self.server.url is not None

    def __eq__(self, other: object) -> bool:
        """Equal when they say the same: where a configuration came from is not part of what it says."""
        if not isinstance(other, Config):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable lists inside: never a dict key

    def with_provenance(self, provenance: Provenance) -> Config:
        """A copy that carries ``provenance`` (copies made from it keep it)."""
        out = self.model_copy()
        out._provenance = provenance
        return out
