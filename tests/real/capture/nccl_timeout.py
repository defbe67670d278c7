"""A real NCCL collective timeout under torchrun on one GPU.

Two ranks share GPU 0, so the world runs on gloo and each rank gets its own size-1 NCCL group (NCCL refuses two ranks
of one communicator on one device). Rank 0 queues a long GPU sleep and then an all-reduce on its NCCL group: the
collective cannot finish before its 10 s timeout, ProcessGroupNCCL's watchdog reports the timeout and aborts the
process (SIGABRT), and torchrun stops rank 1, which waits in a gloo barrier: rank 0 is the root cause, rank 1 a victim.
"""

from __future__ import annotations

import datetime
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    groups = [dist.new_group([r], backend="nccl", timeout=datetime.timedelta(seconds=10)) for r in range(world)]
    t = torch.ones(1 << 20, device="cuda")
    for step in range(3):
        dist.all_reduce(t, group=groups[rank])
        torch.cuda.synchronize()
        print(f"[rank{rank}] step {step} all_reduce ok", flush=True)
    if rank == 0:
        torch.cuda._sleep(int(300 * 2e9))  # minutes of GPU cycles ahead of the collective: it cannot finish in time
        dist.all_reduce(t, group=groups[0])
        torch.cuda.synchronize()
    else:
        dist.barrier()
    print(f"[rank{rank}] unexpected: finished", flush=True)
    time.sleep(1)
    os._exit(0)


if __name__ == "__main__":
    main()
