"""The headless watchdog: policies evaluated on every snapshot, actions run within restart budgets, and proof of life.

Incident 3's watchdog died after a reboot and nobody noticed. So this one is built to be noticed:

- **Decision loop.** The engine hands each new snapshot to :meth:`Watchdog.on_snapshot`; a loop of its own evaluates
  the policies (:mod:`rlwatch.remedy.policies`), asks the target's restart budget (:mod:`rlwatch.remedy.budget`) and
  starts the action on a separate thread, one at a time — a policy that fires while an action runs waits for it. Actions
  can take minutes (a server's start-up), and the loop must keep its heartbeat meanwhile.
- **Proof of life.** The loop rewrites ``<run dir>/.rlwatch/watchdog.json`` atomically on every heartbeat (pid, start
  time, heartbeat, budgets, what it gave up on, its last actions): the dashboard and ``report`` read it and say when
  the watchdog is missing, stuck or has given up. Under systemd (``Type=notify``) it sends ``READY=1`` once it
  watches, ``WATCHDOG=1`` every half of ``WATCHDOG_USEC`` from the decision loop — never from a side thread, so a
  hung loop is restarted — and ``STOPPING=1`` on the way out. The notify protocol is a datagram on
  ``$NOTIFY_SOCKET`` that systemd documents as stable, so it is inlined rather than depending on libsystemd.
- **One watchdog per run.** An exclusive lock on ``.rlwatch/watchdog.pid``
(:class:`~rlwatch.sources.watchdog_state.PidLock`)
  makes a second ``rlwatch watch`` of the same run an observer: it prints what happens but acts on nothing, so two
  watchdogs never restart the same worker twice.
- **Gave up** is loud: a ``gave_up`` record, an audit-log entry, a critical finding (through the state file) and the
  exporter's budget gauge; nothing more is done for that target until ``rlwatch act rearm`` or a restart of the
  watchdog.
"""

from __future__ import annotations

import math
import os
import socket
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psutil

from rlwatch.common.clock import Clock
from rlwatch.common.state import ActionResult, Snapshot
from rlwatch.config.models import BudgetConfig, Policy
from rlwatch.discover.load import resolve
from rlwatch.remedy.budget import BudgetVerdict, RestartBudget
from rlwatch.remedy.policies import Evidence, Firing, PolicyEngine, armed, used_kinds
from rlwatch.sources import procfs
from rlwatch.sources.watchdog_state import PID_FILE, STATE_FILE, VERSION, PidLock, state_dir, take_rearm, write_json

if TYPE_CHECKING:
    from rlwatch.engine.engine import Engine
    from rlwatch.export.exporter import ExporterExtras
    from rlwatch.export.notify.notifications import Notifications
    from rlwatch.remedy.actions.api import Actions
    from rlwatch.remedy.actions.plan import Prepared

Record = dict[str, Any]
Emit = Callable[[Record], None]
LAST_ACTIONS = 20
OWNERS_EVERY_S = 5.0


class WatchdogError(Exception):
    """The watchdog cannot start as configured (e.g. a policy names an event kind nobody counts)."""


# ------------------------------------------------------------------------------------------------------ systemd
class Notifier:
    """systemd's notify protocol: one datagram per message to ``$NOTIFY_SOCKET`` (sd_notify(3), reimplemented).

    The variables are taken out of the environment at construction, as ``sd_notify(unset_environment=1)`` does, so
    processes the watchdog starts never talk to systemd in its name.
    """

    def __init__(self, env: dict[str, str] | None = None) -> None:
        source = os.environ if env is None else env
        self.socket = source.pop("NOTIFY_SOCKET", None)
        usec = source.pop("WATCHDOG_USEC", None)
        pid = source.pop("WATCHDOG_PID", None)
        self.ping_every_s: float | None = None
        if usec and (not pid or pid == str(os.getpid())):
            try:
                value = int(usec)
            except ValueError:
                value = 0
            if value > 0:
                self.ping_every_s = value / 2e6  # sd_watchdog_enabled(3): ping every half of the timeout

    def __call__(self, message: str) -> bool:
        addr = self.socket
        if not addr or addr[0] not in "/@":
            return False  # unset, or a vsock address this minimal client does not speak
        target = "\0" + addr[1:] if addr[0] == "@" else addr
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(target)
                sock.sendall(message.encode())
        except OSError:
            return False
        return True


# --------------------------------------------------------------------------------------------------- log owners
def log_owners(snap: Snapshot, rule_logs: Mapping[str, str], proc_root: str = "/proc") -> dict[str, str]:
    """Which process writes each tailed log: its rule's ``log``, else the process that holds the file open."""
    owners: dict[str, str] = {}
    real = {os.path.realpath(path): path for path in snap.logs}
    for name, log in rule_logs.items():
        path = real.get(os.path.realpath(log))
        if path is not None:
            owners[path] = name
    unowned = {r: p for r, p in real.items() if p not in owners}
    if not unowned:
        return owners
    for p in snap.processes:
        if not p.alive:
            continue
        for fd_path in procfs.fd_paths(p.pid, proc_root) or ():
            path = unowned.get(fd_path)
            if path is not None and path not in owners:
                owners[path] = p.name
    return owners


# ------------------------------------------------------------------------------------------------------ records
@dataclass(frozen=True, slots=True)
class _Done:
    time: float  # wall
    policy: str
    key: str
    action: str
    ok: bool
    message: str


def plain_watchdog(record: Record) -> str:
    """One line for a person, for the records the watchdog adds to `rlwatch watch`."""
    t = (record.get("time") or "")[11:19]
    kind = record.get("type")
    if kind == "policy":
        return f"{t} policy {record['policy']} → {record['key']}: {record['decision']} ({record['reason']})"
    if kind == "action":
        state = "skipped" if record.get("skipped") else ("ok" if record.get("ok") else "FAILED")
        return f"{t} [{state}] {record['message']}"
    if kind == "gave_up":
        return f"{t} [CRITICAL] watchdog gave up on {record['key']}: {record['reason']} — run `rlwatch act rearm`"
    if kind == "rearmed":
        return f"{t} re-armed: {', '.join(record['targets']) or 'nothing had given up'}"
    return f"{t} watchdog: {record.get('message', '')}"


class Watchdog:
    """Policies → actions for one engine. ``start()`` after the engine has its first snapshot; ``stop()`` at exit."""

    def __init__(
        self,
        engine: Engine,
        *,
        actions: Actions | None = None,
        emit: Emit | None = None,
        clock: Clock | None = None,
        notifier: Notifier | None = None,
        notifications: Notifications | None = None,
    ) -> None:
        self.engine = engine
        self.cfg = engine.cfg
        self.clock: Clock = clock or engine.clock
        self._emit: Emit = emit or (lambda _r: None)
        self.notify = notifier or Notifier()
        # Telling a person (rlwatch.export.notify): only the watchdog that acts does, so two watchdogs never tell twice.
        self.notifications = notifications if notifications is not None and notifications.active else None
        self.dir = state_dir(engine.run_dir)
        self._lock_file = PidLock(self.dir / PID_FILE)
        self._check_policies(self.cfg.policies)
        if actions is None:
            from rlwatch.remedy.actions.api import Actions

            actions = Actions(engine)
        self.actions = actions
        server_why = "; ".join(self.cfg.provenance.server) or "no server.url configured"
        policies, self.unarmed = armed(self.cfg.policies, self.cfg.server_expected, server_why)
        self.policies = PolicyEngine(policies, self.clock)
        self._budgets = self._make_budgets(self.cfg.policies, self.cfg.watchdog.budget)
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._action: threading.Thread | None = None
        self._running_key: str | None = None
        self._latest: Snapshot | None = None
        # (bytes read, bytes) while the logs' backlog is still being read: no policy is evaluated on a partial count
        self.reading: tuple[int, int] | None = None
        self._status_text: str | None = None  # systemd's status line, said again when it changes
        self._latest_mono: float | None = None
        self._owners: dict[str, str] = {}
        self._owners_at: float | None = None
        self._said: dict[str, tuple[str, str]] = {}  # key -> (decision, detail) last reported
        self._refused_at: dict[str, float] = {}
        self._gave_up: dict[str, dict[str, Any]] = {}
        self._done: deque[_Done] = deque(maxlen=LAST_ACTIONS)
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._written_at: float | None = None
        self._pinged_at: float | None = None
        self._ready = False
        self._dirty = True
        self._state_error: str | None = None  # the last failure to write the state file, said once
        self.acting = False
        self.why_not_acting: str | None = None
        self.started_at = self.clock.time()
        self._create_time = _own_create_time()
        if self.notifications is not None:
            self.notifications.on_change = self._mark_dirty

    def _mark_dirty(self) -> None:
        self._dirty = True

    def emit(self, record: Record) -> None:
        """Print a record; an action taken or failed and a give-up are also told to the notification targets."""
        self._emit(record)
        if self.acting and self.notifications is not None and record.get("type") in ("action", "gave_up"):
            self.notifications.record(record)

    # ------------------------------------------------------------------------------------------------- setup
    def _check_policies(self, policies: list[Policy]) -> None:
        known = {k.name for k in self.engine.counter.kinds}
        for kind in sorted(used_kinds(policies) - known):
            names = [p.name for p in policies if p.when.event == kind]
            raise WatchdogError(
                f"policy {names[0]}: no event kind {kind!r} is counted (known: {', '.join(sorted(known))})"
            )
        seen: set[str] = set()
        for p in policies:
            if p.name in seen:
                raise WatchdogError(f"two policies are called {p.name!r}")
            seen.add(p.name)

    def _make_budgets(self, policies: list[Policy], default: BudgetConfig) -> dict[str, RestartBudget]:
        """One budget per distinct configuration, so policies acting on the same target share its budget."""
        by_cfg: dict[BudgetConfig, RestartBudget] = {}
        out = {}
        for p in policies:
            cfg = p.budget or default
            out[p.name] = by_cfg.setdefault(cfg, RestartBudget(cfg, self.clock))
        return out

    # ------------------------------------------------------------------------------------------------ running
    def claim(self) -> bool:
        """Take the run's pidfile lock: this watchdog acts, or (another one holds it) only watches."""
        self.acting, self.why_not_acting = self._lock_file.acquire()
        n = len(self.policies.policies)
        if self.acting:
            names = ", ".join(p.name for p in self.policies.policies)
            message = (
                f"acting on {n} polic{'y' if n == 1 else 'ies'}{f' ({names})' if names else ''}; "
                f"state in {self.dir / STATE_FILE}"
            )
        else:
            message = f"{self.why_not_acting}; this one only watches"
        for name, why in self.unarmed:
            message += f"; not armed: {name}: {why}"
        if self.notifications is not None:
            if self.acting:
                self.notifications.start()
                self._notify_sources()
                message += "; notifying " + (", ".join(self.notifications.shown) or "no target")
                hb = self.notifications.heartbeat
                if hb is not None:
                    message += f"; heartbeat {hb.status.shown} every {hb.every_s:g}s"
            else:
                message += "; notifications off (the watchdog that acts sends them)"
        now = self.clock.time()
        self.emit(
            {
                "type": "watchdog",
                "time": _iso(now),
                "acting": self.acting,
                "policies": n,  # holding the lock with no policy enabled acts on nothing
                "pid": os.getpid(),
                "message": message,
            }
        )
        return self.acting

    def start(self) -> None:
        """Claim the run, listen to the engine, and run the decision loop in a thread of its own."""
        self.claim()
        self.engine.on_snapshot(self.on_snapshot)
        self._thread = threading.Thread(target=self._loop, name="rlwatch-watchdog", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.notify("STOPPING=1")
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        action = self._action
        if action is not None:
            action.join(timeout=timeout)
        if self.acting and self.notifications is not None:
            self.notifications.close()
        if self.acting:
            self._write_state(stopped=True)
            self._lock_file.release()

    def on_snapshot(self, snap: Snapshot) -> None:
        """The engine's listener: keep the newest snapshot and wake the loop (never evaluate on the engine's thread)."""
        self._latest = snap
        self._latest_mono = self.clock.monotonic()
        self._wake.set()

    @property
    def tick_s(self) -> float:
        tick = min(self.cfg.watchdog.heartbeat_s, self.cfg.interval_s)
        if self.notify.ping_every_s:
            tick = min(tick, self.notify.ping_every_s)
        return max(0.05, tick)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.tick_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.tick()
            except Exception as exc:  # the loop must outlive any one bad evaluation; it says so, and goes on
                self.emit(
                    {
                        "type": "watchdog",
                        "time": _iso(self.clock.time()),
                        "message": f"error: {type(exc).__name__}: {exc}",
                    }
                )

    def tick(self) -> None:
        """One decision round: re-arm requests, policies, budget, maybe an action; then the heartbeat.

        While the logs' backlog is still being read (minutes, after a night of tracebacks), or before the host's
        processes were first sampled, only the heartbeat: the counts, streaks and incidents are partial then, and an
        action must rest on the whole of what the logs say and on the processes seen.
        The state file and systemd's status say that it is reading, so it is neither taken for stuck nor killed
        for a slow start."""
        snap = self._latest
        if snap is None:
            return
        # No policy decides on a host whose processes and logs it has not seen, nor on a partial count.
        sampled, reading = snap.polled("processes") and snap.polled("logs"), _reading(snap)
        if (reading is None) != (self.reading is None):
            self._dirty = True  # the state file says at once that it reads, or that it has read
        self.reading = reading
        status = self._status(sampled, reading)
        if status != self._status_text:
            self._status_text = status
            if self._ready:
                self.notify(f"STATUS={status}")
        if self.acting and snap.polled("processes") and snap.logs_read:
            self._rearm_requests()
            with self._lock:
                busy = self._running_key is not None
                ev = self._evidence(snap)
                firings = self.policies.evaluate(ev)
                if not busy:
                    self._decide(firings, ev)
            if self.notifications is not None:
                self.notifications.observe(snap, self.done_line())
                self._notify_sources()
        self._heartbeat()

    # ------------------------------------------------------------------------------------------ telling a person
    def done_line(self) -> str:
        """What the watchdog has done, in one line, for the "done:" of a notification."""
        if self.cfg.provenance.distrust is not None:
            return "nothing: actions are off, the configuration is not trusted"
        if self.cfg.actions.readonly:
            return "nothing: actions are read-only"
        with self._lock:
            if self._running_key is not None:
                return f"acting now on {self._running_key}"
            if self._gave_up:
                return f"gave up on {', '.join(self._gave_up)}: fix it, then `rlwatch act rearm`"
            if self._done:
                d = self._done[-1]
                state = "ok" if d.ok else "FAILED"
                return f"last action {_iso(d.time)}: {d.action} on {d.key}: {state}: {d.message}"
        if not self.policies.policies:
            return "nothing: no watchdog policy is configured (policies: in the config)"
        return "nothing yet: no policy has fired"

    def _notify_sources(self) -> None:
        """Failing deliveries and heartbeat pings are degraded sources of this run, like a failing GPU query."""
        n = self.notifications
        if n is None:
            return
        if n.channels:
            self.engine.note_source("notify", n.error())
        if n.heartbeat is not None:
            self.engine.note_source("heartbeat", n.heartbeat_error())

    # ---------------------------------------------------------------------------------------------- deciding
    def _evidence(self, snap: Snapshot) -> Evidence:
        kinds = used_kinds(self.policies.policies)
        streaks = {kind: self.engine.event_streaks(kind) for kind in kinds}
        now = self.clock.monotonic()
        # Looked for again while a log has no known writer: a map made before the workers opened their logs would
        # otherwise stand for OWNERS_EVERY_S, and a policy firing then would act on every worker instead of one.
        partial = len(self._owners) < len(snap.logs)
        if kinds and (self._owners_at is None or partial or now - self._owners_at >= OWNERS_EVERY_S):
            rule_logs = {}
            for p in snap.processes:
                rule = self.engine.processes.rule_for(p.name)
                if rule is not None and rule.log:
                    rule_logs[p.name] = str(resolve(self.engine.run_dir, rule.log))
            self._owners = log_owners(snap, rule_logs)
            self._owners_at = now
        return Evidence(snap, streaks, dict(self._owners), self._limits(snap))

    def _limits(self, snap: Snapshot) -> dict[str, int]:
        limits = {}
        for p in snap.processes:
            rule = self.engine.processes.rule_for(p.name)
            if rule is not None and rule.memory_limit_bytes:
                limits[p.name] = rule.memory_limit_bytes
        return limits

    def _decide(self, firings: list[Firing], ev: Evidence) -> None:
        for firing in firings:
            budget = self._budgets[firing.policy]
            if budget.gave_up(firing.key) is not None:
                continue
            decision = budget.request(firing.key)
            if decision.verdict is BudgetVerdict.GAVE_UP:
                if decision.new:
                    self._record_gave_up(firing, decision.reason)
                continue
            if decision.verdict is BudgetVerdict.WAIT:
                self._say(firing, "wait", f"{decision.reason}: next try in {decision.wait_s:.0f}s")
                continue
            refused_at = self._refused_at.get(firing.key)
            if refused_at is not None and self.clock.monotonic() - refused_at < budget.cfg.delay_s:
                continue
            # The policy acts from its first action that may run: the ones before it are skipped, each with its
            # reason (restart-server, when resume brings the server back with the run); refused when none may.
            skipped: list[tuple[str, Prepared]] = []
            first: Prepared | None = None
            for action in firing.actions:
                prepared = self._prepare(action, firing)
                if prepared.plan.runnable:
                    first = prepared
                    break
                skipped.append((action, prepared))
            if first is None:
                self._refused_at[firing.key] = self.clock.monotonic()
                self._say(firing, "refused", f"{firing.actions[0]}: {skipped[0][1].plan.refused}")
                continue
            self._refused_at.pop(firing.key, None)
            self._say(firing, "act", " then ".join(firing.actions), force=True)
            budget.started(firing.key)
            self.policies.acting(firing, ev)
            self._running_key = firing.key
            self._dirty = True
            self._action = threading.Thread(
                target=self._run, args=(firing, skipped, first), name="rlwatch-watchdog-action", daemon=True
            )
            self._action.start()
            return  # one action at a time

    def _prepare(self, action: str, firing: Firing) -> Prepared:
        return self.actions.prepare(action, only=list(firing.only) if firing.only else None)

    def _say(self, firing: Firing, decision: str, detail: str, *, force: bool = False) -> None:
        """A policy record, once per change of decision for a target (not on every evaluation)."""
        said = (decision, detail if decision != "wait" else "")
        if not force and self._said.get(firing.key) == said:
            return
        self._said[firing.key] = said
        self.emit(
            {
                "type": "policy",
                "time": _iso(self.clock.time()),
                "policy": firing.policy,
                "target": firing.target,
                "key": firing.key,
                "reason": firing.reason,
                "decision": decision,
                "detail": detail,
            }
        )

    def _record_gave_up(self, firing: Firing, reason: str) -> None:
        now = self.clock.time()
        self._gave_up[firing.key] = {"target": firing.key, "reason": reason, "since": now, "policy": firing.policy}
        self._dirty = True
        self.actions.audit.record("watchdog", "gave_up", policy=firing.policy, target=firing.key, reason=reason)
        self.emit(
            {
                "type": "gave_up",
                "time": _iso(now),
                "policy": firing.policy,
                "target": firing.target,
                "key": firing.key,
                "reason": reason,
                "severity": "critical",
            }
        )
        self._write_state()

    def _run(self, firing: Firing, skipped: list[tuple[str, Prepared]], first: Prepared) -> None:
        """The action thread: each action of the policy in order from ``first`` (those before it were refused);
        a refused later one is skipped, a failure stops."""
        ok = True
        try:
            for name, refusal in skipped:
                self._action_record(firing, name, None, f"{name}: skipped: {refusal.plan.refused}")
            for i, name in enumerate(firing.actions[len(skipped) :]):
                prepared = first if i == 0 else self._prepare(name, firing)
                if not prepared.plan.runnable:
                    self._action_record(firing, name, None, f"{name}: skipped: {prepared.plan.refused}")
                    continue
                result = self.actions.execute(prepared)
                self._action_record(firing, name, result, result.message)
                if not result.ok:
                    ok = False
                    break
        except Exception as exc:
            ok = False
            self._action_record(
                firing, firing.actions[0], None, f"internal error: {type(exc).__name__}: {exc}", ok=False
            )
        finally:
            with self._lock:
                self._budgets[firing.policy].finished(firing.key, ok)
                self.policies.done(firing)
                self._running_key = None
                self._dirty = True
            self._wake.set()

    def _action_record(
        self, firing: Firing, action: str, result: ActionResult | None, message: str, *, ok: bool | None = None
    ) -> None:
        now = self.clock.time()
        skipped = result is None and ok is None
        done_ok = result.ok if result is not None else bool(ok)
        if not skipped:
            outcome = "ok" if done_ok else "failed"
            with self._lock:
                self._counts[(action, firing.target, outcome)] += 1
                self._done.append(_Done(now, firing.policy, firing.key, action, done_ok, message))
                self._dirty = True
        self.emit(
            {
                "type": "action",
                "time": _iso(now),
                "policy": firing.policy,
                "target": firing.target,
                "key": firing.key,
                "action": action,
                "ok": None if skipped else done_ok,
                "skipped": skipped,
                "message": message,
                "details": list(result.details) if result else [],
            }
        )

    # ----------------------------------------------------------------------------------------------- re-arm
    def _rearm_requests(self) -> None:
        requested, targets = take_rearm(self.engine.run_dir)
        if requested:
            self.rearm(targets)

    def rearm(self, targets: list[str] | None = None) -> list[str]:
        """Clear "gave up" for ``targets`` (None: all); the next failure is acted on afresh."""
        with self._lock:
            cleared: list[str] = []
            for budget in {id(b): b for b in self._budgets.values()}.values():
                cleared += budget.rearm(targets)
            for key in cleared:
                self._gave_up.pop(key, None)
                self._said.pop(key, None)
            self._dirty = True
        self.actions.audit.record("watchdog", "rearm", targets=cleared)
        self.emit({"type": "rearmed", "time": _iso(self.clock.time()), "targets": sorted(cleared)})
        self._write_state()
        return cleared

    # -------------------------------------------------------------------------------------------- heartbeat
    def _fresh(self) -> bool:
        """The engine still publishes snapshots: pinging systemd while it is stuck would hide the failure."""
        if self._latest_mono is None:
            return False
        limit = max(30.0, 5 * self.cfg.interval_s)
        return self.clock.monotonic() - self._latest_mono <= limit

    def _heartbeat(self) -> None:
        """Rewrite the state file every ``heartbeat_s`` (at once when something changed) and ping systemd; both only
        while the engine is alive, so a stuck engine shows as a stale heartbeat and a watchdog timeout."""
        if not self._fresh():
            return
        now = self.clock.monotonic()
        if self._written_at is None or self._dirty or now - self._written_at >= self.cfg.watchdog.heartbeat_s:
            self._write_state()
            self._written_at = now
        if self.acting and self.notifications is not None:
            self.notifications.tick()  # the dead man's switch: asked only while the loop and the engine live
        if not self._ready:
            self.notify(f"READY=1\nSTATUS={self._status_text}")
            self._ready = True
        every = self.notify.ping_every_s
        if every and (self._pinged_at is None or now - self._pinged_at >= min(1.0, every / 2)):
            self.notify("WATCHDOG=1")
            self._pinged_at = now

    def _status(self, sampled: bool, reading: tuple[int, int] | None) -> str:
        """systemd's one-line status of the unit."""
        if not sampled:
            return f"starting: looking at the host and the logs of {self.engine.run_dir}"
        if reading is not None:
            return f"reading the logs' backlog of {self.engine.run_dir}; no action until it is read"
        return f"watching {self.engine.run_dir}"

    def state(self, *, stopped: bool = False) -> dict[str, Any]:
        """The state file's content."""
        now_wall, now_mono = self.clock.time(), self.clock.monotonic()

        def wall(mono: float | None) -> float | None:
            return None if mono is None else now_wall - (now_mono - mono)

        with self._lock:
            budgets = {}
            for budget in {id(b): b for b in self._budgets.values()}.values():
                for st in budget.states():
                    budgets[st.key] = {
                        "restarts_in_window": st.restarts_in_window,
                        "total_restarts": st.total_restarts,
                        "in_a_row": st.in_a_row,
                        "startup_failures": st.startup_failures,
                        "last_restart": wall(st.last_restart),
                        "next_allowed_at": wall(st.next_allowed),
                        "gave_up": st.gave_up,
                        "burst": budget.cfg.burst,
                        "window_s": budget.cfg.window_s,
                    }
            return {
                "version": VERSION,
                "pid": os.getpid(),
                "create_time": self._create_time,
                "host": self.engine.host,
                "run_dir": str(self.engine.run_dir),
                "started_at": self.started_at,
                "heartbeat": now_wall,
                "heartbeat_s": self.cfg.watchdog.heartbeat_s,
                "stale_after_s": self.cfg.watchdog.stale_after_s,
                "stopped_at": now_wall if stopped else None,
                "systemd": bool(self.notify.socket),
                "policies": [p.name for p in self.policies.policies],
                "running_action": self._running_key,
                "reading_backlog": list(self.reading) if self.reading is not None else None,
                "budgets": budgets,
                "gave_up": list(self._gave_up.values()),
                "last_actions": [
                    {
                        "time": d.time,
                        "policy": d.policy,
                        "target": d.key,
                        "action": d.action,
                        "ok": d.ok,
                        "message": d.message,
                    }
                    for d in self._done
                ],
                "notify": self.notifications.state() if self.notifications is not None else None,
                "run_state": self._run_state(),
                "straggler": self._straggler(),
            }

    def _straggler(self) -> str | None:
        """The straggler the stacks sampled live name, for a one-shot report (which samples none) to show."""
        return next((f.message for f in self.engine.snapshot().findings if f.code == "straggler"), None)

    def _run_state(self) -> dict[str, Any] | None:
        rs = self.engine.snapshot().run_state
        return None if rs is None else {"state": rs.state, "why": rs.why, "since": rs.since}

    @property
    def state_error(self) -> str | None:
        """Why the state file could not be written the last time (None: it was)."""
        return self._state_error

    def _write_state(self, *, stopped: bool = False) -> None:
        if not self.acting:
            return
        error = write_json(self.dir / STATE_FILE, self.state(stopped=stopped))
        self._dirty = False
        # Said when it starts, changes or ends, not on every heartbeat: a full disk would otherwise fill the stream.
        if error != self._state_error:
            message = error or f"{STATE_FILE}: written again"
            if error or self._state_error:
                self.emit({"type": "watchdog", "time": _iso(self.clock.time()), "message": message})
            self._state_error = error

    # ---------------------------------------------------------------------------------------------- exporter
    def extras(self) -> ExporterExtras:
        """What the Prometheus exporter shows beyond the snapshot: remediations and budgets."""
        from rlwatch.export.exporter import BudgetState, ExporterExtras

        now = self.clock.monotonic()
        with self._lock:
            states = []
            for budget in {id(b): b for b in self._budgets.values()}.values():
                for st in budget.states():
                    delay = None if st.next_allowed is None else max(0.0, st.next_allowed - now)
                    states.append(BudgetState(st.key, st.gave_up is not None, st.restarts_in_window, delay))
            return ExporterExtras(remediations=dict(self._counts), budgets=tuple(states))


def _reading(snap: Snapshot) -> tuple[int, int] | None:
    """(bytes read, bytes) of the backlog while it is being read, its newest part previewed included."""
    if snap.backlog is not None:
        return snap.backlog
    return (1, 1) if snap.preview is not None else None  # read, the preview not yet dropped: a moment


def _own_create_time() -> float | None:
    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


def _iso(t: float) -> str | None:
    from rlwatch.export.report import iso

    return iso(t) if math.isfinite(t) else None


__all__ = ["Notifier", "Watchdog", "WatchdogError", "log_owners", "plain_watchdog"]
