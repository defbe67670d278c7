"""AReaL's recover info: the last completed step, and the step a resume will start from.

``recover_info/step_info.json`` is rewritten in place by rank 0 (``json.dump(..., indent=4)``), so a read can catch
it half-written; that is reported as "not available" rather than guessed at. Counters are 0-based, the same
convention as AReaL checkpoint names (:mod:`rlwatch.sources.checkpoints`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rlwatch.common.state import CheckpointInfo, RecoverState
from rlwatch.common.trust import open_read
from rlwatch.sources.checkpoints import as_count, json_object, parse_areal_name, parse_hf_name

STEP_INFO = "step_info.json"
RECOVER_DIR = "recover_info"
MAX_DEPTH = 6  # fileroot/checkpoints/<user>/<exp>/<trial>/recover_info
MAX_DIRS = 5000
MAX_BYTES = 1024 * 1024
_SKIP = frozenset({"recover_checkpoint", "weight_update", "__pycache__", "node_modules", ".git", "wandb"})


@dataclass(frozen=True, slots=True)
class StepInfo:
    """The four counters of AReaL's ``StepInfo``, validated: all ≥ 0 and ``epoch_step < steps_per_epoch``."""

    epoch: int
    epoch_step: int
    global_step: int
    steps_per_epoch: int


def parse_step_info(text: str) -> StepInfo | None:
    """Parse ``step_info.json``; ``None`` for anything that is not a complete, consistent record."""
    data = json_object(text)
    if data is None:
        return None
    epoch = as_count(data.get("epoch"))
    epoch_step = as_count(data.get("epoch_step"))
    global_step = as_count(data.get("global_step"))
    steps_per_epoch = as_count(data.get("steps_per_epoch"))
    if epoch is None or epoch_step is None or global_step is None or not steps_per_epoch:
        return None
    if epoch_step >= steps_per_epoch:
        return None
    return StepInfo(epoch, epoch_step, global_step, steps_per_epoch)


def next_step(info: StepInfo) -> StepInfo:
    """The step a resume starts from: the one after the last completed, rolling over at the end of an epoch."""
    rollover = info.epoch_step + 1 == info.steps_per_epoch
    return StepInfo(
        epoch=info.epoch + 1 if rollover else info.epoch,
        epoch_step=0 if rollover else info.epoch_step + 1,
        global_step=info.global_step + 1,
        steps_per_epoch=info.steps_per_epoch,
    )


def _iter_step_infos(root: str) -> list[str]:
    found: list[str] = []
    stack: list[tuple[str, int]] = [(root, 0)]
    listed = 0
    while stack and listed < MAX_DIRS:
        path, depth = stack.pop()
        listed += 1
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except (OSError, ValueError):
            continue
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if not is_dir:
                if entry.name == STEP_INFO and os.path.basename(path) == RECOVER_DIR:
                    found.append(entry.path)
                continue
            if entry.name == RECOVER_DIR:
                candidate = os.path.join(entry.path, STEP_INFO)
                if os.path.isfile(candidate):
                    found.append(candidate)
                continue
            skip = entry.name in _SKIP or entry.name.startswith(".")
            # Checkpoint directories hold model shards, never recover info: do not walk them.
            skip = skip or parse_areal_name(entry.name) is not None or parse_hf_name(entry.name) is not None
            if not skip and depth + 1 < MAX_DEPTH:
                stack.append((entry.path, depth + 1))
    return found


def find_step_info(root: Path) -> Path | None:
    """The newest ``recover_info/step_info.json`` under ``root``: a checkpoints root, a trial dir, or recover_info."""
    base = str(root)
    direct = os.path.join(base, STEP_INFO)
    if os.path.isfile(direct):
        return Path(direct)
    newest: tuple[float, str] | None = None
    for path in _iter_step_infos(base):
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            continue
        if newest is None or mtime > newest[0]:
            newest = (mtime, path)
    return Path(newest[1]) if newest else None


def read_recover(path: Path) -> tuple[RecoverState | None, str | None]:
    """Read recover info from a ``step_info.json``, or from the newest one under a directory."""
    target = path
    if os.path.isdir(path):
        found = find_step_info(path)
        if found is None:
            return None, f"no {RECOVER_DIR}/{STEP_INFO} under {path}"
        target = found
    try:
        with open_read(target) as fh:
            st = os.fstat(fh.fileno())
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None, f"recover info not found: {target}"
    except OSError as exc:
        return None, f"recover info unreadable: {target}: {exc.strerror or exc}"
    except ValueError:
        return None, f"recover info path is not valid: {target!r}"
    if len(raw) > MAX_BYTES:
        return None, f"recover info too large to be a step_info.json: {target}"
    info = parse_step_info(raw.decode("utf-8", errors="replace"))
    if info is None:
        return None, f"recover info incomplete or corrupt (being written?): {target}"
    resume = next_step(info)
    state = RecoverState(
        path=str(target),
        epoch=info.epoch,
        epoch_step=info.epoch_step,
        global_step=info.global_step,
        steps_per_epoch=info.steps_per_epoch,
        resume_epoch=resume.epoch,
        resume_epoch_step=resume.epoch_step,
        resume_global_step=resume.global_step,
        saved_at=st.st_mtime,
    )
    return state, None


def _trial_of_recover(path: str) -> str | None:
    parent = os.path.dirname(path)
    return os.path.dirname(parent) if os.path.basename(parent) == RECOVER_DIR else None


def agree(recover: RecoverState, latest: CheckpointInfo | None, *, ahead_tolerance: int | None = None) -> str | None:
    """One line saying how the recover info and the latest saved checkpoint disagree, or ``None``.

    Recover info is written on its own schedule (``recover.freq_*``), often more often than HF saves
    (``saver.freq_*``), so being somewhat ahead is normal; ``ahead_tolerance`` (default: one epoch) bounds that.
    Being behind is always reported: a resume would redo steps whose checkpoint already exists, which usually means
    the recover info is stale or belongs to another trial. With no checkpoint there is nothing to compare.
    """
    if latest is None or latest.global_step is None:
        return None
    name = os.path.basename(os.path.normpath(latest.path))
    areal = parse_areal_name(name)
    if areal is not None:
        ckpt_last = latest.global_step
        ckpt_trial = os.path.dirname(os.path.dirname(os.path.normpath(latest.path)))
        rec_trial = _trial_of_recover(recover.path)
        if rec_trial is not None and os.path.normpath(rec_trial) != os.path.normpath(ckpt_trial):
            return f"recover info ({rec_trial}) and the latest checkpoint ({ckpt_trial}) belong to different trials"
    elif parse_hf_name(name) is not None:
        ckpt_last = latest.global_step - 1  # HF counts completed steps; AReaL's counters are 0-based
    else:
        ckpt_last = latest.global_step
    tolerance = recover.steps_per_epoch if ahead_tolerance is None else ahead_tolerance
    if recover.global_step < ckpt_last:
        return (
            f"recover info is behind the latest checkpoint: last completed step {recover.global_step} "
            f"but {name} is saved; a resume would start at step {recover.resume_global_step} and redo "
            f"{ckpt_last - recover.global_step} step(s)"
        )
    if recover.global_step - ckpt_last > tolerance:
        return (
            f"recover info is {recover.global_step - ckpt_last} steps ahead of the latest checkpoint {name}: "
            "checkpoints may have stopped being saved"
        )
    if (
        recover.global_step == ckpt_last
        and latest.epoch is not None
        and latest.epoch_step is not None
        and (latest.epoch, latest.epoch_step) != (recover.epoch, recover.epoch_step)
    ):
        return (
            f"recover info (epoch {recover.epoch}, step {recover.epoch_step}) and {name} name the same global step "
            "but different epoch positions"
        )
    return None
