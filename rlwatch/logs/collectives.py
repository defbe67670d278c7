"""What each rank says of its collectives: PyTorch's NCCL watchdog lines, read into one record per rank and process
group, so that ranks can be compared (:mod:`rlwatch.engine.diagnosis.collectives`).

A collective that hangs or times out is logged by ``ProcessGroupNCCL`` on every rank that entered it, and the lines
carry what a person compares across ranks by hand (torch ``ProcessGroupNCCL.cpp``, 1.x to 2.11):

- ``[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=13, OpType=ALLREDUCE, NumelIn=1,
  NumelOut=1, Timeout(ms)=30000) ran for 30012 milliseconds before timing out.`` (``NumelIn``/``NumelOut`` since
  about 2.1): the collective, its sequence number in its process group, and its size;
- ``[PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 4 PG status: last
  enqueued work: 4, last completed work: 3`` (2.3+), ``[PG 2 Rank 0] Timeout at NCCL work: 2, last enqueued NCCL
  work: 2, last completed NCCL work: 1`` (2.2), and ``Received a dump signal … Last enqueued NCCL work: 3, last
  completed NCCL work: 3.``: how far each rank got.

Two ranks of one group timing out in collectives of one number but different types or sizes made different calls
(a mismatch); a rank whose last enqueued collective is lower than the others' never entered the one they wait in.
The rank is the one the line names (``[Rank N]``), else torchrun's ``[rankN]:`` prefix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rlwatch.common.state import CollectiveOp, RankProgress

__all__ = ["CollectiveOp", "RankProgress", "op_name", "parse_line", "read_lines"]


_WORK = re.compile(
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>[A-Z_]+)"
    r"(?:, NumelIn=(?P<nin>-?\d+), NumelOut=(?P<nout>-?\d+))?(?:, Timeout\(ms\)=(?P<to>\d+))?"
)
_STATUS = re.compile(
    r"(?:[Ll]ast enqueued (?:NCCL )?work: (?P<enq>\d+), last completed (?:NCCL )?work: (?P<done>-?\d+))"
)
_RANK_IN = re.compile(r"\bRank (\d+)\]")
_RANK_PREFIX = re.compile(r"^\[(?:rank|Rank )(\d+)\]:?")
_PG = re.compile(r"\[PG (?:ID )?(\d+)\b")

# ProcessGroupNCCL's OpType names, and the flight recorder's profiling names ("nccl:all_reduce"), in one vocabulary.
_OPS = {
    "ALLREDUCE": "all_reduce",
    "ALLREDUCE_COALESCED": "all_reduce_coalesced",
    "BROADCAST": "broadcast",
    "REDUCE": "reduce",
    "ALLGATHER": "all_gather",
    "_ALLGATHER_BASE": "all_gather_into_tensor",
    "ALLGATHER_COALESCED": "all_gather_coalesced",
    "GATHER": "gather",
    "SCATTER": "scatter",
    "REDUCE_SCATTER": "reduce_scatter",
    "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
    "REDUCE_SCATTER_TENSOR_COALESCED": "reduce_scatter_tensor_coalesced",
    "ALLTOALL_BASE": "all_to_all_single",
    "ALLTOALL": "all_to_all",
    "BARRIER": "barrier",
    "SEND": "send",
    "RECV": "recv",
    "RECVANYSOURCE": "recv",
    "COALESCED": "coalesced",
}


def op_name(raw: str) -> str:
    """One name for a collective however it was written: ``ALLREDUCE``, ``nccl:all_reduce``, ``allreduce``."""
    name = raw.rsplit(":", 1)[-1]
    mapped = _OPS.get(name.upper())
    if mapped is not None:
        return mapped
    low = name.lower()
    return {"allreduce": "all_reduce", "allgather": "all_gather", "_allgather_base": "all_gather_into_tensor"}.get(
        low, low
    )


def _rank(text: str) -> int | None:
    m = _RANK_IN.search(text) or _RANK_PREFIX.match(text)
    return int(m.group(1)) if m else None


def _pg(text: str) -> str:
    m = _PG.search(text)
    return m.group(1) if m else "0"


def parse_line(text: str, where: str) -> CollectiveOp | RankProgress | None:
    """A watchdog line's collective or progress, or None (not such a line, or no rank named)."""
    if "WorkNCCL(" not in text and "ast enqueued" not in text:
        return None
    rank = _rank(text)
    if rank is None:
        return None
    m = _WORK.search(text)
    if m is not None and "Watchdog caught" in text:
        nin, nout, to = m.group("nin"), m.group("nout"), m.group("to")
        return CollectiveOp(
            rank,
            _pg(text),
            int(m.group("seq")),
            op_name(m.group("op")),
            int(nin) if nin is not None else None,
            int(nout) if nout is not None else None,
            where,
            state="timed out",
            timeout_ms=int(to) if to is not None else None,
        )
    s = _STATUS.search(text)
    if s is not None:
        return RankProgress(rank, _pg(text), int(s.group("enq")), int(s.group("done")), where)
    return None


def read_lines(lines: Iterable[tuple[str, int, str]]) -> tuple[tuple[CollectiveOp, ...], tuple[RankProgress, ...]]:
    """Every rank's timed-out collectives and progress from (path, line number, text) triples; a line repeated (the
    watchdog prints its timeout again as it aborts) counts once, at its first place."""
    ops: dict[tuple[int, str, int], CollectiveOp] = {}
    progress: dict[tuple[int, str], RankProgress] = {}
    for path, lineno, text in lines:
        got = parse_line(text, f"{path.rsplit('/', 1)[-1]}:{lineno}")
        if isinstance(got, CollectiveOp):
            ops.setdefault((got.rank, got.pg, got.seq), got)
        elif isinstance(got, RankProgress):
            key = (got.rank, got.pg)
            old = progress.get(key)
            # The furthest a rank is known to have got: a later line of the same rank never goes back.
            if old is None or (got.last_enqueued or 0) >= (old.last_enqueued or 0):
                progress[key] = got
    return tuple(ops.values()), tuple(progress.values())
