"""The run's stacks, sampled while it lives: where each rank stands, read every few seconds, kept as a short history.

A hang is only declared from the logs once their progress lines are known and have stopped; a run that logs in a
format rlwatch was not taught, or whose heartbeat thread keeps printing, hides its hang there. Where each rank's
main thread stands, read again and again, says it whatever the logs print: the same frames, read after read, in a
wait (a collective, a socket, a lock, a queue) with the thread never woken, is a rank that does not move
(:mod:`rlwatch.engine.diagnosis.stacks` says what that means).

Each round reads every target with ``py-spy dump --nonblocking --json`` (nothing paused, nothing signalled; with
``stacks.method: record``, a window of ``py-spy record --rate 1 --idle --threads`` per target instead), beside its
main thread's CPU time and context switches from ``/proc/PID/task/PID/`` (the main thread only: a heartbeat thread's
work does not make the main thread move). A main thread whose CPU time and switches are those of the last read has
neither run nor woken since, so it stands where that read found it: its frames are taken again without running
py-spy (issue 35: a hung or sleeping run costs the sampler a few reads of ``/proc``, nothing more). A round costs
what py-spy costs (bench/stacks.py measures it); the sampler measures its children's CPU and waits long enough after
each round to stay within ``cpu_budget`` of one core. It runs on a thread of its own: a slow or refused py-spy never
holds up the engine's sampling. Only the run's own processes are read (the engine's membership), and never another
user's: rlwatch running as root reads only processes of its own user or of the run directory's owner.

Each process is known by (pid, create_time): a pid reused by a new process starts a new history.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlwatch.common.clock import Clock
from rlwatch.common.state import SampledProcess, StackSample, StackSampling
from rlwatch.sources import procfs
from rlwatch.sources.stacks import (
    MAX_DUMP_BYTES,
    MAX_FRAMES,
    NO_PTRACE_WORDS,
    PTRACE_REFUSED,
    TOO_LARGE,
    StackTarget,
    cut_frame_part,
    dump_text,
    parse_dump,
    py_spy,
    rank_of,
)

__all__ = [
    "METHOD",
    "METHODS",
    "Reader",
    "StackSampler",
    "ThreadClock",
    "classify",
    "main_thread_clock",
    "may_read",
    "parse_raw",
    "read_dump",
    "record_window",
    "stage_of",
]

METHODS = {"dump": "py-spy dump --nonblocking", "record": "py-spy record --rate 1 --idle --nonblocking"}
METHOD = METHODS["dump"]
TIMEOUT_S = 10.0
# Rounds are paced to this part of the budget: a measure that ends just after a round (or another thread's child
# counted in a round) stays within the budget.
BUDGET_MARGIN = 0.9

# A collective: torch.distributed's (all_reduce, barrier …, a work's wait), NCCL/gloo's, DeepSpeed's and Ray
# collective's names; matched on the innermost frames' function names.
_COLLECTIVE = re.compile(
    r"^(all_reduce|all_gather\w*|reduce_scatter\w*|broadcast\w*|barrier|monitored_barrier|all_to_all\w*|reduce|"
    r"gather|scatter|send|recv|isend|irecv|_all_reduce\w*|allreduce\w*|allgather\w*|batch_isend_irecv|"
    r"wait_all|_wait_for_workers|synchronize)$"
)
# Other waits: a socket, a select/poll, a lock, a queue, a future, a process, a sleep; first match wins, innermost
# frame first.
_WAITS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(recv|recv_into|recvfrom|recv_bytes|_recv_bytes|_recv|readinto|read|accept|sendall)$"), "socket"),
    (re.compile(r"^(select|poll|epoll|_poll|wait_for_readable)$"), "select/poll"),
    (re.compile(r"^(acquire|_acquire_restore|__enter__)$"), "lock"),
    (re.compile(r"^(get|get_nowait|_get)$"), "queue"),
    (re.compile(r"^(result|_wait_for_tstate_lock|join)$"), "future"),
    (re.compile(r"^(wait|_wait|wait_for|_wait_for_\w+)$"), "wait"),
    (re.compile(r"^(sleep)$"), "sleep"),
)
# The RL stage a frame says the rank stands in, innermost frame first (function and file names of verl, OpenRLHF,
# TRL, NeMo-RL, slime, vLLM, SGLang).
_STAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"sync_weight|update_weight|load_weights|broadcast_weight|weight_sync|_sync_params|"
            r"update_named_param|resume_memory|broadcast_to_vllm",
            re.I,
        ),
        "weight sync",
    ),
    (re.compile(r"reward|compute_score|verif|judge", re.I), "reward"),
    (re.compile(r"generate|rollout|sampling|vllm|sglang|decode_step|_run_engine", re.I), "generation"),
    (
        re.compile(
            r"backward|optimizer|train_step|training_step|update_actor|update_policy|update_critic|"
            r"compute_loss|train_batch|ppo_update|forward_backward",
            re.I,
        ),
        "training",
    ),
)


def _name(frame: str) -> str:
    return frame.split(" (", 1)[0]


def classify(frames: Sequence[str]) -> tuple[str | None, bool]:
    """The wait the innermost frames stand in ("all_reduce", "socket recv", "sleep"…), and whether it is a
    collective; (None, False) when none is recognised (computing, or waiting in native code rlwatch cannot name)."""
    for frame in frames[:4]:
        name = _name(frame)
        if _COLLECTIVE.match(name):
            return name, True
    for frame in frames[:3]:
        name = _name(frame)
        for pattern, kind in _WAITS:
            if pattern.match(name):
                return (name if kind in ("wait", "sleep") else f"{kind} {name}"), False
    return None, False


def stage_of(frames: Sequence[str]) -> str | None:
    """The RL stage the frames tell (generation, reward, training, weight sync), innermost evidence first."""
    for frame in frames:
        for pattern, stage in _STAGES:
            if pattern.search(frame):
                return stage
    return None


@dataclass(frozen=True, slots=True)
class ThreadClock:
    """A main thread's CPU ticks and context switches: unchanged between two reads, it never ran nor woke."""

    ticks: int
    switches: int


def main_thread_clock(pid: int, proc_root: str = procfs.PROC) -> ThreadClock | None:
    """The main thread's (tid == pid) CPU ticks (utime + stime) and its voluntary + involuntary switches."""
    base = f"{proc_root}/{pid}/task/{pid}"
    try:
        with open(f"{base}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
        with open(f"{base}/status", "rb") as fh:
            status = fh.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    except (IndexError, ValueError):
        return None
    switches = 0
    for line in status.splitlines():
        if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
            try:
                switches += int(line.split(":", 1)[1])
            except ValueError:
                return None
    return ThreadClock(ticks, switches)


Reader = Callable[[StackTarget], tuple[tuple[str, ...], str, str | None]]


def read_dump(exe: str) -> Reader:
    """A reader of one target's main-thread stack with ``py-spy dump --nonblocking --json``: (frames, where, error)."""

    def read(target: StackTarget) -> tuple[tuple[str, ...], str, str | None]:
        text, error = dump_text(exe, target.pid)
        if error is not None:
            return (), "", error
        st = parse_dump(target.pid, target.label, text)
        return st.frames, st.where, st.error

    return read


def may_read(pid: int, run_owner: int | None, proc_root: str = procfs.PROC, euid: int | None = None) -> bool:
    """Only a process of rlwatch's own user, or, for rlwatch running as root, of the run directory's owner: root
    never reads another user's process on this path."""
    me = os.geteuid() if euid is None else euid
    uid = procfs.uid(pid, proc_root)
    if uid is None:
        return False
    return uid == me or (me == 0 and run_owner is not None and uid == run_owner)


def _round_cpu() -> float:
    """CPU seconds a round spends: py-spy's (the children waited for; another thread's children in the same time
    count too, so the pace errs on the slow side) and this thread's own (reading /proc, parsing)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + time.thread_time()


@dataclass
class _History:
    target: StackTarget
    create_time: float
    rank: int | None
    samples: deque[StackSample]
    last_clock: ThreadClock | None = None
    error: str | None = None
    alive: bool = True


Window = Callable[
    [Sequence[StackTarget], float, threading.Event], dict[int, tuple[list[tuple[tuple[str, ...], int]], str | None]]
]
_LIBRARY_TOP = (
    "torch/",
    "vllm/",
    "sglang/",
    "ray/",
    "transformers/",
    "deepspeed/",
    "accelerate/",
    "multiprocessing/",
    "concurrent/",
    "asyncio/",
    "threading.py",
    "socket.py",
    "selectors.py",
    "queue.py",
    "subprocess.py",
)


def parse_raw(pid: int, text: str) -> list[tuple[tuple[str, ...], int]]:
    """``py-spy record --threads --format raw`` output, the main thread's (tid == pid) stacks, innermost frame first,
    with how many samples each had."""
    out = []
    prefix = f"thread ({pid}):"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")[1:]  # the first is the thread's name
        if count.isdigit() and frames:  # kept as a dump's are: the innermost 40, each name bounded
            out.append((tuple(cut_frame_part(f) for f in reversed(frames[-MAX_FRAMES:])), int(count)))
    return out


def _where_short(frames: Sequence[str]) -> str:
    """Where a stack stands, from short file names: its innermost function, and the run's own frame that led there."""
    own = next((f for f in frames if not f.split(" (", 1)[-1].startswith(_LIBRARY_TOP)), None)
    if own is None or own is frames[0]:
        return frames[0]
    return f"{_name(frames[0])} ({own.split(' (', 1)[-1]}"


def record_window(exe: str) -> Window:
    """Every target's stacks over a window of ``py-spy record --rate 1 --idle --threads --nonblocking``, run side by
    side (a resident recorder costs far less a sample than a dump: bench/stacks.py), stopped early on ``stop``. Its
    first sample comes a second in: a window of N seconds holds N - 1 samples, so it lasts two at least."""

    def read(
        targets: Sequence[StackTarget], seconds: float, stop: threading.Event
    ) -> dict[int, tuple[list[tuple[tuple[str, ...], int]], str | None]]:
        out: dict[int, tuple[list[tuple[tuple[str, ...], int]], str | None]] = {}
        with tempfile.TemporaryDirectory(prefix="rlwatch-stacks-") as tmp:
            procs = {}
            for t in targets:
                argv = [exe, "record", "--pid", str(t.pid), "--rate", "1", "--idle", "--threads", "--nonblocking"]
                argv += ["--duration", str(max(2, round(seconds))), "--format", "raw", "--output", f"{tmp}/{t.pid}"]
                try:
                    procs[t.pid] = subprocess.Popen(
                        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                    )
                except OSError as exc:
                    out[t.pid] = ([], f"cannot run py-spy: {exc.strerror or exc}")
            deadline = time.monotonic() + seconds + TIMEOUT_S
            while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
                if stop.wait(0.2):
                    break
            for pid, p in procs.items():
                if p.poll() is None:
                    p.kill()
                _, err = p.communicate()
                said = err.decode(errors="replace").strip().splitlines()
                try:
                    with open(f"{tmp}/{pid}", "rb") as fh:
                        raw = fh.read(MAX_DUMP_BYTES + 1)  # bounded as a dump is: a stack made to be read is huge
                except OSError:
                    raw = b""
                if len(raw) > MAX_DUMP_BYTES:
                    out[pid] = ([], f"stacks of pid {pid} {TOO_LARGE}")
                    continue
                stacks = parse_raw(pid, raw.decode("utf-8", "replace"))
                if stacks:
                    out[pid] = (stacks, None)
                else:
                    line = said[-1] if said else "py-spy recorded no stack"
                    if any(w in line for w in NO_PTRACE_WORDS):
                        line = PTRACE_REFUSED + line
                    out[pid] = ([], line[:300])
        return out

    return read


class StackSampler:
    """Reads every target's stack each round, keeps a bounded history per process, and paces itself to its budget.

    ``targets`` gives the run's Python processes (the engine's membership); ``reader`` reads one (py-spy by
    default); ``cpu`` says the CPU seconds spent so far by what the rounds run (the children's, by default). Tests
    inject all three and the clock, and call :meth:`round` themselves."""

    def __init__(
        self,
        targets: Callable[[], Sequence[StackTarget]],
        clock: Clock,
        *,
        interval_s: float = 10.0,
        cpu_budget: float = 0.01,
        history: int = 64,
        run_owner: int | None = None,
        proc_root: str = procfs.PROC,
        reader: Reader | None = None,
        cpu: Callable[[], float] | None = None,
        thread_clock: Callable[[int], ThreadClock | None] | None = None,
        method: str = "dump",
        window: Window | None = None,
    ) -> None:
        self._targets = targets
        self._clock = clock
        self.interval_s = interval_s
        self.cpu_budget = cpu_budget
        self._history = history
        self._run_owner = run_owner
        self._proc_root = proc_root
        exe = py_spy() if reader is None else "given"
        self._reader = reader if reader is not None else (read_dump(exe) if exe else None)
        # `record`: windows of a resident py-spy record per target, the interval long (cheaper a sample, each
        # window's samples known only at its end).
        self._window = window if window is not None else (record_window(exe) if exe and method == "record" else None)
        self._cpu = cpu or _round_cpu
        self._thread_clock = thread_clock or (lambda pid: main_thread_clock(pid, proc_root))
        self._lock = threading.Lock()
        self._procs: dict[tuple[int, float], _History] = {}
        self._reason: str | None = None if self._reader is not None else "py-spy is not installed (pip install py-spy)"
        self._wait_s = interval_s
        self._spent = 0.0  # CPU seconds of all rounds
        self._first_round: float | None = None  # monotonic time of the first round
        self._record: StackSampling | None = None  # the last record made, until the next round
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------------------------------------- one round
    def round(self) -> float:
        """Read every target once; returns how long to wait before the next round (the budget's pace)."""
        if self._reader is None:
            return self.interval_s
        if self._first_round is None:
            self._first_round = self._clock.monotonic()
        cpu_before = self._cpu()
        targets = [t for t in self._targets() if may_read(t.pid, self._run_owner, self._proc_root)]
        if not targets and not self._procs:
            return min(self.interval_s, 1.0)  # the run not found yet: look again soon, it costs nothing
        seen: set[tuple[int, float]] = set()
        errors: list[str] = []
        keyed = []
        for target in targets:
            stat = procfs.read_stat(target.pid, self._proc_root)
            if stat is not None:  # else gone since the membership was read
                keyed.append((target, (target.pid, float(stat.starttime_ticks))))
        if self._window is not None:
            reads = self._read_window([t for t, _ in keyed])
        else:
            reads = {}
            for target, key in keyed:
                clock = self._thread_clock(target.pid)
                last = None
                with self._lock:
                    hist = self._procs.get(key)
                    if hist is not None and hist.error is None and hist.samples and clock == hist.last_clock:
                        last = hist.samples[-1]
                if clock is not None and last is not None:
                    # Its main thread neither ran nor woke since the last read, so it stands where that read found it:
                    # the same frames, taken again without a py-spy (a hung or sleeping rank costs nothing to watch).
                    reads[target.pid] = ([(self._clock.time(), last.frames, last.where)], None, None, clock)
                    continue
                frames, where, error = self._reader(target)
                reads[target.pid] = ([(self._clock.time(), frames, where)], error, None, clock)
        for target, key in keyed:
            seen.add(key)
            taken, error, clock_before, clock_after = reads.get(target.pid, ([], "not read", None, None))
            with self._lock:
                hist = self._procs.get(key)
                if hist is None:
                    started = procfs.start_time_from_ticks(int(key[1]), procfs.boot_time(self._proc_root))
                    rank = rank_of(target.pid, self._proc_root)
                    hist = _History(target, started or key[1], rank, deque(maxlen=self._history))
                    self._procs[key] = hist
                hist.target = target
                hist.alive = True
                hist.error = error
                if error is not None:
                    errors.append(error)
                    continue
                # Blocked: the main thread neither ran nor woke since the previous read (a window: over it).
                before = clock_before if clock_before is not None else hist.last_clock
                blocked = None if before is None or clock_after is None else before == clock_after
                hist.last_clock = clock_after
                for at, frames, where in taken:
                    wait, collective = classify(frames)
                    hist.samples.append(StackSample(at, frames, where, wait, collective, blocked, stage_of(frames)))
        with self._lock:
            for key, hist in list(self._procs.items()):
                if key not in seen:
                    hist.alive = False
                    if not hist.samples:
                        del self._procs[key]
            live = [k for k in self._procs if k in seen]
            if len(self._procs) > 4 * max(8, len(live)):  # gone processes are kept a while, not for ever
                for key in [k for k in self._procs if k not in seen][: len(self._procs) - len(live)]:
                    del self._procs[key]
            if targets and len(errors) == len(targets):
                refused = [e for e in errors if e.startswith(PTRACE_REFUSED)]
                self._reason = refused[0] if refused else errors[0]
            else:
                self._reason = None
            cost = max(0.0, self._cpu() - cpu_before)
            self._spent += cost
            # Wait long enough that this round's cost stays within the budget, never less than the interval (a
            # window of `py-spy record` already lasted the interval: it waits only what the budget asks beyond).
            pace = max(self.interval_s, cost / (BUDGET_MARGIN * self.cpu_budget))
            self._wait_s = pace if self._window is None else max(0.0, pace - self.interval_s)
            self._record = None
        return self._wait_s

    def _read_window(
        self, targets: Sequence[StackTarget]
    ) -> dict[int, tuple[list[tuple[float, tuple[str, ...], str]], str | None, ThreadClock | None, ThreadClock | None]]:
        """One window of every target: its main thread's samples spread over the window, the most frequent stack
        last (the order within a window is not known), with the thread's clocks at its start and end."""
        assert self._window is not None
        start = {t.pid: self._thread_clock(t.pid) for t in targets}
        t0 = self._clock.time()
        got = self._window(targets, self.interval_s, self._stop)
        t1 = self._clock.time()
        out = {}
        for t in targets:
            stacks, error = got.get(t.pid, ([], "not read"))
            ordered = sorted(stacks, key=lambda sc: sc[1])
            frames_list = [frames for frames, n in ordered for _ in range(n)]
            step = (t1 - t0) / max(1, len(frames_list))
            taken = [(t0 + (i + 1) * step, f, _where_short(f)) for i, f in enumerate(frames_list)]
            out[t.pid] = (taken, error, start.get(t.pid), self._thread_clock(t.pid))
        return out

    # ---------------------------------------------------------------------------------------------- the record
    def state(self) -> StackSampling:
        """Every process's history and what the sampling costs, as the snapshot carries it."""
        with self._lock:
            if self._record is not None:
                return self._record  # made once a round: snapshots are built far more often than stacks are read
            elapsed = None if self._first_round is None else self._clock.monotonic() - self._first_round
            fraction = self._spent / elapsed if elapsed and elapsed > 0 else None
            procs = tuple(
                SampledProcess(h.target.pid, h.create_time, h.target.label, h.rank, tuple(h.samples), h.error, h.alive)
                for h in sorted(self._procs.values(), key=lambda h: (h.rank is None, h.rank or 0, h.target.pid))
            )
            self._record = StackSampling(
                available=self._reason is None,
                reason=self._reason,
                method=METHODS["record"] if self._window is not None else METHOD,
                interval_s=self._wait_s,
                cpu_fraction=fraction,
                processes=procs,
            )
            return self._record

    # ------------------------------------------------------------------------------------------------- running
    def start(self) -> None:
        """Sample on a daemon thread of its own until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, name="rlwatch-stacks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=TIMEOUT_S + 5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.round()
            except Exception as exc:  # a source never takes the engine down: it says why, and tries again
                with self._lock:
                    self._reason = f"{type(exc).__name__}: {exc}"
                    self._record = None
                wait = self.interval_s
            self._stop.wait(wait)
