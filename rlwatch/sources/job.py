"""Which distributed job a host's ranks belong to, from their environment: what lets one view join the hosts of a
job over many nodes (``rlwatch fleet``).

torchrun gives each worker ``TORCHELASTIC_RUN_ID`` (``--rdzv-id``; ``none`` when not given), ``MASTER_ADDR`` and
``MASTER_PORT`` (the same on every node of a job), ``GROUP_RANK`` (the node's rank), ``RANK``, ``LOCAL_RANK`` and
``WORLD_SIZE``; Ray-based trainers (verl, OpenRLHF) set the same torch variables in their workers, and Ray gives
``RAY_JOB_ID`` where a job submitted them. The job is named by the first that says something: the rendezvous id,
else the Ray job, else the master's address and port (which every node of one job shares, and two jobs cannot).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["JobIdentity", "identity"]


@dataclass(frozen=True, slots=True)
class JobIdentity:
    job: str  # "rdzv:exp-42", "ray:02000000", "10.0.0.1:29500"
    launcher: str  # "torchrun" | "ray" | "torch"
    master: str | None  # "10.0.0.1:29500"
    node_rank: int | None  # torchrun's GROUP_RANK
    world_size: int | None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def identity(environs: Iterable[Mapping[str, str]]) -> JobIdentity | None:
    """The job of the ranks whose environments are given (the first rank that names one), or None: no rank of a
    distributed job."""
    for env in environs:
        addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
        master = f"{addr}:{port}" if addr and port else None
        rdzv = env.get("TORCHELASTIC_RUN_ID")
        ray_job = env.get("RAY_JOB_ID")
        world = _int(env.get("WORLD_SIZE"))
        node = _int(env.get("GROUP_RANK"))
        if rdzv and rdzv != "none":
            return JobIdentity(f"rdzv:{rdzv}", "torchrun", master, node, world)
        if ray_job:
            return JobIdentity(f"ray:{ray_job}", "ray", master, node, world)
        if master is not None and env.get("RANK") is not None:
            return JobIdentity(master, "torchrun" if "TORCHELASTIC_RUN_ID" in env else "torch", master, node, world)
    return None
