"""The one actions API — plan, execute, verify — used by the dashboard keys, `rlwatch act` and watchdog policies.

``prepare`` looks at the host afresh and returns a plan (refused, with the reason, when it must not run);
``execute`` carries out a plan a person or a policy confirmed. Execution trusts nothing from planning time: each
target is signalled only if it is still the same process (pid and start time) and still not protected, so a plan
that sat in a confirmation dialog cannot hit a process that took a reused pid. Started processes are argv lists in
their own session with output appended to a log. Every step goes to the audit log. Verification then waits, with a
deadline, for the host itself to show the fix — server healthy, workers back with fresh memory, no stray holder
left (and the GPU memory back), steps past the resume step — because "the command ran" is not "the run is fixed".
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlwatch.common.state import ActionPlan, ActionResult, GpuHolder, Snapshot
from rlwatch.common.statefiles import StateDir, append_problem
from rlwatch.common.words import plural
from rlwatch.discover.load import resolve
from rlwatch.engine.engine import Engine
from rlwatch.remedy.actions.audit import AuditLog
from rlwatch.remedy.actions.guard import protected_reason
from rlwatch.remedy.actions.identity import CREATE_TIME_TOLERANCE_S, Ident, same_process
from rlwatch.remedy.actions.plan import (
    ACTION_NAMES,
    KILL_ZOMBIES,
    RESTART_SERVER,
    RESTART_WORKERS,
    RESUME,
    Planner,
    Prepared,
    Relaunch,
    Stop,
    gpu_used_total,
    refused,
)
from rlwatch.remedy.actions.spawn import SpawnError, spawn, start_problem
from rlwatch.remedy.actions.stopper import ALREADY_GONE, REUSED, StopReport, stop_tree
from rlwatch.sources.membership import RUN, STRAY
from rlwatch.sources.server import ServerProbe

Progress = Callable[[str], None]
POLL_S = 0.25
KILL_VERIFY_S = 10.0  # a killed CUDA process frees its device and memory within about 0.2 s
_KEEP_PLANS = 16  # plans waiting for a confirmation; older ones are planned again if executed


def _quiet(_message: str) -> None:
    return None


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1024**2:.0f} MB"


def _gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"


def _names(only: Sequence[str] | None) -> tuple[str, ...] | None:
    if only is None:
        return None
    return (only,) if isinstance(only, str) else tuple(dict.fromkeys(only))


def _identities(plan: ActionPlan) -> set[tuple[int | None, float | None]]:
    return {(t.pid, None if t.create_time is None else round(t.create_time, 2)) for t in plan.targets}


@dataclass(frozen=True)
class _Fatal:
    """A verification check's verdict that waiting longer cannot change (the started process already exited)."""

    why: str


Check = Callable[[Snapshot], str | _Fatal | None]  # None: fixed; str: not yet, and why


class Actions:
    """Plans and carries out the four actions on one engine's host; one action runs at a time."""

    def __init__(self, engine: Engine, *, audit: AuditLog | None = None) -> None:
        self.engine = engine
        self.cfg = engine.cfg
        path = self.cfg.actions.audit_log or ".rlwatch/audit.jsonl"
        self.audit = audit or AuditLog(resolve(engine.run_dir, path), engine.clock)
        self._planner = Planner(engine, self.protected)
        self._plans: OrderedDict[int, Prepared] = OrderedDict()
        self._running = threading.Lock()

    @property
    def readonly(self) -> bool:
        return self.cfg.actions.readonly or self.engine.readonly

    def protected(self, pid: int) -> str | None:
        """Why ``pid`` must never be touched (pid 1, rlwatch and its parents, daemons, other users than those a
        trusted file's ``actions.other_users`` names under ``allow_other_users``), or None."""
        return protected_reason(pid, protected_names=self.cfg.actions.protected_names, owners=self.engine.owners)

    # ------------------------------------------------------------------------------------------------ planning
    def prepare(
        self,
        action: str,
        *,
        force: bool = False,
        only: Sequence[str] | None = None,
        pids: Sequence[int] | None = None,
    ) -> Prepared:
        """Plan ``action`` from a fresh look at the host. ``only`` names the workers restart-workers restarts
        (the others ignore it); ``force`` lets resume run beside a live trainer or disagreeing recover info;
        ``pids`` are GPU holders a person names for kill-zombies (the only way an *unknown* holder is stopped)."""
        if action not in ACTION_NAMES:
            return refused(action, f"unknown action {action!r}; choose from: {', '.join(ACTION_NAMES)}")
        if self.cfg.provenance.distrust is not None:
            return refused(action, self.cfg.provenance.distrust)
        if self.readonly:
            return refused(action, "read-only mode: actions are disabled")
        try:
            snap = self._fresh(probe=True)
            names = _names(only) if action == RESTART_WORKERS else None
            named = tuple(dict.fromkeys(pids)) if pids and action == KILL_ZOMBIES else None
            prepared = self._planner.build(action, snap, force=force, only=names, pids=named)
        except Exception as exc:  # a plan that cannot be built is refused in one line, never a traceback
            return refused(action, f"could not plan: {type(exc).__name__}: {exc}")
        if prepared.plan.runnable and (why := self._preflight(prepared)) is not None:
            return refused(action, why)
        if prepared.plan.runnable:
            self._plans[id(prepared.plan)] = prepared
            while len(self._plans) > _KEEP_PLANS:
                self._plans.popitem(last=False)
        return prepared

    def _preflight(self, prepared: Prepared) -> str | None:
        """Whether everything the plan needs after its first signal can be had, checked before it: the audit log can
        be written, the state directory used, and every process it stops can be started again (its program found,
        its working directory and log safe). Otherwise a worker would be left stopped, with no record of why."""
        if why := append_problem(self.audit.path):
            return f"the audit log cannot be written, and nothing is signalled without a record: {why}"
        if why := StateDir(self.engine.run_dir).check():
            return f"rlwatch's state directory cannot be used: {why}"
        for launch in prepared.launches:
            log = Path(launch.log) if launch.log else None
            if why := start_problem(launch.argv, cwd=launch.cwd, env=launch.env, log_path=log):
                return f"{launch.name} could not be started again, so nothing is stopped: {why}"
            if launch.err_log and (why := append_problem(Path(launch.err_log))):
                return f"{launch.name} could not be started again, so nothing is stopped: its stderr log: {why}"
        return None

    def plan(self, action: str, *, force: bool = False, only: Sequence[str] | None = None) -> ActionPlan:
        return self.prepare(action, force=force, only=only).plan

    def _recall(self, plan: ActionPlan) -> Prepared:
        """The prepared form of a plan this object made; a plan from elsewhere is planned again and must match."""
        kept = self._plans.pop(id(plan), None)
        if kept is not None and kept.plan is plan:
            return kept
        named = (*plan.targets, *plan.start) if plan.action == RESTART_WORKERS else ()
        only = tuple(dict.fromkeys(t.role for t in named if t.role)) or None
        pids = [t.pid for t in plan.targets if t.pid is not None and t.named] if plan.action == KILL_ZOMBIES else None
        again = self.prepare(plan.action, only=only, pids=pids or None)
        if again.plan.runnable and _identities(again.plan) != _identities(plan):
            return refused(plan.action, "the host changed since this plan was made; plan again")
        return again

    # ----------------------------------------------------------------------------------------------- executing
    def execute(self, plan: ActionPlan | Prepared, progress: Progress | None = None) -> ActionResult:
        """Carry out a confirmed plan and verify the fix; blocking, never raises.

        ``plan`` is what :meth:`prepare` returned (a policy passes it straight on) or the :class:`ActionPlan` a
        person confirmed; a plan this object did not make is planned again and must name the same processes.
        ``progress`` gets one line per step. A second call while one runs is answered at once, doing nothing.
        """
        action = plan.plan.action if isinstance(plan, Prepared) else plan.action
        if not self._running.acquire(blocking=False):
            return ActionResult(action, False, f"{action}: another action is still running; nothing was done")
        try:
            prepared = plan if isinstance(plan, Prepared) else self._recall(plan)
            why = prepared.plan.refused
            if why is None and self.readonly:
                why = self.cfg.provenance.distrust or "read-only mode: actions are disabled"
            if why is not None:
                message = f"{action}: refused: {why}"
                self.audit.record(action, "result", ok=False, message=message)
                return ActionResult(action, False, message)
            return _Execution(self, prepared, progress or _quiet).run()
        except Exception as exc:  # whatever happened, the caller gets a result a person can read
            message = f"{action}: FAILED — internal error: {type(exc).__name__}: {exc}"
            self.audit.record(action, "result", ok=False, message=message)
            return ActionResult(action, False, message)
        finally:
            self._running.release()

    # ------------------------------------------------------------------------------------------- looking again
    def _fresh(self, *, probe: bool = False) -> Snapshot:
        """The host as it is now. While the engine's loops run, their latest snapshot (sampling from here too
        would race them); otherwise one synchronous round of the sources."""
        if self.engine.running:
            return self.engine.snapshot()
        self.engine.drain_logs()
        self.engine.sample(fresh_holders=True)  # a plan or a check must never rest on a cached holder list
        if probe:
            self.engine.probe_server()
        return self.engine.build()

    def _sampled_since(self, snap: Snapshot, since: float, sources: Sequence[str]) -> bool:
        if not self.engine.running:
            return True  # just sampled by _fresh
        status = {s.name: s.last_sample for s in snap.sources}
        return all((t := status.get(name)) is not None and t >= since for name in sources)

    def _wait(
        self, check: Check, timeout: float, *, since: float, sources: Sequence[str] = ("processes",)
    ) -> tuple[str | None, Snapshot]:
        """Poll the host until ``check`` says fixed (None), gives up (a fatal verdict), or the deadline passes;
        only snapshots sampled after ``since`` count, so a stale picture never passes for a fixed host."""
        deadline = time.monotonic() + timeout
        while True:
            snap = self._fresh()
            verdict: str | _Fatal | None = "waiting for a fresh look at the host"
            if self._sampled_since(snap, since, sources):
                verdict = check(snap)
                if verdict is None:
                    return None, snap
                if isinstance(verdict, _Fatal):
                    return verdict.why, snap
            if time.monotonic() >= deadline:
                return str(verdict), snap
            time.sleep(POLL_S)


class _Execution:
    """One run of one prepared plan: stop, start, verify, and the record of it all."""

    def __init__(self, owner: Actions, prepared: Prepared, say: Progress) -> None:
        self.owner = owner
        self.prepared = prepared
        self.action = prepared.plan.action
        self.cfg = owner.cfg
        self.clock = owner.engine.clock
        self.say = say
        self.details: list[str] = []
        self.problems: list[str] = []
        self.stopped: list[tuple[Stop, StopReport]] = []
        self.started: list[tuple[Relaunch, Ident]] = []
        self.steps_before = 0  # step lines counted before a resume's launch: only later ones prove progress
        self.run_pids = owner.engine.processes.run_pids() if self.action == KILL_ZOMBIES else set()
        self.roots = {s.pid for s in prepared.stops}

    def record(self, event: str, **fields: object) -> None:
        self.owner.audit.record(self.action, event, **fields)

    # ------------------------------------------------------------------------------------------------ the run
    def run(self) -> ActionResult:
        p = self.prepared
        if not self.owner.audit.record(
            self.action,
            "plan",
            targets=p.plan.targets,
            start=p.plan.start,
            steps=p.plan.steps,
            only=p.only,
            force=p.force,
        ):  # nothing is signalled without a record of it
            message = f"{self.action}: refused: nothing was done: {self.owner.audit.error}"
            return ActionResult(self.action, False, message)
        if p.rolling:
            for launch in p.launches:
                if all(self.stop(s) for s in p.stops if s.name == launch.name):
                    self.start(launch)
                else:
                    self.problems.append(f"{launch.name} was not started again: it could not be stopped")
        else:
            stopped = [self.stop(s) for s in p.stops]
            if all(stopped):
                if p.launches and self.action == RESUME:
                    self.steps_before = self._step_count()
                for launch in p.launches:
                    if not self.start(launch):
                        break
            elif p.launches:
                self.problems.append("nothing was started: not every target could be stopped")
        summary = self.verify()
        ok = not self.problems
        message = f"{self.action}: done — {summary}" if ok else f"{self.action}: FAILED — {self.problems[0]}"
        if len(self.problems) > 1:
            message += f" (and {plural(len(self.problems) - 1, 'more problem')} below)"
            self.details.extend(f"problem: {why}" for why in self.problems[1:])
        self.record("result", ok=ok, message=message, problems=self.problems)
        if self.owner.audit.error:
            self.details.append(f"audit log: {self.owner.audit.error}")
        return ActionResult(self.action, ok, message, tuple(self.details))

    def protection(self, pid: int) -> str | None:
        """Checked right before each signal: the guard's rules, and for GPU holders, the live run looked for again
        now — a process that has become the run's (or, unless a person named it, is no longer a sure stray) is
        left alone."""
        why = self.owner.protected(pid)
        if why is not None or self.action != KILL_ZOMBIES:
            return why
        if pid in self.run_pids:
            return "part of the live run (its role rule matches it or an ancestor)"
        verdict = self.owner.engine.live_run(fresh=True).verdict(pid)
        if verdict.status == RUN:
            return f"part of the live run: {verdict.why}"
        if pid in self.roots and not self.prepared.named and verdict.status != STRAY:
            return f"no longer a sure stray: {verdict.why}"
        return None

    def stop(self, stop: Stop) -> bool:
        self.say(f"stopping {stop.name} (pid {stop.pid})")
        report = stop_tree(
            Ident(stop.pid, stop.create_time), grace_s=self.cfg.actions.grace_s, protected=self.protection
        )
        self.stopped.append((stop, report))
        for proc in report.processes:
            root = proc.ident.pid == stop.pid
            self.record(
                "signal",
                target=stop.name,
                pid=proc.ident.pid,
                create_time=proc.ident.create_time,
                cmdline=proc.cmdline,
                signals=proc.signals,
                group_signals=report.group_signals if root else (),
                outcome=proc.outcome,
            )
            if not root and proc.outcome == ALREADY_GONE:
                continue  # an exited child waiting to be reaped: nothing happened to it
            who = f"{stop.name} (pid {proc.ident.pid})" if root else f"  its child pid {proc.ident.pid}"
            outcome = proc.outcome
            if proc.outcome == REUSED:
                outcome = "the pid now names a process started at another time: left alone"
            self.details.append(f"{who}: {outcome}")
            if not proc.gone:
                self.problems.append(f"pid {proc.ident.pid} ({stop.name}) was not stopped: {proc.outcome}")
        if report.error:
            self.problems.append(f"stopping {stop.name}: {report.error}")
        return report.ok

    def start(self, launch: Relaunch) -> bool:
        self.say(f"starting {launch.name}")
        log = Path(launch.log) if launch.log else None
        try:
            err = Path(launch.err_log) if launch.err_log else None
            ident = spawn(launch.argv, cwd=launch.cwd, env=launch.env, log_path=log, err_path=err)
        except SpawnError as exc:
            self.problems.append(str(exc))
            self.record("spawn", target=launch.name, argv=launch.argv, cwd=launch.cwd, outcome=str(exc))
            return False
        self.started.append((launch, ident))
        self.owner.engine.note_launched(ident.pid, ident.create_time)
        if log is not None:
            self.owner.engine.tailer.follow(str(log))  # what rlwatch started is followed, configured or not
        if launch.err_log:
            self.owner.engine.tailer.follow(launch.err_log)
        self.details.append(f"started {launch.name} as pid {ident.pid}" + (f", output to {launch.log}" if log else ""))
        self.record(
            "spawn",
            target=launch.name,
            argv=launch.argv,
            cwd=launch.cwd,
            source=launch.source,
            pid=ident.pid,
            create_time=ident.create_time,
            log=launch.log,
            outcome="started",
        )
        return True

    # ---------------------------------------------------------------------------------------------- verifying
    def verify(self) -> str:
        self.say("verifying")
        before = len(self.problems)
        verifiers = {
            KILL_ZOMBIES: self.verify_strays,
            RESTART_WORKERS: self.verify_workers,
            RESTART_SERVER: self.verify_server,
            RESUME: self.verify_resume,
        }
        summary = verifiers[self.action]()
        fixed = not self.problems
        self.details.append(("verified: " if fixed else "checked: ") + summary)
        self.record("verify", ok=fixed, message=summary if fixed else "; ".join(self.problems[before:]) or summary)
        return summary

    def _step_count(self) -> int:
        step = self.owner._fresh().events.get("step")
        return step.count if step else 0

    def verify_strays(self) -> str:
        gone = [
            Ident(s.pid, s.create_time)
            for s, report in self.stopped
            if report.ok and report.processes[0].outcome != REUSED
        ]
        replaced = [s.pid for s, report in self.stopped if report.processes and report.processes[0].outcome == REUSED]
        if replaced:  # the target went away and its pid now names another process: nothing was stopped for it
            self.problems.append(
                f"pid {', '.join(map(str, replaced))} ended and its number now belongs to another process, which was "
                "left alone; plan again"
            )
        t0 = self.clock.time()
        self.owner.engine.rescan_holders()  # the engine's list, and the dashboard's rows, from a scan after the stop

        def none_left(snap: Snapshot) -> str | None:
            # A fresh look at the host, never the engine's holder list: between its scans (up to 30 s on a quiet
            # run) that still listed the strays that had exited, and the verify said FAILED after they were gone.
            held = [i.pid for i in gone if same_process(i)]
            return f"still running: pid {', '.join(map(str, held))}" if held else None

        why, snap = self.owner._wait(none_left, KILL_VERIFY_S, since=t0, sources=())
        if why:
            self.problems.append(f"a stopped process still holds the device ({why})")
        glob = self.cfg.gpu.device_glob
        left = [h for h in snap.zombies if not any(_same(h.pid, h.create_time, i) for i in gone) and _alive(h)]
        planned = [Ident(s.pid, s.create_time) for s in self.prepared.stops]
        new = [h for h in left if not any(_same(h.pid, h.create_time, i) for i in planned)]
        if new:  # the planned ones that are left were reported when they could not be stopped
            pids = ", ".join(str(h.pid) for h in new)
            self.problems.append(
                f"{plural(len(new), 'stray holder')} not in this plan on {glob}: pid {pids}; plan again"
            )
        summary = f"{plural(len(gone), 'stray GPU holder')} gone; " + (
            f"no stray process holds {glob}" if not left else f"{plural(len(left), 'stray')} left"
        )
        return summary + self._memory_back(gone, t0)

    def _memory_back(self, gone: list[Ident], t0: float) -> str:
        """On a real GPU, the memory the strays held must show up free again."""
        before = self.prepared.gpu_used_before
        if before is None:
            return ""
        freed = sum(s.gpu_mem_bytes or 0 for s in self.prepared.stops if Ident(s.pid, s.create_time) in gone)

        def memory_back(snap: Snapshot) -> str | None:
            used = gpu_used_total(snap)
            if used is None:
                return "GPU memory not readable"
            if freed and before - used < freed // 2:
                return f"{_gib(before - used)} of {_gib(freed)} back"
            return None

        why, snap = self.owner._wait(memory_back, KILL_VERIFY_S if freed else 0.0, since=t0, sources=("gpu",))
        used = gpu_used_total(snap)
        if why and freed:
            self.problems.append(f"the GPU memory of the strays did not come back: {why}")
        if used is None:
            return ""
        return f"; GPU memory in use {_gib(before)} → {_gib(used)}"

    def verify_workers(self) -> str:
        if not self.started:
            return "no worker was started"
        t0 = self.clock.time()
        was = {s.name: s.rss_bytes for s in self.prepared.stops}

        def back(snap: Snapshot) -> str | _Fatal | None:
            live = {p.pid: p for p in snap.processes if p.alive}
            waiting = []
            for launch, ident in self.started:
                if not same_process(ident):
                    return _Fatal(f"{launch.name} (pid {ident.pid}) exited right after it started; see {launch.log}")
                p = live.get(ident.pid)
                if p is None or p.role != launch.role or p.rss_bytes is None:
                    waiting.append(launch.name)
            return f"not seen running yet: {', '.join(waiting)}" if waiting else None

        why, snap = self.owner._wait(back, self.cfg.actions.verify_timeout_s, since=t0)
        if why:
            self.problems.append(f"workers did not come back: {why}")
            return "workers did not come back"
        now = {p.pid: p for p in snap.processes}
        parts = []
        for launch, ident in self.started:
            rss, old = now[ident.pid].rss_bytes, was.get(launch.name)
            parts.append(f"{launch.name} pid {ident.pid} RSS {_mb(rss)}" + (f" (was {_mb(old)})" if old else ""))
            if old and rss is not None and rss >= old:
                self.problems.append(f"{launch.name}'s memory is not fresh: RSS {_mb(rss)}, was {_mb(old)}")
        return f"{plural(len(self.started), 'worker')} running again with fresh memory: " + ", ".join(parts)

    def verify_server(self) -> str:
        if not self.started:
            return "the server was not started"
        launch, ident = self.started[0]
        probe = ServerProbe(self.cfg.server, self.clock)  # our own probe: the engine's may be minutes stale
        started = time.monotonic()
        deadline = started + self.cfg.server.start_timeout_s
        while True:
            state = probe.probe(process_alive=same_process(ident), pid=ident.pid)
            if state.up:
                took = time.monotonic() - started
                return f"server pid {ident.pid} healthy at {self.cfg.server.url} after {took:.1f}s"
            if not state.process_alive:
                self.problems.append(f"the server (pid {ident.pid}) exited before it was healthy; see {launch.log}")
                return "server exited"
            if time.monotonic() >= deadline:
                self.problems.append(f"the server did not become healthy within {self.cfg.server.start_timeout_s:g}s")
                return "server not healthy"
            time.sleep(POLL_S)

    def verify_resume(self) -> str:
        if not self.started:
            return "nothing was started"
        launch, ident = self.started[0]
        target = self.prepared.resume_step
        watch_trainer = any(r.role == "trainer" for r in self.cfg.processes)
        seen_trainer: list[int] = []

        def advancing(snap: Snapshot) -> str | _Fatal | None:
            trainers = [
                p
                for p in snap.processes
                if p.role == "trainer" and p.started_at >= ident.create_time - CREATE_TIME_TOLERANCE_S
            ]
            seen_trainer.extend(p.pid for p in trainers if p.alive and p.pid not in seen_trainer)
            step_kind = snap.events.get("step")
            fresh = (step_kind.count if step_kind else 0) > self.steps_before
            if watch_trainer and not seen_trainer:
                if not same_process(ident):
                    return _Fatal(f"{launch.name} (pid {ident.pid}) exited before a trainer started; see {launch.log}")
                return "the trainer is not running yet"
            step = snap.training.last_step if snap.training else None
            if not fresh:
                if watch_trainer and not any(p.alive for p in trainers):
                    return _Fatal("the trainer exited before it logged a step")
                return "no step logged since the resume"
            if target is not None and (step is None or step <= target):
                return f"at step {step}, waiting for it to pass {target}"
            return None

        t0 = self.clock.time()
        why, snap = self.owner._wait(advancing, self.cfg.actions.verify_timeout_s, since=t0)
        step = snap.training.last_step if snap.training else None
        if why:
            self.problems.append(
                f"training did not advance past step {target} in time ({why})"
                if target is not None
                else f"training did not log a step in time ({why})"
            )
            return "training not advancing"
        trainer = f"trainer pid {seen_trainer[0]}" if seen_trainer else "trainer"
        return f"{trainer} running, step {step}" + (f" (past resume step {target})" if target is not None else "")


def _alive(h: GpuHolder) -> bool:
    """The holder's process still runs (a fresh look: the engine's list may be a scan old)."""
    return same_process(Ident(h.pid, h.create_time))


def _same(pid: int, create_time: float, ident: Ident) -> bool:
    return pid == ident.pid and abs(create_time - ident.create_time) <= CREATE_TIME_TOLERANCE_S
