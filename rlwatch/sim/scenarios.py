"""The scenarios: one per incident in the README's scenario table, a healthy run to compare against, and runs in
the shapes real frameworks print (tests/real/): a colocated TRL run started as ``python3 train.py``, an NCCL
timeout under torchrun.

A scenario is data: which profile rlwatch should use, the run's parameters (``.sim/spec.json``, read by the
pieces), which one-shot faults to arm, what the supervisor starts, and when the incident has fully played out
("settled": no more counted lines will be written unless someone acts). A scenario with ``rlwatch_yaml`` False
writes no ``rlwatch.yaml``: rlwatch has to find the run as it would on a real host, from evidence alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlwatch.sim.ledger import latest

Parts = list[dict[str, Any]]

AREAL_RUN: dict[str, Any] = {
    "flavour": "areal",
    "epochs": 2,
    "steps_per_epoch": 30,
    "save_freq": 5,
    "step_time": 2.0,
    "max_workflow_failures": 8,
    "request_timeout": 10.0,
    "retry_delay": 1.0,
    "setup_timeout": 120.0,
    "server_attempts": 3,
    "server_retry_delay": 2.0,
}


def _state(parts: Parts, name: str) -> str | None:
    part = latest(parts, name)
    return None if part is None else str(part.get("state"))


def _trainer_done(parts: Parts) -> bool:
    """A finished trainer settles every AReaL scenario (e.g. after a resume)."""
    return _state(parts, "trainer") == "finished"


def _healthy(parts: Parts) -> bool:
    return _trainer_done(parts)


def _server_crash(parts: Parts) -> bool:
    return _trainer_done(parts) or (_state(parts, "trainer") == "failed" and _state(parts, "launcher") == "idle")


def _never(parts: Parts) -> bool:
    return False


def _memory_leak(parts: Parts) -> bool:
    return all(_state(parts, f"worker-{i}") == "idle" for i in range(2))


def _gpu_zombie(parts: Parts) -> bool:
    return _trainer_done(parts) or _state(parts, "launcher") == "gave_up"


def _startup_crash(parts: Parts) -> bool:
    return _state(parts, "launcher") == "gave_up" and _state(parts, "server") == "hung"


def _torchrun_exited(parts: Parts) -> bool:
    return _state(parts, "torchrun") == "exited"


def _hung(parts: Parts) -> bool:
    return _state(parts, "rank-1") == "hung" and _state(parts, "rank-0") == "waiting"


def _trainer_failed(parts: Parts) -> bool:
    return _state(parts, "trainer") == "failed" and _state(parts, "launcher") == "idle"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    profile: str  # areal | trl | workers | generic: what rlwatch should find
    start: str  # what the supervisor starts: launcher | entrypoint | workers | script (python3 train.py) | torchrun
    settled: Callable[[Parts], bool]
    spec: dict[str, Any] = field(default_factory=dict)
    faults: tuple[str, ...] = ()
    strays: int = 0
    restart_every_s: float | None = None  # the platform restarting the container (restart-loop)
    rlwatch_yaml: bool = True  # False: no rlwatch.yaml, rlwatch finds the run from evidence as on a real host
    shm_bytes: int | None = None  # the size /dev/shm is said to have (rlwatch.yaml host.simulated_shm_bytes)

    @property
    def flavour(self) -> str | None:
        return self.spec.get("flavour")


ALL: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "healthy",
            "AReaL GRPO run that trains, checkpoints and finishes cleanly",
            "areal",
            "launcher",
            _healthy,
            dict(AREAL_RUN),
        ),
        Scenario(
            "server-crash",
            "incident 1: the SGLang server vanishes mid-run; the trainer's rollouts fail with connection refused and "
            "it retries them; unless the server is restarted (s) it gives up and dies in its next weight update",
            "areal",
            "launcher",
            _server_crash,
            {**AREAL_RUN, "server_die_after": 24.0},
            faults=("server-die",),
        ),
        Scenario(
            "restart-loop",
            "incident 2: 'crash at step 57' that is a container restarting every 17 s on a failing git clone",
            "areal",
            "entrypoint",
            _never,
            {**AREAL_RUN, "epochs": 2, "steps_per_epoch": 125, "stop_at_step": 57, "weight_drift": True},
            faults=("container-crash",),
            restart_every_s=17.0,
        ),
        Scenario(
            "memory-leak",
            "incident 3: two workers leak memory, the emergency brake fires and cannot help, no watchdog runs",
            "workers",
            "workers",
            _memory_leak,
            {
                "flavour": None,
                "workers": 2,
                "trial_time": 3.0,
                "leak_mb_per_trial": 16,
                "brake_at_mb": 160,
                "cap_mb": 400,
                "brake_limit": 12,
                "free0_gb": 12.0,
            },
        ),
        Scenario(
            "gpu-zombie",
            "incident 4: stray processes from an earlier run hold the GPU; the server fails with 'busy or unavailable'",
            "areal",
            "launcher",
            _gpu_zombie,
            dict(AREAL_RUN),
            strays=2,
        ),
        Scenario(
            "startup-crash",
            "incident 5: the TRL trainer crashes with AttributeError on every retry; the vLLM server hangs on shutdown",
            "trl",
            "launcher",
            _startup_crash,
            {
                "flavour": "trl",
                "max_steps": 50,
                "save_steps": 2,
                "step_time": 2.0,
                "setup_timeout": 240.0,
                "server_attempts": 1,
                "trainer_attempts": 3,
                "trainer_retry_delay": 5.0,
                "server_hang_on_shutdown": True,
            },
            faults=("server-hang-on-shutdown",),
        ),
        Scenario(
            "trl-colocated",
            "a TRL GRPO run with colocated generation (no inference server) started as `python3 train.py`; finishes",
            "trl",
            "script",
            _trainer_done,
            {"flavour": None, "max_steps": 30, "save_steps": 5, "step_time": 2.0},
            rlwatch_yaml=False,
        ),
        Scenario(
            "gpu-xid",
            "the GPU falls off the bus at step 9: the kernel log says Xid 79, NVML loses the GPU, the trainer dies "
            "of a CUDA error",
            "areal",
            "launcher",
            _trainer_failed,
            {**AREAL_RUN, "gpu_fault_at_step": 9},
            faults=("gpu-xid",),
        ),
        Scenario(
            "shm-small",
            "a 64 MiB /dev/shm (Docker's default) beside SGLang and PyTorch: a warning, then a DataLoader worker dies "
            "of SIGBUS at step 7",
            "areal",
            "launcher",
            _trainer_failed,
            {**AREAL_RUN, "shm_error_at_step": 7},
            faults=("shm-bus-error",),
            shm_bytes=64 * 1024 * 1024,
        ),
        Scenario(
            "nan-loss",
            "a TRL GRPO run (python3 train.py) whose loss and grad norm turn NaN at step 12 and stay so; it runs on",
            "trl",
            "script",
            _trainer_done,
            {"flavour": None, "max_steps": 24, "save_steps": 5, "step_time": 2.0, "nan_from_step": 12},
            rlwatch_yaml=False,
        ),
        Scenario(
            "kernel-oom",
            "torchrun with 2 ranks: the kernel OOM killer kills rank 1 (its memory cgroup at its limit) at step 4; "
            "torchrun reports exit code -9",
            "generic",
            "torchrun",
            _torchrun_exited,
            {"flavour": None, "ddp_steps": 12, "step_time": 2.0, "oom_rank": 1, "oom_at_step": 4},
            rlwatch_yaml=False,
        ),
        Scenario(
            "hang",
            "torchrun with 2 ranks: after 12 steps rank 1 stops joining and prints a heartbeat for ever, rank 0 "
            "waits in the all-reduce; NCCL's timeout is far away: no error, only no progress",
            "generic",
            "torchrun",
            _hung,
            {"flavour": None, "ddp_steps": 12, "step_time": 2.0, "hung_rank": 1, "hang": True},
            rlwatch_yaml=False,
        ),
        Scenario(
            "nccl-timeout",
            "torchrun with 2 ranks: rank 1 stops joining, rank 0's NCCL watchdog times out and aborts (SIGABRT)",
            "generic",
            "torchrun",
            _torchrun_exited,
            {"flavour": None, "ddp_steps": 12, "step_time": 2.0, "nccl_timeout_ms": 10000, "hung_rank": 1},
            rlwatch_yaml=False,
        ),
    )
}

SCENARIOS: dict[str, str] = {name: s.description for name, s in ALL.items()}
