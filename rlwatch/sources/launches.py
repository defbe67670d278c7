"""Remembered launches: how each named process of the run was started, kept on disk beside the run.

A dashboard opened after the trainer died, or `rlwatch act resume` run from a fresh shell, never saw the launcher
alive; without this book it could not start it again "without configuration". The book is written when
a name is first seen and is only ever added to.

It holds command lines rlwatch will execute and environments that may carry tokens, so it is read and written only
through :mod:`rlwatch.common.statefiles` (no symbolic link followed, a checked ``.rlwatch/``), is private to its owner
(mode 0600 in a 0700 directory), and its records are used only when the file belongs to the user running rlwatch
and nobody else can write it or its directory: anything else could make rlwatch run someone else's command.
Each record keeps the uid its process ran as; only records of the user running rlwatch are ever added, and the
planner executes none of another uid (or of none: a record written before owners were kept).
A book refused for that reason is ``distrust``, one line that a refused plan shows.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlwatch.common.statefiles import MAX_READ, StateDir, StateFileError, locate, read_all
from rlwatch.sources.processes import LaunchRecord

NAME = "launches.json"


class LaunchBook:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None  # reading or writing failed: records live in memory only
        self.distrust: str | None = None  # the file on disk is not trusted: its records are never used
        found = locate(path)  # elsewhere (tests), the file's own directory is checked as a state directory is
        self._state, self._name = found or (StateDir(path.parent.parent, path.parent.name), path.name)
        self._records: dict[str, LaunchRecord] = self._load()

    def _load(self) -> dict[str, LaunchRecord]:
        try:
            fd = self._state.open_read(self._name)
        except StateFileError as exc:
            why = str(exc)
            self.distrust = f"launch book {why}" if why.startswith(str(self.path)) else f"launch book not used: {why}"
            return {}
        if fd is None:
            return {}
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                self.distrust = f"launch book {self.path} is owned by uid {st.st_uid}: not trusted"
                return {}
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                mode = stat.S_IMODE(st.st_mode)
                self.distrust = f"launch book {self.path} is writable by others (mode {mode:04o}): not trusted"
                return {}
            data = json.loads(read_all(fd, MAX_READ, self.path))
        except (OSError, ValueError, StateFileError) as exc:
            self.error = f"{self.path}: unreadable, ignored ({exc})"
            return {}
        finally:
            os.close(fd)
        out: dict[str, LaunchRecord] = {}
        if isinstance(data, dict):
            for name, raw in data.items():
                record = _record(raw)
                if record is not None:
                    out[str(name)] = record
        return out

    def close(self) -> None:
        """Let the run directory's descriptors go (the engine stops). The book holds them from its first read, so that
        every state file of this process goes to the directory first opened, whatever the path names later."""
        self._state.close()

    def get(self, name: str) -> LaunchRecord | None:
        return self._records.get(name)

    def names(self) -> tuple[str, ...]:
        """The names recorded, in the order first seen."""
        return tuple(self._records)

    def remember(self, name: str, record: LaunchRecord) -> bool:
        """Add a name seen for the first time; returns True when the book changed (it is saved when it may be)."""
        if name in self._records or not record.argv or record.uid != os.geteuid():
            return False  # another user's process: its command is never this user's to run again
        self._records[name] = record
        self._save()
        return True

    def _save(self) -> None:
        # A refused file is replaced, never written through: the rename swaps the name in a directory that passed the
        # checks, and the new file is this user's with only the records this process saw itself.
        try:
            data = json.dumps({k: asdict(v) for k, v in self._records.items()}, indent=1).encode()
            self._state.write(self._name, data)
            self.error = None
        except StateFileError as exc:  # a full disk or a read-only run dir: keep working from memory
            self.error = f"cannot write: {exc}"


def _record(raw: Any) -> LaunchRecord | None:
    try:
        env = raw.get("env")
        return LaunchRecord(
            argv=tuple(str(a) for a in raw["argv"]),
            cwd=None if raw.get("cwd") is None else str(raw["cwd"]),
            env=None if not isinstance(env, dict) else {str(k): str(v) for k, v in env.items()},
            first_seen=float(raw["first_seen"]),
            pid=int(raw["pid"]),
            create_time=float(raw["create_time"]),
            started_by=None if raw.get("started_by") is None else str(raw["started_by"]),
            uid=None if raw.get("uid") is None else int(raw["uid"]),
            stdout=None if raw.get("stdout") is None else str(raw["stdout"]),
            stderr=None if raw.get("stderr") is None else str(raw["stderr"]),
        )
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
