"""The inference-server stand-in: a real HTTP server on loopback, SGLang- or ``trl vllm-serve``-flavoured.

It takes an exclusive lock on the stand-in GPU device file, as a process on a GPU in EXCLUSIVE_PROCESS compute mode
does, and fails with PyTorch's real "busy or unavailable" error when a stray already holds it (incident 4). Faults:
``--die-after`` makes the process vanish without a word (incident 1), counted from its first weight update and
right after answering one, so that on a busy machine neither a slow trainer start nor the step's timing can move
the death before the run's first checkpoint or into a weight update;
``--hang-after`` keeps it accepting connections without ever answering, and ``--hang-on-shutdown`` makes SIGTERM
start a shutdown that never finishes (incident 5's servers). All durations are demo seconds, divided by ``--speed``.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from rlwatch.sim import formats, lifeline
from rlwatch.sim.common import Layout, base_parser, scaled
from rlwatch.sim.ledger import LogSink, PieceLedger

MODEL = "Qwen/Qwen2.5-1.5B-Instruct"


class Server:
    def __init__(self, layout: Layout, flavour: str, port: int, speed: float, seed: int) -> None:
        self.layout = layout
        self.flavour = flavour
        self.port = port
        self.speed = speed
        self.rng = random.Random(seed)
        self.ledger = PieceLedger(layout, "server")
        self.out = LogSink(self.ledger)
        self.hang = threading.Event()
        self._die_after: float | None = None  # seconds after the first weight update (``--die-after``)
        self._die_at: float | None = None  # monotonic, once the first weight update came
        self.dying = False
        self.device_fd: int | None = None
        self.httpd: ThreadingHTTPServer | None = None
        self.requests = 0

    # ------------------------------------------------------------------------------------------------ lines
    def log(self, message: str) -> None:
        if self.flavour == "sglang":
            self.out.write(formats.sglang(message))
        else:
            self.out.write(formats.vllm("INFO", "llm_engine.py:242", message))

    def access(self, client_port: int, method: str, path: str, status: int) -> None:
        if self.flavour == "trl":
            self.out.write(formats.uvicorn_access(client_port, method, path, status))

    # ------------------------------------------------------------------------------------------------ start
    def take_device(self) -> bool:
        """Open and exclusively lock the stand-in device; on failure print the real CUDA error and say so."""
        try:
            fd = os.open(self.layout.device, os.O_RDWR)
        except OSError as exc:
            self.out.write(formats.traceback_block([], f"RuntimeError: No CUDA GPUs are available ({exc.strerror})"))
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            self.out.write(formats.cuda_busy_traceback())
            return False
        self.device_fd = fd
        return True

    def banner(self) -> None:
        if self.flavour == "sglang":
            self.out.write(
                formats.areal(
                    "SGLangWrapper",
                    "INFO",
                    f"Launch command: python3 -m sglang.launch_server --model-path {MODEL} --tp-size 1 "
                    f"--base-gpu-id 0 --nnodes 1 --node-rank 0 --mem-fraction-static 0.8 --log-level warning "
                    f"--log-level-http warning --host 127.0.0.1 --port {self.port}",
                )
            )
            self.log(
                f"server_args=ServerArgs(model_path='{MODEL}', tokenizer_path='{MODEL}', host='127.0.0.1', "
                f"port={self.port}, mem_fraction_static=0.8, tp_size=1, random_seed=1, log_level='warning')"
            )
        else:
            self.out.write(formats.vllm("INFO", "__init__.py:239", "Automatically detected platform cuda."))
            self.out.write(
                formats.vllm("INFO", "vllm_serve.py:412", f"Starting vLLM server on http://127.0.0.1:{self.port}")
            )

    def exits(self, code: int) -> None:
        """AReaL's wrapper reports a server that ended on its own."""
        if self.flavour == "sglang":
            url = f"http://127.0.0.1:{self.port}"
            self.out.write(formats.areal("SGLangWrapper", "INFO", f"SGLang server {url} exits, returncode={code}"))

    def load(self) -> None:
        if self.flavour == "sglang":
            self.log("Load weight begin. avail mem=139.12 GB")
            time.sleep(scaled(1.5, self.speed))
            self.log(
                "Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=136.02 GB, mem usage=3.10 GB."
            )
            self.log("KV Cache is allocated. #tokens: 1942656, K size: 52.13 GB, V size: 52.13 GB")
            time.sleep(scaled(1.0, self.speed))
            self.log("Capture cuda graph end. Time elapsed: 12.45 s. mem usage=1.24 GB. avail mem=30.05 GB.")
            self.log(
                "max_total_num_tokens=1942656, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                "max_running_requests=4096, context_len=32768, available_gpu_mem=30.05 GB"
            )
        else:
            time.sleep(scaled(1.5, self.speed))
            self.out.write(formats.vllm("INFO", "default_loader.py:384", "Loading weights took 4.21 seconds"))
            self.out.write(
                formats.vllm("INFO", "gpu_model_runner.py:1612", "Model loading took 15.27 GiB and 5.04 seconds")
            )
            time.sleep(scaled(1.0, self.speed))
            self.out.write(formats.vllm("INFO", "kv_cache_utils.py:634", "GPU KV cache size: 1,062,592 tokens"))

    def serve(self) -> ThreadingHTTPServer:
        handler = type("Handler", (_Handler,), {"sim": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        httpd.daemon_threads = True
        self.httpd = httpd
        return httpd

    def ready(self) -> None:
        if self.flavour == "sglang":
            self.log("The server is fired up and ready to roll!")
            self.out.write(
                formats.areal("SGLangWrapper", "INFO", f"SGLang server launched at: http://127.0.0.1:{self.port}")
            )
        else:
            pid = os.getpid()
            for line in (
                f"Started server process [{pid}]",
                "Waiting for application startup.",
                "Application startup complete.",
                f"Uvicorn running on http://127.0.0.1:{self.port} (Press CTRL+C to quit)",
            ):
                self.out.write(formats.uvicorn(line))
        self.ledger.update("ready", port=self.port, flavour=self.flavour)

    # ------------------------------------------------------------------------------------------------ faults
    def die_after_training_starts(self, seconds: float) -> None:
        """Vanish once ``seconds`` have passed since the first weight update: right after answering the first weight
        update past that time, so that the death falls between two steps (the next rollouts are refused) however
        slowly the trainer started or the machine runs."""
        self._die_after = seconds

    def _weights_updated(self) -> None:
        now = time.monotonic()
        if self._die_after is not None:
            self._die_at, self._die_after = now + self._die_after, None
        elif self._die_at is not None and now >= self._die_at:
            self.dying = True  # the handler vanishes once this update is answered

    def die(self) -> None:
        with self.out.lock:
            self.ledger.update("died", died_at=time.time())
            os._exit(1)  # vanishes: no log line, exactly like incident 1

    def hang_later(self, seconds: float) -> None:
        def hang() -> None:
            time.sleep(seconds)
            self.hang.set()
            self.ledger.update("hung", hung_at=time.time())

        threading.Thread(target=hang, name="hang-after", daemon=True).start()

    def on_term(self, hang_on_shutdown: bool) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            if self.hang.is_set():
                return  # already stuck in a shutdown; only SIGKILL ends this now
            if self.flavour == "trl":
                self.out.write(formats.uvicorn("Shutting down"))
            if hang_on_shutdown:
                self.out.write(formats.uvicorn("Waiting for application shutdown."))
                self.hang.set()
                self.ledger.update("hung", hung_at=time.time())
                return
            if self.flavour == "trl":
                self.out.write(formats.uvicorn("Application shutdown complete."))
                self.out.write(formats.uvicorn(f"Finished server process [{os.getpid()}]"))
            with self.out.lock:
                self.ledger.update("stopped")
                os._exit(0)

        signal.signal(signal.SIGTERM, handler)

    # ------------------------------------------------------------------------------------------------ routes
    def route(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any] | None]:
        self.requests += 1
        if self.flavour == "sglang":
            return self._sglang(method, path, body)
        return self._trl(method, path, body)

    def _sglang(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any] | None]:
        if method == "GET" and path in ("/health", "/health_generate", "/ping"):
            return 200, None
        if method == "GET" and path == "/get_model_info":
            return 200, {"model_path": MODEL, "tokenizer_path": MODEL, "is_generation": True}
        if method == "POST" and path == "/generate":
            running = self.rng.randint(8, 32)
            self.log(
                f"Prefill batch. #new-seq: {running}, #new-token: {running * 112}, #cached-token: 0, "
                f"token usage: 0.01, #running-req: 0, #queue-req: 0, "
            )
            self.log(
                f"Decode batch. #running-req: {running}, #token: {running * 380}, token usage: 0.02, "
                f"cuda graph: True, gen throughput (token/s): {self.rng.uniform(2500, 4200):.2f}, "
                f"#queue-req: 0, "
            )
            n = self.rng.randint(40, 400)
            return 200, {
                "text": " The answer is 42.",
                "output_ids": [self.rng.randint(0, 151_000) for _ in range(8)],
                "meta_info": {"prompt_tokens": 112, "completion_tokens": n, "finish_reason": {"type": "stop"}},
            }
        if method == "POST" and path == "/update_weights_from_disk":
            self._weights_updated()
            self.log("Update engine weights online from disk begin. avail mem=30.05 GB")
            self.log("Update weights end.")
            self.log("Cache flushed successfully!")
            return 200, {"success": True, "message": "Succeeded to update model weights."}
        return 404, {"detail": "Not Found"}

    def _trl(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any] | None]:
        if method == "GET" and path == "/health/":
            return 200, {"status": "ok"}
        if method == "GET" and path == "/get_world_size/":
            return 200, {"world_size": 1}
        if method == "POST" and path == "/generate/":
            n = self.rng.randint(4, 16)
            self.out.write(
                f"Processed prompts: 100%|██████████| {n}/{n} [00:00<00:00, {self.rng.uniform(8, 20):.2f}it/s, "
                f"est. speed input: {self.rng.uniform(600, 900):.2f} toks/s, "
                f"output: {self.rng.uniform(1200, 1800):.2f} toks/s]"
            )
            return 200, {"completion_ids": [[self.rng.randint(0, 151_000) for _ in range(8)] for _ in range(n)]}
        if method == "POST" and path == "/update_named_param/":
            self._weights_updated()
            return 200, {}
        if method == "POST" and path in (
            "/init_communicator/",
            "/reset_prefix_cache/",
            "/close_communicator/",
        ):
            return 200, {}
        return 404, {"detail": "Not Found"}


class _Handler(BaseHTTPRequestHandler):
    sim: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Access lines are written by the server in its own flavour's format instead of http.server's."""

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        while self.sim.hang.is_set():  # accepted, never answered
            time.sleep(3600)
        path = self.path.split("?", 1)[0]
        status, payload = self.sim.route(method, path, body)
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.sim.access(self.client_address[1], method, path, status)
        if self.sim.dying:
            self.wfile.flush()
            self.sim.die()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--flavour", choices=["sglang", "trl"], default="sglang")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model-path", default=MODEL)
    p.add_argument("--die-after", type=float, default=None, metavar="S")
    p.add_argument("--hang-after", type=float, default=None, metavar="S")
    p.add_argument("--hang-on-shutdown", action="store_true")
    args = p.parse_args(argv)
    layout = Layout.of(args.run_dir)
    lifeline.watch(layout.alive, args.sim_id)
    sim = Server(layout, args.flavour, args.port, args.speed, args.seed)
    sim.on_term(args.hang_on_shutdown)
    sim.banner()
    if not sim.take_device():
        sim.exits(1)
        sim.ledger.update("failed", reason="cuda_busy")
        return 1
    sim.load()
    try:
        httpd = sim.serve()
    except OSError as exc:
        sim.out.write(formats.traceback_block([], f"OSError: [Errno {exc.errno}] {exc.strerror}"))
        sim.exits(1)
        sim.ledger.update("failed", reason=str(exc))
        return 1
    sim.ready()
    if args.die_after is not None:
        sim.die_after_training_starts(scaled(args.die_after, args.speed))
    if args.hang_after is not None:
        sim.hang_later(scaled(args.hang_after, args.speed))
    httpd.serve_forever(poll_interval=0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
