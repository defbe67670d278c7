"""The run's processes, recognised by explicit rules and followed across restarts.

Each rule (a command-line regex, a pidfile, or both) describes one role. A role's processes get stable names —
``trainer`` for a single one, ``worker-0``, ``worker-1`` … for several — held by *slots*: when a process dies and
another matching the same rule appears, it takes the free slot of the dead one, so the name, the RSS graph and the
restart count carry on. Identities are ``(pid, create_time)`` so a reused pid is never mistaken for the old process.

Only the top-most match of a rule in a process tree is reported: torchrun's ranks repeat its command line, and
listing each of them as another trainer would be noise. Matches that are siblings (a pool's workers) are each
reported.

The command line, working directory and environment a slot's process had when it was first seen are kept as a
:class:`LaunchRecord`, so a process can be started again exactly as it was without any configuration.
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rlwatch.common import forecast
from rlwatch.common.clock import Clock
from rlwatch.common.patterns import Pattern, compile_pattern
from rlwatch.common.state import ProcessInfo, Series
from rlwatch.common.trust import open_read
from rlwatch.config.models import ProcessRule
from rlwatch.sources import procfs

GROWTH_WINDOW_S = 600.0
GROWTH_MIN_SPAN_S = 60.0


@dataclass(frozen=True, slots=True)
class LaunchRecord:
    """How a named process was started, as seen the first time it was alive."""

    argv: tuple[str, ...]
    cwd: str | None
    env: dict[str, str] | None  # None when /proc/<pid>/environ was not readable
    first_seen: float  # wall time
    pid: int
    create_time: float
    # The named process of the run it was started under (the nearest such ancestor when first seen): AReaL's
    # launcher starts the inference server, so a resume that runs the launcher again brings a server of its own.
    # None when it had no such ancestor, or when that was not seen.
    started_by: str | None = None
    # The one user the process ran as (procfs.owner); None when it was mixed or unread, or the record is older than
    # this field. rlwatch executes a record only when this is the user running it: anyone else's command line and
    # environment (a PYTHONPATH of theirs) would run with this user's rights.
    uid: int | None = None
    # Where its output went when first seen (/proc/PID/fd/1 and /2, regular files only): a process rlwatch starts
    # again appends there, so the log the person reads (and the views follow) goes on. None: a terminal, a pipe.
    stdout: str | None = None
    stderr: str | None = None


@dataclass(slots=True)
class _Slot:
    role: str
    rule_index: int
    index: int
    pid: int
    create_time: float
    cmdline: tuple[str, ...]
    cwd: str | None
    user: str | None
    launch: LaunchRecord
    alive: bool = True
    restarts: int = 0
    gone_at: float | None = None  # monotonic
    rss: int | None = None
    # (monotonic, wall, rss, create_time): create_time ties a sample to one identity for the growth rate.
    samples: deque[tuple[float, float, int | None, float]] = field(default_factory=deque)


@dataclass(slots=True)
class _Run:
    start: float
    end: float | None = None  # wall time it was first seen gone


@dataclass(frozen=True, slots=True)
class _Seen:
    """One process as read from /proc during a single scan."""

    pid: int
    create_time: float
    cmdline: tuple[str, ...]


def _read_pidfile(path: Path) -> int | None:
    try:  # a FIFO at its name would block the read for ever; a planted link is not followed
        with open_read(path) as fh:
            text = fh.read(4096).decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return None
    pid = procfs.parse_count(text.split()[0]) if text.split() else None
    return pid if pid else None


_NOTHING = re.compile(r"[^\s\S]")  # matches no command line


def _rule_regex(pattern: str, bounded: bool) -> Pattern:
    """A rule's expression; one RE2 cannot run (dropped where the file was loaded) matches nothing, never all."""
    try:
        return compile_pattern(pattern, bounded=bounded)
    except ValueError:
        return _NOTHING


class ProcessTable:
    """Samples the processes the rules select; keeps names, restarts, RSS history and launch records."""

    def __init__(
        self,
        rules: Sequence[ProcessRule],
        clock: Clock,
        *,
        proc_root: str = "/proc",
        base_dir: str | Path | None = None,
        history: int = 600,
        dead_keep_s: float = 600.0,
        max_starts: int = 50,
        bounded: bool = False,
    ) -> None:
        self._rules = list(rules)
        # bounded: the rules are an untrusted file's, whose expressions RE2 runs (rlwatch.common.patterns): another
        # user's command line, megabytes long, never keeps the sampler busy for ever.
        self._regexes = [_rule_regex(r.cmdline_regex, bounded) if r.cmdline_regex else None for r in self._rules]
        self._clock = clock
        self._proc_root = proc_root
        self._base_dir = Path(base_dir) if base_dir is not None else None
        self._history = max(2, history)
        self._dead_keep_s = dead_keep_s
        self._lock = threading.Lock()
        self._slots: dict[str, list[_Slot]] = {}  # by role, in slot-index order
        self._rules_by_role: dict[str, list[int]] = {}
        for i, rule in enumerate(self._rules):
            self._rules_by_role.setdefault(rule.role, []).append(i)
        self._starts: dict[str, deque[float]] = {}
        self._runs: dict[str, deque[_Run]] = {}
        self._max_starts = max_starts
        self._run_pids: set[int] = set()
        self.pidfile_pids: frozenset[int] = frozenset()  # live pids named by a rule's pidfile: explicit evidence
        self.error: str | None = None

    # ------------------------------------------------------------------------------------------------- scanning
    def _scan(self) -> tuple[dict[int, int], dict[int, _Seen], dict[int, int | None]]:
        """One pass over /proc: the parent map, and each process a rule selects (before the top-most filter)."""
        root = self._proc_root
        btime = procfs.boot_time(root)
        parents: dict[int, int] = {}
        starts: dict[int, float] = {}
        for pid in procfs.list_pids(root):
            stat = procfs.read_stat(pid, root)
            if stat is None:
                continue
            parents[pid] = stat.ppid
            if stat.state == "Z":
                continue  # defunct: it ended and waits to be reaped; never a live member of anything
            start = procfs.start_time_from_ticks(stat.starttime_ticks, btime)
            # Kernel threads (the PF_KTHREAD flag) have no command line and can never be a rule's match. By their flag,
            # never by pid 2: in a container's PID namespace pid 2 is often the trainer itself (under tini).
            if start is not None and not stat.flags & 0x00200000:
                starts[pid] = start
        seen: dict[int, _Seen] = {}
        if any(rx is not None for rx in self._regexes):
            for pid, start in starts.items():
                argv = procfs.read_cmdline(pid, root)
                if argv:
                    seen[pid] = _Seen(pid, start, argv)
        pidfile_pids: dict[int, int | None] = {}
        for i, rule in enumerate(self._rules):
            if rule.pidfile:
                path = Path(rule.pidfile)
                if not path.is_absolute() and self._base_dir is not None:
                    path = self._base_dir / path
                listed = pidfile_pids[i] = _read_pidfile(path)
                if listed is not None and listed in starts and listed not in seen:
                    seen[listed] = _Seen(listed, starts[listed], procfs.read_cmdline(listed, root))
        return parents, seen, pidfile_pids

    def _matches(
        self, rule_index: int, parents: dict[int, int], seen: dict[int, _Seen], pidfile_pid: int | None
    ) -> list[_Seen]:
        rule = self._rules[rule_index]
        regex = self._regexes[rule_index]
        candidates: set[int]
        if rule.pidfile:
            candidates = {pidfile_pid} if pidfile_pid is not None and pidfile_pid in seen else set()
        else:
            candidates = set(seen)
        if regex is not None:
            candidates = {pid for pid in candidates if regex.search(" ".join(seen[pid].cmdline))}
        top = [
            pid
            for pid in candidates
            if not any(a in candidates for a in procfs.ancestors(pid, self._proc_root, parents))
        ]
        return sorted((seen[pid] for pid in top), key=lambda s: (s.create_time, s.pid))

    # ------------------------------------------------------------------------------------------------ the slots
    def _free_index(self, role: str, rule_index: int, taken: set[int]) -> int:
        """A role shared by several rules reserves index k for its k-th rule, so names follow the configuration;
        further processes of a rule take the next index after all of those."""
        rules = self._rules_by_role[role]
        if len(rules) < 2:
            return max(taken, default=-1) + 1
        reserved = rules.index(rule_index)
        if reserved not in taken:
            return reserved
        return max(*taken, len(rules) - 1) + 1

    def _new_slot(self, rule_index: int, proc: _Seen, now_wall: float) -> _Slot:
        role = self._rules[rule_index].role
        slots = self._slots.setdefault(role, [])
        index = self._free_index(role, rule_index, {s.index for s in slots})
        cwd = procfs.read_cwd(proc.pid, self._proc_root)
        launch = LaunchRecord(
            argv=proc.cmdline,
            cwd=cwd,
            env=procfs.read_environ(proc.pid, self._proc_root),
            first_seen=now_wall,
            pid=proc.pid,
            create_time=proc.create_time,
            uid=procfs.owner(proc.pid, self._proc_root),
            stdout=procfs.output_file(proc.pid, 1, self._proc_root),
            stderr=procfs.output_file(proc.pid, 2, self._proc_root),
        )
        slot = _Slot(
            role=role,
            rule_index=rule_index,
            index=index,
            pid=proc.pid,
            create_time=proc.create_time,
            cmdline=proc.cmdline,
            cwd=cwd,
            user=procfs.user(proc.pid, self._proc_root),
            launch=launch,
            samples=deque(maxlen=self._history),
        )
        slots.append(slot)
        slots.sort(key=lambda s: s.index)
        return slot

    def _name(self, slot: _Slot) -> str:
        if len(self._rules_by_role.get(slot.role, ())) < 2 and len(self._slots.get(slot.role, ())) < 2:
            return slot.role
        return f"{slot.role}-{slot.index}"

    def _note_start(self, role: str, create_time: float) -> None:
        starts = self._starts.setdefault(role, deque(maxlen=self._max_starts))
        if create_time not in starts:
            starts.append(create_time)
        self._runs.setdefault(role, deque(maxlen=self._max_starts)).append(_Run(create_time))

    def _note_end(self, role: str, create_time: float, now_wall: float) -> None:
        for run in reversed(self._runs.get(role, ())):
            if run.start == create_time and run.end is None:
                run.end = now_wall
                return

    def sample(self) -> tuple[ProcessInfo, ...]:
        """Read /proc once; return every live match and, for a while, the ones seen before and now gone."""
        now_mono, now_wall = self._clock.monotonic(), self._clock.time()
        parents, seen, pidfile_pids = self._scan()
        with self._lock:
            self.pidfile_pids = frozenset(pid for pid in pidfile_pids.values() if pid is not None and pid in parents)
            self.error = None if parents else f"cannot read processes under {self._proc_root}"
            live_ids: set[tuple[int, float]] = set()
            for rule_index in range(len(self._rules)):
                matches = self._matches(rule_index, parents, seen, pidfile_pids.get(rule_index))
                self._assign(rule_index, matches, now_wall, live_ids)
            for slots in self._slots.values():
                for slot in slots:
                    if (slot.pid, slot.create_time) in live_ids:
                        slot.rss = procfs.read_rss(slot.pid, self._proc_root)
                        slot.samples.append((now_mono, now_wall, slot.rss, slot.create_time))
                    elif slot.alive:
                        slot.alive = False
                        slot.gone_at = now_mono
                        slot.rss = None
                        self._note_end(slot.role, slot.create_time, now_wall)
            self._note_parents(parents, live_ids, now_wall)
            children = procfs.children_map(parents=parents)
            self._run_pids = procfs.descendants([pid for pid, _ in live_ids], children)
            return tuple(self._info(slot) for slot in self._visible(now_mono))

    def _note_parents(self, parents: dict[int, int], live_ids: set[tuple[int, float]], now_wall: float) -> None:
        """For each process first seen in this pass, which named process of the run it was started under."""
        live = {
            slot.pid: slot
            for slots in self._slots.values()
            for slot in slots
            if (slot.pid, slot.create_time) in live_ids
        }
        for slot in live.values():
            launch = slot.launch
            if launch.first_seen != now_wall or launch.pid != slot.pid:
                continue  # not first seen in this pass: its record was settled then
            for pid in procfs.ancestors(slot.pid, self._proc_root, parents):
                parent = live.get(pid)
                # Older than its child, or a recycled pid that only looks like the parent.
                if parent is not None and parent is not slot and parent.create_time <= slot.create_time:
                    slot.launch = replace(launch, started_by=self._name(parent))
                    break

    def _assign(self, rule_index: int, procs: list[_Seen], now_wall: float, live_ids: set[tuple[int, float]]) -> None:
        role = self._rules[rule_index].role
        slots = [s for s in self._slots.get(role, []) if s.rule_index == rule_index]
        by_id = {(s.pid, s.create_time): s for s in slots}
        current = {(p.pid, p.create_time) for p in procs}
        for proc in procs:
            ident = (proc.pid, proc.create_time)
            live_ids.add(ident)
            if ident in by_id:
                by_id[ident].cmdline = proc.cmdline or by_id[ident].cmdline
                continue
            free = [s for s in slots if (s.pid, s.create_time) not in current]
            self._note_start(role, proc.create_time)
            if free:
                slot = min(free, key=lambda s: s.index)
                self._reuse(slot, proc)
            else:
                slot = self._new_slot(rule_index, proc, now_wall)
                slots.append(slot)
            by_id[ident] = slot

    def _reuse(self, slot: _Slot, proc: _Seen) -> None:
        if slot.alive:
            # The old process vanished and its replacement appeared within one sampling interval.
            self._note_end(slot.role, slot.create_time, self._clock.time())
        slot.pid, slot.create_time, slot.cmdline = proc.pid, proc.create_time, proc.cmdline
        slot.cwd = procfs.read_cwd(proc.pid, self._proc_root)
        owner = procfs.owner(proc.pid, self._proc_root)
        if owner != slot.launch.uid:  # another user's process held the slot first: its record is no launch of ours
            slot.launch = LaunchRecord(
                argv=proc.cmdline,
                cwd=slot.cwd,
                env=procfs.read_environ(proc.pid, self._proc_root),
                first_seen=self._clock.time(),
                pid=proc.pid,
                create_time=proc.create_time,
                uid=owner,
            )
        slot.user = procfs.user(proc.pid, self._proc_root)
        slot.alive, slot.gone_at, slot.rss = True, None, None
        slot.restarts += 1

    def _visible(self, now_mono: float) -> list[_Slot]:
        out = []
        for role in self._rules_by_role:
            for slot in self._slots.get(role, []):
                if slot.alive or (slot.gone_at is not None and now_mono - slot.gone_at <= self._dead_keep_s):
                    out.append(slot)
        return out

    def _info(self, slot: _Slot) -> ProcessInfo:
        growth = None
        if slot.alive:
            points = [(m, float(r)) for m, _, r, ct in slot.samples if ct == slot.create_time and r is not None]
            growth = forecast.growth_per_hour(points, window_s=GROWTH_WINDOW_S, min_span_s=GROWTH_MIN_SPAN_S)
        return ProcessInfo(
            pid=slot.pid,
            create_time=slot.create_time,
            role=slot.role,
            name=self._name(slot),
            rss_bytes=slot.rss if slot.alive else None,
            rss_growth_bytes_per_hour=growth,
            started_at=slot.create_time,
            restarts=slot.restarts,
            cmdline=slot.cmdline,
            cwd=slot.cwd,
            user=slot.user,
            alive=slot.alive,
        )

    def _slot_named(self, name: str) -> _Slot | None:
        for slots in self._slots.values():
            for slot in slots:
                if self._name(slot) == name:
                    return slot
        return None

    # ------------------------------------------------------------------------------------------------ questions
    def history(self) -> dict[str, Series]:
        """RSS in bytes by process name, oldest first (across restarts: a restart shows as a drop)."""
        with self._lock:
            out = {}
            for slots in self._slots.values():
                for slot in slots:
                    out[self._name(slot)] = Series(
                        tuple(wall for _, wall, _, _ in slot.samples),
                        tuple(None if rss is None else float(rss) for _, _, rss, _ in slot.samples),
                    )
            return out

    def launch_record(self, name: str) -> LaunchRecord | None:
        """How the process called ``name`` was started the first time rlwatch saw it."""
        with self._lock:
            slot = self._slot_named(name)
            return slot.launch if slot else None

    def rule_for(self, name: str) -> ProcessRule | None:
        """The rule that selected ``name`` (for its configured ``command``, ``cwd`` and ``log``)."""
        with self._lock:
            slot = self._slot_named(name)
            return self._rules[slot.rule_index] if slot else None

    def run_pids(self) -> set[int]:
        """Every live matched process and all of its descendants: the live run's process tree."""
        with self._lock:
            return set(self._run_pids)

    def missing_expected(self) -> list[str]:
        """Roles marked ``expected`` with no live process (the watchdog that silently died)."""
        with self._lock:
            missing: list[str] = []
            for i, rule in enumerate(self._rules):
                if not rule.expected or rule.role in missing:
                    continue
                if not any(s.alive and s.rule_index == i for s in self._slots.get(rule.role, [])):
                    missing.append(rule.role)
            return missing

    def dead(self, name: str) -> ProcessInfo | None:
        """The last known state of ``name`` if it was seen alive before and is gone now."""
        with self._lock:
            slot = self._slot_named(name)
            return self._info(slot) if slot is not None and not slot.alive else None

    def start_times(self, role: str) -> list[float]:
        """When each process of ``role`` seen by rlwatch started (epoch seconds, oldest first)."""
        with self._lock:
            return list(self._starts.get(role, ()))

    def runs(self, role: str) -> list[tuple[float, float | None]]:
        """(started, seen gone) for each recent process of ``role``; ``None`` while it still runs."""
        with self._lock:
            return [(run.start, run.end) for run in self._runs.get(role, ())]


MEMBER_ROLE = "run"  # a process of the live run that no role rule names (a custom `python3 train.py`)


def program_label(argv: tuple[str, ...]) -> str:
    """What a person calls a process: the script or module a Python runs (``train.py``, ``verl.trainer.main_ppo``,
    ``torchrun``), else the program."""
    prog = os.path.basename(argv[0])
    if prog.startswith("python"):
        rest = list(argv[1:])
        for i, word in enumerate(rest):
            if word == "-m" and i + 1 < len(rest):
                return rest[i + 1]
            if word == "-c":
                return f"{prog} -c"
            if not word.startswith("-"):
                return os.path.basename(word)
    return prog


def member_info(pid: int, evidence: str, proc_root: str = procfs.PROC) -> ProcessInfo | None:
    """A live-run member that no role rule selected, as a row of the processes table; None once it is gone."""
    stat = procfs.read_stat(pid, proc_root)
    if stat is None:
        return None
    started = procfs.start_time_from_ticks(stat.starttime_ticks, procfs.boot_time(proc_root))
    if started is None:
        return None
    cmdline = procfs.read_cmdline(pid, proc_root)
    label = program_label(cmdline) if cmdline else (procfs.comm(pid, proc_root) or "?")
    return ProcessInfo(
        pid=pid,
        create_time=started,
        role=MEMBER_ROLE,
        name=f"{label} {pid}",
        rss_bytes=procfs.read_rss(pid, proc_root),
        rss_growth_bytes_per_hour=None,
        started_at=started,
        restarts=0,
        cmdline=cmdline,
        cwd=procfs.read_cwd(pid, proc_root),
        user=procfs.user(pid, proc_root),
        evidence=evidence,
        alive=stat.state != "Z",  # defunct: it ended and waits for its parent to reap it
    )
