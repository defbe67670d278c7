"""Root works on another user's run as that user: the command in a child that dropped root's rights, the parent
keeping them for the host-wide readings only.

rlwatch is often run as root on pods where several people train. A run directory that another user owns (or that
another user could swap, through a directory of theirs above it) is theirs to fill: its logs, its ``rlwatch.yaml``,
links and hard links, FIFOs, its ``.rlwatch/`` state, the processes working in it. Each check rlwatch made per path
(links, owners, modes) closed one way for root to read, write, run or signal on that user's say-so, and each new
feature opened another. So the rule is now the one OpenSSH's privilege separation and ``sudo -u`` follow: when root
watches such a run, the watching process *is* that user, with their uid, gid and groups, and the kernel refuses
whatever they could not do themselves. Nobody gains anything by being watched.

The command runs in a child that drops the rights; the process rlwatch was started as keeps root's and does only
what is host-wide and not the owner's to read — the kernel log and other users' GPU holders
(:mod:`rlwatch.sources.hostwide`) — handing data, never paths, across. It passes on the signals that end a command
(SIGTERM, SIGHUP) to the child, lets the terminal's Ctrl-C reach the child alone, and exits with the child's status,
so to a shell, a service manager or a test calling the command in-process nothing else changes.

Who controls a directory: each directory on its real path, from ``/`` down, is owned by root or by a user. The
run's own owner, when not root, is the user rlwatch works as; else the nearest directory above it that another user
owns (they can rename the run directory away and put another in its place). A path that only root controls is
root's own run: nothing changes.

The drop happens before anything of the run is read, its configuration included. The watching process must still
import the rest of rlwatch afterwards, as that user: where that user cannot read rlwatch's installation (a
virtualenv under ``/root``), rlwatch says so in one line and stops rather than watch with root's rights.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlwatch.sources import hostwide

__all__ = ["Controller", "controller", "run_as_owner"]

# What a process that dropped its rights still imports on its way (lazily, where a command first needs them).
RUNTIME_MODULES = (
    "rlwatch",
    "yaml",
    "pydantic",
    "pydantic_core",
    "psutil",
    "pynvml",
    "watchfiles",
    "prometheus_client",
    "apprise",
    "detect_secrets",
    "textual",
    "rich",
)


@dataclass(frozen=True)
class Controller:
    """The user who controls a run directory besides root, and the directory that makes it so."""

    uid: int
    gid: int
    name: str
    home: str
    groups: tuple[int, ...]
    because: Path  # the directory that user owns: the run directory itself or one above it


def _user(uid: int, gid: int) -> tuple[str, str, int, tuple[int, ...]]:
    """A uid's name, home, primary group and groups; a uid with no passwd entry (common in containers) keeps the
    directory's group and no others."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return str(uid), "/", gid, (gid,)
    try:
        groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    except OSError:
        groups = (entry.pw_gid,)
    return entry.pw_name, entry.pw_dir, entry.pw_gid, groups


def controller(run_dir: Path) -> Controller | None:
    """The user other than root who controls ``run_dir``, or None when only root does.

    The run directory's own owner when that is not root; else the owner of the nearest directory above it that is
    not root's. Read on the real path (links resolved): what is watched is the directory the path leads to now."""
    real = Path(os.path.realpath(run_dir))
    chain = [real, *real.parents]
    for directory in chain:
        try:
            st = os.stat(directory)
        except OSError:
            continue
        if st.st_uid != 0:
            name, home, gid, groups = _user(st.st_uid, st.st_gid)
            return Controller(st.st_uid, gid, name, home, groups, directory)
    return None


def _unreadable(paths: list[str]) -> str | None:
    """In a process that already works as the owner: the first of ``paths`` it cannot read, with why."""
    for path in paths:
        mode = os.R_OK | (os.X_OK if os.path.isdir(path) else 0)
        if not os.access(path, mode):
            return path
    return None


def _needed_paths() -> list[str]:
    """The directories rlwatch's standard library and run-time packages are read from."""
    paths = [os.path.dirname(os.__file__)]  # the interpreter itself is loaded already
    for name in RUNTIME_MODULES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        for location in spec.submodule_search_locations or ([spec.origin] if spec.origin else []):
            if location and os.path.exists(location):
                paths.append(location)
    return list(dict.fromkeys(paths))


def _drop(owner: Controller) -> None:
    """Become ``owner`` for good: groups, then gid, then uid (real, effective and saved), and check root is gone."""
    os.setgroups(list(owner.groups))
    os.setresgid(owner.gid, owner.gid, owner.gid)
    os.setresuid(owner.uid, owner.uid, owner.uid)
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:  # pragma: no cover - the kernel refused to drop the rights: never go on as root
        os._exit(70)
    os.environ.update({"HOME": owner.home, "USER": owner.name, "LOGNAME": owner.name})


FORWARDED = (signal.SIGTERM, signal.SIGHUP)  # what ends a command, sent to root's process by a supervisor
HELD = (signal.SIGINT, signal.SIGQUIT)  # the terminal's keys reach the whole group: the child decides


def _refusal(run_dir: Path, owner: Controller, bad: str) -> str:
    return (
        f"{run_dir} is controlled by {owner.name} (uid {owner.uid}, owner of {owner.because}): root works on "
        f"another user's run as that user, and {owner.name} cannot read {bad}, part of this rlwatch. Install "
        f"rlwatch where every user can read it (pip install as root outside /root, or pipx --global), or run "
        f"it as {owner.name} (sudo -u {owner.name} rlwatch …)"
    )


def _child(run_dir: Path, owner: Controller, sock: socket.socket, root: int, work: Callable[[str], int]) -> int:
    """The watching side: drop, check what it must still import, then run the command as the owner."""
    paths = _needed_paths()
    _drop(owner)
    bad = _unreadable(paths)
    if bad is not None:
        print(f"rlwatch: {_refusal(run_dir, owner, bad)}", file=sys.stderr)
        return 2
    hostwide.install_helper(hostwide.HostWide(sock, root, owner.name))
    return work(
        f"works as {owner.name} (uid {owner.uid}), who controls {owner.because}: root watches another user's run "
        f"with that user's rights; root's process (pid {root}) reads only the kernel log and other users' GPU holders"
    )


def _status(raw: int) -> int:
    if os.WIFSIGNALED(raw):
        return 128 + os.WTERMSIG(raw)
    return os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else 1


def run_as_owner(run_dir: Path, work: Callable[[str], int]) -> int | None:
    """Run ``work`` as the user who controls ``run_dir`` when rlwatch runs as root and that user is not root.

    ``work`` gets the one line to show about it (whose rights, why, and root's part) and returns the command's exit
    status, which this returns; None when nothing changes (not root, or root's own run), and the caller runs the
    command itself. Call it before anything of the run is read."""
    if os.geteuid() != 0 or hostwide.current() is not None:
        return None
    owner = controller(run_dir)
    if owner is None:
        return None
    for stream in (sys.stdout, sys.stderr):  # what was printed before is printed once, not by both processes
        with contextlib.suppress(Exception):
            stream.flush()
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    root = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's life, seen by the tests through what it does and its status
        parent_sock.close()
        code = 70
        try:
            code = _child(run_dir, owner, child_sock, root, work)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except KeyboardInterrupt:
            code = 130
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)
    child_sock.close()
    return _serve_until_done(parent_sock, pid)


def _serve_until_done(sock: socket.socket, child: int) -> int:
    """Root's side: serve the child until it closes the socket, passing it the signals that end a command."""
    main = threading.current_thread() is threading.main_thread()
    saved: dict[signal.Signals, Any] = {}
    if main:
        for sig in FORWARDED:
            saved[sig] = signal.signal(sig, lambda signum, _frame: _forward(child, signum))
        for sig in HELD:
            saved[sig] = signal.signal(sig, signal.SIG_IGN)
    try:
        hostwide.serve(sock)
        sock.close()
        while True:
            try:
                _, raw = os.waitpid(child, 0)
                return _status(raw)
            except ChildProcessError:
                return 1
            except InterruptedError:  # pragma: no cover - retried by Python itself since 3.5
                continue
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _forward(child: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, signum)


def unreadable_to(owner: Controller, paths: list[str] | None = None) -> str | None:
    """The first path of what rlwatch still has to import that ``owner`` cannot read, or None: asked of a forked
    child that drops first (for a caller that must know before it commits to the drop)."""
    paths = _needed_paths() if paths is None else paths
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's half, seen through the pipe
        try:
            os.close(read_end)
            _drop(owner)
            bad = _unreadable(paths)
            os.write(write_end, (bad or "").encode("utf-8", "surrogateescape"))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        said = f.read(65536).decode("utf-8", "surrogateescape")
    os.waitpid(pid, 0)
    return said or None
