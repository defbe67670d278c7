"""Which processes are the live run — from evidence a person can check — and what every other GPU holder is.

A command-line pattern names a role; it does not make a process part of *this* run (the same ``python -m sglang``
may serve another job, and a custom ``python3 train.py`` matches no pattern at all). rlwatch counts a process as the
run's only with evidence it can show:

- it **writes** a file under the run directory (its log, a checkpoint),
- it was **started by rlwatch** (a recorded launch),
- it matches a configured **role** and touches the run directory (or its rule names it by pidfile),
- it **works in** the run directory (its cwd), or holds a file under it open for reading,

and its descendants and the launchers above it come with it (not the shell or the login session it was started
from: everything else the person runs there shares that session). The first three are *core* evidence: they mark the
live run and when it began. Working in the directory or reading a file there is weaker, because a leftover of an
earlier attempt of the same run does exactly that.

Every GPU holder outside the live run is *unknown* unless rlwatch has positive reasons to call it a stray:

- it is **orphaned** (the session that started it is gone and it was re-parented to init) **and started before
  the live run** — a leftover of an earlier attempt (incident 4), whether or not it still works in the run
  directory;
- it **started before this container's init** — left from an earlier container start.

"The live run" here is its oldest process with core evidence; when none is alive, the latest attempt: the newest
start of its trainer or launcher that rlwatch saw or launched, or, for a run with a launcher (AReaL), the earliest
timestamped line of its logs — the launcher writes first, and everything it starts comes after.

Unknown holders are shown with why, and no key, policy or ``kill-zombies`` run touches them unless a person names
the pid. When no process shows any evidence of being the run, the live run cannot be told, and nothing is a stray
on the strength of "not the run".
"""

from __future__ import annotations

import itertools
import os
import pwd
import stat
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from rlwatch.common.textsafe import strip_ansi
from rlwatch.logs.timestamps import parse_time
from rlwatch.sources import procfs

RUN = "run"
STRAY = "stray"
UNKNOWN = "unknown"

# A process re-parented to one of these has lost the process that started it (a user's systemd manager is a
# subreaper, like init).
_REAPERS = frozenset({"systemd", "init", "tini", "dumb-init", "docker-init", "catatonit"})
# pid 1 started this long after boot: it is a container's init, and its start is the container's start.
_CONTAINER_AFTER_BOOT_S = 120.0
_MAX_FDS_LOOKED_AT = 512
_NOT_WORK = ("/dev/", "/proc/", "/sys/", "/run/", "/var/run/")  # devices, sockets, locks: no sign of work
_HEAD_LINES = 200  # a log's first timestamp is within its first lines (a banner, then the first record), or absent


@dataclass(frozen=True, slots=True)
class ProcRow:
    """One process as read from /proc for the membership pass."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    create_time: float
    comm: str
    cwd: str | None
    state: str = "S"  # "Z": exited, waiting to be reaped — gone for every purpose here
    uid: int | None = None  # the one user it runs as (procfs.owner); None: mixed or unreadable


@dataclass(frozen=True, slots=True)
class MembershipVerdict:
    status: str  # RUN | STRAY | UNKNOWN
    why: str  # the evidence, in words a person can check


@dataclass(frozen=True, slots=True)
class OpenFile:
    path: str
    writable: bool | None  # None: the descriptor's flags could not be read


def _minutes(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 10:  # a leftover restarted seconds before the attempt: "0s before" would read as "not before"
        return f"{seconds:.1f}s"
    if seconds < 90:
        return f"{round(seconds)}s"
    if seconds < 2 * 3600:
        return f"{round(seconds / 60)}m"
    return f"{seconds / 3600:.1f}h"


def _under(path: str | None, root: str) -> bool:
    if not path or path.endswith(" (deleted)"):
        return False
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True, slots=True)
class Launch:
    """One attempt: the processes of one launch — a launcher and its descendants, or the ranks a lost launcher left.

    A launch whose launcher is gone and whose processes were re-parented (to init or a subreaper) is *orphaned*,
    whatever it still writes: a resume or restart cannot rely on it, and beside a newer launch in the same
    directory it is an earlier attempt, not the live run."""

    pids: tuple[int, ...]
    group: int  # the process group the launch made (its launcher's pid where the launcher led it)
    launcher: int | None  # the launcher's pid: alive (the top of the tree) or gone (the group's leader); None: unknown
    launcher_alive: bool
    orphaned: str | None  # why it lost its launcher, in words; None while its launcher answers for it
    started_at: float
    current: bool  # the live run (the newest launch that still has its launcher, else the newest)
    launcher_name: str | None = None  # what the launcher was, where known otherwise than by its pid ("torchrun")


@dataclass(frozen=True)
class RunView:
    """The live run as found on the host at one moment, and the means to judge any other process against it."""

    run_dir: str
    procs: Mapping[int, ProcRow]
    members: Mapping[int, str]  # pid → how it was recognised as the run's
    core: Mapping[int, str]  # the members with core evidence (directly, not through a relative)
    weak: frozenset[int]  # members only through working in / reading the run directory
    roles: Mapping[int, str]  # pid → role name, for live processes a role rule selected
    container_started_at: float | None
    searched: str  # what was looked for, said when nothing was found
    proc_root: str = procfs.PROC
    # (what shows it, when) the latest attempt of the run began, alive or gone: the newest start of its trainer or
    # launcher that rlwatch saw or launched, or the earliest line of its logs. When nothing of the run is alive, a
    # leftover is told by being older than that.
    attempt: tuple[str, float] | None = None
    # The run's launches (attempts), the live one marked current; with one launch only, that one, orphaned or not.
    launches: tuple[Launch, ...] = ()
    # pid → its evidence, for the processes of earlier attempts (orphaned launches older than the live one): never
    # members of the live run, never strays on that alone (they may still write), shown apart.
    earlier: Mapping[int, str] = field(default_factory=dict)
    # pid → why an earlier attempt's process is a stray after all (set by the engine, which sees it over time: it
    # stopped writing for the hang window, or the new run failed "busy or unavailable" on a GPU it holds).
    strays: Mapping[int, str] = field(default_factory=dict)
    # The processes of users whose processes may not be the run's (:func:`may_act_on`): never members, and left out
    # of the evidence, so nothing said of the run ("never touched the directory") is said of them either.
    foreign: frozenset[int] = frozenset()
    _cmd: dict[int, str] = field(default_factory=dict, compare=False)

    @property
    def identified(self) -> bool:
        return bool(self.members)

    @property
    def started_at(self) -> float | None:
        """When the live run began: its oldest process with core evidence (else its oldest member)."""
        pool = self.core or self.members
        times = [self.procs[p].create_time for p in pool if p in self.procs]
        return min(times) if times else None

    @property
    def unknown_reason(self) -> str | None:
        return None if self.identified else f"rlwatch cannot tell what the live run is: {self.searched}"

    def _reference(self) -> tuple[float, str] | None:
        """What a leftover must be older than: the live run's start (core evidence), else the latest attempt."""
        if self.core:
            oldest = self._oldest_core()
            start = self.started_at
            if start is not None:
                return start, "the live run" + (f" ({self._describe(oldest)})" if oldest is not None else "")
        if self.attempt is not None:
            shown_by, start = self.attempt
            return start, f"the latest attempt ({shown_by})"
        return None

    def _oldest_core(self) -> int | None:
        pool = [p for p in (self.core or self.members) if p in self.procs]
        return min(pool, key=lambda p: (self.procs[p].create_time, p)) if pool else None

    def _describe(self, pid: int) -> str:
        if pid not in self._cmd:
            argv = procfs.read_cmdline(pid, self.proc_root)
            words = " ".join(argv)[:60] if argv else (self.procs[pid].comm if pid in self.procs else "?")
            self._cmd[pid] = f"pid {pid}: {words}"
        return self._cmd[pid]

    def orphaned(self, pid: int) -> str | None:
        """Why ``pid`` has lost what started it, or None: its session leader is gone and it (or the top of its
        session's chain) was re-parented to init. A session leader that is alive — a daemon, a service, a job
        started with setsid — is never orphaned: something still answers for it."""
        p = self.procs.get(pid)
        leader = self.procs.get(p.sid) if p is not None else None
        if p is None or p.sid <= 0 or (leader is not None and leader.state != "Z"):
            return None
        current: ProcRow | None = p
        seen = 0
        while current is not None and current.sid == p.sid and seen < 4096:
            parent = self.procs.get(current.ppid)
            if current.ppid in (0, 1) or (parent is not None and parent.comm in _REAPERS):
                where = "init" if current.ppid in (0, 1) else f"{parent.comm if parent else '?'} (pid {current.ppid})"
                who = "it" if current.pid == pid else f"pid {current.pid} above it"
                return (
                    f"orphaned: the session that started it (leader pid {p.sid}) is gone "
                    f"and {who} was re-parented to {where}"
                )
            current = parent
            seen += 1
        return None

    def verdict(self, pid: int, create_time: float | None = None) -> MembershipVerdict:
        """Whether ``pid`` is the live run's, a stray (with positive reasons), or unknown — always with why."""
        proc = self.procs.get(pid)
        started = create_time if create_time is not None else (proc.create_time if proc else None)
        if pid in self.foreign:
            uid = proc.uid if proc is not None else None
            who = f"uid {uid}" if uid is not None else "more than one user, or one that cannot be read"
            return MembershipVerdict(
                UNKNOWN, f"runs as {who}, whose processes are never the run's: not judged, never a stray"
            )
        if pid in self.earlier:
            if pid in self.strays:
                return MembershipVerdict(STRAY, self.strays[pid])
            launch = next((x for x in self.launches if pid in x.pids), None)
            lost = f"; {launch.orphaned}" if launch is not None and launch.orphaned else ""
            return MembershipVerdict(
                UNKNOWN,
                f"of an earlier attempt beside the live run: it {_verb(self.earlier[pid])}{lost}; "
                "stopped only when a person names its pid",
            )
        if pid in self.members and pid not in self.weak:
            return MembershipVerdict(RUN, self.members[pid])
        if started is not None and self.container_started_at is not None and started < self.container_started_at - 1:
            return MembershipVerdict(
                STRAY,
                f"left from an earlier container start: started {_minutes(self.container_started_at - started)} "
                "before this container's init (pid 1)",
            )
        orphan = self.orphaned(pid)
        role = self.roles.get(pid)
        against = self._reference()
        if pid in self.weak:
            if against is not None and orphan and role is None and started is not None and started < against[0]:
                elsewhere = self.writes_elsewhere(pid)
                if elsewhere is not None:  # doing work of its own: an experiment run with nohup, not a leftover
                    return MembershipVerdict(RUN, f"{self.members[pid]} and writes {elsewhere}")
                return MembershipVerdict(
                    STRAY,
                    f"a leftover of an earlier attempt: {self.members[pid]} but is not part of the live run; "
                    f"{orphan}; started {_minutes(against[0] - started)} before {against[1]}",
                )
            return MembershipVerdict(RUN, self.members[pid])
        if not self.identified and against is None:
            return MembershipVerdict(UNKNOWN, f"{self.unknown_reason}")
        if role is not None:
            return MembershipVerdict(
                UNKNOWN, f"matches the {role} role but never touched {self.run_dir}: it may serve another job"
            )
        if orphan is None:
            parent = self.procs.get(proc.ppid) if proc else None
            who = f"pid {proc.ppid} ({parent.comm})" if proc and parent else "alive"
            return MembershipVerdict(
                UNKNOWN,
                f"not part of the live run, but not orphaned: its session or parent is alive ({who}); "
                "it may be another job",
            )
        if against is None and self.started_at is not None:
            against = (self.started_at, "the live run")
        if started is None or against is None or started >= against[0]:
            after = f"{_minutes(started - against[0])} after" if started is not None and against else "after"
            return MembershipVerdict(
                UNKNOWN, f"{orphan}, but it started {after} the live run began: it may belong to it"
            )
        elsewhere = self.writes_elsewhere(pid)
        if elsewhere is not None:
            return MembershipVerdict(
                UNKNOWN,
                f"{orphan}, but it writes {elsewhere}: a job of its own, perhaps another experiment",
            )
        return MembershipVerdict(
            STRAY,
            f"{orphan}; never touched {self.run_dir}; started {_minutes(against[0] - started)} before {against[1]}",
        )

    def writes_elsewhere(self, pid: int) -> str | None:
        """A regular file outside the run directory that ``pid`` holds open for writing, or None. An orphan that is
        still writing its own log or checkpoints is doing work — a second experiment started with nohup looks exactly
        like a leftover otherwise — so it is never called a stray on age alone."""
        return _writes_outside(pid, os.path.realpath(self.run_dir), self.proc_root)


def may_act_on(uid: int | None, owners: Collection[int]) -> bool:
    """Whether a process running as ``uid`` may be the run's, and so be recorded, read, stopped or started again:
    only when ``uid`` is one of ``owners`` (:func:`run_owners`). The one rule for every path that asks (the actions'
    guard, the GPU holders, the membership scan): ``allow_other_users`` widens it to the users ``other_users`` names,
    never further. A process whose owner is unknown or mixed (``None``) never may."""
    return uid is not None and uid in owners


def others_words(owners: Collection[int]) -> str:
    """Whose processes are left alone, in words: "other users", or, where a trusted file names some, the rest."""
    mine = os.geteuid()
    listed = sorted(procfs.user_name(uid) or str(uid) for uid in owners if uid != mine)
    return "other users" if not listed else f"other users than {', '.join(listed)} (actions.other_users)"


def run_owners(*, allow_other_users: bool, other_users: Iterable[str | int], trusted: bool) -> frozenset[int]:
    """The users whose processes may be the run's: the user rlwatch runs as — and, under root with
    ``actions.allow_other_users`` in a trusted file, the users that file names (a name this host does not know is
    nobody)."""
    me = os.geteuid()
    out = {me}
    if me == 0 and allow_other_users and trusted:
        for user in other_users:
            if isinstance(user, int) or str(user).isdigit():
                out.add(int(user))
                continue
            try:
                out.add(pwd.getpwnam(str(user)).pw_uid)
            except KeyError:
                pass
    return frozenset(out)


def first_stamp(head: bytes, now: float) -> tuple[int, float] | None:
    """(line number, time) of the first line in ``head`` (a log file's first bytes) that carries a timestamp."""
    for lineno, raw in enumerate(head.splitlines()[:_HEAD_LINES], start=1):
        if b":" in raw:  # every timestamp format holds a colon
            found = parse_time(strip_ansi(raw.decode("utf-8", "replace")), now)
            if found is not None:
                return lineno, found
    return None


def _read_procs(proc_root: str) -> dict[int, ProcRow]:
    btime = procfs.boot_time(proc_root)
    procs: dict[int, ProcRow] = {}
    for pid in procfs.list_pids(proc_root):
        stat = procfs.read_stat(pid, proc_root)
        if stat is None:
            continue
        start = procfs.start_time_from_ticks(stat.starttime_ticks, btime)
        # Kernel threads by their flag (PF_KTHREAD), never by pid 2: in a PID namespace pid 2 may be the trainer.
        if start is None or stat.flags & 0x00200000:
            continue
        cwd = procfs.read_cwd(pid, proc_root)
        owner = procfs.owner(pid, proc_root)
        procs[pid] = ProcRow(pid, stat.ppid, stat.pgrp, stat.session, start, stat.comm, cwd, stat.state, owner)
    return procs


def open_files(
    entries: Mapping[int, Iterable[tuple[int, str]]],
    root: str,
    *,
    proc_root: str = procfs.PROC,
    exclude: Collection[str] = (),
) -> dict[int, list[OpenFile]]:
    """pid → the files under ``root`` it holds open (from its (fd, path) ``entries``), each with whether it was
    opened for writing. Paths under ``exclude`` prove nothing (rlwatch's own state, a stand-in device file)."""
    real = os.path.realpath(root)
    out: dict[int, list[OpenFile]] = {}
    for pid, pairs in entries.items():
        files = [
            OpenFile(path, procfs.fd_writable(pid, fd, proc_root))
            for fd, path in pairs
            if _under(path, real) and not any(_under(path, x) or path.startswith(x) for x in exclude)
        ]
        if files:
            out[pid] = files
    return out


def open_files_under(
    root: str, pids: Iterable[int], *, proc_root: str = procfs.PROC, exclude: Collection[str] = ()
) -> dict[int, list[OpenFile]]:
    """:func:`open_files` for ``pids``, reading their descriptors now."""
    entries = {pid: found for pid in pids if (found := procfs.fd_entries(pid, proc_root))}
    return open_files(entries, root, proc_root=proc_root, exclude=exclude)


def _container_start(procs: Mapping[int, ProcRow], proc_root: str) -> float | None:
    init = procs.get(1)
    btime = procfs.boot_time(proc_root)
    if init is None or btime is None:
        return None
    return init.create_time if init.create_time - btime > _CONTAINER_AFTER_BOOT_S else None


def _rel(path: str, root: str) -> str:
    return path[len(root.rstrip("/")) + 1 :] or "." if _under(path, root) else path


def assess(
    run_dir: str,
    *,
    roles: Mapping[int, str] = {},
    pidfile_pids: Collection[int] = (),
    launched: Collection[tuple[int, float]] = (),
    exclude: Collection[str] = (),
    proc_root: str = procfs.PROC,
    files: Mapping[int, list[OpenFile]] | None = None,
    attempt: tuple[str, float] | None = None,
    observer: int | None = None,
    named: Mapping[int, str] = {},
    owners: Collection[int] | None = None,
    former: Mapping[int, tuple[float, int]] = {},
    rules_named: bool = False,
) -> RunView:
    """Find the live run in ``run_dir``. ``roles`` (pid → role) are the live processes role rules selected;
    ``launched`` the (pid, start time) of processes rlwatch started; ``exclude`` paths under the run directory
    that prove nothing (rlwatch's own ``.rlwatch/``, a stand-in device file); ``files`` an already-made scan of the
    files open under the run directory (:func:`open_files`), read now when absent; ``attempt`` the (role, start) of
    the newest trainer or launcher rlwatch saw; ``former`` pid → (start, parent) of the run's processes as an
    earlier look saw them (a launcher gone since is known by it); ``observer`` rlwatch's own pid (default: this
    process): it and its parents read the run's files and work in its directory, which proves nothing about the
    run; ``named`` processes the run's logs name with evidence (pid → why: a Ray actor whose output the driver's log
    relays), core evidence. ``owners`` the users whose processes may be the run's (default: the user running
    rlwatch): another user's process that works in the directory or matches a role is never a member, so it is never
    recorded, stack-read, executed again or a reason to refuse — it could be anyone's, planted to be taken for the run.
    ``rules_named``: the role rules are trusted (a profile's, discovery's or a person's trusted file), so a process a
    rule selects is the run's where it or its family works with the run directory; an untrusted file's rules need a
    writer in the family.
    """
    root = os.path.realpath(run_dir)
    procs = _read_procs(proc_root)
    me = os.getpid() if observer is None else observer
    watchers = {me, *procfs.ancestors(me, parents={pid: p.ppid for pid, p in procs.items()})}
    allowed = frozenset({os.geteuid()} if owners is None else owners)
    foreign = {pid for pid, p in procs.items() if not may_act_on(p.uid, allowed)}
    searched = (
        f"no process works in {root}, holds a file under it open, was started by rlwatch, or is named by a pidfile"
    )
    if root == "/":
        # Everything works under /: the directory is no evidence. Only launches and pidfile rules count.
        files = {}
        cwd_in: set[int] = set()
    else:
        if files is None:
            files = open_files_under(root, procs, proc_root=proc_root, exclude=exclude)
        cwd_in = {pid for pid, p in procs.items() if _under(p.cwd, root)}
    direct: dict[int, str] = {}
    weak_direct: dict[int, str] = {}
    for pid, fs in files.items():
        if pid not in procs:
            continue
        written = [f.path for f in fs if f.writable]
        if written:
            direct[pid] = f"writes {_rel(written[0], root)}" + (
                f" (+{len(written) - 1} more)" if len(written) > 1 else ""
            )
    starts = {(pid, p.create_time) for pid, p in procs.items()}
    for pid, create_time in launched:
        if (pid, create_time) in starts:
            direct.setdefault(pid, "was started by rlwatch")
    for pid, why in named.items():  # a Ray actor whose output the run's log relays (rlwatch/sources/ray.py)
        if pid in procs:
            direct.setdefault(pid, why)
    parents = {pid: p.ppid for pid, p in procs.items()}
    children = procfs.children_map(parents=parents)
    _add_pipe_writers(direct, procs, proc_root, foreign)
    # A role's pattern names what a process is: a program or a script (discovery makes no rule of a bare `python3`,
    # which would match the REPL and the `python3 -c` reading `rlwatch report --json` in the directory). A process a
    # trusted rule selects is the run's where it or its family works with the run directory. An untrusted file's rule
    # could name anything: its process is the run's only when its pidfile names it or its family runs the run (one
    # of them writes under the directory, was launched by rlwatch, or is named by the run's logs).
    runs_it = set(direct) - foreign
    touches = (cwd_in | set(files)) - foreign
    for pid, role in roles.items():
        if pid not in procs or pid in foreign:
            continue
        if pid in pidfile_pids:
            direct.setdefault(pid, f"the {role} (named by its pidfile)")
            continue
        family = {pid, *procfs.ancestors(pid, parents=parents), *procfs.descendants([pid], children)}
        if rules_named and family & touches:
            direct.setdefault(pid, f"the {role} (its role rule matches, and it works with {root})")
            continue
        doer = min(family & runs_it, default=None)
        if doer is not None and doer != pid:
            direct.setdefault(
                pid, f"the {role} (its role rule matches, and pid {doer} of its family {_verb(direct[doer])})"
            )
    # A person's shell (or multiplexer, or login) that merely stands in the directory, or reads a file there, is
    # where the person is, not the run: it is evidence only when it writes there (a launcher script's redirect).
    for pid in cwd_in:
        if pid not in direct and not _is_root(procs[pid]):
            weak_direct[pid] = f"works in {root}"
    for pid, fs in files.items():
        if pid in procs and pid not in direct and pid not in weak_direct and not _is_root(procs[pid]):
            weak_direct[pid] = f"holds {_rel(fs[0].path, root)} open"
    # Other rlwatch processes (the watchdog, a dashboard, a report) read the run's logs and write its .rlwatch/:
    # observers too, never the run — and so are what started them, up to the shell (`timeout 600 rlwatch watch`).
    # The simulator (`rlwatch sim`, `python -m rlwatch.sim`, what `rlwatch demo` starts) is rlwatch's own program
    # standing for the platform — the container runtime, the scheduler — that starts the run's pieces: above them,
    # never one of them, wherever it stands in their tree.
    ours = [pid for pid in {*direct, *weak_direct} if _is_rlwatch(procfs.read_cmdline(pid, proc_root))]
    ours += _simulators_above({*direct, *weak_direct}, procs, proc_root)
    for pid in ours:
        watchers.add(pid)
        here = procs.get(pid)
        while here is not None and (parent := procs.get(here.ppid)) is not None and not _is_root(parent):
            watchers.add(parent.pid)
            here = parent
    if observer is None:
        watchers |= _readers_of_my_output(cwd_in | set(files), proc_root)
    watchers |= foreign  # never a member, and nothing comes into the run through them
    for pid in watchers:
        direct.pop(pid, None)
        weak_direct.pop(pid, None)
    places = _Places(root, procs, proc_root)
    # A Ray actor shares its session with the raylet and every other job's workers: only its own children come
    # with it.
    core_members = _closure(direct, procs, children, watchers, lone=frozenset(named) & set(direct), places=places)
    # A process that only stands in the directory or reads a file there brings its own children (a `watch` and
    # what it runs), never its parents nor what they started: the pytest worker, the editor or the launcher script
    # above a `tail -f` is not the run, and neither is everything else it runs.
    weak_members = {
        pid: why
        for pid, why in _closure(weak_direct, procs, children, watchers, places=places, up=False).items()
        if pid not in core_members
    }
    environ = _EnvironCache(proc_root)
    _add_elastic_siblings(core_members, procs, watchers, environ)
    servers = {pid for pid, name in roles.items() if name.split("-")[0] == "server"}
    launches = _launches(core_members, procs, former, environ, servers)
    earlier = {pid: core_members[pid] for x in launches if not x.current for pid in x.pids}
    for pid in earlier:
        core_members.pop(pid, None)
        direct.pop(pid, None)
        weak_members.pop(pid, None)
    members = {**weak_members, **core_members}
    return RunView(
        run_dir=root,
        procs=procs,
        members=members,
        core=direct,
        weak=frozenset(weak_members),
        launches=launches,
        earlier=earlier,
        roles={pid: role for pid, role in roles.items() if pid in procs and pid not in foreign},
        container_started_at=_container_start(procs, proc_root),
        searched=searched,
        proc_root=proc_root,
        attempt=attempt,
        foreign=frozenset(foreign),
    )


# Where a run's family ends going up: a shell, a terminal multiplexer, a login or remote session, a container's or the
# system's init. A trainer started from a person's shell shares its session with that shell and with everything else
# the person runs there: the session is not the run, and neither is its leader.
SESSION_ROOTS = frozenset(
    {
        "bash", "sh", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh", "nu", "xonsh",
        "tmux", "tmux: server", "screen", "SCREEN", "zellij", "byobu", "mosh-server", "script",
        "sshd", "login", "su", "sudo", "doas", "agetty", "systemd", "init", "tini", "dumb-init", "docker-init",
        "catatonit", "s6-svscan", "runsv", "supervisord", "conmon", "containerd-shim", "bwrap", "nohup",
    }
)  # fmt: skip


def is_session_root(p: ProcRow) -> bool:
    """A shell, multiplexer, login, session manager or init: where a run's family ends going up, and never a
    launcher whose exit a run outlives as an orphan (a launch script that ran ``nohup python train.py &``)."""
    comm = p.comm
    return p.pid <= 1 or comm in SESSION_ROOTS or comm.startswith(("containerd-shim", "tmux"))


_is_root = is_session_root


class _Places:
    """Where a process works and what it writes outside the run directory, read once per look: what tells two runs
    apart that one shell, one script or one test process started side by side."""

    def __init__(self, root: str, procs: Mapping[int, ProcRow], proc_root: str) -> None:
        self._root = root
        self._procs = procs
        self._proc_root = proc_root
        self._elsewhere: dict[int, str | None] = {}

    def writes_elsewhere(self, pid: int) -> str | None:
        if pid not in self._elsewhere:
            self._elsewhere[pid] = _writes_outside(pid, self._root, self._proc_root)
        return self._elsewhere[pid]

    def apart(self, other: int, anchor: int) -> bool:
        """Whether ``other`` shows it runs something of its own rather than ``anchor``'s run: it works in another
        directory than the run's and than ``anchor``'s, or it writes a file outside the run directory where
        ``anchor`` writes none. A process whose directory cannot be read shows nothing either way."""
        p, a = self._procs.get(other), self._procs.get(anchor)
        if p is None or a is None or p.cwd is None:
            return False
        if not _under(p.cwd, self._root) and p.cwd != a.cwd:
            return True
        mine = self.writes_elsewhere(other)
        return mine is not None and mine != self.writes_elsewhere(anchor)


def _writes_outside(pid: int, root: str, proc_root: str) -> str | None:
    """A regular file outside ``root`` that ``pid`` holds open for writing, or None."""
    for fd, path in (procfs.fd_entries(pid, proc_root) or [])[:_MAX_FDS_LOOKED_AT]:
        if not path.startswith("/") or path.startswith(_NOT_WORK) or path.endswith(" (deleted)"):
            continue
        if _under(path, root) or not os.path.isfile(path):
            continue
        if procfs.fd_writable(pid, fd, proc_root):
            return path
    return None


def _readers_of_my_output(candidates: set[int], proc_root: str) -> set[int]:
    """Of ``candidates``, the processes whose standard input is the pipe this rlwatch writes its output to
    (`rlwatch report --json | python3 -c …` run from the directory): rlwatch's reader, an observer as rlwatch is,
    never the run, whatever role rule its command line matches (a run whose trainer is a `python3 -c` too)."""
    mine: set[str] = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISFIFO(st.st_mode):
            mine.add(f"pipe:[{st.st_ino}]")
    if not mine:
        return set()
    readers: set[int] = set()
    for pid in candidates:
        try:
            if os.readlink(f"{proc_root}/{pid}/fd/0") in mine:
                readers.add(pid)
        except OSError:
            continue
    return readers


def _closure(
    direct: Mapping[int, str],
    procs: Mapping[int, ProcRow],
    children: Mapping[int, list[int]],
    skip: Collection[int] = (),
    lone: Collection[int] = (),
    *,
    places: _Places | None = None,
    up: bool = True,
) -> dict[int, str]:
    """The processes with direct evidence, plus what comes with them — each with how it came in ("a descendant of
    pid 12, which writes train.log"):

    - the descendants of every member;
    - with ``up``, their **ancestors** up to the first shell, multiplexer, session manager or init (the launcher
      that started a rank: torchrun, an AReaL launcher, a Ray driver), and what those launchers started (the other
      ranks), and the other processes of a member's **process group** when that group's leader is a member too or
      gone (a launcher's workers re-parented to init keep its group).

    What a launcher started and what shares a group come in only where they do not show a run of their own
    (``places``): one shell line, one script or one test process starts many runs side by side, each in its own
    directory, and a gone group leader is the shell of all of them. Not the session: a run started from a person's
    shell shares the shell's session with everything else the person runs from it. Those in ``lone`` (Ray's actors:
    their parent is the raylet, whose children are every job's workers) bring their descendants only."""
    by_group: dict[int, list[int]] = {}
    for pid, p in procs.items():
        if p.pgid > 0:
            by_group.setdefault(p.pgid, []).append(pid)
    out = dict(direct)
    anchor = {pid: pid for pid in direct}  # the process with direct evidence each member came in through
    above: set[int] = set()  # members that came in as ancestors: what else they started is checked

    def add(other: int, via: int, how: str) -> bool:
        if other in out or other not in procs or other in skip or procs[other].state == "Z":
            return False  # an exited process waiting to be reaped is no part of anything
        anchor[other] = anchor[via]
        out[other] = f"{how} pid {anchor[via]}, which {_verb(direct[anchor[via]])}"
        return True

    for pid in list(direct) if up else ():
        here = None if pid in lone else procs.get(pid)
        while here is not None:
            parent = procs.get(here.ppid)
            if parent is None or _is_root(parent) or parent.pid in skip:
                break
            if add(parent.pid, pid, "an ancestor of"):
                above.add(parent.pid)
            here = parent
    queue = list(out)
    while queue:
        pid = queue.pop()
        here = procs.get(pid)
        if here is None:
            continue
        checked = pid in above
        related = [(c, "a descendant of", checked) for c in children.get(pid, ())]
        # The group's leader is the run's: its group is too. So is the group of a launcher that is gone (torchrun
        # SIGKILLed: its ranks, re-parented to init, keep its group, and only one of them may write the log).
        gone = here.pgid > 1 and here.pgid not in procs
        if up and anchor[pid] not in lone and (here.pgid in out or gone):
            related += [
                (g, "in the process group of", True)
                for g in by_group.get(here.pgid, ())
                if not gone or procs[g].sid == here.sid
            ]
        for other, how, check in related:
            if check and places is not None and other not in out and places.apart(other, anchor[pid]):
                continue
            if add(other, pid, how):
                queue.append(other)
    return out


def _is_rlwatch(argv: tuple[str, ...]) -> bool:
    """``rlwatch …`` or ``python -m rlwatch …``: a command of rlwatch's own — one that watches, or the simulator's
    supervisor (``rlwatch sim``, ``python -m rlwatch.sim``), which plays the platform that starts a run. The
    simulator's pieces (``python -m rlwatch.sim.trainer``, the ``python3 train.py`` it starts) stand for the run's
    own processes: they are not rlwatch's here."""
    if not argv:
        return False
    # The console script runs as `…/python …/bin/rlwatch watch DIR` once the kernel reads its #! line.
    script = 1 if len(argv) > 1 and os.path.basename(argv[0]).startswith("python") else 0
    if os.path.basename(argv[0]) == "rlwatch" or (script and os.path.basename(argv[1]) == "rlwatch"):
        return True
    module = next((b for a, b in itertools.pairwise(argv) if a == "-m"), None)
    return module is not None and module in ("rlwatch", "rlwatch.cli", "rlwatch.sim")


def _simulators_above(pids: Iterable[int], procs: Mapping[int, ProcRow], proc_root: str) -> list[int]:
    """rlwatch's simulator above ``pids`` in the process tree (up to the first shell): the supervisor that started
    them, and what started it (``rlwatch demo``). Only Python processes are read."""
    found: list[int] = []
    looked: set[int] = set()
    for pid in pids:
        here = procs.get(pid)
        while here is not None and (parent := procs.get(here.ppid)) is not None and not _is_root(parent):
            if parent.pid in looked:
                break
            looked.add(parent.pid)
            if parent.comm.startswith(("python", "rlwatch")) and _is_rlwatch(
                procfs.read_cmdline(parent.pid, proc_root)
            ):
                found.append(parent.pid)
            here = parent
    return found


def _add_pipe_writers(
    direct: dict[int, str], procs: Mapping[int, ProcRow], proc_root: str, skip: Collection[int]
) -> None:
    """``python3 train.py | tee train.log``: the trainer writes the log through ``tee``, whose input is the
    trainer's output. A process of the writer's session whose standard output or error is the pipe the writer
    reads writes the log as surely as the writer (a pipeline's processes are siblings under the shell: the tree
    alone does not tie them)."""
    pipes: dict[str, int] = {}
    for pid in list(direct):
        if not direct[pid].startswith("writes "):
            continue
        stdin = _fd_target(pid, 0, proc_root)
        if stdin is not None and stdin.startswith("pipe:"):
            pipes.setdefault(stdin, pid)
    if not pipes:
        return
    sessions = {procs[pid].sid for pid in pipes.values() if pid in procs}
    for pid, p in procs.items():
        if pid in direct or pid in skip or p.sid not in sessions:
            continue
        for fd in (1, 2):
            target = _fd_target(pid, fd, proc_root)
            writer = pipes.get(target) if target is not None else None
            if writer is not None:
                direct[pid] = f"{direct[writer].split(' (+')[0]} through pid {writer} ({procs[writer].comm})"
                break


def _fd_target(pid: int, fd: int, proc_root: str) -> str | None:
    try:
        return os.readlink(f"{proc_root}/{pid}/fd/{fd}")
    except OSError:
        return None


def _verb(evidence: str) -> str:
    """Direct evidence as a relative clause: "writes x" stays, "the trainer (…)" becomes "is the trainer (…)"."""
    return evidence if evidence.startswith(("writes", "works", "holds", "was ")) else f"is {evidence}"


# Set by torchrun's elastic agent in every rank's environment: the ranks of one launch share them.
_ELASTIC_KEYS = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True, slots=True)
class _Lost:
    why: str
    key: tuple[object, ...]  # what the ranks of one lost launch share
    launcher: int | None  # the launcher's pid, where known
    name: str | None = None  # what the launcher was, where known otherwise than by its pid


def _reaped_by(top: ProcRow, procs: Mapping[int, ProcRow]) -> str | None:
    """Where ``top`` was re-parented when it lost its parent (init, a subreaper), or None: its parent is another."""
    parent = procs.get(top.ppid)
    if top.ppid in (0, 1):
        init = procs.get(1)
        if init is not None and init.pgid == top.pgid:
            return None  # init leads its group: init started it (a container whose command is the launcher)
        return "init (pid 1)"
    if parent is not None and parent.comm in _REAPERS:
        return f"{parent.comm} (pid {top.ppid})"
    return None


def _lost_launcher(
    top: ProcRow,
    procs: Mapping[int, ProcRow],
    former: Mapping[int, tuple[float, int]],
    environ: Callable[[int], Mapping[str, str] | None],
) -> _Lost | None:
    """Whether the top of a launch has lost the launcher that started it, how that is known, and what its lost
    launch's processes share. Re-parented to init or a subreaper, and:

    - rlwatch saw its parent before (``former``: pid → (start, parent)), and that parent is gone — any launcher;
    - its environment is a torchrun rank's (torchrun starts each rank in a session of its own, so the tree and the
      groups say nothing after the agent is gone; its ranks share the run id and rendezvous address);
    - it does not lead its own group: its group's leader, or a process under it, started it.

    A process that leads its own group or session, or carries no rank's environment, was started as itself or by
    a shell that exited (``nohup python train.py &`` in a launch script): re-parented, it lost nothing rlwatch can
    show. A parent seen before that was a shell (``former`` leaves those out) is no launcher either."""
    seen = former.get(top.pid)
    if seen is not None and abs(seen[0] - top.create_time) < 1 and seen[1] not in procs and top.ppid != seen[1]:
        # Whoever adopted it (init, or a subreaper rlwatch cannot tell from any other parent), its launcher is gone.
        adopter = procs.get(top.ppid)
        adopted = _reaped_by(top, procs) or (f"{adopter.comm} (pid {top.ppid})" if adopter else f"pid {top.ppid}")
        why = f"its launcher (pid {seen[1]}) is gone and it was re-parented to {adopted}"
        return _Lost(why, ("pid", seen[1]), seen[1])
    where = _reaped_by(top, procs)
    if where is None:
        return None
    elastic = _elastic_key(environ(top.pid), top.cwd)
    if elastic is not None:
        return _Lost(
            f"a torchrun rank whose elastic agent is gone: it was re-parented to {where}",
            ("elastic", *elastic),
            None,
            "torchrun",
        )
    if top.pid in (top.pgid, top.sid) or not _rank_of_a_launch(environ(top.pid)):
        # Started as itself (``nohup python train.py &``, a daemon), or by a shell or script that has exited since
        # — the commonest way to start a long run: an ordinary run, which lost nothing a resume relies on. A
        # launcher's ranks carry its environment (RANK, LOCAL_RANK, WORLD_SIZE; MPI's ranks): only they lost one.
        return None
    leader = procs.get(top.pgid)
    if leader is None or leader.state == "Z":
        return _Lost(
            f"its launcher (pid {top.pgid}, its process group's leader) is gone and it was re-parented to {where}",
            ("group", top.sid, top.pgid),
            top.pgid,
        )
    return _Lost(
        f"the process that started it is gone and it was re-parented to {where}", ("group", top.sid, top.pgid), None
    )


def _launches(
    members: Mapping[int, str],
    procs: Mapping[int, ProcRow],
    former: Mapping[int, tuple[float, int]] = {},
    environ: Callable[[int], Mapping[str, str] | None] = lambda pid: None,
    servers: Collection[int] = (),
) -> tuple[Launch, ...]:
    """The run's members grouped by launch. Every member whose family still reaches its launcher is the live run
    (a launcher's tree, a server started apart from the trainer); the members a lost launcher left, grouped by the
    process group they keep, are each an attempt of their own: an earlier one when older than the live run (younger,
    it may be the live run's own), else — with no launcher left anywhere — the newest of them is the run."""
    tops: dict[int, ProcRow] = {}
    # An exited rank waiting to be reaped shows no environment and no launcher: it would pass for a launch of its own.
    members = {pid: why for pid, why in members.items() if pid in procs and procs[pid].state != "Z"}
    for pid in members:
        here = procs.get(pid)
        seen = 0
        while here is not None and here.ppid in members and here.ppid in procs and seen < 4096:
            here = procs[here.ppid]
            seen += 1
        if here is not None:
            tops[pid] = here
    live: list[int] = []
    orphans: dict[tuple[object, ...], list[int]] = {}
    why: dict[tuple[object, ...], _Lost] = {}
    judged: dict[int, _Lost | None] = {}
    for pid, top in tops.items():
        if top.pid not in judged:
            judged[top.pid] = _lost_launcher(top, procs, former, environ)
        lost = judged[top.pid]
        if lost is None:
            live.append(pid)
        else:
            orphans.setdefault(lost.key, []).append(pid)
            why.setdefault(lost.key, lost)

    def start(pids: Iterable[int]) -> float:
        return min(procs[p].create_time for p in pids)

    out: list[Launch] = []
    live_start = start(live) if live else None
    if live_start is None and orphans:  # no launcher left anywhere: the newest orphaned launch is the run
        newest = max(orphans, key=lambda k: start(orphans[k]))
        live_start = start(orphans[newest])
    for key, pids in sorted(orphans.items(), key=lambda kv: start(kv[1])):
        lost = why[key]
        out.append(
            Launch(
                pids=tuple(sorted(pids)),
                group=procs[min(pids, key=lambda p: (procs[p].create_time, p))].pgid,
                launcher=lost.launcher,
                launcher_alive=False,
                orphaned=lost.why,
                started_at=start(pids),
                # An inference server left running by a script that started it and exited serves the live run:
                # it is no earlier attempt of it.
                current=(live_start is not None and start(pids) >= live_start) or any(p in servers for p in pids),
                launcher_name=lost.name,
            )
        )
    if live:
        heads = sorted({tops[p].pid for p in live}, key=lambda p: (procs[p].create_time, p))
        out.append(
            Launch(
                pids=tuple(sorted(live)),
                group=procs[heads[0]].pgid,
                launcher=heads[0],
                launcher_alive=True,
                orphaned=None,
                started_at=start(live),
                current=True,
            )
        )
    return tuple(sorted(out, key=lambda x: (x.started_at, x.group)))


# What a distributed launcher (torchrun's agent, DeepSpeed's launcher, accelerate, mpirun) puts in each rank's
# environment; a process started by hand has none of them.
_RANK_KEYS = ("LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def _rank_of_a_launch(env: Mapping[str, str] | None) -> bool:
    if not env:
        return False
    return any(k in env for k in _RANK_KEYS) or ("RANK" in env and "WORLD_SIZE" in env)


class _EnvironCache:
    """A process's environment, read once per look (only re-parented processes' are ever read)."""

    def __init__(self, proc_root: str) -> None:
        self._root = proc_root
        self._seen: dict[int, Mapping[str, str] | None] = {}

    def __call__(self, pid: int) -> Mapping[str, str] | None:
        if pid not in self._seen:
            self._seen[pid] = procfs.read_environ(pid, self._root)
        return self._seen[pid]


def _elastic_key(env: Mapping[str, str] | None, cwd: str | None) -> tuple[str | None, ...] | None:
    """What the ranks of one torchrun launch share: its run id and rendezvous address — which every launch on the
    host started the same way shares too (a plain ``torchrun`` has run id ``none`` and port 29500) — and the
    directory the agent started them in. Without a readable directory nothing ties a rank to another."""
    if not env or env.get("TORCHELASTIC_RUN_ID") is None or env.get("LOCAL_RANK") is None or cwd is None:
        return None
    return (*(env.get(k) for k in _ELASTIC_KEYS), cwd)


def _add_elastic_siblings(
    members: dict[int, str],
    procs: Mapping[int, ProcRow],
    skip: Collection[int],
    environ: Callable[[int], Mapping[str, str] | None],
) -> None:
    """The other ranks of a torchrun launch whose agent is gone, beside a rank that is the run's. Each rank runs in
    a session of its own, so once the agent (their common parent) is gone only their environment ties them: rank 1
    that never writes the log holds its GPU memory as surely as rank 0 that does."""
    keys: dict[tuple[str | None, ...], int] = {}
    for pid in list(members):
        p = procs.get(pid)
        if p is not None and p.pid == p.sid and _reaped_by(p, procs) is not None:
            key = _elastic_key(environ(pid), p.cwd)
            if key is not None:
                keys.setdefault(key, pid)
    if not keys:
        return
    for pid, p in procs.items():
        if pid in members or pid in skip or p.pid != p.sid or _reaped_by(p, procs) is None:
            continue
        key = _elastic_key(environ(pid), p.cwd)
        if key is not None and key in keys:
            members[pid] = f"a rank of the same torchrun launch as pid {keys[key]}"
