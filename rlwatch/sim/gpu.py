"""The simulated GPU: a JSON file shaped like what NVML would say, rewritten atomically about once a second.

The processes listed are the live pids that really hold the stand-in device file open (found the way ``fuser``
does, through ``/proc/*/fd``), so the GPU view and rlwatch's own holder scan agree. Memory per process is made up
from its role; utilisation is high only while a trainer is really stepping.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from rlwatch.sim.common import atomic_write_json

TOTAL_BYTES = 150_323_855_360  # 140 GiB, an H200's usable memory
GIB = 1024**3

# Made-up memory by the module a holder runs; the server takes sglang.mem_fraction_static of the card.
ROLE_BYTES = {
    "rlwatch.sim.server": int(0.8 * TOTAL_BYTES),
    "rlwatch.sim.trainer": 18 * GIB,
    "rlwatch.sim.holder": 7 * GIB,
}


def holders(device: Path, proc_root: Path = Path("/proc")) -> dict[int, str]:
    """pid → the rlwatch.sim module it runs (or ``""``), for every process with ``device`` open."""
    target = str(device.absolute())
    found: dict[int, str] = {}
    try:
        entries = os.scandir(proc_root)
    except OSError:
        return found
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            fd_dir = os.path.join(entry.path, "fd")
            try:
                fds = os.listdir(fd_dir)
            except OSError:  # gone, or not ours to read
                continue
            for fd in fds:
                try:
                    if os.readlink(os.path.join(fd_dir, fd)) == target:
                        found[int(entry.name)] = _module(Path(entry.path))
                        break
                except OSError:
                    continue
    return found


def _module(proc: Path) -> str:
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    for arg in argv:
        if arg.startswith(b"rlwatch.sim."):
            return arg.decode(errors="replace")
    return ""


class GpuModel:
    """Turns "who holds the device" and "is the trainer stepping" into one GPU's numbers."""

    def __init__(self, device: Path, state_file: Path, seed: int) -> None:
        self.device = device
        self.state_file = state_file
        self.rng = random.Random(seed)

    def sample(self, stepping: bool) -> dict[str, object]:
        held = holders(self.device)
        procs = [{"pid": pid, "used_bytes": ROLE_BYTES.get(module, 1 * GIB)} for pid, module in sorted(held.items())]
        used = sum(int(p["used_bytes"]) for p in procs)
        if stepping and held:
            util = round(self.rng.uniform(78.0, 99.0), 1)
        elif held:
            util = round(self.rng.uniform(0.0, 2.0), 1)
        else:
            util = 0.0
        busy = util / 100.0
        lost = (self.state_file.parent / "gpu_lost").exists()  # scenario gpu-xid: the trainer marks the fall
        return {
            "index": 0,
            "name": "Simulated H200",
            "uuid": "GPU-sim-0",
            "util": util,
            "mem_used_bytes": used,
            "mem_total_bytes": TOTAL_BYTES,
            "temp_c": int(34 + 36 * busy + self.rng.uniform(-1.0, 1.0)),
            "power_w": round(75.0 + 600.0 * busy + self.rng.uniform(-5.0, 5.0), 1),
            "compute_mode": "EXCLUSIVE_PROCESS",
            "processes": procs,
            "health": self.health(lost, busy),
        }

    def health(self, lost: bool, busy: float) -> dict[str, object]:
        """What NVML says of an H200's hardware (tests/real/gpu-facts/nvidia-smi-q.txt: no retired pages on
        Hopper, rows are remapped instead); a GPU fallen off the bus is lost, with its Xid 79."""
        if lost:
            return {
                "pci_bus_id": "00000000:3B:00.0",
                "lost": "GPU is lost",
                "xids": [{"xid": 79, "time": (self.state_file.parent / "gpu_lost").stat().st_mtime}],
            }
        return {
            "pci_bus_id": "00000000:3B:00.0",
            "ecc_enabled": True,
            "ecc_volatile_corrected": 0,
            "ecc_volatile_uncorrected": 0,
            "ecc_aggregate_corrected": 0,
            "ecc_aggregate_uncorrected": 0,
            "remap_correctable": 0,
            "remap_uncorrectable": 0,
            "remap_pending": False,
            "remap_failure": False,
            "pcie_gen": 5 if busy > 0.05 else 1,  # an idle GPU lowers its link to save power
            "pcie_gen_max": 5,
            "pcie_width": 16,
            "pcie_width_max": 16,
            "clock_events": [] if busy > 0.05 else ["idle"],
        }

    def write(self, stepping: bool) -> dict[str, object]:
        gpu = self.sample(stepping)
        atomic_write_json(self.state_file, {"time": time.time(), "gpus": [gpu]})
        return gpu
