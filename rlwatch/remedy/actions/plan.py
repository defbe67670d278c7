"""Planning: what each action would do, built from a fresh look at the host. Planning never signals anything.

A plan lists every target with what a person needs to judge it (pid, user, age, command line, GPU memory, why it
is a target) and the processes that will be started. It is refused, with the reason, when it must not run: a
refusal that names what is in the way is worth more than an action that half-works on a production pod.

The :class:`Prepared` record carries the machine-readable half of a plan (identities to stop, argv lists to start,
the step a resume starts from) that the executor needs but a confirmation dialog does not show.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlwatch.common.redact import redact
from rlwatch.common.state import ActionPlan, ActionTarget, GpuHolder, GpuState, ProcessInfo, Snapshot
from rlwatch.common.words import plural
from rlwatch.discover.load import resolve
from rlwatch.engine.diagnosis.wording import human_bytes
from rlwatch.engine.engine import Engine
from rlwatch.sources import procfs
from rlwatch.sources.membership import others_words
from rlwatch.sources.processes import LaunchRecord
from rlwatch.sources.recover import agree

RESTART_WORKERS = "restart-workers"
KILL_ZOMBIES = "kill-zombies"
RESUME = "resume"
RESTART_SERVER = "restart-server"
ACTION_NAMES = (RESTART_WORKERS, KILL_ZOMBIES, RESUME, RESTART_SERVER)
CONFIGURED = "configured"
RECORDED = "recorded when first seen"
DEFAULT_LOG_DIR = ".rlwatch/logs"

Protected = Callable[[int], str | None]

# verl's hydra override that decides where a run starts (verl/trainer/config/ppo_trainer.yaml: trainer.resume_mode,
# auto | disable | resume_path; `+key=` adds a key, `++key=` adds or overrides one).
_RESUME_MODE = re.compile(r"^(\+{0,2})trainer\.resume_mode=")


def with_resume_mode(argv: Sequence[str], mode: str = "auto") -> tuple[tuple[str, ...], str | None]:
    """``argv`` with verl's ``trainer.resume_mode`` set to ``mode``: an override already there is replaced (its
    ``+``/``++`` kept, later duplicates dropped), else one is added at the end, where hydra reads overrides. Returns
    the new argv and the override it replaced (None: added)."""
    out: list[str] = []
    replaced: str | None = None
    for arg in argv:
        m = _RESUME_MODE.match(arg)
        if m is None:
            out.append(arg)
        elif replaced is None:
            replaced = arg
            out.append(f"{m.group(1)}trainer.resume_mode={mode}")
    if replaced is None:
        out.append(f"trainer.resume_mode={mode}")
    return tuple(out), replaced


@dataclass(frozen=True)
class Relaunch:
    """How to start one process: an argv list (never a shell string), where, with what environment, logging where."""

    name: str
    role: str
    argv: tuple[str, ...]
    cwd: str | None
    env: dict[str, str] | None = None
    log: str | None = None
    source: str = CONFIGURED  # CONFIGURED | RECORDED
    # The record its command line, working directory or environment came from: whose process that was is shown in
    # the plan, and a record of any other user than the one running rlwatch is refused.
    record: LaunchRecord | None = None
    err_log: str | None = None  # stderr, where it went to another file than stdout (None: beside stdout in log)


@dataclass(frozen=True)
class Stop:
    """One process to stop, named by (pid, start time), with what verification compares against afterwards."""

    pid: int
    create_time: float
    name: str
    role: str | None = None
    reason: str | None = None
    rss_bytes: int | None = None  # before the restart: a restarted worker's memory must be below this
    gpu_mem_bytes: int | None = None  # what NVML said it held: that much should come back


@dataclass(frozen=True)
class Prepared:
    """A plan plus the machine-readable parts the executor needs (kept out of the display record)."""

    plan: ActionPlan
    stops: tuple[Stop, ...] = ()
    launches: tuple[Relaunch, ...] = ()
    resume_step: int | None = None
    rolling: bool = False  # stop and start one process at a time, stops matched to launches by name
    gpu_used_before: int | None = None  # GPU memory in use over all GPUs when planned (NVML only)
    only: tuple[str, ...] | None = None
    force: bool = False
    named: tuple[int, ...] | None = None  # the GPU holders a person named for kill-zombies (--pid)


FORCE = " (only `rlwatch act resume --force` overrides this)"  # said the same way in a shell and on the dashboard


def refused(action: str, why: str) -> Prepared:
    return Prepared(ActionPlan(action=action, targets=(), steps=(), refused=why))


def target_of_process(p: ProcessInfo, now: float, reason: str | None = None) -> ActionTarget:
    return ActionTarget(
        pid=p.pid,
        create_time=p.create_time,
        user=p.user,
        age_s=max(0.0, now - p.started_at),
        cmdline=p.cmdline,
        role=p.name,
        reason=reason,
    )


def holder_gpus(h: GpuHolder) -> str:
    """Which GPUs a holder uses, and how that is known."""
    if not h.gpus:
        return f"holds {', '.join(h.devices)}"
    where = ", ".join(f"GPU {i}" for i in h.gpus)
    return f"uses {where}" + (
        " (per NVML)" if h.attribution == "nvml" else f" (by the device nodes it holds: {', '.join(h.devices)})"
    )


def target_of_holder(h: GpuHolder, now: float, *, named: bool = False) -> ActionTarget:
    why = f"named by you; rlwatch's view: {h.status}: {h.reason or h.evidence}" if named else f"stray: {h.reason}"
    return ActionTarget(
        pid=h.pid,
        create_time=h.create_time,
        user=h.user,
        age_s=max(0.0, now - h.create_time),
        cmdline=h.cmdline,
        gpu_mem_bytes=h.gpu_mem_bytes,
        role="GPU holder named by you" if named else "stray GPU holder",
        reason=f"{why}; {holder_gpus(h)}",
        named=named,
    )


def _who(uid: int | None) -> str:
    return "an unknown user" if uid is None else f"{procfs.user_name(uid)} (uid {uid})"


def env_difference(env: dict[str, str] | None, own: dict[str, str] | None = None) -> str | None:
    """How an environment a launch brings differs from rlwatch's own, in words, values redacted: what a person must
    see before a recorded environment (a ``PYTHONPATH``, an ``LD_PRELOAD``) runs with their rights. None when it
    brings none or the same."""
    if env is None:
        return None
    own = dict(os.environ) if own is None else own
    changed = [f"{k}={v}" for k, v in sorted(env.items()) if own.get(k) != v]
    unset = [f"{k} unset" for k in sorted(set(own) - set(env))]
    if not changed and not unset:
        return None
    words = changed + unset
    shown = "; ".join(w if len(w) <= 120 else w[:119] + "…" for w in words[:12])
    more = f" (+{len(words) - 12} more)" if len(words) > 12 else ""
    return redact(f"its environment differs from rlwatch's by: {shown}{more}")


def foreign_record(launch: Relaunch) -> str | None:
    """Why ``launch`` must not run because what it would run was recorded from another user's process, or None."""
    record = launch.record
    if record is None or record.uid == os.geteuid():
        return None
    return (
        f"the {launch.name}'s command was recorded from pid {record.pid} of {_who(record.uid)}, not of this user "
        f"(uid {os.geteuid()}): rlwatch never runs another user's command line or environment; set the command in "
        "your own rlwatch.yaml (actions.resume_command, processes[].command, server.command)"
    )


def target_of_launch(launch: Relaunch) -> ActionTarget:
    where = f"start ({launch.source}) in {launch.cwd or '.'}"
    record = launch.record
    whose = f"; as this user (uid {os.geteuid()})" + (
        f", the command line of pid {record.pid} of {_who(record.uid)}" if record is not None else ""
    )
    differs = env_difference(launch.env)
    return ActionTarget(
        pid=None,
        create_time=None,
        user=None,
        age_s=None,
        cmdline=launch.argv,
        role=launch.name,
        reason=where
        + (f", output appended to {launch.log}" if launch.log else "")
        + (f", stderr appended to {launch.err_log}" if launch.err_log else "")
        + whose
        + (f"; {differs}" if differs else ""),
    )


def _inside(path: str | None, run_dir: Path) -> bool:
    if path is None:
        return False
    try:
        return Path(path).resolve().is_relative_to(run_dir.resolve())
    except (OSError, ValueError):
        return False


def stop_words(grace_s: float) -> str:
    return (
        f"SIGTERM (and SIGCONT) to each target and its process group, wait up to {grace_s:g}s, SIGKILL what is left, "
        "then check it is gone — every signal through a pidfd after re-checking (pid, start time)"
    )


def outside_words(gpus: Sequence[GpuState]) -> str:
    """GPU memory held outside this container, in words, with what can free it."""
    parts = []
    for g in gpus:
        pids = (
            f" (pid {', '.join(map(str, g.outside_pids[:4]))} as NVML reports it, not visible here)"
            if g.outside_pids
            else ""
        )
        parts.append(f"GPU {g.index}: {_gib(g.outside_bytes)} held outside this container{pids}")
    return "; ".join(parts) + ": no kill from here can reach it; restarting the pod frees it"


def _gib(n: int | None) -> str:
    return "? GiB" if n is None else f"{n / 1024**3:.1f} GiB"


def gpu_used_total(s: Snapshot) -> int | None:
    """GPU memory in use over every GPU, when the backend is real NVML and says so for each GPU."""
    if s.gpu is None or s.gpu.backend != "nvml" or not s.gpus:
        return None
    used = [g.mem_used_bytes for g in s.gpus]
    return None if any(u is None for u in used) else sum(u for u in used if u is not None)


def stdout_file(pid: int, proc_root: str = procfs.PROC) -> str | None:
    """The regular file a live process writes its output to (``cmd >> train.log``), or None.

    A process started again from what rlwatch recorded keeps appending there, so the log a person (and the engine)
    already follows goes on, instead of the output vanishing or landing in a file nobody looks at. Only a process of
    this user with its stdout open for writing names one (:func:`procfs.output_file`): another user's process could
    hold any file of root's open, read-only, as its stdout.
    """
    return procfs.output_file(pid, 1, proc_root)


def _ancestors_of_run(run_pids: set[int]) -> set[int]:
    """Processes above the run: stopping one of them (with its tree) would stop the run itself."""
    parents = procfs.parents_map()
    found: set[int] = set()
    for pid in run_pids:
        found.update(procfs.ancestors(pid, parents=parents))
    return found - run_pids


class Planner:
    """Builds each action's plan from one snapshot plus what the engine remembers about the run's processes."""

    def __init__(self, engine: Engine, protected: Protected) -> None:
        self.engine = engine
        self.cfg = engine.cfg
        self.protected = protected

    def build(
        self,
        action: str,
        s: Snapshot,
        *,
        force: bool,
        only: tuple[str, ...] | None,
        pids: tuple[int, ...] | None = None,
    ) -> Prepared:
        if action == KILL_ZOMBIES:
            return self.kill_zombies(s, pids)
        if action == RESTART_WORKERS:
            prepared = self.restart_workers(s, only)
        elif action == RESTART_SERVER:
            prepared = self.restart_server(s)
        else:
            prepared = self.resume(s, force=force)
        for launch in prepared.launches:  # never another user's command, --force or not
            if why := foreign_record(launch):
                return refused(action, why)
        return prepared

    # ------------------------------------------------------------------------------------------------ starting
    def _log_for(self, name: str, configured: str | None, pid: int | None, record: LaunchRecord | None = None) -> str:
        """Where the started process's output goes: the configured log; else where the process it replaces writes
        now (a live one), or wrote when first seen (the launch book: ``python train.py >> train.log``), appended to,
        so the log the person reads goes on; else rlwatch's own ``.rlwatch/logs/NAME.log``."""
        if configured:
            return str(resolve(self.engine.run_dir, configured))
        if pid is not None and (current := stdout_file(pid)):
            return current
        if record is not None and record.stdout and os.path.isfile(record.stdout):
            return record.stdout
        return str(self.engine.run_dir / DEFAULT_LOG_DIR / f"{name}.log")

    @staticmethod
    def _err_for(log: str, configured: str | None, record: LaunchRecord | None) -> str | None:
        """Where its stderr goes when not beside its stdout: where the replaced process's went (``2> err.log``)."""
        if configured or record is None or not record.stderr or record.stderr == log:
            return None
        return record.stderr if os.path.isfile(record.stderr) else None

    def _launch_for(self, p: ProcessInfo) -> Relaunch | None:
        rule = self.engine.processes.rule_for(p.name)
        record = self.engine.launch_record(p.name)
        env = dict(record.env) if record and record.env else None
        configured = rule.log if rule else None
        log = self._log_for(p.name, configured, p.pid if p.alive else None, record)
        err = self._err_for(log, configured, record)
        if rule and rule.command:
            cwd = str(resolve(self.engine.run_dir, rule.cwd)) if rule.cwd else (record.cwd if record else None)
            return Relaunch(p.name, p.role, tuple(rule.command), cwd, env, log, CONFIGURED, record, err)
        if record and record.argv:
            return Relaunch(p.name, p.role, tuple(record.argv), record.cwd, env, log, RECORDED, record, err)
        return None

    def _server_launch(self, live: Sequence[ProcessInfo]) -> Relaunch | None:
        srv = self.cfg.server
        pid = live[0].pid if live else None
        if srv.command:
            cwd = str(resolve(self.engine.run_dir, srv.cwd)) if srv.cwd else str(self.engine.run_dir)
            return Relaunch("server", "server", tuple(srv.command), cwd, None, self._log_for("server", srv.log, pid))
        record = self.engine.launch_record(live[0].name if live else "server")
        if record and record.argv:
            env = dict(record.env) if record.env else None
            log = self._log_for("server", srv.log, pid, record)
            err = self._err_for(log, srv.log, record)
            return Relaunch("server", "server", tuple(record.argv), record.cwd, env, log, RECORDED, record, err)
        return None

    def _resume_launch(self, s: Snapshot) -> Relaunch | None:
        a = self.cfg.actions
        if a.resume_command:
            cwd = str(resolve(self.engine.run_dir, a.resume_cwd)) if a.resume_cwd else str(self.engine.run_dir)
            log = self._log_for("launcher", a.resume_log, None)
            return Relaunch("launcher", "launcher", tuple(a.resume_command), cwd, None, log, CONFIGURED)
        # No launcher seen: a trainer run directly is its own launch command. A role with several rules names its
        # processes by rule ("trainer-1"): those count too, a launcher's first, and only one that worked in this run's
        # directory (a pattern also matches another run's trainer, and its command is never this run's resume).
        named = [p for p in s.processes if p.role in ("launcher", "trainer")]
        named.sort(key=lambda p: (p.role != "launcher", -p.started_at))
        # …and those of the launch book, for a trainer that died before this rlwatch started ("trainer-1").
        booked = [n for n in reversed(self.engine.launches.names()) if n.startswith(("launcher-", "trainer-"))]
        for name in dict.fromkeys(["launcher", "trainer", *(p.name for p in named), *booked]):
            record = self.engine.launch_record(name)
            if name not in ("launcher", "trainer") and not (record and _inside(record.cwd, self.engine.run_dir)):
                continue
            if record and record.argv:
                live = next((p for p in s.processes if p.name == name and p.alive), None)
                rule = self.engine.processes.rule_for(name)
                role = live.role if live else next((p.role for p in named if p.name == name), name.split("-")[0])
                configured = rule.log if rule else None
                log = self._log_for(name, configured, live.pid if live else None, record)
                env = dict(record.env) if record.env else None
                err = self._err_for(log, configured, record)
                return Relaunch(name, role, tuple(record.argv), record.cwd, env, log, RECORDED, record, err)
        return None

    def _unknown(self, what: str) -> str:
        """A refusal for want of a start command, saying why the launch book was not used when it was refused."""
        why = self.engine.launches.distrust
        return f"{what}; {why}" if why else what

    def _blocked(self, procs: Sequence[ProcessInfo]) -> str | None:
        for p in procs:
            if why := self.protected(p.pid):
                return f"{p.name} (pid {p.pid}) is protected: {why}"
        return None

    # ------------------------------------------------------------------------------------------------ actions
    def kill_zombies(self, s: Snapshot, named: tuple[int, ...] | None = None) -> Prepared:
        """Stop the GPU holders rlwatch has positive reasons to call strays — or exactly the ones a person names.

        A holder rlwatch cannot classify is never chosen on its own; a person may name it (``--pid``). A holder of
        the live run, a protected one, or an ancestor of the run is refused even when named.
        """
        run = self.engine.processes.run_pids()
        run_parents = _ancestors_of_run(run) if run else set()
        by_pid = {h.pid: h for h in s.holders}
        chosen: list[GpuHolder] = []
        spared: list[str] = []
        if named:
            for pid in named:
                h = by_pid.get(pid)
                if h is None:
                    return refused(KILL_ZOMBIES, f"pid {pid} holds no GPU device ({self.cfg.gpu.device_glob})")
                why = self.protected(pid) or h.protected
                if why is None and h.in_run:
                    why = f"part of the live run: {h.evidence}"
                if why is None and pid in run_parents:
                    why = "an ancestor of the live run"
                if why:
                    return refused(KILL_ZOMBIES, f"pid {pid} must not be stopped: {why}")
                chosen.append(h)
        else:
            for h in s.zombies:
                why = self.protected(h.pid) or ("an ancestor of the live run" if h.pid in run_parents else None)
                if why:
                    spared.append(f"pid {h.pid}: {why}")
                else:
                    chosen.append(h)
            unknown = [f"pid {h.pid}: {h.evidence}" for h in s.unknown_holders]
            if not chosen:
                spared += [f"pid {h.pid}: {h.protected}" for h in s.holders if h.protected and not h.in_run]
                live = s.live_run
                if unknown and live is not None and not live.identified:
                    return refused(KILL_ZOMBIES, f"{live.why_unknown}; no GPU holder can be called a stray")
                why = "no stray GPU holders"
                if unknown:
                    why += (
                        f"; {plural(len(unknown), 'holder')} rlwatch cannot classify "
                        + ("was" if len(unknown) == 1 else "were")
                        + " left alone ("
                        + "; ".join(unknown[:3])
                        + "); to stop one, name it: rlwatch act kill-zombies --pid PID"
                    )
                if spared:
                    why += " (left alone: " + "; ".join(spared[:4]) + ")"
                outside = [g for g in s.gpus if g.outside_bytes]
                if outside:
                    why += "; " + outside_words(outside)
                return refused(KILL_ZOMBIES, why)
            spared += [f"pid {h.pid}: not sure it is a stray ({h.evidence})" for h in s.unknown_holders]
        used_before = gpu_used_total(s)
        steps = [
            stop_words(self.cfg.actions.grace_s),
            f"then check that none of them holds {self.cfg.gpu.device_glob} any more"
            + (" and that the GPU memory came back" if used_before is not None else ""),
            "never touched: the live run, PID 1, rlwatch and its parents, NVIDIA/DCGM daemons, "
            + others_words(self.engine.owners)
            + ("" if named else ", GPU holders rlwatch cannot classify"),
        ]
        if spared:
            steps.append("left alone: " + "; ".join(spared))
        targets = tuple(target_of_holder(h, s.time, named=bool(named)) for h in chosen)
        plan = ActionPlan(KILL_ZOMBIES, targets, tuple(steps))
        stops = tuple(
            Stop(h.pid, h.create_time, "stray", "stray", h.reason or h.evidence, gpu_mem_bytes=h.gpu_mem_bytes)
            for h in chosen
        )
        return Prepared(plan, stops=stops, gpu_used_before=used_before, named=named)

    def restart_workers(self, s: Snapshot, only: tuple[str, ...] | None) -> Prepared:
        # A role's pattern names a process's role; it does not make it this run's. A worker is stopped only when the
        # live run's evidence takes it in (it writes under the run directory, rlwatch started it, its rule names it
        # and it touches the directory…): another run's worker matches the same pattern.
        view = self.engine.live_run(fresh=True)
        outsiders = [
            p
            for p in self.engine.role_processes()
            if p.role == "worker" and p.alive and (p.pid not in view.members or p.pid in view.weak)
        ]
        out = {p.pid for p in outsiders}
        workers = [p for p in s.processes if p.role == "worker" and p.pid not in out]
        if only is not None:
            known = {p.name for p in workers}
            unknown = [n for n in only if n not in known]
            if unknown:
                have = ", ".join(sorted(known)) or "none"
                return refused(RESTART_WORKERS, f"no worker named {', '.join(unknown)} (workers: {have})")
            workers = [p for p in workers if p.name in only]
        if not workers and outsiders:
            p = outsiders[0]
            return refused(
                RESTART_WORKERS,
                f"{p.name} (pid {p.pid}) matches the worker rule but shows no evidence of being this run's "
                f"({view.verdict(p.pid).why}): not touched",
            )
        if not workers:
            return refused(RESTART_WORKERS, "no worker processes found (a process rule with role: worker)")
        launches = []
        for p in workers:
            launch = self._launch_for(p)
            if launch is None:
                return refused(RESTART_WORKERS, self._unknown(f"no start command known for {p.name} (pid {p.pid})"))
            launches.append(launch)
        live = [p for p in workers if p.alive]
        if blocked := self._blocked(live):
            return refused(RESTART_WORKERS, blocked)
        steps = (
            "one worker at a time: " + stop_words(self.cfg.actions.grace_s),
            "start it again with its command line, working directory and environment, in a new session, "
            "output appended to its log",
            "check each is running again with fresh memory",
        )
        targets = tuple(target_of_process(p, s.time, self._worker_why(p, s)) for p in live)
        plan = ActionPlan(RESTART_WORKERS, targets, steps, start=tuple(target_of_launch(x) for x in launches))
        stops = tuple(Stop(p.pid, p.create_time, p.name, p.role, rss_bytes=p.rss_bytes) for p in live)
        return Prepared(plan, stops=stops, launches=tuple(launches), rolling=True, only=only)

    def _worker_why(self, p: ProcessInfo, s: Snapshot) -> str:
        """Why this worker is restarted, in the numbers the findings rest on: over its limit, how fast it grows,
        how often the emergency brake fired."""
        why = []
        rule = self.engine.processes.rule_for(p.name)
        limit = rule.memory_limit_bytes if rule is not None else None
        if limit and p.rss_bytes and p.rss_bytes > limit:
            why.append(f"{human_bytes(p.rss_bytes)}, over its {human_bytes(limit)} limit")
        growth = p.rss_growth_bytes_per_hour
        if growth is not None and growth >= self.cfg.thresholds.leak_bytes_per_hour:
            why.append(f"grows {human_bytes(growth)}/h")
        brake = s.events.get("emergency_brake")
        if brake is not None and brake.count:
            why.append(f"the emergency brake fired {brake.count} times ({brake.streak} in a row)")
        return "worker: " + "; ".join(why) if why else "worker"

    def restart_server(self, s: Snapshot) -> Prepared:
        url = self.cfg.server.url
        if not url:
            return refused(RESTART_SERVER, "no inference server configured (server.url)")
        live = [p for p in s.processes if p.role == "server" and p.alive]
        launch = self._server_launch(live)
        if launch is None:
            return refused(
                RESTART_SERVER, self._unknown("no start command known for the inference server (server.command)")
            )
        if not live and s.server is not None and s.server.up:
            return refused(
                RESTART_SERVER,
                f"{url} answers but no server process is known (add a process rule with role: server); "
                "starting another server now would clash with it",
            )
        if owner := self._server_comes_with_resume(s, live):
            if owner.startswith("?"):
                owner = owner[1:]
                return refused(
                    RESTART_SERVER,
                    f"the trainer is gone and who started the server is not known (rlwatch first looked after it "
                    f"was gone); this run's {owner} starts a server of its own, so resume alone brings both back "
                    "and a server started now could be a second one on the GPU",
                )
            return refused(
                RESTART_SERVER,
                f"the trainer is gone and the {owner} started this server (its parent when first seen): resume runs "
                f"the {owner} again, which starts a server of its own; one started now would be a second one",
            )
        if blocked := self._blocked(live):
            return refused(RESTART_SERVER, blocked)
        steps = []
        if live:
            steps.append(stop_words(self.cfg.actions.grace_s))
        steps.append("start the server in a new session, output appended to its log")
        steps.append(f"wait up to {self.cfg.server.start_timeout_s:g}s for {url} to answer healthy")
        plan = ActionPlan(
            RESTART_SERVER,
            tuple(target_of_process(p, s.time, "inference server") for p in live),
            tuple(steps),
            start=(target_of_launch(launch),),
        )
        stops = tuple(Stop(p.pid, p.create_time, p.name, p.role) for p in live)
        return Prepared(plan, stops=stops, launches=(launch,))

    def _server_comes_with_resume(self, s: Snapshot, live: Sequence[ProcessInfo]) -> str | None:
        """The name of the launcher a resume would run again, when that launcher starts the run's server; None
        when the trainer lives (a server restart is what it needs), or when the resume runs no launcher (a trainer
        run directly, TRL's with its `trl vllm-serve` apart). "?launcher" when who started the server is not known
        — rlwatch first looked after it was gone — but the run has a launcher: an action rests only on what
        rlwatch knows, and for such a run a resume alone is safe where a server restart may make a second one."""
        if any(p.role == "trainer" and p.alive for p in s.processes):
            return None
        owner = self.engine.started_by(live[0].name if live else "server")
        launch = self._resume_launch(s)
        if launch is None:
            return None
        if owner is None:
            return f"?{launch.name}" if launch.name == "launcher" and not live else None
        if not self._relaunches(launch, owner):
            return None
        return owner

    def _relaunches(self, launch: Relaunch, name: str) -> bool:
        """Whether ``launch`` starts the process ``name`` again: its recorded command, or a configured one that is
        the same command line."""
        if launch.name != name:
            return False
        if launch.source == RECORDED:
            return True
        record = self.engine.launch_record(name)
        return record is not None and record.argv == launch.argv

    def resume_verl(self, s: Snapshot, *, force: bool) -> Prepared:
        """verl: the driver's recorded command line with ``trainer.resume_mode=auto``, so that verl loads the
        checkpoint its ``latest_checkpointed_iteration.txt`` names. Refused while the driver or its TaskRunner
        actor lives, when the command line is not known, and when there is no checkpoint to resume from."""
        drivers = [p for p in s.processes if p.role == "trainer" and p.alive]
        if drivers and not force:
            d = drivers[0]
            return refused(
                RESUME, f"the verl driver is alive (pid {d.pid}); resuming would start a second run (--force)"
            )
        runners = [p for p in s.processes if p.role in ("task-runner", "ray-worker") and p.alive]
        if runners:
            r = runners[0]
            what = "TaskRunner" if r.role == "task-runner" else "WorkerDict"
            return refused(
                RESUME,
                f"verl's {what} actor still lives (pid {r.pid}): Ray has not ended the old run's job, and a second "
                "run would compete for its GPUs; end the old job first (its driver, or `ray job stop`), then resume",
            )
        tr = s.training
        if tr is not None and tr.finished and not drivers and not force:
            return refused(RESUME, f"training finished (step {tr.last_step}); nothing to resume (--force)")
        latest = s.checkpoint.latest if s.checkpoint else None
        if (latest is None or latest.tracker is None or latest.global_step is None) and not force:
            where = ", ".join(self.cfg.training.checkpoint_dirs) or "no checkpoint directory configured"
            return refused(
                RESUME,
                f"no verl checkpoint to resume from: no latest_checkpointed_iteration.txt beside global_step_N "
                f"folders under {where}; trainer.resume_mode=auto would train from scratch (--force)",
            )
        record = self.engine.launch_record("trainer")
        a = self.cfg.actions
        if a.resume_command:
            launch = self._resume_launch(s)
            replaced: str | None = "the configured actions.resume_command, as written"
        elif record is None or not record.argv:
            return refused(
                RESUME,
                self._unknown(
                    "the verl driver's command line is not known: rlwatch records it when it sees the driver run "
                    "(python3 -m verl.trainer.main_ppo …), or set actions.resume_command"
                ),
            )
        else:
            argv, old = with_resume_mode(record.argv)
            rule = self.engine.processes.rule_for("trainer")
            env = dict(record.env) if record.env else None
            log = self._driver_log(s) or self._log_for("trainer", rule.log if rule else None, None)
            launch = Relaunch("trainer", "trainer", argv, record.cwd, env, log, RECORDED, record)
            replaced = f"{old} replaced by trainer.resume_mode=auto" if old else "trainer.resume_mode=auto added"
        assert launch is not None
        steps: list[str] = []
        resume_step = None
        if latest is not None and latest.tracker is not None and latest.global_step is not None:
            resume_step = latest.global_step
            steps.append(
                f"verl resumes from {os.path.basename(latest.path)} (global step {resume_step}: "
                f"{os.path.basename(latest.tracker)} says {resume_step}); the first step it logs is {resume_step + 1}"
            )
        else:
            steps.append("no verl checkpoint: verl starts from scratch (forced)")
        steps.append(f"the driver's command line as recorded, {replaced}")
        stale = drivers  # only with --force
        if blocked := self._blocked(stale):
            return refused(RESUME, blocked)
        if stale:
            steps.append("stop the old driver first: " + stop_words(self.cfg.actions.grace_s))
        steps.append(f"run it in a new session in {launch.cwd or '.'}, output appended to {launch.log}")
        steps.append(
            f"check within {self.cfg.actions.verify_timeout_s:g}s that the driver runs and "
            + (f"steps pass {resume_step}" if resume_step is not None else "logs a new step")
        )
        plan = ActionPlan(
            RESUME,
            tuple(target_of_process(p, s.time, "the old driver (--force)") for p in stale),
            tuple(steps),
            start=(target_of_launch(launch),),
        )
        stops = tuple(Stop(p.pid, p.create_time, p.name, p.role) for p in stale)
        return Prepared(plan, stops=stops, launches=(launch,), resume_step=resume_step, force=force)

    def _driver_log(self, s: Snapshot) -> str | None:
        """The log the old driver's output went to (``… | tee train.log``, a pipe rlwatch cannot follow back): the
        Ray driver log it read, when it lies in the run directory. The relaunch appends to it, as ``tee -a`` would,
        so the log a person and the engine already follow goes on."""
        logs = s.ray.driver_logs if s.ray is not None else ()
        run = str(self.engine.run_dir)
        for path in logs:
            if path.startswith(run.rstrip("/") + "/") and os.path.isfile(path):
                return path
        return None

    def resume(self, s: Snapshot, *, force: bool) -> Prepared:
        if self.cfg.profile == "verl":
            return self.resume_verl(s, force=force)
        trainers = [p for p in s.processes if p.role == "trainer" and p.alive]
        if trainers and not force:
            t = trainers[0]
            return refused(
                RESUME,
                f"the trainer is alive (pid {t.pid}); resuming would start a second run" + FORCE,
            )
        tr = s.training
        if tr is not None and tr.finished and not trainers and not force:
            return refused(
                RESUME,
                f"training finished (step {tr.last_step}); nothing to resume" + FORCE,
            )
        launch = self._resume_launch(s)
        if launch is None:
            return refused(
                RESUME, self._unknown("no launch command known (actions.resume_command, or a launcher seen running)")
            )
        steps: list[str] = []
        resume_step = None
        latest = s.checkpoint.latest if s.checkpoint else None
        if s.recover:
            r = s.recover
            resume_step = r.resume_global_step
            problem = agree(r, latest)
            if problem and not force:
                return refused(
                    RESUME,
                    f"recover info and the latest checkpoint disagree: {problem}" + FORCE,
                )
            steps.append(
                f"training resumes at global step {r.resume_global_step} (epoch {r.resume_epoch}, "
                f"step {r.resume_epoch_step}) from {r.path}"
                + (f"; latest checkpoint {latest.path}" if latest else "")
                + (f" (they disagree: {problem})" if problem else "")
            )
        elif latest is not None:
            steps.append(f"no recover info: the launcher decides where training starts (latest: {latest.path})")
        else:
            steps.append("no recover info and no checkpoint: the launcher decides where training starts")
        stale = [p for p in s.processes if p.alive and p.role in ("launcher", "trainer")]
        # A server the relaunched launcher started the first time: the launcher starts its own again, and two
        # servers on one GPU leave the second "device busy".
        servers = [
            p
            for p in s.processes
            if p.alive
            and p.role == "server"
            and (owner := self.engine.started_by(p.name)) is not None
            and self._relaunches(launch, owner)
        ]
        if blocked := self._blocked([*stale, *servers]):
            return refused(RESUME, blocked)
        if stale or servers:
            steps.append("stop what is left of the old run first: " + stop_words(self.cfg.actions.grace_s))
        steps.append("run the launch command in a new session")
        steps.append(
            f"check within {self.cfg.actions.verify_timeout_s:g}s that the trainer runs and "
            + (f"steps pass {resume_step}" if resume_step is not None else "logs a new step")
        )
        plan = ActionPlan(
            RESUME,
            tuple(target_of_process(p, s.time, "left over from the stopped run") for p in stale)
            + tuple(
                target_of_process(p, s.time, f"the {launch.name}'s server: the {launch.name} starts its own")
                for p in servers
            ),
            tuple(steps),
            start=(target_of_launch(launch),),
        )
        stops = tuple(Stop(p.pid, p.create_time, p.name, p.role) for p in [*stale, *servers])
        return Prepared(plan, stops=stops, launches=(launch,), resume_step=resume_step, force=force)
