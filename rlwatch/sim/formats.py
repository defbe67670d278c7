"""Log lines exactly as the real tools print them, built from the current local time.

Only text is produced here; which file a line goes to, and how it is counted, is the writer's business.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rlwatch.common.signals import signal_text

# AReaL v0.5: colorlog's "%(log_color)s" + "(AReaL) %(log_color)s%(asctime)s.%(msecs)03d %(name)s %(levelname)s: "
# "%(message)s", the header hard-coded in a bold "milk tea" colour, a reset appended to every record.
AREAL_HEADER = "\x1b[1;38;2;180;140;80m(AReaL)\x1b[0m"
RESET = "\x1b[0m"
LEVEL_COLOURS = {"DEBUG": "\x1b[34m", "INFO": "\x1b[92m", "WARNING": "\x1b[33m", "ERROR": "\x1b[31m"}


def _now(t: float | None) -> float:
    return time.time() if t is None else t


def areal(logger: str, level: str, message: str, t: float | None = None) -> str:
    """One AReaL log record. A multi-line message (a table, a traceback) keeps its colour open until the end."""
    t = _now(t)
    colour = LEVEL_COLOURS.get(level, "")
    stamp = time.strftime("%Y%m%d-%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"
    return f"{colour}{AREAL_HEADER} {colour}{stamp} {logger} {level}: {message}{RESET}"


def sglang(message: str, t: float | None = None) -> str:
    """SGLang's ``[%(asctime)s] %(message)s`` (a tp=1 server has no DP/TP prefix)."""
    return f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(_now(t)))}] {message}"


def uvicorn(message: str, level: str = "INFO") -> str:
    """Uvicorn's default format, used by ``trl vllm-serve``: the level padded to nine columns, no timestamp."""
    return f"{level + ':':<9} {message}"


def uvicorn_access(client_port: int, method: str, path: str, status: int) -> str:
    phrase = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}.get(status, "")
    return uvicorn(f'127.0.0.1:{client_port} - "{method} {path} HTTP/1.1" {status} {phrase}'.rstrip())


def vllm(level: str, where: str, message: str, t: float | None = None) -> str:
    """vLLM's ``%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s`` with ``%m-%d %H:%M:%S``."""
    return f"{level} {time.strftime('%m-%d %H:%M:%S', time.localtime(_now(t)))} [{where}] {message}"


def pylog(name: str, level: str, message: str, t: float | None = None) -> str:
    """Python logging's ``%(asctime)s %(name)s %(levelname)s %(message)s``, as a plain worker script would use."""
    t = _now(t)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}"
    return f"{stamp} {name} {level} {message}"


def stamp_iso(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(_now(t)))


def _cell(value: object) -> tuple[str, bool]:
    if isinstance(value, float):
        return f"{value:.4e}", True
    if isinstance(value, int):
        return str(value), True
    return str(value), False


def fancy_grid(stats: Sequence[tuple[str, float]], col: int = 4) -> str:
    """AReaL's ``tabulate_stats``: key/value pairs, ``col`` pairs per row filled column-major, ``fancy_grid``."""
    items = list(stats)
    rows_n = (len(items) + col - 1) // col
    rows: list[list[tuple[str, bool]]] = []
    for i in range(rows_n):
        row: list[tuple[str, bool]] = []
        for j in range(col):
            k = i + j * rows_n
            if k < len(items):
                row.extend([_cell(items[k][0]), _cell(items[k][1])])
        rows.append(row)
    ncols = max((len(r) for r in rows), default=0)
    widths = [max((len(r[c][0]) for r in rows if c < len(r)), default=0) for c in range(ncols)]

    def rule(left: str, fill: str, mid: str, right: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    out = [rule("╒", "═", "╤", "╕")]
    for n, row in enumerate(rows):
        cells = []
        for c in range(ncols):
            text, numeric = row[c] if c < len(row) else ("", False)
            cells.append(" " + (text.rjust(widths[c]) if numeric else text.ljust(widths[c])) + " ")
        out.append("│" + "│".join(cells) + "│")
        out.append(rule("├", "─", "┼", "┤") if n < len(rows) - 1 else rule("╘", "═", "╧", "╛"))
    return "\n".join(out)


def traceback_block(frames: Sequence[tuple[str, int, str, str]], final: str, prefix: str = "") -> str:
    """A Python traceback: ``(file, line, function, source)`` frames, innermost last, then the exception line."""
    lines = ["Traceback (most recent call last):"]
    for path, lineno, func, source in frames:
        lines.append(f'  File "{path}", line {lineno}, in {func}')
        if source:
            lines.append(f"    {source}")
    lines.extend(final.split("\n"))
    return "\n".join(prefix + line for line in lines)


SITE = "/usr/local/lib/python3.12/site-packages"

CUDA_BUSY = (
    "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)


def cuda_busy_traceback() -> str:
    """What SGLang prints when another process holds a GPU in EXCLUSIVE_PROCESS mode (incident 4)."""
    frames = [
        ("<frozen runpy>", 198, "_run_module_as_main", ""),
        ("<frozen runpy>", 88, "_run_code", ""),
        (f"{SITE}/sglang/launch_server.py", 14, "<module>", "launch_server(server_args)"),
        (
            f"{SITE}/sglang/srt/entrypoints/http_server.py",
            1086,
            "launch_server",
            "tokenizer_manager, template_manager, scheduler_info = _launch_subprocesses(server_args=server_args)",
        ),
        (
            f"{SITE}/sglang/srt/entrypoints/engine.py",
            742,
            "_launch_subprocesses",
            "_set_envs_and_config(server_args)",
        ),
        (f"{SITE}/sglang/srt/entrypoints/engine.py", 655, "_set_envs_and_config", "torch.cuda.set_device(0)"),
        (f"{SITE}/torch/cuda/__init__.py", 567, "set_device", "torch._C._cuda_setDevice(device)"),
        (f"{SITE}/torch/cuda/__init__.py", 410, "_lazy_init", "torch._C._cuda_init()"),
    ]
    return traceback_block(frames, CUDA_BUSY)


def train_step_traceback(final: str) -> str:
    """AReaL's rank 0 dying inside its training step (a CUDA error raised by the backward pass)."""
    frames = [
        (f"{SITE}/areal/examples/gsm8k_grpo.py", 231, "<module>", "main(sys.argv[1:])"),
        (f"{SITE}/areal/examples/gsm8k_grpo.py", 176, "main", "stats = actor.ppo_update(batch)"),
        (f"{SITE}/areal/engine/ppo/actor.py", 402, "ppo_update", "train_stat = self.engine.train_batch("),
        (f"{SITE}/areal/engine/fsdp_engine.py", 588, "train_batch", "loss.backward()"),
        (f"{SITE}/torch/_tensor.py", 648, "backward", "torch.autograd.backward("),
    ]
    return traceback_block(frames, final, prefix="[rank0]: ")


# A GPU gone from the bus, as torch then reports it (cudaErrorLaunchFailure's string), then CUDA's usual advice.
CUDA_LAUNCH_FAILURE = (
    "RuntimeError: CUDA error: unspecified launch failure\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)


def dataloader_bus_error(worker_pid: int) -> str:
    """PyTorch's DataLoader over a full /dev/shm (open-mmlab/mmsegmentation#1356): the worker's C++ handler's line,
    then the main process's traceback from ``_try_get_data`` through the SIGCHLD handler."""
    frames = [
        (f"{SITE}/areal/examples/gsm8k_grpo.py", 231, "<module>", "main(sys.argv[1:])"),
        (f"{SITE}/areal/examples/gsm8k_grpo.py", 142, "main", "data = next(data_generator)"),
        (f"{SITE}/torch/utils/data/dataloader.py", 733, "__next__", "data = self._next_data()"),
        (f"{SITE}/torch/utils/data/dataloader.py", 1480, "_next_data", "idx, data = self._get_data()"),
        (f"{SITE}/torch/utils/data/dataloader.py", 1442, "_get_data", "success, data = self._try_get_data()"),
        (
            f"{SITE}/torch/utils/data/dataloader.py",
            1284,
            "_try_get_data",
            "data = self._data_queue.get(timeout=timeout)",
        ),
        ("/usr/lib/python3.12/queue.py", 180, "get", "self.not_empty.wait(remaining)"),
        ("/usr/lib/python3.12/threading.py", 359, "wait", "gotit = waiter.acquire(True, timeout)"),
        (f"{SITE}/torch/utils/data/_utils/signal_handling.py", 73, "handler", "_error_if_any_worker_fails()"),
    ]
    final = (
        f"RuntimeError: DataLoader worker (pid {worker_pid}) is killed by signal: Bus error. It is possible that "
        "dataloader's workers are out of shared memory. Please try to raise your shared memory limit."
    )
    head = (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm)."
    )
    return head + "\n" + traceback_block(frames, final)


def refused_error(host: str, port: int, endpoint: str, payload: str) -> str:
    """aiohttp 3.13's repr of a refused connection inside AReaL's ``arequest_with_retry`` RuntimeError."""
    return (
        f"RuntimeError: Failed after 3 retries each. Payload: {payload}. Addr: {host}:{port}. Endpoint: {endpoint}. "
        f"Last error: ClientConnectorError(ConnectionKey(host='{host}', port={port}, is_ssl=False, ssl=True, "
        f"proxy=None, proxy_auth=None, proxy_headers_hash=None), ConnectionRefusedError(111, "
        f"\"Connect call failed ('{host}', {port})\"))"
    )


def refused_warning(host: str, port: int, endpoint: str, attempt: int, retries: int) -> str:
    return (
        f"HTTP request to {host}:{port}{endpoint} failed with ClientConnectorError: Cannot connect to host "
        f"{host}:{port} ssl:default [Connect call failed ('{host}', {port})] (attempt {attempt}/{retries})"
    )


def workflow_traceback(final: str) -> str:
    frames = [
        (
            f"{SITE}/areal/core/workflow_executor.py",
            412,
            "_execute_workflow",
            "traj = await task_input.workflow.arun_episode(self.inference_engine, task_input.data)",
        ),
        (
            f"{SITE}/areal/workflow/rlvr.py",
            88,
            "arun_episode",
            "resps = await asyncio.gather(*[engine.agenerate(req) for _ in range(n_samples)])",
        ),
        (f"{SITE}/areal/core/remote_inf_engine.py", 640, "agenerate", "result = await arequest_with_retry("),
        (f"{SITE}/areal/utils/http.py", 141, "arequest_with_retry", "raise RuntimeError("),
    ]
    return traceback_block(frames, final)


def update_weights_traceback(final: str) -> str:
    """Rank 0 dies in ``fut.result()`` of a disk weight update; torch prefixes each line with ``[rank0]: ``."""
    frames = [
        (f"{SITE}/areal/examples/gsm8k_grpo.py", 231, "<module>", "main(sys.argv[1:])"),
        (f"{SITE}/areal/examples/gsm8k_grpo.py", 188, "main", "rollout.update_weights(weight_update_meta)"),
        (
            f"{SITE}/areal/core/remote_inf_engine.py",
            812,
            "update_weights",
            "return self._update_weights_from_disk(meta)",
        ),
        (f"{SITE}/areal/core/remote_inf_engine.py", 866, "_update_weights_from_disk", "fut.result()"),
        ("/usr/lib/python3.12/concurrent/futures/_base.py", 456, "result", "return self.__get_result()"),
        ("/usr/lib/python3.12/concurrent/futures/_base.py", 401, "__get_result", "raise self._exception"),
        (f"{SITE}/areal/utils/http.py", 141, "arequest_with_retry", "raise RuntimeError("),
    ]
    return traceback_block(frames, final, prefix="[rank0]: ")


def torchrun_failure_report(pid: int, script: str, host: str, exitcode: int, t: float | None = None) -> str:
    """torchrun's elastic agent report after its only rank failed."""
    t = _now(t)
    clock = time.strftime("%m%d %H:%M:%S", time.localtime(t)) + f".{int(t * 1e6) % 1_000_000:06d}"
    first = (
        f"E{clock} {pid + 1} torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: {exitcode}) "
        f"local_rank: 0 (pid: {pid}) of binary: /usr/bin/python3"
    )
    frames = [
        ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
        (
            f"{SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py",
            357,
            "wrapper",
            "return f(*args, **kwargs)",
        ),
        (f"{SITE}/torch/distributed/run.py", 901, "main", "run(args)"),
        (f"{SITE}/torch/distributed/run.py", 892, "run", "elastic_launch("),
        (
            f"{SITE}/torch/distributed/launcher/api.py",
            143,
            "__call__",
            "return launch_agent(self._config, self._entrypoint, list(args))",
        ),
        # The source line of the raise is left out so that exactly one line of the block names the error.
        (f"{SITE}/torch/distributed/launcher/api.py", 277, "launch_agent", ""),
    ]
    when = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(t))
    report = "\n".join(
        [
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "=" * 60,
            f"{script} FAILED",
            "-" * 60,
            "Failures:",
            "  <NO_OTHER_FAILURES>",
            "-" * 60,
            "Root Cause (first observed failure):",
            "[0]:",
            f"  time      : {when}",
            f"  host      : {host}",
            "  rank      : 0 (local_rank: 0)",
            f"  exitcode  : {exitcode} (pid: {pid})",
            "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            "=" * 60,
        ]
    )
    return first + "\n" + traceback_block(frames, report)


# --------------------------------------------------------------------------------------------------------------------
# tqdm and transformers 5 as a colocated TRL GRPO run prints them (tests/real/trl-grpo-colocated/run/train.log)

TQDM_PARTS = " ▏▎▍▌▋▊▉"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def tqdm_bar(n: int, total: int, elapsed: float, desc: str = "") -> str:
    """tqdm's default bar: ``{desc}: {pct:3.0f}%|{bar:10}| {n}/{total} [{elapsed}<{remaining}, {rate}]``.

    The bar is ten cells filled in eighths, the rate in ``it/s`` or, below one a second, ``s/it``; before the first
    item the remaining time and the rate are ``?``.
    """
    frac = n / total if total else 0.0
    full, part = divmod(int(frac * 10 * 8), 8)
    bar = ("█" * full + (TQDM_PARTS[part] if part and full < 10 else "")).ljust(10)
    if n and elapsed > 0:
        rate = n / elapsed
        remaining = _clock((total - n) / rate)
        rate_text = f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"
    else:
        remaining, rate_text = "?", "?it/s"
    head = f"{desc}: " if desc else ""
    return f"{head}{frac * 100:3.0f}%|{bar}| {n}/{total} [{_clock(elapsed)}<{remaining}, {rate_text}]"


def hf_logs(logs: dict[str, float]) -> str:
    """transformers 5's ``Trainer.log`` on the console: ``str()`` of the dict with every value as ``f"{v:.4g}"``."""
    return str({k: f"{v:.4g}" for k, v in logs.items()})


# --------------------------------------------------------------------------------------------------------------------
# torchrun (torch 2.11) and ProcessGroupNCCL (tests/real/torchrun-nccl-timeout-2gpu/torchrun.log)

TORCHRUN_BANNER = (
    "",
    "*****************************************",
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being "
    "overloaded, please further tune the variable for optimal performance in your application as needed. ",
    "*****************************************",
)


def torch_pylog(level: str, pid: int, where: str, message: str, t: float | None = None) -> str:
    """torch.distributed's Python log records: ``W1124 06:49:27.842000 605 torch/distributed/run.py:851] ...``."""
    t = _now(t)
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}000"
    return f"{level[0]}{stamp} {pid} {where}] {message}"


def c10_log(rank: int, level: str, where: str, message: str, t: float | None = None) -> str:
    """A c10 log record with torch's rank prefix: ``[rank0]:[E1124 06:49:42.344864820 ProcessGroupNCCL.cpp:689] ``."""
    t = _now(t)
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(t)) + f".{int(t * 1e9) % 1_000_000_000:09d}"
    return f"[rank{rank}]:[{level[0]}{stamp} {where}] {message}"


def work_nccl(seq: int, numel: int, timeout_ms: int, ran_ms: int) -> str:
    return (
        f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, "
        f"NumelOut={numel}, Timeout(ms)={timeout_ms}) ran for {ran_ms} milliseconds before timing out."
    )


def _pg(rank: int) -> str:
    return f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"


DUMP_REASON = (
    "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of "
    "collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. Additionally, "
    "this can be caused by GIL deadlock or other reasons such as network errors or bugs in the communications library "
    "(e.g. NCCL), etc. "
)

TORCH_LIB = f"{SITE}/torch/lib"
CHECK_TIMEOUT_FRAMES = (
    "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:692 (most recent "
    "call first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
    f"std::allocator<char> >) + 0x9d (0x7f907d37305d in {TORCH_LIB}/libc10.so)\n"
    "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
    f"std::ratio<1l, 1000l> > >) + 0x2a7 (0x7f8fc8d02ba7 in {TORCH_LIB}/libtorch_cuda.so)\n"
    f"frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0x17b1 (0x7f8fc8d07fc1 in {TORCH_LIB}/libtorch_cuda.so)\n"
    f"frame #3: c10d::ProcessGroupNCCL::Watchdog::run() + 0x157 (0x7f8fc8d093b7 in {TORCH_LIB}/libtorch_cuda.so)\n"
    "frame #4: <unknown function> + 0xecdb4 (0x7f904d8ecdb4 in /lib/x86_64-linux-gnu/libstdc++.so.6)\n"
    "frame #5: <unknown function> + 0x9cb84 (0x7f907e69cb84 in /lib/x86_64-linux-gnu/libc.so.6)\n"
    "frame #6: <unknown function> + 0x129ecc (0x7f907e729ecc in /lib/x86_64-linux-gnu/libc.so.6)\n"
)
RUN_FRAMES = (
    "Exception raised from run at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2125 (most recent call "
    "first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
    f"std::allocator<char> >) + 0x9d (0x7f907d37305d in {TORCH_LIB}/libc10.so)\n"
    f"frame #1: <unknown function> + 0x68ef03 (0x7f8fc848ef03 in {TORCH_LIB}/libtorch_cuda.so)\n"
    "frame #2: <unknown function> + 0xecdb4 (0x7f904d8ecdb4 in /lib/x86_64-linux-gnu/libstdc++.so.6)\n"
    "frame #3: <unknown function> + 0x9cb84 (0x7f907e69cb84 in /lib/x86_64-linux-gnu/libc.so.6)\n"
    "frame #4: <unknown function> + 0x129ecc (0x7f907e729ecc in /lib/x86_64-linux-gnu/libc.so.6)\n"
)


def nccl_watchdog_timeout(rank: int, seq: int, timeout_ms: int, ran_ms: int, stack: Sequence[str]) -> str:
    """The timing-out rank's first records: the timeout, the failure, the failed collective's Python stack."""
    lines = [
        c10_log(rank, "E", "ProcessGroupNCCL.cpp:689", f"[Rank {rank}] {work_nccl(seq, 1048576, timeout_ms, ran_ms)}"),
        c10_log(
            rank,
            "E",
            "ProcessGroupNCCL.cpp:2303",
            f"{_pg(rank)}  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: "
            f"{seq}, last completed work: {seq - 1}",
        ),
        c10_log(rank, "E", "ProcessGroupNCCL.cpp:733", "Stack trace of the failed collective: "),
        *(f"#{i} {frame}" for i, frame in enumerate(stack)),
        "",
        c10_log(rank, "E", "ProcessGroupNCCL.cpp:2636", f"{_pg(rank)} First PG on this rank to signal dumping."),
    ]
    return "\n".join(lines)


def nccl_dump_signal(rank: int, seq: int, *, timed_out_rank: int) -> str:
    """Flight-recorder records: on the rank that timed out, and on the others that learn of it through the store."""
    lines = []
    if rank == timed_out_rank:
        source, enqueued = "this local rank", seq
    else:
        lines.append(
            c10_log(
                rank,
                "E",
                "ProcessGroupNCCL.cpp:1849",
                f"{_pg(rank)} Observed flight recorder dump signal from another rank via TCPStore.",
            )
        )
        source, enqueued = f" rank {timed_out_rank}", seq - 1
    lines.append(
        c10_log(
            rank,
            "E",
            "ProcessGroupNCCL.cpp:1914",
            f"{_pg(rank)} Received a dump signal due to a collective timeout from {source} and we will try our best to "
            f"dump the debug info. Last enqueued NCCL work: {enqueued}, last completed NCCL work: {seq - 1}."
            + DUMP_REASON,
        )
    )
    lines.append(
        c10_log(
            rank,
            "E",
            "ProcessGroupNCCL.cpp:1628",
            f"{_pg(rank)} ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1, only active "
            "collectives: 0",
        )
    )
    return "\n".join(lines)


def nccl_abort(rank: int, seq: int, timeout_ms: int, ran_ms: int) -> str:
    """The watchdog taking the process down: the second and third printings of the timeout, then ``terminate``."""
    failure = f"{_pg(rank)} Process group watchdog thread terminated with exception: [Rank {rank}] " + work_nccl(
        seq, 1048576, timeout_ms, ran_ms
    )
    lines = [
        c10_log(
            rank,
            "E",
            "ProcessGroupNCCL.cpp:750",
            f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA "
            "kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        ),
        c10_log(
            rank,
            "E",
            "ProcessGroupNCCL.cpp:764",
            f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
        ),
        c10_log(rank, "E", "ProcessGroupNCCL.cpp:2119", failure),
    ]
    return (
        "\n".join(lines)
        + "\n"
        + CHECK_TIMEOUT_FRAMES
        + "\nterminate called after throwing an instance of 'c10::DistBackendError'\n"
        + f"  what():  {failure}\n"
        + CHECK_TIMEOUT_FRAMES
        + "\n"
        + RUN_FRAMES
        + "\n"
    )


def _failure_entry(index: int, when: str, host: str, rank: int, exitcode: int, pid: int) -> list[str]:
    trace = (
        f"Signal {-exitcode} ({signal_text(-exitcode)}) received by PID {pid}"
        if exitcode < 0
        else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    )
    return [
        f"[{index}]:",
        f"  time      : {when}",
        f"  host      : {host}",
        f"  rank      : {rank} (local_rank: {rank})",
        f"  exitcode  : {exitcode} (pid: {pid})",
        "  error_file: <N/A>",
        f"  traceback : {trace}",
    ]


def torchrun_child_failed(
    agent_pid: int,
    script: str,
    host: str,
    binary: str,
    root: tuple[int, int, int],
    victims: Sequence[tuple[int, int, int]],
    t: float | None = None,
) -> str:
    """torch 2.11's elastic agent after a worker failed: which worker, the traceback of ``torchrun`` itself, and the
    ``ChildFailedError`` report with the other failures (the workers it stopped) and the root cause. ``root`` and each
    victim are (rank, exitcode, pid)."""
    t = _now(t)
    rank, exitcode, pid = root
    site = SITE
    first = torch_pylog(
        "E",
        agent_pid,
        "torch/distributed/elastic/multiprocessing/api.py:986",
        f"failed (exitcode: {exitcode}) local_rank: {rank} (pid: {pid}) of binary: {binary}",
        t,
    )
    when = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(t))
    failures: list[str] = []
    for v_rank, v_code, v_pid in victims:
        failures += _failure_entry(v_rank, when, host, v_rank, v_code, v_pid)
    rule = "=" * 53
    lines = [
        first,
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 10, in <module>',
        "    sys.exit(main())",
        "             ^^^^^^",
        f'  File "{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 362, in wrapper',
        "    return f(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^",
        f'  File "{site}/torch/distributed/run.py", line 990, in main',
        "    run(args)",
        f'  File "{site}/torch/distributed/run.py", line 981, in run',
        "    elastic_launch(",
        f'  File "{site}/torch/distributed/launcher/api.py", line 170, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{site}/torch/distributed/launcher/api.py", line 317, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        rule,
        f"{script} FAILED",
        "-" * 53,
        "Failures:",
        *(failures or ["  <NO_OTHER_FAILURES>"]),
        "-" * 53,
        "Root Cause (first observed failure):",
        *_failure_entry(rank, when, host, rank, exitcode, pid),
        rule,
    ]
    return "\n".join(lines)
