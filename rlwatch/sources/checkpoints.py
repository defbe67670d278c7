"""Saved checkpoints, found on disk rather than in logs.

AReaL prints nothing when it saves an HF checkpoint and transformers only logs saves at INFO level, so the filesystem
is the one reliable witness. Two layouts are recognised:

* AReaL: ``<root>/**/<name>/epoch{E}epochstep{S}globalstep{G}`` with 0-based counters. ``global_step`` is reported
  exactly as written in the name, i.e. the 0-based index of the last completed step (``globalstep1869`` is the
  1870th step); :mod:`rlwatch.sources.recover` uses the same convention, so the two compare directly.
* Hugging Face / TRL: ``<output_dir>/checkpoint-{N}``, where ``N`` is the count of completed steps.
* verl: ``<trainer.default_local_dir>/global_step_{N}/{actor,critic,data.pt}`` beside
  ``latest_checkpointed_iteration.txt``, the bare step number, written last (verl/trainer/ppo/ray_trainer.py
  ``_save_checkpoint``). verl resumes from the folder that file names, not from the newest folder: a folder past it
  is a save that has not finished (or never will).
* OpenRLHF (DeepSpeed's layout): ``<ckpt.path>/_actor/global_step{N}`` (no underscore) beside ``latest``, which holds
  the tag DeepSpeed's ``load_checkpoint`` picks; ``_critic/`` alike (the actor's is preferred at the same step).

A scan runs every couple of seconds against directories that may hold hundreds of checkpoints of many gigabytes each,
so the work is bounded: candidates are recognised by name only, only the best few are stat-ed, and only the latest is
sized, with the result cached while its directory is unchanged and its files have settled.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from rlwatch.common.clock import Clock
from rlwatch.common.numbers import finite_float
from rlwatch.common.state import CheckpointInfo, CheckpointState
from rlwatch.common.trust import open_read

_AREAL_RE = re.compile(r"epoch([0-9]{1,12})epochstep([0-9]{1,12})globalstep([0-9]{1,12})")
_HF_RE = re.compile(r"checkpoint-([0-9]{1,12})")
_VERL_RE = re.compile(r"global_step_([0-9]{1,12})")
_DS_RE = re.compile(r"global_step([0-9]{1,12})")
VERL_TRACKER = "latest_checkpointed_iteration.txt"
DS_TRACKER = "latest"
_TRACKERS = {"verl": VERL_TRACKER, "deepspeed": DS_TRACKER}
MAX_TRACKER_BYTES = 256

# Directories that are never descended into while looking for checkpoints: AReaL's DCP recover checkpoint and its
# weight-update staging area are huge and hold no HF checkpoints; the rest are the usual noise.
SKIP_DIRS = frozenset(
    {"recover_checkpoint", "weight_update", "recover_info", "__pycache__", "node_modules", ".git", "wandb"}
)
MAX_DEPTH = 6  # fileroot/checkpoints/<user>/<exp>/<trial>/<name>/<ckpt> is five levels below "checkpoints"
MAX_DIRS = 5000  # directories listed per root per scan
MAX_FILES = 100_000  # files stat-ed while sizing one checkpoint
SETTLE_S = 60.0  # a checkpoint whose newest file is younger than this may still be being written
MAX_STATE_BYTES = 64 * 1024 * 1024


class TrainerStateSummary(TypedDict):
    """The parts of a transformers ``trainer_state.json`` worth showing; ``None`` where absent or invalid."""

    global_step: int | None
    max_steps: int | None
    epoch: float | None
    logging_steps: int | None
    reward: float | None
    loss: float | None
    # (step, epoch, loss) of the last training log in log_history: the Trainer printed the same dict (its epoch as
    # the key), so the tracker can tell which printed dict was that step (None: none, or no epoch on it)
    last_logged: tuple[int, float, float | None] | None


def _last_logged(history: object) -> tuple[int, float, float | None] | None:
    if not isinstance(history, list):
        return None
    for entry in reversed(history):
        if isinstance(entry, dict) and ("loss" in entry or "reward" in entry) and "train_runtime" not in entry:
            step, epoch = as_count(entry.get("step")), finite_float(entry.get("epoch"))
            if step is None or epoch is None:
                return None
            return step, epoch, finite_float(entry.get("loss"))
    return None


def parse_areal_name(name: str) -> tuple[int, int, int] | None:
    """``epoch1epochstep934globalstep1869`` → ``(1, 934, 1869)``; anything else → ``None``."""
    m = _AREAL_RE.fullmatch(name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def parse_hf_name(name: str) -> int | None:
    """``checkpoint-25`` → ``25``, by the same rule transformers uses to pick a checkpoint to resume from."""
    m = _HF_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def as_count(value: object) -> int | None:
    """A JSON value that is a non-negative integer (``true`` is not one); ``None`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def json_object(text: str) -> dict[str, object] | None:
    """The JSON object in ``text``; ``None`` for anything else, e.g. a file a saver is still writing."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _last_metric(history: object, key: str) -> float | None:
    if not isinstance(history, list):
        return None
    for entry in reversed(history):
        if isinstance(entry, dict) and key in entry:
            value = finite_float(entry[key])
            if value is not None:
                return value
    return None


def parse_trainer_state(text: str) -> TrainerStateSummary | None:
    """Summarise a ``trainer_state.json``; ``None`` when the text is not a JSON object (e.g. half-written)."""
    data = json_object(text)
    if data is None:
        return None
    max_steps = as_count(data.get("max_steps"))
    logging_steps = as_count(data.get("logging_steps"))
    history = data.get("log_history")
    return TrainerStateSummary(
        global_step=as_count(data.get("global_step")),
        max_steps=max_steps if max_steps else None,
        epoch=finite_float(data.get("epoch")),
        logging_steps=logging_steps if logging_steps else None,
        reward=_last_metric(history, "reward"),
        loss=_last_metric(history, "loss"),
        last_logged=_last_logged(history),
    )


def parse_tracker(text: str, kind: str) -> int | None:
    """The step a tracker file names: verl's bare number (``12``), DeepSpeed's tag (``global_step8``)."""
    text = text.strip()
    if kind == "verl":
        return int(text) if text.isdigit() and len(text) <= 12 else None
    m = _DS_RE.fullmatch(text)
    return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class _Candidate:
    path: str
    parent: str
    global_step: int
    epoch: int | None
    epoch_step: int | None
    kind: str = "areal"  # areal | hf | verl | deepspeed

    @property
    def rank(self) -> tuple[int, int]:
        # AReaL saves the actor under "default" and the critic under "critic" at the same step; OpenRLHF under
        # "_actor" and "_critic": prefer the actor.
        return self.global_step, int(os.path.basename(self.parent) in ("default", "_actor"))


@dataclass(frozen=True, slots=True)
class _Measured:
    dir_mtime_ns: int
    size_bytes: int
    newest_mtime: float
    measured_at: float


@dataclass(frozen=True, slots=True)
class _StateCache:
    mtime_ns: int
    summary: TrainerStateSummary | None


def _classify(path: str, name: str) -> _Candidate | None:
    areal = parse_areal_name(name)
    parent = os.path.dirname(path)
    if areal is not None:
        return _Candidate(path, parent, areal[2], areal[0], areal[1])
    step = parse_hf_name(name)
    if step is not None:
        return _Candidate(path, parent, step, None, None, "hf")
    if name.startswith("global_step"):
        m = _VERL_RE.fullmatch(name)
        if m is not None:
            return _Candidate(path, parent, int(m.group(1)), None, None, "verl")
        m = _DS_RE.fullmatch(name)
        if m is not None:
            return _Candidate(path, parent, int(m.group(1)), None, None, "deepspeed")
    return None


def read_tracker(parent: str, kind: str) -> tuple[str, int | None] | None:
    """(path, step) of the tracker file beside a verl or DeepSpeed checkpoint folder; None when there is none.
    The step is None when the file is there but says nothing usable (being written, or not this layout's)."""
    name = _TRACKERS.get(kind)
    if name is None:
        return None
    path = os.path.join(parent, name)
    try:
        with open_read(path) as fh:
            data = fh.read(MAX_TRACKER_BYTES + 1)
    except (OSError, ValueError):
        return None
    if len(data) > MAX_TRACKER_BYTES:
        return path, None
    return path, parse_tracker(data.decode("utf-8", "replace"), kind)


def apply_trackers(candidates: list[_Candidate]) -> tuple[list[_Candidate], dict[str, str]]:
    """verl and DeepSpeed resume from the folder their tracker file names: a folder past it is not a checkpoint
    to resume from yet (its save has not finished). Returns the candidates left, and the tracker of each folder
    a tracker names (path → tracker file)."""
    trackers: dict[str, tuple[str, int | None] | None] = {}
    kept: list[_Candidate] = []
    named: dict[str, str] = {}
    for c in candidates:
        if c.kind not in _TRACKERS:
            kept.append(c)
            continue
        if c.parent not in trackers:
            trackers[c.parent] = read_tracker(c.parent, c.kind)
        tracker = trackers[c.parent]
        if tracker is None or tracker[1] is None:
            kept.append(c)
            continue
        if c.global_step > tracker[1]:
            continue
        if c.global_step == tracker[1]:
            named[c.path] = tracker[0]
        kept.append(c)
    return kept, named


def _subdirs(path: str, errors: list[str]) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            entries = list(it)
    except FileNotFoundError:
        return
    except OSError as exc:
        errors.append(f"cannot list {path}: {exc.strerror or exc}")
        return
    except ValueError:  # a path the OS cannot even represent (embedded NUL)
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                yield entry
        except OSError:
            continue


def find_candidates(root: str, errors: list[str]) -> list[_Candidate]:
    """Every checkpoint directory under ``root`` (or ``root`` itself), recognised by name without stat-ing it."""
    own = _classify(root, os.path.basename(os.path.normpath(root)))
    if own is not None:
        return [own]
    found: list[_Candidate] = []
    stack: list[tuple[str, int]] = [(root, 0)]
    listed = 0
    while stack and listed < MAX_DIRS:
        path, depth = stack.pop()
        listed += 1
        for entry in _subdirs(path, errors):
            candidate = _classify(entry.path, entry.name)
            if candidate is not None:
                found.append(candidate)
            elif depth + 1 < MAX_DEPTH and entry.name not in SKIP_DIRS and not entry.name.startswith("."):
                stack.append((entry.path, depth + 1))
    if stack:
        errors.append(f"stopped looking for checkpoints under {root} after {MAX_DIRS} directories")
    return found


def measure_dir(path: str) -> tuple[int, float] | None:
    """Total size of the regular files under ``path`` and the newest mtime seen (the directory's own included).

    ``None`` when ``path`` itself is gone or unreadable, including when it vanished part-way through the walk.
    Files that vanish mid-walk are just not counted.
    """
    try:
        newest = os.stat(path).st_mtime
    except (OSError, ValueError):
        return None
    total = 0
    seen = 0
    stack = [path]
    while stack and seen < MAX_FILES:
        current = stack.pop()
        try:
            with os.scandir(current) as it:
                entries = list(it)
        except OSError:
            if current == path:
                return None
            continue
        for entry in entries:
            seen += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += st.st_size
            newest = max(newest, st.st_mtime)
    if not os.path.isdir(path):
        return None
    return total, newest


class CheckpointScanner:
    """Finds the latest checkpoint under some directories; cheap enough to call every tick.

    ``count`` is the number of checkpoints in the same series as the latest one (one AReaL model name in one trial,
    or one HF output directory), so an actor/critic pair or an old trial next to the live one does not inflate it.
    ``error`` holds a one-line reason when something could not be read during the last scan.
    """

    def __init__(self, dirs: Sequence[Path], clock: Clock, *, settle_s: float = SETTLE_S) -> None:
        self._dirs = tuple(str(d) for d in dirs)
        self._clock = clock
        self._settle_s = settle_s
        self._sizes: dict[str, _Measured] = {}
        self._states: dict[str, _StateCache] = {}
        self._latest: CheckpointInfo | None = None
        self._seen: set[str] = set()  # directories that existed at some scan
        self._trackers: dict[str, str] = {}  # checkpoint folder → the tracker file that names it
        self.error: str | None = None

    def scan(self) -> CheckpointState:
        errors: list[str] = []
        candidates: list[_Candidate] = []
        for root in self._dirs:
            if not os.path.isdir(root):
                # Before the first save the directory is often not there yet: the engine's "config … does not
                # exist (yet)" line says so. One that was there and is gone, or is no directory, is a problem.
                if root in self._seen or os.path.lexists(root):
                    errors.append(f"checkpoint dir not found: {root}")
                continue
            self._seen.add(root)
            candidates.extend(find_candidates(root, errors))
        candidates, self._trackers = apply_trackers(candidates)
        latest, chosen = self._pick_latest(candidates)
        self._latest = latest
        self.error = errors[0] if errors else None
        if latest is None or chosen is None:
            return CheckpointState(latest=None, count=0)
        same = [c for c in candidates if c.parent == chosen.parent]
        return CheckpointState(latest=latest, count=len(same), steps=tuple(sorted({c.global_step for c in same})))

    def _pick_latest(self, candidates: list[_Candidate]) -> tuple[CheckpointInfo | None, _Candidate | None]:
        remaining = sorted(candidates, key=lambda c: c.rank, reverse=True)
        while remaining:
            top_rank = remaining[0].rank
            tied = [c for c in remaining if c.rank == top_rank]
            remaining = remaining[len(tied) :]
            # Same step and series priority in several trials: the most recently written one is the live run.
            dated: list[tuple[int, _Candidate]] = []
            for c in tied:
                try:
                    dated.append((os.stat(c.path).st_mtime_ns, c))
                except OSError:
                    continue
            for _, c in sorted(dated, key=lambda pair: pair[0], reverse=True):
                info = self._describe(c)
                if info is not None:
                    return info, c
        return None, None

    def _describe(self, c: _Candidate) -> CheckpointInfo | None:
        measured = self._measure(c.path)
        if measured is None:
            return None
        return CheckpointInfo(
            path=c.path,
            global_step=c.global_step,
            epoch=c.epoch,
            epoch_step=c.epoch_step,
            saved_at=measured.newest_mtime,
            size_bytes=measured.size_bytes,
            tracker=self._trackers.get(c.path),
        )

    def _measure(self, path: str) -> _Measured | None:
        try:
            dir_mtime_ns = os.stat(path).st_mtime_ns
        except OSError:
            return None
        cached = self._sizes.get(path)
        if (
            cached is not None
            and cached.dir_mtime_ns == dir_mtime_ns
            and cached.measured_at - cached.newest_mtime >= self._settle_s
        ):
            return cached
        result = measure_dir(path)
        if result is None:
            self._sizes.pop(path, None)
            return None
        measured = _Measured(dir_mtime_ns, result[0], result[1], self._clock.time())
        if len(self._sizes) >= 8:
            self._sizes.clear()
        self._sizes[path] = measured
        return measured

    @property
    def latest(self) -> CheckpointInfo | None:
        """The latest checkpoint of the last scan, without scanning again."""
        return self._latest

    def trainer_state(self) -> TrainerStateSummary | None:
        """The latest checkpoint's ``trainer_state.json`` (HF layout only), re-read only when it changes."""
        if self._latest is None:
            return None
        path = os.path.join(self._latest.path, "trainer_state.json")
        try:
            st = os.stat(path)
        except OSError:
            return None
        cached = self._states.get(path)
        if cached is not None and cached.mtime_ns == st.st_mtime_ns:
            summary = cached.summary
        elif st.st_size > MAX_STATE_BYTES:
            summary = None
        else:
            try:
                with io.TextIOWrapper(open_read(path), encoding="utf-8", errors="replace") as fh:
                    summary = parse_trainer_state(fh.read())
            except OSError:
                return None
        self._states = {path: _StateCache(st.st_mtime_ns, summary)}
        if summary is None and self.error is None:
            self.error = f"trainer_state.json incomplete or corrupt (being written?): {path}"
        return summary
