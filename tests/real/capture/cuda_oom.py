"""A real CUDA out-of-memory error: keep allocating 8 GiB blocks until the allocator refuses."""

from __future__ import annotations

import torch

held = []
for i in range(10_000):
    held.append(torch.empty(8 << 30, dtype=torch.uint8, device="cuda"))
    print(f"step {i}: holding {8 * (i + 1)} GiB", flush=True)
