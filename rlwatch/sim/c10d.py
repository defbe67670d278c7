"""A stand-in for ``torch.distributed``'s collectives, so that a simulated rank waits where a real one waits.

A rank of a real data-parallel job that another rank stopped joining stands, in ``py-spy dump``, in torch's own
frames: ``all_reduce (torch/distributed/distributed_c10d.py:…)`` under the step that called it (gloo, or NCCL with
blocking wait), or ``synchronize (torch/cuda/__init__.py:…)`` where NCCL's kernel is waited for on the stream. The
monitor knows those names (:mod:`rlwatch.sources.sampler`'s collectives); a simulator whose waiting rank stood in a
function of its own (``wait_in_collective``) gave it nothing to tell the waiting rank from the one it waits for.

:func:`install` copies this file to ``.sim/site-packages/torch/distributed/distributed_c10d.py`` in the run directory
and loads it from there, so the frames carry that name and a library path (as a real torch install's do, the run's
own frame is the one that called it). The collective itself is a rendezvous through files: each rank that arrives at
collective ``seq`` leaves a mark, and waits until every rank of the world has left one. A rank that never arrives
keeps the others in :func:`all_reduce` for ever, as NCCL's 30-minute timeout does in practice.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType

__all__ = ["all_reduce", "init_process_group", "install_c10d"]

_store: Path | None = None
_rank = 0
_world = 1


def init_process_group(store: str | os.PathLike[str], rank: int, world_size: int) -> None:
    """Where the ranks leave their marks, and who this rank is among how many."""
    global _store, _rank, _world
    _store, _rank, _world = Path(store), rank, world_size
    _store.mkdir(parents=True, exist_ok=True)


def all_reduce(seq: int) -> None:
    """Wait until every rank has reached collective ``seq``: the frame a rank stands in while a peer never comes.
    It polls its peers' marks, as NCCL's progress loop spins on the stream: the thread keeps waking."""
    if _store is None:
        raise RuntimeError(
            "Default process group has not been initialized, please make sure to call init_process_group."
        )
    (_store / f"seq-{seq}.rank-{_rank}").touch()
    pause = 0.01
    while not all((_store / f"seq-{seq}.rank-{r}").exists() for r in range(_world)):
        time.sleep(pause)
        pause = min(0.5, pause * 2)


def install_c10d(sim_dir: Path) -> ModuleType:
    """This module, loaded from a copy at ``sim_dir/site-packages/torch/distributed/distributed_c10d.py`` (written
    once, atomically: every rank installs it), under a name of its own so no real torch is shadowed."""
    target = sim_dir / "site-packages" / "torch" / "distributed" / "distributed_c10d.py"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        shutil.copyfile(__file__, tmp)
        os.replace(tmp, target)
    name = "rlwatch_sim_torch_distributed_c10d"
    spec = importlib.util.spec_from_file_location(name, target)
    if spec is None or spec.loader is None:
        raise ImportError(f"{target}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
