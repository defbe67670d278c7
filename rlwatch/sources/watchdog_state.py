"""The watchdog's files in ``<run dir>/.rlwatch/``: its state, its pidfile, and re-arm requests.

The state file (``watchdog.json``) is how every other rlwatch process — the dashboard, ``report``, ``act rearm`` —
learns whether the watchdog runs, since when, whether it is stuck, what it did last and what it gave up on. The
watchdog rewrites it atomically (a temporary file renamed over it) on every heartbeat, so a reader sees the old
state or the new one, never half of one. A reader trusts "running" only when the pid in it is alive *and* started
when the file says: a reused pid is not the watchdog. ``rearm.json`` is a request dropped by ``rlwatch act rearm``
for the running watchdog to pick up; when none runs, the command edits the state file itself. Every file here is
read and written through :mod:`rlwatch.common.statefiles`: no symbolic link followed, the directory checked first.

Reading never raises: a missing file is "no watchdog ever ran" (None), garbage is None plus a one-line reason.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

import psutil

from rlwatch.common.numbers import finite_float
from rlwatch.common.redact import redacted
from rlwatch.common.state import GaveUp, NotifyStatus, WatchdogStatus
from rlwatch.common.statefiles import STATE_DIR, StateDir, StateFileError, locate
from rlwatch.common.vocab import RunStateName, is_run_state

STATE_FILE = "watchdog.json"
PID_FILE = "watchdog.pid"
REARM_FILE = "rearm.json"
VERSION = 1


def state_dir(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_DIR


def _state_file(path: Path) -> tuple[StateDir, str]:
    """The checked state directory holding ``path`` (its own directory when it lies in no ``.rlwatch/``)."""
    found = locate(path)
    return found or (StateDir(path.parent.parent, path.parent.name), path.name)


def write_json(path: Path, data: dict[str, Any]) -> str | None:
    """Replace ``path`` with ``data`` atomically, never through a link; a one-line error instead of an exception."""
    try:
        text = json.dumps(redacted(data), indent=1, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"{path}: cannot write: {exc}"
    state, name = _state_file(path)
    try:
        state.write(name, text.encode())
    except StateFileError as exc:
        return str(exc)
    return None


def read_state_json(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    state, name = _state_file(path)
    try:
        raw = state.read(name)
    except StateFileError as exc:
        return None, str(exc)
    if raw is None:
        return None, None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None, f"{path}: not valid JSON"
    if not isinstance(data, dict):
        return None, f"{path}: not a JSON object"
    return data, None


def process_alive(pid: int | None, create_time: float | None) -> bool:
    """The process ``pid`` exists, is not a zombie, and started at ``create_time`` (so it is not a reused pid)."""
    if pid is None or pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 1.0:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def status_from(data: dict[str, Any], now: float) -> WatchdogStatus:
    """What a state file says, checked against the live process table."""
    raw_pid = data.get("pid")
    pid = raw_pid if isinstance(raw_pid, int) and not isinstance(raw_pid, bool) else None
    stopped = finite_float(data.get("stopped_at"))
    alive = stopped is None and process_alive(pid, finite_float(data.get("create_time")))
    heartbeat = finite_float(data.get("heartbeat"))
    age = None if heartbeat is None else max(0.0, now - heartbeat)
    stale_after = finite_float(data.get("stale_after_s")) or 60.0
    gave_up = []
    for item in data.get("gave_up") or []:
        if isinstance(item, dict) and isinstance(item.get("target"), str):
            gave_up.append(GaveUp(item["target"], str(item.get("reason") or ""), finite_float(item.get("since"))))
    last, last_at = None, None
    actions = data.get("last_actions")
    if isinstance(actions, list) and actions and isinstance(actions[-1], dict):
        last = str(actions[-1].get("message") or "") or None
        last_at = finite_float(actions[-1].get("time"))
    return WatchdogStatus(
        running=alive,
        pid=pid,
        since=finite_float(data.get("started_at")),
        heartbeat_age_s=age,
        stale=alive and (age is None or age > stale_after),
        stopped=stopped,
        gave_up=tuple(gave_up),
        last_action=last,
        last_action_at=last_at,
        notify=_notify_from(data.get("notify")),
        reading_backlog=_progress(data.get("reading_backlog")) if alive else None,
        run_state=_run_state(data.get("run_state")) if alive else None,
        straggler=str(data["straggler"])[:1000] if alive and isinstance(data.get("straggler"), str) else None,
    )


def _run_state(value: object) -> tuple[RunStateName, str, float | None] | None:
    if not isinstance(value, dict):
        return None
    state, why = value.get("state"), value.get("why")
    if not is_run_state(state) or not isinstance(why, str):
        return None
    return state, why[:1000], finite_float(value.get("since"))


def _progress(value: object) -> tuple[int, int] | None:
    """``[bytes read, bytes]``, both counts, the first no larger; anything else is not a progress."""
    if not isinstance(value, list) or len(value) != 2:
        return None
    done, total = value
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (done, total)) or not 0 <= done <= total:
        return None
    return done, total


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _notify_from(raw: object) -> NotifyStatus | None:
    """The ``notify`` section the watchdog writes (:meth:`rlwatch.export.notify.notifications.Notifications.state`);
    None when absent."""
    if not isinstance(raw, dict):
        return None
    targets = raw.get("targets")
    names = tuple(str(t["name"]) for t in (targets or ()) if isinstance(t, dict) and isinstance(t.get("name"), str))
    hb = raw.get("heartbeat")
    if not isinstance(hb, dict):
        hb = {}
    return NotifyStatus(
        targets=names,
        last_sent_at=finite_float(raw.get("last_sent_at")),
        last_message=_text(raw.get("last_message")),
        error=_text(raw.get("error")),
        heartbeat=_text(hb.get("url")),
        heartbeat_at=finite_float(hb.get("last_ok_at")),
        heartbeat_error=_text(hb.get("error")),
    )


def read_status(run_dir: Path, now: float) -> tuple[WatchdogStatus | None, str | None]:
    """The watchdog of ``run_dir`` (None when none ever ran there), and a one-line error when its file is bad."""
    data, error = read_state_json(state_dir(run_dir) / STATE_FILE)
    if data is None:
        return None, error
    return status_from(data, now), None


def request_rearm(run_dir: Path, targets: list[str] | None, now: float) -> str | None:
    """Ask the running watchdog to re-arm ``targets`` (None: every target it gave up on)."""
    return write_json(state_dir(run_dir) / REARM_FILE, {"time": now, "targets": targets, "by_pid": os.getpid()})


def take_rearm(run_dir: Path) -> tuple[bool, list[str] | None]:
    """(requested, targets) — consumes a pending re-arm request, if there is one."""
    path = state_dir(run_dir) / REARM_FILE
    data, error = read_state_json(path)
    if data is None and error is None:
        return False, None
    state, name = _state_file(path)
    try:
        state.unlink(name)
    except StateFileError:
        pass  # a request that cannot be removed is taken again next round: re-arming twice changes nothing
    targets = data.get("targets") if data else None
    if isinstance(targets, list):
        return True, [t for t in targets if isinstance(t, str)]
    return True, None


def clear_gave_up(run_dir: Path, targets: list[str] | None) -> tuple[list[str], str | None]:
    """Re-arm in the state file of a watchdog that is not running: it starts afresh anyway, but the finding goes."""
    path = state_dir(run_dir) / STATE_FILE
    data, error = read_state_json(path)
    if data is None:
        return [], error
    kept, cleared = [], []
    for item in data.get("gave_up") or []:
        target = item.get("target") if isinstance(item, dict) else None
        if target is not None and (targets is None or target in targets):
            cleared.append(str(target))
        else:
            kept.append(item)
    data["gave_up"] = kept
    return cleared, write_json(path, data)


class PidLock:
    """``.rlwatch/watchdog.pid``: this process's pid, under an exclusive ``flock`` held while it acts.

    The kernel drops a ``flock`` with the process, so a watchdog that crashed never leaves a stale lock behind, and
    the descriptor is close-on-exec, so processes it starts never hold it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> tuple[bool, str | None]:
        """(True, None) when this process now holds it; (False, why) when another watchdog does or it failed."""
        state, name = _state_file(self.path)
        try:
            fd = state.open_lock(name)
        except StateFileError as exc:
            return False, str(exc)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            return False, f"another watchdog (pid {holder or '?'}) acts on this run"
        try:  # the lock is the flock; the pid written in it is a courtesy a full disk must not turn into a crash
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        self._fd = fd
        return True, None

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None
