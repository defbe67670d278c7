"""Policies: conditions over the latest snapshot that call for an action, and on which target.

A policy (``policies:`` in the config) names conditions — over events (a streak, or a count within a window, in one
log file), memory (a process over its limit, above a size, growing fast; the host's available RAM) and process
state (server down, a role dead, training stalled) — that must all hold, for ``for_s`` seconds, before its actions
run. This module only decides; :mod:`rlwatch.remedy.watchdog` runs the actions and :mod:`rlwatch.remedy.budget`
bounds them.

Targets. "Brake streak ≥ 10 → restart *that* worker" needs per-file evidence tied to a process: a policy whose
actions restart workers is evaluated per worker, a log file counting as a worker's when its rule's ``log`` names it
or the worker holds it open. Any other policy has one target, the host: its event condition holds when any file
satisfies it. When a worker policy's evidence is in a file no worker is known to write, it falls back to all
workers, because that is still the remedy.

Stale evidence. After an action on a target, what led to it must not fire again: event counts in the target's files
at action time become the baseline (a streak counts only occurrences since), processes that were acted on are
ignored by memory conditions until they are replaced, and ``for_s`` starts over. Windowed counts count what arrived
while the watchdog watched, never the backlog it found at start.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rlwatch.common.clock import Clock
from rlwatch.common.state import ProcessInfo, Snapshot
from rlwatch.config.models import Policy, PolicyWhen
from rlwatch.engine.diagnosis import human_bytes

RESTART_WORKERS = "restart-workers"
HOST = "host"
ALL_WORKERS = "workers"

Ident = tuple[int, float]


@dataclass(frozen=True, slots=True)
class Evidence:
    """What policies are evaluated on: a snapshot plus the per-file facts it does not carry."""

    snapshot: Snapshot
    streaks: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # kind -> log path -> current streak
    owners: Mapping[str, str] = field(default_factory=dict)  # log path -> name of the process writing it
    limits: Mapping[str, int] = field(default_factory=dict)  # process name -> configured memory limit


@dataclass(frozen=True, slots=True)
class Firing:
    """A policy whose condition holds (long enough) for one target: the watchdog should act, budget permitting."""

    policy: str
    key: str  # the restart budget's key: "restart-workers:worker-1", "restart-server+resume"
    target: str  # a process name, "workers" (all of them) or "host"
    actions: tuple[str, ...]
    only: tuple[str, ...] | None  # process names restart-workers is limited to
    reason: str  # in words: what holds
    files: tuple[str, ...] = ()  # log files whose evidence counted
    idents: tuple[Ident, ...] = ()  # processes whose state counted


def budget_key(actions: Sequence[str], target: str) -> str:
    base = "+".join(actions)
    return base if target == HOST else f"{base}:{target}"


def needs_server(policy: Policy) -> bool:
    """A policy about the inference server: it waits for the server to be down, or restarts it."""
    return policy.when.server_down or "restart-server" in policy.actions


def armed(policies: Sequence[Policy], server_expected: bool, why: str) -> tuple[list[Policy], list[tuple[str, str]]]:
    """The policies the watchdog applies, and those it leaves unarmed with the reason.

    A server policy is armed only where a server is expected: armed for a run that has none (TRL's colocated
    generation) it could only ever "restart" a server that never existed, and resume a run that finished.
    """
    keep: list[Policy] = []
    skipped: list[tuple[str, str]] = []
    for policy in policies:
        if needs_server(policy) and not server_expected:
            skipped.append((policy.name, f"no inference server is expected for this run ({why})"))
        else:
            keep.append(policy)
    return keep, skipped


def used_kinds(policies: Iterable[Policy]) -> set[str]:
    return {p.when.event for p in policies if p.when.event}


class _Window:
    """(monotonic time, cumulative count) samples of one kind in one file, for "N within window_s"."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, count: int, keep_s: float) -> None:
        if not self.samples or self.samples[-1][1] != count:
            self.samples.append((now, count))
        # Keep one sample at or before the window's start: it is the count the window is measured from.
        while len(self.samples) >= 2 and self.samples[1][0] <= now - keep_s:
            self.samples.popleft()

    def since(self, start: float) -> int:
        """The count at ``start`` (the first sample seen when nothing is older: the backlog does not count)."""
        at = self.samples[0][1]
        for t, n in self.samples:
            if t > start:
                break
            at = n
        return at


@dataclass(slots=True)
class _Hit:
    target: str
    only: tuple[str, ...] | None
    why: list[str]
    files: list[str] = field(default_factory=list)
    idents: list[Ident] = field(default_factory=list)


class PolicyEngine:
    def __init__(self, policies: Sequence[Policy], clock: Clock) -> None:
        self.policies = [p for p in policies if p.enabled]
        self.clock = clock
        self._kinds = used_kinds(self.policies)
        self._windows: dict[tuple[str, str], _Window] = {}
        self._keep_s = max((p.when.window_s or 0.0 for p in self.policies), default=0.0)
        self._base: dict[tuple[str, str], int] = {}  # (kind, path) -> count when an action was taken
        self._acted: set[Ident] = set()  # processes acted on: their old state is no evidence
        self._since: dict[tuple[str, str], float] = {}  # (policy, target) -> when its condition began to hold

    # ------------------------------------------------------------------------------------------------ evaluation
    def evaluate(self, ev: Evidence) -> list[Firing]:
        """The policies whose conditions hold now and have held for their ``for_s``, one firing per target."""
        now = self.clock.monotonic()
        self._observe(ev.snapshot, now)
        firings: list[Firing] = []
        holding: set[tuple[str, str]] = set()
        for policy in self.policies:
            for hit in self._hits(policy, ev, now):
                slot = (policy.name, hit.target)
                holding.add(slot)
                began = self._since.setdefault(slot, now)
                if now - began < policy.when.for_s:
                    continue
                held = f" for {now - began:.0f}s" if policy.when.for_s else ""
                firings.append(
                    Firing(
                        policy=policy.name,
                        key=budget_key(policy.actions, hit.target),
                        target=hit.target,
                        actions=tuple(policy.actions),
                        only=hit.only,
                        reason="; ".join(hit.why) + held,
                        files=tuple(hit.files),
                        idents=tuple(hit.idents),
                    )
                )
        for slot in set(self._since) - holding:
            del self._since[slot]
        return firings

    def _observe(self, s: Snapshot, now: float) -> None:
        self._acted &= {(p.pid, p.create_time) for p in s.processes if p.alive}
        if not self._keep_s:
            return
        for kind in self._kinds:
            ev = s.events.get(kind)
            for path, n in (ev.files if ev else {}).items():
                self._windows.setdefault((kind, path), _Window()).add(now, n, self._keep_s)

    def _hits(self, policy: Policy, ev: Evidence, now: float) -> list[_Hit]:
        w = policy.when
        host_why = self._host_conditions(w, ev.snapshot)
        if host_why is None:
            return []
        per_worker = RESTART_WORKERS in policy.actions
        if not per_worker:
            return self._host_hit(w, ev, now, host_why)
        role = w.role or "worker"
        hits = []
        claimed: set[str] = set()
        for p in ev.snapshot.processes:
            if not p.alive or p.role != role:
                continue
            files = [path for path, owner in ev.owners.items() if owner == p.name]
            claimed.update(files)
            hit = self._process_hit(w, ev, p, files, now)
            if hit is not None:
                hit.why[:0] = host_why
                hits.append(hit)
        if w.event and not _has_process_conditions(w):
            unowned = [path for path in self._event_files(w, ev) if path not in claimed and path not in ev.owners]
            matched = [(path, r) for path in unowned if (r := self._event_holds(w, ev, path, now))]
            if matched:
                path, r = matched[0]
                why = [*host_why, f"{r} (no worker is known to write {path}: acting on all workers)"]
                hits.append(_Hit(ALL_WORKERS, None, why, [path for path, _ in matched]))
        return hits

    def _host_hit(self, w: PolicyWhen, ev: Evidence, now: float, why: list[str]) -> list[_Hit]:
        hit = _Hit(HOST, None, list(why))
        if w.event:
            matched = [(path, r) for path in self._event_files(w, ev) if (r := self._event_holds(w, ev, path, now))]
            if not matched:
                return []
            hit.why.append(matched[0][1])
            hit.files = [path for path, _ in matched]
        if _has_process_conditions(w):
            procs = [
                (p, r)
                for p in ev.snapshot.processes
                if p.alive and (w.role is None or p.role == w.role) and (r := self._memory_holds(w, ev, p))
            ]
            if not procs:
                return []
            hit.why.append(procs[0][1])
            hit.idents = [(p.pid, p.create_time) for p, _ in procs]
        return [hit]

    def _process_hit(self, w: PolicyWhen, ev: Evidence, p: ProcessInfo, files: list[str], now: float) -> _Hit | None:
        hit = _Hit(p.name, (p.name,), [], idents=[(p.pid, p.create_time)])
        if w.event:
            matched = [(path, r) for path in files if (r := self._event_holds(w, ev, path, now))]
            if not matched:
                return None
            hit.why.append(matched[0][1])
            hit.files = [path for path, _ in matched]
        if _has_process_conditions(w):
            why = self._memory_holds(w, ev, p)
            if why is None:
                return None
            hit.why.append(why)
        return hit

    # -------------------------------------------------------------------------------------------- conditions
    @staticmethod
    def _event_files(w: PolicyWhen, ev: Evidence) -> list[str]:
        summary = ev.snapshot.events.get(w.event or "")
        return sorted(summary.files) if summary else []

    def _event_holds(self, w: PolicyWhen, ev: Evidence, path: str, now: float) -> str | None:
        kind = w.event or ""
        summary = ev.snapshot.events.get(kind)
        count = summary.files.get(path, 0) if summary else 0
        base = self._base.get((kind, path))
        since_action = count - base if base is not None else None
        name = path.rsplit("/", 1)[-1]
        if w.streak is not None:
            streak = ev.streaks.get(kind, {}).get(path, 0)
            if since_action is not None:
                streak = min(streak, max(0, since_action))
            if streak < w.streak:
                return None
            return f"{kind} {streak} times in a row in {name}"
        if w.count is not None and w.window_s is not None:
            window = self._windows.get((kind, path))
            if window is None:
                return None
            start = window.since(now - w.window_s)
            if base is not None:
                start = max(start, base)
            n = count - start
            if n < w.count:
                return None
            return f"{kind} {n} times in {w.window_s:g}s in {name}"
        return None

    def _memory_holds(self, w: PolicyWhen, ev: Evidence, p: ProcessInfo) -> str | None:
        if (p.pid, p.create_time) in self._acted:
            return None
        why = []
        rss = p.rss_bytes
        if w.over_memory_limit:
            limit = ev.limits.get(p.name)
            if limit is None or rss is None or rss <= limit:
                return None
            why.append(f"{p.name} uses {human_bytes(rss)}, over its {human_bytes(limit)} limit")
        if w.rss_above_bytes is not None:
            if rss is None or rss <= w.rss_above_bytes:
                return None
            why.append(f"{p.name} uses {human_bytes(rss)} (> {human_bytes(w.rss_above_bytes)})")
        if w.growth_above_bytes_per_hour is not None:
            growth = p.rss_growth_bytes_per_hour
            if growth is None or growth <= w.growth_above_bytes_per_hour:
                return None
            why.append(f"{p.name} grows {human_bytes(growth)}/h")
        return "; ".join(why) or None

    @staticmethod
    def _host_conditions(w: PolicyWhen, s: Snapshot) -> list[str] | None:
        """The host-wide conditions in words, or None when one of them does not hold."""
        why = []
        if w.server_down:
            if s.server is None or s.server.up is not False or not s.server.expected:
                return None
            if s.training is not None and s.training.finished:
                return None  # a finished run needs no server: restarting one (and resuming) would start it again
            why.append(f"inference server down ({s.server.error or 'no answer'})")
        if w.available_below_bytes is not None:
            avail = s.memory.available_bytes if s.memory else None
            if avail is None or avail >= w.available_below_bytes:
                return None
            why.append(f"{human_bytes(avail)} of RAM available (< {human_bytes(w.available_below_bytes)})")
        if w.dead is not None:
            of_role = [p for p in s.processes if p.role == w.dead]
            finished = s.training is not None and s.training.finished
            if not of_role or any(p.alive for p in of_role) or finished:
                return None
            why.append(f"the {w.dead} is dead")
        if w.stalled:
            if s.training is None or not s.training.stalled:
                return None
            why.append(f"training stalled at step {s.training.last_step}")
        return why

    # ----------------------------------------------------------------------------------------------- actions
    def acting(self, firing: Firing, ev: Evidence) -> None:
        """An action starts for ``firing``: everything that led to it is now history.

        A process that is replaced takes all its evidence with it (every kind, in its files); a host-wide action
        makes history only of the evidence its own policy counted.
        """
        s = ev.snapshot
        kinds = self._kinds
        scope: set[str] | None = None
        if firing.target == HOST:
            policy = next((p for p in self.policies if p.name == firing.policy), None)
            kinds = {policy.when.event} if policy and policy.when.event else set()
        elif firing.target != ALL_WORKERS:
            scope = {path for path, owner in ev.owners.items() if owner == firing.target} | set(firing.files)
        for kind in kinds:
            summary = s.events.get(kind)
            for path, n in (summary.files if summary else {}).items():
                if scope is None or path in scope:
                    self._base[(kind, path)] = n
        self._acted.update(firing.idents)
        if firing.target == ALL_WORKERS:
            self._acted.update((p.pid, p.create_time) for p in s.processes if p.alive and p.role == "worker")
        self._forget(firing.target)

    def done(self, firing: Firing) -> None:
        """The action finished: its condition must hold for ``for_s`` again before it fires again."""
        self._forget(firing.target)

    def _forget(self, target: str) -> None:
        for slot in [slot for slot in self._since if slot[1] == target]:
            del self._since[slot]


def _has_process_conditions(w: PolicyWhen) -> bool:
    return w.over_memory_limit or w.rss_above_bytes is not None or w.growth_above_bytes_per_hour is not None
