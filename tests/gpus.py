"""How many NVIDIA GPUs this host has, asked once: the GPU suite's tests skip on a host with fewer than they need."""

from __future__ import annotations

import functools
import subprocess


@functools.cache
def gpu_count() -> int:
    """The GPUs `nvidia-smi -L` lists; 0 where it is missing or fails."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return out.stdout.count("GPU ")
