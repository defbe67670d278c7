"""Built-in profiles: what rlwatch watches on an AReaL, a TRL, a verl, an OpenRLHF, a worker-pool or any other training
host when nobody configured it.

Each profile is a complete :class:`~rlwatch.config.models.Config`. ``configs/<name>.yaml`` spells the same values out
with a comment per key (a test keeps the two equal), so a person can start from the file instead of from this code.

Processes are recognised only by explicit regular expressions over the whole command line (argv joined by spaces),
anchored on the module (``-m package.module``) or the executable (``/torchrun ``), never by a bare program name that
an editor, a ``grep`` or a ``tail -f`` of the same name would also match.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, get_args

from rlwatch.config.models import (
    Config,
    CustomEvent,
    EventsConfig,
    Policy,
    PolicyWhen,
    ProcessRule,
    RayConfig,
    ServerConfig,
    Thresholds,
    TrainingConfig,
)

ProfileName = Literal["areal", "trl", "verl", "openrlhf", "workers", "generic"]
PROFILE_NAMES: tuple[str, ...] = get_args(ProfileName)

GIB = 1024**3

# AReaL: `python3 -m areal.launcher.local` (v0.3-v0.5) or `-m areal.infra.launcher.local` (v1).
AREAL_LAUNCHER = r"-m areal(\.infra)?\.launcher\.local\b"
# The AReaL server job wraps `python3 -m sglang.launch_server`; both match, the process table keeps the top-most.
SGLANG_SERVER = r"-m (sglang\.launch_server|areal(\.infra)?\.launcher\.sglang_server)\b"
# torchrun as an executable (`/usr/bin/torchrun ...`, `python /x/bin/torchrun ...`) or as `-m torch.distributed.run`.
TORCHRUN = r"(^|/)torchrun( |$)|-m torch\.distributed\.(run|launch)\b"
# TRL: `trl vllm-serve` (routes end in a slash) and vLLM's own OpenAI server.
TRL_SERVER = r"(^|[ /])trl vllm-serve( |$)|-m trl\.scripts\.vllm_serve\b"
VLLM_SERVER = r"(^|[ /])vllm serve( |$)|-m vllm\.entrypoints\.openai\.api_server\b"
TRL_TRAINER = r"(^|[ /])accelerate launch( |$)|(^|[ /])trl grpo( |$)|(^|/)python[0-9.]*( .*)? \S*grpo\S*\.py( |$)"
# Launchers of any distributed training: torchrun, `accelerate launch`, DeepSpeed's launcher (`deepspeed x.py`, a
# Python script, so it shows as `python /usr/bin/deepspeed x.py`).
LAUNCHER = (
    rf"{TORCHRUN}|(^|[ /])accelerate launch( |$)|-m accelerate\.commands\.launch\b"
    r"|(^|/)deepspeed( |$)|-m deepspeed\.launcher\.(runner|launch)\b"
)
# verl's driver: `python3 -m verl.trainer.main_ppo …` (hydra overrides follow), its other entry points
# (main_generation, main_eval, …) and the recipes' (`-m recipe.dapo.main_dapo`); the file run directly.
VERL_DRIVER = r"-m (verl\.trainer|recipe\.\w+)\.main_\w+\b|(^|/)verl/trainer/main_\w+\.py( |$)"
# Ray sets an actor's process title to `ray::Class` (idle) or `ray::Class.method` (running one): SOURCES.md, ps.txt.
VERL_TASK_RUNNER = r"^ray::TaskRunner(\.| |$)"  # verl's single controller (main_ppo.py), `main_task` before 2025-03
VERL_WORKERS = r"^ray::WorkerDict(\.| |$)"  # every role of a resource pool, one per GPU (single_controller/ray/base.py)
# OpenRLHF: `ray job submit … -- python3 -m openrlhf.cli.train_ppo_ray …` (its README); the entrypoint itself.
RAY_JOB_SUBMIT = r"(^|[ /])ray job submit( |$)"
OPENRLHF_DRIVER = r"-m openrlhf\.cli\.train_\w+_ray\b|(^|/)openrlhf/cli/train_\w+_ray\.py( |$)"
OPENRLHF_CONTROLLER = r"^ray::PPOTrainer(Async)?(\.| |$)"  # openrlhf/trainer/ppo_trainer.py (v0.8+)
# The model actors, named as v0.11 and as before the 2025-06 rename (openrlhf/trainer/ray/*.py, launcher.py).
OPENRLHF_MODELS = (
    r"^ray::(PolicyModelActor|ActorModelRayActor|CriticModelActor|CriticModelRayActor|ReferenceModelActor"
    r"|ReferenceModelRayActor|RewardModelActor|RewardModelRayActor)(\.| |$)"
)
OPENRLHF_ENGINES = r"^ray::(RolloutRayActor|LLMRayActor)(\.| |$)"  # vLLM engines: LLMRayActor until v0.10.1
# A Python worker of a pool: a script or module whose name contains "worker".
WORKER = r"(^|/)python[0-9.]*( .*)? (\S*worker\w*\.py|-m \S*worker\w*)( |$)"
# The headless watchdog itself (`rlwatch watch`, `python -m rlwatch watch`), expected to be running.
WATCHDOG = r"(^|[ /])rlwatch(\.cli)? watch( |$)"

# Incident 1: the server vanished and the run sat for 13 hours. A minute down is not a hiccup: restart it, then
# resume the run if the trainer died meanwhile (resume is skipped, refused, while the trainer still lives).
SERVER_DOWN = Policy(
    name="server-down",
    when=PolicyWhen(server_down=True, for_s=60.0),
    actions=["restart-server", "resume"],
)
# Incident 3: the brake fired 951 times and freed nothing; only restarting the worker frees what it leaked.
BRAKE_RESTARTS_WORKER = Policy(
    name="brake-restarts-worker",
    when=PolicyWhen(event="emergency_brake", streak=10),
    actions=["restart-workers"],
)
WORKER_OVER_MEMORY = Policy(
    name="worker-over-memory",
    when=PolicyWhen(over_memory_limit=True, for_s=10.0),
    actions=["restart-workers"],
)


def _areal() -> Config:
    return Config(
        profile="areal",
        training=TrainingConfig(
            logs=["logs/**/*.log"],
            checkpoint_dirs=["checkpoints"],
            recover_info="checkpoints/**/recover_info/step_info.json",
        ),
        # No URL: AReaL starts SGLang on a random port; discovery reads it from --port or from the logs.
        server=ServerConfig(kind="sglang", url=None, health_path="/health"),
        processes=[
            ProcessRule(role="launcher", cmdline_regex=AREAL_LAUNCHER),
            ProcessRule(role="server", cmdline_regex=SGLANG_SERVER),
            ProcessRule(role="trainer", cmdline_regex=TORCHRUN),
        ],
        # AReaL's disk weight update waits 120 s for the server (name_resolve.wait); warn well before that.
        thresholds=Thresholds(weight_update_timeout_s=120.0, weight_update_warn_fraction=0.75),
        policies=[SERVER_DOWN],
    )


def _trl() -> Config:
    return Config(
        profile="trl",
        training=TrainingConfig(logs=["**/*.log"], checkpoint_dirs=["."]),
        # No URL: GRPO generates in the trainer unless vllm_mode is "server"; discovery sets it from that evidence.
        server=ServerConfig(kind="trl", url=None, health_path="/health/"),
        processes=[
            ProcessRule(role="server", cmdline_regex=f"{TRL_SERVER}|{VLLM_SERVER}"),
            ProcessRule(role="trainer", cmdline_regex=TRL_TRAINER),
        ],
        policies=[SERVER_DOWN],
    )


def _verl() -> Config:
    """verl: a driver that starts Ray and one TaskRunner actor, which drives the WorkerDict actors (one per GPU).

    No inference server: the rollout engine lives inside the WorkerDicts. Ray's session logs and State API say
    which actor died and why (rlwatch/sources/ray.py)."""
    return Config(
        profile="verl",
        training=TrainingConfig(logs=["**/*.log"], checkpoint_dirs=["checkpoints"]),
        server=ServerConfig(expected=False),
        processes=[
            ProcessRule(role="trainer", cmdline_regex=VERL_DRIVER),
            ProcessRule(role="task-runner", cmdline_regex=VERL_TASK_RUNNER),
            ProcessRule(role="ray-worker", cmdline_regex=VERL_WORKERS),
        ],
        ray=RayConfig(enabled=True),
    )


def _openrlhf() -> Config:
    """OpenRLHF: `ray job submit` starts the driver, which starts the PPOTrainer controller, the model actors and the
    vLLM engine actors. Generation happens in those engines, not behind an HTTP server rlwatch could probe."""
    return Config(
        profile="openrlhf",
        training=TrainingConfig(logs=["**/*.log"], checkpoint_dirs=["ckpt"]),
        server=ServerConfig(expected=False),
        processes=[
            ProcessRule(role="launcher", cmdline_regex=RAY_JOB_SUBMIT),
            ProcessRule(role="trainer", cmdline_regex=OPENRLHF_DRIVER),
            ProcessRule(role="controller", cmdline_regex=OPENRLHF_CONTROLLER),
            ProcessRule(role="ray-actor", cmdline_regex=OPENRLHF_MODELS),
            ProcessRule(role="vllm-engine", cmdline_regex=OPENRLHF_ENGINES),
        ],
        ray=RayConfig(enabled=True),
    )


def _workers() -> Config:
    return Config(
        profile="workers",
        training=TrainingConfig(logs=["**/*.log"]),
        processes=[
            ProcessRule(role="worker", cmdline_regex=WORKER, memory_limit_bytes=8 * GIB),
            ProcessRule(
                role="watchdog",
                cmdline_regex=WATCHDOG,
                command=["rlwatch", "watch", "."],
                cwd=".",
                expected=True,
            ),
        ],
        events=EventsConfig(
            custom=[
                CustomEvent(
                    name="trial_done",
                    pattern=r"\btrial \S+ (done|finished|complete)\b",
                    severity="info",
                    ignore_case=True,
                    progress=True,
                )
            ]
        ),
        thresholds=Thresholds(brake_streak=10, brake_free_bytes=2 * GIB, memory_warn_fraction=0.90),
        policies=[BRAKE_RESTARTS_WORKER, WORKER_OVER_MEMORY],
    )


def _generic() -> Config:
    """Any other run (a plain torchrun, accelerate, DeepSpeed or python trainer): its logs, and nothing invented.

    No server, no checkpoint directory and no worker roles: discovery adds only what it sees.
    """
    return Config(
        profile="generic",
        training=TrainingConfig(logs=["**/*.log"]),
        processes=[ProcessRule(role="trainer", cmdline_regex=LAUNCHER)],
    )


_BUILDERS = {
    "areal": _areal,
    "trl": _trl,
    "verl": _verl,
    "openrlhf": _openrlhf,
    "workers": _workers,
    "generic": _generic,
}


def profile_defaults(name: ProfileName, run_dir: Path) -> Config:
    """The complete configuration of one profile for the run in ``run_dir``.

    Paths inside stay relative (they are resolved against the run directory when used), so the only
    run-dependent value is ``run_dir`` itself, stored absolute.
    """
    try:
        build = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose from: {', '.join(PROFILE_NAMES)}") from None
    return build().model_copy(update={"run_dir": os.path.abspath(run_dir.expanduser())})
