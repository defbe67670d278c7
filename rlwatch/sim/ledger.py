"""The simulator's own account of what it wrote, so tests can check rlwatch's counts against the truth.

Each piece (a separate process) keeps a *part*: ``.sim/ledger.d/<name>-<pid>.json``, rewritten atomically whenever a
line it writes falls under an event kind, or its state or facts change. The supervisor sums the parts into
``.sim/ledger.json``. Parts are per process so that no two processes ever write the same file, and a restarted
piece simply adds a new part.

Counting follows rlwatch's rules: after ANSI colour codes are stripped, text is split as universal newlines do, and each
line counts at most once per kind. A traceback's quoted source line (``    raise TimeoutError(...)``) names an error
without being one, so it does not count for the error kinds. A process start-up banner that is not the first in its
file is a restart. The kind table here is the simulator's own, deliberately written from the frameworks' formats
rather than imported from the event engine, so that the two can check each other.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rlwatch.sim.common import Layout, atomic_write_json, read_json

ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")

KINDS: dict[str, re.Pattern[str]] = {
    "connection_refused": re.compile(
        r"ConnectionRefusedError|Connection refused|Connect call failed|server can't be reached at"
    ),
    "traceback": re.compile(r"Traceback \(most recent call last\)"),
    "cuda_oom": re.compile(r"CUDA out of memory"),
    "cuda_busy": re.compile(r"busy or unavailable"),
    "nccl_timeout": re.compile(r"Watchdog caught collective operation timeout"),
    "nccl_error": re.compile(r"NCCL error"),
    "timeout": re.compile(r"Timeout waiting for|[Tt]imed out after|TimeoutError|Read timed out"),
    "child_failed": re.compile(r"ChildFailedError"),
    "engine_dead": re.compile(
        r"EngineDeadError|EngineCore encountered a fatal error|Scheduler hit an exception|Received sigquit from a child"
    ),
    "emergency_brake": re.compile(r"emergency[ _-]?brake", re.IGNORECASE),
    "oom_kill": re.compile(r"Killed process \d+"),
    "weight_update": re.compile(r"Loading weights from disk done in|Update weights end\.|POST /reset_prefix_cache/"),
    "checkpoint_saved": re.compile(r"Saved recover checkpoint to|Saving model checkpoint to"),
    "step": re.compile(r"Train step \d+/\d+ done\.|^\{'(?:loss|reward)'"),
    "server_ready": re.compile(
        r"The server is fired up and ready to roll!|Servers are all ready!|SGLang server launched at"
        r"|Starting vLLM server on|Starting vLLM API server|Application startup complete\."
    ),
    # One line per restart: "Loading recover info from" always precedes "Recovering from StepInfo(".
    "restart": re.compile(
        r"Recovering from StepInfo\(|LocalLauncher: .*\brun_id=0*[1-9]|Continuing training from checkpoint"
    ),
    # A process start-up banner; every one after the first in a file is a restart.
    "_banner": re.compile(r"rlwatch-sim start|\*{5} Running training \*{5}|LocalLauncher: .*\brun_id=\d+"),
    "trial": re.compile(r"\btrial \d+ done in\b"),  # the workers' progress kind (a custom kind in rlwatch.yaml)
    # A full /dev/shm (PyTorch's DataLoader, NCCL) and a GPU's hardware failing, as the frameworks print them.
    "shm_error": re.compile(r"insufficient shared memory|out of shared memory|\bBus error\b|shared memory segment"),
    "gpu_fault": re.compile(r"uncorrectable ECC error encountered|GPU has fallen off the bus|\bGPU is lost\b"),
}


ERROR_KINDS = frozenset(
    {
        "connection_refused",
        "cuda_oom",
        "cuda_busy",
        "nccl_error",
        "timeout",
        "child_failed",
        "engine_dead",
        "shm_error",
        "gpu_fault",
    }
)
CODE_LINE = re.compile(r"^\s*(?:#|(?:raise|except|if|elif|assert|return|def|class|await|yield|lambda)\b)")
BANNER_LITERALS = ("rlwatch-sim start", "***** Running training *****", "LocalLauncher: ")


def kinds_of_line(line: str) -> set[str]:
    """The kinds one line (without its newline) falls under; ``_banner`` marks a start-up banner."""
    text = ANSI_RE.sub("", line)
    kinds = {kind for kind, rx in KINDS.items() if rx.search(text)}
    if "step" in kinds and text.startswith("{") and "'train_runtime'" in text:
        kinds.discard("step")  # the end-of-training summary dict is not a step
    if kinds & ERROR_KINDS and CODE_LINE.match(text):
        kinds -= ERROR_KINDS
    return kinds


class PieceLedger:
    """One process's part of the ledger: counts per file and kind, its state, and facts a test may need."""

    def __init__(self, layout: Layout, role: str, name: str | None = None) -> None:
        self.layout = layout
        self._lock = threading.Lock()
        pid = os.getpid()
        self.path = layout.parts_dir / f"{name or role}-{pid}.json"
        self._data: dict[str, Any] = {
            "role": role,
            "name": name or role,
            "pid": pid,
            "started": time.time(),
            "state": "starting",
            "counts": {},
            "facts": {},
        }
        self._flush()

    @property
    def state(self) -> str:
        return str(self._data["state"])

    def add(self, file_key: str, counts: Counter[str]) -> None:
        if not counts:
            return
        with self._lock:
            per_file = self._data["counts"].setdefault(file_key, {})
            for kind, n in counts.items():
                per_file[kind] = per_file.get(kind, 0) + n
            self._flush()

    def update(self, state: str | None = None, **facts: object) -> None:
        with self._lock:
            if state is not None:
                self._data["state"] = state
            self._data["facts"].update(facts)
            self._flush()

    def _flush(self) -> None:
        atomic_write_json(self.path, self._data)


class LogSink:
    """A log file written by a piece, line by line, each line counted in the piece's ledger part.

    ``path=None`` means the piece's standard output, which its parent (the launcher, the supervisor or rlwatch
    itself) has pointed at a log file, exactly like AReaL's ``cmd 2>&1 | tee -a log``. The ledger keys that file by
    what fd 1 really is, so a piece restarted by rlwatch into another log is still counted correctly.
    """

    def __init__(self, ledger: PieceLedger, path: Path | None = None) -> None:
        self.ledger = ledger
        self._lock = threading.Lock()
        self._banners: int | None = None  # banners already in the file, read when first needed
        if path is None:
            self.fd = 1
            self.path = _stdout_path()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self.path = path
        self.key = None if self.path is None else ledger.layout.rel(self.path)

    @property
    def lock(self) -> threading.Lock:
        """Held while a line is written and counted: a process that ends itself takes it first, so that no line is
        ever in the file without being in the ledger."""
        return self._lock

    def write(self, text: str) -> None:
        """Append ``text`` (one or more lines; a final newline is added when missing) in one write."""
        if not text.endswith(("\n", "\r")):
            text += "\n"
        data = text.encode("utf-8", "replace")
        with self._lock:
            counts = self._count(text)
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
            if self.key is not None:
                self.ledger.add(self.key, counts)

    def _count(self, text: str) -> Counter[str]:
        counts: Counter[str] = Counter()
        for line in text.splitlines():
            kinds = kinds_of_line(line)
            if "_banner" in kinds:
                kinds.discard("_banner")
                if self._banners is None:
                    self._banners = _banners_in(self.path)
                if self._banners > 0:
                    kinds.add("restart")
                self._banners += 1
            counts.update(kinds)
        return counts


def _stdout_path() -> Path | None:
    """The file behind fd 1, or None when it is not a regular file (a terminal, a pipe)."""
    try:
        if not stat.S_ISREG(os.fstat(1).st_mode):
            return None
        return Path(os.readlink("/proc/self/fd/1"))
    except OSError:
        return None


def _banners_in(path: Path | None) -> int:
    """Start-up banners already written to a log (by earlier processes appending to the same file)."""
    if path is None:
        return 0
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0
    return sum(
        1
        for line in text.splitlines()
        if any(lit in line for lit in BANNER_LITERALS) and "_banner" in kinds_of_line(line)
    )


class PartsReader:
    """Reads every part, oldest first, re-reading only the files replaced since the last call.

    The supervisor reads the parts five times a second for as long as a demo runs, and a restart loop adds a part
    per boot, so unchanged parts are served from memory. Each atomic rewrite is a new inode, which is what tells a
    replaced file from an unchanged one.
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._cache: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}

    def read(self) -> list[dict[str, Any]]:
        try:
            entries = list(os.scandir(self.layout.parts_dir))
        except OSError:
            return []
        seen: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}
        for entry in entries:
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            try:
                st = entry.stat()
            except OSError:  # replaced or removed between the listing and now
                continue
            sig = (entry.inode(), st.st_mtime_ns, st.st_size)
            cached = self._cache.get(entry.name)
            if cached is not None and cached[0] == sig:
                seen[entry.name] = cached
                continue
            data = read_json(Path(entry.path))
            if isinstance(data, dict) and isinstance(data.get("counts"), dict):
                seen[entry.name] = (sig, data)
            elif cached is not None:
                seen[entry.name] = cached
        self._cache = seen
        parts = [data for _, data in seen.values()]
        parts.sort(key=lambda d: (float(d.get("started", 0.0)), int(d.get("pid", 0))))
        return parts


def merge_counts(parts: list[dict[str, Any]]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Per file and kind, and per kind in total, summed over all parts."""
    files: dict[str, dict[str, int]] = {}
    totals: Counter[str] = Counter()
    for part in parts:
        for key, kinds in part["counts"].items():
            per_file = files.setdefault(key, {})
            for kind, n in kinds.items():
                per_file[kind] = per_file.get(kind, 0) + int(n)
                totals[kind] += int(n)
    return files, dict(sorted(totals.items()))


def latest(parts: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The most recently started part of one piece name."""
    found = [p for p in parts if p.get("name") == name]
    return found[-1] if found else None


def read_ledger(run_dir: Path) -> dict[str, Any] | None:
    """The ledger a running simulation keeps of what it wrote, or None while there is none (yet)."""
    data = read_json(Layout.of(run_dir).ledger)
    return data if isinstance(data, dict) else None


def incident_shown(ledger: dict[str, Any]) -> bool:
    """The scenario's incident has played out: settled, or, for a restart loop (which never settles), three loops."""
    return ledger.get("phase") == "settled" or ledger.get("facts", {}).get("loops", 0) >= 3
