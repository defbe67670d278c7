"""Which run is live, and who is in it over time: the processes that are the run's by evidence (sources/membership),
its members seen and gone, the attempts it went through (engine/attempts), the processes table shown, what
rlwatch itself started, and the start times that make a restart loop.

The live run is looked at with the GPU-holder scan of a host round (host_round) or afresh right before an action
signals anything (:meth:`RunTracking.live_run`); the run's processes found there are the ones whose logs are
followed, whose starts count, and whose command lines are remembered for a resume.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from rlwatch.common.state import ProcessInfo
from rlwatch.common.trust import open_read
from rlwatch.discover.discovery import written_logs
from rlwatch.engine.attempts import AttemptTracker
from rlwatch.engine.preview import TailPreview
from rlwatch.engine.reading import LogReading
from rlwatch.sources import procfs
from rlwatch.sources.launches import LaunchBook
from rlwatch.sources.membership import RunView, assess, first_stamp, may_act_on, open_files, run_owners
from rlwatch.sources.processes import LaunchRecord, ProcessTable, member_info
from rlwatch.sources.ray import RaySource

_LOG_HEAD_BYTES = 64 * 1024
HOST_ROLES = ("watchdog", "server")  # roles watched for what they are, not for being of the run's family
MAX_MEMBER_ROWS = 32


class RunTracking(LogReading):
    """The run's membership and attempts, and the processes table: which processes are the run's, and since when."""

    def _setup_tracking(self) -> None:
        """The sources that say which processes are the run's, and what has been seen of them so far."""
        cfg, proc_root = self.cfg, self._proc_root
        self.processes = ProcessTable(
            cfg.processes, self.clock, proc_root=proc_root, base_dir=self.run_dir, bounded=self._untrusted
        )
        self.launches = LaunchBook(self.run_dir / ".rlwatch" / "launches.json")
        # Whose processes may be the run's: never another user's, whose command a resume would run as this user.
        self.owners = run_owners(
            allow_other_users=cfg.actions.allow_other_users,
            other_users=cfg.actions.other_users,
            trusted=cfg.provenance.distrust is None,
        )
        # A Ray-based run (verl, OpenRLHF): Ray's session logs and State API (sources/ray).
        self.ray_source = RaySource(cfg, self.run_dir, self.clock, proc_root=proc_root)
        self._procs: tuple[ProcessInfo, ...] = ()  # the processes table (_table), as the last round made it
        self._view: RunView | None = None  # the live run as last found, made with the holder scan
        self._looked_at: float | None = None  # wall time of that look
        self._gone_members: dict[int, str] = {}  # the run's processes seen and gone since (pid → their evidence)
        self._seen_members: dict[int, tuple[float, str]] = {}  # pid → (start, evidence) of every member seen
        # Launchers seen going, earlier attempts' writes over time (engine/attempts); quiet for the hang window's
        # floor, an earlier attempt's processes are strays.
        self.attempts = AttemptTracker(cfg.thresholds.hang_floor_s, proc_root)
        # path → ((dev, ino), (line, time) of its first timestamp or None, size when read): a log's head is read once
        self._log_heads: dict[str, tuple[tuple[int, int], tuple[int, float] | None, int]] = {}
        self._launched: set[tuple[int, float]] = set()  # (pid, start time) of processes rlwatch started
        self._member_starts: dict[str, set[float]] = {}  # role -> start times of processes seen as the run's
        self._member_pids: set[int] = set()  # every pid seen as the run's
        self._role_procs: tuple[ProcessInfo, ...] = ()  # every process a role rule selects, the run's or not

    def role_processes(self) -> tuple[ProcessInfo, ...]:
        """Every process a role rule selects, this run's or not (the processes table shows only the run's)."""
        with self._lock:
            return self._role_procs

    def _table(self, procs: Sequence[ProcessInfo], view: RunView) -> tuple[ProcessInfo, ...]:
        """The processes table: the live run's members, each with its evidence — those a role rule names under
        their role, the others (a custom ``python3 train.py``) as they are — and the host's watchdog and inference
        server, watched for what they are. A process another run owns matches the same role patterns: never shown
        as this run's. A member that exited stays, as the run's history."""
        members = {pid: why for pid, why in view.members.items() if pid not in view.weak}
        # What rlwatch itself just started is the run's before the next look at the host says so (an action's check
        # waits for the process it started to show, with its fresh memory).
        with self._lock:
            launched = tuple(self._launched)
        for pid, create_time in launched:
            if pid not in members and any(p.pid == pid and abs(p.create_time - create_time) < 1 for p in procs):
                members[pid] = "was started by rlwatch"
        rows: list[ProcessInfo] = []
        strangers: list[str] = []
        for p in procs:
            if not p.alive:
                if p.pid in self._member_pids:
                    rows.append(p)
            elif p.pid in members:
                rows.append(replace(p, evidence=members[p.pid]))
            elif p.role in HOST_ROLES:
                # Another user's process that matches the server's rule is not the host's server: it would soften an
                # outage ("one miss is not yet a failure"), block restart-server, or be what it stops. Said, not used.
                uid = procfs.owner(p.pid, self._proc_root)
                if uid == 0 or may_act_on(uid, self.owners):
                    rows.append(p)
                else:
                    who = p.user or ("more than one user" if uid is None else uid)
                    strangers.append(f"pid {p.pid} matches the {p.role} rule but runs as {who}: not the run's {p.role}")
        if strangers or "other users" in self._status:
            self._ok("other users", "; ".join(strangers[:3]) or None)
        shown = {p.pid for p in rows}
        for pid, why in sorted(members.items())[:MAX_MEMBER_ROWS]:
            if pid not in shown and (info := member_info(pid, why, self._proc_root)) is not None:
                rows.append(info)
        # An earlier attempt's processes still running beside the live run: shown apart, under their attempt.
        earlier = [x for x in view.launches if not x.current]
        for index, launch in enumerate(view.launches):
            if launch not in earlier:
                continue
            for pid in launch.pids[:MAX_MEMBER_ROWS]:
                why = view.earlier.get(pid, "")
                known = next((p for p in rows if p.pid == pid), None)
                if known is not None:
                    rows[rows.index(known)] = replace(known, evidence=why, attempt=index)
                elif (info := member_info(pid, why, self._proc_root)) is not None:
                    rows.append(replace(info, attempt=index))
        self._member_pids |= set(members)
        return tuple(rows)

    def _start_times(self, preview: TailPreview | None = None) -> dict[str, tuple[float, ...]]:
        """When the run's processes (and, from its logs, the container) started: the restart-loop evidence."""
        logged = self._starts if preview is None else preview.starts(self._starts)
        starts = {k: tuple(v) for k, v in logged.items()}
        for role in ("trainer", "launcher"):
            # Only the starts of processes that were the run's: a role's pattern matches other runs' trainers too.
            ours = self._member_starts.get(role, set())
            seen = [t for t in self.processes.start_times(role) if round(t, 2) in ours]
            if seen:
                starts[role] = tuple(seen)
        return starts

    def launch_record(self, name: str) -> LaunchRecord | None:
        """How ``name`` was started: as seen by this engine, else as remembered by an earlier rlwatch — a record of
        this user's process first; another's is returned only for the planner to refuse it, saying whose it is."""
        found = [r for r in (self.processes.launch_record(name), self.launches.get(name)) if r is not None]
        return next((r for r in found if r.uid == os.geteuid()), found[0] if found else None)

    def started_by(self, name: str) -> str | None:
        """The named process ``name`` was first seen started under, by this engine or an earlier rlwatch (a server
        rlwatch restarted has rlwatch for a parent; the book still knows the launcher started the first one)."""
        for record in (self.processes.launch_record(name), self.launches.get(name)):
            if record is not None and record.started_by is not None:
                return record.started_by
        return None

    def note_launched(self, pid: int, create_time: float) -> None:
        """A process rlwatch started: evidence that it is the run's, whatever its command line."""
        with self._lock:
            self._launched.add((pid, create_time))

    def live_run(self, *, fresh: bool = False) -> RunView:
        """The live run as found from evidence (:mod:`rlwatch.sources.membership`); ``fresh`` looks again now, as
        an action does right before it signals anything."""
        if fresh or self._view is None:
            with self._lock:
                procs = self._role_procs
            self._view = self._assess(procs, None)
        return self._view

    def _assess(self, procs: Sequence[ProcessInfo], opened: dict[int, list[tuple[int, str]]] | None) -> RunView:
        roles = {p.pid: p.name for p in procs if p.alive}
        exclude = [str(self.run_dir / ".rlwatch"), os.path.dirname(self.cfg.gpu.device_glob) + "/"]
        files = (
            None
            if opened is None
            else open_files(opened, str(self.run_dir), proc_root=self._proc_root, exclude=exclude)
        )
        with self._lock:
            launched = set(self._launched)
        view = assess(
            str(self.run_dir),
            attempt=self._latest_attempt(),
            roles=roles,
            pidfile_pids=self.processes.pidfile_pids,
            launched=launched,
            exclude=exclude,
            proc_root=self._proc_root,
            files=files,
            named=self.ray_source.named_members(),
            owners=self.owners,
            former=self.attempts.former_parents(),
            rules_named=self._rules_named,
        )
        self._follow_what_it_writes(view)
        self._looked_at = now = self.clock.time()
        return self.attempts.observe(view, now)

    def _follow_what_it_writes(self, view: RunView) -> None:
        """Follow the logs the live run's processes hold open for writing, as they appear: a run's logs are often
        created after rlwatch started (a watchdog started with the container, or beside the launcher, saw only the
        launcher's redirect, and the ranks' train.log was never read). Only the run's own processes count, by
        evidence (not those that only stand in its directory), and only files that are logs by name or by their
        lines (discover.discovery.written_logs)."""
        core = [pid for pid in view.members if pid not in view.weak]
        if not core or self._untrusted:
            return
        for path in written_logs(core, self._proc_root, known=self.tailer.files):
            self.tailer.follow(str(path))

    def _gone_since(self, view: RunView) -> dict[int, str]:
        """The run's processes this engine saw (at this look or an earlier one) that are gone now (pid → their
        evidence): a run killed between two looks is dead now, not at the next look, and stays known as dead after
        it (a pid reused since is another process: the start time decides)."""
        for pid, why in view.members.items():
            p = view.procs.get(pid)
            if pid not in view.weak and p is not None:
                self._seen_members[pid] = (p.create_time, why)
        btime = procfs.boot_time(self._proc_root)
        gone: dict[int, str] = {}
        for pid, (created, why) in self._seen_members.items():
            stat = procfs.read_stat(pid, self._proc_root)
            start = None if stat is None else procfs.start_time_from_ticks(stat.starttime_ticks, btime)
            if stat is None or stat.state == "Z" or (start is not None and abs(start - created) > 1):
                gone[pid] = why
        if len(self._seen_members) > 4 * MAX_MEMBER_ROWS:  # the oldest that are gone first
            for pid in list(gone)[: len(self._seen_members) - 4 * MAX_MEMBER_ROWS]:
                del self._seen_members[pid]
        return gone

    def _latest_attempt(self) -> tuple[str, float] | None:
        """(what shows it, when) the run's latest attempt began, alive or gone: a leftover older than it is from an
        earlier attempt. Each candidate is no later than that start, so the newest of them is a safe reference."""
        seen = [
            (start, f"its {role} started then; rlwatch saw it")
            for role in ("trainer", "launcher")
            for start in self.processes.start_times(role)
        ]
        for role in ("trainer", "launcher"):
            record = self.launches.get(role)
            if record is not None:
                seen.append((record.create_time, f"its {role} started then; rlwatch launched it"))
        logged = self._earliest_log_line()
        if logged is not None:
            seen.append(logged)
        if not seen:
            return None
        start, shown_by = max(seen)
        return shown_by, start

    def _earliest_log_line(self) -> tuple[float, str] | None:
        """For a run with a launcher: the earliest timestamped line of its logs. The launcher writes first and starts
        everything else, so no process of any attempt in these logs is older. Without a launcher role (a trainer
        that logs elsewhere while a server it waits for starts later) the logs date nothing, and none is used."""
        if not any(rule.role == "launcher" for rule in self.cfg.processes):
            return None
        best: tuple[float, str] | None = None
        for path in self.tailer.files:
            key = self._log_heads.get(path)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if key is None or key[0] != (st.st_dev, st.st_ino) or (key[1] is None and st.st_size != key[2]):
                try:
                    with open_read(path) as fh:
                        head = fh.read(_LOG_HEAD_BYTES)
                except OSError:
                    continue
                key = ((st.st_dev, st.st_ino), first_stamp(head, self.clock.time()), st.st_size)
                self._log_heads[path] = key
            found = key[1]
            if found is not None and (best is None or found[1] < best[0]):
                rel = os.path.relpath(path, self.run_dir)
                best = (found[1], f"the earliest line of its logs, {rel}:{found[0]}, was written then")
        return best
