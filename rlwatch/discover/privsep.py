"""Root works on another user's run as that user: the drop of root's rights, and the one helper that keeps them.

rlwatch is often run as root on pods where several people train. A run directory that another user owns (or that
another user could swap, through a directory of theirs above it) is theirs to fill: its logs, its ``rlwatch.yaml``,
links and hard links, FIFOs, its ``.rlwatch/`` state, the processes working in it. Each check rlwatch made per path
(links, owners, modes) closed one way for root to read, write, run or signal on that user's say-so, and each new
feature opened another. So the rule is now the one OpenSSH's privilege separation and ``sudo -u`` follow: when root
watches such a run, the watching process *is* that user, with their uid, gid and groups, and the kernel refuses
whatever they could not do themselves. Nobody gains anything by being watched.

Root keeps only what is host-wide and not the owner's to read — the kernel log and other users' GPU holders — in a
helper forked before the drop (:mod:`rlwatch.sources.hostwide`), which hands data, never paths, across.

Who controls a directory: each directory on its real path, from ``/`` down, is owned by root or by a user. The
run's own owner, when not root, is the user rlwatch works as; else the nearest directory above it that another user
owns (they can rename the run directory away and put another in its place). A path that only root controls is
root's own run: nothing changes.

The drop happens before anything of the run is read (its configuration included) and before any thread starts.
The watching process must still import the rest of rlwatch afterwards, as that user: where that user cannot read
rlwatch's installation (a virtualenv under ``/root``), rlwatch says so in one line and stops rather than watch with
root's rights.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from rlwatch.sources import hostwide

__all__ = ["Controller", "PrivsepRefused", "controller", "enter"]

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


class PrivsepRefused(Exception):
    """rlwatch cannot work on the run as its owner: one line saying why and what to do instead."""


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


def _probe(owner: Controller, paths: list[str]) -> str | None:
    """Whether ``owner`` can read what rlwatch still has to import, asked of a forked child that drops first."""
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


def _fork_helper() -> tuple[int, socket.socket]:
    """Fork root's helper; in the parent return its pid and the socket to it (the child never returns)."""
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the helper's life runs in the child, tested through its answers
        parent_sock.close()
        try:
            hostwide.serve(child_sock, parent)
        finally:
            os._exit(0)
    child_sock.close()
    return pid, parent_sock


def enter(run_dir: Path) -> str | None:
    """Work on ``run_dir`` as the user who controls it, when rlwatch runs as root and that user is not root.

    Returns the one line a report shows about it (whose rights, why, and root's helper), or None when nothing
    changed. Raises :class:`PrivsepRefused` when that user cannot read rlwatch's installation. Call it before the run
    is read at all and before any thread starts."""
    if os.geteuid() != 0 or hostwide.current() is not None:
        return None
    owner = controller(run_dir)
    if owner is None:
        return None
    if threading.active_count() > 1:  # pragma: no cover - a programming error: fork() under threads is unsafe
        raise PrivsepRefused("cannot drop root's rights once threads run (call privsep.enter first)")
    bad = _probe(owner, _needed_paths())
    if bad is not None:
        raise PrivsepRefused(
            f"{run_dir} is controlled by {owner.name} (uid {owner.uid}, owner of {owner.because}): root works on "
            f"another user's run as that user, and {owner.name} cannot read {bad}, part of this rlwatch. Install "
            f"rlwatch where every user can read it (pip install as root outside /root, or pipx --global), or run "
            f"it as {owner.name} (sudo -u {owner.name} rlwatch …)"
        )
    pid, sock = _fork_helper()
    _drop(owner)
    helper = hostwide.HostWide(sock, pid, owner.name)
    hostwide.install(helper)
    return (
        f"works as {owner.name} (uid {owner.uid}), who controls {owner.because}: root watches another user's run "
        f"with that user's rights; root's helper (pid {pid}) reads only the kernel log and other users' GPU holders"
    )
