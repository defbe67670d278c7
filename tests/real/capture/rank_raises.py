"""Rank 1 raises a Python exception after a few steps; rank 0 waits in a barrier and is stopped by torchrun."""

from __future__ import annotations

import datetime

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    for step in range(3):
        dist.barrier()
        print(f"[rank{rank}] step {step}", flush=True)
    if rank == 1:
        raise ValueError("reward model returned NaN for batch 3")
    dist.barrier()


if __name__ == "__main__":
    main()
