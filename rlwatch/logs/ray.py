"""What Ray prints about a run: its drivers' output, its C++ components' logs, its State API's answers.

Every wording here is Ray 2.60.0's, seen in the real runs kept in ``tests/real/ray`` (SOURCES.md quotes each with
where it comes from), and verl's and OpenRLHF's lines as those frameworks print them:

- The driver's output (verl's ``python -m verl.trainer.main_ppo … | tee``, or what ``ray job submit`` prints while it
  tails a job, also kept by Ray as ``job-driver-raysubmit_….log``): actors' lines forwarded with ``(Class pid=N,
  ip=IP)``, the raylet's with ``(raylet)``; the driver's own traceback ending in a ``ray.exceptions`` error (a
  ``RayTaskError(X): ray::Class.method() (pid=…, ip=…, actor_id=…)`` per hop, Ray's tab-indented ``ActorDiedError``
  block, the memory monitor's ``OutOfMemoryError`` with its numbers), the raylet's ``A worker died or was killed …
  Worker PID: N Worker exit type: T``, a node marked dead, ``ray job submit``'s ``Job '…' failed``.
- The raylet's and the GCS's own logs (``raylet.out``, ``gcs_server.out``: ``[YYYY-MM-DD HH:MM:SS,mmm L PID TID]
  (component) file.cc:N: …``): which worker process had which pid, when a worker was disconnected or killed by the
  memory monitor, when a node was marked dead.
- The State API's actors (``/api/v0/actors?detail=1`` or ``ray.util.state.list_actors(detail=True)``): each actor's
  state and ``death_cause``.

A driver's output is cut into *attempts* (a relaunch appends to the same log): what the latest attempt ended in is
the run's failure, earlier attempts' failures are history. The driver's stdout is usually a pipe, so Python buffers
it: the actors' last lines reach the file *after* the driver's own traceback (which goes to stderr unbuffered). Lines
after the traceback are therefore not progress after the failure; only a new attempt is.

Nothing here reads files or raises on odd text: the functions take lines and return records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from rlwatch.common.state import RayActor, RayFailure, RayMemoryKill
from rlwatch.common.textsafe import clean_line, strip_ansi
from rlwatch.logs.timestamps import parse_time

__all__ = [
    "ACTOR_PREFIX",
    "DriverAttempt",
    "DriverLog",
    "RayLogFacts",
    "actors_from_state",
    "attempt_failure",
    "exit_meaning",
    "failures",
    "last_exception_line",
    "load_json",
    "looks_like_ray_driver",
    "nodes_from_state",
    "parse_driver",
    "parse_ray_logs",
    "state_rows",
    "task_actor",
]

# `(TaskRunner pid=20063) `, `(WorkerDict pid=616, ip=192.168.149.159) `, `(pid=12) ` (ray/_private/worker.py,
# print_worker_logs; the name is the actor's class, or its __repr__, or a task's name).
ACTOR_PREFIX = re.compile(r"^\((?:(?P<name>[^()]*?) )?pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s]+))?\) ?")
RAYLET_PREFIX = re.compile(r"^\(raylet(?:, ip=(?P<ip>[^)\s]+))?\) ?")
# A Python exception line of the driver's own traceback.
_EXC_LINE = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:\([\w.]+\))?): ?(?P<msg>.*)$")
_EXC_WORD = re.compile(r"(?:Error|Exception|Exit|Interrupt|Failure|Fault)(?:\(|$)|^KeyboardInterrupt$")
# `ray::TaskRunner.run() (pid=18431, ip=192.0.2.2, actor_id=c4b2…01000000, repr=<…>)` (RayTaskError.__str__).
_HOP = re.compile(
    r"ray::(?P<cls>[A-Za-z_][\w]*)(?:\.(?P<method>[\w]+))?\(\)\s*\(pid=(?P<pid>\d+)"
    r"(?:, ip=(?P<ip>[^,)\s]+))?(?:, actor_id=(?P<actor>[0-9a-f]+))?"
)
# Ray's ActorDiedError context lines: `\tclass_name: WorkerDict` (ray/exceptions.py, ActorDiedError.__init__).
_FIELD = re.compile(r"^\t(?P<key>class_name|actor_id|pid|name|namespace|ip): ?(?P<value>.*)$")
_DEAD_BECAUSE = re.compile(r"^The actor (?:is dead because|died because its node)")
EXIT_TYPE = re.compile(r"Worker exit type: (\w+)")  # also read by rlwatch.logs.shapes
_EXIT_DETAIL = re.compile(r"Worker exit detail: (.*?)(?: Some common causes include|$)")
_OWNER_EXIT = re.compile(r"Owner worker exit type: (\w+)")
# The memory monitor (raylet binary strings): `2 worker(s) were killed due to the node running low on memory.
# Memory on the node (IP: 192.0.2.2, ID: …) was 3.98GB used / 23.59GB limit (0.168932)`.
_OOM = re.compile(
    r"(?P<n>\d+) worker\(s\) were killed due to the node running low on memory\."
    r"(?: Memory on the node \(IP: (?P<ip>[^,\s]+), ID: (?P<id>\w+)\) was (?P<used>[\d.]+) ?GB used / "
    r"(?P<limit>[\d.]+) ?GB limit \((?P<frac>[\d.]+)\))?"
)
OOM_OLD = re.compile(  # also read by rlwatch.logs.shapes
    r"Task was killed due to the node running low on memory|Ray killed this worker"
)
_OOM_REASON = re.compile(r"^OOM kill reason: (.*)")
_VICTIM = re.compile(
    r"Selected to kill: \((?:Actor|Task|Worker)?\(?[^)]*\)?:?.*?task name=(?P<task>[^,]+),.*?\bpid=(?P<pid>\d+)"
    r"(?:, actual memory used=(?P<gb>[\d.]+)GB)?"
)
# The raylet's message when a worker dies mid-task (raylet binary): one line, fields in this order.
_WORKER_DIED = "A worker died or was killed while executing a task"
_WORKER_PID = re.compile(r"Worker PID: (\d+)")
_WORKER_IP = re.compile(r"Worker IP address: (\S+)")
_WORKER_ID = re.compile(r"Worker ID: ([0-9a-f]+)")
_NODE_MARKED_DEAD = re.compile(
    r"The node with node id: (?P<id>\w+) and address: (?P<ip>\S+)(?: and node name: \S+)? has been marked dead "
    r"because (?P<why>.*?)(?: This can happen when|$)"
)
_RAYLET_TERMINATED = "Raylet is terminated. Termination is unexpected."
_AGENT_FAILED = re.compile(r"The raylet exited immediately because one Ray agent failed, agent_name = (\w+)")
_UNAVAILABLE = re.compile(r"The actor (?P<actor>[0-9a-f]+) is unavailable: (?P<why>.*?)(?: The task may or may not|$)")
_CREATION = "The actor died because of an error raised in its creation task"
# The driver could not reach the cluster (ray/_private/worker.py, services.py): a relaunch after the node died.
_UNREACHABLE = re.compile(r"Failed to connect to Ray cluster at (\S+?)\.?$|No node info found matching")
# `ray job submit` (dashboard/modules/job/cli.py): `Job 'raysubmit_…' submitted successfully`, `… failed`, `… was
# stopped`, `… succeeded`, and `Status message: Job entrypoint command failed with exit code 1, …`.
_JOB = re.compile(r"Job '(?P<id>[^']+)' (?P<what>submitted successfully|failed|was stopped|succeeded)")
_JOB_STATUS = re.compile(r"Status message: (?P<msg>.*?)(?:, last available logs|$)")
# Where a new attempt of the run begins (the driver starts again): verl's first line, Ray's own at ray.init().
_STARTS = (
    "ray init kwargs:",  # verl/trainer/main_ppo.py run_ppo
    "Started a local Ray instance",  # ray/_private/worker.py
    "Connecting to existing Ray cluster at address",
)
# Progress: verl's console logger `step:N - key:value - …` (verl/utils/logger/aggregate_logger.py; step:0 is the
# validation before training), OpenRLHF's `✨ Global step N: {…}` (openrlhf/trainer/ppo_trainer.py, v0.9+).
_VERL_STEP = re.compile(r"^step:(\d+) - ")
_ORLHF_STEP = re.compile(r"Global step (\d+): \{")
_VERL_TOTAL = re.compile(r"^Total training steps: (\d+)")
_VERL_BAR = re.compile(r"Training Progress:\s+\d+%\|[^|]*\| *(\d+)/(\d+) \[")
_RESUMED = re.compile(r"^Setting global step to (\d+)")  # verl ray_trainer._load_checkpoint
_FOUND_CKPT = re.compile(r"^(?:Found checkpoint: (?:%s )?|Load from checkpoint folder: |Loading the checkpoint: )(\S+)")
_FINISHED = ("Final validation metrics",)  # verl fit(), printed once the last step is done

MAX_TEXT = 300


def _short(text: str, limit: int = MAX_TEXT) -> str:
    text = clean_line(text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _sentences(text: str, limit: int = 240) -> str:
    """Ray's messages run on with advice; keep their first sentences."""
    text = text.strip()
    for marker in (
        " Some common causes include",
        " To troubleshoot",
        " Refer to the documentation",
        " This can happen",
    ):
        cut = text.find(marker)
        if cut > 0:
            text = text[:cut]
    return _short(text, limit)


@dataclass
class _Died:
    """An ActorDiedError block being read."""

    lineno: int
    message: str
    fields: dict[str, str] = field(default_factory=dict)
    because: str | None = None


@dataclass
class DriverAttempt:
    """One run of the driver in its log: from its first line to the next start."""

    start: int | None  # line number of its first line (None: before the part of the log read)
    steps: list[tuple[int, int]] = field(default_factory=list)  # (line number, step)
    total: int | None = None
    resumed_from: int | None = None  # verl's "Setting global step to N"
    resume_path: str | None = None
    finished: bool = False
    job: str | None = None  # raysubmit id
    job_status: str | None = None  # "failed" | "was stopped" | "succeeded"
    job_message: str | None = None
    last_exception: tuple[int, str] | None = None  # (line, text): the driver's last exception line
    user_exception: tuple[int, str] | None = None  # the first non-Ray exception after the last RayTaskError hop
    hops: list[tuple[int, RayActor, str]] = field(default_factory=list)  # RayTaskError hops: (line, actor, type)
    died: list[_Died] = field(default_factory=list)
    oom: tuple[int, RayMemoryKill] | None = None
    oom_reason: str | None = None
    victims: list[tuple[str, int | None, float | None]] = field(default_factory=list)
    worker_died: list[tuple[int, str]] = field(default_factory=list)  # the raylet's line(s)
    node_dead: list[tuple[int, str]] = field(default_factory=list)
    raylet_terminated: int | None = None
    unavailable: tuple[int, str, str] | None = None  # (line, actor id, why)
    creation: tuple[int, RayActor, str] | None = None  # an actor's own "Exception raised in creation task"
    actor_exceptions: dict[int, tuple[int, str]] = field(default_factory=dict)  # pid -> its last exception line
    interrupted: int | None = None  # KeyboardInterrupt / SIGTERM of the driver
    unreachable: tuple[int, str] | None = None  # the driver could not connect to the cluster
    lines: int = 0

    @property
    def last_step(self) -> int | None:
        return self.steps[-1][1] if self.steps else None

    @property
    def failed(self) -> bool:
        ray_exc = self.last_exception is not None and "ray.exceptions." in self.last_exception[1]
        return bool(
            ray_exc
            or self.oom
            or self.died
            or self.hops
            or self.job_status == "failed"
            or self.creation
            or self.unreachable
        )


@dataclass
class DriverLog:
    """What one driver log says: its attempts (oldest first) and the Ray actors its lines name (pid → class, ip)."""

    path: str
    attempts: list[DriverAttempt]
    named: dict[int, tuple[str, str | None]]  # pid → (class name, ip) from `(Class pid=N, ip=…)` prefixes and hops

    @property
    def latest(self) -> DriverAttempt | None:
        return self.attempts[-1] if self.attempts else None


def looks_like_ray_driver(text: str) -> bool:
    """Whether a log's text is a Ray driver's output: actors' forwarded lines, Ray's own, or its exceptions."""
    plain = strip_ansi(text)
    if "ray.exceptions." in plain or "Started a local Ray instance" in plain or "ray init kwargs:" in plain:
        return True
    if "Connecting to existing Ray cluster" in plain or "Tailing logs until the job exits" in plain:
        return True
    return any(ACTOR_PREFIX.match(line) or line.startswith("(raylet) ") for line in plain.splitlines()[:2000])


def _split(line: str) -> tuple[str, int | None, str | None, str]:
    """(who, pid, ip, message) of one line: who is a class name, "raylet", or "" for the driver's own."""
    m = ACTOR_PREFIX.match(line)
    if m is not None:
        return (m.group("name") or "").strip(), int(m.group("pid")), m.group("ip"), line[m.end() :]
    m = RAYLET_PREFIX.match(line)
    if m is not None:
        return "raylet", None, m.group("ip"), line[m.end() :]
    return "", None, None, line


def _hop_actor(m: re.Match[str]) -> RayActor:
    method = m.group("method")
    return RayActor(
        class_name=m.group("cls"),
        pid=int(m.group("pid")),
        actor_id=m.group("actor"),
        node_ip=m.group("ip"),
        job_id=(m.group("actor") or "")[-8:] or None,
        detail=f"in {m.group('cls')}.{method}()" if method else None,
    )


def parse_driver(path: str, lines: Sequence[str], first_lineno: int = 1) -> DriverLog:
    """The attempts and Ray failures in a driver's output (``lines``: the newest part of the log, split as Python's
    universal newlines do, numbered from ``first_lineno``)."""
    attempts: list[DriverAttempt] = [DriverAttempt(start=None if first_lineno > 1 else first_lineno)]
    named: dict[int, tuple[str, str | None]] = {}
    died: _Died | None = None
    in_oom = False
    for i, raw in enumerate(lines):
        lineno = first_lineno + i
        text = strip_ansi(raw).rstrip("\n")
        who, pid, ip, body = _split(text)
        cur = attempts[-1]
        cur.lines += 1
        if pid is not None and who:
            named.setdefault(pid, (who.split(" ")[0], ip))
        stripped = body.strip()
        # An ActorDiedError block: its fields are tab-indented lines, its reason the next line.
        if died is not None:
            if who == "" and (f := _FIELD.match(body)):
                died.fields[f.group("key")] = f.group("value").strip()
                continue
            if who == "" and _DEAD_BECAUSE.match(stripped):
                died.because = stripped
            died = None
        if who == "raylet":
            if _WORKER_DIED in body:
                cur.worker_died.append((lineno, stripped))
            elif m := _NODE_MARKED_DEAD.search(body):
                cur.node_dead.append((lineno, stripped))
            elif _RAYLET_TERMINATED in body or _AGENT_FAILED.search(body):
                cur.raylet_terminated = cur.raylet_terminated or lineno
                cur.node_dead.append((lineno, stripped))
            continue
        if who:  # an actor's own line
            if stripped.startswith("Exception raised in creation task:") and (m := _HOP.search(body)):
                cur.creation = (lineno, _hop_actor(m), stripped)
            elif pid is not None and (m := _EXC_LINE.match(stripped)) and _EXC_WORD.search(m.group("type")):
                cur.actor_exceptions[pid] = (lineno, stripped)
            _progress(cur, stripped, lineno)
            continue
        # The driver's own lines (and tqdm bars split off their prefix at a carriage return).
        if any(stripped.startswith(s) or s in stripped[:200] for s in _STARTS) or _job_submitted(stripped):
            if _has_content(cur):
                attempts.append(DriverAttempt(start=lineno))
                cur = attempts[-1]
            elif cur.start is None:
                cur.start = lineno
        if m := _JOB.search(stripped):
            cur.job = m.group("id")
            if m.group("what") != "submitted successfully":
                cur.job_status = m.group("what")
            continue
        if m := _JOB_STATUS.match(stripped):
            cur.job_message = _short(m.group("msg"))
            continue
        if in_oom:
            if m := _OOM_REASON.match(stripped):
                cur.oom_reason = _short(m.group(1))
            elif m := _VICTIM.search(stripped):
                gb = float(m.group("gb")) if m.group("gb") else None
                cur.victims.append((m.group("task").strip(), int(m.group("pid")), gb))
            elif stripped.startswith("Refer to the documentation"):
                in_oom = False
            if in_oom:
                continue
        if (m := _EXC_LINE.match(stripped)) and not stripped.startswith(("File ", "Traceback")):
            etype, msg = m.group("type"), m.group("msg")
            if not _EXC_WORD.search(etype):
                _progress(cur, stripped, lineno)
                continue
            cur.last_exception = (lineno, stripped)
            if etype.endswith("KeyboardInterrupt"):
                cur.interrupted = lineno
            if etype.startswith("ray.exceptions.RayTaskError") and (h := _HOP.search(msg)):
                cur.hops.append((lineno, _hop_actor(h), etype))
                cur.user_exception = None
            elif etype.endswith("ActorDiedError"):
                died = _Died(lineno, msg)
                cur.died.append(died)
            elif etype.endswith("OutOfMemoryError") and (o := _OOM.search(msg)):
                cur.oom = (lineno, _memory(o))
                in_oom = True
            elif etype.endswith("ActorUnavailableError") and (u := _UNAVAILABLE.search(msg)):
                cur.unavailable = (lineno, u.group("actor"), _short(u.group("why"), 200))
            elif _UNREACHABLE.search(msg):
                cur.unreachable = (lineno, _short(stripped))
            elif not etype.startswith("ray.") and cur.user_exception is None and (cur.hops or cur.died):
                cur.user_exception = (lineno, _short(stripped))
            continue
        if "*** SIGTERM received" in stripped:
            cur.interrupted = lineno
        _progress(cur, stripped, lineno)
    return DriverLog(path, attempts, _named(attempts, named))


def _job_submitted(text: str) -> bool:
    return "submitted successfully" in text and _JOB.search(text) is not None


def _has_content(a: DriverAttempt) -> bool:
    return bool(a.steps or a.failed or a.job_status or a.interrupted or a.finished or a.lines > 200)


def _named(
    attempts: Iterable[DriverAttempt], named: dict[int, tuple[str, str | None]]
) -> dict[int, tuple[str, str | None]]:
    for a in attempts:
        for _, actor, _ in a.hops:
            if actor.pid is not None:
                named.setdefault(actor.pid, (actor.class_name, actor.node_ip))
        for d in a.died:
            cls, pid = d.fields.get("class_name"), d.fields.get("pid", "")
            if cls and pid.isdigit():
                named.setdefault(int(pid), (cls, d.fields.get("ip")))
    return named


def _progress(a: DriverAttempt, text: str, lineno: int) -> None:
    m = _VERL_STEP.match(text) if text.startswith("step:") else None
    if m is None and "Global step " in text:
        m = _ORLHF_STEP.search(text)
    if m is not None:
        a.steps.append((lineno, int(m.group(1))))
    elif "Training Progress:" in text and (m := _VERL_BAR.search(text)):
        a.total = int(m.group(2))
    elif text.startswith("Total training steps: ") and (m := _VERL_TOTAL.match(text)):
        a.total = int(m.group(1))
    elif text.startswith("Setting global step to ") and (m := _RESUMED.match(text)):
        a.resumed_from = int(m.group(1))
    elif (m := _FOUND_CKPT.match(text)) is not None:
        a.resume_path = m.group(1)
    elif any(f in text[:60] for f in _FINISHED):
        a.finished = True


def _memory(m: re.Match[str]) -> RayMemoryKill:
    def num(name: str) -> float | None:
        value = m.group(name)
        return float(value) if value else None

    return RayMemoryKill(
        killed=int(m.group("n")),
        node_ip=m.group("ip"),
        used_gb=num("used"),
        limit_gb=num("limit"),
        fraction=num("frac"),
    )


# ---------------------------------------------------------------------------------------------------------------
# Ray's own logs: raylet.out, gcs_server.out


@dataclass
class RayLogFacts:
    """What the session's C++ logs say (each a time from the line's own stamp)."""

    worker_ids: dict[int, str] = field(default_factory=dict)  # pid → worker id (raylet: Started worker process)
    disconnected: dict[str, float] = field(default_factory=dict)  # worker id → when it was dropped ungracefully
    kills: list[tuple[float | None, str]] = field(default_factory=list)  # the memory monitor's "Killing N worker(s)"
    exits: dict[str, tuple[float | None, str, str]] = field(default_factory=dict)  # worker id → (time, type, detail)
    dead_nodes: list[tuple[float | None, str]] = field(default_factory=list)


_STARTED_WORKER = re.compile(r"Started worker process with pid (\d+) worker_id=([0-9a-f]+)")
_DISCONNECT = re.compile(r"Disconnecting worker, graceful=false.*?worker_id=([0-9a-f]+)")
_KILLING = re.compile(r"Killing (\d+) worker\(s\), kill details: (.*)")
_GCS_EXIT = re.compile(r"Reporting worker exit, worker id = ([0-9a-f]+), .*?exit_type = (\w+), exit_detail = (.*)")
_GCS_NODE_DEAD = re.compile(r"death reason = (\w+), death message = (.*)|Node is dead because (.*?) node_id=(\w+)")


def parse_ray_logs(lines: Iterable[str], now: float, facts: RayLogFacts | None = None) -> RayLogFacts:
    """Fold lines of ``raylet*.out`` / ``gcs_server.out`` into ``facts`` (a new record when None)."""
    facts = facts or RayLogFacts()
    for raw in lines:
        line = strip_ansi(raw)
        if "worker process with pid" in line and (m := _STARTED_WORKER.search(line)):
            facts.worker_ids[int(m.group(1))] = m.group(2)
        elif "graceful=false" in line and (m := _DISCONNECT.search(line)):
            t = parse_time(line, now)
            if t is not None:
                facts.disconnected.setdefault(m.group(1), t)
        elif "kill details" in line and (m := _KILLING.search(line)):
            facts.kills.append((parse_time(line, now), _short(m.group(0), 400)))
        elif "Reporting worker exit" in line and (m := _GCS_EXIT.search(line)):
            facts.exits[m.group(1)] = (parse_time(line, now), m.group(2), _sentences(m.group(3)))
        elif (
            ("death reason" in line or "Node is dead because" in line)
            and ("EXPECTED_TERMINATION" not in line or "UNEXPECTED_TERMINATION" in line)  # `ray stop` is no death
            and (m := _GCS_NODE_DEAD.search(line))
        ):
            facts.dead_nodes.append((parse_time(line, now), _short(m.group(0), 240)))
    return facts


# ---------------------------------------------------------------------------------------------------------------
# The State API


def state_rows(data: object) -> list[dict[str, object]]:
    """The rows of a State API answer: the dashboard's ``{"result": true, "data": {"result": {"result": [...]}}}``,
    or a plain list (``ray.util.state.list_actors`` dumped as JSON). Anything else: no rows."""
    if isinstance(data, dict):
        inner = data.get("data")
        if isinstance(inner, dict):
            inner = inner.get("result")
        if isinstance(inner, dict):
            inner = inner.get("result")
        data = inner
    if not isinstance(data, list):
        return []
    return [row for row in data if isinstance(row, dict)]


def _str(row: Mapping[str, object], key: str) -> str | None:
    value = row.get(key)
    return value.strip() or None if isinstance(value, str) else None


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.isdigit():
        return int(value) or None
    return None


def actors_from_state(rows: Iterable[Mapping[str, object]], source: str = "State API") -> list[RayActor]:
    """Ray actors from the State API's rows, with how each died (``death_cause``, a one-of in Ray's protobuf)."""
    out = []
    for row in rows:
        cls = _str(row, "class_name")
        if cls is None:
            continue
        reason = exit_type = detail = None
        cause = row.get("death_cause")
        if isinstance(cause, dict):
            if isinstance(ctx := cause.get("actor_died_error_context"), dict):
                reason = _str(ctx, "reason")
                message = _str(ctx, "error_message") or ""
                exit_type = _exit_type(message)
                detail = _sentences(message) or None
            elif isinstance(ctx := cause.get("oom_context"), dict):
                reason = "OOM"
                detail = _sentences(_str(ctx, "error_message") or "killed by Ray's memory monitor")
                exit_type = "NODE_OUT_OF_MEMORY"
            elif isinstance(ctx := cause.get("creation_task_failure_context"), dict):
                reason = "CREATION_TASK_FAILED"
                text = _str(ctx, "formatted_exception_string") or ""
                detail = _short(_last_exception(text) or "an error raised in its creation task")
            elif isinstance(ctx := cause.get("runtime_env_failed_context"), dict):
                reason = "RUNTIME_ENV_FAILED"
                detail = _sentences(_str(ctx, "error_message") or "its runtime environment failed")
            elif isinstance(ctx := cause.get("actor_unschedulable_context"), dict):
                reason = "UNSCHEDULABLE"
                detail = _sentences(_str(ctx, "error_message") or "it could not be scheduled")
        out.append(
            RayActor(
                class_name=cls,
                pid=_int(row.get("pid")),
                name=_str(row, "name"),
                actor_id=_str(row, "actor_id"),
                node_id=_str(row, "node_id"),
                job_id=_str(row, "job_id"),
                state=_str(row, "state"),
                reason=reason,
                exit_type=exit_type,
                detail=detail,
                node_ip=_node_ip(cause),
                source=source,
            )
        )
    return out


def _node_ip(cause: object) -> str | None:
    if isinstance(cause, dict):
        ctx = cause.get("actor_died_error_context")
        if isinstance(ctx, dict):
            return _str(ctx, "node_ip_address")
    return None


def _exit_type(message: str) -> str | None:
    m = EXIT_TYPE.search(message) or _OWNER_EXIT.search(message)
    return m.group(1) if m else None


def _last_exception(text: str) -> str | None:
    return last_exception_line(strip_ansi(text).splitlines())


def last_exception_line(lines: Sequence[str]) -> str | None:
    """The last Python exception line among ``lines`` (a dead actor's stderr, a formatted traceback)."""
    for raw in reversed(lines):
        line = strip_ansi(raw)
        m = ACTOR_PREFIX.match(line)
        if m is not None:
            line = line[m.end() :]
        s = line.strip()
        if (e := _EXC_LINE.match(s)) and _EXC_WORD.search(e.group("type")) and not s.startswith("File "):
            return _short(s)
    return None


def nodes_from_state(rows: Iterable[Mapping[str, object]]) -> list[str]:
    """The dead nodes of the State API's node rows, each as "IP (id …): why"."""
    out = []
    for row in rows:
        if _str(row, "state") != "DEAD":
            continue
        ip = _str(row, "node_ip") or "?"
        node = (_str(row, "node_id") or "")[:8]
        why = _str(row, "state_message") or "dead"
        out.append(f"{ip} (id {node}…): {_short(why, 200)}")
    return out


def load_json(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


# ---------------------------------------------------------------------------------------------------------------
# From an attempt to the failure a person is told


def _died_actor(d: _Died) -> RayActor:
    f = d.fields
    pid = f.get("pid", "")
    because = d.because or ""
    reason = None
    if "worker process has died" in because:
        reason = "WORKER_DIED"
    elif "owner has died" in because:
        reason = "OWNER_DIED"
    elif "node has died" in because or "its node has died" in because:
        reason = "NODE_DIED"
    elif "ray.kill" in because:
        reason = "RAY_KILL"
    elif "references to the actor were removed" in because:
        reason = "OUT_OF_SCOPE"
    detail = None
    if m := _EXIT_DETAIL.search(because):
        detail = _sentences(m.group(1))
    return RayActor(
        class_name=f.get("class_name") or "an actor",
        pid=int(pid) if pid.isdigit() else None,
        name=f.get("name") or None,
        actor_id=f.get("actor_id") or None,
        node_ip=f.get("ip") or None,
        job_id=(f.get("actor_id") or "")[-8:] or None,
        state="DEAD",
        reason=reason,
        exit_type=_exit_type(because),
        detail=detail or (_sentences(because) if because else None),
    )


_EXIT_MEANING = {
    "SYSTEM_ERROR": "its worker process died unexpectedly (Ray's exit type SYSTEM_ERROR: killed — a SIGKILL, most "
    "often the kernel's OOM killer — or crashed in native code)",
    "USER_ERROR": "its code raised an error that ended the worker (Ray's exit type USER_ERROR)",
    "NODE_OUT_OF_MEMORY": "killed by Ray's memory monitor (exit type NODE_OUT_OF_MEMORY)",
    "INTENDED_USER_EXIT": "it was stopped on purpose (Ray's exit type INTENDED_USER_EXIT)",
    "INTENDED_SYSTEM_EXIT": "Ray ended it on purpose (exit type INTENDED_SYSTEM_EXIT)",
}


def exit_meaning(exit_type: str | None) -> str | None:
    return _EXIT_MEANING.get(exit_type or "")


def _raylet_fields(line: str) -> tuple[int | None, str | None, str | None, str | None]:
    pid = _WORKER_PID.search(line)
    ip = _WORKER_IP.search(line)
    exit_type = EXIT_TYPE.search(line)
    detail = _EXIT_DETAIL.search(line)
    return (
        int(pid.group(1)) if pid else None,
        ip.group(1) if ip else None,
        exit_type.group(1) if exit_type else None,
        _sentences(detail.group(1)) if detail else None,
    )


def _evidence(found: RayFailure) -> RayFailure:
    """Its evidence lines once each, in the order of the log."""

    def key(text: str) -> int:
        head = text.split(": ", 1)[0]
        number = head.rsplit(":", 1)[-1]
        return int(number) if number.isdigit() else 0

    kept = sorted(dict.fromkeys(found.evidence), key=key)
    return replace(found, evidence=tuple(kept))


def attempt_failure(log: DriverLog, attempt: DriverAttempt, *, current: bool) -> RayFailure | None:
    """The failure an attempt ended in, said by its root cause: which actor or node died, its pid and node, why."""
    found = _attempt_failure(log, attempt, current=current)
    return None if found is None else _evidence(found)


def _attempt_failure(log: DriverLog, attempt: DriverAttempt, *, current: bool) -> RayFailure | None:
    base = log.path.rsplit("/", 1)[-1]

    def at(lineno: int, text: str) -> str:
        return f"{base}:{lineno}: {_short(text, 240)}"

    title_line = attempt.last_exception
    title = title_line[1] if title_line else ""
    evidence: list[str] = []
    if title_line:
        evidence.append(at(*title_line))
    step = attempt.last_step

    def make(
        kind: str,
        cause: str,
        title_: str,
        actor: RayActor | None = None,
        exception_: str | None = None,
        *,
        memory: RayMemoryKill | None = None,
        node: str | None = None,
        lineno: int | None = None,
        evidence: Iterable[str] = (),
    ) -> RayFailure:
        return RayFailure(
            kind,
            cause,
            title_,
            actor,
            exception_,
            memory=memory,
            node=node,
            step=step,
            path=log.path,
            lineno=lineno,
            current=current,
            evidence=tuple(evidence),
        )

    exception = attempt.user_exception[1] if attempt.user_exception else None

    # The memory monitor: its numbers, and the workers it chose.
    if attempt.oom is not None:
        lineno, mem = attempt.oom
        mem = replace(mem, reason=attempt.oom_reason, victims=tuple(attempt.victims))
        victim = max(attempt.victims, key=lambda v: v[2] or 0.0) if attempt.victims else None
        actor = None
        if victim is not None:
            name, pid, _gb = victim
            cls, ip = log.named.get(pid or -1, (_task_class(name), None))
            actor = RayActor(
                class_name=cls,
                pid=pid,
                name=task_actor(name) if task_actor(name) != cls else None,
                node_ip=mem.node_ip or ip,
                state="DEAD",
                reason="OOM",
                exit_type="NODE_OUT_OF_MEMORY",
                detail="killed by Ray's memory monitor",
            )
        used = (
            f"{mem.used_gb:g} GB used of a {mem.limit_gb:g} GB limit"
            if mem.used_gb is not None and mem.limit_gb is not None
            else "the node ran low on memory"
        )
        cause = f"Ray's memory monitor killed {mem.killed} worker(s) on node {mem.node_ip or '?'} ({used})"
        if attempt.oom_reason:
            cause += f"; {attempt.oom_reason}"
        return make(
            "memory_monitor",
            cause,
            title,
            actor,
            exception,
            memory=mem,
            lineno=lineno,
            evidence=tuple(dict.fromkeys(evidence)),
        )

    raylet = attempt.worker_died[-1] if attempt.worker_died else None
    # An actor that failed in its creation task (its __init__ raised).
    creation = next((d for d in attempt.died if d.message.startswith(_CREATION)), None)
    if creation is not None or attempt.creation is not None:
        actor = None
        if creation is not None and (m := _HOP.search(creation.message)):
            actor = _hop_actor(m)
        elif attempt.creation is not None:
            actor = attempt.creation[1]
        if actor is not None:
            actor = replace(actor, state="DEAD", reason="CREATION_TASK_FAILED", detail="its __init__ raised")
            own = attempt.actor_exceptions.get(actor.pid or -1)
            exception = exception or (own[1] if own else None)
        who = actor.label if actor else "an actor"
        cause = f"{who} failed in its creation task (__init__)" + (f": {exception}" if exception else "")
        first_line = creation.lineno if creation else attempt.creation[0] if attempt.creation else None
        if attempt.creation is not None:
            evidence.append(at(attempt.creation[0], attempt.creation[2]))
        return make(
            "creation_failed",
            cause,
            title,
            actor,
            exception,
            lineno=first_line,
            evidence=tuple(dict.fromkeys(evidence)),
        )

    # Ray's ActorDiedError: the actor, and why its worker died.
    if attempt.died:
        d = attempt.died[-1]
        actor = _died_actor(d)
        if raylet is not None:
            pid, ip, exit_type, detail = _raylet_fields(raylet[1])
            if pid is not None and (actor.pid is None or actor.pid == pid):
                actor = replace(
                    actor,
                    pid=pid,
                    node_ip=actor.node_ip or ip,
                    exit_type=actor.exit_type or exit_type,
                    detail=actor.detail or detail,
                )
                evidence.append(at(*raylet))
        if d.because:
            evidence.append(at(d.lineno + len(d.fields) + 1, d.because))
        if actor.reason == "OWNER_DIED" and ("node has crashed" in (d.because or "") or attempt.node_dead):
            node = _node_words(attempt.node_dead[0][1]) if attempt.node_dead else "its owner's node crashed"
            for ln, text in attempt.node_dead[:2]:
                evidence.append(at(ln, text))
            cause = f"{actor.label} died with its node: {_sentences(node, 200)}"
            return make(
                "node_died",
                cause,
                title,
                actor,
                exception,
                node=_sentences(node, 200),
                lineno=d.lineno,
                evidence=tuple(dict.fromkeys(evidence)),
            )
        meaning = exit_meaning(actor.exit_type)
        cause = f"{actor.label} died"
        if meaning:
            cause += f": {meaning}"
        elif actor.detail:
            cause += f": {actor.detail}"
        if actor.detail and meaning:
            cause += f" — Ray: {actor.detail}"
        return make(
            "actor_died", cause, title, actor, exception, lineno=d.lineno, evidence=tuple(dict.fromkeys(evidence))
        )

    # The driver could not reach the cluster at all (a relaunch after its node died).
    if attempt.unreachable is not None:
        lineno, text = attempt.unreachable
        return make(
            "cluster_unreachable",
            f"the driver could not connect to the Ray cluster: {text}",
            title,
            lineno=lineno,
            evidence=tuple(evidence),
        )

    # A node lost while a call to it was in flight.
    if attempt.unavailable is not None or (attempt.node_dead and attempt.last_exception):
        lineno, actor_id, why = attempt.unavailable or (attempt.node_dead[0][0], "", "")
        lost = _node_words(attempt.node_dead[0][1]) if attempt.node_dead else None
        for ln, text in attempt.node_dead[:1]:
            evidence.append(at(ln, text))
        actor = (
            RayActor(class_name="an actor", pid=None, actor_id=actor_id or None, reason="NODE_DIED")
            if actor_id
            else None
        )
        cause = _sentences(lost, 200) if lost else "a node of the cluster was lost"
        if actor_id:
            cause += f"; the call in flight to actor {actor_id[:12]}… failed: {why}"
        return make(
            "node_died" if lost else "actor_unavailable",
            cause,
            title,
            actor,
            exception,
            node=_sentences(lost, 200) if lost else None,
            lineno=lineno,
            evidence=tuple(dict.fromkeys(evidence)),
        )

    # A task raised: the innermost hop is the actor whose code raised.
    if attempt.hops:
        lineno, actor, _etype = attempt.hops[-1]
        actor = replace(actor, detail=None)
        where = (
            f"{actor.class_name}.{_method(attempt.hops[-1][1])}" if _method(attempt.hops[-1][1]) else actor.class_name
        )
        cause = f"{where} raised in {actor.label}" + (f": {exception}" if exception else "")
        evidence.append(at(lineno, attempt.hops[-1][2] + ": …"))
        if attempt.user_exception:
            evidence.append(at(*attempt.user_exception))
        return make(
            "task_error", cause, title, actor, exception, lineno=lineno, evidence=tuple(dict.fromkeys(evidence))
        )

    if raylet is not None and (attempt.last_exception or attempt.job_status == "failed"):
        pid, ip, exit_type, detail = _raylet_fields(raylet[1])
        cls, named_ip = log.named.get(pid or -1, ("a worker", None))
        actor = RayActor(cls, pid, node_ip=ip or named_ip, state="DEAD", exit_type=exit_type, detail=detail)
        meaning = exit_meaning(exit_type) or (detail or "it died")
        evidence.append(at(*raylet))
        return make(
            "actor_died",
            f"{actor.label} died: {meaning}",
            title or raylet[1],
            actor,
            exception,
            lineno=raylet[0],
            evidence=tuple(dict.fromkeys(evidence)),
        )

    if attempt.job_status == "was stopped":
        line = f"Job '{attempt.job}' was stopped"
        return make("job_stopped", f"the job {attempt.job} was stopped (ray job stop)", line, evidence=tuple(evidence))
    if attempt.job_status == "failed":
        msg = attempt.job_message or "its entrypoint failed"
        return make(
            "job_failed",
            f"the job {attempt.job} failed: {msg}",
            title or f"Job '{attempt.job}' failed",
            evidence=tuple(evidence),
        )
    if title_line and "ray.exceptions." in title:
        return make(
            "task_error", _short(title, 240), title, None, exception, lineno=title_line[0], evidence=tuple(evidence)
        )
    return None


def _node_words(line: str) -> str:
    """What Ray said of a node's death, without its advice."""
    if _RAYLET_TERMINATED in line:
        return (
            "a raylet was terminated unexpectedly (Ray: SIGKILL by the user or the system OOM killer, invalid "
            "memory access, or another signal)"
        )
    if m := _NODE_MARKED_DEAD.search(line):
        return f"node {m.group('ip')} (id {m.group('id')[:8]}…) was marked dead because {m.group('why').strip()}"
    if m := _AGENT_FAILED.search(line):
        return f"a raylet exited because its agent {m.group(1)} failed"
    return _sentences(line, 200)


def _method(actor: RayActor) -> str | None:
    d = actor.detail or ""
    if d.startswith("in ") and "." in d:
        return d[3:].split(".", 1)[1].rstrip("()")
    return None


def task_actor(task: str) -> str:
    """The actor a memory-monitor victim's task names: ``W7k59oWorkerDict_0:1:WorkerDict.__init__`` →
    ``W7k59oWorkerDict_0:1``; an unnamed actor's ``TaskRunner.__init__`` → ``TaskRunner``."""
    head, _, last = task.rpartition(":")
    if head and "." in last:
        return head
    return task.split(".", 1)[0] or task


def _task_class(task: str) -> str:
    """``W7k59oWorkerDict_0:1:WorkerDict.__init__`` → ``WorkerDict``; ``TaskRunner.__init__`` → ``TaskRunner``."""
    last = task.rsplit(":", 1)[-1]
    return last.split(".", 1)[0] or "a worker"


def failures(log: DriverLog) -> tuple[RayFailure | None, list[RayFailure]]:
    """(how the run ends now, the failures a later attempt got past: history).

    A failure is history once a later attempt logged a step. A relaunch that failed before its first step did not
    get past anything: the earlier failure is still part of the story, and is told with the latest one.
    """
    attempts = log.attempts
    progressed = max((i for i, a in enumerate(attempts) if a.steps), default=-1)
    history: list[RayFailure] = []
    open_: list[RayFailure] = []
    for i, a in enumerate(attempts):
        f = attempt_failure(log, a, current=i >= progressed)
        if f is None:
            continue
        (history if i < progressed else open_).append(f)
    latest = attempt_failure(log, attempts[-1], current=True) if attempts else None
    if latest is None:
        return None, history + open_
    earlier = [f for f in open_ if f is not latest and f.lineno != latest.lineno]
    if earlier:
        before = earlier[-1]
        latest = replace(
            latest,
            cause=f"{latest.cause}; before it, {before.cause}",
            actor=latest.actor or before.actor,
            node=latest.node or before.node,
            evidence=before.evidence + latest.evidence,
        )
    return latest, history
