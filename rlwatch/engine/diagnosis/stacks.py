"""Hangs and stragglers from where each rank stands, whatever the logs print (the stacks sampled while the run lives,
:mod:`rlwatch.sources.sampler`).

- **Hung from the stacks**: every rank's main thread has stood in the same frames, read after read, for longer than
  the run's hang window (``hang_factor`` times its step interval, ``hang_floor_s`` at least, never more than
  ``stacks.hang_max_s``), and at least one of them never ran nor woke in that time (blocked in a socket, a lock, a
  queue …) or all of them wait in a collective; and no progress was logged since they stood still. A rank whose
  frames move, or that keeps running (a long step that computes), is no hang. It says who waits where and who is the
  odd one out: "rank 1 has been in fetch_batch_from_service (train.py:27) for 4 min; rank 0 waits for it in
  all_reduce (train.py:31)", and the RL stage where the frames tell.
- **Stragglers**: over ``stacks.straggler_window_s``, the share of each rank's reads that stand in a collective.
  When the others spend most of their time there and one rank almost none, the others wait for it: "ranks 0, 1, 3
  spend 70 % of their time waiting in all_reduce for rank 2, which is in decode_and_augment (data.py:40) 85 % of
  its time", with each rank's GPU utilisation where its GPUs are known.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rlwatch.common.state import Finding, RankTime, RunState, SampledProcess, Snapshot, StackSample
from rlwatch.engine.diagnosis.base import WARN, Context
from rlwatch.engine.diagnosis.health import hang_allowance, last_progress
from rlwatch.engine.diagnosis.wording import human_duration

__all__ = [
    "Still",
    "StragglerReport",
    "awaited",
    "rank_times",
    "stack_run_state",
    "still_ranks",
    "straggler",
    "stragglers",
    "who_waits",
]


@dataclass(frozen=True, slots=True)
class Still:
    """One rank standing in the same frames since ``since`` (its first read of them), over ``reads`` reads."""

    proc: SampledProcess
    since: float
    reads: int
    blocked: bool  # its main thread never ran nor woke between those reads
    latest: StackSample


def _who(procs: Sequence[SampledProcess]) -> str:
    ranks = [p.rank for p in procs if p.rank is not None]
    if len(ranks) == len(procs) and procs:
        return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in sorted(ranks))
    return ", ".join(p.label for p in procs)


def _ranks(s: Snapshot) -> list[SampledProcess]:
    """The live processes sampled: those with a rank when any has one (a launcher or a data worker is no rank)."""
    sampling = s.sampling
    if sampling is None or not sampling.available:
        return []
    live = [p for p in sampling.processes if p.alive and p.samples and p.error is None]
    ranked = [p for p in live if p.rank is not None]
    return ranked or live


def _still(p: SampledProcess) -> Still:
    latest = p.samples[-1]
    since, reads, blocked = latest.at, 1, True
    for sample in reversed(p.samples[:-1]):
        if sample.frames != latest.frames:
            break
        since, reads = sample.at, reads + 1
    # Every read after the first of the run says whether the thread ran or woke since the one before.
    run = p.samples[len(p.samples) - reads + 1 :]
    blocked = bool(run) and all(x.blocked is True for x in run)
    return Still(p, since, reads, blocked, latest)


def _gone(s: Snapshot) -> list[SampledProcess]:
    """Ranks read before that are no longer alive: the ones the others may wait for in vain."""
    sampling = s.sampling
    if sampling is None:
        return []
    return [p for p in sampling.processes if not p.alive and p.rank is not None and p.samples]


def still_ranks(s: Snapshot) -> list[Still]:
    """Every rank's current stillness (a rank read once has stood still for no time)."""
    return [_still(p) for p in _ranks(s)]


def _window(s: Snapshot, ctx: Context) -> float:
    allowance = hang_allowance(s.training.cadence_s if s.training is not None else None, ctx.thresholds)
    # A hang is seen up to two rounds of reads after it began (the first read of the still frames, the read that
    # passes the window): the window leaves room for them under hang_max_s, however many ranks slow the rounds.
    rounds = 2 * s.sampling.interval_s if s.sampling is not None else 0.0
    return min(allowance, max(ctx.stacks.hang_max_s - rounds, ctx.stacks.hang_max_s / 2))


def _where(x: Still) -> str:
    return x.latest.where or (x.latest.frames[0] if x.latest.frames else "outside Python code")


def who_waits(still: Sequence[Still]) -> tuple[list[Still], list[Still]] | None:
    """(the ranks the others wait for, the ranks that wait), from the frames alone: a rank standing in a known
    collective (torch.distributed's all_reduce, a barrier, ``synchronize`` …) waits; a rank that is not in one (in its
    own code, a data fetch, a sleep) is what they wait for. None where the frames do not decide: no rank stands in a
    known collective, or every rank does. Which rank's thread never woke does not decide it: a rank waiting in
    NCCL spins (it runs), and one stuck in a fetch may sleep; it is said beside, as evidence."""
    waiting = [x for x in still if x.latest.collective]
    others = [x for x in still if not x.latest.collective]
    if waiting and others:
        return others, waiting
    return None


def _thread(x: Still) -> str:
    """What the kernel says of the rank's main thread over its still reads: the evidence beside its frames."""
    if x.reads < 2:
        return ""
    return "; its main thread never woke" if x.blocked else "; its main thread keeps running or waking"


def _describe(still: Sequence[Still], now: float, gone: Sequence[SampledProcess] = ()) -> tuple[str, tuple[str, ...]]:
    """Who waits where, the one waited for first, where the frames say it (:func:`who_waits`); where they do not,
    it says so and where each rank stands, never a guess. The evidence: each rank's innermost frames."""
    parts = []
    decided = who_waits(still)
    if decided is not None:
        odd, rest = decided
        for x in odd:
            wait = f", waiting in {x.latest.wait}" if x.latest.wait and x.latest.wait not in _where(x) else ""
            parts.append(
                f"{_who([x.proc])} has been in {_where(x)} for {human_duration(now - x.since)}{wait}, not in a "
                f"collective{_thread(x)}"
            )
        by_place: dict[str, list[Still]] = {}
        for x in rest:
            by_place.setdefault(x.latest.wait or _where(x), []).append(x)
        for place, xs in by_place.items():
            frame = _where(xs[0])
            at = frame if frame.startswith(place) else f"{place} ({frame})"
            parts.append(f"{_who([x.proc for x in xs])} {'waits' if len(xs) == 1 else 'wait'} for it in {at}")
    else:
        every = bool(still) and all(x.latest.collective for x in still)
        reason = "every rank stands in a collective" if every else "no rank stands in a known collective frame"
        parts.append(f"which rank waits for which is not known ({reason}; read every rank's stack)")
        for x in still:
            wait = f", waiting in {x.latest.wait}" if x.latest.wait and x.latest.wait not in _where(x) else ""
            parts.append(
                f"{_who([x.proc])} has been in {_where(x)} for {human_duration(now - x.since)}{wait}{_thread(x)}"
            )
    for p in gone:
        last = p.samples[-1]
        parts.append(f"{p.label} (pid {p.pid}) is gone, last seen in {last.where} {human_duration(now - last.at)} ago")
    stages = Counter(x.latest.stage for x in still if x.latest.stage)
    if stages:
        parts.append(f"stage: {stages.most_common(1)[0][0]}")
    evidence = tuple(f"{x.proc.label}: " + " <- ".join(x.latest.frames[:6]) for x in still)
    return "; ".join(parts), evidence


def awaited(s: Snapshot) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(the pids the others wait for, every rank's pid) where the sampled stacks decide who waits for whom
    (:func:`who_waits`); None where they do not, or nothing was sampled."""
    still = still_ranks(s)
    decided = who_waits(still)
    if decided is None:
        return None
    return tuple(x.proc.pid for x in decided[0]), tuple(x.proc.pid for x in still)


_STAND = "; where the ranks stand: "
_WATCHDOG_SAID = " (as the watchdog, pid "


def stack_run_state(s: Snapshot, ctx: Context, state: RunState) -> RunState:
    """The run's state with what its stacks say: hung when its ranks stand still in their waits past the window,
    whatever the logs print; a hang the logs declared gets who waits where."""
    if state.state in ("crashed", "finished", "stopped"):
        return state
    still = still_ranks(s)
    if not still:
        return state
    now = s.time
    if state.state == "hung":
        moved = [x for x in still if x.reads < 2]
        if moved:
            return state
        text, _ = _describe(still, now, _gone(s))
        # A why that already says where the ranks stood (a watchdog's, leaned on) gets this reading instead, once.
        head, stood, tail = state.why.partition(_STAND)
        said = tail[tail.index(_WATCHDOG_SAID) :] if stood and _WATCHDOG_SAID in tail else ""
        return RunState(state.state, f"{head}{_STAND}{text}{said}", state.since, state.evidence)
    window = _window(s, ctx)
    if any(x.reads < 2 or now - x.since < window for x in still):
        return state
    if not (any(x.blocked for x in still) or all(x.latest.collective for x in still) or who_waits(still)):
        # Standing in the same frames but running: a long step that computes, or a busy wait. Ranks standing in a
        # collective for a rank that stands elsewhere wait, whether their threads spin (NCCL) or sleep.
        return state
    ranked = any(x.proc.rank is not None for x in still)
    if not ranked and any(not x.blocked and x.latest.wait is None for x in still):
        # Without ranks, the processes are a trainer and its helpers (data workers wait in their queues for as
        # long as a step lasts): one that keeps running in one frame is a long step, not a wait.
        return state
    _, progress_by = last_progress(s, ctx)
    latest_still = max(x.since for x in still)
    if progress_by is not None and progress_by > latest_still:
        return state  # progress logged after every rank stood still: they move between the reads
    since = min(x.since for x in still)
    if progress_by is not None and progress_by <= since:
        since = progress_by
    text, evidence = _describe(still, now, _gone(s))
    why = (
        f"its ranks' stacks have not moved for {human_duration(now - min(x.since for x in still))} (more than the "
        f"{human_duration(window)} its cadence allows) while they wait: {text}"
    )
    return RunState("hung", why, since, evidence)


@dataclass(frozen=True, slots=True)
class StragglerReport:
    """Where each rank spent its reads over the window: its share in a collective, and its main other place."""

    shares: dict[str, float]  # label -> share of its reads in a collective
    slow: tuple[str, ...]  # the stragglers' labels
    message: str


def _gpu_of(s: Snapshot, p: SampledProcess) -> tuple[int, float] | None:
    """The GPU the process holds (by the GPU holders' pids) and its utilisation, where known."""
    util = {g.index: g.util for g in s.gpus}
    gpus = next((h.gpus for h in s.holders if h.pid == p.pid and h.gpus), ())
    if p.rank in gpus:  # a rank that maps its peers' memory (NCCL) shows on their GPUs too: its own comes first
        gpus = (p.rank, *(i for i in gpus if i != p.rank))
    for i in gpus:
        value = util.get(i)
        if value is not None:
            return i, value
    return None


def _gpu_text(s: Snapshot, procs: Sequence[SampledProcess]) -> str:
    parts = []
    for p in procs:
        gpu = _gpu_of(s, p)
        if gpu is not None:
            parts.append(f"{p.label} on GPU {gpu[0]} at {gpu[1]:.0f} %")
    return "; ".join(parts)


def rank_times(s: Snapshot, ctx: Context) -> tuple[RankTime, ...]:
    """Every rank's share of reads in a collective over the window, its GPU's utilisation, and whether it is a
    straggler: what the exporter and the views show beside the finding."""
    procs = _ranks(s)
    start = s.time - ctx.stacks.straggler_window_s
    report = stragglers(s, ctx)
    slow = set(report.slow) if report is not None else set()
    out = []
    for p in procs:
        xs = [x for x in p.samples if x.at >= start]
        if not xs:
            continue
        gpu = _gpu_of(s, p)
        share = sum(x.collective for x in xs) / len(xs)
        out.append(RankTime(p.label, share, len(xs), p.label in slow, None if gpu is None else gpu[1]))
    return tuple(out)


def stragglers(s: Snapshot, ctx: Context) -> StragglerReport | None:
    """The ranks the others wait for, from where each spent its reads over the window (None: not enough reads, or
    nothing to say)."""
    cfg = ctx.stacks
    procs = _ranks(s)
    if len(procs) < 2:
        return None
    start = s.time - cfg.straggler_window_s
    recent = {p.label: [x for x in p.samples if x.at >= start] for p in procs}
    if any(len(xs) < cfg.straggler_min_samples for xs in recent.values()):
        return None
    shares = {label: sum(x.collective for x in xs) / len(xs) for label, xs in recent.items()}
    slow = [p for p in procs if shares[p.label] <= cfg.straggler_own_share]
    waiting = [p for p in procs if shares[p.label] >= cfg.straggler_wait_share]
    if not slow or not waiting or len(slow) + len(waiting) != len(procs) or len(slow) > len(waiting):
        return None
    collective = Counter(x.wait for p in waiting for x in recent[p.label] if x.collective and x.wait)
    wait_in = collective.most_common(1)[0][0] if collective else "a collective"
    mean = 100 * sum(shares[p.label] for p in waiting) / len(waiting)
    # Where a slow rank is: the frame it spends more of its time in than the ranks waiting for it do. Its own step
    # loop (a sleep standing for the GPU's work, the same in every rank) is no explanation, however often it is read.
    theirs = Counter(x.where for p in waiting for x in recent[p.label] if not x.collective)
    their_reads = sum(len(recent[p.label]) for p in waiting)
    places = []
    for p in slow:
        mine = Counter(x.where for x in recent[p.label] if not x.collective)
        reads = len(recent[p.label])
        where, n = (
            max(mine.items(), key=lambda kv: (kv[1] / reads - theirs[kv[0]] / their_reads, kv[1])) if mine else ("?", 0)
        )
        places.append(f"{_who([p])}, which is in {where} {100 * n / reads:.0f} % of its time")
    gpu = _gpu_text(s, procs)
    n = min(len(xs) for xs in recent.values())
    message = (
        f"{_who(waiting)} {'spends' if len(waiting) == 1 else 'spend'} {mean:.0f} % of "
        f"{'its' if len(waiting) == 1 else 'their'} time waiting in "
        f"{wait_in} for {' and '.join(places)} ({n}+ reads of each over the last "
        f"{cfg.straggler_window_s:g} s{'; ' + gpu if gpu else ''})"
    )
    return StragglerReport(shares, tuple(p.label for p in slow), message)


def straggler(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """A warning naming the rank(s) the others wait for; nothing while the run is hung (the hang says more)."""
    if s.run_state is not None and s.run_state.state in ("hung", "crashed", "finished", "stopped"):
        return
    report = stragglers(s, ctx)
    if report is not None:
        slow = ", ".join(report.slow)
        yield Finding(WARN, "straggler", f"A straggler slows the run ({slow}): {report.message}.", None)
        return
    wd = s.watchdog
    if s.sampling is None and wd is not None and wd.running and not wd.stale and wd.straggler and wd.pid != os.getpid():
        # A one-shot report samples no stacks: the running watchdog, which does, says it.
        said = wd.straggler.rstrip(".")
        yield Finding(
            WARN, "straggler", f"{said} (as the watchdog, pid {wd.pid}, sampling the stacks live, sees it).", None
        )
