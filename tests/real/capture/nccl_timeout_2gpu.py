"""A real NCCL collective timeout under torchrun on two GPUs: rank 1 stops joining collectives after three steps;
rank 0's all-reduce times out after 10 s, ProcessGroupNCCL's watchdog aborts rank 0 (SIGABRT), and torchrun stops
rank 1 (SIGTERM). torchrun's report names rank 0 as the root cause, rank 1 as a victim.
"""

from __future__ import annotations

import datetime
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=10), device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    t = torch.ones(1 << 20, device="cuda")
    for step in range(3):
        dist.all_reduce(t)
        torch.cuda.synchronize()
        print(f"[rank{rank}] step {step} all_reduce ok", flush=True)
    if rank == 1:
        print("[rank1] stops joining collectives", flush=True)
        time.sleep(600)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"[rank{rank}] unexpected: finished", flush=True)


if __name__ == "__main__":
    main()
