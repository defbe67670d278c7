"""Remembered launches: how each named process of the run was started, kept on disk beside the run.

A dashboard opened after the trainer died, or `rlwatch act resume` run from a fresh shell, never saw the launcher
alive; without this book it could not start it again "without configuration" (design.md). The book is written when
a name is first seen and is only ever added to. It holds environments, which may carry tokens, so the file is
private to its owner (mode 0600).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlwatch.sources.processes import LaunchRecord


class LaunchBook:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        self._records: dict[str, LaunchRecord] = self._load()

    def _load(self) -> dict[str, LaunchRecord]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.error = f"{self.path}: unreadable, ignored ({exc})"
            return {}
        out: dict[str, LaunchRecord] = {}
        if isinstance(data, dict):
            for name, raw in data.items():
                record = _record(raw)
                if record is not None:
                    out[str(name)] = record
        return out

    def get(self, name: str) -> LaunchRecord | None:
        return self._records.get(name)

    def remember(self, name: str, record: LaunchRecord) -> bool:
        """Add a name seen for the first time; returns True when the book changed (and was saved)."""
        if name in self._records or not record.argv:
            return False
        self._records[name] = record
        self._save()
        return True

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({k: asdict(v) for k, v in self._records.items()}, out, indent=1)
            os.replace(tmp, self.path)
            self.error = None
        except OSError as exc:  # a full disk or a read-only run dir: keep working from memory
            self.error = f"{self.path}: cannot write ({exc.strerror})"


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
        )
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
