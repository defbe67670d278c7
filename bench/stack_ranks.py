"""Ranks that synchronise through a barrier, as a data-parallel job does, with nothing but the standard library.

``python bench/stack_ranks.py --ranks N --mode steady|hang|straggler --log train.log`` starts N rank processes (each
with ``RANK`` and ``LOCAL_RANK`` in its environment and ``--local-rank R`` on its command line, as torchrun starts
them) that step in lock-step through ``all_reduce``, a barrier over TCP sockets held by rank 0. Rank 0 logs each step
in a format rlwatch was never taught (``2026-11-27 11:29:23,497 INFO [rank0] step 23/1000 loss 0.0320``) and a
heartbeat thread of it logs every half second whatever the ranks do.

- ``hang``: after ``--hang-after`` steps rank 1 waits for ever on a data service that accepted its connection and
  never answers (``fetch_batch_from_service``); the others wait for it in ``all_reduce``.
- ``straggler``: rank 1 spends ``--extra-s`` (0.6 s) more per step in ``decode_and_augment``; the others wait for it
  in ``all_reduce``.
- ``steady``: every rank computes a little and waits out the rest of ``--step-s`` per step, as a GPU rank does.

The launcher prints one JSON line, ``{"ranks": [pid, …]}``, once every rank is up, and waits for them (SIGTERM ends
them all). Used by tests/sources/test_sampler_processes.py and bench/stacks.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import IO


def compute(seconds: float) -> float:
    """Busy work for ``seconds``: a rank that computes (its stack moves, its thread runs)."""
    end = time.monotonic() + seconds
    x = 0.0
    while time.monotonic() < end:
        for i in range(1000):
            x += i * 0.5
    return x


def decode_and_augment(seconds: float) -> None:
    """The straggler's extra work per step (a slow data pipeline)."""
    time.sleep(seconds)


def fetch_batch_from_service(port: int) -> bytes:
    """A data service that accepted the connection and never answers: this rank waits for ever."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(b"GET batch\n")
    return conn.recv(1)


def all_reduce(peers: list[socket.socket], hub: socket.socket | None) -> None:
    """A barrier: every rank tells rank 0 it arrived; rank 0 answers all once all have."""
    if hub is not None:
        hub.sendall(b"x")
        if hub.recv(1) != b"y":
            raise SystemExit("rank 0 is gone")
        return
    for peer in peers:
        if peer.recv(1) != b"x":
            raise SystemExit("a rank is gone")
    for peer in peers:
        peer.sendall(b"y")


def _log(out: IO[str], rank: int, text: str) -> None:
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    print(f"{stamp} INFO [rank{rank}] {text}", file=out, flush=True)


def heartbeat(out: IO[str], rank: int) -> None:
    while True:
        _log(out, rank, "heartbeat: data service connection alive")
        time.sleep(0.5)


def rank_main(args: argparse.Namespace) -> None:
    rank = int(os.environ["RANK"])
    peers: list[socket.socket] = []
    hub = None
    if rank == 0:
        server = socket.create_server(("127.0.0.1", args.port))
        peers = [server.accept()[0] for _ in range(args.ranks - 1)]
    else:
        deadline = time.monotonic() + 30
        while True:
            try:
                hub = socket.create_connection(("127.0.0.1", args.port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    out = open(args.log, "a", buffering=1) if rank == 0 else sys.stderr  # noqa: SIM115
    if rank == 0:
        threading.Thread(target=heartbeat, args=(out, rank), daemon=True).start()
    step = 0
    while True:
        step += 1
        if args.mode == "hang" and rank == 1 and step > args.hang_after:
            fetch_batch_from_service(args.service_port)
        compute(min(args.step_s, 0.005))  # a little work on the CPU; the rest of the step waits, as on a GPU
        time.sleep(max(0.0, args.step_s - 0.005))
        if args.mode == "straggler" and rank == 1:
            decode_and_augment(args.extra_s)
        all_reduce(peers, hub)
        if rank == 0:
            _log(out, rank, f"step {step}/1000 loss {1 / (step + 30):.4f}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launcher(args: argparse.Namespace) -> None:
    service = socket.create_server(("127.0.0.1", 0))  # accepts (by its backlog) and never answers
    port = _free_port()
    procs = []
    for rank in range(args.ranks):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.ranks))
        argv = [sys.executable, os.path.abspath(__file__), "--rank-process", "--local-rank", str(rank)]
        argv += ["--ranks", str(args.ranks), "--mode", args.mode, "--log", args.log, "--port", str(port)]
        argv += ["--service-port", str(service.getsockname()[1]), "--hang-after", str(args.hang_after)]
        argv += ["--step-s", str(args.step_s), "--extra-s", str(args.extra_s)]
        procs.append(subprocess.Popen(argv, env=env))
        if rank == 0:
            time.sleep(0.2)  # rank 0 listens before the others connect (they retry anyway)

    def stop(*_: object) -> None:
        for p in procs:
            p.terminate()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    print(json.dumps({"ranks": [p.pid for p in procs]}), flush=True)
    for p in procs:
        p.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mode", choices=("steady", "hang", "straggler"), default="steady")
    parser.add_argument("--log", default="train.log")
    parser.add_argument("--hang-after", type=int, default=5)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--extra-s", type=float, default=0.6)
    parser.add_argument("--rank-process", action="store_true")
    parser.add_argument("--local-rank", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--service-port", type=int, default=0)
    args = parser.parse_args()
    if args.rank_process:
        rank_main(args)
    else:
        launcher(args)


if __name__ == "__main__":
    main()
