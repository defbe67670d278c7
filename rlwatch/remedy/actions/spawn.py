"""Starting a command again: an argv list in its own session, output appended to a log, never through a shell.

The argv comes from a config file or from a command line rlwatch saw earlier; a shell would turn any ``;`` or
``$(…)`` in it into code, so it is passed to ``execve`` as is. The child gets a new session (``setsid``), so it
survives rlwatch exiting and a terminal hang-up, and is never in rlwatch's process group. While rlwatch runs it is
the child's parent, so a daemon thread waits on it: when it exits it is reaped at once rather than lingering as a
zombie (chosen over a double fork because the pid and start time are then known exactly, with no pipe hand-off).
When rlwatch exits first, the child is re-parented to init or the nearest subreaper, which reaps it.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from rlwatch.common.statefiles import StateFileError, locate, open_append
from rlwatch.remedy.actions.identity import Ident


class SpawnError(Exception):
    """A one-line reason a command could not be started, ready to show to a person."""


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, str | bytes):
        raise SpawnError(f"cannot start {argv!r}: the command must be an argv list, not a string")
    args = list(argv)
    if not args or not args[0]:
        raise SpawnError("cannot start: the command is empty")
    if not all(isinstance(a, str) for a in args):
        raise SpawnError(f"cannot start {args[0]}: every argument must be a string")
    return args


def _open_log(name: str, log_path: Path) -> int:
    """An append-only fd: the engine tails this log, and earlier runs' output in it must survive.

    A log in rlwatch's own ``.rlwatch/logs`` is opened through :mod:`rlwatch.common.statefiles` (checked directory, no
    symbolic link followed, this user's regular file); a log the run itself writes elsewhere is opened as it is.
    """
    if locate(log_path) is not None:
        try:
            return open_append(log_path, mode=0o600)
        except StateFileError as exc:
            raise SpawnError(f"cannot start {name}: log {exc}") from None
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise SpawnError(f"cannot start {name}: cannot open log {log_path}: {_reason(exc)}") from None


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait()
    except Exception:  # the thread only exists to reap; nothing useful can be done with a failure here
        pass


def spawn(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
) -> Ident:
    """Start ``argv`` detached from rlwatch and return its identity; raises :class:`SpawnError` with one line."""
    args = _argv(argv)
    name = args[0]
    if cwd is not None and not os.path.isdir(cwd):
        raise SpawnError(f"cannot start {name}: working directory {cwd} does not exist")
    out = subprocess.DEVNULL if log_path is None else _open_log(name, Path(log_path))
    try:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        where = f" (in {cwd})" if cwd and exc.filename == cwd else ""
        raise SpawnError(f"cannot start {name}: {_reason(exc)}{where}") from None
    except (ValueError, TypeError) as exc:  # e.g. a NUL byte inside an argument or the environment
        raise SpawnError(f"cannot start {name}: {exc}") from None
    finally:
        if out != subprocess.DEVNULL:
            os.close(out)
    try:
        ident = Ident(proc.pid, psutil.Process(proc.pid).create_time())  # not reaped yet: the pid is still ours
    except (psutil.Error, OSError) as exc:
        raise SpawnError(
            f"cannot start {name}: started as pid {proc.pid} but cannot read its start time: {exc}"
        ) from None
    finally:
        threading.Thread(target=_reap, args=(proc,), name=f"rlwatch-reap-{proc.pid}", daemon=True).start()
    return ident
