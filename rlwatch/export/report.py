"""The health report: a stable JSON document (``report --json``), and the summary a person would write after a
health check.

The JSON keys are a contract (scripts and the fleet view read them): add keys, never rename or drop them. Absent data
is ``null``, never a made-up zero.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from rlwatch.common.redact import redacted
from rlwatch.common.state import (
    ChildFailure,
    Finding,
    GpuHealth,
    HostEvent,
    Incident,
    LogEnding,
    NotifyStatus,
    RayActor,
    RayFailure,
    RayState,
    Severity,
    Snapshot,
    line_number,
)
from rlwatch.common.vocab import FindingCode, StatusName
from rlwatch.engine.diagnosis import first_text, hhmm, human_bytes, human_duration, last_text, when_text
from rlwatch.engine.diagnosis.server import down_when
from rlwatch.engine.diagnosis.verdict import SERVER_ALIVE, SERVER_GONE, status_of, without_payload


def iso(t: float | None) -> str | None:
    """ISO 8601 with offset; None for an absent or unknown time (NaN, ±inf: a bound that does not exist)."""
    if t is None or not math.isfinite(t):
        return None
    return dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def to_json_dict(s: Snapshot) -> dict[str, Any]:
    events = {
        kind: {
            "count": e.count,
            "first": iso(e.first),
            "last": iso(e.last),
            "rate_per_min": round(e.rate_per_min, 3),
            "streak": e.streak,
            "files": dict(e.files),
            "severity": e.severity.value,
            # Some lines had no time of their own: first/last are then the earliest they can be, first_by/last_by
            # the latest (null: unbounded), position where the last line sits.
            "approximate": e.approximate,
            "first_by": iso(e.first_by) if e.approximate else None,
            "last_by": iso(e.last_by) if e.approximate else None,
            "position": e.position,
        }
        for kind, e in sorted(s.events.items())
    }
    tr = s.training
    training = {
        "last_step": tr.last_step if tr else None,
        "total_steps": tr.total_steps if tr else None,
        "reward": tr.reward if tr else None,
        "steps_per_hour": tr.steps_per_hour if tr else None,
        "rate_from": tr.rate_from if tr else None,  # "lines" (their times) or "bar" (the bar's own it/s)
        "step_source": tr.step_source if tr else None,  # the field the step was read from ("`it`", "a bar's i/N")
        "stalled": tr.stalled if tr else False,
        "finished": tr.finished if tr else False,
        "weight_update_s": list(tr.weight_update_s[-10:]) if tr else [],
        "knobs": dict(tr.knobs) if tr else {},
    }
    latest = s.checkpoint.latest if s.checkpoint else None
    checkpoint = {
        "latest": None
        if latest is None
        else {
            "path": latest.path,
            "global_step": latest.global_step,
            "epoch": latest.epoch,
            "epoch_step": latest.epoch_step,
            "saved_at": iso(latest.saved_at),
            "size_bytes": latest.size_bytes,
            "tracker": latest.tracker,  # verl's latest_checkpointed_iteration.txt, DeepSpeed's latest: what names it
        },
        "count": s.checkpoint.count if s.checkpoint else 0,
        "steps": list(s.checkpoint.steps) if s.checkpoint else [],
    }
    r = s.recover
    recover = None
    if r is not None:
        recover = {
            "epoch": r.epoch,
            "epoch_step": r.epoch_step,
            "global_step": r.global_step,
            "steps_per_epoch": r.steps_per_epoch,
            "resume_epoch": r.resume_epoch,
            "resume_epoch_step": r.resume_epoch_step,
            "resume_global_step": r.resume_global_step,
        }
    srv = s.server
    server = {
        "kind": srv.kind if srv else None,
        "url": srv.url if srv else None,
        "up": srv.up if srv else None,
        # From evidence, as the finding dates it; a first look (no evidence of when it went) is said as one.
        "down_since": iso(down_when(s)[0]) if srv and not down_when(s)[1].startswith("(first seen") else None,
        "down_first_seen": iso(down_when(s)[0]) if srv and down_when(s)[1].startswith("(first seen") else None,
        "pid": srv.pid if srv else None,
        "error": srv.error if srv else None,
        "expected": srv.expected if srv else False,  # False: no evidence of a server for this run, not "down"
        "evidence": list(srv.evidence) if srv else [],
    }
    gpus = [
        {
            "index": g.index,
            "name": g.name,
            "util": g.util,
            "mem_used_bytes": g.mem_used_bytes,
            "mem_total_bytes": g.mem_total_bytes,
            "temp_c": g.temp_c,
            "power_w": g.power_w,
            "compute_mode": g.compute_mode,
            "holders": list(g.holders),
            "outside_bytes": g.outside_bytes,
            "outside_pids": list(g.outside_pids),
            "health": _health_json(g.health),
        }
        for g in s.gpus
    ]
    mem = s.memory
    memory = {
        "total_bytes": mem.total_bytes if mem else None,
        "available_bytes": mem.available_bytes if mem else None,
        "swap_used_bytes": mem.swap_used_bytes if mem else None,
        "oom_kills": mem.oom_kills if mem else None,
        "forecast_exhausted_at": iso(mem.forecast_exhausted_at) if mem else None,
        # the container's own limit (cgroup), which the OOM killer enforces; null: none
        "cgroup_limit_bytes": mem.cgroup_limit_bytes if mem else None,
        "cgroup_usage_bytes": mem.cgroup_usage_bytes if mem else None,
        "cgroup_working_set_bytes": mem.cgroup_working_set_bytes if mem else None,
        "cgroup_oom_events": mem.cgroup_oom_events if mem else None,
    }
    processes = [
        {
            "pid": p.pid,
            "role": p.role,
            "name": p.name,
            "alive": p.alive,
            "rss_bytes": p.rss_bytes,
            "rss_growth_bytes_per_hour": p.rss_growth_bytes_per_hour,
            "started_at": iso(p.started_at),
            "restarts": p.restarts,
            "cmdline": " ".join(p.cmdline),
            "evidence": p.evidence,
            # null: the live run's; else the index of its earlier attempt in live_run.attempts
            "attempt": p.attempt,
        }
        for p in s.processes
    ]
    zombies = [
        {"pid": h.pid, "user": h.user, "cmdline": " ".join(h.cmdline), "devices": list(h.devices), "reason": h.reason}
        for h in s.zombies
    ]
    holders = [
        {
            "pid": h.pid,
            "user": h.user,
            "cmdline": " ".join(h.cmdline),
            "status": h.status,
            "why": h.reason or h.protected or h.evidence,
            "gpus": list(h.gpus),
            "attribution": h.attribution,
            "gpu_mem_bytes": h.gpu_mem_bytes,
            "devices": list(h.devices),
            "started_at": iso(h.create_time),
        }
        for h in s.holders
    ]
    lr = s.live_run
    live_run = (
        None
        if lr is None
        else {
            "identified": lr.identified,
            "why_unknown": lr.why_unknown,
            "started_at": iso(lr.started_at),
            "members": [{"pid": pid, "evidence": why} for pid, why in lr.members],
            "gone": [{"pid": pid, "evidence": why} for pid, why in lr.gone],
            "looked_at": iso(lr.looked_at),
            # the run's launches, oldest first; more than one while an earlier attempt still runs beside the live one
            "attempts": [
                {
                    "pids": list(a.pids),
                    "current": a.current,
                    "state": "live run" if a.current else ("stray" if a.stray else "earlier attempt"),
                    "started_at": iso(a.started_at),
                    "launcher": {
                        "pid": a.launcher_pid,
                        "name": a.launcher,
                        "alive": a.launcher_alive,
                        "gone_at": iso(a.launcher_gone_at),
                    },
                    "orphaned": a.orphaned,
                    "writes": list(a.writes),
                    "last_write_at": iso(a.last_write_at),
                    "gpus": list(a.gpus),
                    "gpu_mem_bytes": a.gpu_mem_bytes,
                    "stray": a.stray,
                }
                for a in lr.attempts
            ],
        }
    )
    findings = [
        {
            "severity": f.severity.value,
            "code": f.code,
            "message": f.message,
            "since": iso(f.since),
            "action": f.action,  # what fixes it: an `rlwatch act` action, else a command; null when neither does
            "command": f.fix_command(),
            "fix": f.fix,  # what fixes it where neither a key nor a command does, in a few words
        }
        for f in s.findings
    ]
    rs = s.run_state
    v = s.verdict
    return {
        "host": s.host,
        "time": iso(s.time),
        # ok only when the run shows progress (or finished) and nothing is wrong; see status_word
        "status": status_word(s).lower().replace(" ", "_"),
        "run_state": None
        if rs is None
        else {
            "state": v.state if v is not None else rs.state,  # the verdict's: a crash loop is crashed, never hung
            "why": v.why if v is not None else rs.why,
            "since": iso(rs.since),
            "evidence": list(rs.evidence),
        },
        "verdict": verdict_json(s),
        "profile": s.profile,
        "profile_evidence": list(s.profile_evidence),
        "run_dir": s.run_dir,
        "simulated": s.simulated,
        "events": events,
        "incidents": [_incident_json(i) for i in s.incidents],
        # Only the newest incidents are kept whole; the older ones, per kind and signature: how many, since when.
        "incidents_older": [
            {"kind": t.kind, "signature": t.signature, "count": t.count, "lines": t.lines, "first": iso(t.first)}
            for t in s.dropped_incidents
        ],
        "training": training,
        "checkpoint": checkpoint,
        "recover": recover,
        "server": server,
        "gpus": gpus,
        "gpu_error": s.gpu.error if s.gpu else None,
        "memory": memory,
        "disk": None
        if s.disk is None
        else {
            "path": s.disk.path,
            "free_bytes": s.disk.free_bytes,
            "total_bytes": s.disk.total_bytes,
            "inodes_free": s.disk.inodes_free,
            "inodes_total": s.disk.inodes_total,
        },
        "kernel": _kernel_json(s),
        "limits": _limits_json(s),
        "learning": _learning_json(s),
        "processes": processes,
        "live_run": live_run,
        "holders": holders,
        "zombies": zombies,
        "findings": findings,
        "timeline": [
            {"time": iso(e.time), "text": e.text, "approximate": e.approximate, "by": iso(e.by)} for e in s.timeline
        ],
        "watchdog": _watchdog_json(s),
        "endings": [_ending_json(e) for e in s.endings],
        "stacks": _stacks_json(s),
        "logs": list(s.logs),  # the files followed (a Ray run's adds raylet.out and its dead actors' stderr)
        "ray": _ray_json(s.ray),
        "sources": [
            {"name": src.name, "ok": src.ok, "error": src.error, "last_sample": iso(src.last_sample)}
            for src in sorted(s.sources, key=lambda src: src.name)
        ],
    }


def verdict_json(s: Snapshot) -> dict[str, Any] | None:
    """The engine's one decision (engine/diagnosis/verdict): state, headline finding, the one remedy, the step."""
    v = s.verdict
    if v is None:
        return None
    steps = next_steps(s)
    return {
        "status": v.status.lower().replace(" ", "_"),
        "state": v.state,
        "why": v.why,
        "since": iso(v.since),
        "finding": v.finding,
        "message": v.message,
        "action": v.action,
        "command": v.fix_command(),
        "fix": v.fix,
        # the headline's own next step, else the first of the report's: the text report's "Next steps:" in order
        "next_step": v.next_step or next((words for words in steps), None),
        "next_steps": steps,
        "step": v.step,
        "step_from": v.step_from,
    }


def _health_json(h: GpuHealth | None) -> dict[str, Any] | None:
    """A GPU's hardware health as NVML reported it; null fields: the board or driver does not say."""
    if h is None:
        return None
    return {
        "pci_bus_id": h.pci_bus_id,
        "lost": h.lost,
        "ecc_enabled": h.ecc_enabled,
        "ecc_volatile_corrected": h.ecc_volatile_corrected,
        "ecc_volatile_uncorrected": h.ecc_volatile_uncorrected,
        "ecc_aggregate_corrected": h.ecc_aggregate_corrected,
        "ecc_aggregate_uncorrected": h.ecc_aggregate_uncorrected,
        "retired_sbe": h.retired_sbe,
        "retired_dbe": h.retired_dbe,
        "retired_pending": h.retired_pending,
        "remap_correctable": h.remap_correctable,
        "remap_uncorrectable": h.remap_uncorrectable,
        "remap_pending": h.remap_pending,
        "remap_failure": h.remap_failure,
        "pcie_gen": h.pcie_gen,
        "pcie_gen_max": h.pcie_gen_max,
        "pcie_width": h.pcie_width,
        "pcie_width_max": h.pcie_width_max,
        "clock_events": None if h.clock_events is None else list(h.clock_events),
        "xids": [_event_json(e) for e in h.xids],
    }


def _event_json(e: HostEvent) -> dict[str, Any]:
    return {
        "kind": e.kind,
        "time": iso(e.time),
        "text": e.text,
        "source": e.source,
        "pid": e.pid,
        "process": e.process,
        "pci": e.pci,
        "gpu": e.gpu,
        "xid": e.xid,
        "rss_bytes": e.rss_bytes,
        "memcg": e.memcg,
    }


def _kernel_json(s: Snapshot) -> dict[str, Any] | None:
    k = s.kernel
    if k is None:
        return None
    return {
        "source": k.source,
        "available": k.available,
        "error": k.error,
        "files": list(k.files),
        "events": [_event_json(e) for e in k.events[-100:]],
    }


def _limits_json(s: Snapshot) -> dict[str, Any] | None:
    lim = s.limits
    if lim is None:
        return None
    return {
        "shm_path": lim.shm_path,
        "shm_total_bytes": lim.shm_total_bytes,
        "shm_free_bytes": lim.shm_free_bytes,
        "shm_simulated": lim.simulated,
        "frameworks": list(lim.frameworks),
        "rdma": lim.rdma,
        "memlock": [{"pid": m.pid, "name": m.name, "soft_bytes": m.soft_bytes} for m in lim.memlock],
    }


def _number(value: float) -> float | str:
    """A metric value for JSON, which has no NaN or infinity: those are written "nan", "inf", "-inf"."""
    return value if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))


def _learning_json(s: Snapshot) -> dict[str, Any] | None:
    ls = s.learning
    if ls is None:
        return None
    return {
        "steps_exact": ls.steps_exact,
        "keys": dict(ls.keys),
        "series": {
            name: [{"step": p.step, "value": _number(p.value), "time": iso(p.time)} for p in points[-50:]]
            for name, points in sorted(ls.series.items())
        },
    }


def _watchdog_json(s: Snapshot) -> dict[str, Any] | None:
    wd = s.watchdog
    if wd is None:
        return None
    return {
        "running": wd.running,
        "pid": wd.pid,
        "since": iso(wd.since),
        "heartbeat_age_s": None if wd.heartbeat_age_s is None else round(wd.heartbeat_age_s, 1),
        "stale": wd.stale,
        "stopped_at": iso(wd.stopped),
        "gave_up": [{"target": g.target, "reason": g.reason, "since": iso(g.since)} for g in wd.gave_up],
        "last_action": wd.last_action,
        "last_action_at": iso(wd.last_action_at),
        "notify": _notify_json(wd.notify),
        "reading_backlog": None
        if wd.reading_backlog is None
        else {"read_bytes": wd.reading_backlog[0], "bytes": wd.reading_backlog[1]},
    }


def _notify_json(n: NotifyStatus | None) -> dict[str, Any] | None:
    """Whom the watchdog tells and when it last did (targets redacted by the watchdog before it wrote them)."""
    if n is None:
        return None
    return {
        "targets": list(n.targets),
        "last_sent_at": iso(n.last_sent_at),
        "last_message": n.last_message,
        "error": n.error,
        "heartbeat": n.heartbeat,
        "heartbeat_at": iso(n.heartbeat_at),
        "heartbeat_error": n.heartbeat_error,
    }


def notify_lines(n: NotifyStatus, now: float) -> list[str]:
    """The report's lines on notifications and the dead man's switch: when each last went out."""
    out = []
    if n.targets:
        if n.last_sent_at is None:
            last = "nothing sent yet"
        else:
            last = f"last sent {hhmm(n.last_sent_at, now)} ({human_duration(now - n.last_sent_at)} ago)"
            last += f": {n.last_message}" if n.last_message else ""
        out.append(f"Notifications: {', '.join(n.targets)}; {last}")
        if n.error:
            out.append(f"  FAILING: {n.error}")
    if n.heartbeat:
        beat = "never answered" if n.heartbeat_at is None else f"last ping {hhmm(n.heartbeat_at, now)}"
        if n.heartbeat_at is not None:
            beat += f" ({human_duration(now - n.heartbeat_at)} ago)"
        out.append(
            f"Heartbeat: {n.heartbeat} {beat}" + (f"; FAILING: {n.heartbeat_error}" if n.heartbeat_error else "")
        )
    return out


def _actor_json(a: RayActor | None) -> dict[str, Any] | None:
    if a is None:
        return None
    return {
        "class_name": a.class_name,
        "name": a.name,
        "pid": a.pid,
        "actor_id": a.actor_id,
        "node_ip": a.node_ip,
        "node_id": a.node_id,
        "job_id": a.job_id,
        "state": a.state,
        "reason": a.reason,
        "exit_type": a.exit_type,
        "detail": a.detail,
        "source": a.source,
    }


def _ray_failure_json(f: RayFailure | None) -> dict[str, Any] | None:
    if f is None:
        return None
    mem = f.memory
    return {
        "kind": f.kind,
        "cause": f.cause,
        "title": f.title,
        "actor": _actor_json(f.actor),
        "exception": f.exception,
        "memory": None
        if mem is None
        else {
            "killed": mem.killed,
            "node_ip": mem.node_ip,
            "used_gb": mem.used_gb,
            "limit_gb": mem.limit_gb,
            "fraction": mem.fraction,
            "reason": mem.reason,
            "victims": [{"task": t, "pid": pid, "used_gb": gb} for t, pid, gb in mem.victims],
        },
        "node": f.node,
        "step": f.step,
        "path": f.path,
        "line": f.lineno,
        "time": iso(f.at),
        "current": f.current,
        "evidence": list(f.evidence),
    }


def _ray_json(r: RayState | None) -> dict[str, Any] | None:
    """What Ray says of a Ray-based run (verl, OpenRLHF); null for any other run."""
    if r is None:
        return None
    return {
        "session_logs": r.session_logs,
        "dashboard": r.dashboard,
        "state_api_error": r.api,
        "driver_logs": list(r.driver_logs),
        "last_step": r.last_step,
        "failure": _ray_failure_json(r.failure),
        "history": [_ray_failure_json(h) for h in r.history],
        "actors": [_actor_json(a) for a in r.actors],
        "dead_nodes": list(r.dead_nodes),
    }


def _ray_lines(s: Snapshot) -> list[str]:
    r = s.ray
    if r is None:
        return []
    where = r.session_logs or "no session logs found"
    api = "State API answered" if r.api is None else f"State API: {r.api}"
    lines = [f"Ray: session logs {where}; {api}"]
    dead = [a for a in r.actors if a.state == "DEAD" and a.reason not in (None, "OUT_OF_SCOPE", "REF_DELETED")]
    alive = [a for a in r.actors if a.state == "ALIVE"]
    if r.actors:
        lines.append(f"  actors: {len(alive)} alive, {len(r.actors) - len(alive)} not")
    for a in dead[:6]:
        lines.append(f"  dead: {a.label}: {a.reason}" + (f", {a.exit_type}" if a.exit_type else ""))
    for node in r.dead_nodes[:3]:
        lines.append(f"  dead node: {node}")
    return lines


def to_json(s: Snapshot) -> str:
    return json.dumps(redacted(to_json_dict(s)), indent=2)


def _stacks_json(s: Snapshot) -> dict[str, Any] | None:
    st = s.stacks
    if st is None:
        return None
    return {
        "taken_at": iso(st.taken_at),
        "why": st.why,
        "summary": st.summary,
        "kept_at": st.path,
        "error": st.error,
        "groups": [{"where": where, "processes": list(labels)} for where, labels in st.groups],
        "processes": [
            {
                "pid": p.pid,
                "label": p.label,
                "where": p.where,
                "threads": p.threads,
                "error": p.error,
                "frames": list(p.frames),
            }
            for p in st.processes
        ],
    }


def stack_lines(s: Snapshot) -> list[str]:
    """Where each of the run's processes stood when their stacks were last read."""
    st = s.stacks
    if st is None:
        return []
    lines = [f"Stacks ({hhmm(st.taken_at, s.time)}, {st.why}): {st.summary or st.error or 'none read'}"]
    for p in st.processes:
        if p.error is None:
            who = p.label if str(p.pid) in p.label else f"{p.label} (pid {p.pid})"
            lines.append(f"  {who}: {' < '.join(p.frames[:4])}")
    if st.path:
        lines.append(f"  whole dump: {st.path}")
    return lines


def _ending_json(e: LogEnding) -> dict[str, Any]:
    return {
        "path": e.path,
        "failed": e.failed,
        "title": e.title or None,
        "kind": e.kind,
        "exception_type": e.exc_type,
        "line": e.lineno,
        "at": iso(e.at),
        "signal": e.signal,
        "exit_code": e.code,
        "pid": e.pid,
        "detail": e.detail,
        "first": e.first,
        "evidence": [{"line": n, "text": t} for n, t in e.evidence],
        "last_line": e.last_line,
        "last_line_number": e.last_lineno,
        "last_progress_line_number": e.progress_lineno,
        "written": iso(e.mtime),
    }


def status_word(s: Snapshot) -> StatusName:
    """The verdict's status, decided once by the engine (engine/diagnosis/verdict) so every view says the same; for
    a snapshot built without one, the same rule (:func:`status_of`)."""
    return s.verdict.status if s.verdict is not None else status_of(s)


def exit_code(s: Snapshot) -> int:
    """0 healthy (or info only), 1 problems found, 3 unknown: whether the run progresses the evidence does not say
    (Nagios's UNKNOWN). A script that takes 0 for "all is well" must never get it for a run rlwatch cannot read."""
    if any(f.severity in (Severity.CRITICAL, Severity.WARNING) for f in s.findings):
        return 1
    return 3 if status_word(s) == "UNKNOWN" else 0


NEXT_STEPS: dict[FindingCode, str] = {
    "server_down": "If the trainer still runs, restart the inference server (rlwatch act restart-server); if it is "
    "gone, resume the run (rlwatch act resume), whose launcher brings its server back.",
    "server_unhealthy": "The server process lives but does not answer: restart it (rlwatch act restart-server).",
    "connection_refused": "Check the inference server; restart it and resume training (rlwatch act resume).",
    "restart_loop": "Read the first lines after each start in the container log; fix the start command.",
    "brake_no_relief": "Restart the leaking workers (rlwatch act restart-workers).",
    "memory_leak": "Restart the leaking workers (rlwatch act restart-workers) and keep the watchdog running.",
    "over_memory_limit": "Restart that worker (rlwatch act restart-workers).",
    "expected_missing": "Start the watchdog as a service (rlwatch watch).",
    "watchdog_gave_up": "Fix what keeps failing, then re-arm the watchdog (rlwatch act rearm).",
    "watchdog_not_responding": "The watchdog is stuck: restart it (its service or start-up hook starts it again).",
    "watchdog_died": "Start the watchdog again, kept alive as a service (rlwatch service install).",
    "gpu_strays": "Kill the stray GPU holders (rlwatch act kill-zombies), then start again what failed on the busy "
    "device (rlwatch act resume brings back a run whose launcher is gone).",
    "gpu_outside": "Restart the pod: processes outside this container hold the GPU; no kill from here reaches them.",
    "device_busy": "Find what holds the GPU (the GPU holders above); stop only what you are sure of.",
    "gpu_unknown_holders": "Check the GPU holders rlwatch cannot classify (listed above); stop one only if you are "
    "sure it is a leftover: rlwatch act kill-zombies --pid PID.",
    "crash_repeating": "Fix the exception above; restarting will hit it again.",
    "stalled": "Look at the trainer's last lines; resume if it is gone (rlwatch act resume).",
    "run_crashed": "Read the failure above and the lines before it; fix what it names, then resume from the last "
    "checkpoint (rlwatch act resume).",
    "hung": "Look at where each process waits (py-spy dump --pid PID); a collective that one rank never reached "
    "hangs the others.",
    "run_stopped": "If it was not stopped on purpose, resume it from the last checkpoint (rlwatch act resume).",
    "ray_actor_died": "Read why the actor died (above, and its worker-*.err in Ray's session logs); fix it, then "
    "resume from the checkpoint named above (rlwatch act resume).",
    "ray_memory_monitor": "The node ran short of memory: give the workers more (fewer per node, smaller batches) or "
    "raise RAY_memory_usage_threshold, then resume (rlwatch act resume).",
    "ray_node_died": "A node of the cluster is gone: bring it back (or drop it from the job), then resume "
    "(rlwatch act resume).",
    "ray_cluster_unreachable": "Start the Ray cluster again (ray start --head …), then resume (rlwatch act resume).",
    "ray_job_failed": "Read the job's output above (ray job logs SUBMISSION_ID); fix it, then resume.",
    "disk_low": "Free space on the output volume before the next checkpoint.",
    "no_run": "Point rlwatch at the run directory (rlwatch report RUN_DIR), or describe the run in "
    "RUN_DIR/rlwatch.yaml (rlwatch init writes one).",
}

# Where the engine decided the remedy (the finding's action, from what is alive), the advice says that one only.
_BY_ACTION = {("server_down", "resume"): SERVER_GONE, ("server_down", "restart-server"): SERVER_ALIVE}


def _advice(f: Finding) -> str:
    return _BY_ACTION.get((f.code, f.action or ""), NEXT_STEPS[f.code])


# A finding whose next step is left out when a more specific one is there: known strays are what holds the GPU, and
# the generic advice to go and find it would send the reader in a circle.
SUPERSEDED: dict[FindingCode, set[FindingCode]] = {
    "device_busy": {"gpu_strays"},
    "run_stopped": {"ray_job_stopped"},
}


def to_text(s: Snapshot) -> str:
    lines: list[str] = []
    sim = "  [SIMULATED]" if s.simulated else ""
    lines.append(f"rlwatch report — {s.host} — {hhmm(s.time)}{sim}")
    lines.append(f"run: {s.run_dir}  profile: {s.profile}")
    if s.profile_evidence:
        lines.append("  because: " + "; ".join(s.profile_evidence[:4]) + (" …" if len(s.profile_evidence) > 4 else ""))
    lines.append(f"status: {status_word(s)}")
    v = s.verdict
    if v is not None:
        lines.append(f"run: {v.state} — {v.why}")
        if v.finding is not None and v.message and v.finding not in ("run_crashed", "hung", "run_stopped"):
            lines.append(f"  cause: {v.message}")  # the headline, where the state's words do not name it
        if s.run_state is not None:
            lines.extend(f"  {without_payload(line)}" for line in s.run_state.evidence[:5] if line not in v.why)
    elif s.run_state is not None:
        lines.append(f"run: {s.run_state.state} — {s.run_state.why}")
        lines.extend(f"  {line}" for line in s.run_state.evidence[:5])
    lines.append("")
    lines.extend(_findings_lines(s))
    if s.timeline:
        lines.append("")
        lines.append("Timeline:")
        for entry in s.timeline:
            lines.append(f"  {when_text(entry.time, entry.by, entry.approximate, s.time)}  {entry.text}")
    lines.append("")
    tr = s.training
    step = v.step if v is not None and v.step is not None else tr.last_step if tr else None
    if tr and step is not None:
        total = f"/{tr.total_steps}" if tr.total_steps else ""
        by_bar = " (the bar's own speed)" if tr.rate_from == "bar" else ""
        rate = f", {tr.steps_per_hour:.0f} steps/h{by_bar}" if tr.steps_per_hour else ""
        reward = f", reward {tr.reward:.4g}" if tr.reward is not None else ""
        ckpt = " (from the checkpoint)" if v is not None and v.step_from == "checkpoint" else ""
        if not ckpt and tr.step_source:
            ckpt = f" (read from {tr.step_source})"
        lines.append(f"Training: step {step}{total}{ckpt}{rate}{reward}{'  STALLED' if tr.stalled else ''}")
    latest = s.checkpoint.latest if s.checkpoint else None
    if latest:
        age = human_duration(s.time - latest.saved_at) if latest.saved_at else "?"
        lines.append(
            f"Checkpoint: {latest.path.rsplit('/', 1)[-1]} (global step {latest.global_step}), "
            f"saved {hhmm(latest.saved_at, s.time)} ({age} ago), {human_bytes(latest.size_bytes)}"
        )
    if s.recover:
        r = s.recover
        lines.append(
            f"Recover info: last completed step {r.global_step} (epoch {r.epoch}, step {r.epoch_step} of "
            f"{r.steps_per_epoch}); a resume starts at global step {r.resume_global_step} "
            f"(epoch {r.resume_epoch}, step {r.resume_epoch_step}; counters are 0-based, the log will print "
            f"'Train step {r.resume_global_step + 1}/…')"
        )
    if s.server and s.server.url:
        lines.append(f"Inference server: {s.server.url} {_server_word(s)}")
    elif s.server and s.server.expected:
        lines.append(f"Inference server: expected, address not known ({'; '.join(s.server.evidence) or '?'})")
    elif s.server:
        lines.append(f"Inference server: none expected ({'; '.join(s.server.evidence) or 'none configured'})")
    if tr and tr.knobs:
        lines.append("Config: " + ", ".join(f"{k}={v}" for k, v in tr.knobs.items()))
    lines.extend(_machine_lines(s))
    lines.extend(_ray_lines(s))
    lines.extend(_holder_lines(s))
    lines.extend(stack_lines(s))
    if s.watchdog is not None and s.watchdog.notify is not None:
        lines.extend(notify_lines(s.watchdog.notify, s.time))
    broken = sorted((src for src in s.sources if not src.ok), key=lambda src: src.name)
    if broken:
        lines.append("")
        lines.append("Not available (what is shown may be missing or stale):")
        lines.extend(f"  {src.name}: {src.error or 'failed'}" for src in broken)
    counted = [(k, e) for k, e in s.events.items() if e.count]
    if counted:
        lines.append("")
        lines.append("Events:")
        for kind, e in sorted(counted, key=lambda kv: (kv[1].severity.rank, -kv[1].count)):
            files = ", ".join(f"{p.rsplit('/', 1)[-1]} {n}" for p, n in e.files.items())
            lines.append(
                f"  {kind:20} {e.count:7}  first {first_text(e, s.time)}  last {last_text(e, s.time)}  ({files})"
            )
    advice = next_steps(s)
    if advice:
        lines.append("")
        lines.append("Next steps:")
        for words in advice:
            lines.append(f"  - {words}")
    return "\n".join(lines) + "\n"


def _server_word(s: Snapshot) -> str:
    """The server's state in the words its finding says, never a bare DOWN beside "one miss is not yet a failure"."""
    assert s.server is not None
    if s.server.up is not False:
        return {True: "up", None: "unknown"}[s.server.up]
    said = {f.code: f for f in s.findings}
    if "server_starting" in said:
        return "starting (not answering yet)"
    if "server_unhealthy" in said and said["server_unhealthy"].severity is Severity.INFO:
        return "missed its health check (its process lives; one miss is not yet a failure)"
    return f"DOWN {down_when(s)[1]}"


def next_steps(s: Snapshot) -> list[str]:
    """What to do next, in order, once each: the verdict's words for what is alive now (the headline's first), else
    each finding's general advice. The text report's "Next steps:" and the JSON verdict's ``next_steps`` are this
    one list, so neither says a step the other leaves out."""
    v = s.verdict
    codes = {f.code for f in s.findings}
    decided = dict(v.steps) if v is not None else {}
    advice = [
        decided.get(f.code) or _advice(f)
        for f in s.findings
        if (f.code in decided or (f.code in NEXT_STEPS and f.severity is not Severity.INFO))
        and not (SUPERSEDED.get(f.code, set()) & codes)
    ]
    if v is not None and v.resume_held:  # a restart loop suspected or named: a resume would start into it
        advice = [words for words in advice if "act resume" not in words]
    return list(dict.fromkeys(advice))


def _machine_lines(s: Snapshot) -> list[str]:
    """The machine in two lines: the kernel log read and what it said; shared memory and the container's limit."""
    out = []
    k = s.kernel
    if k is not None and (k.available or k.events):
        kinds: dict[str, int] = {}
        for e in k.events:
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        said = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "nothing that matters here"
        names = ", ".join(p.rsplit("/", 1)[-1] for p in k.files)
        read = names if k.source == "files" else f"{k.source} + {names}" if names else k.source
        out.append(f"Kernel log: {read}: {said}")
    lim = s.limits
    mem = s.memory
    parts = []
    if lim is not None and lim.shm_total_bytes is not None:
        parts.append(f"{lim.shm_path} {human_bytes(lim.shm_total_bytes)} ({human_bytes(lim.shm_free_bytes)} free)")
    if mem is not None and mem.cgroup_limit_bytes:
        held = mem.cgroup_working_set_bytes or mem.cgroup_usage_bytes
        parts.append(f"memory limit {human_bytes(mem.cgroup_limit_bytes)} ({human_bytes(held)} used)")
    if parts:
        out.append("Limits: " + ", ".join(parts))
    return out


def _findings_lines(s: Snapshot) -> list[str]:
    if not s.findings:
        healthy = s.run_state is None or s.run_state.healthy
        return ["Findings: none — training looks healthy." if healthy else "Findings: none."]
    return ["Findings:", *(f"  [{f.severity.value.upper():8}] {f.message}" for f in s.findings)]


def first_look_text(s: Snapshot, command: str = "report", then: str = "the full report") -> str:
    """What `report` (or `watch`) says at a terminal before it has read a big backlog: the diagnosis of the logs'
    newest part (the preview), said to be that, with counts that are of what has been read so far."""
    size = f" of {human_bytes(s.backlog[1])}" if s.backlog else ""
    lines = [
        f"rlwatch {command}: a big backlog{size}; its newest part first (counts are of what is read so far, {then} "
        "follows once everything is read"
        + ("; line numbers shown as ? are not counted yet)" if not s.preview_numbered else ")"),
        f"status now: {status_word(s)}",
        *_findings_lines(s),
    ]
    return "\n".join(lines) + "\n"


def _failure_json(f: ChildFailure) -> dict[str, Any]:
    return {
        "rank": f.rank,
        "local_rank": f.local_rank,
        "exitcode": f.exitcode,
        "signal": f.signal,
        "pid": f.pid,
        "host": f.host,
        "time": f.time,
        "error": f.error,
    }


def _incident_json(i: Incident, *, nested: bool = False) -> dict[str, Any]:
    """One incident. ``approximate``: its lines had no time of their own; first/last are then the earliest they can
    be (null: unknown), ``by`` the latest (null: unbounded), ``position`` where it sits."""
    c = i.collective
    out: dict[str, Any] = {
        "kind": i.kind,
        "title": i.title,
        "location": i.location,
        "signature": i.signature,
        "count": i.count,
        "file": i.path,
        "line": line_number(i.lineno),
        "first": iso(i.first),
        "last": iso(i.last),
        "approximate": i.approximate,
        "by": iso(i.by),
        "position": i.position,
        "first_exact": i.first_exact,
        "rank": i.rank,
        "collective": None
        if c is None
        else {
            "rank": c.rank,
            "seq": c.seq,
            "op": c.op,
            "timeout_ms": c.timeout_ms,
            "ran_ms": c.ran_ms,
            "group": c.group,
        },
    }
    if not nested:
        out["root_cause"] = None if i.root_cause is None else _failure_json(i.root_cause)
        out["victims"] = [_failure_json(v) for v in i.victims]
        out["cause"] = None if i.cause is None else _incident_json(i.cause, nested=True)
    return out


def _holder_lines(s: Snapshot) -> list[str]:
    """The live run's evidence and every GPU holder with what rlwatch concluded about it, and why."""
    lines: list[str] = []
    lr = s.live_run
    if lr is not None and (s.holders or not lr.identified):
        if lr.identified and lr.members:
            pid, why = lr.members[0]
            others = len(lr.members) - 1
            more = f" and {others} other process{'es' if others > 1 else ''}" if others else ""
            lines.append(f"Live run: pid {pid}{more}: {why}")
        elif not lr.identified:
            lines.append(f"Live run: unknown — {lr.why_unknown}")
    if lr is not None and len(lr.attempts) > 1:
        lines.append("Attempts:")
        for a in lr.attempts:
            what = "live run" if a.current else ("STRAYS" if a.stray else "EARLIER")
            name = f"{a.launcher} " if a.launcher else ""
            launcher = f"launcher {name}pid {a.launcher_pid}" if a.launcher_pid is not None else "launcher unknown"
            if not a.launcher_alive:
                launcher += " gone" + (f" since {hhmm(a.launcher_gone_at, s.time)}" if a.launcher_gone_at else "")
            lines.append(f"  {what:9} pid {', '.join(map(str, a.pids[:8]))}  ({launcher})")
    if s.holders:
        lines.append("GPU holders:")
        for h in s.holders:
            gpus = ",".join(map(str, h.gpus)) or "?"
            how = "" if h.attribution == "nvml" else " (by device nodes)"
            mem = f" {human_bytes(h.gpu_mem_bytes)}" if h.gpu_mem_bytes else ""
            why = h.reason or h.protected or h.evidence or ""
            lines.append(f"  pid {h.pid:<7} {h.status.upper():9} gpu {gpus}{how}{mem}  {' '.join(h.cmdline)[:60]}")
            if why:
                lines.append(f"      {why}")
    for g in s.gpus:
        if g.outside_bytes:
            lines.append(f"GPU {g.index}: {human_bytes(g.outside_bytes)} held outside this container")
    return lines
