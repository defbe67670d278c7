"""Run directories the benchmarks point rlwatch at, laid out as AReaL lays out a trial, so discovery finds them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bench.datagen import Dataset, LiveStream

TRIAL = Path("logs") / "root" / "gsm8k-grpo" / "trial0"
# A v1 single-controller trial: one log per role, plus the trainer's and the server's of the SPMD launcher.
LOG_NAMES = ("trainer", "llm_server", "actor", "rollout", "ref", "critic", "merged", "main")


def live_run(root: Path, *, logs: int = 8, backlog_steps: int = 50) -> list[Path]:
    """A fresh trial with ``logs`` logs, each holding ``backlog_steps`` steps already; returns the log paths."""
    shutil.rmtree(root, ignore_errors=True)
    paths = []
    for i, name in enumerate(LOG_NAMES[:logs]):
        path = root / TRIAL / f"{name}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        stream = LiveStream(seed=100 + i, rare_every=0)
        with path.open("wb") as fh:
            for _ in range(backlog_steps):
                fh.write(stream.next_step())
        paths.append(path)
    return paths


def backlog_run(root: Path, ds: Dataset) -> Path:
    """A trial whose ``trainer.log`` is the dataset (a hard link when possible, else a symbolic one)."""
    shutil.rmtree(root, ignore_errors=True)
    path = root / TRIAL / "trainer.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(ds.path, path)
    except OSError:
        path.symlink_to(ds.path.resolve())
    return path
