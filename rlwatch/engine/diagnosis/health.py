"""What the run is doing, from evidence: progressing, finished, crashed, hung, stopped, or unknown.

"Healthy" is never the absence of a known string. A run is *progressing* only when it shows progress now — a step,
a metric line, a progress bar that moved — within what its own cadence predicts, with a live writer; *finished*
only on explicit evidence (the framework's completion line, the last step reached, a progress bar at its end).
Otherwise:

- *crashed*: a log ended in a failure (:mod:`rlwatch.logs.ending`: an exception, an error record, an exit code or
  a signal a launcher reported, a kernel report — whatever its words) with no progress anywhere after it;
- *hung*: its processes live, and it has made no progress for longer than its cadence allows (the larger of
  ``hang_factor`` times its step interval and ``hang_floor_s``; ``startup_s`` before its first step), whatever else
  its logs keep printing;
- *stopped*: no process of it is alive and its logs end without an error — the last lines, and when;
- *unknown*: the evidence does not say (a run that started and has not stepped yet, nothing seen at all).

*Progressing* needs a process of the run alive now: a log's fresh modification time is no life (a trainer the OOM
killer SIGKILLed leaves a log written a second ago). With none alive the run is stopped, crashed or finished at
once, with its last line and its time. Only where a log was written *after* rlwatch looked for the run's processes
and found none here (its writer runs in another container or on another host sharing the directory, or opens the
file only to write a line) is a writer proven that rlwatch cannot see: the state is then unknown, never progressing.

Each state carries the lines it rests on, and every view shows the same one (the report, ``watch --json``, the
exporter, the dashboard's header).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator

from rlwatch.common.state import EventSummary, Finding, LogEnding, RunState, Snapshot, line_ref
from rlwatch.config.models import Thresholds
from rlwatch.engine.diagnosis.base import CRIT, INFO, WARN, Context, StepSeen, progress_before
from rlwatch.engine.diagnosis.wording import hhmm, human_duration

__all__ = ["assess_run", "hang_allowance", "health", "undated"]

# Kinds whose lines prove progress (the counter's own; custom kinds marked `progress: true` come in the context).
_PROGRESS_KINDS = ("step", "checkpoint_saved")
# A progress bar at its end: `Episode [1/1]: 100%|██████████| 12/12 [` (tqdm), the last progress line of a run that
# completed its loop.
_BAR_DONE = re.compile(r"100%\|.*?\b(\d+)/(\1)\b")
_MEANING = {
    "SIGKILL": "killed by SIGKILL — most often the kernel's OOM killer or the platform (a memory limit, a preemption)",
    "SIGSEGV": "a segmentation fault (SIGSEGV) in native code",
    "SIGBUS": "a bus error (SIGBUS) — often /dev/shm too small for the workers' shared memory",
    "SIGABRT": "aborted (SIGABRT) — a fatal error inside the process, such as NCCL's watchdog or a C++ exception",
    "SIGTERM": "stopped by SIGTERM from outside (a person, the scheduler, the launcher)",
    "SIGQUIT": "SIGQUIT: a child process failed and its parent tore the process tree down",
    "SIGINT": "interrupted (SIGINT)",
}
_RAY_EXIT = {
    "SYSTEM_ERROR": "its worker process died (Ray's exit type SYSTEM_ERROR: killed, most often by the OOM killer, "
    "or crashed in native code)",
    "USER_ERROR": "its code raised (Ray's exit type USER_ERROR)",
    "NODE_DIED": "its node died (Ray's exit type NODE_DIED)",
    "INTENDED_USER_EXIT": "it was stopped on purpose (Ray's exit type INTENDED_USER_EXIT)",
}


def _only_there(pids: list[int]) -> str:
    """Processes that only stand in the run's directory or read its files: "pid 7 only works in …"."""
    shown = ", ".join(str(pid) for pid in pids[:4]) + (f" and {len(pids) - 4} more" if len(pids) > 4 else "")
    if len(pids) == 1:
        return f"pid {shown} only works in its directory or reads its files"
    return f"pids {shown} only work in its directory or read its files"


def _alive(s: Snapshot) -> list[int]:
    """The run's processes alive now: members of the live run, each with the evidence membership rests on. A role's
    pattern names a process's role; it does not make it this run's (another run's trainer matches it too)."""
    if s.live_run is None:
        return []
    dead = {p.pid for p in s.processes if not p.alive} | set(s.live_run.weak)  # reading the logs proves no life
    dead |= {pid for pid, _ in s.live_run.gone}
    return [pid for pid, _ in s.live_run.members if pid not in dead]


# A log's modification time later than the look by more than this was written after it: the kernel stamps files
# with a coarse clock (a tick behind the wall clock at most).
_AFTER_LOOK_S = 0.05


def _unseen_writer(s: Snapshot, writers: list[LogEnding]) -> str | None:
    """Why a writer of the run's logs exists that rlwatch cannot see, or None: rlwatch has not looked for the run's
    processes yet, or a log was written after it looked and found none here. A run whose processes rlwatch saw go
    is dead whatever its logs' times say (their last lines were written before they went)."""
    run = s.live_run
    if run is None or run.looked_at is None:
        return "rlwatch has not looked for its processes yet"
    if run.gone:
        return None
    after = [e for e in writers if e.mtime is not None and e.mtime > run.looked_at + _AFTER_LOOK_S]
    if not after:
        return None
    newest = max(after, key=lambda e: e.mtime or 0.0)
    return (
        f"{os.path.basename(newest.path)} was written at {hhmm(newest.mtime, s.time)}, after rlwatch looked for the "
        f"run's processes ({hhmm(run.looked_at, s.time)}) and found none writing it here: its writer runs where "
        "rlwatch cannot see (another container or host sharing the directory)"
    )


def _exact(t: float | None) -> float | None:
    return t if t is not None and math.isfinite(t) else None


def last_progress(s: Snapshot, ctx: Context) -> tuple[float | None, float | None]:
    """When the run last showed progress: (the latest time known for sure, the latest it can be). A step, a
    checkpoint, a progress kind of the configuration, or a log whose last meaningful line is its progress (then its
    modification time). A line of a backlog without a time of its own has only bounds: it counts for sure only at its
    earliest, and a hang is only said once even its latest is too long ago."""
    sure: list[float] = []
    bound: list[float] = []
    tr = s.training
    if tr is not None and (t := _exact(tr.last_step_at)) is not None:
        sure.append(t)  # the tracker's step time is a line's own time or when it was read live, never a bound
    for kind in (*_PROGRESS_KINDS, *ctx.progress_kinds):
        ev = s.events.get(kind)
        if ev is None or not ev.count:
            continue
        if not ev.approximate or ev.last_by == ev.last:
            if (t := _exact(ev.last)) is not None:
                sure.append(t)
        elif kind == "step" and (seen := _seen(ev, ctx)) is not None:
            # Earlier reads saw this very line: their time, never the file's modification time (a heartbeat moves
            # that on for ever); a line they did not find came after their look.
            own = _exact(ev.last_by)
            by = seen.by if own is None else min(seen.by, own)
            (sure if seen.exact and by == seen.by else bound).append(by)
            if seen.after is not None:
                sure.append(seen.after)
        elif (t := _exact(ev.last_by)) is not None:
            bound.append(t)
    # A log whose last meaningful line is its progress was written by progress at its modification time: a progress
    # line of the catalogue's, or the step event's latest line (a step read by its shape, which no word list knows).
    step = s.events.get("step")
    step_line = step.recent[-1] if step is not None and step.recent else None
    for e in s.endings:
        ends_in_progress = e.progress_line is not None and e.progress_line == e.last_line
        ends_in_step = step_line is not None and (step_line.path, step_line.lineno) == (e.path, e.last_lineno)
        if not e.failed and (ends_in_progress or ends_in_step) and e.mtime:
            sure.append(e.mtime)
    latest = max(sure + bound) if sure or bound else None
    return (max(sure) if sure else None), latest


def _seen(ev: EventSummary, ctx: Context) -> StepSeen | None:
    """What earlier reads saw of ``ev``'s last line, when the record is of that very line."""
    seen, last = ctx.seen, ev.recent[-1] if ev.recent else None
    if seen is None or last is None or (last.path, last.lineno) != (seen.path, seen.lineno):
        return None
    return seen


def _failure_time(e: LogEnding) -> float | None:
    """The failure's own time; else the time of the log's last line, which it came before; the file's modification
    time only last: a resumed run's new server appending to the same log moves it past the old failure (which then
    looked like this attempt's crash for a few seconds)."""
    return _exact(e.at) or _exact(e.last_at) or _exact(e.mtime)


def _where(e: LogEnding, lineno: int | None) -> str:
    name = os.path.basename(e.path)
    return line_ref(name, lineno) if lineno is not None else f"the end of {name}"


def _before(s: Snapshot, e: LogEnding, t: float) -> bool:
    """The run's last progress came before ``e``'s failure, by where its lines stand (base.progress_before)."""
    return progress_before(s, e.path, min((n for n in (e.first_lineno, e.lineno) if n is not None), default=None), t)


def _older(s: Snapshot, alive: list[int], e: LogEnding) -> bool:
    """Every process of the run alive now was already running when ``e``'s failure was logged: its writer is one of
    them, living on. One started since is a new attempt (startup-crash's retry): the failure's writer died."""
    t = _failure_time(e)
    started = {p.pid: p.started_at for p in s.processes}
    return t is not None and all(pid in started and started[pid] <= t for pid in alive)


def _ended(s: Snapshot, progress_at: float | None, started: float | None) -> LogEnding | None:
    """The failure the run ended in: the latest log ending in a failure with no progress after it, from this attempt
    (a failure older than the oldest live process of the run is an earlier attempt's)."""
    best: tuple[float, LogEnding] | None = None
    for e in s.endings:
        if not e.failed:
            continue
        t = _failure_time(e)
        if t is not None and progress_at is not None and progress_at > t and not _before(s, e, t):
            continue  # the run progressed after it (in another log): history
        if t is not None and started is not None and t < started - 5:
            continue
        key = t if t is not None else -math.inf
        if best is None or key > best[0]:
            best = (key, e)
    return best[1] if best else None


def _finished_by_ending(s: Snapshot) -> LogEnding | None:
    """A log whose last progress line is a bar at its end, where that bar is the run's outermost counter: the run's
    step reached its total, or equals the bar's count (the bar counts the steps), or no step is known beside it. A
    nested bar at its end (a rollout's 32/32 inside step 56 of 2290, an evaluation's) finishes nothing."""
    tr = s.training
    step, total = (tr.last_step, tr.total_steps) if tr is not None else (None, None)
    for e in s.endings:
        if e.progress_line is None or (m := _BAR_DONE.search(e.progress_line)) is None:
            continue
        if step is not None and not (total and step >= total) and int(m.group(1)) != step:
            continue
        if not e.failed:
            return e
    return None


def crash_text(e: LogEnding) -> str:
    """The failure in its own words, and what its signal, exit code or Ray exit type means."""
    parts = [e.title]
    if e.signal and e.signal in _MEANING:
        parts.append(_MEANING[e.signal])
    elif e.signal:
        parts.append(f"signal {e.signal}")
    elif e.code is not None and e.code > 0:
        parts.append(f"exit code {e.code}")
    if e.detail in _RAY_EXIT:
        parts.append(_RAY_EXIT[e.detail])
    if e.first and e.first != e.title:
        parts.append(f"it began with: {e.first[:200]}")
    return "; ".join(parts)


def _watchdog_saw(s: Snapshot) -> RunState | None:
    """A hang the run's own watchdog saw live: it times each line as it comes, where lines read afterwards carry no
    time of their own (a step line of TRL or verl), so a one-shot report cannot see the silence it saw."""
    wd = s.watchdog
    if wd is None or not wd.running or wd.stale or wd.run_state is None or wd.pid == os.getpid():
        return None  # the watchdog's own engine leans on nothing but its own reading
    state, why, since = wd.run_state
    if state != "hung":
        return None
    said = f" (as the watchdog, pid {wd.pid}, watching the logs live, sees it)"
    return RunState(state, why if why.endswith(said) else why + said, since)


def _held_by_a_rank(s: Snapshot) -> str | None:
    """What the job's collectives say of a rank the others wait for (NCCL RAS asked on suspicion, the flight
    records: a rank missing from a collective, or ranks that called different ones, which none of them completes),
    in a few words; None when they name none."""
    from rlwatch.engine.diagnosis.collectives import issues, ras_issue  # the collectives' rules read run states too

    found, _ = issues(s)
    missing = next((i for i in found if i.code in ("collective_missing_rank", "collective_mismatch")), None)
    if missing is None:
        missing = ras_issue(s)
    return None if missing is None else _waiting_words(missing.message, missing.code)


def hang_allowance(cadence_s: float | None, th: Thresholds) -> float:
    """How long a run whose processes live may show no progress before it is hung: ``hang_factor`` times its cadence
    (TrainingState.cadence_s), ``hang_floor_s`` at least. One rule for the run's state and the ranks' stacks."""
    return max(th.hang_factor * cadence_s, th.hang_floor_s) if cadence_s else th.hang_floor_s


def _pid_list(alive: list[int]) -> str:
    """The first four live processes of the run, as its states name them."""
    return ", ".join(str(pid) for pid in alive[:4])


def _waiting_words(message: str, code: str = "collective_missing_rank") -> str:
    lead = (
        "its ranks wait in collectives none of them completes"
        if code == "collective_mismatch"
        else "the job waits for a rank"
    )
    return f"{lead}: {message[0].lower()}{message[1:]}"


def _waits_for_a_rank(s: Snapshot, quiet: float | None, interval: float | None, th: Thresholds) -> str | None:
    """Before its cadence's allowance, a job whose ranks stopped at once and whose collectives name a rank behind:
    NCCL RAS asked after the quiet settled (collectives.ras_issue with ``quiet_since``), the run silent for
    ``hang_factor`` of its steps and at least EARLY_HANG_S. Its words, else None. A rank that falls one collective
    behind and catches up is never this: its counts are read only once the quiet has lasted; nor is one that saves a
    checkpoint while the others wait for it (a checkpoint of the run written since the quiet began); nor any run whose
    configuration raised hang_floor_s, its owner's word that ranks there work alone for that long (a rank-0-only
    evaluation): those are left to the cadence's allowance, as before."""
    from rlwatch.engine.diagnosis.collectives import EARLY_HANG_S, ras_issue

    if th.hang_floor_s > Thresholds.model_fields["hang_floor_s"].default:
        return None
    if quiet is None or s.time - quiet < max(EARLY_HANG_S, th.hang_factor * interval if interval else 0.0):
        return None
    saved = s.checkpoint.latest if s.checkpoint is not None else None
    if saved is not None and saved.saved_at is not None and saved.saved_at >= quiet:
        return None  # a checkpoint written during the quiet: one rank saving while the others wait is no hang
    missing = ras_issue(s, quiet_since=quiet)
    return None if missing is None else _waiting_words(missing.message)


def assess_run(s: Snapshot, ctx: Context) -> RunState:
    """The run's state, from the evidence in ``s`` (see the module's docstring)."""
    now = s.time
    th = ctx.thresholds
    alive = _alive(s)
    started = s.live_run.started_at if alive and s.live_run is not None else None
    progress_at, progress_by = last_progress(s, ctx)
    earlier = ""
    if started is not None and progress_by is not None and progress_by < started - 1:
        # All the progress seen came before the oldest live process of the run started: it was an earlier
        # attempt's (a resume, a restart). This attempt has shown none yet: it is starting, not hung since the old
        # attempt's last step, and not progressing on the strength of it.
        earlier = f"; the earlier attempt's last progress came at {hhmm(progress_by, now)}"
        progress_at = progress_by = None
    interval = s.training.cadence_s if s.training is not None else None
    allowance = hang_allowance(interval, th)
    tr = s.training
    step = f"step {tr.last_step}" if tr is not None and tr.last_step is not None else "progress"
    if tr is not None and tr.finished:
        total = f" of {tr.total_steps}" if tr.total_steps else ""
        return RunState("finished", f"training finished at {step}{total}", _exact(tr.last_step_at))
    failed = _ended(s, progress_by, started)
    if failed is not None and failed.from_outside and not alive:
        where = _where(failed, failed.lineno)
        when = _failure_time(failed)
        evidence = tuple(f"{_where(failed, n)}: {text}" for n, text in failed.evidence)
        return RunState(
            "stopped", f"stopped from outside: {crash_text(failed)} ({where}, {hhmm(when, now)})", when, evidence
        )
    if failed is not None and alive and s.live_run is not None and not s.live_run.gone and _older(s, alive, failed):
        quiet = progress_by if progress_by is not None else started
        held = _held_by_a_rank(s) if quiet is not None and now - quiet > allowance else None
        if held is not None:
            # Its ranks' collectives say what the failure's words do not: the job waits for a rank that never came
            # (NCCL RAS's counts, the flight records). A hang, whatever the ranks log while they wait (NCCL's own
            # timeout report, a dump's notices), and it stays one until progress is seen again.
            pids = _pid_list(alive)
            assert quiet is not None
            return RunState(
                "hung",
                f"no progress since {hhmm(quiet, now)} ({human_duration(now - quiet)}; its cadence allows "
                f"{human_duration(allowance)}) while its processes are alive (pid {pids}); {held}",
                quiet,
                tuple(f"{_where(failed, n)}: {text}" for n, text in failed.evidence),
            )
        # Every process of the run seen lives on: the failure was logged by a process that caught it and retries
        # (server-crash: "run crashed" while the trainer retried each request, its "since" moving with every retry).
        # Not crashed until a process of it dies; dated from its last progress, which does not move.
        pids = _pid_list(alive)
        quiet = progress_by if progress_by is not None else started
        since_words = f"no progress since {hhmm(quiet, now)}; " if quiet is not None else ""
        return RunState(
            "unknown",
            f"{since_words}its processes are alive (pid {pids}) and log a failure they keep retrying: "
            f"{crash_text(failed)} ({_where(failed, failed.lineno)})",
            quiet,
            tuple(f"{_where(failed, n)}: {text}" for n, text in failed.evidence),
        )
    if failed is not None:
        where = _where(failed, failed.lineno)
        when = _failure_time(failed)
        still = f"; {len(alive)} of its processes still alive" if alive else ""
        evidence = tuple(f"{_where(failed, n)}: {text}" for n, text in failed.evidence)
        why = f"{crash_text(failed)} ({where}, {hhmm(when, now)}){still}"
        return RunState("crashed", why, when, evidence)
    done = _finished_by_ending(s)
    if done is not None and not alive:
        where = _where(done, done.progress_lineno)
        return RunState("finished", f"its progress bar reached its end ({where}: {done.progress_line})", done.mtime)
    writers = [e for e in s.endings if e.mtime is not None and now - e.mtime <= allowance]
    cadence = f", about every {human_duration(interval)}" if interval else ""
    early = _waits_for_a_rank(s, progress_by, interval, th) if alive else None
    if early is not None:
        assert progress_by is not None
        pids = _pid_list(alive)
        return RunState(
            "hung",
            f"no progress since {hhmm(progress_by, now)} ({human_duration(now - progress_by)}) while its processes "
            f"are alive (pid {pids}); {early}",
            progress_by,
        )
    if progress_at is not None and now - progress_at <= allowance and alive:
        return RunState("progressing", f"{step} at {hhmm(progress_at, now)}{cadence}", progress_at)
    quiet_since = progress_by if progress_by is not None else started
    last_line = max(s.endings, key=lambda e: e.mtime or 0.0, default=None)
    said = ""
    if last_line is not None:
        said = f"; its last line: {_where(last_line, last_line.last_lineno)}: {last_line.last_line[:160]}"
    seen = _watchdog_saw(s)
    if seen is not None:
        return seen
    if alive:
        pids = _pid_list(alive)
        if progress_by is None and started is not None and now - started < th.startup_s:
            return RunState(
                "unknown",
                f"started {human_duration(now - started)} ago (pid {pids}) and has shown no progress yet: still "
                f"starting, or stuck before its first step{earlier}",
                started,
            )
        if quiet_since is not None and now - quiet_since > allowance:
            gpu = " and the GPUs are idle" if ctx.gpu_idle else ""
            limit = f"its cadence allows {human_duration(allowance)}"
            # Its last progress known only by a bound (an undated step line: when a read first saw it, or its file's
            # last write): said as one, never as the time it stopped.
            bounded = progress_by is not None and quiet_since == progress_by and (progress_at or 0.0) < progress_by
            latest = " at the latest" if bounded else ""
            timeless = "; its step lines carry no time of their own" if bounded else ""
            return RunState(
                "hung",
                f"no progress since {hhmm(quiet_since, now)}{latest} ({human_duration(now - quiet_since)}; {limit}"
                f"{timeless}) while its processes are alive (pid {pids}){gpu}{said}",
                quiet_since,
            )
        if progress_by is not None:  # progress seen, but only bounded in time: too soon to say it moves or hangs
            return RunState(
                "unknown",
                f"its processes are alive (pid {pids}); its {step} came by {hhmm(progress_by, now)} at the latest "
                f"(its lines carry no time of their own), too little time since to tell progress from a hang{said}",
                progress_by,
            )
        return RunState("unknown", f"its processes are alive (pid {pids}); no progress seen yet{said}", started)
    unseen = _unseen_writer(s, writers) if writers else None
    if unseen is not None:
        newest = max(writers, key=lambda e: e.mtime or 0.0)
        seen_step = f"its {step} came at {hhmm(progress_at, now)}" if progress_at is not None else "no progress seen"
        return RunState(
            "unknown",
            f"no process of the run is alive here, but {unseen}; {seen_step}, and whether it still progresses "
            f"cannot be told without a process to see{said}",
            newest.mtime,
        )
    if not s.endings:
        return RunState("unknown", "no log of the run and no process of it seen", None)
    since = f"no progress since {hhmm(progress_at, now)}" if progress_at is not None else "no progress seen"
    assert last_line is not None
    run = s.live_run
    dead = ", ".join(str(pid) for pid, _ in run.gone[:4]) if run is not None else ""
    idle = [pid for pid, _ in run.members if pid in run.weak] if run is not None else []
    nobody = (
        f"its processes are gone (pid {dead})"
        if dead
        else "no process of the run is alive here (none writes its logs or was started by rlwatch; "
        f"{_only_there(idle)}, which proves no life)"
        if idle
        else "no process of the run is alive here (none writes its logs, works in its directory or was started "
        "by rlwatch)"
    )
    return RunState(
        "stopped",
        f"{since}; {nobody} and its logs end without an error{said} (written {hhmm(last_line.mtime, now)})",
        last_line.mtime,
    )


def health(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """A finding for every state but progressing: crashed and hung are critical, stopped a warning."""
    rs = s.run_state
    if rs is None or rs.state == "progressing":
        return
    if rs.state == "crashed":
        yield Finding(CRIT, "run_crashed", f"The run crashed: {_sentence(rs.why)}", rs.since)
    elif rs.state == "hung":
        st = s.stacks
        if "; where the ranks stand: " in rs.why:
            # The sampler's reading says it, with how long each has stood there: the stacks read once at the hang
            # would say it a second time in other words ("where the ranks stand …. Where each waits: …").
            where = ""
        elif st is not None and rs.since is not None and st.taken_at >= rs.since and (st.summary or st.error):
            where = f" Where each waits: {st.summary}." if st.summary else f" Its stacks could not be read: {st.error}."
        else:
            where = " Its stacks are read once the hang is declared (key t reads them now)."
        yield Finding(CRIT, "hung", f"The run is hung: {_sentence(rs.why)}{where}", rs.since)
    elif rs.state == "stopped":
        yield Finding(WARN, "run_stopped", f"The run stopped: {_sentence(rs.why)}", rs.since)
    elif rs.state == "finished":
        yield Finding(INFO, "run_finished", f"The run finished: {_sentence(rs.why)}", rs.since)
    elif ctx.no_run is None:
        st = s.stacks
        where = ""
        if undated(s) and st is not None and st.summary and s.time - st.taken_at <= _STACKS_FRESH_S:
            where = f" Where each waits now: {st.summary}."
        yield Finding(INFO, "run_state_unknown", f"Whether the run progresses is unknown: {rs.why}.{where}", rs.since)


def _sentence(why: str) -> str:
    """``why`` as a sentence: a full stop added, unless it ends in one already (a last line quoted whole, "waiting
    for rollout workers...", became "workers....")."""
    return why if why.endswith((".", "…", "!", "?")) else why + "."


_STACKS_FRESH_S = 30.0  # stacks read this recently say where the ranks stand "now"


def undated(s: Snapshot) -> bool:
    """The run's processes live and its state is unknown though it stepped: its step lines carry no time, so when
    it last stepped is only bounded. Where each rank stands (read once, for ``report``) is the evidence there is: a
    rank in a collective waiting for one that is not in one says more than "too little time since"."""
    rs, tr = s.run_state, s.training
    alive = s.live_run is not None and bool(_alive(s))
    return rs is not None and rs.state == "unknown" and alive and tr is not None and tr.last_step is not None
