"""What one host knows of the whole job's collectives, as numbers the fleet joins across hosts.

Each host's rules (:mod:`rlwatch.engine.diagnosis.collectives`) say in words what NCCL RAS, the flight records and
the watchdog's lines name. The fleet must not parse sentences: the same evidence is given here as records — the ranks
behind or missing, with the collective the others entered and when it was read — and each rank's last entered
collective, so that ``rlwatch fleet`` can name a mismatch no host alone holds both sides of (each node's dump holds
only its own rank's record). Nothing here on a run that progresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlwatch.common.state import CollectiveOp, Snapshot
from rlwatch.engine.diagnosis.collectives import issues, ras_issue
from rlwatch.logs.collectives import op_name, read_lines

__all__ = ["JobEvidence", "job_evidence", "last_collectives"]


@dataclass(frozen=True, slots=True)
class JobEvidence:
    """A rank (or ranks) of the whole job that the collectives name, for the fleet to join across hosts: the ranks
    behind or missing (NCCL RAS's counts, the flight records, the watchdog's lines) or whose call differs."""

    source: str  # "nccl_ras" | "flight" | "log"
    at: float  # when it was read: RAS asked, the dumps read
    code: str  # "collective_missing_rank" | "collective_mismatch"
    ranks: tuple[int, ...]  # the ranks it names (global ranks, any node's)
    op: str | None  # the collective the others entered ("all_reduce")
    seq: int  # its number in the default group (RAS: the count the others reached)


def _ops(s: Snapshot) -> tuple[CollectiveOp, ...]:
    """Every collective entry this host read: its ranks' flight records, else the watchdog's lines."""
    ev = s.events.get("nccl_timeout")
    ops, _ = read_lines([(x.path, x.lineno, x.text) for x in (ev.recent if ev is not None else ())])
    flight = s.flight
    if flight is None:
        return ops
    return tuple(o for o in ops if o.rank not in set(flight.ranks)) + flight.ops


def job_evidence(s: Snapshot) -> tuple[JobEvidence, ...]:
    """What this host's collectives say of the whole job while the run does not progress (``collectives``' own
    evidence, as numbers): exported, so ``rlwatch fleet`` joins every host's without reading a sentence."""
    if s.run_state is not None and s.run_state.state in ("progressing", "finished"):
        return ()
    out: list[JobEvidence] = []
    found, _ = issues(s)
    flight = s.flight
    ops = _ops(s) if found else ()
    for i in found:
        op = next((o.op for o in ops if o.pg == i.pg and o.seq == i.seq and o.rank not in i.ranks), None)
        op = op or next((o.op for o in ops if o.pg == i.pg and o.seq == i.seq), None)
        source = "flight" if flight is not None and flight.ranks else "log"
        at = flight.read_at if flight is not None and flight.ranks else s.time
        if i.pg == "0":
            out.append(JobEvidence(source, at, i.code, i.ranks, op, i.seq))
    ras = ras_issue(s)
    if ras is not None and s.ras is not None:
        op = op_name(s.ras.operation) if s.ras.operation else None
        out.append(JobEvidence("nccl_ras", s.ras.asked_at, ras.code, ras.ranks, op, ras.seq))
    return tuple(out)


def last_collectives(s: Snapshot) -> dict[int, CollectiveOp]:
    """This host's ranks' last entered collective of the default group (flight records, else the watchdog's lines),
    while the run does not progress: across hosts, two ranks' calls at one number that differ are a mismatch no
    host alone holds both sides of (each node's dump holds its own rank's)."""
    if s.run_state is not None and s.run_state.state in ("progressing", "finished"):
        return {}
    mine = {r.rank for r in s.job.ranks} if s.job is not None else set()
    last: dict[int, CollectiveOp] = {}
    for o in _ops(s):
        if o.pg == "0" and (not mine or o.rank in mine) and (o.rank not in last or o.seq > last[o.rank].seq):
            last[o.rank] = o
    return last
