"""Whose word a file is: what rlwatch may execute on a file's say-so, and which links it may follow to read.

rlwatch often runs as root in run directories that other users can write (``chmod 1777`` is common on shared pods).
Two rules follow, both taken from practice that has held for decades:

- **Trust follows ownership, as OpenSSH's StrictModes.** A file that decides what rlwatch executes or signals
  (``rlwatch.yaml``, a ``--config`` file) is trusted only when it and every directory above it are owned by the user
  running rlwatch or by root, and nobody else can replace it: the file writable by nobody else, each directory
  either writable by nobody else or sticky (``chmod +t``: then only an entry's owner may rename or remove it, which is
  why ``/tmp`` is safe for root's own files). Above the run directory the walk goes on to ``/`` only for a file
  outside the run directory. An untrusted file is still read — monitoring goes on — but every action is refused
  with :func:`distrust`'s line.
- **Links are followed only to what their owner could read.** A symbolic link in a directory another user owns (not
  this user, not root) — their own 0755 directory too, not only one others can write — is followed only when that
  user and the link's owner could read the file it leads to (by its mode, every directory above it searchable),
  checked on the open descriptor.
- **A hard link is no way around either rule.** A hard link has no owner of its own, and where the kernel's
  ``protected_hardlinks`` is off (its own default) another user may link any file they can see, root's 0600 ones
  included, into their directory. So a file read from a directory of another user must be theirs or this user's, and
  have no other name (``st_nlink`` 1); from a directory others can write, it must have no other name.
- **Links others planted are not followed, as the kernel's ``protected_symlinks``.** In a directory that others can
  write, a symbolic link is followed only when its owner is the user running rlwatch or owns what it points to:
  otherwise ``nobody`` could link ``train.log`` to ``/root/.ssh/id_rsa`` and have root's rlwatch show it on a
  dashboard, in a report and to the exporter. Files are then checked on the open descriptor, and the name is looked
  up again to be sure it still leads to that same file, so swapping the name during the check wins nothing.

Every refusal is one line naming the path and why, for a view to show; nothing here raises past its caller.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "LinkRefused",
    "config_distrust",
    "distrust",
    "open_followed",
    "open_read",
    "trusted_owner",
    "writable_by_others",
]

_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
_MAX_LINKS = 40  # the kernel's own limit on links followed in one lookup


def trusted_owner(uid: int) -> bool:
    """A file rlwatch may act on belongs to the user running it, or to root (who could do anything anyway)."""
    return uid in (os.geteuid(), 0)


def writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & _WRITABLE_BY_OTHERS)


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _owner_problem(path: Path, st: os.stat_result) -> str | None:
    if not trusted_owner(st.st_uid):
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}) or root"
    return None


def distrust(path: Path, *, up_to: Path | None = None) -> str | None:
    """Why what ``path`` says must not decide what rlwatch executes, or None when it may.

    ``path`` and each directory above it, up to and including ``up_to`` (or ``/`` when ``path`` is not below
    ``up_to``), must belong to this user or root; the file must be writable by nobody else, and a directory that
    others can write must be sticky. A symbolic link on the way is judged as the file it names, and the link itself
    must belong to this user or root too (its owner decides where it points).
    """
    path = Path(os.path.abspath(path))
    try:
        lst = os.lstat(path)
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISLNK(lst.st_mode):
        if why := _owner_problem(path, lst):
            return f"{why} (a symbolic link)"
        real = Path(os.path.realpath(path))
        if why := distrust(real, up_to=up_to if up_to is not None and _below(real, up_to) else None):
            return why
    elif why := _owner_problem(path, st):
        return why
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if writable_by_others(st):
        return f"{path} is writable by group or others (mode {_mode(st)})"
    stop = Path(os.path.abspath(up_to)) if up_to is not None else None
    if stop is not None and not _below(path, stop):
        stop = None
    child_uid = st.st_uid
    for directory in path.parents:
        try:
            dst = os.stat(directory)
        except OSError as exc:
            return f"{directory}: {exc.strerror or exc}"
        if why := _owner_problem(directory, dst):
            return why
        if writable_by_others(dst) and not (dst.st_mode & stat.S_ISVTX and trusted_owner(child_uid)):
            return (
                f"{directory} is writable by group or others (mode {_mode(dst)}): anyone there could replace "
                f"{path.name}"
            )
        child_uid = dst.st_uid
        if stop is not None and directory == stop:
            break
    return None


def config_distrust(path: Path, run_dir: Path) -> str | None:
    """:func:`distrust` for a configuration file, as the line a refused action shows."""
    why = distrust(path, up_to=run_dir)
    if why is None:
        return None
    return f"the configuration {path} is not trusted: {why}; actions are off (monitoring goes on)"


def _below(path: Path, top: Path) -> bool:
    try:
        Path(os.path.abspath(path)).relative_to(os.path.abspath(top))
    except ValueError:
        return False
    return True


class LinkRefused(OSError):
    """A symbolic link that another user planted where others can write: not followed. One line, naming it."""


def _check_links(path: str) -> dict[int, str]:
    """Walk ``path`` as the kernel would and refuse a link in a directory others can write whose owner is neither
    this user nor the owner of what it points to (:class:`LinkRefused`). Other errors are left to the open.

    Returns, for each link on the way in a directory of another user (neither this user nor root), that user and the
    link's owner, each with the link: the file opened must be one each of them could read
    (:func:`_refuse_unreadable`)."""
    owners: dict[int, str] = {}
    pending = [p for p in path.split("/") if p]
    current = "/" if path.startswith("/") else os.getcwd()
    followed = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current) or "/"
            continue
        candidate = os.path.join(current, part)
        try:
            lst = os.lstat(candidate)
        except OSError:
            return owners
        if not stat.S_ISLNK(lst.st_mode):
            current = candidate
            continue
        followed += 1
        if followed > _MAX_LINKS:
            raise LinkRefused(errno.ELOOP, f"{path}: too many symbolic links")
        try:
            parent = os.stat(current)
            target_owner = os.stat(candidate).st_uid
        except OSError:
            return owners
        if not trusted_owner(parent.st_uid):  # another user's directory: its owner (and the link's) decide
            for uid in (lst.st_uid, parent.st_uid):
                if not trusted_owner(uid):
                    owners.setdefault(uid, candidate)
        if writable_by_others(parent) and lst.st_uid != os.geteuid() and lst.st_uid != target_owner:
            raise LinkRefused(
                errno.EACCES,
                f"{candidate} is a symbolic link of uid {lst.st_uid} in {current}, which others can write, to a file "
                f"of uid {target_owner}: not followed",
            )
        target = os.readlink(candidate)
        if target.startswith("/"):
            current = "/"
        pending = [p for p in target.split("/") if p] + pending
    return owners


def _groups(uid: int) -> set[int]:
    try:
        entry = pwd.getpwuid(uid)
        return {entry.pw_gid, *os.getgrouplist(entry.pw_name, entry.pw_gid)}
    except (KeyError, OSError):
        return set()


def _may(st: os.stat_result, uid: int, groups: set[int], bits: tuple[int, int, int]) -> bool:
    """Whether ``uid`` has the access ``bits`` (owner, group, other) to a file by its mode, as the kernel decides:
    the owner's class first, then the group's, then the others'."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & bits[0])
    if st.st_gid in groups:
        return bool(st.st_mode & bits[1])
    return bool(st.st_mode & bits[2])


def _refuse_unreadable(fd: int, name: str, owners: dict[int, str]) -> None:
    """Refuse (:class:`LinkRefused`) the file open on ``fd`` unless each owner of a link on the way could have read it
    themselves: the file readable by them, and every directory above it searchable. Checked on the descriptor, so a
    name swapped after the walk changes nothing. Otherwise ``nobody``'s ``train.log -> /root/secret.txt``, in
    ``nobody``'s own directory, would have root's rlwatch read and show what ``nobody`` may not."""
    if not owners:
        return
    st = os.fstat(fd)
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = os.path.realpath(name)
    for uid, link in owners.items():
        groups = _groups(uid)
        ok = _may(st, uid, groups, (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH))
        for directory in Path(real).parents if ok else ():
            try:
                dst = os.stat(directory)
            except OSError:
                ok = False
                break
            if not _may(dst, uid, groups, (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)):
                ok = False
                break
        if not ok:
            raise LinkRefused(
                errno.EACCES,
                f"{link} is a symbolic link of uid {uid} to {real}, which uid {uid} cannot read: not followed",
            )


def _refuse_foreign_file(fd: int, name: str, st: os.stat_result) -> None:
    """Refuse (:class:`LinkRefused`) a regular file open on ``fd`` that another user may have hard-linked where it
    was found: in a directory of another user (where the name was looked up, or where its links led), a file that
    is neither that user's nor this user's, or one with more than one name; in a directory others can write, one
    with more than one name. Root's ``secret`` linked as ``nobody``'s ``train.log`` is one file with two names,
    owned by root: refused before a byte of it is read."""
    places = {os.path.dirname(os.path.abspath(name))}
    try:
        places.add(os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")))
    except OSError:
        pass
    for directory in sorted(places):
        try:
            dst = os.stat(directory)
        except OSError:
            continue
        foreign = not trusted_owner(dst.st_uid)
        if not foreign and not writable_by_others(dst):
            continue
        if st.st_nlink > 1:
            raise LinkRefused(
                errno.EACCES,
                f"{name} has {st.st_nlink} hard links and lies in {directory}, which "
                + (f"uid {dst.st_uid} owns" if foreign else "others can write")
                + ": not read (another name of it may be a file they may not read)",
            )
        if foreign and st.st_uid not in (dst.st_uid, os.geteuid()):
            raise LinkRefused(
                errno.EACCES,
                f"{name} is owned by uid {st.st_uid}, neither by uid {dst.st_uid}, whose directory holds it, nor by "
                "this user: not read",
            )


def open_followed(path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> int:
    """``os.open(path, flags | O_CLOEXEC)`` for a file others may have placed, following only the links the
    kernel's ``protected_symlinks`` rule would follow (raises :class:`LinkRefused`, an ``OSError``), and making sure
    the name still leads to the file opened. The caller checks the descriptor for what it needs (a regular file)."""
    name = os.fspath(path)
    owners = _check_links(os.path.abspath(name))
    fd = os.open(name, flags | os.O_CLOEXEC)
    try:
        opened = os.fstat(fd)
        _refuse_unreadable(fd, name, owners)
        if stat.S_ISREG(opened.st_mode):
            _refuse_foreign_file(fd, name, opened)
        _check_links(os.path.abspath(name))
        now = os.stat(name)
    except OSError:
        os.close(fd)
        raise
    if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
        os.close(fd)
        raise LinkRefused(errno.EAGAIN, f"{name} was replaced while it was opened: not read")
    return fd


def open_read(path: str | os.PathLike[str]) -> BinaryIO:
    """A file of the run opened for reading as :func:`open_followed` allows, and only when it is a regular file (a
    FIFO planted in its place would block the reader for ever; a device would be read as if it were a log)."""
    fd = open_followed(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{os.fspath(path)} is not a regular file")
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")
