"""Collectives compared across ranks, and a rank whose GPU computes longer than the others'.

- **A collective mismatch**: ranks of one process group whose collective of one number differs in type or size (a
  metric only rank 0 reduces: its ``all_reduce`` #13 of 1 element meets rank 1's of 4194304). Where the ranks'
  earlier collectives are known (the flight recorder keeps 2000), the rank whose call at that number was never made
  before by it, while the others' was, made **one more** collective than they did; it is named, with the frame that
  called it.
- **A rank missing from a collective**: the others entered collective #N (and wait in it: not completed) and it never
  did (its last enqueued is lower).

Both come from PyTorch's flight recorder dumps (:mod:`rlwatch.sources.flight`: where the ranks' environment says,
else PyTorch's default place, written since the run started) and from the NCCL watchdog's ``WorkNCCL(…)`` lines
(:mod:`rlwatch.logs.collectives`). Dumps are looked for only on suspicion (an NCCL timeout logged, or the run hung),
and read again only when one changed.

- **A GPU-bound straggler**: every rank's Python stack waits in the same places (the stacks see no straggler), yet
  one rank's GPU draws far more power than the others' over the window: it computes longer each step and the others
  wait for it in NCCL, whose kernels spin at 100 % utilisation and a fraction of the power. Thresholds
  (:data:`GPU_POWER_RATIO`, :data:`GPU_POWER_MIN_GAP_W`, :data:`GPU_WINDOW_S`, :data:`GPU_MIN_READS`) are in the
  README's section on stragglers.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from rlwatch.common.state import Finding, GpuActivity, JobInfo, RasRank, Snapshot
from rlwatch.common.vocab import FindingCode, RankPlace
from rlwatch.engine.diagnosis.base import CRIT, WARN, Context
from rlwatch.engine.diagnosis.stacks import still_ranks, stragglers
from rlwatch.logs.collectives import CollectiveOp, RankProgress, read_lines

__all__ = [
    "EARLY_HANG_S",
    "GPU_MIN_READS",
    "GPU_POWER_MIN_GAP_W",
    "GPU_POWER_RATIO",
    "GPU_WINDOW_S",
    "RAS_QUIET_FACTOR",
    "RAS_QUIET_S",
    "RAS_SETTLED_S",
    "CollectiveIssue",
    "RankStanding",
    "collectives",
    "compare",
    "gpu_bound",
    "gpu_straggler",
    "job_of",
    "quiet_enough_to_ask",
    "ras_issue",
    "standings",
    "usual_count",
]

# A rank's GPU is computing longer each step when, over the last GPU_WINDOW_S, the median of its power readings is at
# least GPU_POWER_RATIO times the median of the other ranks' GPUs and GPU_POWER_MIN_GAP_W above it, from at least
# GPU_MIN_READS readings of each. Measured on two H200s (tests/real/collective-2gpu/): a rank with 4x the matrix work
# drew 336 W beside 129 W; two ranks of equal work were within 10 % of each other.
GPU_POWER_RATIO = 1.6
GPU_POWER_MIN_GAP_W = 80.0
GPU_WINDOW_S = 60.0
GPU_MIN_READS = 8

# NCCL's RAS service is asked (engine/job) once the run has shown no progress for RAS_QUIET_FACTOR of its step
# intervals and at least RAS_QUIET_S: a job whose ranks wait in a collective for one that never came stops its step
# lines at once, and its hosts' hang rule waits for its floor (60 s) before it says so. Counts that differ are a hang's
# evidence only when read RAS_SETTLED_S or more into the quiet: in a run that moves, two ranks' launches differ by one
# all the time. On two "nodes" of one H200 (tests/real/job-2node-1gpu-watched) the stalled rank was named at +64 s
# through the floor; asked on the quiet, the job is hung with its rank named in about 25 s.
RAS_QUIET_FACTOR = 5.0
RAS_QUIET_S = 15.0
RAS_SETTLED_S = 10.0
# The shortest quiet that evidence of a rank behind (RAS's counts on a host; the ranks' stacks joined by the fleet)
# makes a hang ahead of the cadence's floor.
EARLY_HANG_S = RAS_QUIET_S + RAS_SETTLED_S


def quiet_enough_to_ask(quiet_s: float, interval_s: float | None) -> bool:
    """Whether a run silent for ``quiet_s`` (its steps every ``interval_s``, where known) is worth asking NCCL RAS."""
    return quiet_s >= max(RAS_QUIET_S, RAS_QUIET_FACTOR * interval_s if interval_s else 0.0)


@dataclass(frozen=True, slots=True)
class CollectiveIssue:
    """A mismatch or a missing rank, in words, with the entries it rests on."""

    code: FindingCode  # "collective_mismatch" | "collective_missing_rank"
    pg: str
    seq: int
    ranks: tuple[int, ...]  # the rank(s) named as the odd one out
    message: str
    evidence: tuple[str, ...]


def _size(o: CollectiveOp) -> str:
    n = o.numel_in
    return f"{o.op}" if n is None else f"{o.op} of {n} element{'s' if n != 1 else ''}"


def _call(o: CollectiveOp) -> str:
    return f"{_size(o)}{' in ' + o.frame if o.frame else ''}"


def _sig(o: CollectiveOp) -> tuple[str, int | None]:
    return (o.op, o.numel_in)


def _who(ranks: Sequence[int], gpus: Mapping[int, int] | None = None) -> str:
    """ "rank 0", "ranks 0, 1"; with ``gpus`` (rank -> this host's GPU, where the job's environment says), "rank 0
    (GPU 0)": a person on the host acts on a GPU, and ``nvidia-smi`` speaks of GPUs, not ranks."""
    gpus = gpus or {}
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(
        f"{r} (GPU {gpus[r]})" if r in gpus else str(r) for r in sorted(ranks)
    )


def _group(pg: str, names: Mapping[str, str]) -> str:
    name = names.get(pg)
    return f"process group {pg}" + (f" ({name})" if name and name != pg else "")


def _usual(o: CollectiveOp, pops: Sequence[CollectiveOp]) -> bool:
    """The rank made this same call (type, size, caller) before, at an earlier number."""
    return any(_sig(p) == _sig(o) and p.frame == o.frame for p in pops if p.rank == o.rank and p.seq < o.seq)


def _mismatch(
    pg: str,
    pops: Sequence[CollectiveOp],
    ranks: Sequence[int],
    names: Mapping[str, str],
    gpus: Mapping[int, int],
) -> CollectiveIssue | None:
    """The first collective number at which ranks that both recorded it made different calls."""
    at: dict[tuple[int, int], CollectiveOp] = {(o.rank, o.seq): o for o in pops}
    for seq in sorted({o.seq for o in pops}):
        here = {r: at[(r, seq)] for r in ranks if (r, seq) in at}
        if len(here) < 2:
            continue
        sizes_known = all(o.numel_in is not None for o in here.values())
        sigs = {r: (o.op, o.numel_in if sizes_known else None) for r, o in here.items()}
        if len(set(sigs.values())) == 1:
            continue
        counts = Counter(sigs.values())
        top = counts.most_common()
        odd: list[int] = []
        if len(top) > 1 and top[0][1] > top[1][1]:
            odd = [r for r, sg in sigs.items() if sg != top[0][0]]
        else:
            # No majority (two ranks): the rank whose call at this number it never made before, while the others'
            # call is one they each made before, made a call the others did not.
            new = [r for r, o in here.items() if not _usual(o, pops)]
            if new and len(new) < len(here):
                odd = new
        parts = [f"{_who([r], gpus)} called {_call(o)}" for r, o in sorted(here.items())]
        text = f"collectives differ across ranks at #{seq} of {_group(pg, names)}: " + "; ".join(parts)
        if odd:
            extra = here[odd[0]]
            others = [r for r in here if r not in odd]
            text += (
                f". {_who(odd, gpus)} made one more collective than {_who(others, gpus)}: {_call(extra)}, which "
                f"{_who(others)} never made; the others' #{seq} is their next {_size(here[others[0]])}"
            )
        evidence = tuple(
            f"{_who([r])}: {o.where}" + (f" {o.sizes}" if o.sizes else "") for r, o in sorted(here.items())
        )
        return CollectiveIssue("collective_mismatch", pg, seq, tuple(odd), text, evidence)
    return None


def _missing(
    pg: str,
    pops: Sequence[CollectiveOp],
    prog: Sequence[RankProgress],
    ranks: Sequence[int],
    names: Mapping[str, str],
    gpus: Mapping[int, int],
) -> CollectiveIssue | None:
    """Ranks that never entered the collective the others entered and still wait in."""
    enq: dict[int, int] = {}
    done: dict[int, int] = {}
    where: dict[int, str] = {}
    for p in prog:
        if p.last_enqueued is not None and p.last_enqueued >= enq.get(p.rank, -1):
            enq[p.rank], where[p.rank] = p.last_enqueued, p.where
        if p.last_completed is not None:
            done[p.rank] = max(done.get(p.rank, -1), p.last_completed)
    for o in pops:
        if o.seq > enq.get(o.rank, -1):
            enq[o.rank], where[o.rank] = o.seq, o.where
        if o.state == "completed":
            done[o.rank] = max(done.get(o.rank, -1), o.seq)
    if len(enq) < 2:
        return None
    top = max(enq.values())
    ahead = [r for r in ranks if enq.get(r) == top]
    behind = [r for r in ranks if r in enq and enq[r] < top]
    if not behind or not ahead:
        return None
    if any(done.get(r, -1) >= top for r in ahead):
        return None  # the collective completed: a rank read a moment later, not one missing
    op = next((o for o in pops if o.seq == top and o.rank in ahead), None)
    name = f"{_size(op)} #{top}" if op is not None else f"collective #{top}"
    called = f" (called in {op.frame})" if op is not None and op.frame else ""
    last = ", ".join(f"{_who([r])} last entered #{enq[r]}" for r in behind)
    text = (
        f"{_who(behind, gpus)} never entered {name} of {_group(pg, names)}{called}, which {_who(ahead, gpus)} "
        f"entered and {'waits' if len(ahead) == 1 else 'wait'} in; {last}"
    )
    evidence = tuple(f"{_who([r])}: {where[r]} (last entered #{enq[r]})" for r in sorted(enq))
    return CollectiveIssue("collective_missing_rank", pg, top, tuple(behind), text, evidence)


def compare(
    ops: Sequence[CollectiveOp],
    progress: Sequence[RankProgress] = (),
    names: Mapping[str, str] | None = None,
    gpus: Mapping[int, int] | None = None,
) -> tuple[CollectiveIssue, ...]:
    """Every process group's mismatch (first) and missing ranks, across the ranks that reported on it; ``gpus``
    (rank -> GPU, this host's ranks) names each rank's GPU beside it."""
    names, gpus = names or {}, gpus or {}
    out: list[CollectiveIssue] = []
    for pg in sorted({o.pg for o in ops} | {p.pg for p in progress}, key=lambda g: (len(g), g)):
        pops = [o for o in ops if o.pg == pg]
        prog = [p for p in progress if p.pg == pg]
        ranks = sorted({o.rank for o in pops} | {p.rank for p in prog})
        if len(ranks) < 2:
            continue
        found = _mismatch(pg, pops, ranks, names, gpus)
        if found is not None:
            out.append(found)
            continue
        missing = _missing(pg, pops, prog, ranks, names, gpus)
        if missing is not None:
            out.append(missing)
    return tuple(out)


# --------------------------------------------------------------------------------------------- what the ranks say
def _suspicious(s: Snapshot) -> bool:
    ev = s.events.get("nccl_timeout")
    hung = s.run_state is not None and s.run_state.state in ("hung", "crashed")
    return (ev is not None and ev.count > 0) or hung


def issues(s: Snapshot) -> tuple[tuple[CollectiveIssue, ...], tuple[str, ...]]:
    """What the dumps (``Snapshot.flight``, read by the engine on suspicion) and the watchdog lines say, and the
    dumps that could not be read (one line each)."""
    ev = s.events.get("nccl_timeout")
    lines = [(x.path, x.lineno, x.text) for x in (ev.recent if ev is not None else ())]
    ops, progress = read_lines(lines)
    gpus = {r.rank: r.gpu for r in s.job.ranks if r.gpu is not None} if s.job is not None else {}
    flight = s.flight
    if flight is None:
        return compare(ops, progress, gpus=gpus), ()
    if flight.ranks:
        # The dumps say more than the lines of the same ranks: each rank is read from one place.
        dumped = set(flight.ranks)
        ops = tuple(o for o in ops if o.rank not in dumped)
        progress = tuple(p for p in progress if p.rank not in dumped)
    return compare(ops + flight.ops, progress + flight.progress, dict(flight.groups), gpus), flight.errors


def _rank_list(ranks: Sequence[int]) -> str:
    return _who(ranks) if len(ranks) <= 3 else f"the {len(ranks)} others"


def _ras_place(r: RasRank) -> str:
    parts = [f"process {r.pid}" if r.pid is not None else None, f"on node {r.node}" if r.node else None]
    gpu = f", GPU {r.gpu}" if r.gpu is not None else ""
    said = " ".join(p for p in parts if p)
    return f"{_who([r.rank])} is {said}{gpu}" if said else ""


def usual_count(tally: Counter[int]) -> int:
    """The count of operations the ranks reached, from NCCL RAS's counts tallied (count -> ranks at it): the count
    most ranks show, or with no majority the highest (the ranks below it are behind). One rule for a host's finding
    and the fleet's join across hosts."""
    top = tally.most_common()
    return top[0][0] if len(top) == 1 or top[0][1] > top[1][1] else max(tally)


def ras_issue(s: Snapshot, *, quiet_since: float | None = None) -> CollectiveIssue | None:
    """What NCCL's RAS service says of the job's ranks (``Snapshot.ras``, asked by the engine on suspicion only):
    the ranks whose count of launched operations differs from the others' — "Rank 1 has launched up to operation 10
    while rank 0 reached 11 (NCCL RAS)" — and the ranks it did not hear from. The ranks may be on any node: where
    none of them is this host's, it says so, and this host's ranks are never the ones blamed. Never on a progressing
    run (counts differ by one between two ranks' launches all the time) — unless ``quiet_since`` (the run's last
    progress) is given and the service was asked RAS_SETTLED_S or more after it: then the counts are where the ranks
    stopped."""
    ras = s.ras
    if ras is None or ras.error is not None or not ras.ranks:
        return None
    if quiet_since is not None:
        if ras.asked_at - quiet_since < RAS_SETTLED_S:
            return None
    elif s.run_state is not None and s.run_state.state in ("progressing", "finished"):
        return None
    counted = {x.rank: x.collectives for x in ras.ranks if x.collectives is not None and x.status in ("ok", "behind")}
    gone = [x for x in ras.ranks if x.status in ("missing", "dead")]
    counts = Counter(counted.values())
    if len(counts) < 2 and not gone:
        return None
    parts: list[str] = []
    odd: list[int] = []
    if len(counts) >= 2:
        usual = usual_count(counts)
        others = sorted(rank for rank, n in counted.items() if n == usual)
        by_count: dict[int, list[int]] = {}
        for rank, n in sorted(counted.items()):
            if n != usual:
                by_count.setdefault(n, []).append(rank)
        for n, ranks in sorted(by_count.items()):
            odd.extend(ranks)
            verb = "has" if len(ranks) == 1 else "have"
            parts.append(
                f"{_who(ranks)} {verb} launched up to operation {n} while {_rank_list(others)} reached {usual}"
            )
    for g in gone:
        odd.append(g.rank)
        why = "is considered dead (unreachable over RAS's network)" if g.status == "dead" else "did not answer"
        parts.append(f"{_who([g.rank])} {why}")
    if not parts:
        return None
    text = "; ".join(parts)
    op = f", {ras.operation} operations" if ras.operation else ""
    places = "; ".join(p for x in ras.ranks if x.rank in odd and (p := _ras_place(x)))
    text = f"{text[0].upper()}{text[1:]} (NCCL RAS{op}{': ' + places if places else ''})"
    mine = {r.rank for r in s.job.ranks} if s.job is not None else set()
    if mine and not mine & set(odd):
        text += f"; this host's {_who(sorted(mine))} wait{'s' if len(mine) == 1 else ''} for it on another node"
    elif own := sorted(mine & set(odd)):
        text += f"; {'it is' if len(own) == 1 else 'they are'} this host's {_who(own)}"
    evidence = (f"NCCL RAS{' ' + ras.version if ras.version else ''}: {ras.summary}",) if ras.summary else ()
    return CollectiveIssue("collective_missing_rank", "0", max(counts, default=0), tuple(odd), text, evidence)


def collectives(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """A collective mismatch, or a rank missing from a collective the others entered, named with its evidence; what
    NCCL's RAS service says of the job's ranks joins the flight records' finding, or stands alone where there is
    none (the culprit's dump is on another node)."""
    if s.run_state is not None and s.run_state.state == "finished":
        return
    found, _ = issues(s)
    ras = ras_issue(s)
    for i, issue in enumerate(found):
        sev = CRIT if issue.code == "collective_mismatch" or _suspicious(s) else WARN
        first = issue.message[0].upper() + issue.message[1:]
        evidence = issue.evidence
        if i == 0 and ras is not None:
            first = f"{first}. {ras.message}"
            evidence = evidence + ras.evidence
        elif i == 0 and s.ras is not None and s.ras.error is None and s.ras.summary:
            evidence = (*evidence, f"NCCL RAS: {s.ras.summary}")
        yield Finding(
            sev,
            issue.code,
            f"{first} (evidence: {'; '.join(evidence)}).",
            None,
            fix="fix the code path that makes a different collective on one rank"
            if issue.code == "collective_mismatch"
            else "read the missing rank's stack",
        )
    if not found and ras is not None:
        where = "; ".join(e for e in ras.evidence)
        yield Finding(
            CRIT if _suspicious(s) else WARN,
            ras.code,
            f"{ras.message}{' (evidence: ' + where + ')' if where else ''}.",
            None,
            fix=f"read the stack of {_who(ras.ranks)} where it runs (py-spy dump on its node)",
        )


# ------------------------------------------------------------------------------------------ GPU-bound stragglers
def gpu_bound(
    readings: Mapping[int, Sequence[GpuActivity]], rank_gpus: Mapping[str, int]
) -> tuple[str, tuple[str, ...]] | None:
    """The rank(s) whose GPU draws far more than the others' over the readings given (one window), in words, with
    the figures; None when no rank stands out or too few readings."""
    med: dict[str, float] = {}
    clock: dict[str, float] = {}
    util: dict[str, float] = {}
    for label, gpu in rank_gpus.items():
        rs = [r for r in readings.get(gpu, ()) if r.power_w is not None]
        if len(rs) < GPU_MIN_READS:
            return None
        med[label] = statistics.median(r.power_w for r in rs if r.power_w is not None)
        clocks = [r.sm_clock_mhz for r in rs if r.sm_clock_mhz is not None]
        utils = [r.util for r in rs if r.util is not None]
        if clocks:
            clock[label] = statistics.median(clocks)
        if utils:
            util[label] = statistics.median(utils)
    if len(med) < 2:
        return None
    slow = []
    for label, w in med.items():
        rest = [v for k, v in med.items() if k != label]
        base = statistics.median(rest)
        if w >= GPU_POWER_RATIO * base and w - base >= GPU_POWER_MIN_GAP_W:
            slow.append(label)
    if not slow or len(slow) * 2 > len(med):
        return None
    others = [k for k in med if k not in slow]
    base = statistics.median(med[k] for k in others)

    def fig(label: str) -> str:
        extra = [f"{med[label]:.0f} W"]
        if label in clock:
            extra.append(f"SM {clock[label]:.0f} MHz")
        if label in util:
            extra.append(f"{util[label]:.0f} % busy")
        return f"{label} (GPU {rank_gpus[label]}): " + ", ".join(extra)

    names = " and ".join(f"{label} (GPU {rank_gpus[label]})" for label in slow)
    verb = "computes" if len(slow) == 1 else "compute"
    text = (
        f"{names} {verb} longer each step: {' / '.join(f'{med[k]:.0f} W' for k in slow)} beside {base:.0f} W "
        f"(the median of {', '.join(others)}) while every rank's stack waits in the same places"
    )
    return text, tuple(fig(k) for k in sorted(med))


def gpu_straggler(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """A warning naming the rank whose GPU computes longer each step, when the stacks cannot tell (they name no
    straggler). Live, every rank must have been sampled over the window; a one-shot look (no sampling) compares the
    GPUs' draws over the reads it took."""
    if s.run_state is None or s.run_state.state != "progressing" or s.job is None:
        return
    sampling = s.sampling
    if sampling is not None:
        if not sampling.available or stragglers(s, ctx) is not None:
            return  # the stacks name a straggler (or cannot be read): theirs is the finding
        start = s.time - GPU_WINDOW_S
        ranked = [p for p in sampling.processes if p.alive and p.rank is not None]
        if len(ranked) < 2 or any(sum(x.at >= start for x in p.samples) < 2 for p in ranked):
            return
    rank_gpus = {f"rank {r.rank}": r.gpu for r in s.job.ranks if r.gpu is not None}
    if len(set(rank_gpus.values())) != len(rank_gpus) or len(rank_gpus) < 2:
        return  # two ranks on one GPU: their draws cannot be told apart
    got = gpu_bound(s.gpu_activity, rank_gpus)
    if got is None:
        return
    text, figures = got
    yield Finding(WARN, "gpu_straggler", f"A GPU-bound straggler slows the run: {text} ({'; '.join(figures)}).", None)


# ------------------------------------------------------------------------------------ where each rank stands, for a job
@dataclass(frozen=True, slots=True)
class RankStanding:
    """Where one of this host's ranks stands, for the job's view across hosts (the exporter, ``rlwatch fleet``)."""

    rank: int
    local_rank: int | None
    state: RankPlace  # "waiting": in a collective; "elsewhere": standing still outside one; "moving": its frames move
    where: str  # its innermost frame and the run's own frame that led there
    wait: str | None  # the wait it stands in ("all_reduce"), None: none known
    still_s: float  # how long it has stood in these frames (0: it moves)
    collective_seq: int | None = None  # the last collective it entered: its flight record, else NCCL RAS's count


def job_of(s: Snapshot) -> JobInfo | None:
    """The distributed job this host's ranks belong to (the engine reads it from their environment)."""
    return s.job


def standings(s: Snapshot) -> tuple[RankStanding, ...]:
    """Each live rank of this host: waiting in a collective, standing still elsewhere, or moving, since when, and
    the last collective it entered where a flight record (else NCCL's RAS service) says."""
    sampling = s.sampling
    if sampling is None or not sampling.available:
        return ()
    seqs: dict[int, int] = {}
    for g in s.flight.progress if s.flight is not None else ():
        if g.pg == "0" and g.last_enqueued is not None:
            seqs[g.rank] = g.last_enqueued
    ras, world = s.ras, s.job.world_size if s.job is not None else None
    if ras is not None and ras.error is None:
        # NCCL RAS's count of the operations each rank launched, where no flight record says: the same number for
        # a default group of one collective type (all_reduce #11 is the 11th AllReduce), and job-wide.
        for r in ras.ranks:
            if r.collectives is not None and (world is None or r.rank < world):
                seqs.setdefault(r.rank, r.collectives)
    local = {r.rank: r.local_rank for r in s.job.ranks} if s.job is not None else {}
    out = []
    for x in still_ranks(s):
        p = x.proc
        if p.rank is None:
            continue
        moving = x.reads < 2
        state: RankPlace = "moving" if moving else ("waiting" if x.latest.collective else "elsewhere")
        out.append(
            RankStanding(
                p.rank,
                local.get(p.rank),
                state,
                x.latest.where,
                x.latest.wait,
                0.0 if moving else max(0.0, s.time - x.since),
                seqs.get(p.rank),
            )
        )
    return tuple(sorted(out, key=lambda r: r.rank))
