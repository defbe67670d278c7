"""Attempts followed over time: which launcher went when, which earlier attempt still writes, which became strays.

Membership (:mod:`rlwatch.sources.membership`) groups the run's processes by launch at one moment. What one moment
cannot say, the engine sees across its samples, and this module keeps:

- **when a launcher went**: every process of the run and the parents above it are remembered by (pid, start) with
  their command name; one that disappears is *gone since* the first look that missed it. After the fact (a one-shot
  report, a launcher gone before rlwatch started) only "re-parented to init" is known: its launcher *is gone*, no time.
- **whether an earlier attempt still writes**: the file position of each descriptor it writes under the run
  directory moves only when *that* process writes, so a log both attempts append to still tells them apart. Not seen
  to move for the hang window (from the first look on), its processes are strays: "it has written nothing for …".
- **whether the new run failed on their GPU**: the new run's "CUDA … busy or unavailable" after it began, while the
  earlier attempt holds a GPU, makes its holders strays with that reason.

Nothing here signals anything: strays are what ``kill-zombies`` (and a policy) may choose; an earlier attempt that
still writes is chosen only when a person names its pids.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from rlwatch.common.state import Attempt, EventSummary, GpuHolder
from rlwatch.engine.diagnosis.wording import hhmm, human_duration
from rlwatch.sources import procfs
from rlwatch.sources.membership import Launch, RunView, is_session_root

__all__ = ["AttemptTracker", "busy_after"]


@dataclass(slots=True)
class _Write:
    path: str
    pos: int | None
    moved_at: float | None  # None: not seen to move yet
    first_seen: float
    mtime: float | None = None  # the file's modification time at the last look (by whichever process wrote it)


_TORCHRUN = ("torch.distributed.run", "torch.distributed.launch")


def label(argv: Sequence[str], comm: str) -> str:
    """What a person calls a launcher: ``torchrun`` for ``python -m torch.distributed.run``, a script's name for
    ``python launch.py``, else the program's name."""
    if not argv:
        return comm
    program = os.path.basename(argv[0])
    if not program.startswith("python"):
        return program or comm
    rest = list(argv[1:])
    if "-m" in rest and rest.index("-m") + 1 < len(rest):
        module = rest[rest.index("-m") + 1]
        return "torchrun" if module in _TORCHRUN else module
    script = next((a for a in rest if not a.startswith("-")), None)
    return os.path.basename(script) if script else program


def _under(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def busy_after(events: Mapping[str, EventSummary], start: float | None) -> EventSummary | None:
    """The run's "CUDA … busy or unavailable" failure, when its latest line came after ``start`` (the live run's
    start): the new run could not get a GPU."""
    ev = events.get("cuda_busy")
    if ev is None or not ev.count or ev.last is None or start is None:
        return None
    return ev if ev.last >= start - 1 else None


class AttemptTracker:
    """What the engine remembers across samples about the run's launches (see the module's docstring)."""

    def __init__(self, quiet_s: float, proc_root: str = procfs.PROC) -> None:
        self.quiet_s = quiet_s
        self._proc_root = proc_root
        self._names: dict[int, tuple[float, str]] = {}  # pid → (start, command name) of the run and its parents
        self._gone_at: dict[tuple[int, float], float] = {}  # (pid, start) → when first missed
        self._writes: dict[tuple[int, int], _Write] = {}  # (pid, fd) of an earlier attempt's writes under the run
        self._parents: dict[int, tuple[float, int]] = {}  # pid → (start, parent) of the run's processes, last seen

    def former_parents(self) -> dict[int, tuple[float, int]]:
        """pid → (start, parent) of the run's processes as rlwatch last saw them under a parent other than init:
        a rank re-parented since lost that launcher (see :func:`rlwatch.sources.membership.assess`)."""
        return dict(self._parents)

    def observe(self, view: RunView, now: float) -> RunView:
        """Remember what this look shows, and return the view with the earlier attempts' quiet processes as strays."""
        seen = {pid: (p.create_time, p.comm) for pid, p in view.procs.items()}
        watched = set(view.members) | set(view.earlier)
        for pid in list(watched):
            p = view.procs.get(pid)
            if p is not None and p.ppid in view.procs:
                watched.add(p.ppid)
        for pid in watched:
            if pid in seen and self._names.get(pid, (None,))[0] != seen[pid][0]:
                self._names[pid] = (seen[pid][0], label(procfs.read_cmdline(pid, self._proc_root), seen[pid][1]))
        for pid in set(view.members) | set(view.earlier):
            p = view.procs.get(pid)
            parent = view.procs.get(p.ppid) if p is not None else None
            # A shell that started it (a launch script, `(cd run && nohup python train.py &)`) is no launcher:
            # once it exits, the run goes on as an ordinary run, never one that "lost its launcher".
            if p is not None and p.ppid > 1 and parent is not None and not is_session_root(parent):
                self._parents[pid] = (p.create_time, p.ppid)
        self._parents = {
            pid: v for pid, v in self._parents.items() if pid in view.procs and v[0] == view.procs[pid].create_time
        }
        for pid, (start, _) in list(self._names.items()):
            if seen.get(pid, (None,))[0] != start:
                self._gone_at.setdefault((pid, start), now)
                if now - self._gone_at[(pid, start)] > 24 * 3600:
                    del self._names[pid]
        strays = dict(view.strays)
        live_writes: set[tuple[int, int]] = set()
        root = os.path.realpath(view.run_dir)
        for pid in view.earlier:
            quiet: list[_Write] = []
            for fd, path in procfs.fd_entries(pid, self._proc_root) or []:
                if not _under(path, root) or not procfs.fd_writable(pid, fd, self._proc_root):
                    continue
                key = (pid, fd)
                live_writes.add(key)
                pos = procfs.fd_position(pid, fd, self._proc_root)
                w = self._writes.get(key)
                if w is None or w.path != path:
                    w = self._writes[key] = _Write(path, pos, None, now)
                elif pos is not None and pos != w.pos:
                    w.pos, w.moved_at = pos, now
                try:
                    w.mtime = os.stat(path).st_mtime
                except OSError:
                    w.mtime = None
                quiet.append(w)
            since = [w.moved_at or w.first_seen for w in quiet]
            if quiet and now - max(since) > self.quiet_s:
                last = [w for w in quiet if w.moved_at is not None]
                said = (
                    f"last wrote {os.path.relpath(max(last, key=lambda w: w.moved_at or 0).path, root)} at "
                    f"{hhmm(max(w.moved_at or 0 for w in last), now)}"
                    if last
                    else "not seen writing since rlwatch first looked"
                )
                strays[pid] = (
                    f"a process of an earlier attempt whose launcher is gone: it has written nothing for "
                    f"{human_duration(now - max(since))} ({said}), longer than the hang window "
                    f"({human_duration(self.quiet_s)})"
                )
        self._writes = {k: w for k, w in self._writes.items() if k in live_writes}
        return replace(view, strays=strays) if strays != dict(view.strays) else view

    def notice_gone(self, now: float) -> None:
        """Between looks (every sample, cheaply): which of the processes rlwatch remembers went, and when it first
        missed them, so a launcher's "gone since" is as close as the sampling allows."""
        btime = procfs.boot_time(self._proc_root)
        for pid, (start, _) in self._names.items():
            if (pid, start) in self._gone_at:
                continue
            stat = procfs.read_stat(pid, self._proc_root)
            now_start = None if stat is None else procfs.start_time_from_ticks(stat.starttime_ticks, btime)
            if stat is None or stat.state == "Z" or (now_start is not None and abs(now_start - start) > 1):
                self._gone_at[(pid, start)] = now

    def launcher_name(self, launch: Launch) -> str | None:
        known = self._names.get(launch.launcher) if launch.launcher is not None else None
        return known[1] if known is not None else launch.launcher_name

    def gone_at(self, pid: int | None) -> float | None:
        """When rlwatch first missed ``pid`` (the newest start it knew under that pid); None: never seen go."""
        if pid is None:
            return None
        times = [t for (p, _), t in self._gone_at.items() if p == pid]
        return max(times) if times else None

    def last_write(self, pids: Sequence[int]) -> float | None:
        moved = [w.moved_at for (pid, _), w in self._writes.items() if pid in pids and w.moved_at is not None]
        return max(moved) if moved else None

    def wrote(self, pids: Sequence[int], now: float) -> str | None:
        """What an earlier attempt's processes last wrote and when, as far as rlwatch saw: a write position that
        moved, else the file's time (which the new run may have made, in a log both write)."""
        ws = [w for (pid, _), w in self._writes.items() if pid in pids]
        if not ws:
            return None
        moved = [w for w in ws if w.moved_at is not None]
        if moved:
            w = max(moved, key=lambda w: w.moved_at or 0.0)
            return f"last wrote {os.path.basename(w.path)} at {hhmm(w.moved_at, now)} (its write position moved then)"
        w = max(ws, key=lambda w: w.mtime or 0.0)
        return (
            f"writes {os.path.basename(w.path)}, last written {hhmm(w.mtime, now)} (by it or by another process: "
            "rlwatch has not watched it long enough to tell)"
        )

    def records(
        self, view: RunView, holders: Sequence[GpuHolder], busy: EventSummary | None, now: float
    ) -> tuple[tuple[Attempt, ...], tuple[GpuHolder, ...]]:
        """The attempts as snapshot records, and the holders with an earlier attempt's made strays where the new run
        failed "busy or unavailable" while they hold a GPU."""
        by_pid = {h.pid: h for h in holders}
        root = os.path.realpath(view.run_dir)
        out: list[Attempt] = []
        changed: dict[int, GpuHolder] = {}
        if len(view.launches) < 2 and not any(x.orphaned for x in view.launches):
            return (), tuple(holders)
        for launch in view.launches:
            mine = [by_pid[p] for p in launch.pids if p in by_pid and by_pid[p].protected is None]
            gpus = tuple(sorted({g for h in mine for g in h.gpus}))
            known = [h.gpu_mem_bytes for h in mine if h.gpu_mem_bytes is not None]
            seen = {os.path.relpath(w.path, root) for (pid, _), w in self._writes.items() if pid in launch.pids}
            writes = sorted(
                seen
                or {why.removeprefix("writes ").split(" (+")[0] for p in launch.pids for why in [_why(view, p)] if why}
            )
            stray = next((view.strays[p] for p in launch.pids if p in view.strays), None)
            wrote = None if launch.current else self.wrote(launch.pids, now)
            if wrote is not None and stray is None:
                for h in mine:
                    if h.reason is None:
                        changed[h.pid] = replace(h, evidence=f"{h.evidence}; {wrote}")
            if not launch.current and busy is not None and mine and stray is None:
                stray = (
                    f"the new run failed: {busy.recent[-1].text[:120] if busy.recent else 'CUDA busy or unavailable'} "
                    f"({hhmm(busy.last, now)}) while this earlier attempt, whose launcher is gone, holds "
                    f"GPU {', '.join(map(str, gpus))}"
                )
                for h in mine:
                    changed[h.pid] = replace(h, reason=stray, evidence=None, in_run=False)
            out.append(
                Attempt(
                    pids=launch.pids,
                    current=launch.current,
                    started_at=launch.started_at,
                    launcher_pid=launch.launcher,
                    launcher=self.launcher_name(launch),
                    launcher_alive=launch.launcher_alive,
                    launcher_gone_at=None if launch.launcher_alive else self.gone_at(launch.launcher),
                    orphaned=launch.orphaned,
                    writes=tuple(writes),
                    last_write_at=self.last_write(launch.pids),
                    gpus=gpus,
                    gpu_mem_bytes=sum(known) if known else None,
                    stray=stray,
                )
            )
        return tuple(out), tuple(changed.get(h.pid, h) for h in holders)


def _why(view: RunView, pid: int) -> str | None:
    why = view.earlier.get(pid) or view.members.get(pid)
    return why if why is not None and why.startswith("writes ") else None
