"""Finding out what runs in a run directory when nobody wrote a configuration.

A person who SSHes into a pod and types ``rlwatch`` should see their run without writing YAML first. So the run
directory is walked (bounded: a checkpoint tree can hold millions of files) for the layouts AReaL and TRL leave
behind, and ``/proc`` is read for the processes they start, with the server ports in their command lines. The
result is a profile's defaults (:mod:`rlwatch.profiles`) narrowed to what was found: the newest AReaL trial's logs,
its checkpoints and recover info, the live server's URL, the training YAML the launcher was given.

Everything found is written relative to the run directory, so ``rlwatch init`` writes a file that still works
after the directory is moved.
"""

from __future__ import annotations

import glob
import ipaddress
import os
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rlwatch.clock import Clock, SystemClock
from rlwatch.config import Config, ServerConfig
from rlwatch.profiles import (
    AREAL_LAUNCHER,
    PROFILE_NAMES,
    SGLANG_SERVER,
    TORCHRUN,
    TRL_SERVER,
    TRL_TRAINER,
    VLLM_SERVER,
    ProfileName,
    profile_defaults,
)
from rlwatch.sources import procfs

MAX_DEPTH = 8
MAX_ENTRIES = 20_000
RECENT_S = 24 * 3600.0
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
ANSI = re.compile(r"\x1b\[[0-9;]*m")
BRAKE = re.compile(r"emergency[ _-]?brake", re.IGNORECASE)
SGLANG_LAUNCHED = re.compile(r"SGLang server launched at: (https?://[^\s'\"]+)")
ROLLOUT_SERVERS = re.compile(
    r"Found \d+ rollout servers: ([0-9A-Za-z.\-\[\]:]+:\d+)|HTTP request to ([0-9A-Za-z.\-\[\]:]+:\d+)/generate failed"
)

AREAL_KEYS = frozenset(
    {"experiment_name", "trial_name", "cluster", "rollout", "actor", "sglang", "saver", "recover", "gconfig"}
)
TRL_KEYS = frozenset(
    {"use_vllm", "vllm_mode", "num_generations", "max_completion_length", "vllm_server_host", "vllm_server_port"}
)

# What a process is, from its command line. Servers first: a server command line never counts as a trainer.
PROC_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("areal_launcher", re.compile(AREAL_LAUNCHER)),
    ("sglang", re.compile(SGLANG_SERVER)),
    ("trl", re.compile(TRL_SERVER)),
    ("vllm", re.compile(VLLM_SERVER)),
    ("torchrun", re.compile(TORCHRUN)),
    ("trl_trainer", re.compile(TRL_TRAINER)),
)
SERVER_KINDS = ("sglang", "trl", "vllm")
DEFAULT_PORT = {"sglang": 30000, "trl": 8000, "vllm": 8000}
HEALTH_PATH = {"sglang": "/health", "trl": "/health/", "vllm": "/health"}


@dataclass
class Found:
    """What the walk of the run directory saw (absolute paths)."""

    areal_log_dirs: dict[Path, float] = field(default_factory=dict)  # dir -> newest log mtime
    areal_trials: dict[Path, float] = field(default_factory=dict)  # checkpoints/<u>/<e>/<t> -> newest ckpt mtime
    step_infos: dict[Path, float] = field(default_factory=dict)
    hf_output_dirs: set[Path] = field(default_factory=set)
    recent_logs: dict[Path, float] = field(default_factory=dict)
    yamls: list[Path] = field(default_factory=list)
    entries: int = 0
    truncated: bool = False


@dataclass(frozen=True)
class Proc:
    pid: int
    argv: tuple[str, ...]
    cwd: str | None
    kinds: frozenset[str]

    @property
    def cmdline(self) -> str:
        return " ".join(self.argv)


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


def walk_run_dir(run_dir: Path, now: float) -> Found:
    """Breadth-first, depth ≤ MAX_DEPTH, at most MAX_ENTRIES entries, symlinked dirs not followed, never raises."""
    found = Found()
    queue: deque[tuple[Path, int]] = deque([(run_dir, 0)])
    while queue:
        directory, depth = queue.popleft()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            continue
        names = {e.name for e in entries}
        for entry in entries:
            found.entries += 1
            if found.entries > MAX_ENTRIES:
                found.truncated = True
                return found
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = entry.is_file()
            except OSError:
                continue
            if is_dir:
                _see_dir(found, path, entry.name)
                descend = entry.name not in SKIP_DIRS and entry.name not in OPAQUE_DIRS
                descend = descend and not AREAL_CKPT.match(entry.name) and not HF_CKPT.match(entry.name)
                if descend and depth + 1 < MAX_DEPTH:
                    queue.append((path, depth + 1))
            elif is_file:
                _see_file(found, path, entry.name, depth, now)
        if _is_areal_log_dir(directory, names):
            times = [t for n in names & AREAL_LOG_NAMES if (t := _mtime(str(directory / n))) is not None]
            found.areal_log_dirs[directory] = max(times, default=0.0)
    return found


def _see_dir(found: Found, path: Path, name: str) -> None:
    if AREAL_CKPT.match(name):
        trial = path.parent.parent
        found.areal_trials[trial] = max(found.areal_trials.get(trial, 0.0), _mtime(str(path)) or 0.0)
    elif HF_CKPT.match(name) and (path / "trainer_state.json").is_file():
        found.hf_output_dirs.add(path.parent)


def _see_file(found: Found, path: Path, name: str, depth: int, now: float) -> None:
    if name == "step_info.json" and path.parent.name == "recover_info":
        found.step_infos[path] = _mtime(str(path)) or 0.0
        found.areal_trials.setdefault(path.parent.parent, 0.0)
    elif name.endswith(".log") and not (name.startswith("debug") and "wandb" in path.parts):
        # wandb's own debug logs are about wandb; its run output (files/output.log) is kept.
        mtime = _mtime(str(path))
        if mtime is not None and now - mtime <= RECENT_S:
            found.recent_logs[path] = mtime
    elif name.endswith((".yaml", ".yml")) and name not in ("rlwatch.yaml", "rlwatch.yml") and depth <= 1:
        found.yamls.append(path)


def _read_tail(path: Path, size: int = TAIL_BYTES) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            fh.seek(max(0, end - size))
            data = fh.read(size)
    except OSError:
        return ""
    return ANSI.sub("", data.decode("utf-8", "replace"))


def _yaml_keys(path: Path) -> set[str]:
    try:
        with path.open("rb") as fh:
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
        argv = procfs.read_cmdline(pid, proc_root)
        kinds = _classify(" ".join(argv)) if argv else frozenset()
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


def _url_host(host: str | None) -> str:
    if not host or host in ("0.0.0.0", "*"):  # noqa: S104 - a wildcard listener is reached on loopback
        return "127.0.0.1"
    bare = host.strip("[]")
    try:
        addr = ipaddress.ip_address(bare)
    except ValueError:
        return host  # a host name
    if addr.is_unspecified:
        return "[::1]" if addr.version == 6 else "127.0.0.1"
    return f"[{bare}]" if addr.version == 6 else bare


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
    host = _url_host(_option(proc.argv, "--host"))
    return ServerConfig(kind=kind, url=f"http://{host}:{port}", health_path=HEALTH_PATH[kind])  # type: ignore[arg-type]


def _server_from_logs(log_dirs: Iterable[Path]) -> ServerConfig | None:
    for directory in log_dirs:
        for name, pattern, prefix in (
            ("llm_server.log", SGLANG_LAUNCHED, ""),
            ("trainer.log", ROLLOUT_SERVERS, "http://"),
        ):
            # The last address a line names: whichever of the pattern's groups matched.
            hits = [m.group(m.lastindex or 0) for m in pattern.finditer(_read_tail(directory / name))]
            if hits:
                url = prefix + str(hits[-1]).rstrip("/.,")
                return ServerConfig(kind="sglang", url=url, health_path=HEALTH_PATH["sglang"])
    return None


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
    if not value or not proc.kinds & {"areal_launcher", "torchrun", "trl_trainer"}:
        return None
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = Path(proc.cwd or run_dir) / p
    return Path(os.path.normpath(p))


def _mentions(path: Path, text: str) -> bool:
    try:
        with path.open("rb") as fh:
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
    for kind in ("areal_launcher", "torchrun", "trl_trainer"):
        for proc in related:
            config = _config_arg(proc, run_dir) if kind in proc.kinds else None
            if config is not None:
                return _rel(config, run_dir)
    keys = AREAL_KEYS if profile == "areal" else TRL_KEYS if profile == "trl" else frozenset()
    scored = sorted(((len(_yaml_keys(p) & keys), str(p)) for p in found.yamls), key=lambda s: (-s[0], s[1]))
    if scored and scored[0][0] >= 2:
        return _rel(Path(scored[0][1]), run_dir)
    return None


def _choose_profile(found: Found, procs: Sequence[Proc]) -> ProfileName:
    kinds = set().union(*(p.kinds for p in procs)) if procs else set()
    if found.areal_log_dirs or found.areal_trials or "areal_launcher" in kinds:
        return "areal"
    if found.hf_output_dirs or kinds & {"trl", "vllm", "trl_trainer"}:
        return "trl"
    if kinds & {"sglang", "torchrun"}:
        return "areal"
    newest = sorted(found.recent_logs, key=lambda p: -found.recent_logs[p])[:MAX_LOGS]
    if any(BRAKE.search(_read_tail(p, 64 * 1024)) for p in newest):
        return "workers"
    return "areal"


def _choose_server(related: Sequence[Proc], seen: Sequence[Proc]) -> ServerConfig | None:
    """A server of this run's process tree; else the host's, when this run is unknown or the host has one only."""
    mine = [s for s in map(server_of, related) if s is not None]
    if mine:
        return mine[0]
    every = [s for s in map(server_of, seen) if s is not None]
    if every and (not related or len({s.url for s in every}) == 1):
        return every[0]
    return None


def _as_profile(profile: str) -> ProfileName | None:
    for name in PROFILE_NAMES:
        if profile == name:
            return name  # type: ignore[return-value]
    return None


def discover(run_dir: Path, profile: str = "auto", *, proc_root: str = "/proc", clock: Clock | None = None) -> Config:
    """A configuration for ``run_dir`` from its files and the running processes (see the module docstring).

    ``profile`` "auto" picks areal when AReaL layouts or processes are seen, trl for HF checkpoints or TRL/vLLM
    processes, workers for logs with emergency-brake lines, else areal. Never raises on odd files or processes.
    """
    run_dir = Path(os.path.abspath(run_dir.expanduser()))
    now = (clock or SystemClock()).time()
    found = walk_run_dir(run_dir, now)
    # Processes of this run speak for it. Others (a pod usually runs one job) only choose the profile and the
    # server when this run has none; a training YAML is never taken from them.
    seen = scan_processes(proc_root)
    direct = {p.pid for p in seen if _related(p, run_dir)}
    tree = procfs.descendants(direct, procfs.children_map(proc_root)) if direct else set()
    related = [p for p in seen if p.pid in tree]
    procs = related or seen
    name = _as_profile(profile) or _choose_profile(found, procs)
    base = profile_defaults(name, run_dir)
    training = base.training

    # Logs: the newest AReaL trial as a glob (files it creates later are seen), then other recent logs.
    logs: list[str] = []
    trial_dir = max(found.areal_log_dirs, key=lambda d: (found.areal_log_dirs[d], str(d)), default=None)
    if trial_dir is not None:
        logs.append(f"{_glob_rel(trial_dir, run_dir)}/*.log" if trial_dir != run_dir else "*.log")
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

    recover = None
    if trial is not None and (trial / "recover_info" / "step_info.json") in found.step_infos:
        recover = _glob_rel(trial / "recover_info" / "step_info.json", run_dir)
    elif found.step_infos:
        recover = _glob_rel(max(found.step_infos, key=lambda p: (found.step_infos[p], str(p))), run_dir)

    training = training.model_copy(
        update={
            "logs": logs or training.logs,
            "checkpoint_dirs": ckpt_dirs or training.checkpoint_dirs,
            "recover_info": recover or training.recover_info,
            "config_file": _config_file(related, found, name, run_dir) or training.config_file,
        }
    )
    server = _choose_server(related, seen)
    if server is None and found.areal_log_dirs:
        ordered = sorted(found.areal_log_dirs, key=lambda d: -found.areal_log_dirs[d])
        server = _server_from_logs(ordered)
    update: dict[str, object] = {"training": training}
    if server is not None:
        update["server"] = base.server.model_copy(
            update={"kind": server.kind, "url": server.url, "health_path": server.health_path}
        )
    elif not (logs or ckpt_dirs or recover):
        # Nothing of a run here, no server process, none named in the logs: probing the profile's default port
        # would report a server "down" on a host that never had one.
        update["server"] = base.server.model_copy(update={"url": None})
    return base.model_copy(update=update)


# ---------------------------------------------------------------------------------------------------------------
# Telling a person, and writing it down


def _abs(cfg: Config, path: str) -> str:
    p = Path(path).expanduser()
    return str(p) if p.is_absolute() else os.path.join(cfg.run_dir or os.getcwd(), path)


def _count(pattern: str, limit: int = 1000) -> int:
    n = 0
    try:
        for _ in glob.iglob(pattern, recursive=True):
            n += 1
            if n >= limit:
                break
    except OSError:
        return n
    return n


def describe(cfg: Config) -> list[str]:
    """Human lines saying what this configuration watches and whether it is there now."""
    lines = [f"profile: {cfg.profile}", f"run directory: {cfg.run_dir or os.getcwd()}"]
    for pattern in cfg.training.logs:
        n = _count(_abs(cfg, pattern))
        lines.append(f"logs: {pattern} ({n}{'+' if n >= 1000 else ''} file{'s' if n != 1 else ''} now)")
    if not cfg.training.logs:
        lines.append("logs: none configured")
    for directory in cfg.training.checkpoint_dirs:
        there = os.path.isdir(_abs(cfg, directory))
        lines.append(f"checkpoints: {directory}{'' if there else ' (not there yet)'}")
    if cfg.training.recover_info:
        there = _count(_abs(cfg, cfg.training.recover_info), 1) > 0
        lines.append(f"recover info: {cfg.training.recover_info}{'' if there else ' (not there yet)'}")
    if cfg.training.config_file:
        lines.append(f"training config: {cfg.training.config_file}")
    if cfg.server.url:
        lines.append(
            f"server: {cfg.server.kind or 'unknown kind'} at {cfg.server.url} (health {cfg.server.health_path})"
        )
    else:
        lines.append("server: none configured")
    for rule in cfg.processes:
        how = f"cmdline /{rule.cmdline_regex}/" if rule.cmdline_regex else f"pidfile {rule.pidfile}"
        lines.append(f"process {rule.role}: {how}{' (expected to run)' if rule.expected else ''}")
    if cfg.gpu.backend != "auto":
        lines.append(f"gpu: {cfg.gpu.backend}")
    return lines


HEADER = """\
# rlwatch configuration for this run directory.
# Only values that differ from the built-in defaults are written here; every key, its default and what it
# means are in configs/reference.yaml. Paths are relative to this directory. Edit freely: rlwatch reads this
# file instead of discovering the run again.
"""


def dump_config(cfg: Config) -> str:
    """YAML of the values that differ from the defaults, under a header; loads back to ``cfg`` (less run_dir).

    ``run_dir`` is left out: the file lives in the run directory, and a copied directory should keep working.
    """
    data = cfg.model_dump(mode="json", exclude_defaults=True, exclude={"run_dir"})
    if not data:
        return HEADER
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)
    return f"{HEADER}\n{body}"
