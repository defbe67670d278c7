"""A synthetic AReaL ``trainer.log`` of any size, with a known number of lines of each event kind.

The text is what formats.md says a v0.5 AReaL run writes through ``tee``: colour-wrapped logger records, every
rank's ``Microbatch`` line, one ``Train step g/G done.`` and a ``fancy_grid`` stats table per step, a disk weight
update per step, a recover checkpoint every ``SAVE_EVERY`` steps. Failures are rare, as in a real run: now and
then a server crash (retry warnings, "Workflow execution failed" with its traceback, rank 0 dying in the weight
update, torchrun's ChildFailedError report, the relaunch with "Recovering from StepInfo"), an OOM, an NCCL
watchdog timeout, an NCCL error, a busy GPU at relaunch, a slow request, a worker's emergency brake and a kernel
OOM kill line. Each piece declares which reported kinds its lines are, so the expected counts are known by
construction, independently of rlwatch (and checked against grep by the backlog benchmark).
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from rlwatch.sim import formats

__all__ = ["GENERATOR_VERSION", "REPORTED_KINDS", "Dataset", "LiveStream", "ensure_dataset", "generate"]

GENERATOR_VERSION = 4
DENSE_VERSION = 1  # of the incident-dense variant; the calm data keeps its key
START = datetime(2026, 1, 5, 8, 0, 0).timestamp()
STEP_S = 11.0  # seconds of training per step: rollout, train, weight update
RANKS = 8
SAVE_EVERY = 50
TABLES = 64  # distinct stats tables, cycled (their values differ; their size and keys do not)

ENGINE = "[RemoteInfEngine Rank 0]"
TB = "Traceback (most recent call last):"
ADDR = ("127.0.0.1", 17331)  # loopback: a report over this data probes the server address it names

# The stats keys AReaL v0.5 logs per step (formats.md §1), sorted as its stats tracker sorts them.
_STAT_GROUPS = (
    "advantages",
    "correct_seq_len",
    "final_reward",
    "kl_rewards",
    "no_eos_ratios",
    "prompt_len",
    "seq_len",
    "task_reward",
    "update/actor_loss",
    "update/approx_kl",
    "update/clip_ratio",
    "update/entropy",
    "update/importance_weight",
)
_TIMERS = (
    "checkpoint_for_recover",
    "compute_advantage",
    "eval",
    "recompute_logp",
    "ref_logp",
    "rollout",
    "save",
    "train_step",
    "update_weights",
)
STAT_KEYS = tuple(
    sorted(
        [f"ppo_actor/{g}/{s}" for g in _STAT_GROUPS for s in ("avg", "max", "min")]
        + ["ppo_actor/update/grad_norm", "ppo_actor/update/lr", "ppo_actor/update/update_successful"]
        + ["rollout/reward"]
        + [f"timeperf/{t}" for t in _TIMERS]
    )
)

REPORTED_KINDS = (
    "connection_refused",
    "traceback",
    "cuda_oom",
    "cuda_busy",
    "nccl_timeout",
    "nccl_error",
    "timeout",
    "child_failed",
    "engine_dead",
    "emergency_brake",
    "oom_kill",
    "weight_update",
    "checkpoint_saved",
    "step",
    "server_ready",
    "restart",
)


@dataclass(frozen=True, slots=True)
class Dataset:
    path: Path
    size: int
    lines: int
    steps: int
    expected: dict[str, int]  # reported kind -> lines
    any_kind: int  # lines that are at least one reported kind


class _Writer:
    """Collects lines and their declared kinds; flushes in large blocks."""

    def __init__(self, out: BinaryIO, seed: int) -> None:
        self.fh = out
        self.rng = random.Random(seed)
        self.buf: list[bytes] = []
        self.buf_bytes = 0
        self.size = 0
        self.lines = 0
        self.counts: Counter[str] = Counter()
        self.any_kind = 0
        self.t = START

    def emit(self, text: str, *kinds: str) -> None:
        """One line (its text may hold no newline) that is each of ``kinds``."""
        data = (text + "\n").encode("utf-8")
        self.buf.append(data)
        self.buf_bytes += len(data)
        self.lines += 1
        for k in kinds:
            self.counts[k] += 1
        if kinds:
            self.any_kind += 1
        if self.buf_bytes >= 4 << 20:
            self.flush()

    def emit_block(self, text: str, marks: dict[str, tuple[str, ...]]) -> None:
        """A multi-line record; a line containing a key of ``marks`` is each of that key's kinds."""
        for part in text.split("\n"):
            kinds = [k for marker, ks in marks.items() if marker in part for k in ks]
            self.emit(part, *dict.fromkeys(kinds))

    def flush(self) -> None:
        blob = b"".join(self.buf)
        self.fh.write(blob)
        self.size += len(blob)
        self.buf.clear()
        self.buf_bytes = 0

    @property
    def written(self) -> int:
        return self.size + self.buf_bytes

    def close(self) -> None:
        self.flush()
        self.fh.close()


def _areal(w: _Writer, logger: str, level: str, message: str) -> str:
    return formats.areal(logger, level, message, w.t)


def _tables(rng: random.Random) -> list[list[str]]:
    tables = []
    for _ in range(TABLES):
        stats = [(k, rng.uniform(-1, 1) * 10 ** rng.randint(-4, 3)) for k in STAT_KEYS]
        tables.append(formats.fancy_grid(stats).split("\n"))
    return tables


def _microbatch(w: _Writer, rank: int) -> str:
    rng = w.rng
    tokens = [rng.randint(9000, 16000) for _ in range(4)]
    padded = [t + rng.randint(0, 255) for t in tokens]
    return _areal(
        w,
        f"[FSDPEngine Rank {rank}]",
        "INFO",
        f"Microbatch #tokens (rank {rank}): {tokens}, padded to: {padded}, "
        f"padding lengths: {[p - t for p, t in zip(padded, tokens, strict=True)]}",
    )


def _step(w: _Writer, g: int, total: int, tables: list[list[str]]) -> None:
    per_epoch = 935
    epoch, epoch_step = divmod(g, per_epoch)
    rng = w.rng
    w.t += STEP_S * rng.uniform(0.9, 1.1)
    for r in range(RANKS):
        w.emit(_microbatch(w, r))
    w.emit(
        _areal(
            w,
            ENGINE,
            "INFO",
            f"Loading weights from disk done in {rng.uniform(8.5, 12.5):.2f}s. Respond time: {rng.uniform(1, 3):.2f}s.",
        ),
        "weight_update",
    )
    if (g + 1) % SAVE_EVERY == 0:
        path = f"/tmp/areal/experiments/checkpoints/root/gsm8k-grpo/trial0/default/recover_checkpoint/g{g}"
        w.emit(_areal(w, "Recover", "INFO", f"Saved recover checkpoint to {path}"), "checkpoint_saved")
    w.emit(
        _areal(
            w,
            "StatsLogger",
            "INFO",
            f"Epoch {epoch + 1}/{total // per_epoch + 1} Step {epoch_step + 1}/{per_epoch} Train step {g + 1}/{total} "
            "done.",
        ),
        "step",
    )
    w.emit(_areal(w, "StatsLogger", "INFO", "Stats (1/1):"))
    table = tables[g % len(tables)]
    head = _areal(w, "StatsLogger", "INFO", "")
    w.emit(head[: -len(formats.RESET)])
    for line in table[:-1]:
        w.emit(line)
    w.emit(table[-1] + formats.RESET)


def _refused_rollout(w: _Writer) -> None:
    """One rollout against a dead server: three retry warnings, then the error and its traceback."""
    host, port = ADDR
    for attempt in (1, 2, 3):
        msg = formats.refused_warning(host, port, "/generate", attempt, 3)
        w.emit(_areal(w, "HTTPUtils", "WARNING", msg), "connection_refused")
        w.t += 1.0
    final = formats.refused_error(host, port, "/generate", "{'input_ids': [151644, 8948, 198]}")
    block = _areal(w, ENGINE, "ERROR", f"Workflow execution failed: {final}\n" + formats.workflow_traceback(final))
    w.emit_block(
        block,
        {
            "Workflow execution failed": ("connection_refused",),
            TB: ("traceback",),
            "RuntimeError: Failed": ("connection_refused",),
        },
    )


def _torchrun_failure(w: _Writer, exitcode: int) -> None:
    text = formats.torchrun_failure_report(40112, "gsm8k_grpo.py", "pod-7f9c", exitcode, w.t)
    # The first line is the agent's report; then a traceback whose final line names ChildFailedError.
    w.emit_block(text, {TB: ("traceback",), "errors.ChildFailedError": ("child_failed",)})


def _relaunch(w: _Writer, g: int, *, busy: bool = False) -> None:
    w.t += 25.0
    root = "/tmp/areal/experiments/checkpoints/root/gsm8k-grpo/trial0/recover_info"
    w.emit(_areal(w, "Recover", "INFO", f"Loading recover info from {root}"))
    w.emit(
        _areal(
            w,
            "Recover",
            "INFO",
            f"Recovering from StepInfo(epoch={g // 935}, epoch_step={g % 935}, global_step={g}, steps_per_epoch=935).",
        ),
        "restart",
    )
    if busy:  # a stray process from the dead run still holds the GPU: this launch fails, the next one works
        w.emit_block(formats.cuda_busy_traceback(), {TB: ("traceback",), "busy or unavailable": ("cuda_busy",)})
        _torchrun_failure(w, 1)
        w.t += 20.0
        w.emit(
            _areal(
                w,
                "Recover",
                "INFO",
                f"Recovering from StepInfo(epoch={g // 935}, epoch_step={g % 935}, global_step={g}, "
                "steps_per_epoch=935).",
            ),
            "restart",
        )
    _startup(w)


def _startup(w: _Writer) -> None:
    w.emit(_areal(w, "[FSDPEngine Rank 0]", "INFO", "Initializing device mesh with parallel dims (dp=8, sp=1, tp=1)."))
    w.emit(_areal(w, "LauncherUtils", "INFO", f"Found 1 rollout servers: {ADDR[0]}:{ADDR[1]}"))
    w.emit(_areal(w, ENGINE, "INFO", "Get server addresses from name_resolve."))
    w.emit(_areal(w, ENGINE, "INFO", "Waiting for server ready..."))
    w.emit(_areal(w, ENGINE, "INFO", "Servers are all ready!"), "server_ready")


def _server_crash(w: _Writer, g: int) -> None:
    """Incident 1: the server is gone; rollouts fail, then rank 0 dies in the weight update."""
    for _ in range(8):
        _refused_rollout(w)
    host, port = ADDR
    for attempt in (1, 2, 3):
        msg = formats.refused_warning(host, port, "/update_weights_from_disk", attempt, 3)
        w.emit(_areal(w, "HTTPUtils", "WARNING", msg), "connection_refused")
    final = formats.refused_error(host, port, "/update_weights_from_disk", "{'model_path': '/tmp/w/v1'}")
    w.emit_block(
        formats.update_weights_traceback(final), {TB: ("traceback",), "RuntimeError: Failed": ("connection_refused",)}
    )
    _torchrun_failure(w, 1)
    _relaunch(w, g, busy=w.rng.random() < 0.5)


def _oom(w: _Writer, g: int) -> None:
    frames = [
        (f"{formats.SITE}/areal/engine/fsdp_engine.py", 512, "train_batch", "loss = self._forward(mb)"),
        (f"{formats.SITE}/torch/nn/modules/module.py", 1751, "_call_impl", "return forward_call(*args, **kwargs)"),
    ]
    final = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.15 GiB. GPU 3 has a total capacity of "
        "139.72 GiB of which 1.80 GiB is free. Including non-PyTorch memory, this process has 137.61 GiB memory in "
        "use. Of the allocated memory 131.66 GiB is allocated by PyTorch, and 4.11 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    w.emit_block(
        formats.traceback_block(frames, final, prefix="[rank3]: "),
        {TB: ("traceback",), "CUDA out of memory": ("cuda_oom",)},
    )
    _torchrun_failure(w, 1)
    _relaunch(w, g)


def _nccl_timeout(w: _Writer, g: int) -> None:
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(w.t))
    watchdog = (
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, "
        "NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600030 milliseconds before timing out."
    )
    w.emit(f"[rank0]:[E{stamp}.903881913 ProcessGroupNCCL.cpp:616] {watchdog}", "nccl_timeout")
    w.emit(
        f"[rank0]:[E{stamp}.904000000 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 0] Exception "
        "(either an error or timeout) detected by watchdog at work: 808, last enqueued NCCL work: 811, last "
        "completed NCCL work: 807."
    )
    w.emit(
        f"[rank0]:[E{stamp}.904100000 ProcessGroupNCCL.cpp:630] [Rank 0] Some NCCL operations have failed or "
        "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data."
    )
    w.emit("terminate called after throwing an instance of 'c10::DistBackendError'")
    w.emit(
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: "
        + watchdog,
        "nccl_timeout",
    )
    _torchrun_failure(w, -6)
    _relaunch(w, g)


def _nccl_error(w: _Writer, g: int) -> None:
    frames = [
        (f"{formats.SITE}/areal/engine/fsdp_engine.py", 388, "upload_weights", "dist.broadcast(tensor, src=0)"),
        (f"{formats.SITE}/torch/distributed/distributed_c10d.py", 2730, "broadcast", "work.wait()"),
    ]
    final = (
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1333, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Last error:\n"
        "Cuda failure 'an illegal memory access was encountered'"
    )
    text = formats.traceback_block(frames, final, prefix="[rank1]: ")
    w.emit_block(
        text, {TB: ("traceback",), "NCCL error in": ("nccl_error",), "ncclUnhandledCudaError": ("nccl_error",)}
    )
    _torchrun_failure(w, 1)
    _relaunch(w, g)


def _slow_request(w: _Writer) -> None:
    host, port = ADDR
    msg = f"HTTP request to {host}:{port}/generate timed out after 3600.00s (attempt 1/3)"
    w.emit(_areal(w, "HTTPUtils", "WARNING", msg), "timeout")


def _name_resolve_timeout(w: _Writer, g: int) -> None:
    key = f"root/gsm8k-grpo/trial0/update_weights_from_disk/{g}"
    frames = [
        (f"{formats.SITE}/areal/core/remote_inf_engine.py", 866, "_update_weights_from_disk", "name_resolve.wait("),
        (f"{formats.SITE}/areal/utils/name_resolve.py", 1204, "wait", ""),
    ]
    final = f"TimeoutError: Timeout waiting for key '{key}' (NfsNameRecordRepository)"
    w.emit_block(
        formats.traceback_block(frames, final, prefix="[rank0]: "),
        {TB: ("traceback",), "TimeoutError: Timeout waiting": ("timeout",)},
    )
    _torchrun_failure(w, 1)
    _relaunch(w, g)


def _server_abort(w: _Writer) -> None:
    # What a colocated SGLang child prints into the same stream when its scheduler dies.
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(w.t))
    w.emit(f"[{stamp}] Received sigquit from a child process. It usually means the child failed.", "engine_dead")


def _brake(w: _Writer) -> None:
    free = w.rng.uniform(0.5, 1.9)
    w.emit(
        formats.pylog("worker", "WARNING", f"emergency brake: free memory {free:.1f} GiB below 2.0 GiB, pausing", w.t),
        "emergency_brake",
    )


def _kernel_oom(w: _Writer) -> None:
    pid = w.rng.randint(30000, 60000)
    w.emit(
        f"[{w.t - START + 86400:.6f}] Out of memory: Killed process {pid} (python3) total-vm:98765432kB, "
        "anon-rss:61234567kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:123456kB oom_score_adj:0",
        "oom_kill",
    )


# Rare pieces: (every how many steps, what). Offsets keep them from landing on the same step.
_RARE = (
    (6151, "server_crash"),
    (9377, "oom"),
    (11003, "nccl_timeout"),
    (13109, "nccl_error"),
    (2011, "slow_request"),
    (15013, "name_resolve_timeout"),
    (7919, "server_abort"),
    (1499, "brake"),
    (4999, "kernel_oom"),
)


def _rare(w: _Writer, what: str, g: int) -> None:
    if what == "server_crash":
        _server_crash(w, g)
    elif what == "oom":
        _oom(w, g)
    elif what == "nccl_timeout":
        _nccl_timeout(w, g)
    elif what == "nccl_error":
        _nccl_error(w, g)
    elif what == "slow_request":
        _slow_request(w)
    elif what == "name_resolve_timeout":
        _name_resolve_timeout(w, g)
    elif what == "server_abort":
        _server_abort(w)
    elif what == "brake":
        _brake(w)
    elif what == "kernel_oom":
        _kernel_oom(w)


AIOHTTP = f"{formats.SITE}/aiohttp"
HAPPY = f"{formats.SITE}/aiohappyeyeballs"
ASYNCIO = "/usr/lib/python3.12/asyncio"
CHAINED = "During handling of the above exception, another exception occurred:"
CAUSE = "The above exception was the direct cause of the following exception:"


def _frames(frames: list[tuple[str, int, str, str, int]], prefix: str) -> list[str]:
    """Traceback frames as Python 3.12 prints them: a ``^^^^`` line under a call that is not the whole line."""
    out = []
    for path, lineno, func, source, carets in frames:
        out.append(f'{prefix}  File "{path}", line {lineno}, in {func}')
        if source:
            out.append(f"{prefix}    {source}")
            if carets:  # the last ``carets`` characters of the source are the failing expression
                out.append(f"{prefix}    {' ' * (len(source) - carets)}{'^' * carets}")
    return out


def _chained_refused(w: _Writer, endpoint: str, payload: str, *, prefix: str = "") -> None:
    """A refused request as AReaL's ``arequest_with_retry`` reports it with aiohttp 3.13 (incident 1): the socket's
    ConnectionRefusedError, aiohttp's ClientConnectorError raised from it, and the RuntimeError raised while
    handling that, three chained tracebacks, each ended by its exception line."""
    host, port = ADDR
    lines = [f"{prefix}{TB}"]
    lines += _frames(
        [
            (
                f"{AIOHTTP}/connector.py",
                1268,
                "_wrap_create_connection",
                "sock = await aiohappyeyeballs.start_connection(",
                0,
            ),
            (f"{HAPPY}/impl.py", 122, "start_connection", "raise first_exception", 0),
            (f"{HAPPY}/impl.py", 73, "start_connection", "sock = await _connect_sock(", 0),
            (f"{HAPPY}/impl.py", 208, "_connect_sock", "await loop.sock_connect(sock, address)", 0),
            (f"{ASYNCIO}/selector_events.py", 651, "sock_connect", "return await fut", 0),
            (f"{ASYNCIO}/futures.py", 287, "__await__", "yield self  # This tells Task to wait for completion.", 0),
            (f"{ASYNCIO}/tasks.py", 385, "__wakeup", "future.result()", 0),
            (f"{ASYNCIO}/futures.py", 203, "result", "raise self._exception.with_traceback(self._exception_tb)", 0),
            (
                f"{ASYNCIO}/selector_events.py",
                691,
                "_sock_connect_cb",
                "raise OSError(err, f'Connect call failed {address}')",
                0,
            ),
        ],
        prefix,
    )
    lines.append(f"{prefix}ConnectionRefusedError: [Errno 111] Connect call failed ('{host}', {port})")
    lines += [prefix, f"{prefix}{CAUSE}", prefix, f"{prefix}{TB}"]
    lines += _frames(
        [
            (f"{formats.SITE}/areal/utils/http.py", 112, "arequest_with_retry", "async with session.request(", 0),
            (f"{AIOHTTP}/client.py", 1488, "__aenter__", "self._resp: _RetType = await self._coro", 16),
            (f"{AIOHTTP}/client.py", 770, "_request", "resp = await handler(req)", 0),
            (f"{AIOHTTP}/client.py", 725, "_connect_and_send_request", "conn = await self._connector.connect(", 0),
            (
                f"{AIOHTTP}/connector.py",
                642,
                "connect",
                "proto = await self._create_connection(req, traces, timeout)",
                51,
            ),
            (
                f"{AIOHTTP}/connector.py",
                1355,
                "_create_connection",
                "_, proto = await self._create_direct_connection(req, traces, timeout)",
                0,
            ),
            (f"{AIOHTTP}/connector.py", 1330, "_create_direct_connection", "raise last_exc", 0),
            (
                f"{AIOHTTP}/connector.py",
                1299,
                "_create_direct_connection",
                "transp, proto = await self._wrap_create_connection(",
                0,
            ),
            (
                f"{AIOHTTP}/connector.py",
                1283,
                "_wrap_create_connection",
                "raise client_error(req.connection_key, exc) from exc",
                0,
            ),
        ],
        prefix,
    )
    lines.append(
        f"{prefix}aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host {host}:{port} ssl:default "
        f"[Connect call failed ('{host}', {port})]"
    )
    lines += [prefix, f"{prefix}{CHAINED}", prefix]
    final = formats.refused_error(host, port, endpoint, payload)
    if endpoint == "/generate":
        block = formats.workflow_traceback(final)
        lines = [_areal(w, ENGINE, "ERROR", f"Workflow execution failed: {final}"), *lines]
    else:
        block = formats.update_weights_traceback(final)
    lines += [f"{prefix}{part}" if not part.startswith(prefix) else part for part in block.split("\n")]
    w.emit_block(
        "\n".join(lines),
        {
            "Workflow execution failed": ("connection_refused",),
            TB: ("traceback",),
            "ConnectionRefusedError: [Errno": ("connection_refused",),
            "ClientConnectorError: Cannot": ("connection_refused",),
            "RuntimeError: Failed": ("connection_refused",),
        },
    )


def _dense_rollouts(w: _Writer, n: int) -> None:
    """``n`` rollouts against a dead server, each with its three retry warnings and its chained tracebacks."""
    host, port = ADDR
    for _ in range(n):
        for attempt in (1, 2, 3):
            msg = formats.refused_warning(host, port, "/generate", attempt, 3)
            w.emit(_areal(w, "HTTPUtils", "WARNING", msg), "connection_refused")
            w.t += 1.0
        _chained_refused(w, "/generate", "{'input_ids': [151644, 8948, 198]}")


def _dense_crash(w: _Writer, g: int) -> None:
    """Rank 0 dies in the weight update behind the dead server; torchrun reports it and relaunches."""
    _chained_refused(w, "/update_weights_from_disk", "{'model_path': '/tmp/w/v1'}", prefix="[rank0]: ")
    _torchrun_failure(w, 1)
    _relaunch(w, g, busy=w.rng.random() < 0.3)


# What comes after the refused rollouts of each stretch of an incident-dense log, in turn.
_DENSE_TAIL = ("crash", "oom", "name_resolve_timeout", "nccl_timeout", "crash", "nccl_error", "slow_request", "brake")


def _dense(w: _Writer, target_bytes: int, tables: list[list[str]]) -> int:
    """An incident-dense log: a crashed server that the trainer keeps retrying for hours (incident 1), one healthy
    step between stretches of ten refused rollouts, and every stretch ended by another failure in turn."""
    total = _steps_for(target_bytes)
    _startup(w)
    g = 0
    turn = 0
    while w.written < target_bytes:
        _step(w, g, total, tables)
        g += 1
        _dense_rollouts(w, 10)
        what = _DENSE_TAIL[turn % len(_DENSE_TAIL)]
        turn += 1
        if what == "crash":
            _dense_crash(w, g)
        else:
            _rare(w, what, g)
        if turn % 7 == 0:
            _server_abort(w)
        if turn % 11 == 0:
            _kernel_oom(w)
    return g


def _steps_for(target: int) -> int:
    # About 13.9 KB per healthy step; the total is announced in every step line, so it is fixed up front.
    return max(10, target // 13_850)


def generate(out: Path, target_bytes: int, seed: int = 7, *, dense: bool = False) -> Dataset:
    """Write about ``target_bytes`` of log to ``out`` and return what it holds: a calm run with rare failures, or
    (``dense``) a run in an incident, where a large share of the lines are failures and their tracebacks."""
    out.parent.mkdir(parents=True, exist_ok=True)
    w = _Writer(out.open("wb"), seed)
    tables = _tables(w.rng)
    g = _dense(w, target_bytes, tables) if dense else _calm(w, target_bytes, tables)
    w.close()
    expected = {k: w.counts.get(k, 0) for k in REPORTED_KINDS}
    return Dataset(path=out, size=out.stat().st_size, lines=w.lines, steps=g, expected=expected, any_kind=w.any_kind)


def _calm(w: _Writer, target_bytes: int, tables: list[list[str]]) -> int:
    total = _steps_for(target_bytes)
    _startup(w)
    g = 0
    while w.written < target_bytes:
        _step(w, g, total, tables)
        g += 1
        for every, what in _RARE:
            if g % every == every // 2:
                _rare(w, what, g)
    return g


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".expected.json")


def _key(target_bytes: int, seed: int, dense: bool) -> str:
    text = f"{GENERATOR_VERSION}:{target_bytes}:{seed}" + (f":dense{DENSE_VERSION}" if dense else "")
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def ensure_dataset(path: Path, target_bytes: int, seed: int = 7, *, dense: bool = False) -> Dataset:
    """The dataset at ``path``, generated only when it is missing or was made with other parameters."""
    meta = _meta_path(path)
    key = _key(target_bytes, seed, dense)
    try:
        saved = json.loads(meta.read_text())
        if saved["key"] == key and path.stat().st_size == saved["size"]:
            return Dataset(
                path=path,
                size=saved["size"],
                lines=saved["lines"],
                steps=saved["steps"],
                expected=saved["expected"],
                any_kind=saved["any_kind"],
            )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    ds = generate(path, target_bytes, seed, dense=dense)
    meta.write_text(
        json.dumps(
            {
                "key": key,
                "size": ds.size,
                "lines": ds.lines,
                "steps": ds.steps,
                "expected": ds.expected,
                "any_kind": ds.any_kind,
            },
            indent=1,
        )
    )
    return ds


class LiveStream:
    """Step after step of the same text, stamped with the current time, for logs that grow while rlwatch runs.

    Every ``rare_every`` steps a rare piece (a slow request, a brake, a server crash with its relaunch, ...) is
    mixed in, so the event kinds keep moving too.
    """

    def __init__(self, seed: int = 11, rare_every: int = 25, ranks: int = RANKS) -> None:
        self._buf = io.BytesIO()
        self._w = _Writer(self._buf, seed)
        self._tables = _tables(self._w.rng)
        self._g = 0
        self._rare_every = rare_every
        self._rare = 0
        self._ranks = ranks

    def next_step(self) -> bytes:
        """The text of the next training step (about 14 KB), as bytes ready to append."""
        w = self._w
        w.t = time.time() - STEP_S
        _step(w, self._g, 1_000_000, self._tables)
        self._g += 1
        if self._rare_every and self._g % self._rare_every == 0:
            _, what = _RARE[self._rare % len(_RARE)]
            self._rare += 1
            _rare(w, what, self._g)
        w.flush()
        data = self._buf.getvalue()
        self._buf.seek(0)
        self._buf.truncate()
        return data


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.datagen OUT MIB [--dense]``: write a log and print what it holds."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.datagen")
    p.add_argument("out", type=Path)
    p.add_argument("mib", type=float, help="size in MiB")
    p.add_argument("--dense", action="store_true", help="an incident-dense log (chained tracebacks, many kinds)")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    ds = generate(args.out, int(args.mib * (1 << 20)), args.seed, dense=args.dense)
    share = ds.any_kind / max(ds.lines, 1)
    print(json.dumps({"size": ds.size, "lines": ds.lines, "matching_share": round(share, 4), "expected": ds.expected}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
