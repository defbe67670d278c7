"""Changes between two snapshots, as records: what `rlwatch watch` prints (JSON lines or plain lines).

Only changes are emitted, so a quiet healthy run prints nothing after its first state record.

Over a big backlog (one that earns a preview: engine/preview) the complete records wait until everything is read,
which over gigabytes is a minute; :class:`Partial` says meanwhile what the newest part shows, as the dashboard does,
in records marked ``"partial": true`` with the share of the backlog ``read``. Complete records carry no ``partial``
key, so a consumer that predates partial records reads the stream it always read once it skips those marked.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from rlwatch.common.state import Snapshot, SourceStatus, line_number
from rlwatch.common.vocab import RunStateName
from rlwatch.export.report import iso, status_word, verdict_json

_NUMBERS = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _state_of(s: Snapshot) -> RunStateName | None:
    if s.verdict is not None:
        return s.verdict.state
    return s.run_state.state if s.run_state is not None else None


def _run_state(s: Snapshot) -> dict[str, Any] | None:
    rs = s.run_state
    if rs is None:
        return None
    v = s.verdict  # the engine's one decision: the state every view says (a crash loop is crashed, never hung)
    return {"state": _state_of(s), "why": v.why if v is not None else rs.why, "since": iso(rs.since)}


def _step(s: Snapshot) -> int | None:
    """The step every view says: the verdict's (the best evidence), else the log's."""
    if s.verdict is not None and s.verdict.step is not None:
        return s.verdict.step
    return s.training.last_step if s.training else None


def _trouble(src: SourceStatus | None) -> str | None:
    """What a source's trouble is, with its numbers blurred: "values from 12s ago" must not print every tick."""
    if src is None or src.ok:
        return None
    return _NUMBERS.sub("#", src.error or "failed")


def _state(cur: Snapshot) -> dict[str, Any]:
    """The whole picture in one record: the stream's first, and each partial one (a consumer rebuilds from it)."""
    return {
        "type": "state",
        "time": iso(cur.time),
        "host": cur.host,
        "run_dir": cur.run_dir,
        "profile": cur.profile,
        "status": status_word(cur).lower().replace(" ", "_"),
        "run_state": _run_state(cur),
        "verdict": verdict_json(cur),
        "findings": [f.code for f in cur.findings],
        "events": {k: e.count for k, e in cur.events.items() if e.count},
        # The run's processes already running: seen, not started (later ones come as process_started records).
        "processes": [
            {"name": p.name, "role": p.role, "pid": p.pid, "started_at": iso(p.started_at)}
            for p in cur.processes
            if p.alive
        ],
    }


def unsettled(s: Snapshot) -> list[str]:
    """What the first ``state`` record would still miss: the host's processes not looked at yet, an expected server
    not probed yet. Written before they come, it says "no process of the run seen" and findings it clears the same
    second; so `watch` waits for them a little, and marks the record ``incomplete`` when it cannot wait longer."""
    missing = []
    if not s.polled("processes") or s.live_run is None:  # the run's members not looked for yet
        missing.append("processes")
    srv = s.server
    if srv is not None and srv.expected and srv.url is not None and srv.up is None:
        missing.append("server")
    return missing


def changes(prev: Snapshot | None, cur: Snapshot) -> Iterator[dict[str, Any]]:
    t = iso(cur.time)
    if prev is None:
        yield _state(cur)
    for kind, e in cur.events.items():
        before = prev.events[kind].count if prev and kind in prev.events else 0
        if e.count > before:
            last = e.recent[-1] if e.recent else None
            exact = not e.approximate or (e.last is not None and e.last_by == e.last)
            yield {
                "type": "event",
                # A line with no time of its own (read from a backlog) has none here either: its bounds instead.
                "time": iso(e.last) if exact else None,
                "approximate": not exact,
                "after": None if exact else iso(e.last),
                "before": None if exact else iso(e.last_by),
                "position": None if exact else e.position,
                "kind": kind,
                "severity": e.severity.value,
                "new": e.count - before,
                "count": e.count,
                "streak": e.streak,
                "file": last.path if last else None,
                "line": line_number(last.lineno) if last else None,
                "text": last.text[:500] if last else None,
            }
    if prev is not None and _state_of(prev) != _state_of(cur):
        yield {
            "type": "run_state",
            "time": t,
            "status": status_word(cur).lower().replace(" ", "_"),
            "run_state": _run_state(cur),
            "verdict": verdict_json(cur),
        }
    old = {f.code: f for f in prev.findings} if prev else {}
    new = {f.code: f for f in cur.findings}
    for code, f in new.items():
        if code not in old:
            yield {
                "type": "finding",
                "time": t,
                "code": code,
                "severity": f.severity.value,
                "message": f.message,
                "action": f.action,
                "command": f.fix_command(),
            }
    for code in old.keys() - new.keys():
        yield {"type": "finding_cleared", "time": t, "code": code}
    sources = {src.name: src for src in prev.sources} if prev else {}
    for src in cur.sources:
        if _trouble(sources.get(src.name)) != _trouble(src):
            yield {"type": "source", "time": t, "name": src.name, "ok": src.ok, "error": src.error}
    if prev is not None:
        if prev.server and cur.server and prev.server.up != cur.server.up and cur.server.up is not None:
            yield {"type": "server", "time": t, "up": cur.server.up, "url": cur.server.url, "error": cur.server.error}
        p_step = _step(prev)
        c_step = _step(cur)
        if c_step is not None and c_step != p_step:
            yield {
                "type": "step",
                "time": t,
                "step": c_step,
                "total": cur.training.total_steps if cur.training else None,
            }
        before_ids = {(p.pid, p.create_time) for p in prev.processes if p.alive}
        looked = prev.polled("processes")
        for p in cur.processes:
            if p.alive and (p.pid, p.create_time) not in before_ids:
                # One running before the previous snapshot, or before the host's processes were first looked at,
                # was there already: seen, not started (a minute-old trainer is no start at rlwatch's).
                seen = not looked or p.started_at < prev.time - 1.0
                yield {
                    "type": "process_seen" if seen else "process_started",
                    "time": t,
                    "name": p.name,
                    "role": p.role,
                    "pid": p.pid,
                    "started_at": iso(p.started_at),
                }
        after_ids = {(p.pid, p.create_time) for p in cur.processes if p.alive}
        for p in prev.processes:
            if p.alive and (p.pid, p.create_time) not in after_ids:
                yield {"type": "process_gone", "time": t, "name": p.name, "role": p.role, "pid": p.pid}


def read_share(snap: Snapshot) -> float:
    """How much of the logs' backlog is read, 0..1 to 3 decimals: 1 once the main count has read it all (the
    preview may still be shown for a moment after)."""
    if snap.backlog is None:
        return 1.0
    done, total = snap.backlog
    return round(min(1.0, max(0.0, done / total)), 3) if total > 0 else 1.0


_PARTIAL_TYPES = ("finding", "finding_cleared")


class Partial:
    """The records `watch` writes while a big backlog is read: what its newest part shows (the preview), at once.

    The first preview snapshot gives a ``state`` record and its ``finding`` records, as :func:`changes` would for a
    first snapshot, less the per-kind ``event`` records (their counts are of the part read so far, and the complete
    stream gives them in full). Later, when the preview's status, run state or findings change, a new ``state``
    record and the ``finding`` / ``finding_cleared`` records against the last partial one written: at most one such
    burst every ``every_s`` (the preview's findings may flicker while its line numbers and the host's sources come
    in, and each burst is a page of JSON), and none for a state already written. With nothing new, a ``backlog``
    record says how far reading is, at most every ``progress_every_s``. Every record carries ``"partial": true`` and
    ``"read"`` (:func:`read_share`).

    Not thread-safe: `watch` calls it under the lock that keeps its output lines whole."""

    def __init__(
        self, every_s: float = 1.0, progress_every_s: float = 5.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.every_s = every_s
        self.progress_every_s = progress_every_s
        self._monotonic = monotonic
        self._shown: Snapshot | None = None  # the preview snapshot the last partial state record came from
        self._key: tuple[str, str | None, frozenset[str]] | None = None  # what that record said
        self._at = 0.0  # when a partial record was last written (monotonic)

    def records(self, snap: Snapshot) -> list[dict[str, Any]]:
        """The partial records ``snap`` calls for now; [] when it has no preview (a small backlog, one read whole,
        or a preview not counted yet) or nothing new is due."""
        if snap.preview is None:
            return []
        now = self._monotonic()
        key = (status_word(snap), _state_of(snap), frozenset(f.code for f in snap.findings))
        out: list[dict[str, Any]] = []
        if key != self._key and (self._key is None or now - self._at >= self.every_s):
            out = [_state(snap)] + [r for r in changes(self._shown, snap) if r["type"] in _PARTIAL_TYPES]
            self._shown, self._key = snap, key
        elif self._key is not None and now - self._at >= self.progress_every_s:
            out = [{"type": "backlog", "time": iso(snap.time)}]
        if out:
            self._at = now
        read = read_share(snap)
        return [{**rec, "partial": True, "read": read} for rec in out]


def plain(record: dict[str, Any]) -> str | None:
    """One line for a person, or None for what only a machine wants (progress events: steps, trials, …). A partial
    record's line begins with how much of the backlog is read: it speaks of the newest part only."""
    line = _plain(record)
    if line is None or not record.get("partial"):
        return line
    pct = f"{100 * float(record.get('read') or 0):.0f}% read"
    if record["type"] == "backlog":
        return f"{line}: {pct}"
    return f"(newest part, {pct}) {line}"


def _plain(record: dict[str, Any]) -> str | None:
    kind = record["type"]
    if kind == "event" and record.get("severity") == "info":
        return None
    t = (record.get("time") or "")[11:19]
    if kind == "event":
        return f"{t} {record['kind']} +{record['new']} (total {record['count']}): {record.get('text') or ''}"
    if kind == "finding":
        return f"{t} [{record['severity'].upper()}] {record['message']}"
    if kind == "run_state":
        rs = record.get("run_state") or {}
        return f"{t} run {rs.get('state')}: {rs.get('why')}"
    if kind == "finding_cleared":
        return f"{t} cleared: {record['code']}"
    if kind == "server":
        return f"{t} inference server {'up' if record['up'] else 'DOWN'} ({record['url']})"
    if kind == "step":
        return f"{t} step {record['step']}" + (f"/{record['total']}" if record.get("total") else "")
    if kind == "source":
        return f"{t} {record['name']}: " + ("available again" if record["ok"] else f"NOT AVAILABLE: {record['error']}")
    if kind == "backlog":
        return f"{t} reading the backlog"
    if kind in ("process_started", "process_gone", "process_seen"):
        said = {"process_started": "started", "process_gone": "gone", "process_seen": "running"}[kind]
        return f"{t} {record['name']} (pid {record['pid']}) {said}"
    return f"{t} watching {record.get('run_dir')} ({record.get('profile')}): {len(record.get('findings', []))} findings"
