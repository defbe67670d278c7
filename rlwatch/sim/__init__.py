"""The simulated training host: real processes and files that reproduce each incident in the README's scenario table.

``run_sim(scenario, dir, speed, seed)`` is what ``rlwatch sim`` and ``python -m rlwatch.sim`` run; ``SCENARIOS``
maps each scenario name to a one-line description. Every piece runs as ``python -m rlwatch.sim.<piece>``, which
imports this package first, so nothing heavy is imported here: the supervisor is loaded only when it is used.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from rlwatch.sim.scenarios import SCENARIOS

if TYPE_CHECKING:
    from rlwatch.sim.supervisor import SimError, Simulation

__all__ = ["SCENARIOS", "SimError", "Simulation", "run_sim"]


def run_sim(scenario: str, run_dir: str | os.PathLike[str], speed: float = 1.0, seed: int | None = 0) -> int:
    """Run ``scenario`` into ``run_dir`` until SIGINT/SIGTERM, stop everything it started, return an exit code."""
    from rlwatch.sim.supervisor import run_supervised as run

    return run(scenario, run_dir, speed=speed, seed=seed)


def __getattr__(name: str) -> Any:
    if name in ("Simulation", "SimError"):
        from rlwatch.sim import supervisor

        return getattr(supervisor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
