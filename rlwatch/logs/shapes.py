"""Failures known by their shape: what a line *is* (an exception, an error record, a process's exit or signal, a
kernel report, progress), whatever words it uses.

rlwatch's catalogue of event kinds (:mod:`rlwatch.logs.kinds`) names the failures it was taught; real logs fail in
wordings nobody taught it — a vLLM version's new engine message, Ray's tab-indented ``ActorDiedError`` block, a
launcher's "exits with return code = -9". Those still have the shape every failure of their family has, and that
shape is read here: a Python exception line (``pkg.mod.SomeError: message``, ``RayTaskError(ValueError): …``, the
last line of a traceback whose header was cut off), an error or fatal record of the logging formats these frameworks
use (Python logging, vLLM's, glog's ``E``/``F``, torch's C++ ``[E …]``, Ray's C++ records, DeepSpeed's
``[ERROR]``), an exit code or a signal as launchers report them (torchrun's ChildFailedError report, DeepSpeed,
``subprocess``, a shell's ``Killed``, Ray's worker exit types), and the kernel's own reports (OOM kills, NVIDIA Xid
events). Each wording below says where it comes from.

:func:`shape_of` looks at one line, with its writer prefixes already split off; it is used on a log's last lines
(:mod:`rlwatch.logs.ending`), never on every line of a backlog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlwatch.common.signals import signal_name
from rlwatch.logs import ray, torchrun_report
from rlwatch.logs.foreign import kernel, slurm
from rlwatch.logs.progress_shape import read as read_step

__all__ = ["PROGRESS", "RECORD_LEVEL", "Shape", "is_progress", "shape_of"]

EXCEPTION, ERROR, EXIT, SIGNAL, KERNEL = "exception", "error", "exit", "signal", "kernel"


@dataclass(frozen=True, slots=True)
class Shape:
    """What a failure-shaped line says: its kind, its own words, and what could be read out of it."""

    kind: str  # exception | error | exit | signal | kernel
    text: str  # the line's own words (trimmed)
    exc_type: str | None = None  # the exception's type, as printed (``ray.exceptions.ActorDiedError``)
    code: int | None = None  # an exit code as reported (negative: killed by that signal, as Python reports it)
    signal: str | None = None  # ``SIGKILL``
    pid: int | None = None
    detail: str | None = None  # Ray's worker exit type, a kernel report's subject, …


# --------------------------------------------------------------------------------------------------- progress
# What proves a run moved: a step line of the frameworks' own (the catalogue's `step` kind says the same for the
# counter), a metric line, a progress bar that advanced. AReaL `Train step 12/100 done.`; verl's console logger
# `step:12 - actor/pg_loss:…` (verl/utils/tracking.py, LocalLogger); TRL's metric dicts `{'loss': …}`; OpenRLHF's
# `✨ Global step 12: {…}` and its tqdm bars `Episode [1/20]:  35%|…| 7/20 [`, HF Trainer's `12/300 [00:41<16:03,
# 3.4s/it]`. The `step` kind of rlwatch/logs/kinds.py counts the same step lines.
PROGRESS = re.compile(
    r"Train step \d+/\d+ done"
    r"|(?:^|\s)step:\s?\d+ - (?!val-)\S+:"
    r"|Global step \d+: \{"
    r"|^\{['\"](?:loss|train_loss|reward|rewards?/[\w/]+|eval_loss|grad_norm|learning_rate|train_runtime)['\"]: "
    r"|\b\d+/\d+ \[\d+:\d\d(?::\d\d)?<"
    r"|\bglobal_step[=:]\s?\d+"
)


def is_progress(body: str) -> bool:
    """A line that proves the run moved: a step line of the frameworks above, or any framework's step line known by
    its shape (rlwatch/logs/progress_shape.py) that is no failure of its own (`RuntimeError: … at step 52` is one)
    and no quoted source line (a traceback's `    for step in …`)."""
    if PROGRESS.search(body) is not None:
        return True
    if body.startswith(("  ", "\t")) and not body.lstrip()[:1].isdigit():
        return False  # indented: a frame or a quoted source line (a bar's `  45%|…` and Megatron's ` iteration` pass)
    return read_step(body) is not None and shape_of(body) is None


# ---------------------------------------------------------------------------------------------- exceptions
# A Python exception line: the last line of a traceback (traceback.format_exception_only), also when the header is
# out of view. The type is a dotted name ending in one of the words exception classes end in; Ray wraps a remote
# one as `RayTaskError(ValueError)` (ray/exceptions.py, RayTaskError.as_instanceof_cause). Warnings are not failures.
_EXC = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*"
    r"(?:[A-Z]\w*?(?:Error|Exception|Exit|Interrupt|Failure|Fault|Abort(?:ed)?)|[A-Z]\w*Dead\w*|KeyboardInterrupt)"
    r"(?:\([\w.]+\))?)"
    r"(?::[ \t]?(?P<msg>.*))?$"
)
_NOT_EXCEPTIONS = ("Warning", "UserWarning")

# ------------------------------------------------------------------------------------------- error records
# Error and fatal records, by the logging format that wrote them:
#   vLLM (vllm/logger.py _FORMAT): `ERROR 03-15 17:24:18 [multiproc_executor.py:48] …`, `CRITICAL 03-15 …`
#   Python logging's default (`logging.basicConfig`): `ERROR:root:…`; `%(asctime)s - %(name)s - %(levelname)s - `
#   DeepSpeed (deepspeed/utils/logging.py): `[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] …`
#   loguru: `2025-01-01 12:00:00.000 | ERROR    | module:fn:12 - …`
#   glog and absl (C++ and absl-py): `E0314 10:00:00.123456  1234 file.cc:12] …`, `F0314 …` (fatal)
#   torch's C++ logs (c10/util/Logging.cpp): `[E ProcessGroupNCCL.cpp:475] …`, `[E1124 05:09:01.123 …]`
#   Ray's C++ components (raylet.out, python-core-worker-*.log): `[2025-01-01 12:00:00,000 E 1234 5678] file.cc:12: …`
#   NCCL: `host:1234:5678 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion …` (its errors are WARN)
_ERROR = re.compile(
    r"^(?P<lvl>ERROR|CRITICAL|FATAL) \d\d-\d\d \d\d:\d\d:\d\d"
    r"|^(?P<lvl2>ERROR|CRITICAL|FATAL):[\w.]*:"
    r"|\[(?P<lvl3>ERROR|CRITICAL|FATAL)\]"
    r"| - (?P<lvl4>ERROR|CRITICAL|FATAL) - "
    r"|\| (?P<lvl5>ERROR|CRITICAL) +\|"
    r"|^\[?\d{4}-\d\d-\d\d[ T][\d:,.]+\]? ?(?P<lvl6>ERROR|CRITICAL|FATAL)\b"
    r"|^(?P<glog>[EF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w./-]+:\d+\]"
    r"|^\[(?P<c10>[EF])(?:\d{3,4} [\d:.]+(?: \d+)?)? ?[\w./-]+:\d+\]"
    r"|^\[\d{4}-\d\d-\d\d [\d:,.]+ (?P<ray>[EFC]) \d+ \d+\]"
    r"|\bNCCL (?P<nccl>WARN) "
)

# PyTorch's flight recorder announcing a dump (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, torch 2.6 to 2.11)
# logs at error level, yet says no failure: a dump asked through the ranks' debug pipe (as rlwatch asks a hung run),
# or one another rank signalled. `[PG ID 0 PG GUID 0(default_pg) Rank 0] ProcessGroupNCCL preparing to dump debug
# info. Include stack trace: 1, only active collectives: 0`, `… Observed flight recorder dump signal from another
# rank via TCPStore.`, `… First PG on this rank to signal dumping.` Read as a failure, the hung run that rlwatch asked
# for a dump turned "unknown: it logs a failure it keeps retrying". The timeout or error that caused a dump is logged
# on lines of its own, which stay failures.
_DUMP_NOTICE = re.compile(
    r"ProcessGroupNCCL preparing to dump debug info|Observed flight recorder dump signal from another rank"
    r"|First PG on this rank to signal dumping"
)

# vLLM's record prefix, which the prefix splitter takes off every line of a multi-line record (a logged traceback):
# its level decides whether such a line is an error, whatever the line itself says.
RECORD_LEVEL = re.compile(r"(?:^|\s|\))(ERROR|CRITICAL|FATAL) \d\d-\d\d \d\d:\d\d:\d\d")

# ------------------------------------------------------------------------------------ exits and signals
# torch.distributed.elastic's ChildFailedError report, its signal line and the agent's own, read by
# rlwatch/logs/torchrun_report.py: `  exitcode  : -9 (pid: 1234)`, `traceback : Signal 9 (SIGKILL) received by PID
# 1234`, `failed (exitcode: -9) local_rank: 0 (pid: 1234) of binary: /usr/bin/python`.
# DeepSpeed's launcher (deepspeed/launcher/launch.py sigkill_handler): `[…] exits with return code = -9`
_RETURN_CODE = re.compile(r"exits with return code = (-?\d+)")
# subprocess.CalledProcessError (accelerate, torchrun wrappers): `… returned non-zero exit status 1.`
_EXIT_STATUS = re.compile(r"returned non-zero exit status (-?\d+)")
# A shell reporting a job: bash's `bash: line 1:  1234 Killed   python train.py`, `Killed`, `Segmentation fault
# (core dumped)`; the C library's `Bus error (core dumped)`; Python's faulthandler `Fatal Python error: Segmentation
# fault`; a C++ terminate `terminate called after throwing an instance of 'c10::Error'`; absl's
# `*** SIGSEGV received at time=…`.
_SHELL = re.compile(
    r"^(?:\S+: line \d+: +)?(?:(?P<pid>\d+) +)?(?P<what>Killed|Segmentation fault|Bus error|Aborted|"
    r"Illegal instruction|Floating point exception)(?: \(core dumped\))?(?:\s|$)"
)
_SHELL_SIGNAL = {
    "Killed": "SIGKILL",
    "Segmentation fault": "SIGSEGV",
    "Bus error": "SIGBUS",
    "Aborted": "SIGABRT",
    "Illegal instruction": "SIGILL",
    "Floating point exception": "SIGFPE",
}
_FATAL_PY = re.compile(r"^Fatal Python error: (.+)")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_ABSL_SIGNAL = re.compile(r"\*\*\* (SIG[A-Z]+) received at time=|\*\*\* Received signal (\d+) \*\*\*")
# Ray (python/ray/exceptions.py, src/ray/core_worker): `The actor is dead because its worker process has died.
# Worker exit type: SYSTEM_ERROR Worker exit detail: …`; the raylet's `A worker died or was killed while executing a
# task by an unexpected system error.`; the memory monitor's `Task was killed due to the node running low on memory.`
# (rlwatch/logs/ray.py reads the exit type and the memory monitor's kill).
# Other words a process uses as it fails: SGLang's scheduler (`Scheduler hit an exception: Traceback …`,
# python/sglang/srt/managers/scheduler.py), vLLM's workers (`Exception in worker VllmWorkerProcess while processing
# method init_device: …`, vllm/executor/multiproc_worker_utils.py), SGLang's parent (`Received sigquit from a child
# process` and, newer, `SIGQUIT received. signum=…`), DeepSpeed's launcher tearing its ranks down after one died
# (`[launch.py:319:sigkill_handler] Killing subprocess 12477`).
_FAILING = re.compile(
    r"\b(?:hit|raised|caught|got) an? (?:exception|error)\b|^Exception in (?:worker|thread|process)\b"
    r"|\bexception in (?:worker|thread|process)\b"
)
_SIG_RECEIVED = re.compile(r"\b(SIG[A-Z]+) received\b|\b[Rr]eceived (sig[a-z]+|SIG[A-Z]+)\b")
# torch.distributed.elastic's agent (agent/server/api.py): `Received 15 death signal, shutting down workers`
_DEATH_SIGNAL = re.compile(r"Received (\d+) death signal")
_LAUNCHER_KILLING = re.compile(r"sigkill_handler\] Killing subprocess (\d+)")
_RAY_DIED = re.compile(
    r"The actor died unexpectedly|The actor is dead because|A worker died or was killed while executing"
    r"|worker process has died|Worker unexpectedly exits"
)
# The kernel's and NVIDIA's driver's reports (OOM kills, Xid, a GPU fallen off the bus) and Slurm's records of how a
# job ended (its cgroup's OOM kills, a cancellation, a failed node) are parsed by rlwatch/logs/foreign/.


def _code_shape(code: int, pid: int | None, text: str) -> Shape:
    sig = signal_name(-code) if code < 0 else None
    return Shape(SIGNAL if sig else EXIT, text, code=code, signal=sig, pid=pid)


def shape_of(body: str) -> Shape | None:
    """The failure shape of one line's message (prefixes split off, no colour codes), or None.

    Cheap on the lines that are none of these: a few substring tests decide most lines before any regex runs."""
    text = body.strip()
    if not text:
        return None
    if received := torchrun_report.signal_received(text):
        return Shape(SIGNAL, text, code=-received[0], signal=received[1], pid=received[2])
    if "exitcode" in text and (reported := torchrun_report.exit_reported(text)) and reported[0] != 0:
        return _code_shape(reported[0], reported[1], text)
    if "return code =" in text and (m := _RETURN_CODE.search(text)) and int(m.group(1)) != 0:
        return _code_shape(int(m.group(1)), None, text)
    if "Worker exit type" in text and (m := ray.EXIT_TYPE.search(text)):
        return Shape(EXIT, text, detail=m.group(1))
    if ray.OOM_OLD.search(text):
        return Shape(KERNEL, text, detail="ray_memory_monitor")
    if kill := kernel.oom_kill(text):
        return Shape(KERNEL, text, pid=kill.pid, detail=f"oom_kill {kill.process}")
    if summary := kernel.oom_summary(text):
        return Shape(KERNEL, text, pid=summary.pid, detail=f"oom_kill {summary.task}")
    if slurm.oom_kill_reported(text):
        return Shape(KERNEL, text, signal="SIGKILL", detail="slurm oom_kill")
    if (reason := slurm.cancelled(text)) is not None:
        if reason == "node failure":
            return Shape(EXIT, text, detail="slurm node failure")
        return Shape(SIGNAL, text, signal="SIGTERM", detail=f"slurm {reason}")
    if slurm.node_failed(text):
        return Shape(EXIT, text, detail="slurm node failure")
    if xid := kernel.xid_report(text):
        return Shape(KERNEL, text, detail=f"xid {xid.xid}")
    if kernel.says_bus_lost(text):
        return Shape(KERNEL, text, detail="fallen off the bus")
    m = _EXC.match(text)
    if m is not None and not m.group("type").endswith(_NOT_EXCEPTIONS):
        return Shape(EXCEPTION, text, exc_type=m.group("type"))
    if m := _SHELL.match(text):
        what = m.group("what")
        pid = int(m.group("pid")) if m.group("pid") else None
        return Shape(SIGNAL, text, signal=_SHELL_SIGNAL[what], pid=pid)
    if "exit status" in text and (m := _EXIT_STATUS.search(text)) and int(m.group(1)) != 0:
        return _code_shape(int(m.group(1)), None, text)
    if text.startswith("Fatal Python error") and (m := _FATAL_PY.match(text)):
        return Shape(SIGNAL if "fault" in m.group(1).lower() or "Aborted" in m.group(1) else ERROR, text)
    if "terminate called" in text and (m := _TERMINATE.search(text)):
        return Shape(ERROR, text, exc_type=m.group(1), signal="SIGABRT")
    if "***" in text and (m := _ABSL_SIGNAL.search(text)):
        sig = m.group(1) or signal_name(int(m.group(2)))
        return Shape(SIGNAL, text, signal=sig)
    if _RAY_DIED.search(text):
        return Shape(EXIT, text, detail="actor died")
    if "death signal" in text and (m := _DEATH_SIGNAL.search(text)):
        return Shape(SIGNAL, text, code=-int(m.group(1)), signal=signal_name(int(m.group(1))))
    if "eceived" in text and (m := _SIG_RECEIVED.search(text)):
        return Shape(SIGNAL, text, signal=(m.group(1) or m.group(2)).upper())
    if "Killing subprocess" in text and (m := _LAUNCHER_KILLING.search(text)):
        return Shape(EXIT, text, pid=int(m.group(1)), detail="the launcher is killing its processes: one failed")
    if _FAILING.search(text):
        return Shape(ERROR, text)
    if m := _ERROR.search(text):
        return None if "dump" in text and _DUMP_NOTICE.search(text) else Shape(ERROR, text)
    return None
