"""Two ranks on two GPUs that log in a format rlwatch was not taught, for tests/test_stacks_gpu.py.

Run as ``torchrun --nproc-per-node 2 stack_ranks_gpu.py MODE`` in a run directory. Both ranks step through an NCCL
all-reduce; rank 0 writes ``2026-11-27 11:29:23,497 INFO [rank0] step 23/1000 loss 0.0320`` to train.log, and a
heartbeat thread of it logs every 2 s whatever the ranks do. MODE:

- ``hang``: at step 25 rank 1 waits for ever on a data service that accepted its connection and never answers
  (``fetch_batch_from_service``); rank 0 waits for it in the all-reduce (NCCL's timeout: 30 minutes).
- ``kill``: from step 25 rank 1 stops in ``wait_to_be_killed`` (the test kills it with SIGKILL) while rank 0 waits in
  the all-reduce.
- ``straggler``: rank 1 spends 0.6 s more per step in ``decode_and_augment``.
"""

import datetime
import logging
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist


def fetch_batch_from_service(port: int) -> bytes:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(b"GET batch\n")
    return conn.recv(1)  # never answered


def decode_and_augment() -> None:
    time.sleep(0.6)


def wait_to_be_killed() -> None:
    while True:
        time.sleep(1)


def train_step(x: torch.Tensor) -> float:
    dist.all_reduce(x)
    torch.cuda.synchronize()  # rank 0 waits here once rank 1 stops coming
    return float(x[0].item())


def heartbeat(log: logging.Logger) -> None:
    while True:
        log.info("heartbeat: data service connection alive")
        time.sleep(2)


def main() -> None:
    mode = sys.argv[1]
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=30))
    log = logging.getLogger("train")
    handler = logging.FileHandler("train.log")
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [rank{rank}] %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    service = socket.create_server(("127.0.0.1", 0))  # accepts (by its backlog) and never answers
    if rank == 0:
        threading.Thread(target=heartbeat, args=(log,), daemon=True).start()
    x = torch.ones(1 << 22, device="cuda")
    y = torch.randn(4096, 4096, device="cuda")
    for step in range(1, 1001):
        if rank == 1 and step == 25 and mode == "hang":
            fetch_batch_from_service(service.getsockname()[1])
        if rank == 1 and step == 25 and mode == "kill":
            print(f"rank 1 pid {os.getpid()} waits to be killed", flush=True)
            wait_to_be_killed()
        for _ in range(20):
            y = torch.tanh(y @ y) * 0.5
        if rank == 1 and mode == "straggler":
            decode_and_augment()
        loss = train_step(x) * 0 + float(y[0, 0].item()) * 0 + 1 / (step + 30)
        if rank == 0:
            log.info(f"step {step}/1000 loss {loss:.4f}")
        time.sleep(0.1)


if __name__ == "__main__":
    main()
