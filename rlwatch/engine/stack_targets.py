"""Where the run's processes stand: which of them have a Python stack to read (its members' Python processes and the
inference server's, each labelled by its rank where known), the stacks read on a hang, the sampler that reads them
while the run lives, and the ranks a job's view follows.

Reading stacks is the one part that may take seconds (py-spy): the sampler has a thread of its own, and a capture
on a hang is taken once per hang.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlwatch.common.state import Snapshot, StackReport
from rlwatch.engine.tracking import RunTracking
from rlwatch.sources import procfs
from rlwatch.sources.membership import RunView
from rlwatch.sources.processes import program_label
from rlwatch.sources.sampler import StackSampler, may_read
from rlwatch.sources.stacks import StackTarget, capture, rank_label


class StackTargets(RunTracking):
    """The run's stacks: whose to read, the capture on a hang, and the sampler's targets."""

    def _setup_stacks(self) -> None:
        """The stacks read so far, and the sampler (when configured) that follows the run's ranks."""
        self._stacks: StackReport | None = None
        self._stacks_for: float | None = None  # the hang (its since) whose stacks were read
        # The stacks sampled while the run lives, on a thread of its own (sources/sampler): never in the way of this
        # engine's loops, whatever py-spy takes.
        scfg = self.cfg.stacks
        self.stack_sampler = (
            StackSampler(
                self._sampled_targets,
                self.clock,
                interval_s=scfg.interval_s,
                cpu_budget=scfg.cpu_budget,
                history=scfg.history,
                run_owner=_owner(self.run_dir),
                proc_root=self._proc_root,
                method=scfg.method,
            )
            if scfg.sample
            else None
        )

    def _rank_candidates(self) -> list[tuple[int, float]]:
        """The run's processes that may be ranks: those the stack sampler follows, else (a one-shot look) the run's
        Python processes."""
        sampled = self.stack_sampler.state() if self.stack_sampler is not None and self.running else None
        if sampled is not None:
            return [(p.pid, p.create_time) for p in sampled.processes if p.alive]
        view = self._view
        if view is None:
            return []
        with self._lock:
            started = {p.pid: p.started_at for p in self._procs if p.alive}
        return [(t.pid, started.get(t.pid, 0.0)) for t in self.stack_targets(view)]

    def stack_targets(self, view: RunView | None = None) -> list[StackTarget]:
        """The live run's Python processes (its members, with evidence), each labelled by its rank where known, and
        the host's inference server's Python processes (its scheduler: SGLang's and vLLM's are its children)."""
        view = view or self.live_run()
        with self._lock:
            procs = {p.pid: p for p in self._procs if p.alive}
        pids = set(view.members) - view.weak  # a process that only reads the logs is not a rank
        for server in procs.values():
            if server.role == "server":
                pids |= {server.pid, *_children(server.pid, self._proc_root)}
        out = []
        owner = _owner(self.run_dir)
        for pid in sorted(pids):
            if not may_read(pid, owner, self._proc_root):
                continue  # another user's process: never read, even by root
            argv = procfs.read_cmdline(pid, self._proc_root)
            exe = os.path.basename(argv[0]) if argv else ""
            titled = bool(argv) and argv[0].lower().startswith(("ray::", "sglang::", "vllm::"))
            if not (exe.startswith("python") or titled or "python" in exe):
                continue
            p = procs.get(pid)
            name = p.name if p is not None else program_label(argv) if argv else "?"
            fallback = name if str(pid) in name else f"{name} (pid {pid})"
            out.append(StackTarget(pid, rank_label(pid, fallback, self._proc_root)))
        return out

    def _sampled_targets(self) -> list[StackTarget]:
        """The sampler's targets: the run as the sampling loop last found it (never assessed on the sampler's
        thread), none before it has."""
        view = self._view
        return [] if view is None else self.stack_targets(view)

    def capture_stacks(self, why: str) -> StackReport:
        """Read every Python process of the run's stack now (py-spy, never pausing them), keep the dump in the run's
        ``.rlwatch/stacks/`` and on the next snapshots. Blocking: seconds at most."""
        report = capture(self.stack_targets(), why, self.run_dir, self.clock.time())
        with self._lock:
            self._stacks = report
        return report

    def _hang_unread(self, snap: Snapshot) -> bool:
        rs = snap.run_state
        return rs is not None and rs.state == "hung" and self._stacks_for != rs.since


def _owner(path: Path) -> int | None:
    """The run directory's owner: the only user besides rlwatch's own whose processes the sampler may read."""
    try:
        return path.stat().st_uid
    except OSError:
        return None


def _children(pid: int, proc_root: str) -> list[int]:
    """A process's direct children, from /proc/PID/task/PID/children (none where the kernel does not keep it)."""
    try:
        with open(f"{proc_root}/{pid}/task/{pid}/children", "rb") as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []
