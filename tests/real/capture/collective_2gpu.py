"""Two ranks on two GPUs, one NCCL world, in one of four shapes; `capture_collective.sh` runs each under torchrun.

- `mismatch`: at step 12 rank 0 reduces a metric only it reduces (one more `all_reduce`, one element), so its
  collective 13 meets rank 1's gradient `all_reduce` of 4194304 elements: op count and size differ across ranks.
- `stall`: after step 10 rank 1 loops in `fetch_batch_from_service` and never reaches collective 11, which rank 0
  has entered: a rank missing from a collective the others entered.
- `straggler`: every step each rank multiplies bf16 matrices, rank 1 four times as many, then both reduce: a
  GPU-bound straggler whose Python stacks agree (both wait in the same `.item()`).
- `healthy`: the same with equal work.

On a host with one GPU both ranks share it, each its own host to NCCL (``NCCL_HOSTID``).

Rank 0 writes `Train step N/STEPS done.` to train.log (every rank, `[rankN]: `-prefixed, with EVERY_RANK_LOGS=1, as a
job over several nodes does); NCCL's timeout is 30 s (NCCL_TIMEOUT_S) so the watchdog fires quickly.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

N = 4194304


def fetch_batch_from_service(log) -> None:  # type: ignore[no-untyped-def]
    while True:
        print("waiting for rollout workers...", file=log, flush=True)
        time.sleep(0.5)


def compute(a: torch.Tensor, times: int) -> None:
    for _ in range(times):
        a = a @ a
        a = a / a.norm()


def main() -> None:
    mode = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    gpus = torch.cuda.device_count()
    if gpus < int(os.environ.get("LOCAL_WORLD_SIZE", "1")):
        # Fewer GPUs than ranks: they share one, and NCCL refuses two ranks of one host on one GPU, so each rank
        # is a host of its own to NCCL (its peers reached over sockets).
        os.environ.setdefault("NCCL_HOSTID", f"collective-2gpu-rank{rank}")
        local %= gpus
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=int(os.environ.get("NCCL_TIMEOUT_S", "30"))))
    grads = torch.ones(N, device="cuda")
    mat = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    log = open("train.log", "a", buffering=1)  # noqa: SIM115
    print(f"[rank{rank}] pid {os.getpid()} on GPU {local}", flush=True)
    for step in range(1, steps + 1):
        if mode == "stall" and step == 11 and rank == 1:
            print(f"[rank{rank}] fetching a batch", flush=True)
            fetch_batch_from_service(log)
        if mode in ("straggler", "healthy"):
            compute(mat, 140 * (4 if (mode == "straggler" and rank == 1) else 1))
        dist.all_reduce(grads)
        grads.div_(2)
        float(grads[0].item())
        if mode == "mismatch" and step == 12 and rank == 0:
            metric = torch.ones(1, device="cuda")
            dist.all_reduce(metric)  # a metric only rank 0 reduces
            print(f"[rank{rank}] metric {float(metric.item())}", flush=True)
        if os.environ.get("EVERY_RANK_LOGS") == "1":
            print(f"[rank{rank}]: Train step {step}/{steps} done.", file=log, flush=True)
        elif rank == 0:
            print(f"Train step {step}/{steps} done.", file=log, flush=True)
        if mode in ("mismatch", "stall"):
            time.sleep(0.3)
    print(f"[rank{rank}] finished", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
