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
import shutil
import stat
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from rlwatch.common.statefiles import StateFileError, append_problem, locate, open_append
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

    Through :mod:`rlwatch.common.statefiles` wherever it lies: no symbolic link followed, only this user's regular
    file with no other hard link (in a directory others can write, a link planted at the log's name would have a
    process started as root write over the file it names); in rlwatch's own ``.rlwatch/logs``, a checked directory.
    """
    try:
        return open_append(log_path, mode=0o600 if locate(log_path) is not None else 0o644)
    except StateFileError as exc:
        raise SpawnError(f"cannot start {name}: log {exc}") from None


def start_problem(
    argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str] | None, log_path: Path | None
) -> str | None:
    """Why :func:`spawn` would fail, or would start what someone else chose, found before anything is stopped.

    Besides what :func:`spawn` itself refuses (no argv, no working directory, a log it may not open), a working
    directory that others can write is refused: Python puts the working directory first on ``sys.path`` for
    ``python -m`` and ``-c``, so a module planted there would run in place of the run's own, as root when rlwatch is.
    """
    try:
        args = _argv(argv)
    except SpawnError as exc:
        return str(exc).removeprefix("cannot start: ")
    name = args[0]
    if cwd is not None:
        try:
            st = os.stat(cwd)
        except OSError as exc:
            return f"working directory {cwd}: {_reason(exc)}"
        if not stat.S_ISDIR(st.st_mode):
            return f"working directory {cwd} is not a directory"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (
                f"working directory {cwd} is writable by others (mode {stat.S_IMODE(st.st_mode):04o}): a module "
                "planted there would run in the started process"
            )
    path = (env or os.environ).get("PATH", os.defpath)
    exe = os.path.join(cwd or os.getcwd(), name) if "/" in name else shutil.which(name, path=path)
    if exe is None or not os.access(exe, os.X_OK) or os.path.isdir(exe):
        return f"{name}: no such program" + ("" if "/" in name else f" on PATH ({path})")
    if log_path is not None and (why := append_problem(log_path)) is not None:
        return f"its log: {why}"
    return None


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
    err_path: Path | None = None,
) -> Ident:
    """Start ``argv`` detached from rlwatch and return its identity; raises :class:`SpawnError` with one line.
    Its stdout is appended to ``log_path``, its stderr too unless ``err_path`` names another file (where the
    process it replaces sent its stderr)."""
    args = _argv(argv)
    name = args[0]
    if cwd is not None and not os.path.isdir(cwd):
        raise SpawnError(f"cannot start {name}: working directory {cwd} does not exist")
    out = subprocess.DEVNULL if log_path is None else _open_log(name, Path(log_path))
    err: int = subprocess.STDOUT
    if err_path is not None and (log_path is None or Path(err_path) != Path(log_path)):
        try:
            err = _open_log(name, Path(err_path))
        except SpawnError:
            if out != subprocess.DEVNULL:
                os.close(out)
            raise
    try:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
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
        if err != subprocess.STDOUT:
            os.close(err)
    try:
        ident = Ident(proc.pid, psutil.Process(proc.pid).create_time())  # not reaped yet: the pid is still ours
    except (psutil.Error, OSError) as exc:
        raise SpawnError(
            f"cannot start {name}: started as pid {proc.pid} but cannot read its start time: {exc}"
        ) from None
    finally:
        threading.Thread(target=_reap, args=(proc,), name=f"rlwatch-reap-{proc.pid}", daemon=True).start()
    return ident
