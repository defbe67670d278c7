"""Small readers of /proc that never raise.

Processes come and go between listing /proc and reading it, and other users' entries deny reads; every helper turns
that into ``None`` (or an empty value) so callers treat "gone" and "unreadable" the same way. The text parsers are
separate from the readers so they can be fuzzed. ``proc_root`` is a parameter so tests and containers can point
elsewhere.

Start times are computed exactly as psutil computes ``create_time()`` (``starttime / CLK_TCK + btime``), so a
``(pid, create_time)`` identity taken here compares equal to one taken through psutil by the actions.
"""

from __future__ import annotations

import math
import os
import pwd
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

PROC = "/proc"


@dataclass(frozen=True, slots=True)
class StatFields:
    """The fields of ``/proc/<pid>/stat`` rlwatch uses."""

    comm: str
    state: str
    ppid: int
    starttime_ticks: int
    pgrp: int = 0
    session: int = 0
    flags: int = 0


def parse_count(text: str) -> int | None:
    """A non-negative decimal made of ASCII digits only (``"¹".isdigit()`` is true, but it is no number)."""
    return int(text) if text.isascii() and text.isdigit() else None


def split_stat(text: str) -> tuple[str, list[str]] | None:
    """``/proc/<pid>/stat`` as ``comm`` and the fields after it, split after the last ``)`` because ``comm`` may
    hold spaces and parentheses. Field N of proc(5) is ``rest[N - 3]``; None unless every field up to starttime (22)
    is there."""
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 0 or close_at < open_at:
        return None
    rest = text[close_at + 1 :].split()
    if len(rest) < 20:
        return None
    return text[open_at + 1 : close_at], rest


def parse_stat(text: str) -> StatFields | None:
    """``/proc/<pid>/stat``: state is field 3, ppid 4, pgrp 5, session 6, flags 9, starttime 22."""
    split = split_stat(text)
    if split is None:
        return None
    comm, rest = split
    try:
        ppid, pgrp, session, flags, start = (int(rest[i]) for i in (1, 2, 3, 6, 19))
    except ValueError:
        return None
    if ppid < 0 or start < 0:
        return None
    return StatFields(comm, rest[0], ppid, start, pgrp, session, flags)


def parse_btime(text: str) -> float | None:
    """Boot time in epoch seconds from ``/proc/stat``."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "btime":
            try:
                return float(int(parts[1]))
            except ValueError:
                return None
    return None


def parse_uptime(text: str) -> float | None:
    """Seconds since boot from ``/proc/uptime`` (its first field)."""
    parts = text.split()
    if not parts:
        return None
    try:
        value = float(parts[0])
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def parse_cmdline(data: bytes) -> tuple[str, ...]:
    """``/proc/<pid>/cmdline``: NUL-separated argv; kernel threads have none; undecodable bytes are replaced."""
    if not data:
        return ()
    if data.endswith(b"\0"):
        data = data[:-1]
    return tuple(part.decode("utf-8", "replace") for part in data.split(b"\0"))


def parse_status_uid(text: str) -> int | None:
    """The real uid from the ``Uid:`` line of ``/proc/<pid>/status``."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            parts = line.split()
            return parse_count(parts[1]) if len(parts) >= 2 else None
    return None


def parse_status_uids(text: str) -> tuple[int, ...] | None:
    """Every uid of the ``Uid:`` line of ``/proc/<pid>/status``: real, effective, saved, filesystem."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            found = tuple(parse_count(part) for part in line.split()[1:5])
            return (
                None if len(found) != 4 or any(u is None for u in found) else tuple(u for u in found if u is not None)
            )
    return None


def parse_environ(data: bytes) -> dict[str, str]:
    """``/proc/<pid>/environ``: NUL-separated ``KEY=value`` entries; entries without ``=`` are skipped."""
    env: dict[str, str] = {}
    for entry in data.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def parse_statm_rss_pages(text: str) -> int | None:
    """Resident pages, the second field of ``/proc/<pid>/statm`` (what psutil reports as ``rss``)."""
    parts = text.split()
    return parse_count(parts[1]) if len(parts) >= 2 else None


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except (OSError, ValueError):
        return None


def _read_text(path: str) -> str | None:
    data = _read_bytes(path)
    return None if data is None else data.decode("utf-8", "replace")


def _sysconf(name: str, fallback: int) -> int:
    try:
        value = os.sysconf(name)
    except (ValueError, OSError):
        return fallback
    return value if value > 0 else fallback


def clk_tck() -> int:
    return _sysconf("SC_CLK_TCK", 100)


def page_size() -> int:
    return _sysconf("SC_PAGE_SIZE", 4096)


def boot_time(proc_root: str = PROC) -> float | None:
    text = _read_text(f"{proc_root}/stat")
    return None if text is None else parse_btime(text)


def read_stat(pid: int, proc_root: str = PROC) -> StatFields | None:
    text = _read_text(f"{proc_root}/{pid}/stat")
    return None if text is None else parse_stat(text)


def start_time_from_ticks(ticks: int, btime: float | None) -> float | None:
    return None if btime is None else ticks / clk_tck() + btime


def read_cmdline(pid: int, proc_root: str = PROC) -> tuple[str, ...]:
    data = _read_bytes(f"{proc_root}/{pid}/cmdline")
    return () if data is None else parse_cmdline(data)


def read_environ(pid: int, proc_root: str = PROC) -> dict[str, str] | None:
    """The environment ``pid`` started with; None when it is not ours to read."""
    data = _read_bytes(f"{proc_root}/{pid}/environ")
    return None if data is None else parse_environ(data)


def read_cwd(pid: int, proc_root: str = PROC) -> str | None:
    try:
        return os.readlink(f"{proc_root}/{pid}/cwd")
    except (OSError, ValueError):
        return None


def read_rss(pid: int, proc_root: str = PROC) -> int | None:
    text = _read_text(f"{proc_root}/{pid}/statm")
    pages = None if text is None else parse_statm_rss_pages(text)
    return None if pages is None else pages * page_size()


def ppid(pid: int, proc_root: str = PROC) -> int | None:
    stat = read_stat(pid, proc_root)
    return None if stat is None else stat.ppid


def comm(pid: int, proc_root: str = PROC) -> str | None:
    stat = read_stat(pid, proc_root)
    return None if stat is None else stat.comm


def uid(pid: int, proc_root: str = PROC) -> int | None:
    text = _read_text(f"{proc_root}/{pid}/status")
    return None if text is None else parse_status_uid(text)


def owner(pid: int, proc_root: str = PROC) -> int | None:
    """The one user a process runs as — its real, effective, saved and filesystem uids all that user — or None when
    they differ (a set-uid program) or cannot be read. Whose process it is decides whether rlwatch may count it as
    the run's, record its command, or send it a secret: a mixed identity is nobody's for that purpose."""
    uids = all_uids(pid, proc_root)
    return uids[0] if uids and len(set(uids)) == 1 else None


def all_uids(pid: int, proc_root: str = PROC) -> tuple[int, ...] | None:
    """Real, effective, saved and filesystem uid of ``pid``; None when its status cannot be read."""
    text = _read_text(f"{proc_root}/{pid}/status")
    return None if text is None else parse_status_uids(text)


def listening_uids(port: int, proc_root: str = PROC) -> set[int] | None:
    """The users whose TCP sockets listen on ``port`` (``/proc/net/tcp`` and ``tcp6``: state ``0A``, the ``uid``
    column), or None when neither table can be read. Whose listener a loopback port is decides whether a secret may
    be sent there: any local user can listen on a free port."""
    found: set[int] = set()
    read = False
    for table in ("tcp", "tcp6"):
        text = _read_text(f"{proc_root}/net/{table}")
        if text is None:
            continue
        read = True
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 8 or fields[3] != "0A":
                continue
            try:
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
            except (IndexError, ValueError):
                continue
            if local_port == port and (uid := parse_count(fields[7])) is not None:
                found.add(uid)
    return found if read else None


def user_name(uid_value: int | None) -> str | None:
    """The login name of a uid, or the number itself where the container's passwd does not know it."""
    if uid_value is None:
        return None
    try:
        return pwd.getpwuid(uid_value).pw_name
    except (KeyError, OverflowError):
        return str(uid_value)


def user(pid: int, proc_root: str = PROC) -> str | None:
    return user_name(uid(pid, proc_root))


def container_uptime_s(proc_root: str = PROC) -> float | None:
    """How long pid 1 (the container's init) has run: ``/proc/uptime`` minus pid 1's start, both since boot."""
    text = _read_text(f"{proc_root}/uptime")
    since_boot = None if text is None else parse_uptime(text)
    init = read_stat(1, proc_root)
    if since_boot is None or init is None:
        return None
    return max(0.0, since_boot - init.starttime_ticks / clk_tck())


def list_pids(proc_root: str = PROC) -> list[int]:
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    return sorted(pid for pid in map(parse_count, names) if pid is not None)


def parents_map(proc_root: str = PROC) -> dict[int, int]:
    """pid → parent pid for every process readable now."""
    out: dict[int, int] = {}
    for pid in list_pids(proc_root):
        stat = read_stat(pid, proc_root)
        if stat is not None:
            out[pid] = stat.ppid
    return out


def children_map(proc_root: str = PROC, parents: dict[int, int] | None = None) -> dict[int, list[int]]:
    """parent pid → its child pids, from one pass over /proc (or from a ``parents`` map already read)."""
    out: dict[int, list[int]] = {}
    for pid, parent in (parents if parents is not None else parents_map(proc_root)).items():
        out.setdefault(parent, []).append(pid)
    return out


def descendants(roots: set[int] | list[int], children: dict[int, list[int]]) -> set[int]:
    """``roots`` and every process below them."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(children.get(pid, ()))
    return seen


def ancestors(pid: int, proc_root: str = PROC, parents: dict[int, int] | None = None) -> list[int]:
    """The parent chain of ``pid`` up to (and including) pid 1 or the first unreadable parent; nearest first."""
    chain: list[int] = []
    current = pid
    while len(chain) < 4096:
        parent = parents.get(current) if parents is not None else ppid(current, proc_root)
        if parent is None or parent <= 0 or parent in chain or parent == current:
            break
        chain.append(parent)
        current = parent
    return chain


def fd_entries(pid: int, proc_root: str = PROC) -> list[tuple[int, str]] | None:
    """(descriptor, readlink target) for what a process holds open; None when its fd directory cannot be read."""
    fd_dir = f"{proc_root}/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    entries = []
    for name in names:
        number = parse_count(name)
        if number is None:
            continue
        try:
            entries.append((number, os.readlink(f"{fd_dir}/{name}")))
        except OSError:  # closed between listing and reading
            continue
    return entries


def fd_paths(pid: int, proc_root: str = PROC) -> list[str] | None:
    """What a process holds open (readlink of each fd); None when its fd directory cannot be read at all."""
    entries = fd_entries(pid, proc_root)
    return None if entries is None else [path for _, path in entries]


def parse_fdinfo_writable(text: str) -> bool | None:
    """Whether ``/proc/<pid>/fdinfo/<fd>`` says the descriptor was opened for writing (its octal ``flags``)."""
    for line in text.splitlines():
        if line.startswith("flags:"):
            try:
                flags = int(line.split(":", 1)[1].strip(), 8)
            except ValueError:
                return None
            return flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
    return None


def output_file(pid: int, fd: int, proc_root: str = PROC) -> str | None:
    """The regular file a process's ``fd`` (1: stdout, 2: stderr) writes to (``cmd >> train.log 2>&1``), or None
    for a terminal, a pipe, a socket, a deleted file or one that cannot be read.

    Only a process of the user running rlwatch, and only a descriptor it opened for writing, names one: what is
    found here becomes where rlwatch appends the output of a process it starts again, and another user's process
    can hold any file open on its stdout (``1</proc/sys/kernel/domainname``, read-only) to choose that place."""
    if owner(pid, proc_root) != os.geteuid() or not fd_writable(pid, fd, proc_root):
        return None
    try:
        target = os.readlink(f"{proc_root}/{pid}/fd/{fd}")
    except OSError:
        return None
    if not target.startswith("/") or target.endswith(" (deleted)"):
        return None
    return target if os.path.isfile(target) else None


def fd_writable(pid: int, fd: int, proc_root: str = PROC) -> bool | None:
    """Whether a process's descriptor is open for writing; None when that cannot be read."""
    text = _read_text(f"{proc_root}/{pid}/fdinfo/{fd}")
    return None if text is None else parse_fdinfo_writable(text)


def fd_position(pid: int, fd: int, proc_root: str = PROC) -> int | None:
    """A descriptor's file position (``pos`` of its fdinfo); None when it cannot be read. It moves only when this
    process writes (or seeks) through it, so two readings tell whether *this* process wrote a shared log."""
    text = _read_text(f"{proc_root}/{pid}/fdinfo/{fd}")
    for line in (text or "").splitlines():
        if line.startswith("pos:"):
            try:
                return int(line.split(":", 1)[1].strip())
            except ValueError:
                return None
    return None


def exe_name(pid: int, proc_root: str = PROC) -> str | None:
    """The basename of the running executable (``/proc/<pid>/exe``), without a ``(deleted)`` suffix."""
    try:
        target = os.readlink(f"{proc_root}/{pid}/exe")
    except (OSError, ValueError):
        return None
    return Path(target.removesuffix(" (deleted)")).name or None


# Who a process is, for protecting daemons: used alike by the GPU-holder scan and the actions' guard.
COMM_LEN = 15  # the kernel keeps this many characters of a process name (TASK_COMM_LEN - 1)


def _basename(path: str) -> str:
    return PurePosixPath(path.removesuffix(" (deleted)")).name


def daemon_names(exe: str | None, comm: str | None, cmdline: Sequence[str]) -> tuple[str, ...]:
    """Every name a daemon may be known by: ``python /usr/bin/dcgm-exporter`` is still dcgm-exporter."""
    names: list[str] = []
    if exe:
        names.append(_basename(exe))
    if comm:
        names.append(comm)
    if cmdline:
        names.append(_basename(cmdline[0]))
        interpreter = _basename(cmdline[0])
        if interpreter.startswith(("python", "bash", "sh", "perl", "ruby", "node")):
            script = next((a for a in cmdline[1:] if not a.startswith("-")), None)
            if script:
                names.append(_basename(script))
    return tuple(dict.fromkeys(n for n in names if n))


def daemon_name(names: Collection[str], protected_names: Collection[str]) -> str | None:
    """The protected name a process goes by, comparing the kernel's truncated comm too."""
    for protected in protected_names:
        if not protected:
            continue
        for name in names:
            if name == protected or (len(name) == COMM_LEN and protected[:COMM_LEN] == name):
                return protected
    return None
