"""The hosts of one distributed job joined into one verdict: which node's which rank the others wait for, in which
collective.

Each host's exporter says which job its ranks belong to (``rlwatch_job_info``: torchrun's rendezvous id, Ray's job,
or the master's address), its run's state (``rlwatch_job_host_state_seconds``), what its collectives name while the
run does not progress (``rlwatch_job_collective_issue_info`` and ``rlwatch_job_rank_launched``: NCCL RAS's job-wide
counts and the ranks behind, the flight records' and the watchdog lines' missing rank, each rank's last call) and
where each of its ranks stands (``rlwatch_rank_standing_info``: waiting in a collective, still elsewhere, or moving).
All of it is joined, the strongest evidence first: what RAS or a flight record names, then RAS's counts joined across
hosts, then the stacks (a rank still outside a collective while the others wait in one; with real NCCL the waiting
ranks often stand at a ``.item()`` of their own code, in no collective frame, so the stacks alone say little) —
"job j: hung 45 s; node-b rank 3 never reached all_reduce #4812 (in fetch_batch_from_service, train.py:20); the 3
others wait for it". "progressing" only where every host says so, "not known" where no evidence says; a host whose
ranks all wait is never blamed: the rank they wait for is on another node, or on a node no exporter speaks for.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rlwatch.common.vocab import JOB_STATES, JobStateName
from rlwatch.engine.diagnosis.collectives import EARLY_HANG_S, usual_count
from rlwatch.export.fleet.model import FleetCall, FleetHost, FleetRank

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
    host_states: tuple[tuple[str, str], ...] = ()  # (host, its run's state)
    evidence: tuple[str, ...] = ()  # what named the culprit: "NCCL RAS", "flight records", "stacks"

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
            "host_states": {h: state for h, state in self.host_states},
            "evidence": list(self.evidence),
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


_FRAME = re.compile(r"^(?P<fn>.+?) \((?P<at>[^()]+:\d+)\)$")


def _in(where: str) -> str:
    """ "fetch_batch_from_service (train.py:20)" said as "fetch_batch_from_service, train.py:20"."""
    m = _FRAME.match(where)
    return f"{m.group('fn')}, {m.group('at')}" if m else where


_HEALTHY = ("progressing", "finished")
_SOURCE = {"nccl_ras": "NCCL RAS", "flight": "flight records", "log": "NCCL's watchdog lines", "stacks": "stacks"}


@dataclass(frozen=True, slots=True)
class _Named:
    """The ranks the job waits for, by the strongest evidence any host gives."""

    ranks: tuple[int, ...]
    collective: str | None  # "all_reduce #4812"
    sources: tuple[str, ...]


def _by_evidence(hosts: Sequence[FleetHost]) -> _Named | None:
    """Ranks a host's collectives name behind or missing (NCCL RAS, flight records, the watchdog's lines): the
    latest collective named wins; every host that names it adds its source."""
    found = [e for h in hosts for e in h.evidence if e.code == "collective_missing_rank" and e.ranks]
    if not found:
        return None
    top = max((e.seq for e in found if e.seq is not None), default=None)
    at_top = [e for e in found if e.seq == top] or found
    ranks = tuple(sorted({r for e in at_top for r in e.ranks}))
    op = next((e.op for e in at_top if e.op), None)
    name = f"{op} #{top}" if op and top is not None else (op or (f"collective #{top}" if top is not None else None))
    return _Named(ranks, name, tuple(dict.fromkeys(e.source for e in at_top)))


def _by_counts(hosts: Sequence[FleetHost]) -> _Named | None:
    """NCCL RAS's counts of each rank's operations, joined across the hosts that asked: the ranks below the count
    the others reached."""
    counts: dict[int, int] = {}
    op = None
    for h in hosts:
        for rank, n in h.launched.items():
            counts[rank] = max(n, counts.get(rank, n))
        op = op or h.launched_op
    tally = Counter(counts.values())
    if len(tally) < 2:
        return None
    usual = usual_count(tally)
    behind = tuple(sorted(r for r, n in counts.items() if n < usual))
    if not behind:
        return None
    return _Named(behind, f"{op or 'collective'} #{usual}", ("nccl_ras",))


def _mismatch(placed: Sequence[tuple[FleetHost, FleetCall]]) -> tuple[int, str] | None:
    """Two ranks whose last entered collective has one number and differs in type or size, on any hosts: the first
    such number and the calls in words."""
    by_seq: dict[int, list[tuple[FleetHost, FleetCall]]] = defaultdict(list)
    for h, c in placed:
        by_seq[c.seq].append((h, c))
    for seq in sorted(by_seq):
        here = by_seq[seq]
        if len({(c.op, c.numel) for _, c in here}) < 2:
            continue
        calls = [
            f"{h.name} rank {c.rank} called {c.op}"
            + ("" if c.numel is None else f" of {c.numel} element{'s' if c.numel != 1 else ''}")
            for h, c in sorted(here, key=lambda hc: hc[1].rank)
        ]
        return seq, "; ".join(calls)
    return None


def _a_pause(hosts: Sequence[FleetHost], still_s: float | None) -> bool:
    """Whether stacks standing still, on hosts that all say "progressing", may be a pause of a run that moves: still
    for less than EARLY_HANG_S (a rank that saves, evaluates or logs alone for a few seconds while the others wait in
    the next collective), or while a host's checkpoint was written (a save). Then they name no rank."""
    if still_s is None or still_s < EARLY_HANG_S:
        return True
    return any(h.checkpoint_age_s is not None and h.checkpoint_age_s <= still_s for h in hosts)


def _one(job: str, hosts: Sequence[FleetHost]) -> JobVerdict:
    """Every host's word on the job joined: their states, what their collectives name (NCCL RAS's counts, flight
    records, the watchdog's lines) and where their ranks stand. "progressing" only where every host says so; "not
    known", never progressing, where no evidence says; a host whose ranks all wait is never blamed."""
    placed: list[tuple[FleetHost, FleetRank]] = [(h, r) for h in hosts for r in h.ranks]
    world = max((h.world_size for h in hosts if h.world_size is not None), default=None)
    reported = {r.rank for _, r in placed} | {c.rank for h in hosts for c in h.calls}
    missing = tuple(sorted(set(range(world)) - reported)) if world is not None else ()
    names = tuple(sorted(h.name for h in hosts))
    states = {h.name: h.run_state or "unknown" for h in hosts}
    host_of = {r.rank: h.name for h, r in placed} | {c.rank: h.name for h in hosts for c in h.calls}
    standing = {r.rank: r for _, r in placed}
    waiting = [(h, r) for h, r in placed if r.state == "waiting"]
    elsewhere = [(h, r) for h, r in placed if r.state == "elsewhere"]
    moving = [(h, r) for h, r in placed if r.state == "moving"]
    healthy = all(states[h.name] in _HEALTHY for h in hosts)
    said = tuple(sorted(states.items()))

    def verdict(state: JobStateName, message: str, **more: Any) -> JobVerdict:
        return JobVerdict(
            job, state, message, names, len(reported), world, missing_ranks=missing, host_states=said, **more
        )

    # How long the job has stood still: its hosts' hangs (since their last progress), else its ranks' stillness.
    hung_for = [h.state_s for h in hosts if states[h.name] == "hung" and h.state_s is not None]
    still = [r.still_s for _, r in waiting + elsewhere if r.still_s is not None]
    still_s = min(hung_for) if hung_for else (min(still) if still and not moving else None)
    any_hung = any(states[h.name] in ("hung", "crashed") for h in hosts)

    named = None if healthy else (_by_evidence(hosts) or _by_counts(hosts))
    if named is None and (not healthy or (placed and not moving)):
        # Where seqs are known, a rank whose last entered collective is below the others' never entered theirs;
        # else a rank standing still outside a collective while others wait in one. Stacks that stay put make a hang
        # before the hosts' cadence allows them to say so: then not even hosts that still say "progressing" are.
        seqs = [r.collective_seq for _, r in placed if r.collective_seq is not None]
        top = max(seqs) if seqs else None
        behind = [
            r.rank for _, r in placed if top is not None and r.collective_seq is not None and r.collective_seq < top
        ]
        odd = behind or ([r.rank for _, r in elsewhere] if waiting else [])
        if odd and not (healthy and _a_pause(hosts, still_s)):
            named = _Named(tuple(sorted(odd)), _collective([r for _, r in waiting]), ("stacks",))
    calls = [(h, c) for h in hosts for c in h.calls]
    mismatch = None if healthy else _mismatch(calls)

    if healthy and hosts and named is None:
        return verdict("progressing", f"job {job}: progressing on {_count(len(hosts), 'host')}")
    if not placed and not hosts:
        return verdict("unknown", f"job {job}: not known: no host reports where its ranks stand")
    all_wait = bool(waiting) and not moving and len(waiting) + len(elsewhere) == len(placed)
    if any_hung or (still_s is not None and (named is not None or mismatch is not None or all_wait)):
        state: JobStateName = "hung"
    elif named is not None or mismatch is not None or all_wait or waiting:
        state = "waiting"
    else:
        state = "unknown"
    if named is None and mismatch is None and not all_wait:
        if state == "hung":
            dur = f" {_duration(still_s)}" if still_s is not None else ""
            return verdict(
                state,
                f"job {job}: hung{dur} ({_states(said)}); nothing names the rank the others wait for (no NCCL RAS "
                "answer, no flight record, no rank stands in a collective): read each node's stacks",
                still_s=still_s,
            )
        return verdict(state, f"job {job}: not known ({_states(said)}); no host's evidence names a rank")
    head = f"job {job}: " + (f"hung {_duration(still_s)}" if state == "hung" and still_s is not None else state)
    by_host: dict[str, list[int]] = defaultdict(list)
    for h, r in placed:
        by_host[h.name].append(r.rank)
    for h in hosts:
        for c in h.calls:
            if c.rank not in by_host[h.name]:
                by_host[h.name].append(c.rank)
    if named is not None:
        culprits = named.ranks
        culprit_hosts = sorted({host_of[r] for r in culprits if r in host_of})
        unplaced = [r for r in culprits if r not in host_of]
        on_parts = [f"{name} {_ranks_text([r for r in culprits if host_of.get(r) == name])}" for name in culprit_hosts]
        if unplaced:
            on_parts.append(f"{_ranks_text(unplaced)} (on a node no rlwatch here reports)")
        on = " and ".join(on_parts)
        wheres = [(r, standing[r].where) for r in culprits if r in standing and standing[r].where]
        if len(wheres) == 1 and len(culprits) == 1:
            where = f" (in {_in(wheres[0][1])})"
        elif wheres:
            where = " (" + "; ".join(f"{_ranks_text([r])} in {_in(w)}" for r, w in wheres) + ")"
        else:
            where = ""
        total = world if world is not None else len(reported)
        others = max(0, total - len(culprits))
        what = named.collective or "the collective"
        message = (
            f"{head}; {on} never reached {what}{where}; "
            f"{'the other waits' if others == 1 else f'the {others} others wait'} "
            f"for {'it' if len(culprits) == 1 else 'them'}"
        )
        per_host = []
        for name, ranks in sorted(by_host.items()):
            mine = [r for r in ranks if r in culprits]
            text = f"{_ranks_text(mine)} never reached {what}" if mine else f"its {_ranks_text(ranks)} wait for {on}"
            per_host.append((name, text))
        for h in hosts:  # a host that reports no rank still says what its run's state is
            if h.name not in by_host:
                per_host.append((h.name, f"its run is {states[h.name]}; it reports no rank"))
        if missing and not set(missing) <= set(culprits):
            message += f"; {_ranks_text([r for r in missing if r not in culprits])} reported by no host"
        if mismatch is not None:
            message += f"; collectives differ at #{mismatch[0]}: {mismatch[1]}"
        return verdict(
            state,
            message,
            culprit_host=culprit_hosts[0] if len(culprit_hosts) == 1 and not unplaced else None,
            culprit_ranks=culprits,
            collective=named.collective,
            still_s=still_s,
            per_host=tuple(sorted(per_host)),
            evidence=tuple(_SOURCE.get(x, x) for x in named.sources),
        )
    if mismatch is not None:
        seq, text = mismatch
        message = f"{head}; collectives differ across hosts at #{seq}: {text}"
        return verdict(
            state,
            message,
            collective=f"#{seq}",
            still_s=still_s,
            per_host=tuple(
                (name, f"its {_ranks_text(ranks)} made one side of #{seq}") for name, ranks in sorted(by_host.items())
            ),
            evidence=("flight records",),
        )
    # Every reported rank waits (or stands still), and nothing names the one they wait for: it is none of them.
    collective = _collective([r for _, r in waiting])
    per_host = [
        (
            name,
            f"its {_ranks_text(ranks)} all wait{' in ' + collective if collective else ''}: the rank they wait for is "
            "on another node",
        )
        for name, ranks in sorted(by_host.items())
    ]
    if missing:
        message = (
            f"{head}; every reported rank waits{' in ' + collective if collective else ''}: the rank they wait for is "
            f"among {_ranks_text(missing)}, which no host reports (their node's rlwatch does not answer: look there)"
        )
    else:
        message = (
            f"{head}; every rank waits{' in ' + collective if collective else ''} and none is named behind: NCCL "
            "itself, the network or a GPU (read each node's NCCL RAS status and kernel log)"
        )
    return verdict(
        state, message, collective=collective, still_s=still_s, per_host=tuple(per_host), evidence=("stacks",)
    )


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _states(said: Sequence[tuple[str, str]]) -> str:
    """ "node-a hung, node-b unknown"; one word when every host says the same."""
    words = {state for _, state in said}
    if len(words) == 1 and len(said) > 1:
        return f"every host {next(iter(words))}"
    return ", ".join(f"{name} {state}" for name, state in said)


def join_jobs(hosts: Iterable[FleetHost]) -> tuple[JobVerdict, ...]:
    """One verdict per distributed job the fleet's (fresh) hosts report, the hung first."""
    by_job: dict[str, list[FleetHost]] = defaultdict(list)
    for h in hosts:
        if h.run_job and h.has_data and not h.stale:
            by_job[h.run_job].append(h)
    verdicts = [_one(job, members) for job, members in by_job.items()]
    return tuple(sorted(verdicts, key=lambda v: (JOB_STATES.index(v.state), v.job)))
