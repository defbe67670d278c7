"""The simulator's own account of what it wrote, so tests can check rlwatch's counts against the truth.

Each piece (a separate process) keeps a *part*: ``.sim/ledger.d/<name>-<pid>.json``, rewritten atomically whenever a
line it writes falls under an event kind, or its state or facts change. The supervisor sums the parts into
``.sim/ledger.json``. Parts are per process so that no two processes ever write the same file, and a restarted
piece simply adds a new part.

Counting follows design.md: after ANSI colour codes are stripped, text is split as universal newlines do, and each
line counts at most once per kind. The kind table here is the simulator's own, deliberately written from formats.md
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
    "connection_refused": re.compile(r"ConnectionRefusedError|Connection refused|Connect call failed"),
    "traceback": re.compile(r"Traceback \(most recent call last\)"),
    "cuda_oom": re.compile(r"CUDA out of memory"),
    "cuda_busy": re.compile(r"busy or unavailable"),
    "nccl_timeout": re.compile(r"Watchdog caught collective operation timeout"),
    "nccl_error": re.compile(r"NCCL error"),
    "timeout": re.compile(r"Timeout waiting for|timed out after|TimeoutError"),
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
    "restart": re.compile(
        r"Recovering from StepInfo\(|Loading recover info from|rlwatch-sim start|Continuing training from"
        r"|LocalLauncher: .*run_id=[1-9]"
    ),
    "trial": re.compile(r"\btrial \d+ done in\b"),  # the workers' progress kind (a custom kind in rlwatch.yaml)
}


def classify(line: str) -> set[str]:
    """The kinds one line (without its newline) falls under."""
    text = ANSI_RE.sub("", line)
    kinds = {kind for kind, rx in KINDS.items() if rx.search(text)}
    if "step" in kinds and text.startswith("{") and "'train_runtime'" in text:
        kinds.discard("step")  # the end-of-training summary dict is not a step
    return kinds


def count_text(text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        counts.update(classify(line))
    return counts


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
        if path is None:
            self.fd = 1
            self.key = _stdout_key(ledger.layout)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self.key = ledger.layout.rel(path)

    def write(self, text: str) -> None:
        """Append ``text`` (one or more lines; a final newline is added when missing) in one write."""
        if not text.endswith(("\n", "\r")):
            text += "\n"
        data = text.encode("utf-8", "replace")
        with self._lock:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
            if self.key is not None:
                self.ledger.add(self.key, count_text(text))


def _stdout_key(layout: Layout) -> str | None:
    """The ledger name of the file behind fd 1, or None when it is not a regular file (a terminal, a pipe)."""
    try:
        if not stat.S_ISREG(os.fstat(1).st_mode):
            return None
        target = os.readlink("/proc/self/fd/1")
    except OSError:
        return None
    return layout.rel(Path(target))


def read_parts(layout: Layout) -> list[dict[str, Any]]:
    """Every part that can be read now, oldest first; unreadable ones (mid-rename) are skipped."""
    parts = []
    try:
        names = sorted(os.listdir(layout.parts_dir))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        data = read_json(layout.parts_dir / name)
        if isinstance(data, dict) and isinstance(data.get("counts"), dict):
            parts.append(data)
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
