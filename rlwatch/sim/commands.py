"""The argv of every piece, built in one place so the supervisor, the launcher and ``rlwatch.yaml`` agree exactly.

The informational tail of each argv (after ``--``) reads like the command the piece stands in for, so a person (and
rlwatch's discovery) looking at ``ps`` sees a familiar training host.
"""

from __future__ import annotations

import re
from pathlib import Path

from rlwatch.sim.common import piece_argv

TRL_COMMAND = ["accelerate", "launch", "--num_processes", "8", "train_grpo.py", "--config", "config.yaml"]


def _common(speed: float, seed: int) -> list[str]:
    return ["--speed", f"{speed:g}", "--seed", str(seed)]


def launcher(sim_id: str, run_dir: Path, speed: float, seed: int, flavour: str) -> list[str]:
    script = "gsm8k_grpo.py" if flavour == "areal" else "run_grpo.sh"
    return piece_argv("launcher", sim_id, run_dir, *_common(speed, seed), "--", script, "--config", "config.yaml")


def server(sim_id: str, run_dir: Path, speed: float, seed: int, flavour: str, *, port: int) -> list[str]:
    kind = "sglang" if flavour == "areal" else "trl"
    return piece_argv("server", sim_id, run_dir, *_common(speed, seed), "--flavour", kind, "--port", str(port))


def trainer(sim_id: str, run_dir: Path, speed: float, seed: int, flavour: str) -> list[str]:
    if flavour == "trl":
        return piece_argv("trl_trainer", sim_id, run_dir, *_common(speed, seed), "--", *TRL_COMMAND)
    return piece_argv(
        "trainer",
        sim_id,
        run_dir,
        *_common(speed, seed),
        "--",
        "torchrun",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "1",
        "--master-addr",
        "localhost",
        "gsm8k_grpo.py",
        "--config",
        "config.yaml",
    )


def worker(sim_id: str, run_dir: Path, speed: float, seed: int, index: int) -> list[str]:
    return piece_argv("worker", sim_id, run_dir, *_common(speed, seed), "--index", str(index))


def entrypoint(sim_id: str, run_dir: Path, speed: float, seed: int, boot: int) -> list[str]:
    return piece_argv("entrypoint", sim_id, run_dir, *_common(speed, seed), "--boot", str(boot))


def holder(sim_id: str, run_dir: Path, speed: float, seed: int, supervisor_pid: int) -> list[str]:
    return piece_argv(
        "holder", sim_id, run_dir, *_common(speed, seed), "--supervisor-pid", str(supervisor_pid), "--detach"
    )


def regex(piece: str, sim_id: str, tail: str = "") -> str:
    """An explicit regex for one piece of one simulation, over the command line joined by spaces."""
    return rf"-m rlwatch\.sim\.{piece} --sim-id {re.escape(sim_id)} " + tail
