"""Immutable records that cross the core/UI boundary.

Sources produce these, the engine assembles them into one :class:`Snapshot` per tick, and every consumer (report,
diagnosis, exporter, TUI) reads only snapshots. Records are frozen so a snapshot handed to the UI thread can never
change under it. Absent data is ``None``, never a made-up zero. Times are wall-clock epoch seconds (floats) so they
can be printed; durations that drive decisions use the monotonic clock inside the engine instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from rlwatch.common.vocab import FindingCode, RunStateName, StatusName

# Line numbers from here up stand for lines whose number is not known yet: the newest part of a big backlog is
# diagnosed before the lines above it are counted (``rlwatch.engine.preview``), numbered from this base until the
# count answers. Shown as "?" (:func:`line_ref`), "null" in JSON, never as a number. A real file would need more
# lines than a petabyte holds to reach it.
UNCOUNTED = 10**15


def line_number(lineno: int) -> int | None:
    """The line number as it may be shown: None while it is not known yet (see :data:`UNCOUNTED`)."""
    return None if lineno >= UNCOUNTED else lineno


def line_ref(path: str, lineno: int) -> str:
    """``trainer.log:5123``, or ``trainer.log:?`` while the line's number is not known yet."""
    n = line_number(lineno)
    return f"{path.rsplit('/', 1)[-1]}:{'?' if n is None else n}"


class Severity(StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Lower is more severe, for sorting."""
        return {"critical": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True, slots=True)
class LogLine:
    """One matched log line, kept as evidence."""

    path: str
    lineno: int
    text: str
    time: float  # NaN when the line has no time of its own (an undated line of a backlog): never the time it was read


@dataclass(frozen=True, slots=True)
class EventSummary:
    """Everything kept about one event kind."""

    kind: str
    severity: Severity
    count: int
    first: float | None
    last: float | None
    rate_per_min: float
    streak: int
    files: dict[str, int]
    recent: tuple[LogLine, ...] = ()
    # ``approximate``: some lines carried no time of their own (undated lines of a backlog), and first/last are
    # bounds: ``first``/``last`` the earliest each can be, ``first_by``/``last_by`` the latest (equal: exact; None:
    # unbounded). Without it, first/last are the lines' own times and the ``_by`` fields are None.
    approximate: bool = False
    first_by: float | None = None
    last_by: float | None = None
    position: str | None = None  # where the last line sits when its time is not known: "train.log:5123, after step 7"


@dataclass(frozen=True, slots=True)
class ChildFailure:
    """One failed worker as torchrun's ChildFailedError report lists it (each field as printed; None when absent)."""

    rank: int | None
    local_rank: int | None
    exitcode: int | None
    signal: str | None  # "SIGABRT" for exit code -6: the worker was killed by a signal
    pid: int | None
    host: str | None
    time: str | None  # as torchrun printed it, local time: "2026-11-24_06:10:21"
    error: str | None  # its traceback field: "Signal 6 (SIGABRT) received by PID 1234", or the final exception


@dataclass(frozen=True, slots=True)
class CollectiveTimeout:
    """One NCCL collective that ProcessGroupNCCL's watchdog timed out (``WorkNCCL(...)`` as torch prints it)."""

    rank: int | None  # the rank that timed out, as numbered in its process group (None: not printed)
    seq: int  # SeqNum
    op: str  # OpType: ALLREDUCE, BROADCAST, _ALLGATHER_BASE, …
    timeout_ms: int | None
    ran_ms: int | None
    group: str | None = None  # process group id when printed ("0", "1")


@dataclass(frozen=True, slots=True)
class Incident:
    """A group of lines that belong together: one traceback block, one retry storm, one crash, one NCCL timeout
    (printed several times by torch, one incident)."""

    kind: str  # "traceback" | "retry_storm" | "crash" | "nccl_timeout"
    path: str
    lineno: int
    first: float
    last: float
    count: int  # lines (traceback, nccl_timeout) or events (storm) grouped
    title: str  # e.g. "AttributeError: 'Namespace' object has no attribute 'model_id'"
    location: str | None  # innermost "file.py:123" of a traceback
    signature: str  # stable id for grouping identical failures (also across hosts)
    # ``approximate``: some of its lines carry no time of their own (undated lines of a backlog). first and last are
    # then the earliest they can be (the latest timestamp before them in their file; -inf: none), ``by`` the latest
    # the last line can be (the file's modification time; None: unbounded), ``position`` where it sits
    # ("train.log:5123, after step 1869").
    approximate: bool = False
    by: float | None = None
    position: str | None = None
    first_exact: bool = True  # its first line has a time of its own (later, undated lines made it approximate)
    rank: int | None = None  # the global rank whose output it is ("[rank3]:" prefix), when known
    root_cause: ChildFailure | None = None  # torchrun's "Root Cause (first observed failure)"
    victims: tuple[ChildFailure, ...] = ()  # torchrun's other failures: ranks it stopped after the root cause
    cause: Incident | None = None  # the error that preceded the root cause on its rank (a timeout, a traceback)
    collective: CollectiveTimeout | None = None  # what an nccl_timeout incident timed out


@dataclass(frozen=True, slots=True)
class IncidentTally:
    """Incidents of one kind and signature no longer kept (a count keeps only the newest incidents): how many, and
    the first one's time where it was known exactly. With the kept ones, they make the whole count."""

    kind: str
    signature: str
    count: int  # incidents
    lines: int  # what they grouped, summed (an incident's own count: lines, or events of a storm)
    first: float | None


@dataclass(frozen=True, slots=True)
class GpuHolder:
    """A process holding a GPU device node open or mapped."""

    pid: int
    create_time: float
    user: str | None
    cmdline: tuple[str, ...]
    devices: tuple[str, ...]
    gpu_mem_bytes: int | None  # from NVML when it knows the pid
    in_run: bool  # part of the live run (by evidence: see ``evidence``)
    reason: str | None  # why it is a stray (positive reasons), None for every other holder
    protected: str | None = None  # why it must never be touched (pid 1, daemon, other user, rlwatch itself)
    evidence: str | None = None  # how it was recognised as the run's, or why rlwatch cannot tell what it is
    gpus: tuple[int, ...] = ()  # the GPUs it uses
    attribution: str = "device nodes"  # "nvml": per-GPU used memory from NVML; "device nodes": the nodes it holds

    @property
    def status(self) -> str:
        """ "run", "stray", "protected" or "unknown": only a stray is ever a target without a person naming it."""
        if self.in_run:
            return "run"
        if self.protected:
            return "protected"
        return "stray" if self.reason else "unknown"


@dataclass(frozen=True, slots=True)
class HostEvent:
    """One thing the kernel or the driver said about the machine: an OOM kill, an NVIDIA Xid, a GPU fallen off the
    bus, a segfault, a bus error (:mod:`rlwatch.sources.kernel`), or an Xid NVML delivered."""

    kind: str  # "oom_kill" | "xid" | "fallen_off_bus" | "segfault" | "sigbus" | "gpf"
    time: float | None  # wall time; None when the line's time cannot be known (a saved log of another boot)
    text: str  # the line as the kernel wrote it (terminal-safe, one line)
    source: str  # "kmsg" | "journalctl" | "dmesg" | "nvml" | the saved file's path
    pid: int | None = None  # the process it names (the kernel's pid: the host's, not this container's)
    process: str | None = None  # its command name as the kernel printed it ("python3", "pt_main_thread")
    pci: str | None = None  # the GPU's PCI address as printed ("0000:3b:00")
    gpu: int | None = None  # the NVML index of that GPU, where it could be matched
    xid: int | None = None
    rss_bytes: int | None = None  # OOM kill: anon + file + shmem resident memory of the killed process
    memcg: str | None = None  # OOM kill: the memory cgroup that hit its limit (None: the whole machine)
    seq: int | None = None  # /dev/kmsg's sequence number, where read from there


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """What NVML says of a GPU's hardware, DCGM's health checks being the anchor (see
    :mod:`rlwatch.sources.nvml`). Every field is None where the board or driver does not say (H100s have no page
    retirement: they remap rows), never a made-up zero."""

    pci_bus_id: str | None = None  # "00000000:3B:00.0" as NVML prints it
    ecc_enabled: bool | None = None
    ecc_volatile_corrected: int | None = None  # since the driver last loaded
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None  # over the board's life (InfoROM)
    ecc_aggregate_uncorrected: int | None = None
    retired_sbe: int | None = None  # pages retired for repeated single-bit errors (before Ampere)
    retired_dbe: int | None = None  # pages retired for double-bit errors
    retired_pending: bool | None = None  # a retirement waits for the next driver load
    remap_correctable: int | None = None  # rows remapped for correctable errors (Ampere and later)
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None  # a remap waits for the next GPU reset
    remap_failure: bool | None = None  # a row could not be remapped: an RMA condition
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    clock_events: tuple[str, ...] | None = None  # active clock event (throttle) reasons, e.g. ("hw_thermal",)
    lost: str | None = None  # NVML says the GPU is lost (NVML_ERROR_GPU_IS_LOST): the error, else None
    xids: tuple[HostEvent, ...] = ()  # Xid events NVML delivered (nvmlEventSetWait), newest last


@dataclass(frozen=True, slots=True)
class GpuState:
    index: int
    name: str | None
    uuid: str | None
    util: float | None  # percent 0..100
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    temp_c: float | None
    power_w: float | None
    compute_mode: str | None  # "DEFAULT" | "EXCLUSIVE_PROCESS" | "PROHIBITED"
    holders: tuple[int, ...] = ()
    # GPU memory NVML counts but no process visible here explains: held outside this container (or PID namespace).
    outside_bytes: int | None = None
    outside_pids: tuple[int, ...] = ()  # pids NVML reports that do not exist here
    health: GpuHealth | None = None  # ECC, retired/remapped memory, PCIe link, throttling, Xids; None: not read
    sm_clock_mhz: float | None = None  # the SM clock now: a GPU that computes runs it lower than one waiting in NCCL


@dataclass(frozen=True, slots=True)
class GpuStatus:
    """The GPU source as a whole: which backend, and whether it works."""

    backend: str  # "nvml" | "simulated" | "none"
    available: bool
    error: str | None  # a one-line reason when not available ("NVML library not found", …)
    gpus: tuple[GpuState, ...] = ()


@dataclass(frozen=True, slots=True)
class MemoryState:
    total_bytes: int | None
    available_bytes: int | None
    swap_total_bytes: int | None
    swap_used_bytes: int | None
    oom_kills: int | None  # cgroup counter; None when no cgroup file is readable
    forecast_exhausted_at: float | None  # when available memory reaches zero at the current trend
    brake_free_bytes: int | None = None  # configured free-memory level at which workers' emergency brake fires
    # What the forecast rests on: None (the host's RAM trend), or the processes that grow, in words
    # ("worker-0, worker-1 growing 6.5 GB/h"), when their growth runs RAM out sooner than the trend says.
    forecast_from: str | None = None
    # The container's own memory limit (cgroup v2 memory.max, v1 memory.limit_in_bytes): a Kubernetes or Docker
    # limit is what the OOM killer enforces, not the host's RAM. None: no limit (or not readable).
    cgroup_limit_bytes: int | None = None
    cgroup_usage_bytes: int | None = None  # memory.current / memory.usage_in_bytes (page cache included)
    cgroup_working_set_bytes: int | None = None  # usage less inactive file cache: what the kubelet and the OOM see
    cgroup_oom_events: int | None = None  # v2 memory.events "oom": times the limit was hit and allocation failed


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    create_time: float
    role: str  # "trainer" | "launcher" | "worker" | "server" | "watchdog" | custom
    name: str  # a stable label: role plus an ordinal or the configured name ("worker-0")
    rss_bytes: int | None
    rss_growth_bytes_per_hour: float | None
    started_at: float
    restarts: int
    cmdline: tuple[str, ...]
    cwd: str | None
    user: str | None
    alive: bool = True
    evidence: str | None = None  # how it was recognised as the run's; None: only its role rule matched
    attempt: int | None = None  # None: the live run's; else the index of its earlier attempt in LiveRun.attempts


@dataclass(frozen=True, slots=True)
class ServerState:
    kind: str | None  # "sglang" | "vllm" | "trl" | None
    url: str | None
    up: bool | None  # None: not checked yet / nothing configured
    down_since: float | None
    pid: int | None
    status_code: int | None = None
    error: str | None = None  # "connection refused", "timeout after 2.0s", "HTTP 503", …
    latency_s: float | None = None
    process_alive: bool | None = None  # the process lives while its health check fails: incident 5
    expected: bool = True  # False: no evidence of a server for this run (e.g. TRL's colocated generation): not "down"
    evidence: tuple[str, ...] = ()  # why a server is expected, or why none is
    seen_up: bool = False  # this rlwatch saw it healthy once: its down_since is when it saw it go, not a first look


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    path: str
    global_step: int | None
    epoch: int | None
    epoch_step: int | None
    saved_at: float | None
    size_bytes: int | None
    # The framework's own pointer to it, when it keeps one (verl's latest_checkpointed_iteration.txt, DeepSpeed's
    # `latest`): that file, not the newest folder, is what a resume starts from.
    tracker: str | None = None


@dataclass(frozen=True, slots=True)
class CheckpointState:
    latest: CheckpointInfo | None
    count: int
    steps: tuple[int, ...] = ()  # global steps of the checkpoints of the latest's series, ascending


@dataclass(frozen=True, slots=True)
class RecoverState:
    """AReaL's recover info (last completed step, 0-based) and where a resume starts."""

    path: str
    epoch: int
    epoch_step: int
    global_step: int
    steps_per_epoch: int
    resume_epoch: int
    resume_epoch_step: int
    resume_global_step: int
    saved_at: float | None = None


@dataclass(frozen=True, slots=True)
class TrainingState:
    last_step: int | None
    total_steps: int | None
    reward: float | None
    steps_per_hour: float | None
    stalled: bool
    last_step_at: float | None
    last_line_at: float | None  # any log line at all
    rewards: tuple[float, ...] = ()  # recent reward trend
    weight_update_s: tuple[float, ...] = ()  # recent weight-update durations
    weight_update_timeout_s: float | None = None
    finished: bool = False
    knobs: dict[str, str] = field(default_factory=dict)  # key training-config values
    # what steps_per_hour comes from: "lines" (the step lines' times), "bar" (the speed the run's own progress bar
    # printed: tqdm's it/s or s/it, where the lines carry no time); None with no rate
    rate_from: str | None = None
    # which field the step was read from, as the report and the panel say it ("`it`", "a bar's i/N", "AReaL's `Train
    # step N/M`"); None with no step
    step_source: str | None = None
    # seconds between the records that moved the step on, over the same lines as the rate: a run printing one line
    # every 200 steps prints one every 200 steps' time, however fast each step is
    record_interval_s: float | None = None

    @property
    def step_interval_s(self) -> float | None:
        """Seconds a step takes at its rate, where a rate is known."""
        return 3600.0 / self.steps_per_hour if self.steps_per_hour and self.steps_per_hour > 0 else None

    @property
    def cadence_s(self) -> float | None:
        """The quiet every hang rule measures by: the longer of a step's time and the time between the records that
        show steps (a step rate alone made a run logging every 200 iterations 'hung' a minute after each record)."""
        known = [x for x in (self.step_interval_s, self.record_interval_s) if x is not None]
        return max(known) if known else None


@dataclass(frozen=True, slots=True)
class DiskState:
    path: str
    free_bytes: int | None
    total_bytes: int | None
    inodes_free: int | None = None  # statvfs f_favail: files that can still be created
    inodes_total: int | None = None


@dataclass(frozen=True, slots=True)
class LogEnding:
    """How one log ends (its newest lines): in a failure, in its own words, or not (rlwatch/logs/ending.py)."""

    path: str
    failed: bool
    last_line: str  # the last meaningful line
    last_lineno: int | None = None  # None: the line's number is not known (the lines before it are not counted)
    last_at: float | None = None  # that line's own time, when it carries one
    mtime: float | None = None  # when the file was last written
    progress_lineno: int | None = None  # the last line that showed progress
    progress_line: str | None = None
    # When it ended in a failure:
    title: str = ""  # the headline line: the failure a person names
    kind: str | None = None  # exception | error | exit | signal | kernel
    exc_type: str | None = None
    lineno: int | None = None
    first: str | None = None  # the first failure line after the last progress, when another line than the title
    first_lineno: int | None = None
    at: float | None = None  # the failure's own time, when its lines carry one
    signal: str | None = None  # SIGKILL …, from a launcher's report or a shell
    code: int | None = None  # exit code as reported
    pid: int | None = None
    detail: str | None = None  # Ray's worker exit type, the kernel report's subject
    evidence: tuple[tuple[int | None, str], ...] = ()  # (line number, text) of the lines it rests on
    count: int = 0  # failure-shaped lines after the last progress
    from_outside: bool = (
        False  # every failure line is a stop from outside (SIGTERM, SIGINT, Ctrl-C), no error of its own
    )


@dataclass(frozen=True, slots=True)
class ProcessStack:
    """One process's Python stack as py-spy read it: its main thread, innermost frame first."""

    pid: int
    label: str  # "rank 1", "trainer (pid 812)"
    frames: tuple[str, ...]  # "all_reduce (distributed_c10d.py:2501)", innermost first
    where: str  # where it stands: its innermost function and the run's own frame that led there
    threads: int
    error: str | None = None  # why it could not be read


@dataclass(frozen=True, slots=True)
class StackReport:
    """Every rank's stack at one moment, grouped by where each stands (rlwatch/sources/stacks.py)."""

    taken_at: float
    why: str  # "hang declared", "asked from the dashboard", …
    processes: tuple[ProcessStack, ...]
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # (where, labels), the largest group first
    summary: str  # "ranks 0, 2, 3 in generate (rollout.py:88); rank 1 in all_reduce (train.py:30)"
    path: str | None  # where the whole dump is kept
    error: str | None = None  # why none could be read (py-spy missing, ptrace not permitted)


@dataclass(frozen=True, slots=True)
class StackSample:
    """One read of one process's main thread while the run lives (rlwatch/sources/sampler.py)."""

    at: float  # wall time of the read
    frames: tuple[str, ...]  # "all_reduce (distributed_c10d.py:2501)", innermost first
    where: str  # its innermost function and the run's own frame that led there
    wait: str | None  # the wait it stands in ("all_reduce", "socket recv", "sleep", …), None: not a known wait
    collective: bool  # that wait is a collective (all_reduce, barrier, broadcast, a process group's wait)
    blocked: bool | None  # its main thread used no CPU and never woke since the previous read; None: first read
    stage: str | None = None  # generation, reward, training, weight sync: where the frames tell


@dataclass(frozen=True, slots=True)
class SampledProcess:
    """One process of the run and its recent stacks, oldest first (bounded), known by (pid, create_time)."""

    pid: int
    create_time: float
    label: str  # "rank 1", "trainer (pid 812)"
    rank: int | None
    samples: tuple[StackSample, ...]
    error: str | None = None  # why its latest read failed
    alive: bool = True


@dataclass(frozen=True, slots=True)
class StackSampling:
    """The stacks sampled while the run lives: every process's recent history, and what the sampling costs."""

    available: bool
    reason: str | None  # why not available (py-spy missing, ptrace refused), one line
    method: str  # "py-spy dump --nonblocking"
    interval_s: float  # the cadence now: the configured one, or longer to stay within the CPU budget
    cpu_fraction: float | None  # measured CPU the sampling costs, as a fraction of one core
    processes: tuple[SampledProcess, ...] = ()


@dataclass(frozen=True, slots=True)
class RankTime:
    """Where one rank spent its time over the straggler window, from its sampled stacks (engine/diagnosis/stacks)."""

    label: str  # "rank 1"
    collective_share: float  # share of its reads standing in a collective (0 to 1)
    reads: int
    straggler: bool  # the others wait for it
    gpu_util: float | None = None  # its GPU's utilisation (%), where the GPU it holds is known


@dataclass(frozen=True, slots=True)
class RunState:
    """What the run is doing, and the evidence for it. "progressing" and "finished" are the only healthy states:
    health is shown by progress, never by the absence of a known failure."""

    state: RunStateName
    why: str  # one line: the evidence, in words
    since: float | None = None  # when it came to be so, where known
    evidence: tuple[str, ...] = ()  # the lines it rests on, each with where it is ("train.log:812: …")

    @property
    def healthy(self) -> bool:
        return self.state in ("progressing", "finished")


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    code: FindingCode  # one of vocab.FINDING_CODES (or an Xid's, vocab.xid_code)
    message: str
    since: float | None
    # What fixes it, said by every view in its own words: an action (a key on the dashboard, ``rlwatch act ACTION``
    # elsewhere) or, when no action does, the command that does (``rlwatch act rearm``); None when neither does.
    action: str | None = None
    command: str | None = None
    # Where neither a key nor a command fixes it, what does, in a few words the banner keeps whole ("drain the node").
    fix: str | None = None

    def fix_command(self) -> str | None:
        """The shell command that fixes it, if any: the action's ``rlwatch act`` line, or the command."""
        return f"rlwatch act {self.action}" if self.action else self.command


@dataclass(frozen=True, slots=True)
class Verdict:
    """The run's state, its worst finding and the one remedy for it, decided once per snapshot from what is alive
    (:mod:`rlwatch.engine.diagnosis.verdict`). Every view renders this record; none derives a state, a status or a
    remedy of its own, so no two of them can disagree about a run."""

    status: StatusName
    state: RunStateName
    why: str  # the state in words: the headline's when a finding names the cause
    since: float | None = None
    finding: FindingCode | None = None  # the headline finding's code (the worst, a restart loop first); None: none
    message: str | None = None  # its message
    action: str | None = None  # the one remedy: an action (a key on the dashboard, ``rlwatch act ACTION``)…
    command: str | None = None  # …or, when no action fixes it, the command that does
    fix: str | None = None  # …or, when neither does, what does in a few words ("drain the node")
    next_step: str | None = None  # what to do next, in words (where no key or command does it, what does)
    step: int | None = None  # the run's step, from the best evidence
    step_from: str | None = None  # "log" (the log's own counter or bar) | "checkpoint"
    steps: tuple[tuple[str, str], ...] = ()  # (finding code, what to do) said for what is alive now, headline first
    resume_held: bool = False  # a restart loop is suspected or named: no view offers a resume, in no words

    def fix_command(self) -> str | None:
        return f"rlwatch act {self.action}" if self.action else self.command


@dataclass(frozen=True, slots=True)
class KernelLogState:
    """The kernel's word on this machine (:mod:`rlwatch.sources.kernel`): which log could be read, and what it
    said that matters here."""

    source: str  # "kmsg" | "journalctl" | "dmesg" | "files" | "none" (what the live log came from)
    available: bool  # some kernel log (live, or saved beside the run) could be read
    error: str | None = None  # why the live kernel log could not be read (one line), None when it could
    events: tuple[HostEvent, ...] = ()  # oldest first, bounded
    files: tuple[str, ...] = ()  # saved kernel logs read from the run directory


@dataclass(frozen=True, slots=True)
class MemlockLimit:
    """RLIMIT_MEMLOCK of one of the run's processes (from /proc/PID/limits)."""

    pid: int
    name: str  # the process's name in rlwatch ("trainer", "server")
    soft_bytes: int | None  # None: unlimited


@dataclass(frozen=True, slots=True)
class HostLimits:
    """The pod's limits that kill runs before their code does (:mod:`rlwatch.sources.limits`): /dev/shm against
    what the run's frameworks need, locked memory where RDMA is in use."""

    shm_path: str
    shm_total_bytes: int | None
    shm_free_bytes: int | None
    frameworks: tuple[str, ...] = ()  # the run's frameworks using /dev/shm: "vllm", "sglang", "nccl", "ray", "pytorch"
    rdma: str | None = None  # why RDMA/InfiniBand is thought in use ("/sys/class/infiniband: mlx5_0"), None: not
    memlock: tuple[MemlockLimit, ...] = ()
    simulated: bool = False  # the shm size is the simulator's, not statvfs's


@dataclass(frozen=True, slots=True)
class MetricPoint:
    step: int  # the training step it was logged at (the ordinal of the logged metrics when no step is printed)
    value: float  # may be NaN or ±inf: that is what is looked for
    time: float  # NaN when the line had no time of its own


@dataclass(frozen=True, slots=True)
class LearningState:
    """The run's own learning metrics as its logs print them (:mod:`rlwatch.logs.learning`), canonical names:
    loss, grad_norm, reward, kl, entropy, response_length, clip_ratio. The diagnosis judges them."""

    series: dict[str, tuple[MetricPoint, ...]] = field(default_factory=dict)  # oldest first, bounded
    keys: dict[str, str] = field(default_factory=dict)  # canonical name -> the key the log printed
    steps_exact: bool = True  # False: steps are ordinals of logged metrics (TRL prints no step number)


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    time: (
        float  # exact; or, ``approximate``, the earliest it can be (-inf: unknown), ``by`` the latest (None: unbounded)
    )
    text: str
    approximate: bool = False
    by: float | None = None


@dataclass(frozen=True, slots=True)
class Series:
    """A time series for graphs: parallel tuples, oldest first."""

    times: tuple[float, ...] = ()
    values: tuple[float | None, ...] = ()


@dataclass(frozen=True, slots=True)
class History:
    gpu_util: dict[int, Series] = field(default_factory=dict)
    gpu_mem: dict[int, Series] = field(default_factory=dict)  # percent of total
    ram_used: Series = field(default_factory=Series)  # percent of total
    swap_used: Series = field(default_factory=Series)  # percent of total
    rss: dict[str, Series] = field(default_factory=dict)  # by process name, bytes


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Health of one source, so stale data never looks healthy."""

    name: str
    ok: bool
    last_sample: float | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class GaveUp:
    """A target the watchdog stopped acting on: its restart budget is spent and a person must re-arm it."""

    target: str  # the budget's key, e.g. "restart-workers:worker-1"
    reason: str  # e.g. "3 restarts in 12 min (budget: 3 per 30 min)"
    since: float | None


@dataclass(frozen=True, slots=True)
class NotifyStatus:
    """Whom the watchdog tells, and when it last did: its targets (redacted), last message and heartbeat ping."""

    targets: tuple[str, ...]  # as shown: a configured name or ``tgram://***``, never the URL
    last_sent_at: float | None = None
    last_message: str | None = None  # the title of the last message delivered
    error: str | None = None  # deliveries failing now (one line), None when they work
    heartbeat: str | None = None  # the dead man's switch URL, redacted; None when none is configured
    heartbeat_at: float | None = None  # the last ping that was answered
    heartbeat_error: str | None = None


@dataclass(frozen=True, slots=True)
class WatchdogStatus:
    """The headless watchdog (`rlwatch watch`) of this run, read from its state file and checked against /proc."""

    running: bool  # its process is alive (pid and start time match the state file)
    pid: int | None
    since: float | None  # when it started
    heartbeat_age_s: float | None
    stale: bool = False  # alive, but its heartbeat is older than it promised: it is stuck
    stopped: float | None = None  # when it stopped cleanly (None: running, or it died without a word)
    gave_up: tuple[GaveUp, ...] = ()
    last_action: str | None = None  # one line about the latest action it took
    last_action_at: float | None = None
    notify: NotifyStatus | None = None  # None: it sends no notifications and pings no heartbeat
    reading_backlog: tuple[int, int] | None = None  # (bytes read, bytes): it acts on nothing until it is read
    # What the run is doing as the watchdog, which reads its logs live (each line timed as it comes), sees it:
    # (state, why, since). Evidence another view can lean on where its own lines carry no time (a one-shot report).
    run_state: tuple[RunStateName, str, float | None] | None = None
    straggler: str | None = None  # the straggler finding its stacks, sampled live, name (a one-shot report has none)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One launch of the run (a launcher and its descendants, or the ranks a lost launcher left): the live one, or an
    earlier one whose processes still run beside it (see :mod:`rlwatch.sources.membership`)."""

    pids: tuple[int, ...]  # its processes alive now
    current: bool  # the live run
    started_at: float
    launcher_pid: int | None  # None: not known (a launcher gone before rlwatch looked, and not its group's leader)
    launcher: str | None = None  # its command name, where rlwatch saw it ("torchrun")
    launcher_alive: bool = True
    launcher_gone_at: float | None = None  # when rlwatch saw it go; None: gone before rlwatch looked (or alive)
    orphaned: str | None = None  # why it lost its launcher, in words
    writes: tuple[str, ...] = ()  # what its processes write under the run directory
    last_write_at: float | None = None  # when one of its write positions last moved, as rlwatch saw it
    gpus: tuple[int, ...] = ()  # the GPUs its processes hold
    gpu_mem_bytes: int | None = None  # what they hold there (NVML), None where unknown
    stray: str | None = None  # why its processes are strays now (it stopped writing; the new run failed "busy")


@dataclass(frozen=True, slots=True)
class LiveRun:
    """What rlwatch found to be the live run, and on what evidence (see :mod:`rlwatch.sources.membership`)."""

    identified: bool
    why_unknown: str | None  # what was looked for, when nothing was found
    started_at: float | None  # the oldest process with core evidence
    members: tuple[tuple[int, str], ...] = ()  # (pid, how it was recognised), core evidence first
    weak: tuple[int, ...] = ()  # members only by working in or reading the run directory (a `tail -f` does that)
    # Members found at the last look that are gone now (pid, how they were recognised): the run died since.
    gone: tuple[tuple[int, str], ...] = ()
    looked_at: float | None = None  # when rlwatch last looked for the run's processes (wall time)
    attempts: tuple[Attempt, ...] = ()  # the run's launches, oldest first: more than one when an earlier one lives on


@dataclass(frozen=True, slots=True)
class RayActor:
    """One Ray actor of the run, from Ray's State API or from what Ray printed about it (rlwatch/logs/ray.py)."""

    class_name: str  # WorkerDict, TaskRunner, PolicyModelActor, …
    pid: int | None
    name: str | None = None  # the actor's name when it has one (verl: "7qbikuWorkerDict_0:1")
    actor_id: str | None = None
    node_ip: str | None = None
    node_id: str | None = None
    job_id: str | None = None
    state: str | None = None  # ALIVE, DEAD, RESTARTING, PENDING_CREATION … (None: only the logs spoke of it)
    reason: str | None = None  # why it died: WORKER_DIED, OWNER_DIED, NODE_DIED, RAY_KILL, OUT_OF_SCOPE, OOM, …
    exit_type: str | None = None  # Ray's worker exit type: SYSTEM_ERROR, USER_ERROR, INTENDED_USER_EXIT, …
    detail: str | None = None  # Ray's words about its death (first sentences)
    source: str = "logs"  # "State API", or the file and line it was read from

    @property
    def label(self) -> str:
        """``WorkerDict 7qbikuWorkerDict_0:1 (pid 20101, node 192.0.2.2)``."""
        name = f" {self.name}" if self.name and self.name != self.class_name else ""
        where = [f"pid {self.pid}" if self.pid else "", f"node {self.node_ip}" if self.node_ip else ""]
        inside = ", ".join(w for w in where if w)
        return f"{self.class_name}{name}" + (f" ({inside})" if inside else "")


@dataclass(frozen=True, slots=True)
class RayMemoryKill:
    """Ray's memory monitor killing workers: its own numbers, as the raylet reported them."""

    killed: int
    node_ip: str | None
    used_gb: float | None
    limit_gb: float | None
    fraction: float | None  # used / limit as Ray printed it
    reason: str | None = None  # "Memory usage 4245704704B exceeded threshold of 4229319936B (16.7% of … limit)"
    victims: tuple[tuple[str, int | None, float | None], ...] = ()  # (task name, pid, GB used) of each killed worker


@dataclass(frozen=True, slots=True)
class RayFailure:
    """How a Ray-based run ended (or an earlier attempt of it did): which actor, worker or node died, its pid and
    node, and why, with the lines it rests on."""

    # actor_died | task_error | memory_monitor | node_died | creation_failed | actor_unavailable | cluster_unreachable
    # | job_failed | job_stopped
    kind: str
    cause: str  # one line: why, in Ray's and the kernel's terms
    title: str  # the driver's last exception line (or Ray's job status line)
    actor: RayActor | None = None  # the actor at the root of it, when known
    exception: str | None = None  # the exception the actor's own code raised ("RuntimeError: …")
    memory: RayMemoryKill | None = None
    node: str | None = None  # a node that died: what Ray said of it
    step: int | None = None  # the last step the attempt logged before it
    path: str | None = None  # where it was read (the driver's log)
    lineno: int | None = None
    at: float | None = None  # when, from Ray's own timestamped logs (raylet, GCS), where known
    current: bool = True  # False: a later attempt (a relaunch) got past it: history
    evidence: tuple[str, ...] = ()  # the lines it rests on, each with where it is


@dataclass(frozen=True, slots=True)
class RayState:
    """What Ray says of the run: its session's logs, the State API when reachable, its actors, and how it ended."""

    session_logs: str | None  # Ray's session log directory read (``/tmp/ray/session_latest/logs``)
    dashboard: str | None  # the dashboard's address the State API was asked at
    api: str | None  # None: the State API answered; else why it was not used ("not reachable: …"), one line
    actors: tuple[RayActor, ...] = ()  # the run's actors, alive and dead
    failure: RayFailure | None = None  # how the latest attempt ended, when it failed (or was stopped)
    history: tuple[RayFailure, ...] = ()  # failures of earlier attempts that a relaunch got past
    dead_nodes: tuple[str, ...] = ()  # "192.0.2.2 (id c13dfc4f…): Unexpected termination: health check failed …"
    driver_logs: tuple[str, ...] = ()  # the logs read as the Ray driver's output
    last_step: int | None = None  # the last step the latest attempt logged


@dataclass(frozen=True, slots=True)
class GpuActivity:
    """One GPU's draw at one read: what tells a GPU that computes longer each step from one that waits in NCCL
    (both read 100 % busy: NCCL's kernels spin while they wait, at a fraction of the power)."""

    at: float  # wall time
    power_w: float | None
    sm_clock_mhz: float | None
    util: float | None


@dataclass(frozen=True, slots=True)
class CollectiveOp:
    """One collective as one rank saw it: from a watchdog line or a flight recorder entry."""

    rank: int
    pg: str  # the process group's id ("0" for the default group)
    seq: int  # its collective sequence number in that group
    op: str  # "all_reduce", "broadcast", … (logs/collectives.op_name)
    numel_in: int | None  # elements in (a watchdog line), or the sum of the input shapes (a flight record)
    numel_out: int | None
    where: str  # "train.log:812", "nccl_trace_rank_0 entry 13"
    state: str | None = None  # a flight record's "scheduled" | "started" | "completed"; a watchdog line: "timed out"
    sizes: str | None = None  # the shapes as recorded ("[[4194304]]"), where known
    frame: str | None = None  # the run's own frame that called it ("main (train.py:31)"), where known
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class RankProgress:
    """How far one rank got in one process group: its last enqueued (entered) and completed collectives."""

    rank: int
    pg: str
    last_enqueued: int | None
    last_completed: int | None
    where: str
    last_started: int | None = None


@dataclass(frozen=True, slots=True)
class FlightState:
    """The run's flight recorder dumps as last read (sources/flight), on suspicion only (an NCCL timeout logged, the
    run hung or crashed): every rank's collectives and how far it got."""

    read_at: float
    ops: tuple[CollectiveOp, ...] = ()
    progress: tuple[RankProgress, ...] = ()
    groups: tuple[tuple[str, str], ...] = ()  # (pg id, its name: "default_pg")
    ranks: tuple[int, ...] = ()  # the ranks whose dump was read
    errors: tuple[str, ...] = ()  # dumps that could not be read, one line each
    asked: tuple[str, ...] = ()  # what asking the ranks for a dump through their debug pipe did, one line each


@dataclass(frozen=True, slots=True)
class JobRank:
    """One of this host's ranks of a distributed job."""

    rank: int  # its global rank (RANK)
    local_rank: int | None  # LOCAL_RANK
    gpu: int | None  # the GPU it computes on (the one it holds; among several, its local rank's)
    pid: int  # never exported: the fleet speaks of global ranks


@dataclass(frozen=True, slots=True)
class JobInfo:
    """The distributed job this host's ranks belong to, from their environment (sources/job)."""

    job: str  # "rdzv:exp-42", "ray:02000000", "10.0.0.1:29500"
    launcher: str  # "torchrun" | "ray" | "torch"
    master: str | None  # "10.0.0.1:29500"
    node_rank: int | None  # torchrun's GROUP_RANK
    world_size: int | None
    ranks: tuple[JobRank, ...] = ()


@dataclass(frozen=True, slots=True)
class RasRank:
    """One rank as NCCL's RAS service reports it, job-wide."""

    rank: int
    collectives: int | None  # how many operations it launched (its count in the collective the others differ on)
    node: str | None  # the node NCCL names ("node-b", an address)
    pid: int | None  # its process on that node (as NCCL saw it; another namespace's number)
    gpu: int | None
    status: str  # "ok" | "behind" (fewer operations than the most) | "missing" | "dead"


@dataclass(frozen=True, slots=True)
class RasState:
    """What NCCL's RAS service answered, asked on suspicion only (sources/ras)."""

    asked_at: float
    version: str | None  # the NCCL version the ranks use, where read
    error: str | None  # why it was not asked or did not answer ("NCCL 2.27.3: RAS crashes there"), one line
    ranks: tuple[RasRank, ...] = ()
    operation: str | None = None  # the collective whose counts differ ("AllReduce")
    summary: str | None = None  # the service's own words on what differs, one line


@dataclass(frozen=True, slots=True)
class Snapshot:
    host: str
    time: float
    profile: str
    run_dir: str
    simulated: bool = False
    uptime_s: float | None = None  # container (pid 1) uptime
    run_uptime_s: float | None = None  # trainer/launcher uptime
    events: dict[str, EventSummary] = field(default_factory=dict)
    incidents: tuple[Incident, ...] = ()
    dropped_incidents: tuple[IncidentTally, ...] = ()  # older than the kept ones; () while a backlog is previewed
    training: TrainingState | None = None
    checkpoint: CheckpointState | None = None
    recover: RecoverState | None = None
    server: ServerState | None = None
    gpu: GpuStatus | None = None
    holders: tuple[GpuHolder, ...] = ()
    memory: MemoryState | None = None
    processes: tuple[ProcessInfo, ...] = ()
    disk: DiskState | None = None
    findings: tuple[Finding, ...] = ()
    timeline: tuple[TimelineEntry, ...] = ()
    history: History = field(default_factory=History)
    sources: tuple[SourceStatus, ...] = ()
    logs: tuple[str, ...] = ()  # files being tailed
    # (bytes read, bytes) of the logs' backlog while it is still being read: totals, rates and the timeline are then
    # those of the part read so far. None once it is read.
    backlog: tuple[int, int] | None = None
    # While a big backlog is read, what is *now* (last times, evidence, streaks, incidents, step) comes from its
    # newest part, counted first (engine/preview); this says so, for the header. None otherwise.
    preview: str | None = None
    preview_numbered: bool = True  # False: the preview's line numbers are not known yet (shown as "?")
    watchdog: WatchdogStatus | None = None  # None: no watchdog ever ran for this run
    live_run: LiveRun | None = None  # None: not looked for yet
    profile_evidence: tuple[str, ...] = ()  # why this profile: what discovery saw, or the file that names it
    endings: tuple[LogEnding, ...] = ()  # how each followed log ends (its newest lines)
    # The last progress line of each log (a step, a step-like or progress-bar line, a checkpoint): where it stands
    # and its time (its own, or when it was read live), so a failure below it in the same log is never "before" it.
    progress_lines: tuple[LogLine, ...] = ()
    run_state: RunState | None = None  # what the run is doing, from evidence (engine/diagnosis/health)
    stacks: StackReport | None = None  # the run's processes' stacks, when last read (a hang, a person asking)
    sampling: StackSampling | None = None  # the stacks sampled while the run lives (sources/sampler); None: not run
    rank_times: tuple[RankTime, ...] = ()  # where each rank spent its time over the straggler window
    kernel: KernelLogState | None = None  # None: not read (yet)
    limits: HostLimits | None = None  # None: not read (yet)
    learning: LearningState | None = None  # None: no learning metric seen
    ray: RayState | None = None  # a Ray-based run (verl, OpenRLHF): what Ray says of it (sources/ray)
    verdict: Verdict | None = None  # state, headline and remedy, decided once (engine/diagnosis/verdict)
    # Each GPU's draw over the GPU-bound straggler's window (power, SM clock, utilisation), oldest first.
    gpu_activity: dict[int, tuple[GpuActivity, ...]] = field(default_factory=dict)
    job: JobInfo | None = None  # the distributed job this host's ranks belong to; None: no rank of one seen
    flight: FlightState | None = None  # the ranks' flight recorder dumps; None: not read (nothing suspicious)
    ras: RasState | None = None  # NCCL's RAS service's answer; None: not asked

    @property
    def gpus(self) -> tuple[GpuState, ...]:
        return self.gpu.gpus if self.gpu else ()

    def polled(self, source: str) -> bool:
        """``source`` was looked at for this snapshot: the engine's loops run side by side, and one may publish
        before another has begun."""
        return any(s.name == source for s in self.sources)

    @property
    def logs_read(self) -> bool:
        """The logs were polled and what they held when opened is read, no preview left: counts are totals."""
        return self.backlog is None and self.preview is None and self.polled("logs")

    @property
    def zombies(self) -> tuple[GpuHolder, ...]:
        """GPU holders with positive reasons to be strays: the only ones a key or a policy may stop."""
        return tuple(h for h in self.holders if h.status == "stray")

    @property
    def unknown_holders(self) -> tuple[GpuHolder, ...]:
        """GPU holders outside the live run that rlwatch cannot classify: never stopped unless a person names them."""
        return tuple(h for h in self.holders if h.status == "unknown")

    @property
    def worst(self) -> Severity | None:
        if not self.findings:
            return None
        return min((f.severity for f in self.findings), key=lambda s: s.rank)


@dataclass(frozen=True, slots=True)
class TaggedLine:
    """One log line for the log view: already cleaned of control sequences, tagged with the event kinds it matched."""

    seq: int  # increasing across all files, so a view can ask for "everything after seq"
    path: str
    lineno: int
    text: str
    kinds: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ActionTarget:
    """One process an action will signal or start, with what a person needs to judge it."""

    pid: int | None  # None for a process still to be started
    create_time: float | None
    user: str | None
    age_s: float | None
    cmdline: tuple[str, ...]
    gpu_mem_bytes: int | None = None
    role: str | None = None
    reason: str | None = None  # why it is a target ("stray: orphaned (parent is pid 1)")
    named: bool = False  # a person named this pid (kill-zombies --pid): the only way an unknown holder is a target


@dataclass(frozen=True, slots=True)
class ActionPlan:
    """What an action would do. Built by the core; shown by the confirmation dialog; executed only after a yes."""

    action: str  # "restart-workers" | "kill-zombies" | "resume" | "restart-server"
    targets: tuple[ActionTarget, ...]
    steps: tuple[str, ...]  # plain words, in order
    refused: str | None = None  # why it cannot run (readonly, trainer alive, nothing to do…)
    start: tuple[ActionTarget, ...] = ()  # what will be started afterwards

    @property
    def runnable(self) -> bool:
        return self.refused is None


@dataclass(frozen=True, slots=True)
class ActionResult:
    action: str
    ok: bool
    message: str  # one plain line for the dashboard and the command line
    details: tuple[str, ...] = ()
