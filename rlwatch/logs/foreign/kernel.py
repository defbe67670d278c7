"""The kernel's and NVIDIA's driver's reports, each parsed here once: the kernel log source turns them into host
events (:mod:`rlwatch.sources.kernel`), a log's ending names them (:mod:`rlwatch.logs.shapes`), and the catalogue
counts the OOM kill (:mod:`rlwatch.logs.kinds`), whose lines Ray's diagnosis asks for a worker's pid
(:mod:`rlwatch.engine.diagnosis.ray`). Each function reads one message with its line prefix (time,
host, ``kernel:``) already taken off, or anywhere in a line where a program copied it into its own log.

The messages, each as the kernel prints it: the OOM killer's ``Out of memory: Killed process PID (NAME)
total-vm:…kB, anon-rss:…kB, file-rss:…kB, shmem-rss:…kB, UID:… pgtables:…kB oom_score_adj:…`` (``mm/oom_kill.c``
``__oom_kill_process``; ``Memory cgroup out of memory`` when a cgroup's limit was hit; older kernels print ``Killed
process`` alone) and its ``oom-kill:constraint=…,oom_memcg=…,task_memcg=…,task=…,pid=…,uid=…`` summary
(``dump_oom_summary``); NVIDIA's ``NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=…, …`` (with or without ``PCI:``,
pid and name; ``pid='<unknown>'``) and ``GPU has fallen off the bus`` in its three shapes; ``python[1234]: segfault
at … ip … sp … error 4 in libfoo.so[…]`` (``arch/x86/mm/fault.c`` ``show_signal_msg``), ``… general protection fault
ip:… sp:… error:0 in …`` (``arch/x86/kernel/traps.c``) and ``potentially unexpected fatal signal 7`` (SIGBUS,
``kernel/signal.c`` ``print_fatal_signal``). Verbatim lines of each are under ``tests/real/host/kernel/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "BUS_LOST_TAIL",
    "LITERALS",
    "OOM_KILL_LITERALS",
    "OOM_KILL_WORDS",
    "OomKill",
    "OomSummary",
    "ProcessFault",
    "XidReport",
    "bus_lost",
    "bus_lost_head",
    "killed_pids",
    "oom_kill",
    "oom_summary",
    "process_fault",
    "says_bus_lost",
    "xid_report",
]

# Every message below holds one of these: a kernel log line without any is none of them.
LITERALS = ("Killed process", "oom-kill:", "NVRM", "segfault at", "general protection", "fatal signal 7")

# ---------------------------------------------------------------------------------------------- OOM killer
# mm/oom_kill.c: "%s: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB, shmem-rss:%lukB, UID:%u
# pgtables:%lukB oom_score_adj:%hd" (message "Out of memory" or "Memory cgroup out of memory"); kernels before 4.19
# print no prefix, before 4.5 no shmem-rss. Digits and "kB" may be split by a terminal's wrap padding (\s*).
OOM_KILL_WORDS = r"Killed process \d+"  # what the catalogue's oom_kill kind counts: the kill in any of its forms
OOM_KILL_LITERALS = ("Killed process",)
_OOM_KILLED = re.compile(
    r"(?:(Out of memory|Memory cgroup out of memory)(?: \([a-z_]+\))?: )?Killed process (\d+) \((.+?)\)(?=[\s,]|$)"
    r"(?:\s*total-vm:\s*\d+\s*kB,\s*anon-rss:\s*(\d+)\s*kB,\s*file-rss:\s*(\d+)\s*kB(?:,\s*shmem-rss:\s*(\d+)\s*kB)?)?"
)
# mm/oom_kill.c dump_oom_summary: "oom-kill:constraint=%s,nodemask=%*pbl,cpuset=…,mems_allowed=…,oom_memcg=%s
# (or global_oom),task_memcg=%s,task=%s,pid=%d,uid=%d".
# The pid of every kill a line names, in any of the forms above (what OOM_KILL_WORDS counts), whole numbers only.
_OOM_KILLED_PIDS = re.compile(r"Killed process (\d+)\b")
_OOM_SUMMARY = re.compile(r"oom-kill:constraint=(\w+)")
_OOM_MEMCG = re.compile(r",oom_memcg=([^,]*)")
_OOM_TASK = re.compile(r",task=([^,]*),pid=(\d+)")


@dataclass(frozen=True, slots=True)
class OomKill:
    """The OOM killer's kill line: whom it killed, what that held, and whether a memory cgroup's limit was hit."""

    pid: int
    process: str
    rss_bytes: int | None  # anon + file + shmem, as the line says (None: an old kernel printed none)
    cgroup: bool  # "Memory cgroup out of memory": a cgroup's limit, not the machine's memory


@dataclass(frozen=True, slots=True)
class OomSummary:
    """The OOM killer's summary, printed just before its kill line: the victim and the cgroup whose limit was hit."""

    pid: int
    task: str
    memcg: str | None  # oom_memcg=…; None: the machine ran out (global_oom)


def oom_kill(message: str) -> OomKill | None:
    if "Killed process" not in message:
        return None
    m = _OOM_KILLED.search(message)
    if m is None:
        return None
    rss_kb = [int(g) for g in m.group(4, 5, 6) if g is not None]
    return OomKill(
        pid=int(m.group(2)),
        process=m.group(3),
        rss_bytes=sum(rss_kb) * 1024 if rss_kb else None,
        cgroup=m.group(1) == "Memory cgroup out of memory",
    )


def killed_pids(message: str) -> tuple[int, ...]:
    """The pids a line says the OOM killer killed, in any form the catalogue's ``oom_kill`` kind counts (an old
    kernel's bare ``Killed process PID``, a kill copied into a program's log with its name cut off), where
    :func:`oom_kill` needs the whole line: whether a given process was killed, asked of every line that counted."""
    if "Killed process" not in message:
        return ()
    return tuple(int(m) for m in _OOM_KILLED_PIDS.findall(message))


def oom_summary(message: str) -> OomSummary | None:
    if "oom-kill:" not in message:
        return None
    task = _OOM_TASK.search(message)
    if task is None or _OOM_SUMMARY.search(message) is None:
        return None
    memcg = _OOM_MEMCG.search(message)
    return OomSummary(pid=int(task.group(2)), task=task.group(1), memcg=memcg.group(1) if memcg else None)


# ---------------------------------------------------------------------------------------------- NVIDIA's driver
_PCI = r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
# NVIDIA's driver (open-gpu-kernel-modules, nv.c / os-interface): "NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=…,
# GPU has fallen off the bus." Older drivers print no "PCI:" and no pid; some print pid='<unknown>'.
_XID = re.compile(rf"NVRM: Xid \((?:PCI:)?({_PCI})\): (\d+)(?:, pid=([^,]*), name=([^,]*))?(?:,\s*(.*))?$")
# "NVRM: GPU at PCI:0000:65:00: GPU-…" names the board only; these say it is gone:
# "NVRM: GPU at 0000:65:00.0 has fallen off the bus." / "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus."
_BUS_ONE_LINE = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?({_PCI}):? (?:GPU )?has fallen off the bus")
# "NVRM: The NVIDIA GPU 0000:b3:00.0" then "NVRM: fallen off the bus and is not responding to commands." on a later
# line of the same message (excerpt tests/real/host/kernel/nvrm-fallen-off-bus-no-xid.log).
_BUS_HEAD = re.compile(rf"NVRM: The NVIDIA GPU ({_PCI})\s*$")
BUS_LOST_TAIL = "fallen off the bus and is not responding to commands"


@dataclass(frozen=True, slots=True)
class XidReport:
    """One Xid line: the Xid, the GPU's PCI address as printed, and the process it names (if it names one)."""

    xid: int
    pci: str
    pid: int | None
    process: str | None


def _pid_number(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip().strip("'\"")
    return int(text) if text.isdigit() else None


def xid_report(message: str) -> XidReport | None:
    if "NVRM" not in message:
        return None
    m = _XID.search(message)
    if m is None:
        return None
    name = (m.group(4) or "").strip() or None
    return XidReport(
        xid=int(m.group(2)),
        pci=m.group(1),
        pid=_pid_number(m.group(3)),
        process=None if name in (None, "<unknown>") else name,
    )


def bus_lost(message: str) -> str | None:
    """The PCI address of a GPU a one-line message says has fallen off the bus, else None."""
    m = _BUS_ONE_LINE.search(message) if "NVRM" in message else None
    return m.group(1) if m else None


def bus_lost_head(message: str) -> str | None:
    """The PCI address of "NVRM: The NVIDIA GPU …", the head of a message whose later line (:data:`BUS_LOST_TAIL`)
    says the GPU has fallen off the bus; else None."""
    m = _BUS_HEAD.search(message) if "NVRM" in message else None
    return m.group(1) if m else None


def says_bus_lost(message: str) -> bool:
    """Whether one line says a GPU has fallen off the bus, in one line or as the tail of the three-line message."""
    return bus_lost(message) is not None or ("NVRM" in message and BUS_LOST_TAIL in message)


# ---------------------------------------------------------------------------------------------- a process's fault
# arch/x86/mm/fault.c show_signal_msg: "%s%s[%d]: segfault at %lx ip %px sp %px error %lx" + " in %s[%lx+%lx]".
_SEGFAULT = re.compile(r"(\S+)\[(\d+)\]: segfault at \S+ ip \S+ sp \S+ error \S+(?: in ([^\s\[]+))?")
# arch/x86/kernel/traps.c: "traps: %s[%d] general protection fault ip:%lx sp:%lx error:%lx in %s[…]"; older kernels
# "%s[%d] general protection ip:%lx sp:%lx error:%lx".
_GPF = re.compile(r"(\S+)\[(\d+)\]:? general protection(?: fault)? ip:\s?\S+ sp:\s?\S+ error:\s?\S+(?: in ([^\s\[]+))?")
# kernel/signal.c print_fatal_signal (print-fatal-signals=1): "%pD: %s: potentially unexpected fatal signal %d."
_FATAL_SIGNAL = re.compile(r"(?:(\S+): )?potentially unexpected fatal signal 7\b")


@dataclass(frozen=True, slots=True)
class ProcessFault:
    """A process the kernel saw die of a fault: ``segfault``, ``gpf`` (general protection) or ``sigbus``."""

    kind: str
    process: str | None
    pid: int | None


def process_fault(message: str) -> ProcessFault | None:
    if m := _SEGFAULT.search(message):
        return ProcessFault("segfault", m.group(1), int(m.group(2)))
    if m := _GPF.search(message):
        return ProcessFault("gpf", m.group(1), int(m.group(2)))
    if m := _FATAL_SIGNAL.search(message):
        return ProcessFault("sigbus", m.group(1), None)
    return None
