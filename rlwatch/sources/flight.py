"""PyTorch's NCCL flight recorder: the dumps each rank writes of its last collectives, read safely, and the debug
pipe that asks a live rank for one.

``ProcessGroupNCCL`` keeps a ring of its recent collectives (``TORCH_NCCL_TRACE_BUFFER_SIZE`` entries; on by
default since about torch 2.6) and writes it on a timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``) or when a byte is written
to ``${TORCH_NCCL_DEBUG_INFO_PIPE_FILE}${rank}.pipe``, to ``${TORCH_FR_DUMP_TEMP_FILE}${rank}`` (the older name
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``; default ``/tmp/nccl_trace_rank_``). Each entry names the collective, its
sequence number in its process group, its input and output shapes, its state (scheduled, started, completed) and the
Python frames that called it; ``pg_status`` says each group's last enqueued, started and completed collective. That
is what ``torch.distributed.flight_recorder.fr_trace`` compares across ranks, and what this module hands to
:mod:`rlwatch.engine.diagnosis.collectives`.

The dump is a pickle, and the run's files are not trusted (any user can leave a file in ``/tmp``): it is read with an
unpickler that resolves **no** global at all — no class, no function, so nothing can run — and builds only dicts,
lists, tuples, strings, bytes, numbers, booleans and None; a file larger than :data:`MAX_DUMP_BYTES`, not a regular
file, reached through a link, or not owned by the run's user (or root) is not read. Each failure is a one-line
reason, never an exception into the engine.
"""

from __future__ import annotations

import io
import os
import pickle
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rlwatch.common.state import CollectiveOp, FlightState, RankProgress
from rlwatch.logs.collectives import op_name

__all__ = [
    "DEFAULT_PREFIX",
    "MAX_DUMP_BYTES",
    "FlightDump",
    "FlightReader",
    "NoGlobals",
    "dump_prefixes",
    "find_dumps",
    "load_dump",
    "parse_flight_dump",
    "read_flight_dump",
    "request_dumps",
]

DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"
# A dump of the default 2000 entries with their frames is a few MB; past this a file is not a dump we read.
MAX_DUMP_BYTES = 64 * 1024**2
_ENV_PREFIX = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
_ENV_PIPE = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "/torch/")
_MAX_TEXT = 240


class NoGlobals(pickle.Unpickler):
    """An unpickler that resolves no global: a pickle naming any class or function is refused, so reading one runs
    nothing of it. Only the plain containers and scalars the pickle protocol builds by itself come out."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module[:80]}.{name[:80]}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def load_dump(data: bytes) -> Any:
    """The pickle's plain value (dicts, lists, tuples, str, bytes, int, float, bool, None); raises
    ``pickle.UnpicklingError`` (or ``ValueError``, ``EOFError``…) for anything else."""
    return NoGlobals(io.BytesIO(data)).load()


@dataclass(frozen=True, slots=True)
class FlightDump:
    """One rank's flight record, as read."""

    path: str
    rank: int
    mtime: float
    ops: tuple[CollectiveOp, ...]  # its collectives, oldest first
    progress: tuple[RankProgress, ...]  # each process group's last enqueued / started / completed
    groups: dict[str, str]  # pg id -> its name ("default_pg")
    error: str | None = None  # why it could not be read (then ops and progress are empty)


def _text(value: object) -> str:
    s = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return s[:_MAX_TEXT]


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def _numel(sizes: object) -> int | None:
    """Elements over every tensor of an entry's shapes ([[4194304]], [[2, 3], [4]]): None when not shapes."""
    if not isinstance(sizes, (list, tuple)):
        return None
    total = 0
    for shape in sizes:
        if not isinstance(shape, (list, tuple)):
            return None
        n = 1
        for d in shape:
            d_int = _int(d)
            if d_int is None:
                return None
            n *= d_int
        total += n
    return total


def _frame(frames: object) -> str | None:
    """The innermost frame of the run's own code that called the collective: "main (train.py:31)"."""
    if not isinstance(frames, (list, tuple)):
        return None
    first = None
    for f in frames:
        if not isinstance(f, Mapping):
            continue
        name, filename, line = _text(f.get("name", "?")), _text(f.get("filename", "?")), f.get("line")
        text = f"{name} ({filename.rsplit('/', 1)[-1]}:{line})"
        first = first or text
        if not any(part in filename for part in _LIBRARY_PARTS):
            return text
    return first


def _pg_of(entry: Mapping[Any, Any]) -> str:
    pg = entry.get("pg_id")
    if _int(pg) is not None:
        return str(pg)
    group = entry.get("process_group")
    if isinstance(group, (list, tuple)) and group:
        return _text(group[0])
    return "0"


def parse_flight_dump(value: Any, path: str, rank: int, mtime: float) -> FlightDump:
    """The collectives and progress of one unpickled dump (``version`` 2.x: ``entries``, ``pg_status``,
    ``pg_config``); fields a version lacks are None, never guessed."""
    name = path.rsplit("/", 1)[-1]
    if not isinstance(value, Mapping):
        return FlightDump(path, rank, mtime, (), (), {}, f"{name}: not a flight recorder dump (no dict at its top)")
    groups: dict[str, str] = {}
    config = value.get("pg_config")
    if isinstance(config, Mapping):
        for pg, cfg in config.items():
            if isinstance(cfg, Mapping):
                groups[_text(pg)] = _text(cfg.get("desc") or cfg.get("name") or pg)
    ops: list[CollectiveOp] = []
    entries = value.get("entries")
    for i, entry in enumerate(entries if isinstance(entries, (list, tuple)) else ()):
        if not isinstance(entry, Mapping) or entry.get("is_p2p") is True:
            continue
        seq = _int(entry.get("collective_seq_id"))
        if seq is None or seq <= 0:
            continue  # a point-to-point op or a coalesced part: no collective number to compare
        sizes_in, sizes_out = entry.get("input_sizes"), entry.get("output_sizes")
        ops.append(
            CollectiveOp(
                rank,
                _pg_of(entry),
                seq,
                op_name(_text(entry.get("profiling_name", "?"))),
                _numel(sizes_in),
                _numel(sizes_out),
                f"{name} entry {_int(entry.get('record_id')) if _int(entry.get('record_id')) is not None else i}",
                state=_text(entry["state"]) if "state" in entry else None,
                sizes=_text(sizes_in) if sizes_in is not None else None,
                frame=_frame(entry.get("frames")),
                timeout_ms=_int(entry.get("timeout_ms")),
            )
        )
    progress: list[RankProgress] = []
    status = value.get("pg_status")
    if isinstance(status, Mapping):
        for pg, st in status.items():
            if isinstance(st, Mapping):
                progress.append(
                    RankProgress(
                        rank,
                        _text(pg),
                        _int(st.get("last_enqueued_collective")),
                        _int(st.get("last_completed_collective")),
                        f"{name} pg_status",
                        last_started=_int(st.get("last_started_collective")),
                    )
                )
    return FlightDump(path, rank, mtime, tuple(ops), tuple(progress), groups)


def read_flight_dump(path: str, rank: int, owners: Iterable[int] = (), max_bytes: int = MAX_DUMP_BYTES) -> FlightDump:
    """One dump file, read without following a link, only when it is a regular file of the run's user (``owners``;
    root's too) no larger than ``max_bytes``."""
    name = path.rsplit("/", 1)[-1]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return FlightDump(path, rank, 0.0, (), (), {}, f"{name}: {e.strerror or e}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return FlightDump(path, rank, st.st_mtime, (), (), {}, f"{name}: not a regular file")
        allowed = set(owners)
        if allowed and st.st_uid not in allowed | {0}:
            return FlightDump(path, rank, st.st_mtime, (), (), {}, f"{name}: owned by uid {st.st_uid}, not the run's")
        if st.st_size > max_bytes:
            return FlightDump(path, rank, st.st_mtime, (), (), {}, f"{name}: {st.st_size} bytes, larger than a dump")
        chunks, left = [], max_bytes + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
    except OSError as e:
        return FlightDump(path, rank, 0.0, (), (), {}, f"{name}: {e.strerror or e}")
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        return FlightDump(path, rank, st.st_mtime, (), (), {}, f"{name}: grew past {max_bytes} bytes while read")
    try:
        value = load_dump(data)
    except Exception as e:  # a pickle refused or cut: any of the unpickler's errors is a reason, never a crash
        return FlightDump(path, rank, st.st_mtime, (), (), {}, f"{name}: not read ({type(e).__name__}: {e})"[:300])
    return parse_flight_dump(value, path, rank, st.st_mtime)


def dump_prefixes(environs: Iterable[Mapping[str, str]]) -> tuple[str, ...]:
    """Where the ranks write their dumps: the prefix each rank's environment names, else PyTorch's default."""
    found: list[str] = []
    for env in environs:
        prefix = next((env[k] for k in _ENV_PREFIX if env.get(k)), DEFAULT_PREFIX)
        if prefix not in found:
            found.append(prefix)
    return tuple(found) or (DEFAULT_PREFIX,)


def find_dumps(
    prefixes: Iterable[str], owners: Iterable[int] = (), since: float | None = None, max_ranks: int = 4096
) -> tuple[FlightDump, ...]:
    """Every rank's dump under each prefix (``PREFIX<rank>``), written at or after ``since`` (the run's start: a dump
    an earlier run left in /tmp is not this run's)."""
    out: list[FlightDump] = []
    owners = tuple(owners)
    for prefix in prefixes:
        directory, _, stem = prefix.rpartition("/")
        try:
            names = os.listdir(directory or ".")
        except OSError:
            continue
        for entry in sorted(names)[: max_ranks * 4]:
            rest = entry[len(stem) :] if entry.startswith(stem) else ""
            if not rest.isdigit():
                continue
            path = os.path.join(directory, entry)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if since is not None and st.st_mtime < since:
                continue
            out.append(read_flight_dump(path, int(rest), owners))
            if len(out) >= max_ranks:
                return tuple(out)
    return tuple(out)


def request_dumps(environs: Mapping[int, Mapping[str, str]], owners: Iterable[int] = ()) -> dict[int, str]:
    """Ask each rank that set ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` for its flight record now, by writing one byte to
    its pipe (``PREFIX<rank>.pipe``), before NCCL's watchdog kills the run. Never blocks (a pipe nobody reads is
    refused at once) and never follows a link; only a FIFO of the run's user is written. Returns rank -> what
    happened, in words."""
    said: dict[int, str] = {}
    allowed = set(owners)
    for rank, env in environs.items():
        prefix = env.get(_ENV_PIPE)
        if not prefix:
            continue
        path = f"{prefix}{rank}.pipe"
        try:
            if not stat.S_ISFIFO(os.lstat(path).st_mode):  # a device or file is never opened for writing
                said[rank] = f"{path}: not a pipe"
                continue
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            said[rank] = f"{path}: {e.strerror or e}"
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISFIFO(st.st_mode):
                said[rank] = f"{path}: not a pipe"
            elif allowed and st.st_uid not in allowed | {0}:
                said[rank] = f"{path}: owned by uid {st.st_uid}, not the run's"
            else:
                os.write(fd, b"1")
                said[rank] = f"asked through {path}"
        except OSError as e:
            said[rank] = f"{path}: {e.strerror or e}"
        finally:
            os.close(fd)
    return said


class FlightReader:
    """The run's dumps, read on suspicion and again only when one of the files changed (a dump is a few MB and
    a run's ranks may be many), and each rank asked for its dump through its debug pipe once per hang."""

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._dumps: tuple[FlightDump, ...] = ()
        self._asked_for: object = None
        self._asked: tuple[str, ...] = ()

    def read(
        self,
        run_dir: str,
        environs: Mapping[int, Mapping[str, str]],
        since: float | None,
        now: float,
        *,
        hang: object = None,
    ) -> FlightState:
        """Every rank's dump written since the run started (``since``; None: the run's start is not known, and a
        dump from before it cannot be told from its own, so none is read), under the prefixes the ranks'
        environments name (``environs``: rank -> environment), else PyTorch's default, and in the run directory
        when it is an absolute path. With ``hang`` (what tells one hang from the next), each rank that set
        ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` is asked for its dump first, once per hang: the dumps then exist
        before NCCL's watchdog kills the run, and the next read finds them."""
        try:
            owners = {os.stat(run_dir).st_uid}
        except OSError:
            owners = set()
        if hang is not None and hang != self._asked_for and environs and owners:
            self._asked_for = hang
            said = request_dumps(environs, owners)
            self._asked = tuple(f"rank {r}: {text}" for r, text in sorted(said.items()))
        if since is None:
            return FlightState(read_at=now, asked=self._asked)
        prefixes = dump_prefixes(environs.values()) if environs else (DEFAULT_PREFIX,)
        if os.path.isabs(run_dir):  # the run directory's own dumps; never a path relative to where rlwatch runs
            prefixes = tuple(dict.fromkeys((*prefixes, os.path.join(run_dir, "nccl_trace_rank_"))))
        key: list[object] = [since]
        for prefix in prefixes:
            directory, _, stem = prefix.rpartition("/")
            try:
                names = sorted(
                    n for n in os.listdir(directory or ".") if n.startswith(stem) and n[len(stem) :].isdigit()
                )
            except OSError:
                continue
            for n in names[:4096]:
                try:
                    st = os.lstat(os.path.join(directory, n))
                except OSError:
                    continue
                key.append((directory, n, st.st_mtime_ns, st.st_size))
        if tuple(key) != self._key:
            self._key = tuple(key)
            self._dumps = find_dumps(prefixes, owners, since)
        good = [d for d in self._dumps if d.error is None]
        groups: dict[str, str] = {}
        for d in good:
            groups.update(d.groups)
        return FlightState(
            read_at=now,
            ops=tuple(o for d in good for o in d.ops),
            progress=tuple(p for d in good for p in d.progress),
            groups=tuple(sorted(groups.items())),
            ranks=tuple(sorted({d.rank for d in good})),
            errors=tuple(d.error for d in self._dumps if d.error),
            asked=self._asked,
        )
