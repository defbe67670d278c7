"""The audit log: one JSON object per line for every plan, signal, start, check and result of an action.

It is what a person reads after the fact to learn what rlwatch did to their machine, so it is append-only and
written even by several rlwatch processes at once: the file is opened with ``O_APPEND`` and each record is one
``write`` of one whole line, which the kernel appends without interleaving. Writing it must never break the action
it describes: a full disk or an unwritable path makes :meth:`AuditLog.record` return False and leaves a one-line
``error`` for the caller to show. It is appended through :mod:`rlwatch.common.statefiles`: never through a symbolic
link, only to this user's regular file, and (in ``.rlwatch/``) only in a directory nobody else can write.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import threading
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path, PurePath
from typing import Literal

from rlwatch.common.clock import Clock
from rlwatch.common.redact import redacted
from rlwatch.common.statefiles import StateFileError, append_file

AuditEvent = Literal["plan", "signal", "spawn", "verify", "result"]
_RESERVED = ("time", "action", "event", "host", "rlwatch_pid")


def jsonable(value: object) -> object:
    """Plain JSON types for records holding dataclasses, enums, paths and tuples; non-finite floats become null."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _iso(epoch: float) -> str:
    try:
        return datetime.fromtimestamp(epoch, tz=UTC).astimezone().isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(epoch)


class AuditLog:
    def __init__(self, path: Path, clock: Clock, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.clock = clock
        self.fsync = fsync
        self.error: str | None = None  # the most recent failure, kept until the caller has shown it
        self._lock = threading.Lock()
        self._host = socket.gethostname()

    def line(self, action: str, event: AuditEvent | str, **fields: object) -> bytes:
        """The exact bytes one record appends: a single line, ASCII-escaped so any command line fits."""
        entry: dict[str, object] = {
            "time": _iso(self.clock.time()),
            "action": action,
            "event": event,
            "host": self._host,
            "rlwatch_pid": os.getpid(),
        }
        for key, value in fields.items():
            entry[f"field_{key}" if key in _RESERVED else key] = redacted(jsonable(value))
        return (json.dumps(entry, allow_nan=False) + "\n").encode("ascii")

    def record(self, action: str, event: AuditEvent | str, **fields: object) -> bool:
        """Append one record; False (and ``error`` set) when it could not be written. Never raises."""
        try:
            data = self.line(action, event, **fields)
        except (TypeError, ValueError) as exc:
            self.error = f"audit record for {action} {event} not written: {exc}"
            return False
        with self._lock:
            try:
                append_file(self.path, data, sync=self.fsync, mode=0o640)
            except StateFileError as exc:
                self.error = f"audit log {exc}"
                return False
        return True
