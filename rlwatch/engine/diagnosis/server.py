"""The inference server: down, unhealthy, starting, or not expected at all (refusals then come from elsewhere)."""

from __future__ import annotations

import math
from collections.abc import Iterator

from rlwatch.common.state import (
    Finding,
    Snapshot,
)
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import (
    CRIT,
    INFO,
    WARN,
    Context,
    count_of,
    per_file,
)
from rlwatch.engine.diagnosis.wording import (
    exact_first,
    first_text,
    hhmm,
    human_duration,
    last_text,
)

# A first look this close to now is said "first seen now".
_FIRST_LOOK_S = 5.0


def down_when(s: Snapshot) -> tuple[float | None, str]:
    """When the server went down, from evidence, and those words: the first refused connection's own time; else the
    latest that first refusal can be (an undated line of a backlog); else the probe's time, said as "first seen now"
    when it is the probe's first look (a one-shot report dated the outage at the moment it ran, a later report
    later again; a dashboard started after it went dated it from its own start). The finding, its "since", the
    report's server line and its timeline all say this."""
    srv = s.server
    if srv is None or srv.up is not False:
        return None, ""
    since = srv.down_since
    ev = s.events.get("connection_refused")
    first = exact_first(ev)
    if first is not None and (since is None or first <= since):
        return first, f"since {hhmm(first, s.time)}"  # the errors show when it really went away
    bound = ev.first_by if ev is not None and ev.count and ev.approximate else None
    if bound is not None and math.isfinite(bound) and (since is None or bound < since - _FIRST_LOOK_S):
        return bound, f"since {hhmm(bound, s.time)} at the latest (its first refused connection)"
    if since is not None and not srv.seen_up:
        # Never seen healthy by this rlwatch: its "down since" is when it first looked (a one-shot report: now).
        tr = s.training
        last = tr.last_step_at if tr is not None and tr.last_step_at is not None else None
        after = f"; its last step came at {hhmm(last, s.time)}" if last is not None and last < since else ""
        seen = "now" if s.time - since < _FIRST_LOOK_S else hhmm(since, s.time)
        return since, f"(first seen {seen}{after})"
    return since, f"since {hhmm(since, s.time)}"


def server_down(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    srv = s.server
    refused = count_of(s, "connection_refused")
    finished = s.training is not None and s.training.finished
    if srv is not None and srv.up is False and finished:
        # A run that finished needs no server: TRL's and AReaL's launchers stop it at the end. Not a problem.
        yield Finding(
            INFO,
            "server_gone_after_finish",
            f"Inference server {srv.url} does not answer ({srv.error or 'no answer'}); training has finished.",
            srv.down_since,
        )
    elif srv is not None and srv.up is False:
        # The probe may have run before the process list saw the server (a start a second old): its process is then
        # the live one of the server role.
        proc = next((p for p in s.processes if p.alive and p.pid == srv.pid), None) or next(
            (p for p in s.processes if p.alive and p.role == "server" and srv.pid is None), None
        )
        alive = srv.process_alive or proc is not None
        ready = s.events.get("server_ready")
        # ``last`` is the earliest the last ready line can be: ready after the start only when that is sure.
        was_ready = bool(proc and ready and ready.last is not None and ready.last >= proc.started_at)
        young = proc is not None and s.time - proc.started_at < ctx.server_start_timeout_s
        # Refusals of an earlier attempt (before this server process started) say nothing of the one starting now:
        # right after a resume the old run's storm must not make its new server "alive but failing".
        refused_now = refused and (proc is None or _refused_since(s, proc.started_at))
        if proc and alive and young and not was_ready and not refused_now:
            age = s.time - proc.started_at
            yield Finding(
                INFO,
                "server_starting",
                f"Inference server process {proc.pid} started {human_duration(age)} ago and is not answering yet "
                f"({srv.error or 'no answer'}); it has {human_duration(ctx.server_start_timeout_s - age)} left to "
                "come up.",
                proc.started_at,
            )
            return
        launching = _launching(s, ctx)
        if proc is None and launching is not None and not _refused_since(s, launching):
            # A run that is starting: its launcher lives, no step yet, nothing refused. Its server comes later.
            yield Finding(
                INFO,
                "server_starting",
                f"The run started {human_duration(s.time - launching)} ago and its inference server is not up yet "
                f"({srv.error or 'no answer'} at {srv.url}); it has "
                f"{human_duration(ctx.server_start_timeout_s - (s.time - launching))} left to come up.",
                launching,
            )
            return
        # A process cannot have failed its health check before it started: after a resume or a restart the probe's
        # "down since" is the old server's, and the new one gets its grace from its own start.
        down_since = srv.down_since
        if down_since is not None and proc is not None and proc.started_at > down_since:
            down_since = proc.started_at
        silent_for = None if down_since is None else s.time - down_since
        if alive and silent_for is not None and silent_for < ctx.server_grace_s:
            yield Finding(
                INFO,
                "server_unhealthy",
                f"Inference server process {proc.pid if proc else srv.pid} "
                + (
                    f"did not answer its health check at {srv.url} just now"
                    if silent_for < 1
                    else f"has not answered its health check at {srv.url} for {human_duration(silent_for)}"
                )
                + f" ({srv.error or 'no answer'}); a busy server can miss a check, so one miss is not yet a failure.",
                down_since,
            )
            return
        if alive:
            yield Finding(
                CRIT,
                "server_unhealthy",
                f"Inference server process {proc.pid if proc else srv.pid} is alive but its health check fails at "
                f"{srv.url} ({srv.error or 'no answer'}) since {hhmm(down_since, s.time)}.",
                down_since,
                action="restart-server",
            )
            return
        extra = ""
        since, when = down_when(s)
        if refused:
            ev = s.events["connection_refused"]
            extra = (
                f"; {plural(refused, 'connection-refused error')}{per_file(s, 'connection_refused')}, "
                f"first {first_text(ev, s.time)}, last {last_text(ev, s.time)}. Training cannot make progress"
            )
        yield Finding(
            CRIT,
            "server_down",
            # The state word before the address: a one-line banner cut to fit keeps "down", not the URL.
            f"Inference server down {when} ({srv.error or 'no answer'}) at {srv.url}{extra}.",
            since,
            action=_bring_back(s, ctx),
        )
    elif refused >= ctx.thresholds.connection_storm and srv is not None and not srv.expected:
        # No evidence of an inference server (TRL's colocated generation): what refuses is something else.
        ev = s.events["connection_refused"]
        why = f" ({srv.evidence[0]})" if srv.evidence else ""
        yield Finding(
            WARN,
            "connection_errors",
            f"{plural(refused, 'connection-refused error')}{per_file(s, 'connection_refused')} from "
            f"{first_text(ev, s.time)} to {last_text(ev, s.time)}; no inference server is expected for this run{why}.",
            exact_first(ev),
        )
    elif refused >= ctx.thresholds.connection_storm and (srv is None or srv.up is None):
        ev = s.events["connection_refused"]
        yield Finding(
            CRIT,
            "connection_refused",
            f"{plural(refused, 'connection-refused error')}{per_file(s, 'connection_refused')} from "
            f"{first_text(ev, s.time)} to {last_text(ev, s.time)}: the inference server is probably gone.",
            exact_first(ev),
        )


def _refused_since(s: Snapshot, start: float) -> bool:
    """Whether a connection-refused line can have come at ``start`` or later (its latest possible time, where the
    line carries none of its own; unbounded counts as possible)."""
    ev = s.events.get("connection_refused")
    if ev is None or not ev.count:
        return False
    latest = ev.last_by if ev.approximate else ev.last
    return latest is None or not math.isfinite(latest) or latest >= start


def _launching(s: Snapshot, ctx: Context) -> float | None:
    """When the run started, while it is still starting: a launcher or trainer alive for less than the server's start
    timeout and no training step counted yet. None once it has stepped, or when nothing of it lives."""
    starts = [p.started_at for p in s.processes if p.alive and p.role in ("launcher", "trainer")]
    if not starts:
        return None
    first = min(starts)
    step = s.events.get("step")
    if step is not None and step.count:
        # Steps of an earlier attempt do not count: a run resumed a few seconds ago is starting again, and its
        # server with it (the banner must not ask for `s` while the resumed launcher brings its own server up).
        last = step.last_by if step.approximate else step.last
        if last is None or not math.isfinite(last) or last >= first:
            return None
    return first if s.time - first < ctx.server_start_timeout_s else None


def _bring_back(s: Snapshot, ctx: Context) -> str:
    """What brings a gone server back: restarting it while the trainer lives; else resuming the run, whose launcher
    starts its own server (the restart-server plan refuses the first where the launcher started the server)."""
    if ctx.trainer_alive:
        return "restart-server"
    launcher = any(p.role == "launcher" for p in s.processes) or s.recover is not None or ctx.resume_known
    return "resume" if launcher else "restart-server"
