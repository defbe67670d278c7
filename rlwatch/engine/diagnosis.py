"""Turn a snapshot into findings: what is wrong, in the words a person would use after a health check.

Each rule is a small function over the snapshot plus a few facts that are not in it (thresholds, start times,
missing expected processes). Rules never raise on absent data: a rule whose inputs are ``None`` says nothing.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from rlwatch.common.state import (
    ChildFailure,
    EventSummary,
    Finding,
    Incident,
    IncidentTally,
    Severity,
    Snapshot,
    TimelineEntry,
    line_ref,
)
from rlwatch.config.models import Thresholds
from rlwatch.logs.kinds import builtin_kinds

CRIT, WARN, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO


@dataclass(frozen=True)
class Context:
    """Facts the rules need beyond the snapshot."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    missing_expected: tuple[str, ...] = ()  # roles configured as expected with no live process
    starts: dict[str, tuple[float, ...]] = field(default_factory=dict)  # role -> recent start times (wall)
    memory_limits: dict[str, int] = field(default_factory=dict)  # process name -> configured RSS limit
    server_start_timeout_s: float = 600.0
    server_grace_s: float = 10.0  # a live server silent for less than this (two probes) may just be busy
    trainer_alive: bool | None = None
    gpu_idle: bool | None = None
    no_run: str | None = None  # nothing of a training run seen: where discovery looked


def hhmm(t: float | None, now: float | None = None) -> str:
    """A clock time; with the date too when ``t`` is not on the same day as ``now`` (a log from yesterday)."""
    if t is None or not math.isfinite(t):
        return "?"
    same_day = now is None or time.localtime(t)[:3] == time.localtime(now)[:3]
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", time.localtime(t))


def _known(t: float | None) -> float | None:
    return t if t is not None and math.isfinite(t) else None


def when_text(
    t: float | None, by: float | None, approximate: bool, now: float | None = None, position: str | None = None
) -> str:
    """A time as far as it is known. Lines without a time of their own (read from a backlog) have only bounds:
    "between 09:12:03 and 09:40:00", "before 09:40:00" (the file's modification time), "after 09:12:03", or
    "time unknown", with where the line sits ("train.log:5123, after step 1869"). Never the time it was read."""
    t, by = _known(t), _known(by)
    if not approximate or (t is not None and by == t):
        return hhmm(t, now)
    if t is None and by is None:
        out = "time unknown"
    elif by is None:
        out = f"after {hhmm(t, now)}"
    elif t is None:
        out = f"before {hhmm(by, now)}"
    else:
        out = f"between {hhmm(t, now)} and {hhmm(by, now)}"
    return f"{out} ({position})" if position else out


def first_text(ev: EventSummary, now: float | None = None) -> str:
    """When a kind was first seen, as far as it is known (see :func:`when_text`)."""
    return when_text(ev.first, ev.first_by, ev.approximate, now)


def last_text(ev: EventSummary, now: float | None = None) -> str:
    """When a kind was last seen, as far as it is known, with where its last line sits when undated."""
    return when_text(ev.last, ev.last_by, ev.approximate, now, ev.position)


def incident_text(i: Incident, now: float | None = None) -> str:
    """When an incident happened, as far as it is known: its first line's own time, else its last line's, else
    bounds and position."""
    if i.first_exact and math.isfinite(i.first):
        return hhmm(i.first, now)
    return when_text(i.last, i.by, i.approximate, now, i.position)


def exact_first(ev: EventSummary | None) -> float | None:
    """The first time of a kind where it is known exactly (a finding's "since"); None where it is only bounded."""
    if ev is None or ev.first is None:
        return None
    return ev.first if not ev.approximate or ev.first_by == ev.first else None


def exact_time(i: Incident) -> float | None:
    """An incident's first time where it is known exactly; None where it is only bounded."""
    return i.first if i.first_exact and math.isfinite(i.first) else None


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def backlog_text(done: int, total: int) -> str:
    """How far a backlog has been read, as the dashboard's header and `report` at a terminal say it."""
    return f"reading backlog: {_share(done, total)}"


def percent_read(done: int, total: int) -> int:
    return 100 * done // max(total, 1)


def _share(done: int, total: int) -> str:
    return f"{percent_read(done, total)} % of {human_bytes(total)}"


def human_duration(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{s / 60:.0f}m"
    if s < 2 * 86400:
        return f"{s // 3600:.0f}h{(s % 3600) / 60:02.0f}m"
    return f"{s / 86400:.1f}d"


Rule = Callable[[Snapshot, Context], Iterator[Finding]]


def _progressed_since(s: Snapshot, t: float | None) -> bool:
    """Training logged a step after ``t``: an error before it is history, not a current problem."""
    tr = s.training
    return t is not None and tr is not None and tr.last_step_at is not None and tr.last_step_at > t


def _stepped_after(s: Snapshot, i: Incident) -> bool:
    """A training step was logged below the incident's lines in its own file: progress after it, by position (an
    undated block is bounded only by the file's modification time, but the order of its lines is certain)."""
    step = s.events.get("step")
    last = step.recent[-1] if step is not None and step.recent else None
    return last is not None and last.path == i.path and last.lineno >= i.lineno + i.count


def _history(s: Snapshot, kind: str) -> bool:
    """Every file that had ``kind`` has shown progress since (a step, the server ready…): it is no longer happening."""
    ev = s.events.get(kind)
    # Undated lines count as history only when progress came after the latest they can be.
    last = (ev.last_by if ev.approximate else ev.last) if ev is not None else None
    return ev is not None and ev.count > 0 and (ev.streak == 0 or _progressed_since(s, last))


def _count(s: Snapshot, kind: str) -> int:
    e = s.events.get(kind)
    return e.count if e else 0


def _per_file(s: Snapshot, kind: str) -> str:
    e = s.events.get(kind)
    if not e or not e.files:
        return ""
    parts = [f"{path.rsplit('/', 1)[-1]} {n}" for path, n in sorted(e.files.items(), key=lambda kv: -kv[1])]
    return " (" + ", ".join(parts[:4]) + ")"


def server_down(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    srv = s.server
    refused = _count(s, "connection_refused")
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
        proc = next((p for p in s.processes if p.alive and p.pid == srv.pid), None)
        ready = s.events.get("server_ready")
        # ``last`` is the earliest the last ready line can be: ready after the start only when that is sure.
        was_ready = bool(proc and ready and ready.last is not None and ready.last >= proc.started_at)
        young = proc is not None and s.time - proc.started_at < ctx.server_start_timeout_s
        if proc and srv.process_alive and young and not was_ready and not refused:
            age = s.time - proc.started_at
            yield Finding(
                INFO,
                "server_starting",
                f"Inference server process {srv.pid} started {human_duration(age)} ago and is not answering yet "
                f"({srv.error or 'no answer'}); it has {human_duration(ctx.server_start_timeout_s - age)} left to "
                "come up.",
                proc.started_at,
            )
            return
        silent_for = None if srv.down_since is None else s.time - srv.down_since
        if srv.process_alive and silent_for is not None and silent_for < ctx.server_grace_s:
            yield Finding(
                INFO,
                "server_unhealthy",
                f"Inference server process {srv.pid} has not answered its health check at {srv.url} for "
                f"{human_duration(silent_for)} ({srv.error or 'no answer'}); checking again.",
                srv.down_since,
            )
            return
        if srv.process_alive:
            yield Finding(
                CRIT,
                "server_unhealthy",
                f"Inference server process {srv.pid} is alive but its health check fails at {srv.url} "
                f"({srv.error or 'no answer'}) since {hhmm(srv.down_since, s.time)}.",
                srv.down_since,
            )
            return
        extra = ""
        since = srv.down_since
        if refused:
            ev = s.events["connection_refused"]
            first = exact_first(ev)
            if first is not None and (since is None or first < since):
                since = first  # the errors show when it really went away; the probe only saw it now
            extra = (
                f"; {refused} connection-refused errors{_per_file(s, 'connection_refused')}, "
                f"first {first_text(ev, s.time)}, last {last_text(ev, s.time)}. Training cannot make progress"
            )
        yield Finding(
            CRIT,
            "server_down",
            f"Inference server {srv.url} is down since {hhmm(since, s.time)} ({srv.error or 'no answer'}){extra}.",
            since,
        )
    elif refused >= ctx.thresholds.connection_storm and srv is not None and not srv.expected:
        # No evidence of an inference server (TRL's colocated generation): what refuses is something else.
        ev = s.events["connection_refused"]
        why = f" ({srv.evidence[0]})" if srv.evidence else ""
        yield Finding(
            WARN,
            "connection_errors",
            f"{refused} connection-refused errors{_per_file(s, 'connection_refused')} from {first_text(ev, s.time)} "
            f"to {last_text(ev, s.time)}; no inference server is expected for this run{why}.",
            exact_first(ev),
        )
    elif refused >= ctx.thresholds.connection_storm and (srv is None or srv.up is None):
        ev = s.events["connection_refused"]
        yield Finding(
            CRIT,
            "connection_refused",
            f"{refused} connection-refused errors{_per_file(s, 'connection_refused')} from {first_text(ev, s.time)} "
            f"to {last_text(ev, s.time)}: the inference server is probably gone.",
            exact_first(ev),
        )


def restart_loop(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    th = ctx.thresholds
    for role, all_starts in ctx.starts.items():
        starts = sorted(t for t in all_starts if math.isfinite(t))  # an undated start line of a backlog is NaN
        if len(starts) < th.restart_loop_count:
            continue
        recent = starts[-th.restart_loop_count :]
        gaps = [b - a for a, b in itertools.pairwise(recent)]
        if gaps and max(gaps) <= th.restart_loop_uptime_s * 1.5:
            period = sum(gaps) / len(gaps)
            yield Finding(
                CRIT,
                "restart_loop",
                f"Restart loop: the {role} started {len(starts)} times, every ~{human_duration(period)}, "
                f"never staying up past {human_duration(th.restart_loop_uptime_s)}. "
                "This is not a crash at a training step: look at what the start command does.",
                recent[0],
            )


def memory(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    th = ctx.thresholds
    mem = s.memory
    if mem and mem.total_bytes and mem.available_bytes is not None:
        used = 1 - mem.available_bytes / mem.total_bytes
        if used >= th.memory_warn_fraction:
            yield Finding(
                CRIT if used >= 0.97 else WARN,
                "memory_high",
                f"Host RAM at {used:.1%} ({human_bytes(mem.total_bytes - mem.available_bytes)} of "
                f"{human_bytes(mem.total_bytes)}); {human_bytes(mem.available_bytes)} available.",
                s.time,
            )
    if mem and mem.oom_kills:
        yield Finding(CRIT, "oom_kill", f"The kernel OOM killer has killed {mem.oom_kills} process(es) here.", None)
    for p in s.processes:
        limit = ctx.memory_limits.get(p.name)
        if p.alive and limit and p.rss_bytes and p.rss_bytes > limit:
            yield Finding(
                CRIT,
                "over_memory_limit",
                f"{p.name} (pid {p.pid}) uses {human_bytes(p.rss_bytes)}, over its {human_bytes(limit)} limit.",
                None,
            )
        growth = p.rss_growth_bytes_per_hour
        if p.alive and growth is not None and growth >= th.leak_bytes_per_hour:
            when = ""
            if mem and mem.forecast_exhausted_at:
                when = f"; at this rate RAM runs out at {hhmm(mem.forecast_exhausted_at, s.time)}"
            yield Finding(
                WARN,
                "memory_leak",
                f"{p.name} (pid {p.pid}) grows {human_bytes(growth)}/h, now {human_bytes(p.rss_bytes)}{when}. "
                "Only restarting it frees leaked memory.",
                p.started_at,
            )


def brake(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    ev = s.events.get("emergency_brake")
    if not ev or not ev.count:
        return
    th = ctx.thresholds
    if ev.streak >= th.brake_streak:
        yield Finding(
            CRIT,
            "brake_no_relief",
            f"Emergency brake fired {ev.streak} times in a row ({ev.count} in all, {ev.rate_per_min:.1f}/min) "
            "and memory is not coming back: the brake cannot free leaked memory, restart the worker (key w).",
            exact_first(ev),
        )
    else:
        yield Finding(WARN, "brake", f"Emergency brake fired {ev.count} times (streak {ev.streak}).", exact_first(ev))


def watchdog(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    for role in ctx.missing_expected:
        yield Finding(
            CRIT,
            "expected_missing",
            f"The expected {role} is not running: nothing will restart leaking or crashed processes.",
            None,
        )


def watchdog_state(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """What the headless watchdog's own state file says: it gave up, it is stuck, or it died without a word."""
    wd = s.watchdog
    if wd is None or wd.stopped is not None:
        return  # none ever ran here, or it was stopped on purpose
    for g in wd.gave_up:
        yield Finding(
            CRIT,
            "watchdog_gave_up",
            f"The watchdog gave up on {g.target} after {g.reason} — it will not act on it again until "
            "`rlwatch act rearm`.",
            g.since,
        )
    last_beat = s.time - wd.heartbeat_age_s if wd.heartbeat_age_s is not None else None
    if wd.running and wd.stale:
        yield Finding(
            CRIT,
            "watchdog_not_responding",
            f"The watchdog (pid {wd.pid}) is not responding: no heartbeat since {hhmm(last_beat, s.time)} "
            f"({human_duration(wd.heartbeat_age_s)}); its policies are not being applied.",
            last_beat,
        )
    elif wd.running and wd.reading_backlog is not None:
        yield Finding(
            INFO,
            "watchdog_reading",
            f"The watchdog (pid {wd.pid}) is reading the logs' backlog ({_share(*wd.reading_backlog)}) and applies "
            "no policy until it is read: what it would act on must rest on the whole of what the logs say.",
            None,
        )
    elif not wd.running and "watchdog" not in ctx.missing_expected:
        yield Finding(
            CRIT,
            "watchdog_died",
            f"The watchdog (pid {wd.pid}) is gone since {hhmm(last_beat, s.time)} without stopping cleanly: "
            "nothing will restart leaking or crashed processes. "
            "Start it again (`rlwatch service install` keeps it alive).",
            last_beat,
        )


OUTSIDE_MIN_BYTES = 1024**3  # less than this held outside is not worth a finding


def gpu(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """GPU holders and held memory. Killing is advised only for strays — holders with positive reasons — and
    never for memory held outside this container, which no kill from here can reach."""
    strays = s.zombies
    unknown = s.unknown_holders
    busy = _count(s, "cuda_busy")
    busy_now = bool(busy) and not _history(s, "cuda_busy")
    modes = {g.compute_mode for g in s.gpus if g.compute_mode}
    mode = f" Compute mode {'/'.join(sorted(modes))}." if modes else ""
    if strays:
        pids = ", ".join(str(h.pid) for h in strays[:6])
        yield Finding(
            CRIT if busy_now else WARN,
            "gpu_strays",
            f"{len(strays)} stray process(es) hold the GPU (pid {pids}): {strays[0].reason}.{mode}"
            " Kill them with key z.",
            min(h.create_time for h in strays),
        )
    if unknown:
        first = unknown[0]
        pids = ", ".join(str(h.pid) for h in unknown[:6])
        yield Finding(
            WARN if busy_now else INFO,
            "gpu_unknown_holders",
            f"{len(unknown)} process(es) outside the live run hold the GPU (pid {pids}) and rlwatch cannot tell "
            f"what they are — pid {first.pid}: {first.evidence}. It will not stop them on its own.",
            min(h.create_time for h in unknown),
        )
    outside = [g for g in s.gpus if g.outside_bytes and g.outside_bytes >= OUTSIDE_MIN_BYTES]
    if outside:
        where = "; ".join(
            f"GPU {g.index}: {human_bytes(g.outside_bytes)}"
            + (f" (NVML pid {', '.join(map(str, g.outside_pids[:4]))}, not visible here)" if g.outside_pids else "")
            for g in outside
        )
        cause = " — that is why the device is busy or unavailable" if busy_now and not strays else ""
        yield Finding(
            CRIT if busy_now and not strays else INFO,
            "gpu_outside",
            f"GPU memory is held by processes outside this container{cause}: {where}. No kill from here can reach "
            "them; restarting the pod frees them.",
            None,
        )
    if busy:
        ev = s.events["cuda_busy"]
        history = _history(s, "cuda_busy")
        yield Finding(
            INFO if history else CRIT,
            "device_busy",
            f"{busy} 'CUDA-capable device(s) is/are busy or unavailable' errors{_per_file(s, 'cuda_busy')}, "
            f"last {last_text(ev, s.time)}" + ("; the device has been usable since." if history else "."),
            exact_first(ev),
        )
    if s.gpu is not None and not s.gpu.available and s.gpu.backend != "none":
        yield Finding(INFO, "gpu_unavailable", f"GPU data not available: {s.gpu.error}.", None)


def training(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    if ctx.no_run is not None:
        # Not "healthy": there is nothing here to be healthy. Say where rlwatch looked, so a person can point it.
        yield Finding(WARN, "no_run", f"No training run found here: {ctx.no_run}.", None)
        return
    tr = s.training
    if tr is None:
        return
    if tr.stalled and ctx.trainer_alive is not False:
        idle = " and the GPU is idle" if ctx.gpu_idle else ""
        last = tr.last_step_at or tr.last_line_at
        yield Finding(
            WARN,
            "stalled",
            f"Training stalled: no step since {hhmm(last, s.time)} (step {tr.last_step}){idle}.",
            last,
        )
    if tr.weight_update_s and tr.weight_update_timeout_s:
        last_wu = tr.weight_update_s[-1]
        if last_wu >= ctx.thresholds.weight_update_warn_fraction * tr.weight_update_timeout_s:
            yield Finding(
                WARN,
                "weight_update_slow",
                f"Weight update took {last_wu:.1f}s, near its {tr.weight_update_timeout_s:.0f}s timeout.",
                None,
            )


_CUDA_BUSY = next(k.regex for k in builtin_kinds() if k.name == "cuda_busy")  # the kind's own words, in a title
_CONNECTION_WORDS = re.compile(
    r"ConnectionRefused|Connect call failed|Connection refused|ClientConnectorError|can.t be reached"
    r"|Failed after \d+ retries",
    re.IGNORECASE,
)


def occurrences(incidents: Sequence[Incident], dropped: Sequence[IncidentTally], kind: str, signature: str) -> int:
    """How many incidents of ``kind`` have ``signature``: the kept ones and the older ones tallied apart."""
    kept = sum(1 for i in incidents if i.kind == kind and i.signature == signature)
    return kept + sum(t.count for t in dropped if t.kind == kind and t.signature == signature)


def _short(title: str, limit: int = 160) -> str:
    title = title.split(". Payload:", maxsplit=1)[0]
    return title if len(title) <= limit else title[: limit - 1] + "…"


def crashes(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    # Failed requests to a dead server are its consequence, reported with it, not crashes of their own; so is a
    # process that could not take a device that strays hold (reported with the strays, whose killing is the fix).
    server_gone = _count(s, "connection_refused") > 0
    strays_busy = bool(s.zombies) and _count(s, "cuda_busy") > 0
    blocks = [
        i
        for i in s.incidents
        if i.kind in ("traceback", "crash")
        and not (server_gone and _CONNECTION_WORDS.search(i.title))
        and not (strays_busy and _CUDA_BUSY.search(i.title))
    ]
    if not blocks:
        return
    failed = torchrun_failure(s)
    if failed is not None:
        yield _torchrun_finding(s, failed)
        # What torchrun stopped after the root cause (a victim's SIGTERM traceback) is not the last exception.
        victims = {v.rank for v in failed.victims if v.rank is not None}
        blocks = [i for i in blocks if i.rank is None or i.rank not in victims]
        blocks = [i for i in blocks if i is not failed and i.kind != "crash" and i is not failed.cause]
        if not blocks:
            return
    by_sig = Counter(i.signature for i in blocks if i.kind == "traceback")
    # The kept incidents are the newest only: the older ones of the same signature are tallied apart.
    older = {t.signature: t for t in s.dropped_incidents if t.kind == "traceback" and t.signature in by_sig}
    for sig_, tally in older.items():
        by_sig[sig_] += tally.count
    last = max(blocks, key=_latest)
    where = f" at {last.location}" if last.location else ""
    repeated = [sig for sig, n in by_sig.items() if n >= 2]
    if repeated:
        sig = max(repeated, key=lambda k: by_sig[k])
        inc = max((i for i in blocks if i.signature == sig), key=_latest)
        loc = f" at {inc.location}" if inc.location else ""
        same = [i for i in blocks if i.signature == sig]
        first = min(same, key=lambda i: (i.first, i.lineno))
        yield Finding(
            INFO if _history(s, "traceback") else CRIT,
            "crash_repeating",
            f"The same crash happened {by_sig[sig]} times: {_short(inc.title)}{loc} [{sig}].",
            older[sig].first if sig in older else exact_time(first),
        )
    elif failed is None and ctx.trainer_alive is not True and last.kind == "traceback" and not _history(s, "traceback"):
        yield Finding(
            WARN,
            "crashed",
            f"Last exception: {_short(last.title)}{where} ({_file(last)}, {incident_text(last, s.time)}).",
            exact_time(last),
        )


def _latest(i: Incident) -> tuple[float, float, int]:
    """Order incidents by when they happened; an undated one by the latest it can be, then by line."""
    by = i.by if i.by is not None else i.last
    return (i.last, by, i.lineno)


def torchrun_failure(s: Snapshot) -> Incident | None:
    """torchrun's latest ChildFailedError report that names a root cause, if any."""
    found = [i for i in s.incidents if i.root_cause is not None]
    return max(found, key=_latest) if found else None


def failure_text(f: ChildFailure) -> str:
    """ "rank 0 (exit code -6, SIGABRT, host pod-0)": how one worker ended, as torchrun reported it."""
    parts = [
        f"exit code {f.exitcode}" if f.exitcode is not None else "",
        f.signal or "",
        f"host {f.host}" if f.host else "",
    ]
    detail = ", ".join(p for p in parts if p)
    return f"rank {f.rank if f.rank is not None else '?'}" + (f" ({detail})" if detail else "")


def _torchrun_finding(s: Snapshot, failed: Incident) -> Finding:
    root = failed.root_cause
    assert root is not None
    cause = failed.cause
    if cause is not None:
        why = f", after {_short(cause.title)}" + (f" at {cause.location}" if cause.location else "")
        why += f" ({_file(cause)}, {incident_text(cause, s.time)})"
    elif root.error and not root.error.startswith(("Signal ", "To enable traceback")):
        why = f": {_short(root.error)}"
    else:
        why = "; what it printed before is not in the logs read"
    victims = ""
    if failed.victims:
        names = ", ".join(failure_text(v) for v in failed.victims[:8])
        more = f" and {len(failed.victims) - 8} more" if len(failed.victims) > 8 else ""
        victims = f" Stopped after it: {names}{more}."
    # A relaunch that got past it makes it history: told, but not what is wrong now.
    after = _progressed_since(s, failed.by if failed.approximate else failed.last) or _stepped_after(s, failed)
    return Finding(
        INFO if after else CRIT,
        "torchrun_failed",
        f"torchrun's root cause (first observed failure): {failure_text(root)}{why}.{victims} ({_file(failed)})"
        + ("; the run has progressed since." if after else ""),
        exact_time(cause) if cause is not None else exact_time(failed),
    )


def _file(i: Incident) -> str:
    return line_ref(i.path, i.lineno)


def failures(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    words = {
        "cuda_oom": "CUDA out-of-memory errors",
        "nccl_timeout": "NCCL watchdog timeouts",
        "nccl_error": "NCCL errors",
        "child_failed": "torchrun child failures",
        "engine_dead": "inference-engine deaths",
        "oom_kill": "kernel OOM kills in the logs",
    }
    # torchrun's report read whole (torchrun_failed) says what its ChildFailedError lines say, and more.
    read_whole = any(i.root_cause is not None for i in s.incidents)
    for kind, text in [*words.items(), ("timeout", "timeout errors")]:
        n = _count(s, kind)
        if not n or (kind == "child_failed" and read_whole):
            continue
        ev = s.events[kind]
        if kind == "nccl_timeout":
            msg = _nccl_text(s, ev)
        else:
            msg = f"{n} {text}{_per_file(s, kind)}, last {last_text(ev, s.time)}"
        if _history(s, kind):
            yield Finding(INFO, kind, msg + "; there has been progress since.", exact_first(ev))
        elif kind == "engine_dead" and s.training is not None and s.training.finished:
            # vLLM's offline engine (TRL's colocated generation) prints "Engine core proc … died unexpectedly" when
            # the interpreter exits at the end of a healthy run: after the last step it is a shutdown, not a crash.
            yield Finding(INFO, kind, msg + "; the training had finished (an engine stopping at exit).", None)
        else:
            yield Finding(WARN if kind == "timeout" else CRIT, kind, msg + ".", exact_first(ev))


def _nccl_text(s: Snapshot, ev: EventSummary) -> str:
    """Timed-out collectives, each once however many times torch printed it: "1 NCCL collective timeout (printed
    3 times): rank 0 ALLREDUCE SeqNum=5, timeout 10000 ms"."""
    timeouts = [i for i in s.incidents if i.kind == "nccl_timeout"]
    if not timeouts:
        return f"{ev.count} NCCL watchdog timeout lines{_per_file(s, 'nccl_timeout')}, last {last_text(ev, s.time)}"
    older = [t for t in s.dropped_incidents if t.kind == "nccl_timeout"]  # before the kept ones
    n = len(timeouts) + sum(t.count for t in older)
    printed = sum(i.count for i in timeouts) + sum(t.lines for t in older)
    head = f"{n} NCCL collective timeout{'s' if n != 1 else ''}"
    if printed > n:
        head += f" (printed {printed} times)" if n == 1 else f" (printed {printed} times in all)"
    shown = []
    for i in timeouts[-3:]:
        c = i.collective
        if c is None:
            continue
        limit = f", timeout {c.timeout_ms} ms" if c.timeout_ms is not None else ""
        rank = f"rank {c.rank} " if c.rank is not None else ""
        shown.append(f"{rank}{c.op} SeqNum={c.seq}{limit} ({_file(i)}, {incident_text(i, s.time)})")
    more = f" and {n - 3} more" if n > 3 else ""
    return f"{head}: " + "; ".join(shown) + more if shown else head


def disk(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    d = s.disk
    if d and d.free_bytes is not None and d.free_bytes < ctx.thresholds.disk_free_bytes:
        size = ""
        if s.checkpoint and s.checkpoint.latest and s.checkpoint.latest.size_bytes:
            size = f"; a checkpoint takes {human_bytes(s.checkpoint.latest.size_bytes)}"
        yield Finding(
            CRIT if d.free_bytes < ctx.thresholds.disk_free_bytes / 4 else WARN,
            "disk_low",
            f"Only {human_bytes(d.free_bytes)} free on {d.path}{size}.",
            None,
        )


RULES: tuple[Rule, ...] = (
    server_down,
    restart_loop,
    memory,
    brake,
    watchdog,
    watchdog_state,
    gpu,
    training,
    crashes,
    failures,
    disk,
)


def diagnose(s: Snapshot, ctx: Context) -> tuple[Finding, ...]:
    found: list[Finding] = []
    for rule in RULES:
        found.extend(rule(s, ctx))
    return tuple(sorted(found, key=lambda f: (f.severity.rank, f.since or 0.0)))


def timeline(s: Snapshot, limit: int = 20) -> tuple[TimelineEntry, ...]:
    """The handful of moments that explain an incident, oldest first (checkpoint 05:04 → server gone 05:09 → …)."""
    out: list[TimelineEntry] = []
    if s.checkpoint and s.checkpoint.latest and s.checkpoint.latest.saved_at:
        c = s.checkpoint.latest
        out.append(TimelineEntry(c.saved_at or 0.0, f"last checkpoint saved ({c.path.rsplit('/', 1)[-1]})"))
    if s.server and s.server.down_since:
        out.append(TimelineEntry(s.server.down_since, f"inference server down ({s.server.error or 'no answer'})"))
    labels = {
        "connection_refused": "connection-refused errors",
        "cuda_busy": "'device busy or unavailable' errors",
        "emergency_brake": "emergency brake firing",
        "traceback": "tracebacks",
        "cuda_oom": "CUDA out of memory",
        "nccl_timeout": "NCCL timeouts",
        "restart": "restarts",
    }
    for kind, label in labels.items():
        ev = s.events.get(kind)
        if not ev or not ev.count:
            continue
        if not ev.approximate:
            if ev.first is not None:
                span = f" until {hhmm(ev.last, s.time)}" if ev.last and ev.last != ev.first else ""
                out.append(TimelineEntry(ev.first, f"{label} begin ({ev.count}{span})"))
            continue
        # Undated lines: no "until" (the time they were read says nothing), only bounds and where the last sits.
        first = ev.first if ev.first is not None else -math.inf
        text = f"{label} begin ({ev.count}, last {last_text(ev, s.time)})"
        out.append(TimelineEntry(first, text, approximate=True, by=ev.first_by))
    torchrun = any(i.root_cause is not None for i in s.incidents)
    for inc in s.incidents:
        if torchrun and inc.kind == "crash" and "ChildFailedError" in inc.title:
            continue  # the report read whole says more than the line that announced it
        if inc.kind == "crash" or inc.root_cause is not None:
            title = inc.title if inc.root_cause is None else f"torchrun failed: {failure_text(inc.root_cause)}"
            if inc.approximate:
                out.append(TimelineEntry(inc.first, f"crash: {title}", approximate=True, by=inc.by))
            else:
                out.append(TimelineEntry(inc.first, f"crash: {title}"))
        elif inc.kind == "nccl_timeout":
            out.append(TimelineEntry(inc.first, f"NCCL timeout: {inc.title}", approximate=inc.approximate, by=inc.by))
    if s.training and s.training.last_step_at:
        out.append(TimelineEntry(s.training.last_step_at, f"last training step ({s.training.last_step})"))
    out.sort(key=lambda e: (e.time, e.by if e.by is not None else e.time))
    return tuple(out[-limit:])
