"""The kernel's word on the machine: OOM kills, NVIDIA Xid errors, GPUs fallen off the bus, segfaults, bus errors.

Many runs on rented pods die of the machine, not of their code, and the kernel log is where the machine says so.
It is read from the first of these that works (each tried again later when it fails):

1. ``/dev/kmsg``: non-blocking, from the ring's start; each record carries its own sequence number (so nothing is
   read twice) and a timestamp in microseconds since boot, turned into wall time with the boot time
   (``CLOCK_BOOTTIME``, as NVIDIA's DCGM does in ``dcgmlib/src/DcgmKmsgReader.cpp``). Containers usually may not
   open it (Docker's seccomp profile and ``kernel.dmesg_restrict``).
2. ``journalctl -k -o short-iso``: a subprocess with a timeout (argv list, never a shell), then only what follows
   its cursor.
3. ``dmesg``: the ring as text, relative timestamps.

Besides the live log, kernel logs saved beside the run (``dmesg*.log``, ``kern.log``, ``kernel.log`` by default) are
always read: a person who saved one there wants it judged, and a live ring may have lost what happened. They are read
as regular files only (no symbolic links, no FIFOs), from where the last read stopped.

The messages are parsed by :mod:`rlwatch.logs.foreign.kernel` (each quoted there from the source that prints
it); this module reads the log, its line prefixes, and keeps what they said.
"""

from __future__ import annotations

import datetime as dt
import errno
import math
import os
import re
import stat
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from rlwatch.common.clock import Clock, SystemClock
from rlwatch.common.state import GpuState, HostEvent, KernelLogState
from rlwatch.common.textsafe import clean_line
from rlwatch.common.trust import LinkRefused, open_followed
from rlwatch.logs.foreign import kernel as kernel_messages
from rlwatch.sources import one_line

KEEP_EVENTS = 500
SAVED_READ_LIMIT = 16 << 20  # a saved log's last 16 MiB are read at first; later only what was added
KMSG_RECORDS_PER_SAMPLE = 50_000
RETRY_S = 60.0  # a live source that failed is tried again after this long
COMMAND_EVERY_S = 30.0  # journalctl or dmesg is a process to start: read at most this often (/dev/kmsg every sample)


def worth_reading(line: str) -> bool:
    """Whether a kernel log line can carry a message rlwatch reads: the one test of which lines matter, used by the
    parser and by root's helper, which hands over these lines and never the rest of the log."""
    return any(lit in line for lit in kernel_messages.LITERALS)


# ---------------------------------------------------------------------------------------------- line prefixes
# /dev/kmsg: "PRIORITY,SEQ,TIMESTAMP_US,FLAGS[,…];MESSAGE" (Documentation/ABI/testing/dev-kmsg).
_KMSG = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
# dmesg's default: "[ 1843.308145] message" (seconds since boot).
_RELATIVE = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
# dmesg -T / --ctime: "[Sun Feb 23 16:24:18 2025] message" (local time).
_CTIME = re.compile(r"^\[([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(.*)$")
# journalctl -o short-iso: "2025-05-18T19:02:39+0000 host kernel: message" (also short-iso-precise).
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+\S+\s+kernel:\s?(.*)$")
# syslog / kern.log: "May 18 19:02:39 host kernel: [ 518.05] message" (no year; the host and the bracket are
# optional: journalctl's short format without a hostname, pasted, has neither).
_SYSLOG = re.compile(r"^([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)\s+(?:\S+\s+)?kernel:\s?(.*)$")
_KERNEL_TAG = re.compile(r"^kernel:\s?(.*)$")  # "kernel: NVRM: …" pasted without its date


def normalize_pci(text: str | None) -> str | None:
    """A PCI address as the kernel and NVML print it, in one form: "00000000:3B:00.0", "PCI:0000:3b:00" and
    "0000:3b:00.0" all become "0000:3b:00" (domain, bus, device; the function is always 0 for a GPU)."""
    if not text:
        return None
    parts = text.strip().lower().removeprefix("pci:").split(":")
    if len(parts) < 3:
        return None
    domain, bus, device = parts[-3], parts[-2], parts[-1].split(".")[0]
    try:
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Stamp:
    """A line's time as its prefix gives it: wall seconds, or seconds since boot, or neither."""

    wall: float | None = None
    since_boot: float | None = None


def split_kernel_prefix(line: str, *, year: int | None = None) -> tuple[Stamp, str, int | None]:
    """(time, message, kmsg sequence number) of one kernel log line in any of the formats above."""
    m = _KMSG.match(line)
    if m:
        return Stamp(since_boot=int(m.group(3)) / 1e6), m.group(4), int(m.group(2))
    m = _ISO.match(line)
    if m:
        text = m.group(1).replace(",", ".")
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            return Stamp(), m.group(2), None
        if when.tzinfo is None:
            when = when.astimezone()
        return Stamp(wall=when.timestamp()), _strip_relative(m.group(2)), None
    m = _SYSLOG.match(line)
    if m:
        return Stamp(wall=_syslog_time(m.group(1), year)), _strip_relative(m.group(2)), None
    m = _CTIME.match(line)
    if m:
        try:
            wall = dt.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
        except ValueError:
            wall = None
        return Stamp(wall=wall), m.group(2), None
    m = _RELATIVE.match(line)
    if m:
        return Stamp(since_boot=float(m.group(1))), m.group(2), None
    m = _KERNEL_TAG.match(line)
    if m:
        return Stamp(), _strip_relative(m.group(1)), None
    return Stamp(), line.strip(), None


def _strip_relative(message: str) -> str:
    m = _RELATIVE.match(message)
    return m.group(2) if m else message


def _syslog_time(text: str, year: int | None) -> float | None:
    """A syslog date has no year: this year's, or last year's when that would put it in the future."""
    now = dt.datetime.now()
    try:
        when = dt.datetime.strptime(f"{year or now.year} {text}", "%Y %b %d %H:%M:%S")
    except ValueError:
        return None
    if year is None and when > now + dt.timedelta(days=1):
        when = when.replace(year=when.year - 1)
    return when.timestamp()


class LineParser:
    """Turns kernel log lines into :class:`HostEvent`s. Keeps the little state some messages need across lines:
    the OOM summary printed just before its kill line, the first line of a multi-line "fallen off the bus"."""

    def __init__(self, source: str, to_wall: Callable[[float], float | None]) -> None:
        self.source = source
        self._to_wall = to_wall
        self._summary: dict[int, str | None] = {}  # pid -> the memcg of its OOM summary (None: global OOM)
        self._bus_head: tuple[str, int] | None = None  # (pci, lines left) of "The NVIDIA GPU …"

    def feed(self, line: str, *, year: int | None = None) -> list[HostEvent]:
        if "\\x0a" in line:  # /dev/kmsg escapes a multi-line message's newlines: each piece has the record's time
            stamp, message, seq = split_kernel_prefix(line, year=year)
            out: list[HostEvent] = []
            for piece in message.split("\\x0a"):
                out.extend(self._message(stamp, piece, seq, line))
            return out
        if self._bus_head is None and not worth_reading(line):
            return []
        stamp, message, seq = split_kernel_prefix(line, year=year)
        return self._message(stamp, message, seq, line)

    def _when(self, stamp: Stamp) -> float | None:
        if stamp.wall is not None:
            return stamp.wall
        if stamp.since_boot is not None:
            return self._to_wall(stamp.since_boot)
        return None

    def _event(self, kind: str, stamp: Stamp, seq: int | None, text: str, **fields: Any) -> HostEvent:
        return HostEvent(
            kind=kind, time=self._when(stamp), text=clean_line(text)[:400], source=self.source, seq=seq, **fields
        )

    def _message(self, stamp: Stamp, message: str, seq: int | None, raw: str) -> list[HostEvent]:
        message = message.strip()
        head = self._bus_head
        if head is not None:
            pci, left = head
            if kernel_messages.BUS_LOST_TAIL in message:
                self._bus_head = None
                text = f"NVRM: The NVIDIA GPU {pci} has {kernel_messages.BUS_LOST_TAIL}"
                return [self._event("fallen_off_bus", stamp, seq, text, pci=normalize_pci(pci))]
            self._bus_head = (pci, left - 1) if left > 1 else None
        if "NVRM" in message:
            return self._nvrm(stamp, message, seq)
        if kill := kernel_messages.oom_kill(message):
            memcg = self._summary.pop(kill.pid, None)
            if memcg is None and kill.cgroup:
                memcg = "(a memory cgroup)"
            return [
                self._event(
                    "oom_kill",
                    stamp,
                    seq,
                    message,
                    pid=kill.pid,
                    process=kill.process,
                    rss_bytes=kill.rss_bytes,
                    memcg=memcg,
                )
            ]
        if "oom-kill:" in message:
            if summary := kernel_messages.oom_summary(message):
                self._summary[summary.pid] = summary.memcg
                if len(self._summary) > 64:
                    self._summary.pop(next(iter(self._summary)))
            return []
        if fault := kernel_messages.process_fault(message):
            return [self._event(fault.kind, stamp, seq, message, pid=fault.pid, process=fault.process)]
        return []

    def _nvrm(self, stamp: Stamp, message: str, seq: int | None) -> list[HostEvent]:
        if xid := kernel_messages.xid_report(message):
            return [
                self._event(
                    "xid",
                    stamp,
                    seq,
                    message,
                    xid=xid.xid,
                    pci=normalize_pci(xid.pci),
                    pid=xid.pid,
                    process=xid.process,
                )
            ]
        if (pci := kernel_messages.bus_lost(message)) is not None:
            return [self._event("fallen_off_bus", stamp, seq, message, pci=normalize_pci(pci))]
        if (pci := kernel_messages.bus_lost_head(message)) is not None:
            self._bus_head = (pci, 4)
        return []


def with_gpus(state: KernelLogState, gpus: Sequence[GpuState]) -> KernelLogState:
    """The kernel's events with the NVML index of the GPU each names, matched by PCI address."""
    index = {normalize_pci(g.health.pci_bus_id): g.index for g in gpus if g.health is not None and g.health.pci_bus_id}
    index.pop(None, None)
    if not index or not any(e.pci for e in state.events):
        return state
    events = tuple(replace(e, gpu=index.get(e.pci, e.gpu)) if e.pci else e for e in state.events)
    return replace(state, events=events)


def boot_wall_time() -> float:
    """When this machine booted, in wall seconds: now less ``CLOCK_BOOTTIME``, as dmesg -T and DCGM compute it."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


# ------------------------------------------------------------------------------------------------------ readers
class LiveUnavailable(Exception):
    """A live kernel log that cannot be read here (permission, missing tool): the one-line reason."""


class LiveReader(Protocol):
    """A live kernel log: ``/dev/kmsg``, a command, or root's helper reading either for a process without the right.
    ``name`` says which, since each prints its own line format."""

    name: str

    def open(self) -> None: ...

    def read(self, limit: int = ...) -> list[str]: ...

    def close(self) -> None: ...


COMMANDS = ("journalctl", "dmesg")  # readers that run a program: asked at most every COMMAND_EVERY_S


class KmsgReader:
    """``/dev/kmsg``, kept open, non-blocking; each read returns one record. A regular file holding records (one per
    line) reads the same way, which is how it is tested."""

    name = "kmsg"

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self.path = path
        self._fd: int | None = None
        self._last_seq = -1
        self._partial = b""
        self.lost = 0  # records overwritten in the ring before they were read (EPIPE)

    def open(self) -> None:
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise LiveUnavailable(f"{self.path}: {exc.strerror or one_line(exc)}") from None

    def read(self, limit: int = KMSG_RECORDS_PER_SAMPLE) -> list[str]:
        if self._fd is None:
            self.open()
        fd = self._fd
        assert fd is not None
        out: list[str] = []
        while len(out) < limit:
            try:
                data = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten before we read it; the next read goes on from the oldest
                    self.lost += 1
                    continue
                if exc.errno == errno.EINTR:
                    continue
                self.close()
                raise LiveUnavailable(f"{self.path}: {exc.strerror or one_line(exc)}") from None
            if not data:
                break
            data, self._partial = self._partial + data, b""
            lines = data.split(b"\n")
            if not data.endswith(b"\n"):
                self._partial = lines.pop()
            for raw in lines:
                if not raw or raw[:1] == b" ":  # " KEY=value" dictionary lines follow a record
                    continue
                text = raw.decode("utf-8", "replace")
                m = _KMSG.match(text)
                if m is None:
                    continue
                seq = int(m.group(2))
                if seq <= self._last_seq:
                    continue
                self._last_seq = seq
                out.append(text)
        return out

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


class CommandReader:
    """``journalctl -k`` or ``dmesg``, run as a subprocess (argv list, never a shell) with a timeout."""

    def __init__(self, name: str, argv: Sequence[str], timeout_s: float) -> None:
        self.name = name
        self._argv = list(argv)
        self._timeout = timeout_s
        self._cursor: str | None = None  # journalctl: where the last read ended
        self._seen_until = -1.0  # dmesg: the last relative timestamp read
        self._seen_at_last: set[str] = set()  # dmesg: lines read at exactly that timestamp
        self._first: list[str] | None = None  # what the probe in open() read, handed out by the first read()

    def _run(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(
                argv, capture_output=True, timeout=self._timeout, check=False, stdin=subprocess.DEVNULL
            )
        except FileNotFoundError:
            raise LiveUnavailable(f"{argv[0]}: not installed") from None
        except subprocess.TimeoutExpired:
            raise LiveUnavailable(f"{argv[0]}: no answer within {self._timeout:g}s") from None
        except OSError as exc:
            raise LiveUnavailable(f"{argv[0]}: {one_line(exc)}") from None
        err = done.stderr.decode("utf-8", "replace").strip()
        out = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            raise LiveUnavailable(f"{argv[0]}: {err.splitlines()[0] if err else f'exit status {done.returncode}'}")
        if not out.strip() and err:
            raise LiveUnavailable(f"{argv[0]}: {err.splitlines()[0]}")
        return out

    def open(self) -> None:
        """Run it once: it works here, or says why not. What it read is kept for the first :meth:`read`."""
        self._first = self.read()

    def read(self, limit: int = KMSG_RECORDS_PER_SAMPLE) -> list[str]:
        first, self._first = self._first, None
        if first is not None:
            return first
        if self.name == "journalctl":
            return self._journal(limit)
        return self._dmesg()

    def _journal(self, limit: int) -> list[str]:
        argv = [*self._argv, "--show-cursor"]
        argv += ["--after-cursor", self._cursor] if self._cursor else ["-n", str(limit)]
        lines = []
        for line in self._run(argv).splitlines():
            if line.startswith("-- cursor: "):
                self._cursor = line[len("-- cursor: ") :].strip()
            elif line and not line.startswith("-- "):
                lines.append(line)
        return lines

    def _dmesg(self) -> list[str]:
        lines = []
        newest = self._seen_until
        at_newest: set[str] = set()
        for line in self._run(self._argv).splitlines():
            m = _RELATIVE.match(line)
            ts = float(m.group(1)) if m else None
            if ts is not None:
                if ts < self._seen_until or (ts == self._seen_until and line in self._seen_at_last):
                    continue
                if ts > newest:
                    newest, at_newest = ts, set()
                if ts == newest:
                    at_newest.add(line)
            lines.append(line)
        if newest > self._seen_until:
            self._seen_until, self._seen_at_last = newest, at_newest
        else:
            self._seen_at_last |= at_newest
        return lines

    def close(self) -> None:
        return None


@dataclass
class _Saved:
    key: tuple[int, int]  # (device, inode)
    offset: int
    parser: LineParser
    partial: bytes = b""


class KernelLog:
    """The kernel log source: one live reader (the first that works), saved logs in the run directory, and the
    events they said, bounded. :meth:`sample` never raises."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        mode: str = "auto",
        patterns: Iterable[str] = ("dmesg*.log", "kern.log", "kernel.log"),
        timeout_s: float = 5.0,
        clock: Clock | None = None,
        boot_time: Callable[[], float] = boot_wall_time,
        live: Sequence[LiveReader] | None = None,
        retry_s: float = RETRY_S,
        command_every_s: float = COMMAND_EVERY_S,
    ) -> None:
        self._run_dir = Path(run_dir)
        self._mode = mode
        self._patterns = tuple(patterns)
        self._clock: Clock = clock or SystemClock()
        self._boot_time = boot_time
        self._retry_s = retry_s
        self._command_every_s = command_every_s
        self._next_command = -math.inf
        if live is None:
            live = (
                KmsgReader(),
                CommandReader("journalctl", ["journalctl", "-k", "-o", "short-iso", "--no-pager", "-q"], timeout_s),
                CommandReader("dmesg", ["dmesg"], timeout_s),
            )
        self._live = list(live) if mode == "auto" else []
        self._reader: LiveReader | None = None
        self._parser: LineParser | None = None
        self._live_error: str | None = None if self._live else ("off" if mode == "off" else None)
        self._retry_at = -1.0
        self._saved: dict[str, _Saved] = {}
        self._events: deque[HostEvent] = deque(maxlen=KEEP_EVENTS)
        self._file_errors: dict[str, str] = {}

    # -------------------------------------------------------------------------------------------- live
    def _to_wall(self, since_boot: float) -> float | None:
        try:
            return self._boot_time() + since_boot
        except OSError:
            return None

    def _open_live(self) -> None:
        now = self._clock.monotonic()
        if self._reader is not None or not self._live or now < self._retry_at:
            return
        reasons = []
        for reader in self._live:
            try:
                reader.open()
            except LiveUnavailable as exc:
                reasons.append(str(exc))
                continue
            self._reader, self._live_error = reader, None
            self._parser = LineParser(reader.name, self._to_wall)
            return
        self._live_error = (
            "; ".join(reasons) or "no kernel log reader"
        ) + " (on the host, `dmesg > dmesg.log` in the run directory hands it over)"
        self._retry_at = now + self._retry_s

    def _read_live(self) -> None:
        self._open_live()
        reader, parser = self._reader, self._parser
        if reader is None or parser is None:
            return
        if reader.name in COMMANDS:
            now = self._clock.monotonic()
            if now < self._next_command:
                return
            self._next_command = now + self._command_every_s
        try:
            lines = reader.read()
        except LiveUnavailable as exc:
            reader.close()
            self._reader = self._parser = None
            self._live_error = str(exc)
            self._retry_at = self._clock.monotonic() + self._retry_s
            return
        for line in lines:
            self._add(parser.feed(line))

    # ------------------------------------------------------------------------------------------- saved
    def _saved_paths(self) -> list[Path]:
        found: dict[str, Path] = {}
        for pattern in self._patterns:
            try:
                for path in sorted(self._run_dir.glob(pattern)):
                    found.setdefault(str(path), path)
            except (OSError, ValueError):
                continue
        return list(found.values())

    def _read_saved(self) -> None:
        paths = self._saved_paths()
        for path in paths:
            error = self._read_one(path)
            if error is None:
                self._file_errors.pop(str(path), None)
            else:
                self._file_errors[str(path)] = error

    def _read_one(self, path: Path) -> str | None:
        """Read what was added to one saved log: a regular file, opened without following a link."""
        try:
            # Not through a link at its name; through a directory link only to what that link's owner could read.
            fd = open_followed(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except LinkRefused as exc:
            return exc.strerror or one_line(exc)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "a symbolic link: not read"
            return exc.strerror or one_line(exc)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return "not a regular file: not read"
            key = (st.st_dev, st.st_ino)
            name = str(path)
            state = self._saved.get(name)
            if state is None or state.key != key or st.st_size < state.offset:
                if state is not None:  # replaced or truncated: what it said before is gone with it
                    self._events = deque((e for e in self._events if e.source != name), maxlen=KEEP_EVENTS)
                start = max(0, st.st_size - SAVED_READ_LIMIT)
                state = _Saved(key, start, LineParser(name, self._saved_wall(st.st_mtime)))
                self._saved[name] = state
            if st.st_size == state.offset:
                return None
            os.lseek(fd, state.offset, os.SEEK_SET)
            data = os.read(fd, min(st.st_size - state.offset, SAVED_READ_LIMIT))
        except OSError as exc:
            return exc.strerror or one_line(exc)
        finally:
            os.close(fd)
        state.offset += len(data)
        data = state.partial + data
        lines = data.split(b"\n")
        state.partial = lines.pop()  # an unfinished last line waits for its end
        year = dt.datetime.fromtimestamp(st.st_mtime).year
        for raw in lines:
            self._add(state.parser.feed(raw.decode("utf-8", "replace").rstrip("\r"), year=year))
        return None

    def _saved_wall(self, mtime: float) -> Callable[[float], float | None]:
        """Seconds since boot in a saved log are wall times only if the log was written during this boot and the
        stamp is no later than when it was written; a log saved on an earlier boot gives no time."""

        def to_wall(since_boot: float) -> float | None:
            try:
                boot = self._boot_time()
            except OSError:
                return None
            if mtime < boot or since_boot > mtime - boot + 1.0:
                return None
            return boot + since_boot

        return to_wall

    # -------------------------------------------------------------------------------------------- both
    def _add(self, events: Iterable[HostEvent]) -> None:
        for event in events:
            if self._duplicate(event):
                continue
            self._events.append(event)

    def _duplicate(self, event: HostEvent) -> bool:
        """The same message already kept: the live ring and a saved copy of it, or an OOM kill told twice."""
        for kept in reversed(self._events):
            if kept.kind != event.kind or kept.text != event.text:
                continue
            if kept.time is None or event.time is None or abs(kept.time - event.time) <= 2.0:
                if kept.time is None and event.time is not None:  # the live copy knows the time: keep it
                    self._events = deque(
                        (e if e is not kept else replace(e, time=event.time) for e in self._events), maxlen=KEEP_EVENTS
                    )
                return True
        return False

    def sample(self) -> KernelLogState:
        try:
            if self._mode != "off":
                self._read_live()
                self._read_saved()
        except Exception as exc:  # a source never raises into the engine
            return KernelLogState(
                source="none", available=False, error=f"kernel log: {one_line(exc)}", events=tuple(self._events)
            )
        files = tuple(p for p in self._saved if p not in self._file_errors)
        source = self._reader.name if self._reader is not None else ("files" if files else "none")
        errors = [self._live_error] if self._live_error and self._mode == "auto" else []
        errors += [f"{p}: {why}" for p, why in sorted(self._file_errors.items())]
        available = self._reader is not None or bool(files)
        return KernelLogState(
            source=source,
            available=available,
            error="; ".join(errors) or None,
            events=tuple(self._events),
            files=files,
        )

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
