"""Two ranks on two GPUs; after ten steps rank 1 stops joining the collective and rank 0 waits in it.

Run as `torchrun --nproc-per-node 2 hang_2gpu.py` in a run directory: rank 0 writes `Train step N/100 done.` to
train.log; after step 10 rank 1 loops in `never_reaches_collective` printing a heartbeat ("waiting for rollout
workers...") while rank 0 blocks in the all-reduce of `train_step`, for NCCL's timeout (30 minutes here): a hang with
no error, as users report them. tests/test_hang_gpu.py drives it.
"""

import datetime
import os
import time

import torch
import torch.distributed as dist


def train_step(x: torch.Tensor) -> float:
    dist.all_reduce(x)
    return float(x.sum().cpu())  # waits for the collective: where rank 0 stands once rank 1 stops coming


def never_reaches_collective(log) -> None:  # type: ignore[no-untyped-def]
    while True:
        print("waiting for rollout workers...", file=log, flush=True)
        time.sleep(0.5)


def main() -> None:
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=30))
    x = torch.ones(1 << 20, device="cuda")
    log = open("train.log", "a", buffering=1)  # noqa: SIM115
    for step in range(1, 11):
        train_step(x)
        if rank == 0:
            print(f"Train step {step}/100 done.", file=log, flush=True)
        time.sleep(0.3)
    if rank == 1:
        never_reaches_collective(log)
    while True:
        train_step(x)


if __name__ == "__main__":
    main()
