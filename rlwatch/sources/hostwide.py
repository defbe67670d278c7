"""The root half of privilege separation: what only root may read of the host, handed over as data.

When root runs rlwatch on a run directory another user controls, the process that watches the run works as that
user (:mod:`rlwatch.discover.privsep`): it reads the run's files, writes its ``.rlwatch/``, samples its stacks and
signals its processes with that user's rights and no more, so nothing planted in the directory can make root read,
write or signal what its owner could not. Two things on a host are not the owner's to read and still matter to
every run on it:

- the kernel log (``/dev/kmsg``, ``journalctl -k``, ``dmesg``): where ``kernel.dmesg_restrict`` is set only root
  reads it, and it is where a GPU that fell off the bus (Xid 79) or the OOM killer shows;
- the GPU device nodes other users' processes hold (``/proc/PID/fd`` of another user is root's to read): a stray of
  another user that keeps a GPU busy is what makes the next server fail with "device busy".

So the process rlwatch was started as keeps root's rights and serves exactly those two readings over a socket pair,
while the child it forked drops them and does all the watching, as OpenSSH's privileged monitor serves its
unprivileged child. The protocol is built so that the unprivileged side (which the run's owner could, in the worst
case, take over) can ask nothing else of root:

- a request is one word from a fixed list, with no argument: no path, no pid, no pattern crosses over;
- the kernel reader is root's own choice (the first of ``/dev/kmsg``, ``journalctl -k``, ``dmesg`` that works) and
  only lines that carry one of the kernel messages rlwatch reads (OOM kills, NVIDIA's ``NVRM`` lines, segfaults,
  bus errors) go back, never the rest of the log;
- the holder scan looks at the NVIDIA device nodes only (``/dev/nvidia*``, not a configured glob) and answers pid →
  device nodes, nothing of the processes' other files;
- every answer is one bounded JSON line; root stops serving when its peer closes the socket or dies.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from rlwatch.sources.holders import scan_holders
from rlwatch.sources.kernel import KMSG_RECORDS_PER_SAMPLE, CommandReader, KmsgReader, LiveUnavailable, worth_reading

__all__ = ["HostWide", "HostWideReader", "current", "install_helper", "serve"]

NVIDIA_NODES = "/dev/nvidia*"  # the only device glob the helper scans, whatever a configuration says
MAX_ANSWER = 8 * 1024 * 1024  # an answer longer than this is not one the helper wrote
ANSWER_TIMEOUT_S = 30.0  # journalctl on a busy host may take a while; the helper's own readers time out at 5 s
VERBS = ("kernel-open", "kernel-read", "holders")

_current: HostWide | None = None


def current() -> HostWide | None:
    """The helper this process hands host-wide reads to, once it has dropped root's rights; None otherwise."""
    return _current


def install_helper(client: HostWide | None) -> None:
    """Set (or clear) the process's helper: done once, at start-up, by the code that dropped the rights."""
    global _current
    _current = client


class HelperGone(Exception):
    """The helper did not answer (it ended, or took longer than :data:`ANSWER_TIMEOUT_S`): one line saying so."""


# ------------------------------------------------------------------------------------------------ the root side
def _kernel_readers(timeout_s: float) -> list[KmsgReader | CommandReader]:
    return [
        KmsgReader(),
        CommandReader("journalctl", ["journalctl", "-k", "-o", "short-iso", "--no-pager", "-q"], timeout_s),
        CommandReader("dmesg", ["dmesg"], timeout_s),
    ]


class _Server:
    """The helper's state: the kernel reader it opened, and nothing else."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._reader: KmsgReader | CommandReader | None = None

    def answer(self, verb: str) -> dict[str, object]:
        if verb == "kernel-open":
            return self._kernel_open()
        if verb == "kernel-read":
            return self._kernel_read()
        if verb == "holders":
            scan = scan_holders(NVIDIA_NODES)
            return {"holders": {str(pid): list(devices) for pid, devices in scan.holders.items()}}
        return {"error": "unknown request"}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _kernel_open(self) -> dict[str, object]:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        reasons = []
        for reader in _kernel_readers(self._timeout_s):
            try:
                reader.open()
            except LiveUnavailable as exc:
                reasons.append(str(exc))
                continue
            self._reader = reader
            return {"name": reader.name}
        return {"error": "; ".join(reasons) or "no kernel log reader"}

    def _kernel_read(self) -> dict[str, object]:
        if self._reader is None:
            return {"error": "no kernel log reader is open"}
        try:
            lines = self._reader.read(KMSG_RECORDS_PER_SAMPLE)
        except LiveUnavailable as exc:
            self._reader.close()
            self._reader = None
            return {"error": str(exc)}
        return {"lines": [line for line in lines if worth_reading(line)]}


def serve(sock: socket.socket, *, timeout_s: float = 5.0) -> None:
    """Answer each request on ``sock`` until the peer closes it (it ended), in the process that kept root's rights.

    Nothing else happens here: no output, no file of the run, nothing the peer names beyond the verb."""
    server = _Server(timeout_s)
    reader = sock.makefile("rb")
    while True:
        try:
            line = reader.readline(64)
        except OSError:
            break
        if not line:
            break
        verb = line.strip().decode("ascii", "replace")
        try:
            body = server.answer(verb) if verb in VERBS else {"error": "unknown request"}
        except Exception as exc:  # a reading that fails is an answer, never the helper's end
            body = {"error": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(body).encode()
        if len(data) > MAX_ANSWER:
            data = json.dumps({"error": "answer too large"}).encode()
        try:
            sock.sendall(data + b"\n")
        except OSError:
            break
    server.close()


# ------------------------------------------------------------------------------------------- the watcher's side
@dataclass
class HostWide:
    """The unprivileged side's handle on the helper: one request at a time, each answer bounded and timed."""

    sock: socket.socket
    pid: int  # root's side (the watcher's parent): said in the report
    user: str  # whose rights this process now works with, for the report to say

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._reader = self.sock.makefile("rb")
        self.sock.settimeout(ANSWER_TIMEOUT_S)

    def ask(self, verb: str) -> dict[str, object]:
        if verb not in VERBS:
            raise ValueError(f"not a request the helper answers: {verb}")
        with self._lock:
            try:
                self.sock.sendall(verb.encode() + b"\n")
                line = self._reader.readline(MAX_ANSWER + 1)
            except OSError as exc:
                raise HelperGone(f"root's helper (pid {self.pid}) did not answer: {exc.strerror or exc}") from None
        if not line.endswith(b"\n"):
            raise HelperGone(f"root's helper (pid {self.pid}) has ended")
        try:
            body = json.loads(line)
        except ValueError:
            raise HelperGone(f"root's helper (pid {self.pid}) answered garbage") from None
        if not isinstance(body, dict):
            raise HelperGone(f"root's helper (pid {self.pid}) answered garbage")
        return body

    def holders(self) -> dict[int, tuple[str, ...]] | None:
        """pid → the NVIDIA device nodes it holds, over every process of the host; None when the helper is gone."""
        try:
            body = self.ask("holders")
        except HelperGone:
            return None
        raw = body.get("holders")
        if not isinstance(raw, dict):
            return None
        out: dict[int, tuple[str, ...]] = {}
        for pid, devices in raw.items():
            if str(pid).isdigit() and isinstance(devices, list):
                out[int(pid)] = tuple(str(d) for d in devices)
        return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._reader.close()  # the socket's file object holds the descriptor open too
            self.sock.close()


class HostWideReader:
    """A live kernel log reader (as :class:`~rlwatch.sources.kernel.KmsgReader`) whose lines root's helper reads.

    Its ``name`` is the reader the helper chose (``kmsg``, ``journalctl`` or ``dmesg``), since each prints its own
    line format and the parser reads it by that name."""

    def __init__(self, helper: HostWide) -> None:
        self._helper = helper
        self.name = "kmsg"

    def _answer(self, verb: str, key: str, missing: str) -> object:
        """The ``key`` of the helper's answer to ``verb``; :class:`LiveUnavailable` with its words when it has none."""
        try:
            body = self._helper.ask(verb)
        except HelperGone as exc:
            raise LiveUnavailable(str(exc)) from None
        if key not in body:
            raise LiveUnavailable(f"as root: {body.get('error') or missing}")
        return body[key]

    def open(self) -> None:
        self.name = str(self._answer("kernel-open", "name", "no kernel log reader"))

    def read(self, limit: int = KMSG_RECORDS_PER_SAMPLE) -> list[str]:
        lines = self._answer("kernel-read", "lines", "no answer")
        return [str(line) for line in lines[:limit]] if isinstance(lines, list) else []

    def close(self) -> None:
        return None


def readers(helper: HostWide) -> Sequence[HostWideReader]:
    """The kernel log readers of a process that handed them to root's helper."""
    return (HostWideReader(helper),)
