"""The one actions API — plan, execute, verify — used by the dashboard keys, `rlwatch act` and watchdog policies.

Execution re-checks everything: each target is signalled only if it is still the same process (pid and start time)
and still not protected; started processes are argv lists in their own session with output appended to a log the
engine tails; every step goes to the audit log. Verification waits, with a deadline, for the host to show the fix
(server healthy, workers back with fresh memory, no stray holder left, steps past the resume step).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from rlwatch.actions.audit import AuditLog
from rlwatch.actions.guard import protected_reason
from rlwatch.actions.identity import Ident
from rlwatch.actions.plan import (
    ACTION_NAMES,
    KILL_ZOMBIES,
    RESTART_SERVER,
    RESTART_WORKERS,
    RESUME,
    Launch,
    Prepared,
    Stop,
    refused,
    stop_words,
    target_of_holder,
    target_of_launch,
    target_of_process,
)
from rlwatch.actions.spawn import SpawnError, spawn
from rlwatch.actions.stopper import StopReport, stop_tree
from rlwatch.engine import Engine, resolve
from rlwatch.sources.recover import agree
from rlwatch.state import ActionPlan, ActionResult, ProcessInfo, Snapshot

Progress = Callable[[str], None]


class Actions:
    def __init__(self, engine: Engine, *, audit: AuditLog | None = None) -> None:
        self.engine = engine
        self.cfg = engine.cfg
        path = self.cfg.actions.audit_log or ".rlwatch/audit.jsonl"
        self.audit = audit or AuditLog(resolve(engine.run_dir, path), engine.clock)
        self._prepared: dict[int, Prepared] = {}

    # ------------------------------------------------------------------------------------------------ planning
    def _fresh(self) -> Snapshot:
        """A fresh look at the host: plans must not be built from a stale snapshot."""
        if not self.engine.running:
            self.engine.drain_logs()
            self.engine.sample()
            self.engine.probe_server()
            return self.engine.build()
        return self.engine.snapshot()

    def prepare(self, action: str, *, force: bool = False) -> Prepared:
        if action not in ACTION_NAMES:
            return refused(action, f"unknown action {action!r}; choose from: {', '.join(ACTION_NAMES)}")
        if self.cfg.actions.readonly:
            return refused(action, "read-only mode: actions are disabled")
        snap = self._fresh()
        builders = {
            KILL_ZOMBIES: self._plan_kill_zombies,
            RESTART_WORKERS: self._plan_restart_workers,
            RESUME: lambda s: self._plan_resume(s, force=force),
            RESTART_SERVER: self._plan_restart_server,
        }
        prepared = builders[action](snap)
        self._prepared[id(prepared.plan)] = prepared
        return prepared

    def plan(self, action: str, *, force: bool = False) -> ActionPlan:
        return self.prepare(action, force=force).plan

    def _protected(self, pid: int) -> str | None:
        return protected_reason(
            pid,
            protected_names=self.cfg.actions.protected_names,
            allow_other_users=self.cfg.actions.allow_other_users,
        )

    def _plan_kill_zombies(self, s: Snapshot) -> Prepared:
        now = s.time
        strays = [h for h in s.zombies if h.protected is None and self._protected(h.pid) is None]
        if not strays:
            left = [h for h in s.holders if not h.in_run]
            why = "no stray GPU holders"
            if left:
                why += " (" + "; ".join(f"pid {h.pid}: {h.protected or 'protected'}" for h in left[:4]) + ")"
            return refused(KILL_ZOMBIES, why)
        steps = (
            stop_words(self.cfg.actions.grace_s),
            f"then check that no stray process holds {self.cfg.gpu.device_glob}"
            + (" and that GPU memory came back" if s.gpu and s.gpu.backend == "nvml" else ""),
            "never touched: the live run, PID 1, rlwatch and its parents, NVIDIA/DCGM daemons, other users",
        )
        plan = ActionPlan(KILL_ZOMBIES, tuple(target_of_holder(h, now) for h in strays), steps)
        stops = tuple(Stop(h.pid, h.create_time, f"stray {h.pid}", reason=h.reason) for h in strays)
        return Prepared(plan, stops=stops)

    def _launch_for(self, p: ProcessInfo) -> Launch | None:
        rule = self.engine.processes.rule_for(p.name)
        record = self.engine.processes.launch_record(p.name)
        log = str(resolve(self.engine.run_dir, rule.log)) if rule and rule.log else None
        if rule and rule.command:
            cwd = str(resolve(self.engine.run_dir, rule.cwd)) if rule.cwd else (record.cwd if record else None)
            env = dict(record.env) if record and record.env else None
            return Launch(p.name, p.role, tuple(rule.command), cwd, env, log, "configured")
        if record and record.argv:
            env = dict(record.env) if record.env else None
            return Launch(p.name, p.role, tuple(record.argv), record.cwd, env, log, "recorded when first seen")
        return None

    def _plan_restart_workers(self, s: Snapshot) -> Prepared:
        workers = [p for p in s.processes if p.role == "worker" and p.alive]
        if not workers:
            return refused(RESTART_WORKERS, "no running worker processes found")
        launches = []
        for p in workers:
            launch = self._launch_for(p)
            if launch is None:
                return refused(RESTART_WORKERS, f"no start command known for {p.name} (pid {p.pid})")
            launches.append(launch)
        blocked = [(p, why) for p in workers if (why := self._protected(p.pid))]
        if blocked:
            p, why = blocked[0]
            return refused(RESTART_WORKERS, f"{p.name} (pid {p.pid}) is protected: {why}")
        steps = (
            stop_words(self.cfg.actions.grace_s),
            "start each worker again with its command line, working directory and environment, in a new session, "
            "output appended to its log",
            "check each is running again with fresh memory",
        )
        targets = tuple(target_of_process(p, s.time, "worker") for p in workers)
        plan = ActionPlan(RESTART_WORKERS, targets, steps, start=tuple(target_of_launch(x) for x in launches))
        stops = tuple(Stop(p.pid, p.create_time, p.name, p.role) for p in workers)
        return Prepared(plan, stops=stops, launches=tuple(launches))

    def _server_launch(self, s: Snapshot) -> Launch | None:
        srv = self.cfg.server
        log = str(resolve(self.engine.run_dir, srv.log)) if srv.log else None
        if srv.command:
            cwd = str(resolve(self.engine.run_dir, srv.cwd)) if srv.cwd else str(self.engine.run_dir)
            return Launch("server", "server", tuple(srv.command), cwd, None, log, "configured")
        live = [p for p in s.processes if p.role == "server"]
        record = self.engine.processes.launch_record(live[0].name) if live else None
        if record is None:
            record = self.engine.processes.launch_record("server")
        if record and record.argv:
            env = dict(record.env) if record.env else None
            return Launch("server", "server", tuple(record.argv), record.cwd, env, log, "recorded when first seen")
        return None

    def _plan_restart_server(self, s: Snapshot) -> Prepared:
        if not self.cfg.server.url:
            return refused(RESTART_SERVER, "no inference server configured (server.url)")
        launch = self._server_launch(s)
        if launch is None:
            return refused(RESTART_SERVER, "no start command known for the inference server (server.command)")
        live = [p for p in s.processes if p.role == "server" and p.alive]
        for p in live:
            if why := self._protected(p.pid):
                return refused(RESTART_SERVER, f"server pid {p.pid} is protected: {why}")
        steps = []
        if live:
            steps.append(stop_words(self.cfg.actions.grace_s))
        steps.append("start the server in a new session, output appended to its log")
        steps.append(f"wait up to {self.cfg.server.start_timeout_s:g}s for {self.cfg.server.url} to answer healthy")
        plan = ActionPlan(
            RESTART_SERVER,
            tuple(target_of_process(p, s.time, "inference server") for p in live),
            tuple(steps),
            start=(target_of_launch(launch),),
        )
        stops = tuple(Stop(p.pid, p.create_time, p.name, p.role) for p in live)
        return Prepared(plan, stops=stops, launches=(launch,))

    def _plan_resume(self, s: Snapshot, *, force: bool) -> Prepared:
        trainers = [p for p in s.processes if p.role == "trainer" and p.alive]
        if trainers and not force:
            t = trainers[0]
            return refused(RESUME, f"the trainer is alive (pid {t.pid}); resuming would start a second run (--force)")
        a = self.cfg.actions
        launch: Launch | None = None
        if a.resume_command:
            cwd = str(resolve(self.engine.run_dir, a.resume_cwd)) if a.resume_cwd else str(self.engine.run_dir)
            log = str(resolve(self.engine.run_dir, a.resume_log)) if a.resume_log else None
            launch = Launch("launcher", "launcher", tuple(a.resume_command), cwd, None, log, "configured")
        else:
            record = self.engine.processes.launch_record("launcher")
            if record and record.argv:
                env = dict(record.env) if record.env else None
                launch = Launch(
                    "launcher", "launcher", tuple(record.argv), record.cwd, env, None, "recorded when first seen"
                )
        if launch is None:
            return refused(RESUME, "no launch command known (actions.resume_command, or a launcher seen running)")
        steps: list[str] = []
        resume_step = None
        if s.recover:
            r = s.recover
            resume_step = r.resume_global_step
            problem = agree(r, s.checkpoint.latest if s.checkpoint else None)
            if problem and not force:
                return refused(RESUME, f"recover info and the latest checkpoint disagree: {problem} (--force)")
            steps.append(
                f"training resumes at global step {r.resume_global_step} (epoch {r.resume_epoch}, "
                f"step {r.resume_epoch_step}) from {r.path}"
            )
        else:
            steps.append("no recover info found: the launcher decides where training starts")
        stale = [p for p in s.processes if p.alive and p.role in ("launcher", "trainer")]
        for p in stale:
            if why := self._protected(p.pid):
                return refused(RESUME, f"{p.name} (pid {p.pid}) is protected: {why}")
        if stale:
            steps.append("stop what is left of the old run first: " + stop_words(a.grace_s))
        steps.append("run the launch command in a new session")
        if resume_step is not None:
            steps.append(f"check within {a.verify_timeout_s:g}s that the trainer runs and steps pass {resume_step}")
        plan = ActionPlan(
            RESUME,
            tuple(target_of_process(p, s.time, "left over from the stopped run") for p in stale),
            tuple(steps),
            start=(target_of_launch(launch),),
        )
        stops = tuple(Stop(p.pid, p.create_time, p.name, p.role) for p in stale)
        return Prepared(plan, stops=stops, launches=(launch,), resume_step=resume_step)

    # ----------------------------------------------------------------------------------------------- executing
    def execute(self, plan: ActionPlan, progress: Progress | None = None) -> ActionResult:
        prepared = self._prepared.pop(id(plan), None)
        if prepared is None:
            prepared = self.prepare(plan.action)  # e.g. a plan from another process: re-plan, never trust it blindly
            if {t.pid for t in prepared.plan.targets} != {t.pid for t in plan.targets}:
                return ActionResult(plan.action, False, f"{plan.action}: the host changed since the plan; plan again")
        if not prepared.plan.runnable:
            return ActionResult(plan.action, False, f"{plan.action}: refused: {prepared.plan.refused}")
        say = progress or (lambda _m: None)
        action = plan.action
        self.audit.record(action, "plan", targets=[_target_dict(t) for t in prepared.plan.targets])
        details: list[str] = []
        ok = True
        for stop in prepared.stops:
            if why := self._protected(stop.pid):
                details.append(f"{stop.name} (pid {stop.pid}): left alone: {why}")
                self.audit.record(action, "signal", pid=stop.pid, outcome=f"refused: {why}")
                ok = False
                continue
            say(f"stopping {stop.name} (pid {stop.pid})")
            report = stop_tree(
                Ident(stop.pid, stop.create_time), grace_s=self.cfg.actions.grace_s, protected=self._protected
            )
            ok &= _record_stop(self.audit, action, stop, report, details)
        if not ok and action != KILL_ZOMBIES:
            msg = f"{action}: could not stop every target; nothing was started"
            self.audit.record(action, "result", ok=False, message=msg)
            return ActionResult(action, False, msg, tuple(details))
        started: list[tuple[Launch, Ident]] = []
        for launch in prepared.launches:
            say(f"starting {launch.name}")
            try:
                ident = spawn(
                    launch.argv, cwd=launch.cwd, env=launch.env, log_path=Path(launch.log) if launch.log else None
                )
            except SpawnError as exc:
                details.append(str(exc))
                self.audit.record(action, "spawn", argv=list(launch.argv), outcome=str(exc))
                msg = f"{action}: {exc}"
                self.audit.record(action, "result", ok=False, message=msg)
                return ActionResult(action, False, msg, tuple(details))
            started.append((launch, ident))
            details.append(f"started {launch.name} as pid {ident.pid}")
            self.audit.record(
                action,
                "spawn",
                argv=list(launch.argv),
                cwd=launch.cwd,
                pid=ident.pid,
                create_time=ident.create_time,
                log=launch.log,
            )
        say("verifying")
        verified, why = self._verify(prepared, started)
        details.append(why)
        self.audit.record(action, "verify", ok=verified, message=why)
        ok = ok and verified
        msg = f"{action}: {'done' if ok else 'FAILED'} — {why}"
        if self.audit.error:
            details.append(f"audit log: {self.audit.error}")
        self.audit.record(action, "result", ok=ok, message=msg)
        return ActionResult(action, ok, msg, tuple(details))

    # ---------------------------------------------------------------------------------------------- verifying
    def _wait(self, check: Callable[[Snapshot], str | None], timeout: float) -> tuple[bool, Snapshot]:
        """Poll fresh snapshots until ``check`` returns None (fixed) or the deadline passes."""
        deadline = time.monotonic() + timeout
        while True:
            snap = self._fresh()
            if check(snap) is None:
                return True, snap
            if time.monotonic() >= deadline:
                return False, snap
            time.sleep(0.2 if not self.engine.running else 0.3)

    def _verify(self, prepared: Prepared, started: list[tuple[Launch, Ident]]) -> tuple[bool, str]:
        action = prepared.plan.action
        a = self.cfg.actions
        if action == KILL_ZOMBIES:
            stopped = {s.pid for s in prepared.stops}

            def strays_left(s: Snapshot) -> str | None:
                left = [h.pid for h in s.zombies if h.pid in stopped]
                return f"still holding: {left}" if left else None

            ok, snap = self._wait(strays_left, 10.0)
            if not ok:
                return False, f"stray holders still present ({strays_left(snap)})"
            remaining = len(snap.zombies)
            extra = f"; {remaining} other stray(s) appeared since the plan" if remaining else ""
            return True, f"{len(stopped)} stray GPU holder(s) gone, device free of them{extra}"
        if action == RESTART_WORKERS:
            names = {launch.name for launch, _ in started}
            pids = {ident.pid for _, ident in started}

            def workers_back(s: Snapshot) -> str | None:
                live = {p.pid for p in s.processes if p.role == "worker" and p.alive}
                missing = pids - live
                return f"not seen yet: {sorted(missing)}" if missing else None

            ok, snap = self._wait(workers_back, min(a.verify_timeout_s, 30.0))
            if not ok:
                return False, f"workers did not come back ({workers_back(snap)})"
            rss = [p.rss_bytes or 0 for p in snap.processes if p.pid in pids]
            return True, f"{len(names)} worker(s) running again (RSS now {max(rss) / 1e6:.0f} MB at most)"
        if action == RESTART_SERVER:
            pid = started[0][1].pid if started else None

            def healthy(s: Snapshot) -> str | None:
                return None if s.server and s.server.up else "not healthy yet"

            ok, _ = self._wait(healthy, self.cfg.server.start_timeout_s)
            return ok, (f"server pid {pid} healthy at {self.cfg.server.url}" if ok else "server did not become healthy")
        # resume
        target = prepared.resume_step
        started_at = min((ident.create_time for _, ident in started), default=0.0)

        def advancing(s: Snapshot) -> str | None:
            trainers = [p for p in s.processes if p.role == "trainer" and p.alive and p.started_at >= started_at - 1]
            if not trainers:
                return "trainer not running yet"
            tr = s.training
            step = tr.last_step if tr else None
            fresh = tr is not None and tr.last_step_at is not None and tr.last_step_at >= started_at - 1
            if not fresh:
                return "no step logged since the resume"  # old steps in the log prove nothing
            if target is not None and (step is None or step <= target):
                return f"at step {step}"
            return None

        ok, snap = self._wait(advancing, a.verify_timeout_s)
        step = snap.training.last_step if snap.training else None
        if ok:
            return True, f"trainer running, step {step}" + (
                f" (past resume step {target})" if target is not None else ""
            )
        return False, f"training did not advance past step {target} in time ({advancing(snap)})"


def _target_dict(t: object) -> dict[str, object]:
    from dataclasses import asdict

    return asdict(t)  # type: ignore[call-overload, no-any-return]


def _record_stop(audit: AuditLog, action: str, stop: Stop, report: StopReport, details: list[str]) -> bool:
    ok = True
    for proc in report.processes:
        audit.record(
            action,
            "signal",
            pid=proc.ident.pid,
            create_time=proc.ident.create_time,
            cmdline=list(proc.cmdline),
            signals=list(proc.signals),
            outcome=proc.outcome,
        )
        if proc.outcome.startswith(("unkillable", "refused")):
            ok = False
        details.append(f"pid {proc.ident.pid}: {proc.outcome}")
    return ok


def is_root() -> bool:
    return os.geteuid() == 0
