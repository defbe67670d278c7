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
- a read opens with ``O_NOFOLLOW`` and takes only a regular file owned by this user or root.

Every failure is a :class:`StateFileError` whose text is one line naming the path, for the caller to show as a
degraded state: never a traceback.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rlwatch.common.trust import open_followed, trusted_owner

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


class StateDir:
    """``<run dir>/.rlwatch``: checked each time it is used, every access relative to the checked descriptor."""

    def __init__(self, run_dir: Path, name: str = STATE_DIR) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / name
        self._name = name

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
    @contextmanager
    def _dir(self, sub: str, *, create: bool) -> Iterator[int]:
        """A descriptor of the checked ``.rlwatch/`` (or of ``sub`` below it); FileNotFoundError when missing."""
        try:
            fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if create:
                raise StateFileError(f"{self.run_dir}: no such directory") from None
            raise
        except OSError as exc:
            raise StateFileError(f"{self.run_dir}: {_why(exc)}") from None
        path = self.run_dir
        try:
            for part in [self._name, *(p for p in sub.split("/") if p)]:
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


def append_problem(path: Path) -> str | None:
    """Why :func:`append_file` / :func:`open_append` would refuse ``path``, found without creating or changing
    anything (for a plan's checks before its first signal); None when it would be accepted. A file that does not
    exist yet must be creatable in a directory nobody else can write, where nobody can put a link in its way."""
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
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if found is None:
            try:
                pst = os.stat(parent)
            except OSError as exc:
                return f"{path}: {_why(exc)}"
            if pst.st_mode & _WRITABLE_BY_OTHERS and not pst.st_mode & stat.S_ISVTX:
                return f"{path} would be created in {parent}, which others can write: refused"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"{path} cannot be created: {parent} is not writable"
        return None
    except OSError as exc:
        return f"{path}: {_why(exc)}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link: refused"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file: refused"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user: refused"
    if st.st_nlink > 1:
        return f"{path} has {st.st_nlink} hard links: refused"
    return None


def open_append(path: Path, *, mode: int = PRIVATE) -> int:
    """An append descriptor of ``path`` by the rules of :func:`append_file`."""
    found = locate(path)
    if found is not None:
        state, name = found
        return state.open_append(name, mode=mode)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(path, flags, mode)
    except OSError as exc:
        raise _open_error(exc, Path(path)) from None
    return _checked_own(fd, Path(path))


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
    ever writing through a link: a private temporary name in the same directory (``O_EXCL|O_NOFOLLOW``), flushed,
    then renamed over the target. A target that exists and is not a regular file — a symbolic link planted at the
    name, a FIFO, a directory — is refused (:class:`StateFileError`, one line), never replaced or followed."""
    path = Path(os.path.abspath(path))
    try:
        dfd = open_followed(path.parent, os.O_RDONLY | os.O_DIRECTORY)
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
