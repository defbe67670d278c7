"""NCCL's RAS service: a job-wide view of the ranks, asked on suspicion only.

Every process that uses NCCL 2.24 or later runs a RAS thread; together they keep a network of the job's processes,
and any of them answers a plain text protocol on ``localhost:28028`` (``NCCL_RAS_ADDR`` moves it): ``STATUS`` says,
for every communicator, each rank's count of launched operations per collective type, the ranks that did not answer
and the processes it considers dead. That is the one place on a host that knows where the ranks of *other* hosts
stand: "Rank 1 has launched up to operation 10 -- GPU 0 managed by process 659 on node 10.0.0.2" names the rank
this host's ranks wait for, wherever it runs.

Asking it is not free, and not always safe. It starts a collective over the job's RAS network, and on some NCCL
versions a query crashes the job (:data:`CRASHING`, each with the thread that shows it). So it is asked only on
suspicion (a declared hang, an NCCL timeout logged, a rank standing still for long: see engine/job), with a short
timeout, never when the ranks' NCCL version is on that list or cannot be read, and only when the port is served by
the run's own user or root (any local user can listen on a port NCCL left free, and answer with ranks of its own
making). Since NCCL 2.28.7 it answers in JSON (``SET FORMAT json``); older versions answer in text, parsed here from
the words NCCL's ``src/ras/client_support.cc`` prints. Every failure is a one-line reason on the
:class:`~rlwatch.common.state.RasState`, never an exception into the engine.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlwatch.common.state import RasRank, RasState
from rlwatch.sources import procfs

__all__ = [
    "CRASHING",
    "JSON_SINCE",
    "RAS_PORT",
    "RasAnswer",
    "RasAsker",
    "RasComm",
    "ask_ras",
    "nccl_version_from_maps",
    "nccl_version_in_text",
    "parse_answer",
    "parse_json",
    "parse_text",
    "query_ras",
    "ras_address",
    "to_state",
    "versions",
]

RAS_PORT = 28028
# NCCL versions on which a RAS query has crashed jobs, with the thread that shows it: never asked there.
CRASHING: dict[str, str] = {
    "2.26.2": "NVIDIA/nccl#1669",  # a query during initialisation crashes the process
    "2.26.5": "NVIDIA/nccl#1718",  # polling STATUS races and crashes ranks
    "2.27.3": "NVIDIA/nccl#1762",  # VERBOSE STATUS corrupts memory on 128-GPU jobs
    "2.27.7": "NVIDIA/nccl#1996",  # segmentation fault in rasMsgHandlePeersUpdate
}
JSON_SINCE = (2, 28, 7)  # SET FORMAT json
MAX_ANSWER = 8 * 1024 * 1024  # a STATUS of a very large job is well under this
TIMEOUT_S = 4.0  # the whole exchange; RAS's own collective is given a little less (its TIMEOUT command)

_VERSION = re.compile(r"NCCL version (\d+)\.(\d+)\.(\d+)")
_LIB_VERSION = re.compile(r"libnccl\.so\.(\d+)\.(\d+)\.(\d+)$")
_WHEEL = re.compile(r"nvidia_nccl_cu\d+-(\d+)\.(\d+)\.(\d+)[^/]*\.dist-info$")


def _vtuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".")[:3] if x.isdigit())


def nccl_version_in_text(lines: Iterable[str]) -> str | None:
    """The NCCL version a log names: NCCL's own ``NCCL INFO NCCL version 2.21.5+cuda12.4`` at start (with
    ``NCCL_DEBUG=INFO``), or torch's ``…, NCCL version 2.28.9`` in an NCCL error. The last one named wins."""
    found = None
    for line in lines:
        if "NCCL version" in line:
            for m in _VERSION.finditer(line):
                found = ".".join(m.groups())
    return found


def _wheel_version(lib: str, root: str) -> str | None:
    """pip's ``nvidia-nccl-cu12`` installs ``…/site-packages/nvidia/nccl/lib/libnccl.so.2``: a name with no
    version. Its version is its distribution's, in the ``nvidia_nccl_cu12-2.21.5.dist-info`` beside ``nvidia/``."""
    marker = "/nvidia/nccl/lib/"
    if marker not in lib:
        return None
    site = lib[: lib.index(marker)]
    try:
        names = os.listdir(root + site)
    except OSError:
        return None
    versions = {".".join(m.groups()) for n in names if (m := _WHEEL.match(n))}
    return versions.pop() if len(versions) == 1 else None


def nccl_version_from_maps(pid: int, proc_root: str = procfs.PROC) -> str | None:
    """The version of the libnccl a process has mapped (``/proc/PID/maps``): from the file's name
    (``libnccl.so.2.28.9``), else from the pip wheel that installed it. None when it maps none, or it cannot be
    told (a torch linked with NCCL statically)."""
    try:
        with open(f"{proc_root}/{pid}/maps", encoding="utf-8", errors="replace") as f:
            text = f.read(4 * 1024 * 1024)
    except OSError:
        return None
    libs = {line.split(None, 5)[5] for line in text.splitlines() if "libnccl" in line and len(line.split(None, 5)) == 6}
    for mapped in sorted(libs):
        lib = mapped.removesuffix(" (deleted)")
        m = _LIB_VERSION.search(lib)
        if m:
            return ".".join(m.groups())
        # The path is the process's own: read through its root, so a rank in another mount namespace is read right.
        found = _wheel_version(lib, f"{proc_root}/{pid}/root") or _wheel_version(lib, "")
        if found:
            return found
    return None


def ras_address(environs: Iterable[Mapping[str, str]]) -> tuple[str, int] | str:
    """(host, port) to ask, from ``NCCL_RAS_ADDR`` in the ranks' environment (else ``localhost:28028``), or why not
    (RAS switched off, an address that is not this host's loopback), in one line."""
    addr = None
    for env in environs:
        if env.get("NCCL_RAS_ENABLE", "").strip() == "0":
            return "the ranks set NCCL_RAS_ENABLE=0: RAS is off"
        addr = addr or env.get("NCCL_RAS_ADDR", "").strip() or None
    if addr is None:
        return ("127.0.0.1", RAS_PORT)
    host, _, port_text = addr.rpartition(":")
    host = host.strip("[]")
    port = procfs.parse_count(port_text)
    if not host or port is None or not 0 < port < 65536:
        return f"NCCL_RAS_ADDR={addr[:80]} is not HOST:PORT"
    if host in ("0.0.0.0", "::"):  # noqa: S104 -- NCCL listens on every address, its loopback too: asked there
        return ("::1" if host == "::" else "127.0.0.1", port)
    if host == "localhost":
        return ("127.0.0.1", port)
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return f"NCCL_RAS_ADDR={addr[:80]} is not a loopback address: only this host's loopback is asked"
    return (host, port)


def query_ras(host: str, port: int, *, as_json: bool, timeout_s: float = TIMEOUT_S) -> tuple[str | None, str | None]:
    """One STATUS exchange: (the answer's text, None) or (None, why not, one line). The service closes the
    connection once it has answered; the whole exchange ends by ``timeout_s`` whatever it sends."""
    deadline = time.monotonic() + timeout_s
    lines = ["CLIENT PROTOCOL 2", f"TIMEOUT {max(0.5, timeout_s - 1.0):g}"]
    if as_json:
        lines.append("SET FORMAT json")
    lines.append("STATUS")
    chunks: list[bytes] = []
    size = 0
    try:
        with socket.create_connection((host, port), timeout=min(1.0, timeout_s)) as s:
            s.sendall(("\n".join(lines) + "\n").encode())
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, f"no whole answer within {timeout_s:g} s"
                s.settimeout(left)
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
                size += len(b)
                if size > MAX_ANSWER:
                    return None, f"an answer over {MAX_ANSWER} bytes: not RAS's"
    except ConnectionRefusedError:
        return None, f"nothing listens on {host}:{port} (RAS off, or the ranks are gone)"
    except TimeoutError:
        return None, f"no whole answer within {timeout_s:g} s"
    except OSError as e:
        return None, f"{host}:{port}: {e.strerror or e}"
    return b"".join(chunks).decode("utf-8", "replace"), None


# ------------------------------------------------------------------------------------------------------ parsing
@dataclass(slots=True)
class RasComm:
    """One communicator as RAS reports it: each rank's launched operations per collective type, where it runs, and
    the ranks it did not hear from."""

    ident: str  # "#0-0 (9de14377ab6cf128)" in text, "0x9de14377ab6cf128" in JSON
    size: int | None = None
    problems: list[str] = field(default_factory=list)  # "MISMATCH", "ERROR", "INCOMPLETE"
    counts: dict[str, dict[int, int]] = field(default_factory=dict)  # op -> rank -> operations launched
    unlisted: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # op -> (ranks, count) not named
    where: dict[int, tuple[str | None, int | None, int | None]] = field(default_factory=dict)  # node, pid, GPU
    missing: dict[int, tuple[str | None, int | None, int | None]] = field(default_factory=dict)
    dead: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)  # the service's own words on what is wrong


@dataclass(slots=True)
class RasAnswer:
    version: str | None
    form: str  # "text" | "json"
    comms: list[RasComm] = field(default_factory=list)
    dead: set[tuple[str, int]] = field(default_factory=set)  # (node, pid) of processes RAS considers dead
    notes: list[str] = field(default_factory=list)


# ncclResult_t, as RAS's text names them (its JSON gives the number)
_NCCL_RESULTS = {
    1: "Unhandled CUDA error",
    2: "System error",
    3: "Internal error",
    4: "Invalid argument",
    5: "Invalid usage",
    6: "Remote error",
}
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s*$")
_BLOCK = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (MISMATCH|ERROR|INCOMPLETE)\s*$")
_WHERE = r"(?: -- (?:GPU (\S+) managed by process (\d+) on node (\S+)|\[process information not found\]))?"
_RANK_AT = re.compile(r"^\s+Rank (\d+) has launched up to operation (\d+)" + _WHERE)
_RANK_NONE = re.compile(r"^\s+Rank (\d+) has not launched any operations" + _WHERE)
_RANK_BARE = re.compile(r"^\s+Rank (\d+)" + _WHERE + r"\s*$")
_GROUP_AT = re.compile(r"^\s+(\d+) ranks have launched up to operation (\d+)")
_GROUP_NONE = re.compile(r"^\s+(\d+) ranks have not launched any operations")
_OP = re.compile(r"^\s+Communicator ranks have different (\w+) operation counts")
_PROCESS = re.compile(r"^\s+Process (\d+) on node (\S+) managing GPU")


def _gpu(text: str | None) -> int | None:
    return procfs.parse_count(text) if text else None


def parse_text(text: str) -> RasAnswer:
    """A text STATUS (any NCCL since 2.24), as :func:`query_ras` returns it."""
    lines = text.splitlines()
    answer = RasAnswer(nccl_version_in_text(lines[:4]), "text")
    sizes: dict[int, int] = {}
    comm: RasComm | None = None
    section = ""
    op: str | None = None
    group: tuple[int, int] | None = None  # (ranks, count) of the group line whose ranks follow
    for line in lines:
        stripped = line.strip()
        if stripped in ("Errors", "Warnings") or stripped.startswith("Job summary"):
            comm, section = None, stripped
            continue
        if stripped in ("INCOMPLETE", "DEAD", "TIMEOUT") and comm is None:
            section = stripped
            continue
        row = _ROW.match(line)
        if row and comm is None and not section.startswith(("Errors", "Warnings", "INCOMPLETE", "DEAD")):
            sizes[int(row.group(1))] = int(row.group(5))
            continue
        block = _BLOCK.match(stripped)
        if block:
            ident = f"#{block.group(1)}-{block.group(2)} ({block.group(3)})"
            comm = next((c for c in answer.comms if c.ident == ident), None)
            if comm is None:
                comm = RasComm(ident, sizes.get(int(block.group(1))))
                answer.comms.append(comm)
            comm.problems.append(block.group(4))
            section, op, group = block.group(4), None, None
            continue
        if not stripped:
            if comm is not None:
                comm, group = None, None
            continue
        if comm is None:
            proc = _PROCESS.match(line)
            if section == "DEAD" and proc:
                answer.dead.add((proc.group(2), int(proc.group(1))))
            elif section in ("INCOMPLETE", "DEAD", "TIMEOUT") and not proc:
                answer.notes.append(f"{section}: {stripped}")
            continue
        if (m := _OP.match(line)) is not None:
            op, group = m.group(1), None
            comm.notes.append(stripped)
            continue
        at = _RANK_AT.match(line) or _RANK_NONE.match(line)
        if at is not None:
            rank = int(at.group(1))
            count = int(at.group(2)) if at.re is _RANK_AT else 0
            rest = at.groups()[2:] if at.re is _RANK_AT else at.groups()[1:]
            if rest[2] is not None:
                comm.where[rank] = (rest[2], int(rest[1]), _gpu(rest[0]))
            if op is not None and section == "MISMATCH":
                comm.counts.setdefault(op, {})[rank] = count
            comm.notes.append(stripped)
            group = None
            continue
        g = _GROUP_AT.match(line) or _GROUP_NONE.match(line)
        if g is not None and op is not None:
            group = (int(g.group(1)), int(g.group(2)) if g.re is _GROUP_AT else 0)
            comm.unlisted.setdefault(op, []).append(group)
            comm.notes.append(stripped)
            continue
        bare = _RANK_BARE.match(line)
        if bare is not None:
            rank = int(bare.group(1))
            if bare.group(4) is not None:
                comm.where[rank] = (bare.group(4), int(bare.group(3)), _gpu(bare.group(2)))
            if section == "INCOMPLETE":
                comm.missing[rank] = comm.where.get(rank, (None, None, None))
            elif group is not None and op is not None:
                comm.counts.setdefault(op, {})[rank] = group[1]
                listed = comm.unlisted.get(op, [])
                if group in listed:  # its ranks are named one by one: no longer a group of unnamed ranks
                    listed.remove(group)
            continue
        comm.notes.append(stripped)
    if not answer.comms:  # nothing wrong: one communicator per group of the table, sized, with no problem
        answer.comms = [RasComm(f"#{g}", size) for g, size in sorted(sizes.items())]
    for c in answer.comms:
        for rank, (node, pid, _) in c.missing.items():
            if node is not None and pid is not None and (node, pid) in answer.dead:
                c.dead.add(rank)
    return answer


def parse_json(value: Any) -> RasAnswer:
    """A JSON STATUS (NCCL 2.28.7 and later): every rank of every communicator with its counts, and the missing
    ranks with whether RAS considers them dead."""
    if not isinstance(value, Mapping):
        raise ValueError("no JSON object at the top")
    version = value.get("nccl_version")
    answer = RasAnswer(str(version) if version is not None else None, "json")
    for raw in value.get("communicators") or ():
        if not isinstance(raw, Mapping):
            continue
        size = raw.get("size")
        comm = RasComm(str(raw.get("hash", "?"))[:40], size if isinstance(size, int) else None)
        for r in raw.get("ranks") or ():
            if not isinstance(r, Mapping) or not isinstance(r.get("rank"), int):
                continue
            rank = r["rank"]
            pid = r.get("pid")
            gpu = r.get("cuda_dev")
            host = r.get("host")
            comm.where[rank] = (
                str(host) if host is not None else None,
                pid if isinstance(pid, int) else None,
                gpu if isinstance(gpu, int) else None,
            )
            counts = r.get("collective_counts")
            for op, n in counts.items() if isinstance(counts, Mapping) else ():
                if isinstance(n, int):
                    comm.counts.setdefault(str(op), {})[rank] = n
            status = r.get("status")
            if isinstance(status, Mapping):
                err = status.get("async_error") or status.get("init_state")
                if isinstance(err, int) and err not in (0, 7):  # ncclSuccess, ncclInProgress
                    comm.notes.append(f"Rank {rank} reported {_NCCL_RESULTS.get(err, f'NCCL error {err}')}")
                    comm.problems.append("ERROR")
                if status.get("abort_flag") is True:
                    comm.notes.append(f"rank {rank} aborted its communicator")
        for r in raw.get("missing_ranks") or ():
            if not isinstance(r, Mapping) or not isinstance(r.get("rank"), int):
                continue
            host, pid, gpu = r.get("host"), r.get("pid"), r.get("cuda_dev")
            comm.missing[r["rank"]] = (
                str(host) if host is not None else None,
                pid if isinstance(pid, int) else None,
                gpu if isinstance(gpu, int) else None,
            )
            if r.get("dead") is True:
                comm.dead.add(r["rank"])
        if comm.missing:
            comm.problems.append("INCOMPLETE")
        for op, ranks in comm.counts.items():
            if len(set(ranks.values())) > 1:
                comm.notes.append(f"Communicator ranks have different {op} operation counts")
                if "MISMATCH" not in comm.problems:
                    comm.problems.append("MISMATCH")
        answer.comms.append(comm)
    footer = value.get("ras")
    if isinstance(footer, Mapping) and isinstance(footer.get("timeouts_count"), int) and footer["timeouts_count"]:
        answer.notes.append(f"TIMEOUT: {footer['timeouts_count']} communication timeouts while gathering data")
    return answer


def parse_answer(raw: str) -> RasAnswer:
    """Whatever the service answered: the protocol's own lines (``SERVER PROTOCOL 2``, ``OK``, an ``ERROR:`` for a
    command an older version does not know) are skipped, then JSON or text. Raises ``ValueError`` when it is
    neither."""
    lines = raw.splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith(("SERVER PROTOCOL", "ERROR:")) or lines[i].strip() in ("OK", "")):
        i += 1
    body = "\n".join(lines[i:])
    if body.lstrip().startswith("{"):
        return parse_json(json.loads(body))
    if not body.startswith("NCCL version"):
        raise ValueError(f"not a RAS status: {body[:60]!r}")
    return parse_text(body)


# ------------------------------------------------------------------------------------------------- the snapshot
def _problem_op(comm: RasComm) -> str | None:
    """The collective type whose counts differ (NCCL's order of types), else the one with the most operations."""
    for op, ranks in comm.counts.items():
        if len(set(ranks.values())) > 1 or comm.unlisted.get(op):
            return op
    busiest = [(max(r.values(), default=0), op) for op, r in comm.counts.items()]
    return max(busiest)[1] if busiest and max(busiest)[0] > 0 else None


def _pick(answer: RasAnswer, world_size: int | None) -> RasComm | None:
    """The communicator to speak of: one with a problem before one without, the job's whole world (whose ranks are
    the global ranks) before a subgroup, then the largest."""
    if not answer.comms:
        return None
    return max(
        answer.comms,
        key=lambda c: (bool(c.problems), world_size is not None and c.size == world_size, c.size or 0),
    )


def to_state(answer: RasAnswer, now: float, world_size: int | None = None, version: str | None = None) -> RasState:
    """The answer as the snapshot keeps it: the ranks of one communicator (see :func:`_pick`) with their count of
    the collective whose counts differ, where each runs, and which are missing or dead."""
    comm = _pick(answer, world_size)
    version = version or answer.version
    if comm is None:
        return RasState(now, version, None, summary="RAS knows no communicator")
    op = _problem_op(comm)
    counts = dict(comm.counts.get(op, {})) if op is not None else {}
    unnamed = comm.unlisted.get(op, []) if op is not None else []
    if len(unnamed) == 1 and comm.size is not None:
        # One group of ranks not named one by one (the majority, in a large job): every rank of the communicator
        # neither named nor missing is in it.
        for r in range(comm.size):
            if r not in counts and r not in comm.missing:
                counts[r] = unnamed[0][1]
    top = max(counts.values(), default=None)
    ranks: list[RasRank] = []
    for r in sorted(set(counts) | set(comm.where) | set(comm.missing)):
        node, pid, gpu = comm.missing.get(r) or comm.where.get(r) or (None, None, None)
        if r in comm.missing:
            status = "dead" if r in comm.dead else "missing"
        elif r in counts:
            status = "behind" if top is not None and counts[r] < top else "ok"
        else:
            continue
        ranks.append(RasRank(r, counts.get(r), node, pid, gpu, status))
    words = comm.notes + answer.notes
    if comm.size is not None and world_size is not None and comm.size != world_size:
        words.insert(0, f"a communicator of {comm.size} ranks (the job has {world_size}): its own rank numbers")
    summary = "; ".join(dict.fromkeys(words)) if words else None
    if summary is None and not comm.problems:
        summary = "every communicator runs, with equal operation counts"
    return RasState(
        now,
        version,
        None,
        tuple(ranks),
        op if op is not None and top is not None and any(x.status == "behind" for x in ranks) else None,
        summary[:600] if summary else None,
    )


def ask_ras(
    environs: Mapping[int, Mapping[str, str]],
    owners: Iterable[int],
    now: float,
    *,
    version: str | None,
    world_size: int | None = None,
    timeout_s: float = TIMEOUT_S,
    listeners: Any = procfs.listening_uids,
) -> RasState:
    """Ask the ranks' RAS service once, when it is safe to: ``environs`` (rank -> environment) say where it listens
    and whether it is on, ``owners`` are the run's users (with root, the only ones whose listener is asked),
    ``version`` is the NCCL version the ranks use (None: not known, and then it is not asked)."""
    if version is None:
        return RasState(
            now, None, "the ranks' NCCL version is not known: RAS not asked (a query crashes some versions)"
        )
    if version in CRASHING:
        return RasState(
            now, version, f"NCCL {version}: a RAS query crashes jobs there ({CRASHING[version]}): not asked"
        )
    if _vtuple(version) < (2, 24, 0):
        return RasState(now, version, f"NCCL {version} has no RAS service (2.24 and later)")
    where = ras_address(environs.values())
    if isinstance(where, str):
        return RasState(now, version, where)
    host, port = where
    served = listeners(port)
    allowed = set(owners) | {0}
    if served is None:
        return RasState(
            now, version, "the host's socket table cannot be read: whose port it is is not known: not asked"
        )
    if not served:
        return RasState(now, version, f"nothing listens on port {port} (RAS off, or the ranks are gone)")
    strangers = sorted(served - allowed)
    if strangers:
        return RasState(
            now, version, f"port {port} is served by uid {strangers[0]}, not by the run's user or root: not asked"
        )
    raw, err = query_ras(host, port, as_json=_vtuple(version) >= JSON_SINCE, timeout_s=timeout_s)
    if raw is None:
        return RasState(now, version, err)
    try:
        answer = parse_answer(raw)
    except (ValueError, RecursionError) as e:
        return RasState(now, version, f"an answer RAS does not give: {str(e)[:120]}")
    return to_state(answer, now, world_size, version)


def versions(pids: Sequence[int], log_lines: Iterable[str], proc_root: str = procfs.PROC) -> str | None:
    """The ranks' NCCL version: the library their processes map (what runs now), else what their logs name. Ranks
    that disagree leave it unknown."""
    mapped = {v for pid in pids if (v := nccl_version_from_maps(pid, proc_root)) is not None}
    if len(mapped) == 1:
        return mapped.pop()
    if mapped:
        return None
    return nccl_version_in_text(log_lines)


class RasAsker:
    """The service asked on suspicion, in a thread of its own (an answer may take its whole timeout, and the engine's
    rounds must not wait for it): once when a suspicion begins (``key`` changes), then at most every
    :data:`AGAIN_S` while it lasts, so a rank that catches up is seen; forgotten when the suspicion ends."""

    AGAIN_S = 60.0

    def __init__(self, proc_root: str = procfs.PROC, timeout_s: float = TIMEOUT_S) -> None:
        self._proc_root = proc_root
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._key: object = None
        self._asked: float | None = None  # monotonic time of the last question
        self._state: RasState | None = None

    @property
    def state(self) -> RasState | None:
        with self._lock:
            return self._state

    def poll(
        self,
        key: object,
        environs: Mapping[int, Mapping[str, str]],
        pids: Sequence[int],
        log_lines: Sequence[str],
        world_size: int | None,
        now: float,
        *,
        wait: bool = False,
    ) -> RasState | None:
        """The latest answer while ``key`` (what tells one suspicion from the next; None: nothing suspicious) holds,
        asking again when due; with ``wait``, the question is answered before this returns (a one-shot report)."""
        mono = time.monotonic()
        with self._lock:
            if key is None:
                self._key, self._asked, self._state = None, None, None
                return None
            busy = self._thread is not None and self._thread.is_alive()
            due = key != self._key or self._asked is None or mono - self._asked >= self.AGAIN_S
            if due and not busy and environs:
                if key != self._key:
                    self._state = None
                self._key, self._asked = key, mono
                owners = {u for pid in pids if (u := procfs.uid(pid, self._proc_root)) is not None}
                args = (key, dict(environs), tuple(pids), tuple(log_lines), owners, world_size, now)
                self._thread = threading.Thread(target=self._ask, args=args, name="rlwatch-nccl-ras", daemon=True)
                self._thread.start()
            thread = self._thread
        if wait and thread is not None:
            thread.join(self._timeout_s + 2.0)
        return self.state

    def _ask(
        self,
        key: object,
        environs: Mapping[int, Mapping[str, str]],
        pids: Sequence[int],
        log_lines: Sequence[str],
        owners: set[int],
        world_size: int | None,
        now: float,
    ) -> None:
        try:
            version = versions(pids, log_lines, self._proc_root)
            state = ask_ras(environs, owners, now, version=version, world_size=world_size, timeout_s=self._timeout_s)
        except Exception as e:  # a reader's bug must not end the engine's thread silently: said, one line
            state = RasState(now, None, f"asking RAS failed: {type(e).__name__}: {str(e)[:120]}")
        with self._lock:
            if self._key == key:  # a suspicion that ended while it was asked keeps no answer
                self._state = state
