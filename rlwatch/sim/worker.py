"""An optimisation worker that really leaks memory and has an emergency brake that cannot help (incident 3).

Each trial keeps a little more memory for good (bytearrays whose pages are written, so the RSS really grows), up to
a hard safety cap. The brake reads free memory on a *pretend* host (the incident's 31.2 GB machine, scaled to what
this worker has leaked) and refuses to start trials once less than 2 GB would be free. Refusing frees nothing, so it
fires again on every attempt; after a fixed number of refusals in a row the worker stops trying and idles until
someone restarts it. A restarted worker (same argv) starts fresh, which is the only thing that frees the memory.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from rlwatch.sim import formats, lifeline
from rlwatch.sim.common import Layout, base_parser, load_spec, scaled
from rlwatch.sim.ledger import LogSink, PieceLedger

PAGE = 4096
MB = 1024 * 1024
BRAKE_GB = 2.0


class Worker:
    def __init__(self, layout: Layout, index: int, spec: dict[str, Any], speed: float, seed: int) -> None:
        self.name = f"worker-{index}"
        self.speed = speed
        self.rng = random.Random(seed * 1000 + index)
        self.trial_time = float(spec.get("trial_time", 3.0))
        self.leak_mb = int(spec.get("leak_mb_per_trial", 16))
        self.brake_at_mb = int(spec.get("brake_at_mb", 160))
        self.cap_mb = min(400, int(spec.get("cap_mb", 400)))
        self.brake_limit = int(spec.get("brake_limit", 12))
        self.free0_gb = float(spec.get("free0_gb", 12.0))
        self.leaked: list[bytearray] = []
        self.ledger = PieceLedger(layout, "worker", self.name)
        self.out = LogSink(self.ledger)

    @property
    def leaked_mb(self) -> int:
        return sum(len(b) for b in self.leaked) // MB

    def free_gb(self) -> float:
        """Free memory on the pretend host: it reaches the brake just as this worker's leak reaches its mark."""
        frac = min(1.0, self.leaked_mb / self.brake_at_mb)
        return self.free0_gb - (self.free0_gb - (BRAKE_GB - 0.2)) * frac

    def leak(self) -> None:
        if self.leaked_mb + self.leak_mb > self.cap_mb:
            return
        chunk = bytearray(self.leak_mb * MB)
        chunk[::PAGE] = b"\x01" * len(range(0, len(chunk), PAGE))  # touch every page: resident, not just reserved
        self.leaked.append(chunk)

    def log(self, level: str, message: str) -> None:
        self.out.write(formats.pylog(self.name, level, message))

    def run(self) -> int:
        self.log(
            "INFO", f"{self.name} started: optimisation study gsm8k-reward-tuning, trials of ~{self.trial_time:.0f} s"
        )
        self.ledger.update("running")
        trial, brakes = 1, 0
        while True:
            free = self.free_gb()
            if free < BRAKE_GB:
                brakes += 1
                self.log(
                    "WARNING",
                    f"EMERGENCY BRAKE: only {free:.1f} GB free (< {BRAKE_GB:.1f} GB), refusing to start trial {trial}",
                )
                self.ledger.update(brakes=brakes)
                if brakes >= self.brake_limit:
                    self.log("WARNING", f"{brakes} trials refused in a row and nothing was freed; idle until restarted")
                    self.ledger.update("idle")
                    while True:
                        time.sleep(3600)
                time.sleep(scaled(self.trial_time, self.speed))
                continue
            took = self.trial_time * self.rng.uniform(0.85, 1.15)
            time.sleep(scaled(took, self.speed))
            self.leak()
            self.log("INFO", f"trial {trial} done in {took:.2f} s (objective {self.rng.uniform(0.55, 0.8):.4f})")
            self.ledger.update(trials=trial, leaked_mb=self.leaked_mb)
            trial += 1


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--index", type=int, required=True)
    args = p.parse_args(argv)
    layout = Layout.of(args.run_dir)
    lifeline.watch(layout.alive, args.sim_id)
    return Worker(layout, args.index, load_spec(layout), args.speed, args.seed).run()


if __name__ == "__main__":
    sys.exit(main())
