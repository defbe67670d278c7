"""The hosts of one distributed job joined into one verdict: which node's which rank the others wait for, in which
collective.

Each host's exporter says which job its ranks belong to (``rlwatch_job_info``: torchrun's rendezvous id, Ray's job,
or the master's address) and where each of its ranks stands (``rlwatch_rank_standing_info``: waiting in a
collective, still elsewhere, or moving; for how long; the last collective it entered, from its flight record). No
host alone can say whom its ranks wait for when they all wait: joined, the job's ranks name the odd one out —
"job 10.0.0.1:29500: hung 45 s; node-b rank 3 never reached all_reduce (it is in fetch_batch_from_service
(train.py:20)); the 3 others wait for it". A host whose ranks all wait is never blamed for it: the rank they wait for
is on another node, or on a node no exporter speaks for (named by the ranks no host reports).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rlwatch.common.vocab import JOB_STATES, JobStateName
from rlwatch.export.fleet.model import FleetHost, FleetRank

__all__ = ["JobVerdict", "join_jobs"]


@dataclass(frozen=True, slots=True)
class JobVerdict:
    """One job across its hosts."""

    job: str
    state: JobStateName
    message: str
    hosts: tuple[str, ...]  # the hosts that report ranks of it
    ranks: int  # how many of its ranks are reported
    world_size: int | None
    culprit_host: str | None = None
    culprit_ranks: tuple[int, ...] = ()
    collective: str | None = None  # "all_reduce #4812"
    still_s: float | None = None  # how long every reported rank has stood still
    missing_ranks: tuple[int, ...] = ()  # ranks of the world no host reports
    per_host: tuple[tuple[str, str], ...] = ()  # (host, what it says of its own ranks)

    def as_dict(self) -> dict[str, object]:
        return {
            "job": self.job,
            "state": self.state,
            "message": self.message,
            "hosts": list(self.hosts),
            "ranks": self.ranks,
            "world_size": self.world_size,
            "culprit_host": self.culprit_host,
            "culprit_ranks": list(self.culprit_ranks),
            "collective": self.collective,
            "still_s": self.still_s,
            "missing_ranks": list(self.missing_ranks),
            "per_host": {h: text for h, text in self.per_host},
        }


def _ranks_text(ranks: Sequence[int]) -> str:
    """ "rank 3", "ranks 4-7", "ranks 0, 2, 5-6"."""
    ranks = sorted(ranks)
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def _collective(waiting: Sequence[FleetRank]) -> str | None:
    waits = Counter(r.wait for r in waiting if r.wait)
    if not waits:
        return None
    name = waits.most_common(1)[0][0]
    seqs = Counter(r.collective_seq for r in waiting if r.collective_seq is not None)
    return f"{name} #{seqs.most_common(1)[0][0]}" if seqs else name


def _one(job: str, hosts: Sequence[FleetHost]) -> JobVerdict:
    placed: list[tuple[FleetHost, FleetRank]] = [(h, r) for h in hosts for r in h.ranks]
    world = max((h.world_size for h in hosts if h.world_size is not None), default=None)
    reported = {r.rank for _, r in placed}
    missing = tuple(sorted(set(range(world)) - reported)) if world is not None else ()
    names = tuple(sorted(h.name for h in hosts))
    waiting = [(h, r) for h, r in placed if r.state == "waiting"]
    elsewhere = [(h, r) for h, r in placed if r.state == "elsewhere"]
    moving = [(h, r) for h, r in placed if r.state == "moving"]

    def verdict(state: JobStateName, message: str, **more: Any) -> JobVerdict:
        return JobVerdict(job, state, message, names, len(reported), world, missing_ranks=missing, **more)

    if not placed:
        return verdict("unknown", f"job {job}: no host reports where its ranks stand")
    if not waiting:
        return verdict("progressing", f"job {job}: no rank waits in a collective")
    collective = _collective([r for _, r in waiting])
    still = [r.still_s for _, r in waiting + elsewhere if r.still_s is not None]
    still_s = min(still) if still and not moving else None
    state: JobStateName = "hung" if still_s is not None else "waiting"
    head = f"job {job}: " + (f"hung {_duration(still_s)}" if still_s is not None else "ranks wait")
    per_host: list[tuple[str, str]] = []
    by_host: dict[str, list[FleetRank]] = defaultdict(list)
    for h, r in placed:
        by_host[h.name].append(r)
    # Where seqs are known, a rank whose last entered collective is below the others' never entered theirs.
    seqs = [r.collective_seq for _, r in placed if r.collective_seq is not None]
    top = max(seqs) if seqs else None
    behind = [(h, r) for h, r in placed if top is not None and r.collective_seq is not None and r.collective_seq < top]
    odd = elsewhere or behind
    if odd:
        culprit_hosts = sorted({h.name for h, _ in odd})
        culprit_ranks = tuple(sorted(r.rank for _, r in odd))
        where = "; ".join(f"{_ranks_text([r.rank])} is in {r.where}" for _, r in odd if r.where)
        others = len(placed) - len(odd)
        on = " and ".join(f"{name} {_ranks_text([r.rank for h, r in odd if h.name == name])}" for name in culprit_hosts)
        message = (
            f"{head}; {on} never reached {collective or 'the collective'}"
            f"{' (' + where + ')' if where else ''}; the {others} other{'s' if others != 1 else ''} wait for it"
        )
        for name, ranks in sorted(by_host.items()):
            mine = [r.rank for r in ranks if r.rank in culprit_ranks]
            text = (
                f"{_ranks_text(mine)} never reached {collective or 'the collective'}"
                if mine
                else f"its {_ranks_text([r.rank for r in ranks])} wait for {on}"
            )
            per_host.append((name, text))
        if missing:
            message += f"; {_ranks_text(missing)} reported by no host"
        return verdict(
            state,
            message,
            culprit_host=culprit_hosts[0] if len(culprit_hosts) == 1 else None,
            culprit_ranks=culprit_ranks,
            collective=collective,
            still_s=still_s,
            per_host=tuple(per_host),
        )
    # Every reported rank waits: the one they wait for is none of them.
    for name, ranks in sorted(by_host.items()):
        per_host.append(
            (
                name,
                f"its {_ranks_text([r.rank for r in ranks])} all wait in {collective or 'a collective'}: the rank they "
                "wait for is on another node",
            )
        )
    if missing:
        message = (
            f"{head}; every reported rank waits in {collective or 'a collective'}: the rank they wait for is among "
            f"{_ranks_text(missing)}, which no host reports (their node's rlwatch does not answer: look there)"
        )
    else:
        message = (
            f"{head}; every rank waits in {collective or 'a collective'} and none stands elsewhere: NCCL itself, the "
            "network or a GPU (read each node's NCCL RAS status and kernel log)"
        )
    return verdict(
        state,
        message,
        collective=collective,
        still_s=still_s,
        per_host=tuple(per_host),
    )


def join_jobs(hosts: Iterable[FleetHost]) -> tuple[JobVerdict, ...]:
    """One verdict per distributed job the fleet's (fresh) hosts report, the hung first."""
    by_job: dict[str, list[FleetHost]] = defaultdict(list)
    for h in hosts:
        if h.run_job and h.has_data and not h.stale:
            by_job[h.run_job].append(h)
    verdicts = [_one(job, members) for job, members in by_job.items()]
    return tuple(sorted(verdicts, key=lambda v: (JOB_STATES.index(v.state), v.job)))
