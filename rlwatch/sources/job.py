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
from dataclasses import replace

from rlwatch.common.state import JobInfo, JobRank

__all__ = ["JobIdentity", "identity", "job_info"]


# The job's record lives with the snapshot's (common/state); this module reads it from the ranks' environment.
JobIdentity = JobInfo


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


def job_info(ranks: Iterable[tuple[int, Mapping[str, str]]], held: Mapping[int, tuple[int, ...]]) -> JobInfo | None:
    """The job of this host's ranks (``ranks``: each rank process's pid and environment) with each rank's global
    and local rank and its GPU: the one it holds (``held``: pid -> GPUs), or among several (NCCL maps its peers'
    memory) the one of its local rank. None: no rank of a distributed job."""
    ranks = list(ranks)
    job = identity(env for _, env in ranks)
    if job is None:
        return None
    out: list[JobRank] = []
    for pid, env in ranks:
        rank = _int(env.get("RANK"))
        if rank is None:
            continue
        local = _int(env.get("LOCAL_RANK"))
        gpus = held.get(pid, ())
        own = local if local is not None else rank
        gpu = (gpus[0] if len(gpus) == 1 else own if own in gpus else gpus[0]) if gpus else None
        out.append(JobRank(rank, local, gpu, pid))
    return replace(job, ranks=tuple(sorted(out, key=lambda r: r.rank)))
