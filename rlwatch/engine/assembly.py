"""Building the snapshot: the latest part of every source and the logs' count, put together under the engine's lock
into one immutable :class:`~rlwatch.common.state.Snapshot` and diagnosed in one call (engine/diagnosis), then handed
to whoever listens. Cheap and free of I/O: it runs after every chunk of log the log loop counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from rlwatch.common.state import LiveRun, Snapshot
from rlwatch.engine.attempts import busy_after
from rlwatch.engine.diagnosis import Context, run_diagnosis
from rlwatch.engine.host_round import HostRound
from rlwatch.sources.membership import STRAY, RunView


class Assembly(HostRound):
    """The snapshot made from the parts, diagnosed, and published to the listeners."""

    def build(self) -> Snapshot:
        """Assemble a snapshot from the latest parts and diagnose it. Cheap: no I/O."""
        with self._lock:
            now = self.clock.time()
            preview = self.preview if self.preview is not None and self.preview.ready else None
            tr = self.training.state(now)
            if preview is not None:
                tr = preview.training(tr, now)
            tr = replace(tr, knobs=self.knobs)
            gpu_idle = None
            if self._gpu and self._gpu.gpus:
                utils = [g.util for g in self._gpu.gpus if g.util is not None]
                gpu_idle = bool(utils) and max(utils) < 5
            trainer = [p for p in self._procs if p.role == "trainer"]
            trainer_alive = any(p.alive for p in trainer) if trainer else None
            uptime = None if self._container_started is None else now - self._container_started
            run_up = [now - p.started_at for p in self._procs if p.alive and p.role in ("launcher", "trainer")]
            events = self.counter.summaries() if preview is None else preview.events(self.counter)
            events = self.training.with_shape_steps(events)  # a step read by its shape is a step event too
            incidents = self.counter.incidents()
            # Older incidents are tallied by the main count alone: while a preview is shown, counts are partial.
            dropped = self.counter.dropped_incidents() if preview is None else ()
            if preview is not None:
                incidents = preview.incidents(incidents)
            server = self._server
            refused = events.get("connection_refused")
            if (
                server is not None
                and server.up is False
                and refused is not None
                and refused.first is not None
                # only a time the lines carried: an undated backlog line's bound is no "since"
                and (not refused.approximate or refused.first_by == refused.first)
                and math.isfinite(refused.first)
                and (self._server_last_up is None or refused.first > self._server_last_up)
                and (server.down_since is None or refused.first < server.down_since)
            ):
                # The refused connections in the logs tell when it really went away, better than the next probe.
                server = replace(server, down_since=refused.first)
            if server is not None and self._server_last_up is not None:
                server = replace(server, seen_up=True)
            holders = self._holders
            live_run = _live_run(self._view, gone=self._gone_members, looked_at=self._looked_at)
            if self._view is not None and live_run is not None:
                launch_start = min((x.started_at for x in self._view.launches if x.current), default=None)
                attempts, holders = self.attempts.records(self._view, holders, busy_after(events, launch_start), now)
                live_run = replace(live_run, attempts=attempts)
            snap = Snapshot(
                host=self.host,
                time=now,
                profile=self.cfg.profile,
                profile_evidence=self.cfg.provenance.profile,
                run_dir=str(self.run_dir),
                simulated=self.cfg.simulated,
                uptime_s=uptime,
                run_uptime_s=max(run_up) if run_up else None,
                events=events,
                incidents=incidents,
                dropped_incidents=dropped,
                training=tr,
                checkpoint=self._checkpoint,
                recover=self._recover,
                server=server,
                gpu=self._gpu,
                holders=holders,
                memory=self._memory,
                processes=self._procs,
                disk=self._disk,
                history=self._history,
                sources=tuple(self._status.values()),
                logs=self.tailer.files,
                progress_lines=tuple(self._progress_lines.values()),
                backlog=_reading(self.tailer.backlog_progress()),
                preview=preview.described if preview is not None else None,
                preview_numbered=preview is None or preview.numbered,
                watchdog=self._watchdog,
                live_run=live_run,
                endings=self._endings,
                stacks=self._stacks,
                sampling=self.stack_sampler.state() if self.stack_sampler is not None and self.running else None,
                kernel=self._kernel,
                limits=self._limits,
                learning=self.learning.state() if preview is None else preview.learning(self.learning.state()),
                ray=self._ray,
                gpu_activity=self.job_watch.activity(now),
                job=self.job_watch.job,
                flight=self.job_watch.flight,
                ras=self.job_watch.ras,
            )
            ctx = Context(
                thresholds=self.cfg.thresholds,
                missing_expected=tuple(self.processes.missing_expected()),
                starts=self._start_times(preview),
                trainer_alive=trainer_alive,
                resume_known=bool(self.cfg.actions.resume_command)
                or any(r.command for r in self.cfg.processes if r.role in ("launcher", "trainer")),
                gpu_idle=gpu_idle,
                no_run=self._no_run(),
                memory_limits=self._memory_limits(),
                server_start_timeout_s=self.cfg.server.start_timeout_s,
                server_grace_s=2 * self.cfg.server.interval_s,
                actions_off=self.cfg.provenance.distrust,
                progress_kinds=self._progress_kinds,
                host=self.cfg.host,
                learning=self.cfg.learning,
                stacks=self.cfg.stacks,
                seen=self._seen,
            )
            # The run's state, the findings and the one verdict (state, headline, remedy) every view renders.
            snap = run_diagnosis(snap, ctx).applied(snap)
            self._snapshot = snap
        for listener in list(self._listeners):
            listener(snap)
        return snap

    def _no_run(self) -> str | None:
        """Where discovery looked, while nothing of a training run has shown up since (no log, process, checkpoint)."""
        prov = self.cfg.provenance
        if prov.run_found:
            return None
        latest = self._checkpoint.latest if self._checkpoint else None
        if self.tailer.files or any(p.alive for p in self._procs) or latest is not None:
            return None
        return prov.looked_for or "looked for logs, checkpoints and training processes"

    def _memory_limits(self) -> dict[str, int]:
        limits: dict[str, int] = {}
        for rule in self.cfg.processes:
            if rule.memory_limit_bytes:
                for p in self._procs:
                    if p.role == rule.role:
                        limits[p.name] = rule.memory_limit_bytes
        return limits


def _reading(progress: tuple[int, int]) -> tuple[int, int] | None:
    """The backlog's progress while it is being read; None once read."""
    done, total = progress
    return progress if done < total else None


def _live_run(
    view: RunView | None, limit: int = 64, *, gone: Mapping[int, str] = {}, looked_at: float | None = None
) -> LiveRun | None:
    """The view's conclusion as a snapshot record: core evidence first, at most ``limit`` members; those ``gone``
    since the look are listed apart (the run died since), with when rlwatch looked."""
    if view is None:
        return None
    if gone:
        alive = {pid: why for pid, why in view.members.items() if pid not in gone}
        view = replace(view, members=alive, core={p: w for p, w in view.core.items() if p not in gone})
        dead = tuple(sorted(gone.items()))[:limit]
        record = _live_run(view, limit, looked_at=looked_at)
        if record is not None and not record.members:
            pids = ", ".join(str(pid) for pid, _ in dead[:8])
            record = replace(record, identified=False, why_unknown=f"no process of the run is alive: pid {pids} gone")
        return None if record is None else replace(record, gone=dead)
    core = [(pid, view.members[pid]) for pid in sorted(view.core) if pid in view.members]
    # A member only by working in the directory may be judged a leftover of an earlier attempt: not the live run.
    rest = [
        (pid, why)
        for pid, why in sorted(view.members.items())
        if pid not in view.core and view.verdict(pid).status != STRAY
    ]
    if view.identified and not core and not rest:
        left = ", ".join(str(pid) for pid in sorted(view.members)[:8])
        return LiveRun(
            False,
            f"no process of the live run is alive: the processes in its directory ({left}) are "
            "leftovers of an earlier attempt",
            None,
            (),
        )
    shown = tuple((core + rest)[:limit])
    weak = tuple(pid for pid, _ in shown if pid in view.weak)
    if shown and len(weak) == len(shown):
        # Only processes that stand in the directory or read its files: a person's `tail -f`, `less` or editor as
        # much as a leftover. They prove no life (the verdict counts none of them alive), so they are not called the
        # live run either; they are still listed, and judged as holders.
        who = "; ".join(view._describe(pid) for pid, _ in shown[:3])
        more = f"; and {len(shown) - 3} more" if len(shown) > 3 else ""
        why_unknown = (
            "no process shows it is the run (none writes under it, was started by rlwatch or matches a role); "
            f"those that only work in its directory or read its files prove no life: {who}{more}"
        )
        return LiveRun(False, why_unknown, None, shown, weak, looked_at=looked_at)
    return LiveRun(view.identified, view.unknown_reason, view.started_at, shown, weak, looked_at=looked_at)
