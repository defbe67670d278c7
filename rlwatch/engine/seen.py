"""When the run's last step line was first seen, kept across reads: the time a timeless step line gets.

A step line that carries no time of its own (``Train step 12/120 done.``) is dated, in a backlog, only by its file's
modification time: the latest it can have been written. A rank that keeps printing a heartbeat moves that time on
for ever, so a one-shot ``report`` (or a watchdog started late) read such a hang as "too little time since to tell"
while the dashboard, which saw the line come, said hung. Every rlwatch that reads the run keeps here, in
``.rlwatch/progress-seen.json``, the last step line it knows (file, inode, line number), the latest time it can have
been written (a live read's time when one saw it come: then ``exact``), and when it last looked and found it still
the last. A later reader takes the earlier bound when it finds the same line last, and, when it finds a later step
line in the same file, knows that line came after that look: evidence both ways, never the file's modification time.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from rlwatch.common.state import Snapshot
from rlwatch.common.statefiles import StateDir, StateFileError
from rlwatch.engine.diagnosis.base import StepSeen

__all__ = ["NAME", "Record", "exchange"]

NAME = "progress-seen.json"
_LOOK_EVERY_S = 5.0  # a record whose line and bound are unchanged is written again at most this often


@dataclass(frozen=True, slots=True)
class Record:
    path: str
    dev: int
    ino: int
    size: int
    lineno: int
    by: float  # the latest the line can have been written
    exact: bool  # ``by`` is the line's own time, or when a live read saw it come
    after: float | None  # it came after this (a look that found an earlier step line last)
    looked: float  # the latest look that found it the last step line


def _finite(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _load(state: StateDir) -> Record | None:
    try:
        raw = state.read(NAME)
        data = json.loads(raw) if raw is not None else None
        if not isinstance(data, dict):
            return None
        by, looked = _finite(data.get("by")), _finite(data.get("looked"))
        if by is None or looked is None:
            return None
        return Record(
            str(data["path"]),
            int(data["dev"]),
            int(data["ino"]),
            int(data["size"]),
            int(data["lineno"]),
            by,
            bool(data.get("exact")),
            _finite(data.get("after")),
            looked,
        )
    except (StateFileError, ValueError, KeyError, TypeError):
        return None


def _save(state: StateDir, rec: Record) -> None:
    data = {
        "path": rec.path,
        "dev": rec.dev,
        "ino": rec.ino,
        "size": rec.size,
        "lineno": rec.lineno,
        "by": rec.by,
        "exact": rec.exact,
        "after": rec.after,
        "looked": rec.looked,
    }
    try:
        state.write(NAME, json.dumps(data).encode())
    except StateFileError:
        pass  # a run directory rlwatch may not write to: each reader dates its lines alone, as before


def exchange(run_dir: Path, snap: Snapshot, *, write: bool = True) -> StepSeen | None:
    """What the earlier reads say of ``snap``'s last step line (None: nothing), with what ``snap`` knows of it
    written back for the next reader. Only a snapshot whose backlog is read whole counts (a partial one's last step
    is not the file's). Never raises."""
    step = snap.events.get("step")
    if not snap.logs_read or step is None or not step.recent:
        return None
    line = step.recent[-1]
    try:
        st = os.stat(line.path)
    except OSError:
        return None
    state = StateDir(run_dir)
    try:
        rec = _load(state)
        own_exact = not step.approximate or step.last_by == step.last
        own_by = _finite(step.last if own_exact else step.last_by)
        for e in snap.endings:  # the line is its file's last: the file's modification time is its own
            if e.path == line.path and e.progress_lineno == line.lineno and e.last_lineno == line.lineno and e.mtime:
                own_exact, own_by = True, min(e.mtime, own_by) if own_by is not None else e.mtime
        if own_by is None:
            own_by = snap.time
        same_file = rec is not None and (rec.path, rec.dev, rec.ino) == (line.path, st.st_dev, st.st_ino)
        if rec is not None and same_file and st.st_size >= rec.size and rec.lineno == line.lineno:
            exact = rec.exact if rec.by <= own_by else own_exact
            new = Record(line.path, st.st_dev, st.st_ino, st.st_size, line.lineno, min(rec.by, own_by), exact,
                         rec.after, snap.time)  # fmt: skip
        elif rec is not None and same_file and st.st_size >= rec.size and rec.lineno < line.lineno:
            # A step line the last look did not find: it was written after that look.
            new = Record(line.path, st.st_dev, st.st_ino, st.st_size, line.lineno, min(own_by, snap.time), own_exact,
                         rec.looked, snap.time)  # fmt: skip
        elif rec is not None and same_file and st.st_size >= rec.size:
            return None  # this read is behind an earlier one: it knows nothing the record does not
        else:
            new = Record(line.path, st.st_dev, st.st_ino, st.st_size, line.lineno, min(own_by, snap.time), own_exact,
                         None, snap.time)  # fmt: skip
        stale = rec is None or (new.lineno, new.by, new.exact, new.after) != (rec.lineno, rec.by, rec.exact, rec.after)
        if write and (stale or rec is None or snap.time - rec.looked >= _LOOK_EVERY_S):
            _save(state, new)
    finally:
        state.close()
    return StepSeen(line.path, line.lineno, new.by, new.exact, new.after)
