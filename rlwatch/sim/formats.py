"""Log lines exactly as the real tools print them (formats.md), built from the current local time.

Only text is produced here; which file a line goes to, and how it is counted, is the writer's business.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

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


def torchrun_failure(pid: int, script: str, host: str, exitcode: int, t: float | None = None) -> str:
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
