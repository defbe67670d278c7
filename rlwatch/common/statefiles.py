"""Reading and writing rlwatch's own files in a run's ``.rlwatch/`` so that nobody else can subvert them.

Run directories on shared machines are often writable by others, and rlwatch often runs as root. A symbolic link
planted at a name rlwatch writes (``launches.json``, ``audit.jsonl``, ``watchdog.pid``) would make it overwrite the
link's target, anywhere on the machine; a file planted at a name it reads (``launches.json`` holds command lines it
will execute) would make it act on someone else's say-so. So every access goes through this module:

- the directory is opened without following a symbolic link, one component at a time, and checked on the open
  descriptor (``fstat``): a directory, owned by the user running rlwatch (or root, who can do everything anyway),
  not writable by group or others. A missing one is created ``0700``. Anything else is refused with one line;
- every later access is relative to that descriptor (``dir_fd``), so renaming the checked directory away and
  putting another in its place changes nothing for an access already under way;
- a whole-file write goes to a private temporary name (random suffix, ``O_CREAT|O_EXCL|O_NOFOLLOW``, mode ``0600``
  unless asked otherwise), is flushed to disk, and is renamed over the target: the rename replaces a planted link
  itself, never what it points at, and a reader sees the old file or the new one, never half of one;
- an append (the audit log, output logs of started processes) opens with ``O_APPEND|O_NOFOLLOW`` and checks that
  the file opened is a regular file of this user before one byte is written;
- a read opens with ``O_NOFOLLOW`` and takes only a regular file owned by this user or root;
- the run directory and ``.rlwatch/`` are opened once, when a :class:`StateDir` is first used, and kept: every later
  access of that process (the launch book, the watchdog's state, the audit log, sampled stacks) goes through those
  descriptors, so a run directory swapped for a link to another run while a watch goes on changes nothing: writes go
  on into the directory first opened, never into what the path names now;
- a file outside ``.rlwatch/`` that rlwatch appends to (a started process's output, where the process it replaces
  wrote) is reached without following a symbolic link on any component (``openat2`` with ``RESOLVE_NO_SYMLINKS``
  where the kernel has it, else one ``O_NOFOLLOW`` directory at a time), its missing directories made the same way,
  and only a regular file of this user with one link on a real file system (never ``/proc`` or ``/sys``) is taken;
- a file rlwatch writes whole outside ``.rlwatch/`` (``init``'s rlwatch.yaml, a service file) is written relative to
  its directory opened without following a link that anyone but this user or root owns.

Every failure is a :class:`StateFileError` whose text is one line naming the path, for the caller to show as a
degraded state: never a traceback.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import secrets
import stat
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rlwatch.common.trust import trusted_owner

STATE_DIR = ".rlwatch"
PRIVATE = 0o600
DIR_MODE = 0o700
MAX_READ = 16 * 1024 * 1024  # a state file larger than this is not one rlwatch wrote
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class StateFileError(Exception):
    """One line saying which state file or directory was refused or failed, and why."""


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def dir_problem(st: os.stat_result, path: Path) -> str | None:
    """Why the directory described by ``st`` must not be used, or None when it may."""
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if not trusted_owner(st.st_uid):
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}): not trusted"
    if st.st_mode & _WRITABLE_BY_OTHERS:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}): not trusted"
    return None


def _open_error(exc: OSError, path: Path) -> StateFileError:
    if exc.errno == errno.ELOOP:
        return StateFileError(f"{path} is a symbolic link: refused")
    if exc.errno == errno.ENXIO:  # O_NONBLOCK write-open of a FIFO
        return StateFileError(f"{path} is not a regular file: refused")
    return StateFileError(f"{path}: {_why(exc)}")


def locate(path: Path) -> tuple[StateDir, str] | None:
    """The ``.rlwatch/`` directory that ``path`` lies in and its name there, or None when it lies in none.

    Lexical (no symbolic link resolved): a path written as ``<run>/.rlwatch/logs/x.log`` is a state file whatever
    the links on disk say, which is the point.
    """
    parts = Path(os.path.abspath(path)).parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == STATE_DIR:
            return StateDir(Path(*parts[:i])), "/".join(parts[i + 1 :])
    return None


class _Pin:
    """The descriptors of one run directory and its ``.rlwatch/``, opened once and shared by every :class:`StateDir`
    of that directory in this process while any of them lives."""

    __slots__ = ("ident", "key", "refs", "run_fd", "state_fd")

    def __init__(self, key: tuple[str, str], run_fd: int, ident: tuple[int, int]) -> None:
        self.key = key
        self.run_fd = run_fd
        self.state_fd: int | None = None
        self.refs = 0
        self.ident = ident  # (st_dev, st_ino) of the run directory opened


_PINS: dict[tuple[str, str], _Pin] = {}
_PINS_LOCK = threading.RLock()  # re-entrant: a finalizer may run (garbage collection) while this thread holds it


def _forget_after_fork() -> None:
    """A forked child opens its own: privilege separation's watcher works as another user, and must not take a
    directory its parent pinned (perhaps through a path that led elsewhere then) for its own; the lock may also be
    held by a parent's thread that does not exist in the child."""
    global _PINS_LOCK
    _PINS.clear()
    _PINS_LOCK = threading.RLock()


os.register_at_fork(after_in_child=_forget_after_fork)


def _release(pin: _Pin) -> None:
    """One :class:`StateDir` less on ``pin``; the last one closes its descriptors."""
    with _PINS_LOCK:
        pin.refs -= 1
        if pin.refs > 0:
            return
        if _PINS.get(pin.key) is pin:
            del _PINS[pin.key]
        for fd in (pin.state_fd, pin.run_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        pin.state_fd = None


class StateDir:
    """``<run dir>/.rlwatch``: opened once, on first use, and checked each time it is used; every access relative to
    the descriptor opened then (see the module's docstring). :meth:`close` (or the object's end) lets it go."""

    def __init__(self, run_dir: Path, name: str = STATE_DIR) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / name
        self._name = name
        self._pin: _Pin | None = None
        self._finalizer: weakref.finalize[[_Pin], StateDir] | None = None

    def close(self) -> None:
        """Let the descriptors go (the last :class:`StateDir` of the directory closes them); a later use opens the
        directory again by its path."""
        finalizer, self._finalizer, self._pin = self._finalizer, None, None
        if finalizer is not None:
            finalizer()

    def moved(self) -> str | None:
        """A line saying the path no longer names the run directory first opened (it was renamed, or swapped for a
        link to another directory), or None. Writes go on into the directory first opened either way."""
        pin = self._pin
        if pin is None:
            return None
        try:
            st = os.stat(self.run_dir)
        except OSError as exc:
            return f"{self.run_dir}: {_why(exc)}; rlwatch's files go on into the directory first opened"
        if (st.st_dev, st.st_ino) != pin.ident:
            return f"{self.run_dir} now names another directory; rlwatch's files go on into the one first opened"
        return None

    def check(self, *, create: bool = False) -> str | None:
        """None when the directory may be used (or is missing and ``create`` is False); else the one-line reason."""
        try:
            with self._dir("", create=create):
                return None
        except FileNotFoundError:
            return None
        except StateFileError as exc:
            return str(exc)

    # ------------------------------------------------------------------------------------------------ dirs
    def _pinned(self, *, create: bool) -> _Pin:
        """The run directory's descriptor, opened (by its path, once) on first use or shared with another
        :class:`StateDir` of the same directory that holds one; FileNotFoundError when it does not exist."""
        with _PINS_LOCK:
            if self._pin is not None:
                return self._pin
            key = (os.path.abspath(self.run_dir), self._name)
            pin = _PINS.get(key)
            if pin is None:
                try:
                    fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except FileNotFoundError:
                    if create:
                        raise StateFileError(f"{self.run_dir}: no such directory") from None
                    raise
                except OSError as exc:
                    raise StateFileError(f"{self.run_dir}: {_why(exc)}") from None
                try:
                    st = os.fstat(fd)
                except OSError as exc:
                    os.close(fd)
                    raise StateFileError(f"{self.run_dir}: {_why(exc)}") from None
                pin = _Pin(key, fd, (st.st_dev, st.st_ino))
                _PINS[key] = pin
            pin.refs += 1
            self._pin = pin
            self._finalizer = weakref.finalize(self, _release, pin)
            return pin

    def _state_fd(self, *, create: bool) -> int:
        """A descriptor (the caller's to close) of the checked ``.rlwatch/`` below the run directory first opened;
        FileNotFoundError when it is missing and not to be created."""
        pin = self._pinned(create=create)
        with _PINS_LOCK:
            if pin.state_fd is None:
                fd = self._enter(os.dup(pin.run_fd), self._name, self.path, create=create)
                pin.state_fd = fd
            fd = os.dup(pin.state_fd)
        try:
            problem = dir_problem(os.fstat(fd), self.path)  # its owner or mode changed since: refused from now on
        except OSError as exc:
            problem = f"{self.path}: {_why(exc)}"
        if problem:
            os.close(fd)
            raise StateFileError(problem)
        return fd

    @contextmanager
    def _dir(self, sub: str, *, create: bool) -> Iterator[int]:
        """A descriptor of the checked ``.rlwatch/`` (or of ``sub`` below it); FileNotFoundError when missing."""
        path = self.path
        try:
            fd = self._state_fd(create=create)
            for part in (p for p in sub.split("/") if p):
                path = path / part
                parent, fd = fd, -1
                fd = self._enter(parent, part, path, create=create)  # closes parent whatever happens
        except FileNotFoundError:
            if create:  # removed between being made and being opened
                raise StateFileError(f"{path}: removed while being opened") from None
            raise
        try:
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _enter(parent: int, part: str, path: Path, *, create: bool) -> int:
        """Open ``part`` below ``parent`` (closing ``parent``), creating it private when asked, and check it."""
        try:
            try:
                fd = os.open(part, _NOFOLLOW_DIR, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, DIR_MODE, dir_fd=parent)
                except FileExistsError:
                    pass  # made at the same moment by another rlwatch: checked below like any other
                fd = os.open(part, _NOFOLLOW_DIR, dir_fd=parent)
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                try:
                    is_link = stat.S_ISLNK(os.lstat(part, dir_fd=parent).st_mode)
                except OSError:
                    is_link = False
                if is_link:
                    raise StateFileError(f"{path} is a symbolic link: refused") from None
                raise StateFileError(f"{path} is not a directory") from None
            raise StateFileError(f"{path}: {_why(exc)}") from None
        finally:
            os.close(parent)
        try:
            problem = dir_problem(os.fstat(fd), path)
        except OSError as exc:
            problem = f"{path}: {_why(exc)}"
        if problem:
            os.close(fd)
            raise StateFileError(problem)
        return fd

    def _split(self, name: str) -> tuple[str, str, Path]:
        sub, _, base = name.rpartition("/")
        if not base or base in (".", "..") or ".." in sub.split("/"):
            raise StateFileError(f"{self.path / name}: not a plain name inside {self.path}")
        return sub, base, self.path / name

    # ----------------------------------------------------------------------------------------------- files
    def write(self, name: str, data: bytes, *, mode: int = PRIVATE) -> None:
        """Replace ``name`` with ``data`` atomically, through a private temporary file: never through a link."""
        sub, base, path = self._split(name)
        with self._dir(sub, create=True) as dfd:
            _replace_in(dfd, base, data, mode, path)
            try:
                os.fsync(dfd)  # the rename itself survives a crash
            except OSError:
                pass

    def read(self, name: str, *, limit: int = MAX_READ) -> bytes | None:
        """The content of ``name``; None when it (or the directory) does not exist."""
        fd = self.open_read(name)
        if fd is None:
            return None
        try:
            return read_all(fd, limit, self.path / name)
        finally:
            os.close(fd)

    def open_read(self, name: str) -> int | None:
        """A read descriptor of ``name`` checked to be a regular file of this user or root; None when missing."""
        sub, base, path = self._split(name)
        try:
            with self._dir(sub, create=False) as dfd:
                fd = os.open(base, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _open_error(exc, path) from None
        return _checked(fd, path, trusted_owner, ": not trusted")

    def open_append(self, name: str, *, mode: int = PRIVATE) -> int:
        """An ``O_APPEND`` descriptor of ``name`` (created if missing), checked to be this user's regular file.

        The caller owns the descriptor: the audit log writes its lines through it, a started process gets it as its
        output.
        """
        sub, base, path = self._split(name)
        with self._dir(sub, create=True) as dfd:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(base, flags, mode, dir_fd=dfd)
            except OSError as exc:
                raise _open_error(exc, path) from None
        return _checked_own(fd, path)

    def append(self, name: str, data: bytes, *, sync: bool = False) -> None:
        """Append ``data`` to ``name`` in one ``write`` (lines of several writers never interleave)."""
        _append(self.open_append(name), data, sync, self.path / name)

    def open_lock(self, name: str) -> int:
        """A read-write descriptor of ``name`` (created private if missing) for a lock: this user's regular file."""
        sub, base, path = self._split(name)
        with self._dir(sub, create=True) as dfd:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(base, flags, PRIVATE, dir_fd=dfd)
            except OSError as exc:
                raise _open_error(exc, path) from None
        return _checked_own(fd, path)

    def unlink(self, name: str) -> None:
        """Remove ``name`` (a link planted there is removed itself); nothing happens when it is missing."""
        sub, base, path = self._split(name)
        try:
            with self._dir(sub, create=False) as dfd:
                os.unlink(base, dir_fd=dfd)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StateFileError(f"{path}: cannot remove: {_why(exc)}") from None


def _checked_own(fd: int, path: Path) -> int:
    """``fd`` when it is a regular file of this user (then blocking again); closed and refused otherwise."""
    fd = _checked(fd, path, lambda uid: uid == os.geteuid(), ", not by this user: refused")
    try:
        os.set_blocking(fd, True)
    except OSError as exc:
        os.close(fd)
        raise StateFileError(f"{path}: {_why(exc)}") from None
    return fd


def _checked(fd: int, path: Path, owner_ok: Callable[[int], bool], refusal: str) -> int:
    """``fd`` when it is a regular file whose owner ``owner_ok`` accepts; closed and refused otherwise, in one line
    ending with ``refusal``."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateFileError(f"{path} is not a regular file: refused")
        if not owner_ok(st.st_uid):
            raise StateFileError(f"{path} is owned by uid {st.st_uid}{refusal}")
        if st.st_nlink > 1:  # another name for it may be anywhere: a hard link to a file of root's, say
            raise StateFileError(f"{path} has {st.st_nlink} hard links: refused")
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError):
            raise StateFileError(f"{path}: {_why(exc)}") from None
        raise
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_all(fd: int, limit: int, path: Path) -> bytes:
    """Everything left in ``fd``, refused past ``limit`` bytes (a state file that large is not one rlwatch wrote)."""
    chunks: list[bytes] = []
    size = 0
    try:
        while chunk := os.read(fd, 1 << 16):
            size += len(chunk)
            if size > limit:
                raise StateFileError(f"{path} is larger than {limit} bytes: not a file rlwatch wrote")
            chunks.append(chunk)
    except OSError as exc:
        raise StateFileError(f"{path}: cannot read: {_why(exc)}") from None
    return b"".join(chunks)


def append_file(path: Path, data: bytes, *, sync: bool = False, mode: int = PRIVATE) -> None:
    """Append to ``path``: through its checked state directory when it lies in one, else still never through a
    symbolic link and only into this user's regular file (an audit log configured elsewhere)."""
    _append(open_append(path, mode=mode), data, sync, path)


def _append(fd: int, data: bytes, sync: bool, path: Path) -> None:
    """Write ``data`` to an append descriptor in one ``write``, then close it; errors name ``path``."""
    try:
        _write_all(fd, data)
        if sync:
            os.fsync(fd)
    except OSError as exc:
        raise StateFileError(f"{path}: {_why(exc)}") from None
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------ paths without their links
AT_FDCWD = -100
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}.get(
    platform.machine()
)
_LINK_HOPS = 40  # the kernel's own limit on links followed in one lookup
_openat2_missing = _SYS_OPENAT2 is None


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.syscall.restype = ctypes.c_long
    except (OSError, AttributeError):  # no C library to call: the component walk does the same work
        return None
    return lib


_LIBC = _libc()


def _openat2(dirfd: int, path: str, flags: int, resolve: int) -> int | None:
    """openat2(2) through ``syscall``; None where the kernel (or a seccomp filter) does not have it."""
    global _openat2_missing
    if _openat2_missing or _LIBC is None or _SYS_OPENAT2 is None:
        return None
    how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
    for _ in range(3):  # EAGAIN: a rename raced the lookup; asked again, then left to the walk
        fd = int(_LIBC.syscall(
            ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dirfd), ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)),
        ))  # fmt: skip
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM):
            _openat2_missing = True
            return None
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), path)
    return None


LinkRule = Callable[[os.stat_result, os.stat_result], bool]  # (the link, the directory holding it): follow it?


def _follow_trusted(link: os.stat_result, parent: os.stat_result) -> bool:
    """A link this user or root made, in a directory of this user or root that nobody else can change (or a sticky
    one, where nobody else may rename or remove it): its target is theirs to choose, so it is followed."""
    return (
        trusted_owner(link.st_uid)
        and trusted_owner(parent.st_uid)
        and (not parent.st_mode & _WRITABLE_BY_OTHERS or bool(parent.st_mode & stat.S_ISVTX))
    )


def _step(fd: int, part: str, shown: str, *, create: bool, dir_mode: int) -> int:
    """The directory ``part`` below ``fd``, opened without following a link (made first when missing and asked);
    OSError as the kernel says (ELOOP or ENOTDIR for a link), FileNotFoundError when missing."""
    try:
        return os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(part, dir_mode, dir_fd=fd)  # never through a link: mkdir makes no directory at a link's target
    except FileExistsError:
        pass  # made at the same moment, or a link planted there: the open says which
    return os.open(part, _NOFOLLOW_DIR, dir_fd=fd)


def _walk(path: str, *, create: bool, follow: LinkRule | None, dir_mode: int = 0o777) -> int:
    """A descriptor of the directory ``path`` (absolute), reached one ``O_NOFOLLOW`` component at a time from ``/``:
    a symbolic link on the way is followed only when ``follow`` accepts it, else refused (:class:`StateFileError`,
    one line naming it and its owner). Missing directories are made when ``create`` (FileNotFoundError when not)."""
    pending = [p for p in path.split("/") if p]
    fd = os.open("/", _NOFOLLOW_DIR)
    here = "/"
    hops = 0
    try:
        while pending:
            part = pending.pop(0)
            if part == ".":
                continue
            nxt = os.path.dirname(here) if part == ".." else os.path.join(here, part)
            try:
                new = _step(fd, part, nxt, create=create, dir_mode=dir_mode)
            except FileNotFoundError:
                raise
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise StateFileError(f"{nxt}: {_why(exc)}") from None
                try:
                    lst = os.lstat(part, dir_fd=fd)
                except OSError:
                    raise StateFileError(f"{nxt} is not a directory") from None
                if not stat.S_ISLNK(lst.st_mode):
                    raise StateFileError(f"{nxt} is not a directory") from None
                if follow is None or not follow(lst, os.fstat(fd)):
                    raise StateFileError(f"{nxt} is a symbolic link of uid {lst.st_uid}: not followed") from None
                hops += 1
                target = os.readlink(part, dir_fd=fd)
                again = os.lstat(part, dir_fd=fd)
                if hops > _LINK_HOPS or (again.st_dev, again.st_ino) != (lst.st_dev, lst.st_ino):
                    raise StateFileError(f"{nxt}: a symbolic link that changed or loops: not followed") from None
                if target.startswith("/"):
                    os.close(fd)
                    fd, here = -1, "/"
                    fd = os.open("/", _NOFOLLOW_DIR)
                pending = [p for p in target.split("/") if p] + pending
                continue
            os.close(fd)
            fd, here = new, nxt
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd


def open_dir_for_write(path: Path | str, *, create: bool = False) -> int:
    """A descriptor of the directory ``path`` for writing in: a symbolic link on the way is followed only when this
    user or root made it in a directory nobody else can change (:func:`_follow_trusted`); a missing directory is
    made private (0700) when ``create``. :class:`StateFileError` (one line) otherwise."""
    return _walk(os.path.abspath(path), create=create, follow=_follow_trusted, dir_mode=DIR_MODE)


def open_dir_nofollow(path: Path | str, *, create: bool = False) -> int:
    """A descriptor of the directory ``path`` reached without following a symbolic link on any component:
    ``openat2(RESOLVE_NO_SYMLINKS)`` where the kernel has it, else :func:`_walk`; a missing directory is made (the
    same way, never through a link) when ``create``. :class:`StateFileError` (one line) for a link or a
    non-directory on the way; FileNotFoundError for a missing one that is not to be made."""
    name = os.path.abspath(path)
    try:
        fd = _openat2(AT_FDCWD, name, os.O_RDONLY | os.O_DIRECTORY, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    except FileNotFoundError:
        fd = None  # made by the walk below, or its FileNotFoundError
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise StateFileError(f"{name}: {_why(exc)}") from None
        fd = None  # the walk names the link
    if fd is not None:
        return fd
    return _walk(name, create=create, follow=None)


# Pseudo file systems whose "files" are the kernel's settings and state (statfs(2) f_type): a started process's
# output appended there would change the machine, not fill a log.
_PSEUDO_FS = {
    0x9FA0: "proc",
    0x62656572: "sysfs",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0x0027E0EB: "cgroup",
    0x63677270: "cgroup2",
    0xCAFE4A11: "bpf",
    0x62656570: "configfs",
    0x1CD1: "devpts",
    0x6165676C: "pstore",
    0xDE5E81E4: "efivarfs",
    0xF97CFF8C: "selinuxfs",
    0x43415D53: "smackfs",
    0x65735543: "fusectl",
    0x42494E4D: "binfmt_misc",
}
_PSEUDO_PREFIXES = ("/proc/", "/sys/", "/dev/")


def _fs_type(fd: int) -> int | None:
    if _LIBC is None:
        return None
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type (a long) comes first
    if _LIBC.fstatfs(ctypes.c_int(fd), buf) != 0:
        return None
    return int.from_bytes(buf.raw[: ctypes.sizeof(ctypes.c_long)], sys.byteorder) & 0xFFFFFFFF


def fs_problem(fd: int, path: Path | str) -> str | None:
    """Why the file (or directory) open on ``fd`` is no place for output: on a pseudo file system such as
    ``/proc`` or ``/sys``, whose files are the kernel's settings; None otherwise."""
    shown = os.path.abspath(path)
    if any((shown + "/").startswith(p) for p in _PSEUDO_PREFIXES):
        return f"{shown} is under /{shown.split('/')[1]}, not a file system for output: refused"
    kind = _PSEUDO_FS.get(_fs_type(fd) or 0)
    if kind is not None:
        return f"{shown} is on {kind}, not a file system for output: refused"
    return None


def append_problem(path: Path) -> str | None:
    """Why :func:`append_file` / :func:`open_append` would refuse ``path``, found without creating or changing
    anything (for a plan's checks before its first signal); None when it would be accepted. A file that does not
    exist yet must be creatable in a directory nobody else can write, where nobody can put a link in its way; no
    component of the path may be a symbolic link."""
    path = Path(os.path.abspath(path))
    found = locate(path)
    if found is not None:
        state = found[0]
        if why := state.check():
            return why
        if not os.path.lexists(state.path) and not os.access(state.run_dir, os.W_OK | os.X_OK):
            return f"{state.path} cannot be created: {state.run_dir} is not writable"
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{path}: {_why(exc)}"
        return _file_problem(st, path)
    parent = path.parent
    try:
        dfd = open_dir_nofollow(parent)
    except StateFileError as exc:
        return f"{path}: {exc}"
    except FileNotFoundError:
        return _creatable(parent, path)
    except OSError as exc:
        return f"{path}: {_why(exc)}"
    try:
        if why := fs_problem(dfd, path):
            return why
        try:
            st = os.lstat(path.name, dir_fd=dfd)
        except FileNotFoundError:
            return _dir_writable(dfd, parent, path)
        except OSError as exc:
            return f"{path}: {_why(exc)}"
        return _file_problem(st, path)
    finally:
        os.close(dfd)


def _file_problem(st: os.stat_result, path: Path) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link: refused"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file: refused"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user: refused"
    if st.st_nlink > 1:
        return f"{path} has {st.st_nlink} hard links: refused"
    return None


def _dir_writable(dfd: int, parent: Path, path: Path) -> str | None:
    """Why ``path`` could not be made in the directory ``dfd`` (``parent``) safely: others can write it (and it is not
    sticky), or this user cannot; None when it can."""
    try:
        pst = os.fstat(dfd)
    except OSError as exc:
        return f"{path}: {_why(exc)}"
    if pst.st_mode & _WRITABLE_BY_OTHERS and not pst.st_mode & stat.S_ISVTX:
        return f"{path} would be created in {parent}, which others can write: refused"
    if not os.access(".", os.W_OK | os.X_OK, dir_fd=dfd):
        return f"{path} cannot be created: {parent} is not writable"
    return None


def _creatable(parent: Path, path: Path) -> str | None:
    """For a file whose directory is missing: the nearest directory above that exists, reached without a link,
    must let this user (and nobody else) make the rest."""
    for above in parent.parents:
        try:
            dfd = open_dir_nofollow(above)
        except FileNotFoundError:
            continue
        except StateFileError as exc:
            return f"{path}: {exc}"
        except OSError as exc:
            return f"{path}: {_why(exc)}"
        try:
            return fs_problem(dfd, path) or _dir_writable(dfd, above, path)
        finally:
            os.close(dfd)
    return f"{path}: no directory above it exists"


def open_append(path: Path, *, mode: int = PRIVATE) -> int:
    """An append descriptor of ``path`` by the rules of :func:`append_file`: its directory reached (and made when
    missing) without following a link on any component, and only a regular file of this user with one link on a
    real file system accepted."""
    found = locate(path)
    if found is not None:
        state, name = found
        return state.open_append(name, mode=mode)
    path = Path(os.path.abspath(path))
    try:
        dfd = open_dir_nofollow(path.parent, create=True)
    except StateFileError as exc:
        raise StateFileError(f"{path}: {exc}") from None
    except FileNotFoundError:
        raise StateFileError(f"{path}: {path.parent} was removed while being opened") from None
    except OSError as exc:
        raise _open_error(exc, path) from None
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(path.name, flags, mode, dir_fd=dfd)
    except OSError as exc:
        raise _open_error(exc, path) from None
    finally:
        os.close(dfd)
    fd = _checked_own(fd, path)
    if why := fs_problem(fd, path):
        os.close(fd)
        raise StateFileError(why)
    return fd


def _replace_in(dfd: int, name: str, data: bytes, mode: int, shown: Path) -> None:
    """Replace ``name`` in the directory ``dfd`` with ``data``: a private temporary name made there
    (``O_EXCL|O_NOFOLLOW``, so never a link someone planted), written, flushed and renamed over it; the temporary
    file is removed when any step fails (:class:`StateFileError`, naming ``shown``)."""
    tmp = f".{name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, PRIVATE, dir_fd=dfd)
    except OSError as exc:
        raise StateFileError(f"{shown}: cannot write: {_why(exc)}") from None
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not take the mode below what was asked for an executable
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError as exc:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise StateFileError(f"{shown}: cannot write: {_why(exc)}") from None


def write_file(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write a file rlwatch makes outside ``.rlwatch/`` (``init``'s rlwatch.yaml, a service unit, an SVG) without
    ever writing through a link: the directory reached following only links this user or root made where nobody
    else can change them (a run directory that another user swapped for a link to one of root's is refused, never
    written into), then a private temporary name there (``O_EXCL|O_NOFOLLOW``), flushed, renamed over the target. A
    target that exists and is not a regular file — a symbolic link planted at the name, a FIFO, a directory — is
    refused (:class:`StateFileError`, one line), never replaced or followed."""
    path = Path(os.path.abspath(path))
    try:  # a link on the way is followed only when this user or root made it where nobody else can change it
        dfd = open_dir_for_write(path.parent)
    except StateFileError as exc:
        raise StateFileError(f"{path}: cannot write: {exc}") from None
    except OSError as exc:
        raise StateFileError(f"{path}: cannot write: {_why(exc)}") from None
    try:
        try:
            st = os.lstat(path.name, dir_fd=dfd)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise StateFileError(f"{path}: cannot write: {_why(exc)}") from None
        if st is not None and not stat.S_ISREG(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise StateFileError(f"{path} is {what}: not replaced")
        _replace_in(dfd, path.name, data, mode, path)
    finally:
        os.close(dfd)
