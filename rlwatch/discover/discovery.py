"""Finding out what runs in a run directory when nobody wrote a configuration.

A person who SSHes into a pod and types ``rlwatch`` should see their run without writing YAML first. So the run
directory is walked (bounded: a checkpoint tree can hold millions of files) for the layouts AReaL, TRL, verl and
OpenRLHF leave behind, and ``/proc`` is read for the processes they start (Ray's actors among them, by the titles Ray
gives them), with the server ports in their command lines. The
result is a profile's defaults (:mod:`rlwatch.config.profiles`) narrowed to what was found: the newest AReaL trial's
logs, its checkpoints and recover info, the live server's URL, the training YAML the launcher was given.

Everything found is written relative to the run directory, so ``rlwatch init`` writes a file that still works
after the directory is moved. Showing the result, and writing it down, is :mod:`rlwatch.discover.describe`'s.
"""

from __future__ import annotations

import fnmatch
import glob
import itertools
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.common.trust import open_read
from rlwatch.config.models import Config, HostConfig, ProcessRule, Provenance, ServerConfig
from rlwatch.config.profiles import (
    AREAL_LAUNCHER,
    LAUNCHER,
    OPENRLHF_CONTROLLER,
    OPENRLHF_DRIVER,
    OPENRLHF_ENGINES,
    OPENRLHF_MODELS,
    PROFILE_NAMES,
    RAY_JOB_SUBMIT,
    SGLANG_SERVER,
    TORCHRUN,
    TRL_SERVER,
    TRL_TRAINER,
    VERL_DRIVER,
    VERL_TASK_RUNNER,
    VERL_WORKERS,
    VLLM_SERVER,
    ProfileName,
    profile_defaults,
)
from rlwatch.discover.server_evidence import (
    DEFAULT_PORT,
    HEALTH_PATH,
    Clue,
    from_log,
    from_trl_settings,
    settings_from_argv,
    settings_from_mapping,
    settings_from_script,
    trl_version,
    url_host,
)
from rlwatch.logs.progress_shape import holds_records
from rlwatch.sources import procfs

MAX_DEPTH = 8
MAX_ENTRIES = 20_000
MAX_DIR_ENTRIES = 4_096  # of one directory (a dataset of a million files beside the logs)
MAX_WALK_S = 1.5
RECENT_S = 24 * 3600.0
KERNEL_LOGS = tuple(HostConfig().kernel_log_files)  # saved kernel logs: the machine's, not the run's
MAX_LOGS = 32
TAIL_BYTES = 256 * 1024
MAX_YAML_BYTES = 256 * 1024

SKIP_DIRS = frozenset(
    {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".rlwatch"}
)
# Never descend into these: model shards, optimizer state, weight staging.
OPAQUE_DIRS = frozenset({"recover_checkpoint", "weight_update"})
AREAL_LOG_NAMES = frozenset({"trainer.log", "llm_server.log", "merged.log", "main.log"})
AREAL_CKPT = re.compile(r"^epoch\d+epochstep\d+globalstep\d+$")
HF_CKPT = re.compile(r"^checkpoint-\d+$")
# verl: `global_step_N` folders beside `latest_checkpointed_iteration.txt` (trainer.default_local_dir); OpenRLHF:
# DeepSpeed's `global_stepN` beside `latest`, in `_actor/` and `_critic/` under --ckpt.path.
VERL_CKPT = re.compile(r"^global_step_\d+$")
DS_CKPT = re.compile(r"^global_step\d+$")
VERL_TRACKER = "latest_checkpointed_iteration.txt"
# A Ray session's log directory (or a copy of one): what only Ray writes there.
RAY_SESSION_FILES = frozenset({"raylet.out", "gcs_server.out"})
# verl's and OpenRLHF's own lines (SOURCES.md in tests/real/ray): verl's console metric line and first print,
# its TaskRunner and WorkerDict actors in Ray's prefixes; OpenRLHF's per-step line and its actors' class names.
VERL_LINE = re.compile(r"^(?:\([^()]*pid=\d+[^()]*\) )?step:\d+ - [^\s:]+:|^ray init kwargs: ", re.MULTILINE)
VERL_ACTORS = re.compile(r"^\((TaskRunner|WorkerDict|main_task) pid=\d+", re.MULTILINE)
OPENRLHF_LINE = re.compile(r"✨ Global step \d+: \{|Global step \d+: \{'(?:critic_loss|policy_loss)'")
OPENRLHF_ACTORS = re.compile(
    r"^\((PPOTrainer|PPOTrainerAsync|PolicyModelActor|ActorModelRayActor|RolloutRayActor|LLMRayActor"
    r"|CriticModelActor|ReferenceModelActor|RewardModelActor) pid=\d+",
    re.MULTILINE,
)
RAY_PREFIX_PID = re.compile(r"^\(([A-Za-z_]\w*) pid=(\d+)(?:, ip=[^)]*)?\) ", re.MULTILINE)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
BRAKE = re.compile(r"emergency[ _-]?brake", re.IGNORECASE)
AREAL_LINE = re.compile(r"^\(AReaL\) ", re.MULTILINE)  # AReaL's log header (areal/utils/logging.py)
# A metric dict a TRL GRPO trainer prints (transformers' ProgressCallback writes str(logs)); keys only TRL logs.
TRL_METRICS = re.compile(r"\{'[^\n]*'(reward|reward_std|frac_reward_zero_std|completions/mean_length|rewards/[^']+)': ")
HF_METRICS = re.compile(r"\{'(loss|train_runtime)': [^\n]*'(learning_rate|train_samples_per_second|epoch)': ")
TRL_PATHS = re.compile(r"/(site|dist)-packages/trl/")
LOG_HEAD_BYTES = 64 * 1024
MAX_READ_LOGS = 16

AREAL_KEYS = frozenset(
    {"experiment_name", "trial_name", "cluster", "rollout", "actor", "sglang", "saver", "recover", "gconfig"}
)
TRL_KEYS = frozenset(
    {"use_vllm", "vllm_mode", "num_generations", "max_completion_length", "vllm_server_host", "vllm_server_port"}
)
LOOKED_FOR = (
    "*.log files (and captured output: slurm-*.out, nohup.out, *.out, *.err) written in the last 24 h, "
    "AReaL's logs/ checkpoints/ recover_info/ layout, HF/TRL "
    "checkpoint-N/trainer_state.json, and training processes (torchrun, accelerate, DeepSpeed, python, AReaL, TRL, "
    "SGLang, vLLM) working in or naming this directory"
)

# What a process is, from its command line. Servers first: a server command line never counts as a trainer.
PROC_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("areal_launcher", re.compile(AREAL_LAUNCHER)),
    ("sglang", re.compile(SGLANG_SERVER)),
    ("trl", re.compile(TRL_SERVER)),
    ("vllm", re.compile(VLLM_SERVER)),
    ("torchrun", re.compile(TORCHRUN)),
    ("trl_trainer", re.compile(TRL_TRAINER)),
    ("launcher", re.compile(LAUNCHER)),
    ("verl", re.compile(VERL_DRIVER)),
    ("openrlhf", re.compile(f"{OPENRLHF_DRIVER}|{RAY_JOB_SUBMIT}")),
    ("ray_actor", re.compile(r"^ray::[A-Za-z_]\w*(\.\w+)?( |$)")),
    ("python", re.compile(r"(^|/)python[0-9.]*( |$)")),
)
VERL_ACTOR_TITLE = re.compile(f"{VERL_TASK_RUNNER}|{VERL_WORKERS}")
OPENRLHF_ACTOR_TITLE = re.compile(f"{OPENRLHF_CONTROLLER}|{OPENRLHF_MODELS}|{OPENRLHF_ENGINES}")
# rlwatch's own command line is never evidence of a run (its simulator's pieces are: they stand in for one).
# The simulator's supervisor (`python -m rlwatch.sim`, `rlwatch sim`) plays the platform that starts a run: it is
# rlwatch's own too.
RLWATCH_CLI = re.compile(r"(^|/)rlwatch( |$)|-m rlwatch(\.cli|\.sim)?( |$)")
TRAINER_KINDS = frozenset({"areal_launcher", "torchrun", "trl_trainer", "launcher", "verl", "openrlhf", "python"})
# TRL itself on a command line: `trl grpo …`, `python -m trl.scripts.grpo`, one of TRL's example scripts.
TRL_COMMAND = re.compile(r"(^|[ /])trl [a-z][a-z_-]*( |$)|-m trl(\.\S+)?( |$)|/trl/(scripts|examples)/\S+\.py( |$)")
TRL_SOURCE = re.compile(r"^\s*(from trl\b|import trl\b)|\bGRPOTrainer\b|\bGRPOConfig\b", re.MULTILINE)
MAX_SCRIPT_BYTES = 512 * 1024
SERVER_KINDS = ("sglang", "trl", "vllm")


@dataclass
class Found:
    """What the walk of the run directory saw (absolute paths)."""

    areal_log_dirs: dict[Path, float] = field(default_factory=dict)  # dir -> newest log mtime
    areal_trials: dict[Path, float] = field(default_factory=dict)  # checkpoints/<u>/<e>/<t> -> newest ckpt mtime
    step_infos: dict[Path, float] = field(default_factory=dict)
    hf_output_dirs: set[Path] = field(default_factory=set)
    recent_logs: dict[Path, float] = field(default_factory=dict)
    yamls: list[Path] = field(default_factory=list)
    verl_ckpt_dirs: dict[Path, float] = field(default_factory=dict)  # default_local_dir -> newest global_step_N mtime
    ds_ckpt_dirs: dict[Path, float] = field(default_factory=dict)  # --ckpt.path (holding _actor/) -> newest mtime
    ray_sessions: list[Path] = field(default_factory=list)  # Ray session log directories (copies) under the run
    record_files: dict[Path, float] = field(default_factory=dict)  # may be logs by their lines (see RECORD_SUFFIXES)
    entries: int = 0
    truncated: bool = False
    cut: list[str] = field(default_factory=list)  # what the bounds of the walk left unread


@dataclass(frozen=True)
class Proc:
    pid: int
    argv: tuple[str, ...]
    cwd: str | None
    kinds: frozenset[str]

    @property
    def cmdline(self) -> str:
        return " ".join(self.argv)


# A run's own parts, where its files are kept: a directory of these names is one run's, not a run of its own.
RUN_PARTS = frozenset(
    {"logs", "log", "checkpoints", "checkpoint", "ckpt", "ckpts", "outputs", "output", "wandb", "runs", "recover_info"}
)


class SeveralRuns(Exception):
    """The directory holds several unrelated runs (each subdirectory with logs and checkpoints of its own) and no
    live process says which one is meant: merging them would make one "run" of another run's crash and this one's
    restart loop. The person names one (``rlwatch RUN_DIR``)."""

    def __init__(self, run_dir: Path, runs: Sequence[tuple[Path, str]]) -> None:
        self.run_dir = run_dir
        self.runs = tuple(runs)
        names = ", ".join(f"rlwatch {path}" for path, _ in self.runs[:6])
        more = f" and {len(self.runs) - 6} more" if len(self.runs) > 6 else ""
        super().__init__(
            f"{run_dir} holds {len(self.runs)} separate runs, not one; name the one to watch: {names}{more}"
        )


def _inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


def live_run_dirs(run_dir: Path, found: Found, proc_root: str = "/proc") -> list[Path]:
    """The directories below ``run_dir`` where a live process of this user works and writes a log it found (the
    log under that directory): each is a run as sure as a process runs it. The outermost of nested ones."""
    real = os.path.realpath(run_dir)
    logs = {os.path.realpath(p) for p in found.recent_logs}
    if not logs:
        return []
    places: set[str] = set()
    for pid in procfs.list_pids(proc_root):
        cwd = procfs.read_cwd(pid, proc_root)
        if cwd is None or not cwd.startswith(real.rstrip("/") + "/") or cwd in places:
            continue
        uids = procfs.all_uids(pid, proc_root)
        if uids is not None and set(uids) != {os.geteuid()}:
            continue
        for fd, path in procfs.fd_entries(pid, proc_root) or []:
            if path in logs and path.startswith(cwd.rstrip("/") + "/") and procfs.fd_writable(pid, fd, proc_root):
                places.add(cwd)
                break
    dirs = sorted((run_dir / os.path.relpath(c, real) for c in places), key=lambda d: len(d.parts))
    out: list[Path] = []
    for d in dirs:
        first = d.relative_to(run_dir).parts[0]
        if first in RUN_PARTS or first.startswith(".") or any(_inside(d, o) for o in out):
            continue  # a run's own logs/ or output/ (its parts), or within a run already found
        out.append(d)
    return out


def several_runs(run_dir: Path, found: Found, live: Sequence[Path] = ()) -> list[tuple[Path, str]]:
    """The directories below ``run_dir`` that are runs of their own, each with what makes it one: its own logs and
    checkpoints (or its own rlwatch.yaml), or a live process working there that writes its log (``live``, with the
    directories beside it that hold logs of their own). Fewer than two: ``run_dir`` is one run (its logs/,
    checkpoints/ … are parts of it), and [] is returned."""
    what: dict[Path, set[str]] = {}

    def note(path: Path, kind: str) -> None:
        try:
            rel = path.relative_to(run_dir)
        except ValueError:
            return
        if len(rel.parts) < 2 or rel.parts[0] in RUN_PARTS or rel.parts[0].startswith("."):
            what.setdefault(run_dir, set()).add(kind)  # the directory's own files: it is a run itself
            return
        what.setdefault(run_dir / rel.parts[0], set()).add(kind)

    for log in found.recent_logs:
        note(log, "logs")
    for d in found.areal_log_dirs:
        note(d / "trainer.log", "logs")
    for ckpt in (*found.areal_trials, *found.hf_output_dirs, *found.verl_ckpt_dirs, *found.ds_ckpt_dirs):
        note(ckpt / "x", "checkpoints")
    for info in found.step_infos:
        note(info, "checkpoints")
    own = what.pop(run_dir, set())
    if "checkpoints" in own or (run_dir / "rlwatch.yaml").is_file():
        return []  # the directory is a run itself: its subdirectories are its parts
    try:
        children = [Path(e.path) for e in os.scandir(run_dir) if e.is_dir(follow_symlinks=False)]
    except OSError:
        children = []
    for child in children:
        if (child / "rlwatch.yaml").is_file():
            what.setdefault(child, set()).add("rlwatch.yaml")
    runs = {
        d: " and ".join(sorted(k))
        for d, k in what.items()
        # A run has logs of its own beside its checkpoints (or a logs/ of its own, or an rlwatch.yaml): a
        # directory of checkpoints alone is a part of the run around it (TRL's output_dir).
        if "rlwatch.yaml" in k or ("logs" in k and ("checkpoints" in k or (d / "logs").is_dir()))
    }
    # A live process working in a directory and writing its log there makes it a run, checkpoint or not (a first
    # `python3 train.py > train.log` has none yet); beside it, the directories of its siblings that hold logs of
    # their own are runs too, live or not: two runs side by side are never one.
    found_live: dict[Path, str] = {}
    for place in live:
        found_live[place] = "logs, and a live process working there that writes them"
        for log in found.recent_logs:
            rel = log.relative_to(place.parent) if _inside(log, place.parent) else None
            if rel is None or len(rel.parts) < 2 or rel.parts[0].startswith("."):
                continue
            sibling = place.parent / rel.parts[0]
            if sibling.parent == run_dir and rel.parts[0] in RUN_PARTS:
                continue  # the run directory's own logs/ or output/: its parts, not a run beside the live one
            if not any(_inside(sibling, x) or _inside(x, sibling) for x in live):
                found_live.setdefault(sibling, "logs of its own beside a live run")
    for d, why in found_live.items():
        if any(_inside(d, o) for o in runs):
            continue  # a part of a run found by its own files
        for inner in [o for o in runs if _inside(o, d)]:
            del runs[inner]
        runs[d] = why
    ordered = sorted(runs.items(), key=lambda r: str(r[0]))
    # Loose logs beside them (``/tmp/x.log``) do not make the parent a run of its own.
    return ordered if len(ordered) >= 2 else []


def _worked_in(
    related: Sequence[Proc], runs: Sequence[tuple[Path, str]], writing: Sequence[Path] = ()
) -> tuple[Path, Proc] | None:
    """The one run of ``runs`` a live process works in (its directory, or a file of its command line), with the first
    process seen working in it (the evidence to show). Where several are worked in, the one run where a live process
    also writes its log (``writing``, from live_run_dirs) is it: a shell's `python3 -c` left standing in a dead run's
    directory proves no life there. None when that does not make one."""
    hits: dict[Path, list[Proc]] = {}
    for proc in related:
        for run, _ in runs:
            inside = str(run) + os.sep
            works = proc.cwd is not None and (proc.cwd == str(run) or proc.cwd.startswith(inside))
            if works or any(arg.startswith(inside) for arg in proc.argv):
                hits.setdefault(run, []).append(proc)
    if len(hits) > 1:
        hits = {run: procs for run, procs in hits.items() if any(_inside(w, run) for w in writing)}
    if len(hits) != 1:
        return None
    chosen, procs = next(iter(hits.items()))
    writers = [p for p in procs if p.cwd is not None and any(_inside(Path(p.cwd), w) for w in writing)]
    return chosen, (writers or procs)[0]


# ---------------------------------------------------------------------------------------------------------------
# The run directory


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _is_areal_log_dir(directory: Path, names: set[str]) -> bool:
    if not names & AREAL_LOG_NAMES:
        return False
    if "llm_server.log" in names or {"merged.log", "main.log"} <= names:
        return True
    parts = directory.parts
    return len(parts) >= 4 and parts[-4] == "logs"


def walk_run_dir(
    run_dir: Path, now: float, *, budget_s: float = MAX_WALK_S, monotonic: Callable[[], float] = time.monotonic
) -> Found:
    """Breadth-first, depth ≤ MAX_DEPTH, at most MAX_ENTRIES entries in all and MAX_DIR_ENTRIES of any one directory,
    for at most ``budget_s`` seconds; symlinked dirs not followed; never raises.

    A run directory can hold a dataset or a cache of a million files beside its logs: a directory is read as a
    stream and only its first MAX_DIR_ENTRIES entries are looked at, so the walk goes on to its siblings (where the
    logs are) with its memory bounded by that, not by the directory's size. Only names are read (the kernel's
    d_type); what can be a log is stat'ed. Where anything was left unread, ``found.cut`` says what."""
    found = Found()
    queue: deque[tuple[Path, int]] = deque([(run_dir, 0)])
    deadline = monotonic() + budget_s
    while queue:
        directory, depth = queue.popleft()
        if monotonic() > deadline:
            found.truncated = True
            found.cut.append(f"the walk stopped after {budget_s:g} s ({found.entries:,} entries)")
            return found
        try:
            with os.scandir(directory) as it:
                entries = list(itertools.islice(it, MAX_DIR_ENTRIES))
                if len(entries) == MAX_DIR_ENTRIES and next(it, None) is not None:
                    found.cut.append(f"{directory.name or directory}/: only its first {MAX_DIR_ENTRIES:,} entries")
        except OSError:
            continue
        names = {e.name for e in entries}
        if depth > 0 and ".git" in names:
            # A source checkout below the run directory (a framework's clone, rlwatch's own with its test fixtures)
            # is code: its logs are fixtures or examples, never this run's.
            found.cut.append(f"{directory.relative_to(run_dir)}/: a source checkout (code, not the run's output)")
            continue
        session = names >= RAY_SESSION_FILES
        if session:
            found.ray_sessions.append(directory)  # Ray's own logs: read as Ray's (sources/ray), not as the run's
        for entry in entries:
            found.entries += 1
            if found.entries > MAX_ENTRIES:
                found.truncated = True
                found.cut.append(f"the walk stopped after {MAX_ENTRIES:,} entries")
                return found
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = entry.is_file()
            except OSError:
                continue
            if is_dir:
                _see_dir(found, path, entry.name, names)
                descend = entry.name not in SKIP_DIRS and entry.name not in OPAQUE_DIRS and not session
                descend = descend and not AREAL_CKPT.match(entry.name) and not HF_CKPT.match(entry.name)
                descend = descend and not entry.name.startswith("global_step")
                if descend and depth + 1 < MAX_DEPTH:
                    queue.append((path, depth + 1))
            elif is_file and not session:
                _see_file(found, path, entry.name, depth, now)
        if _is_areal_log_dir(directory, names):
            times = [t for n in names & AREAL_LOG_NAMES if (t := _mtime(str(directory / n))) is not None]
            found.areal_log_dirs[directory] = max(times, default=0.0)
    return found


def _see_dir(found: Found, path: Path, name: str, siblings: set[str]) -> None:
    if name.startswith("global_step"):
        mtime = _mtime(str(path)) or 0.0
        if VERL_CKPT.match(name) and VERL_TRACKER in siblings:
            found.verl_ckpt_dirs[path.parent] = max(found.verl_ckpt_dirs.get(path.parent, 0.0), mtime)
        elif DS_CKPT.match(name) and "latest" in siblings and path.parent.name in ("_actor", "_critic"):
            top = path.parent.parent
            found.ds_ckpt_dirs[top] = max(found.ds_ckpt_dirs.get(top, 0.0), mtime)
    elif AREAL_CKPT.match(name):
        trial = path.parent.parent
        found.areal_trials[trial] = max(found.areal_trials.get(trial, 0.0), _mtime(str(path)) or 0.0)
    elif HF_CKPT.match(name) and (path / "trainer_state.json").is_file():
        found.hf_output_dirs.add(path.parent)


# What launchers and schedulers write a run's output to besides `*.log`: Slurm's `slurm-<job>.out` (and
# `slurm-<job>_<task>.out`, `--error` files), `nohup.out`, Ray's `raylet.out`, `worker-*.out` / `*.err` and
# `python-core-*` outputs, and any `*.out` / `*.err` a person redirected stdout and stderr to. The failures the
# scheduler itself reports (an OOM kill, a time limit, a node failure) are only in these files.
def is_output_capture(name: str) -> bool:
    """A captured stdout or stderr (see OUTPUT_CAPTURES)."""
    return name.endswith((".out", ".err"))


def _see_file(found: Found, path: Path, name: str, depth: int, now: float) -> None:
    if name == "step_info.json" and path.parent.name == "recover_info":
        found.step_infos[path] = _mtime(str(path)) or 0.0
        found.areal_trials.setdefault(path.parent.parent, 0.0)
    elif (
        (name.endswith(".log") or is_output_capture(name))
        and not (name.startswith("debug") and "wandb" in path.parts)
        and not any(fnmatch.fnmatch(name, k) for k in KERNEL_LOGS)
    ):
        # wandb's own debug logs are about wandb; its run output (files/output.log) is kept. A saved kernel log
        # (dmesg.log) is the machine's, read by rlwatch.sources.kernel, not a log of the run's.
        mtime = _mtime(str(path))
        if mtime is not None and now - mtime <= RECENT_S:
            found.recent_logs[path] = mtime
    elif name.endswith((".yaml", ".yml")) and name not in ("rlwatch.yaml", "rlwatch.yml") and depth <= 1:
        found.yamls.append(path)
    elif may_hold_records(name) and not _DATA_DIRS.intersection(path.parts):
        mtime = _mtime(str(path))
        if mtime is not None and now - mtime <= RECENT_S:
            found.record_files[path] = mtime


# The run's own files whatever their names (issue 41): a text file of the run directory written in the last 24 h
# whose name says nothing of a log (`metrics.csv`, `progress.txt`, `log.jsonl`, `stdout`) is one when its newest
# lines are recurring records with a counter (progress_shape.holds_records), read to RECORD_PROBE_BYTES of its end,
# the newest RECORD_PROBE_FILES of them. Checkpoints, datasets and binaries are never read: other suffixes, the
# directories a dataset or a cache lives in, a NUL byte.
RECORD_SUFFIXES = (".csv", ".tsv", ".txt", ".jsonl")
RECORD_PROBE_BYTES = 16 * 1024
RECORD_PROBE_FILES = 32
_DATA_DIRS = frozenset({"data", "dataset", "datasets", "cache", ".cache", "node_modules", "site-packages", ".git"})


def may_hold_records(name: str) -> bool:
    """A name that may be a log's by its lines: one of RECORD_SUFFIXES, or none at all (`stdout`, `train_output`)."""
    return not name.startswith(".") and ("." not in name or name.endswith(RECORD_SUFFIXES))


# What record_log found in files that hold no records, by (device, inode): binary (a NUL byte) or text, with the size
# and modification time it had. A binary file is not read again while it does not shrink (a smaller file at that inode
# is a new file: inodes are reused) and has not grown by a whole probe since: what record_log reads is then all new
# (a log copytruncated under a writer without O_APPEND goes on past a hole of NULs, and is text again once that much
# was written after it); a text file is read again once it changed. A
# watching engine asks written_logs at every look at the run, and a rank holding a binary file open for writing (a
# checkpoint being saved, a memory-mapped cache) cost a 16 KiB read at each of them. Bounded: the oldest judgements
# are dropped first.
_NOT_RECORDS: dict[tuple[int, int], tuple[bool, int, int]] = {}
_NOT_RECORDS_MAX = 4096
_NOT_RECORDS_LOCK = threading.Lock()  # the engine's loops may ask at once


def record_log(path: Path) -> bool:
    """Whether the file at ``path`` holds recurring records (its last RECORD_PROBE_BYTES, text only)."""
    try:
        with open_read(path) as fh:
            st = os.fstat(fh.fileno())
            key = (st.st_dev, st.st_ino)
            with _NOT_RECORDS_LOCK:
                judged = _NOT_RECORDS.get(key)
            if _still_no_records(judged, st.st_size, st.st_mtime_ns):
                return False
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            fh.seek(max(0, end - RECORD_PROBE_BYTES))
            data = fh.read(RECORD_PROBE_BYTES)
    except (OSError, ValueError):
        return False
    if not data or b"\0" in data:
        _judged(key, (bool(data), st.st_size, st.st_mtime_ns))
        return False
    text = data.decode("utf-8", "replace")
    if end > RECORD_PROBE_BYTES:
        text = text.partition("\n")[2]  # the first line read may be cut
    if holds_records(text):
        with _NOT_RECORDS_LOCK:
            _NOT_RECORDS.pop(key, None)
        return True
    _judged(key, (False, st.st_size, st.st_mtime_ns))
    return False


def _still_no_records(judged: tuple[bool, int, int] | None, size: int, mtime_ns: int) -> bool:
    if judged is None:
        return False
    binary, was_size, was_mtime = judged
    if binary:
        return was_size <= size < was_size + RECORD_PROBE_BYTES
    return (size, mtime_ns) == (was_size, was_mtime)


def _judged(key: tuple[int, int], judged: tuple[bool, int, int]) -> None:
    """Remember that the file ``key`` held no records (binary, size, modification time)."""
    with _NOT_RECORDS_LOCK:
        _NOT_RECORDS.pop(key, None)
        _NOT_RECORDS[key] = judged
        while len(_NOT_RECORDS) > _NOT_RECORDS_MAX:
            del _NOT_RECORDS[next(iter(_NOT_RECORDS))]


def _written_by(related: list[Proc], proc_root: str) -> dict[Path, float]:
    """The regular files the run's processes hold open for writing that are logs (:func:`written_logs`)."""
    return written_logs([p.pid for p in related], proc_root)


def written_logs(pids: Iterable[int], proc_root: str = "/proc", *, known: Collection[str] = ()) -> dict[Path, float]:
    """The regular files processes ``pids`` hold open for writing (their stdout and stderr among them) that are logs:
    named as one, or holding recurring records (record_log); 64 processes at most. ``known``: paths already
    followed, neither probed nor returned again. Discovery asks it once; a watching engine asks it for the live run's
    processes as they come, since a run's logs are often created after rlwatch started (a watchdog started with the
    container sees the launcher's redirect, not the ranks' train.log)."""
    out: dict[Path, float] = {}
    for pid in sorted(pids)[:64]:
        for fd, target in procfs.fd_entries(pid, proc_root) or []:
            if not target.startswith("/") or target.startswith(("/dev/", "/proc/", "/sys/", "/run/")):
                continue
            path = Path(target)
            if target in known or path in out or not procfs.fd_writable(pid, fd, proc_root) or not path.is_file():
                continue
            named = path.name.endswith(".log") or is_output_capture(path.name)
            mtime = _mtime(target) if named or may_hold_records(path.name) else None
            if mtime is not None and (named or record_log(path)):
                out[path] = mtime
    return out


def _read_tail(path: Path, size: int = TAIL_BYTES) -> str:
    try:
        with open_read(path) as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            fh.seek(max(0, end - size))
            data = fh.read(size)
    except OSError:
        return ""
    return ANSI.sub("", data.decode("utf-8", "replace"))


def _yaml_keys(path: Path) -> set[str]:
    import yaml  # PyYAML is imported where a file is read: a run without one does not pay for it at the start

    try:
        with open_read(path) as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
        if len(data) > MAX_YAML_BYTES:
            return set()
        doc = yaml.safe_load(data.decode("utf-8"))
    except Exception:  # any unreadable or odd file is simply not a training config
        return set()
    return {k for k in doc if isinstance(k, str)} if isinstance(doc, dict) else set()


# ---------------------------------------------------------------------------------------------------------------
# Processes


def _classify(cmdline: str) -> frozenset[str]:
    return frozenset(kind for kind, pattern in PROC_KINDS if pattern.search(cmdline))


def scan_processes(proc_root: str = "/proc") -> list[Proc]:
    """Processes whose command lines look like parts of a training run; vanished or unreadable ones are skipped."""
    own = os.getpid() if proc_root == "/proc" else -1
    out = []
    for pid in procfs.list_pids(proc_root):
        if pid == own:
            continue
        uids = procfs.all_uids(pid, proc_root)
        if uids is not None and set(uids) != {os.geteuid()}:
            continue  # another user's process says nothing of this user's run: no profile, no server URL to probe
        argv = procfs.read_cmdline(pid, proc_root)
        cmdline = " ".join(argv)
        kinds = _classify(cmdline) if argv and not RLWATCH_CLI.search(cmdline) else frozenset()
        if kinds:
            out.append(Proc(pid, argv, procfs.read_cwd(pid, proc_root), kinds))
    return out


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` (the last one wins, as argparse does)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1 :]
    return value


def server_of(proc: Proc) -> ServerConfig | None:
    """The server a process serves, when its command line says enough (the AReaL wrapper has no ``--port``)."""
    kind = next((k for k in SERVER_KINDS if k in proc.kinds), None)
    if kind is None:
        return None
    port_text = _option(proc.argv, "--port")
    if port_text is None and kind == "sglang" and "-m sglang.launch_server" not in proc.cmdline:
        return None
    try:
        port = int(port_text) if port_text is not None else DEFAULT_PORT[kind]
    except ValueError:
        return None
    if not 0 < port < 65536:
        return None
    host = url_host(_option(proc.argv, "--host"))
    return ServerConfig(kind=kind, url=f"http://{host}:{port}", health_path=HEALTH_PATH[kind])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Putting it together


def _rel(path: Path, run_dir: Path) -> str:
    try:
        rel = path.relative_to(run_dir)
    except ValueError:
        return str(path)
    return str(rel) if str(rel) != "." else "."


def _glob_rel(path: Path, run_dir: Path) -> str:
    """A path as a glob pattern that matches exactly it (``[`` and ``*`` in names are escaped)."""
    return glob.escape(_rel(path, run_dir))


def _tail3(path: Path) -> tuple[str, ...]:
    return path.parts[-3:]


def _config_arg(proc: Proc, run_dir: Path) -> Path | None:
    """The training YAML a launcher or trainer was given (``--config``), made absolute against its cwd."""
    value = _option(proc.argv, "--config")
    if not value or not proc.kinds & TRAINER_KINDS:
        return None
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = Path(proc.cwd or run_dir) / p
    return Path(os.path.normpath(p))


def _mentions(path: Path, text: str) -> bool:
    try:
        with open_read(path) as fh:
            return text.encode() in fh.read(MAX_YAML_BYTES)
    except OSError:
        return False


def _related(proc: Proc, run_dir: Path) -> bool:
    """Whether a process belongs to this run: it runs in it, names it, or its training YAML does.

    AReaL is launched from its source tree, so only the YAML (``cluster.fileroot``) ties it to the run directory.
    """
    text = str(run_dir)
    if proc.cwd is not None and (proc.cwd == text or proc.cwd.startswith(text + os.sep)):
        return True
    if re.search(rf"(^|[ =]){re.escape(text)}(/| |$)", proc.cmdline) is not None:
        return True
    config = _config_arg(proc, run_dir)
    return config is not None and _mentions(config, text)


def _config_file(related: Sequence[Proc], found: Found, profile: str, run_dir: Path) -> str | None:
    """The training YAML: the one a process of this run was given, else one in the run directory that looks like one."""
    for kind in ("areal_launcher", "torchrun", "trl_trainer", "launcher", "python"):
        for proc in related:
            config = _config_arg(proc, run_dir) if kind in proc.kinds else None
            if config is not None:
                return _rel(config, run_dir)
    keys = AREAL_KEYS if profile == "areal" else TRL_KEYS if profile == "trl" else frozenset()
    scored = sorted(((len(_yaml_keys(p) & keys), str(p)) for p in found.yamls), key=lambda s: (-s[0], s[1]))
    if scored and scored[0][0] >= 2:
        return _rel(Path(scored[0][1]), run_dir)
    return None


# ---------------------------------------------------------------------------------------------------------------
# Evidence: what was seen, in words a person can check


@dataclass
class Seen:
    """What discovery read once, for every decision below: the walk, the run's processes, log and script texts."""

    run_dir: Path
    found: Found
    related: list[Proc]
    host: list[Proc]
    logs: dict[Path, str]  # the newest logs (head and tail), newest first
    scripts: dict[Path, tuple[Proc, str]]  # the .py files the run's processes run, with one process running each
    proc_root: str = "/proc"

    def rel(self, path: Path) -> str:
        return _rel(path, self.run_dir)


def _head_tail(path: Path) -> str:
    """The start and the end of a file: servers and clients say where they connect when they start, and fail late."""
    try:
        size = path.stat().st_size
        with open_read(path) as fh:
            if size <= LOG_HEAD_BYTES + TAIL_BYTES:
                data = fh.read(LOG_HEAD_BYTES + TAIL_BYTES)
            else:
                data = fh.read(LOG_HEAD_BYTES) + b"\n" + _tail_bytes(fh, size)
    except OSError:
        return ""
    return ANSI.sub("", data.decode("utf-8", "replace"))


def _tail_bytes(fh: BinaryIO, size: int) -> bytes:
    fh.seek(max(0, size - TAIL_BYTES))
    return fh.read(TAIL_BYTES)


def _logs_to_read(found: Found) -> list[Path]:
    areal = [
        d / name
        for d in sorted(found.areal_log_dirs, key=lambda d: -found.areal_log_dirs[d])[:2]
        for name in ("trainer.log", "llm_server.log", "main.log")
        if (d / name).is_file()
    ]
    recent = sorted(found.recent_logs, key=lambda p: (-found.recent_logs[p], str(p)))
    return list(dict.fromkeys([*areal, *recent]))[:MAX_READ_LOGS]


def _scripts(related: Sequence[Proc], run_dir: Path) -> dict[Path, tuple[Proc, str]]:
    """The Python files the run's trainers run (``accelerate launch train.py``, ``torchrun x.py``, ``python x.py``)."""
    out: dict[Path, tuple[Proc, str]] = {}
    for proc in related:
        if not proc.kinds & TRAINER_KINDS:
            continue
        for arg in [a for a in proc.argv[1:] if a.endswith(".py") and not a.startswith("-")][:3]:
            path = Path(arg).expanduser()
            if not path.is_absolute():
                path = Path(proc.cwd or run_dir) / path
            path = Path(os.path.normpath(path))
            if path in out or not path.is_file():
                continue
            try:
                with open_read(path) as fh:
                    out[path] = (proc, fh.read(MAX_SCRIPT_BYTES).decode("utf-8", "replace"))
            except OSError:
                continue
    return out


def _short_cmd(proc: Proc, limit: int = 120) -> str:
    text = proc.cmdline
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _areal_evidence(seen: Seen) -> list[str]:
    found, out = seen.found, []
    for d in sorted(found.areal_log_dirs, key=lambda d: -found.areal_log_dirs[d])[:2]:
        names = ", ".join(n for n in sorted(AREAL_LOG_NAMES) if (d / n).is_file())
        out.append(f"{seen.rel(d)}/: AReaL's log layout ({names})")
    for t in sorted(found.areal_trials, key=lambda t: -found.areal_trials[t])[:2]:
        ckpts = t / "default"
        if ckpts.is_dir() and any(AREAL_CKPT.match(n) for n in _names(ckpts)):
            out.append(f"{seen.rel(ckpts)}/: AReaL checkpoints (epoch{{E}}epochstep{{S}}globalstep{{G}})")
    for p in sorted(found.step_infos, key=lambda p: -found.step_infos[p])[:1]:
        out.append(f"{seen.rel(p)}: AReaL's recover info")
    for proc in seen.related:
        if "areal_launcher" in proc.kinds or ("sglang" in proc.kinds and "areal" in proc.cmdline):
            out.append(f"pid {proc.pid} runs AReaL: {_short_cmd(proc)}")
    for path, text in seen.logs.items():
        if AREAL_LINE.search(text):
            out.append(f"{seen.rel(path)}: AReaL log lines ('(AReaL) …')")
    return out


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _trl_version(seen: Seen) -> tuple[tuple[int, int], Path] | None:
    """The TRL version in TRL's model card (README.md in the output dir or its newest checkpoint), where one is."""
    for out_dir in sorted(seen.found.hf_output_dirs):
        ckpts = sorted((n for n in _names(out_dir) if HF_CKPT.match(n)), key=lambda n: -int(n.split("-")[1]))
        for card in [out_dir / "README.md", *(out_dir / n / "README.md" for n in ckpts[:1])]:
            version = trl_version(_read_tail(card, LOG_HEAD_BYTES)) if card.is_file() else None
            if version is not None:
                return version, card
    return None


def _trl_evidence(seen: Seen) -> list[str]:
    out = []
    for d in sorted(seen.found.hf_output_dirs)[:2]:
        where = "" if d == seen.run_dir else f"{seen.rel(d)}/"
        out.append(f"{where}checkpoint-N/trainer_state.json: HF Trainer checkpoints, as TRL writes them")
    version = _trl_version(seen)
    if version is not None:
        out.append(f"{seen.rel(version[1])}: TRL's model card (TRL {version[0][0]}.{version[0][1]})")
    for proc in seen.related:
        if "trl" in proc.kinds or TRL_COMMAND.search(proc.cmdline):
            out.append(f"pid {proc.pid} runs TRL: {_short_cmd(proc)}")
    for path, (proc, text) in seen.scripts.items():
        m = TRL_SOURCE.search(text)
        if m is not None:
            out.append(f"{seen.rel(path)} (run by pid {proc.pid}) uses TRL: {m.group(0).strip()}")
    for path, text in seen.logs.items():
        if TRL_METRICS.search(text):
            out.append(f"{seen.rel(path)}: TRL GRPO metric dicts ('reward', 'completions/…')")
        elif HF_METRICS.search(text):
            out.append(f"{seen.rel(path)}: HF Trainer metric dicts ('loss', 'learning_rate', …)")
        if TRL_PATHS.search(text):
            out.append(f"{seen.rel(path)}: TRL's source in a traceback")
    for path in seen.found.yamls:
        keys = sorted(_yaml_keys(path) & TRL_KEYS)
        if len(keys) >= 2:
            out.append(f"{seen.rel(path)}: TRL settings ({', '.join(keys)})")
    return out


def _named_actors(seen: Seen) -> dict[int, str]:
    """Ray actors the run's logs name: pid → class, from the prefixes Ray relays their lines with."""
    out: dict[int, str] = {}
    for text in seen.logs.values():
        for m in RAY_PREFIX_PID.finditer(text):
            out.setdefault(int(m.group(2)), m.group(1))
    return out


def _tracker(path: Path) -> str | None:
    try:
        with open_read(path) as fh:
            text = fh.read(64).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return text if text and len(text) < 40 else None


def _actor_evidence(seen: Seen, titles: re.Pattern[str], framework: str) -> list[str]:
    """Live Ray actors of the framework that are the run's: working here, or named in its logs by pid."""
    named = _named_actors(seen)
    related = {p.pid for p in seen.related}
    out = []
    for proc in seen.host:
        if "ray_actor" in proc.kinds and titles.search(proc.cmdline) and (proc.pid in related or proc.pid in named):
            title = proc.argv[0] if proc.argv else proc.cmdline
            out.append(f"pid {proc.pid} is {framework}'s Ray actor {title.strip()} (its log relays it)")
    return out[:4]


def _verl_evidence(seen: Seen) -> list[str]:
    found, out = seen.found, []
    for d in sorted(found.verl_ckpt_dirs, key=lambda d: -found.verl_ckpt_dirs[d])[:2]:
        step = _tracker(d / VERL_TRACKER)
        said = f": {step}" if step else ""
        out.append(f"{seen.rel(d)}/: verl checkpoints (global_step_N beside {VERL_TRACKER}{said})")
    for proc in seen.related:
        if "verl" in proc.kinds:
            out.append(f"pid {proc.pid} runs verl: {_short_cmd(proc)}")
    out += _actor_evidence(seen, VERL_ACTOR_TITLE, "verl")
    for path, text in seen.logs.items():
        m = VERL_LINE.search(text)
        if m is not None:
            out.append(f"{seen.rel(path)}: verl's lines ('{m.group(0).strip()[:60]}…')")
        elif (a := VERL_ACTORS.search(text)) is not None:
            out.append(f"{seen.rel(path)}: Ray relays verl's {a.group(1)} actor ('{a.group(0)})')")
    return out


def _openrlhf_evidence(seen: Seen) -> list[str]:
    found, out = seen.found, []
    for d in sorted(found.ds_ckpt_dirs, key=lambda d: -found.ds_ckpt_dirs[d])[:2]:
        tag = _tracker(d / "_actor" / "latest")
        said = f": {tag}" if tag else ""
        out.append(f"{seen.rel(d)}/: OpenRLHF checkpoints (_actor/global_stepN beside DeepSpeed's latest{said})")
    for proc in seen.related:
        if "openrlhf" in proc.kinds and "openrlhf" in proc.cmdline:
            out.append(f"pid {proc.pid} runs OpenRLHF: {_short_cmd(proc)}")
    out += _actor_evidence(seen, OPENRLHF_ACTOR_TITLE, "OpenRLHF")
    for path, text in seen.logs.items():
        m = OPENRLHF_LINE.search(text)
        if m is not None:
            out.append(f"{seen.rel(path)}: OpenRLHF's per-step lines ('{m.group(0).strip()[:40]}…')")
        elif (a := OPENRLHF_ACTORS.search(text)) is not None:
            out.append(f"{seen.rel(path)}: Ray relays OpenRLHF's {a.group(1)} actor ('{a.group(0)})')")
    return out


def _ray_session_evidence(seen: Seen) -> list[str]:
    return [f"{seen.rel(d)}/: Ray's session logs (raylet.out, gcs_server.out)" for d in seen.found.ray_sessions[:1]]


def _workers_evidence(seen: Seen) -> list[str]:
    return [f"{seen.rel(p)}: emergency-brake lines" for p, text in seen.logs.items() if BRAKE.search(text)]


def _run_evidence(seen: Seen, now: float) -> list[str]:
    """Signs of some training run, whatever made it: recent logs, processes working here."""
    out = []
    for path in list(seen.logs)[:3]:
        age = now - seen.found.recent_logs.get(path, now)
        out.append(f"{seen.rel(path)}: a log written {_age(age)} ago")
    for proc in seen.related:
        if proc.kinds & set(SERVER_KINDS):
            what = "an inference server"
        elif proc.kinds & TRAINER_KINDS == {"python"} and not _writes_under(proc.pid, seen.run_dir, seen.proc_root):
            what = "a Python process that writes nothing here (not taken for the trainer)"
        else:
            what = "a trainer"
        out.append(f"pid {proc.pid}, {what}, works in or names this directory: {_short_cmd(proc)}")
    return out


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def _choose_profile(seen: Seen, now: float) -> tuple[ProfileName, list[str], bool]:
    """The profile the evidence points to, that evidence, and whether any run was seen at all.

    AReaL and TRL need their own layouts, log lines or processes; a pool of workers its brake lines; anything else
    that is a run (a log, a trainer working here) is generic, which invents nothing.
    """
    run = _run_evidence(seen, now)
    for name, evidence in (
        ("areal", _areal_evidence(seen)),
        ("verl", _verl_evidence(seen)),
        ("openrlhf", _openrlhf_evidence(seen)),
        ("trl", _trl_evidence(seen)),
        ("workers", _workers_evidence(seen)),
    ):
        if evidence:
            extra = _ray_session_evidence(seen) if name in ("verl", "openrlhf") else []
            return name, [*evidence, *extra], True  # type: ignore[return-value]
    return "generic", run, bool(run)


def _looked_for(seen: Seen) -> str:
    """Where discovery looked, and where on this host a run seems to be instead."""
    text = f"looked for {LOOKED_FOR}"
    elsewhere = [
        p for p in seen.host if p.pid not in {q.pid for q in seen.related} and p.kinds & (TRAINER_KINDS - {"python"})
    ]
    if elsewhere:
        where = "; ".join(f"pid {p.pid} in {p.cwd or '?'}: {_short_cmd(p, 80)}" for p in elsewhere[:3])
        text += f". Training processes on this host work elsewhere: {where}"
    return text


# ---------------------------------------------------------------------------------------------------------------
# The server, from evidence only (rlwatch.discover.server_evidence)


def _training_settings(seen: Seen, config_file: str | None) -> tuple[dict[str, object], list[str]]:
    """TRL's settings from the trainer's script, its training YAML and its command line (later ones win)."""
    settings: dict[str, object] = {}
    where: list[str] = []
    for path, (_proc, text) in seen.scripts.items():
        found = settings_from_script(text)
        if found:
            settings.update(found)
            where.append(seen.rel(path))
    if config_file:
        doc = _yaml_doc(Path(config_file) if os.path.isabs(config_file) else seen.run_dir / config_file)
        found = settings_from_mapping(doc) if isinstance(doc, dict) else {}
        if found:
            settings.update(found)
            where.append(config_file)
    for proc in seen.related:
        found = settings_from_argv(proc.argv) if proc.kinds & TRAINER_KINDS else {}
        if found:
            settings.update(found)
            where.append(f"pid {proc.pid}'s command line")
    return settings, where


def _server_clue(seen: Seen, config_file: str | None, run_found: bool) -> Clue | None:
    """The first evidence, in order of strength: the run's server process, TRL's settings, the logs, AReaL's
    server log, then the only server process on the host. None when nothing says there is a server or is none."""
    for proc in seen.related:
        server = server_of(proc)
        if server is not None:
            return Clue(True, f"pid {proc.pid} serves it: {_short_cmd(proc)}", server.kind, server.url)
    if not run_found:
        return None
    settings, where = _training_settings(seen, config_file)
    version = _trl_version(seen)
    clue = from_trl_settings(settings, " and ".join(where), version[0] if version else None)
    if clue is not None:
        return clue
    for path, text in seen.logs.items():
        clue = from_log(text, seen.rel(path))
        if clue is not None:
            return clue
    for d in sorted(seen.found.areal_log_dirs, key=lambda d: -seen.found.areal_log_dirs[d])[:1]:
        if (d / "llm_server.log").is_file():
            log = seen.rel(d / "llm_server.log")
            return Clue(True, f"{log}: AReaL's server log; its address is not in it yet", "sglang")
    servers = {s.url: (p, s) for p in seen.host if (s := server_of(p)) is not None}
    if len(servers) == 1:
        proc, server = next(iter(servers.values()))
        why = f"pid {proc.pid} is the only inference server on this host: {_short_cmd(proc)}"
        return Clue(True, why, server.kind, server.url)
    return None


def _yaml_doc(path: Path) -> object:
    import yaml

    try:
        with open_read(path) as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
        if len(data) > MAX_YAML_BYTES:
            return None
        return yaml.safe_load(data.decode("utf-8"))
    except Exception:  # an unreadable or odd file says nothing
        return None


NO_SERVER = (
    "no server evidence: no server process, server log, or server address in the trainer's command line, "
    "training config or logs"
)


def _as_profile(profile: str) -> ProfileName | None:
    for name in PROFILE_NAMES:
        if profile == name:
            return name  # type: ignore[return-value]
    return None


def discover(run_dir: Path, profile: str = "auto", *, proc_root: str = "/proc", clock: Clock | None = None) -> Config:
    """A configuration for ``run_dir`` from its files and the running processes (see the module docstring).

    ``profile`` "auto" follows the evidence (:func:`_choose_profile`); every choice carries its evidence in
    ``cfg.provenance``. Never raises on odd files or processes.
    """
    run_dir = Path(os.path.abspath(run_dir.expanduser()))
    now = (clock or SystemClock()).time()
    found = walk_run_dir(run_dir, now)
    # Processes of this run speak for it. Others (a pod usually runs one job) can only name the server, and only
    # when nothing of this run says otherwise; a profile or a training YAML is never taken from them.
    host = scan_processes(proc_root)
    direct = {p.pid for p in host if _related(p, run_dir)}
    tree = procfs.descendants(direct, procfs.children_map(proc_root)) if direct else set()
    related = [p for p in host if p.pid in tree]
    writing = live_run_dirs(run_dir, found, proc_root)
    runs = several_runs(run_dir, found, writing)
    if runs:
        worked = _worked_in(related, runs, writing)
        if worked is None:
            raise SeveralRuns(run_dir, runs)
        # The one a live process works in: where the person stands, narrowed to the run that is running. Every
        # view says so first: a choice among runs is evidence to show, not a silent switch of directory.
        chosen_run, by = worked
        cfg = discover(chosen_run, profile, proc_root=proc_root, clock=clock)
        why = (
            f"{run_dir} holds {len(runs)} runs; this is the one a live process works in: pid {by.pid} "
            f"({_short_cmd(by)})"
        )
        return cfg.with_provenance(replace(cfg.provenance, profile=(why, *cfg.provenance.profile)))
    texts = {p: _head_tail(p) for p in _logs_to_read(found)}
    seen = Seen(run_dir, found, related, host, texts, _scripts(related, run_dir), proc_root)
    chosen, evidence, run_found = _choose_profile(seen, now)
    forced = _as_profile(profile)
    name = forced or chosen
    if forced is not None:
        evidence = [f"--profile {forced}", *(evidence if forced == chosen else [])]
    if found.cut:  # what was not looked at may hold what would have decided otherwise
        evidence = [*evidence, "run directory not walked whole: " + "; ".join(found.cut[:3])]
    base = profile_defaults(name, run_dir)
    training = base.training

    # Logs: the newest AReaL trial as a glob (files it creates later are seen), then other recent logs.
    logs: list[str] = []
    trial_dir = max(found.areal_log_dirs, key=lambda d: (found.areal_log_dirs[d], str(d)), default=None)
    if trial_dir is not None:
        logs.append(f"{_glob_rel(trial_dir, run_dir)}/*.log" if trial_dir != run_dir else "*.log")
    probed = sorted(found.record_files, key=lambda p: (-found.record_files[p], str(p)))[:RECORD_PROBE_FILES]
    found.recent_logs.update({p: found.record_files[p] for p in probed if record_log(p)})
    found.recent_logs.update(_written_by(related, proc_root))
    others = [p for p in found.recent_logs if trial_dir is None or p.parent != trial_dir]
    others = sorted(others, key=lambda p: (-found.recent_logs[p], str(p)))[: MAX_LOGS - len(logs)]
    logs += sorted(_glob_rel(p, run_dir) for p in others)

    # Checkpoints: the AReaL trial that matches the logs (or the newest), and HF output dirs.
    ckpt_dirs: list[str] = []
    trial = None
    if found.areal_trials:
        same = [t for t in found.areal_trials if trial_dir is not None and _tail3(t) == _tail3(trial_dir)]
        trial = same[0] if same else max(found.areal_trials, key=lambda t: (found.areal_trials[t], str(t)))
        ckpt_dirs.append(_rel(trial, run_dir))
    ckpt_dirs += sorted(_rel(d, run_dir) for d in found.hf_output_dirs)[:8]
    ckpt_dirs += sorted(_rel(d, run_dir) for d in (*found.verl_ckpt_dirs, *found.ds_ckpt_dirs))[:8]

    recover = None
    if trial is not None and (trial / "recover_info" / "step_info.json") in found.step_infos:
        recover = _glob_rel(trial / "recover_info" / "step_info.json", run_dir)
    elif found.step_infos:
        recover = _glob_rel(max(found.step_infos, key=lambda p: (found.step_infos[p], str(p))), run_dir)

    # A profile's checkpoint directory is kept only where its layout is seen: AReaL's logs/ tree means checkpoints/
    # will follow; without it, a directory that does not exist would be reported missing on every view.
    layout_seen = bool(found.areal_log_dirs or found.areal_trials or found.step_infos)
    keep_defaults = name != "areal" or layout_seen
    config_file = _config_file(related, found, name, run_dir) or training.config_file
    training = training.model_copy(
        update={
            "logs": logs or training.logs,
            "checkpoint_dirs": ckpt_dirs or (training.checkpoint_dirs if keep_defaults else []),
            "recover_info": recover or (training.recover_info if keep_defaults else None),
            "config_file": config_file,
        }
    )
    clue = _server_clue(seen, config_file, run_found)
    if name in ("verl", "openrlhf") and (clue is None or not clue.why.startswith("pid ")):
        # Their rollout engines are Ray actors (verl's WorkerDicts, OpenRLHF's vLLM engine actors), not an HTTP
        # server: only a server process of this run says otherwise. Addresses in their logs are Ray's dashboard.
        clue = Clue(False, f"{name}'s rollout engines run inside its Ray actors: no inference server to probe")
    if clue is None:
        server = base.server.model_copy(update={"url": None, "expected": None})
        server_why: tuple[str, ...] = (NO_SERVER if run_found else "no training run here",)
    elif clue.expected:
        kind = clue.kind or base.server.kind
        update: dict[str, object] = {"kind": kind, "url": clue.url, "health_path": HEALTH_PATH.get(kind or "")}
        update["expected"] = None if clue.url else True
        server = base.server.model_copy(update=update)
        server_why = (clue.why,)
    else:
        server = base.server.model_copy(update={"url": None, "expected": False})
        server_why = (clue.why,)
    provenance = Provenance(
        source="discovered",
        profile=tuple(evidence),
        server=server_why,
        run_found=run_found,
        looked_for=None if run_found else _looked_for(seen),
    )
    ray = base.ray
    if found.ray_sessions:  # a copy of Ray's session logs under the run (a live cluster's is found when read)
        newest = max(found.ray_sessions, key=lambda d: (_mtime(str(d / "raylet.out")) or 0.0, str(d)))
        ray = ray.model_copy(update={"session_logs": _rel(newest, run_dir)})
    processes = _trainer_rule(base.processes, related, run_dir, proc_root)
    cfg = base.model_copy(update={"training": training, "server": server, "ray": ray, "processes": processes})
    return cfg.with_provenance(provenance)


def trainer_pattern(argv: tuple[str, ...]) -> str:
    r"""A role pattern that matches this command line and commands like it: the script a Python runs
    (``python3 train.py`` → ``(^|/)python[0-9.]*( \S+)* (\S*/)?train\.py( |$)``), the module it runs
    (``-m pkg.main``), or the program itself (``torchrun``, ``accelerate``)."""
    if not argv:
        return r"^$"
    prog = os.path.basename(argv[0])
    if re.fullmatch(r"python[0-9.]*", prog):
        rest = list(argv[1:])
        for i, word in enumerate(rest):
            if word == "-c":
                return r"(^|/)python[0-9.]*( \S+)* -c "  # inline code: nothing narrower is stable
            if word == "-m" and i + 1 < len(rest):
                return rf"(^|/)python[0-9.]*( \S+)* -m {re.escape(rest[i + 1])}( |$)"
            if not word.startswith("-"):
                return rf"(^|/)python[0-9.]*( \S+)* (\S*/)?{re.escape(os.path.basename(word))}( |$)"
    return rf"(^|/){re.escape(prog)}( |$)"


_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "fish", "ksh", "tcsh", "csh", "env", "nohup", "timeout", "setsid"})


def _writes_under(pid: int, run_dir: Path, proc_root: str) -> bool:
    """Whether ``pid`` or a process it started holds a file under ``run_dir`` open for writing."""
    real = os.path.realpath(run_dir).rstrip("/") + "/"
    family = {pid, *procfs.descendants({pid}, procfs.children_map(proc_root))}
    for one in sorted(family)[:64]:
        for fd, path in procfs.fd_entries(one, proc_root) or []:
            if path.startswith(real) and procfs.fd_writable(one, fd, proc_root):
                return True
    return False


def _trainer_rule(
    rules: list[ProcessRule], related: list[Proc], run_dir: Path, proc_root: str = "/proc"
) -> list[ProcessRule]:
    """The profile's rules, with a trainer rule that matches the trainer discovery found when none of them does:
    a role's pattern that misses the run's own ``python3 train.py`` would leave it out of every table, and a
    written ``rlwatch.yaml`` (``rlwatch init``) would name a trainer its rules never select.

    A plain Python process (no launcher, no framework on its command line) is the trainer only when it, or what it
    started, writes under the run directory: a REPL, a ``python3 -c`` reading ``rlwatch report --json`` or a script
    looking at checkpoints stands in the directory too, and a rule made from it would make every such process "the
    trainer" (and a dead run "still starting")."""
    trainers = [
        p
        for p in related
        if p.kinds & TRAINER_KINDS
        and not p.kinds & set(SERVER_KINDS)
        and p.argv
        and os.path.basename(p.argv[0]) not in _SHELLS  # `bash -c "python3 train.py"` names the trainer, is not it
        and (p.kinds & TRAINER_KINDS != {"python"} or _writes_under(p.pid, run_dir, proc_root))
    ]
    if not trainers:
        return rules
    patterns = [re.compile(r.cmdline_regex) for r in rules if r.cmdline_regex and r.role in ("trainer", "launcher")]
    if any(rx.search(p.cmdline) for p in trainers for rx in patterns):
        return rules
    top = min(trainers, key=lambda p: p.pid)  # the first started: the launcher of the others, as a rule
    kept = [r for r in rules if r.role != "trainer"]
    return [*kept, ProcessRule(role="trainer", cmdline_regex=trainer_pattern(top.argv))]
