"""Typed configuration: what the YAML file may say, validated strictly (unknown keys are errors).

The models are the single documented reference of every key; ``configs/reference.yaml`` mirrors them with
comments. Loading and line-numbered error messages live in :mod:`rlwatch.config_load`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Profile = Literal["auto", "areal", "trl", "workers"]
SeverityName = Literal["critical", "warning", "info"]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return value


class CustomEvent(Strict):
    """A user-defined event kind: lines matching ``pattern`` are counted under ``name``."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    pattern: str
    severity: SeverityName = "warning"
    ignore_case: bool = False
    progress: bool = False  # a sign of progress: resets the streaks of failure kinds in the same file

    _v = field_validator("pattern")(_check_regex)


class EventsConfig(Strict):
    brake_pattern: str = r"emergency[ _-]?brake"  # case-insensitive
    custom: list[CustomEvent] = []
    recent_lines: Annotated[int, Field(ge=1, le=1000)] = 20
    rate_window_s: PositiveFloat = 300.0

    _v = field_validator("brake_pattern")(_check_regex)


class ProcessRule(Strict):
    """How to recognise one process role, and how to start it again.

    A process is selected only by an explicit rule (a regex over the whole command line, a pidfile, or both),
    never by a broad name.
    """

    role: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")]
    cmdline_regex: str | None = None
    pidfile: str | None = None
    command: list[str] | None = None  # argv to start one again; recorded from the live process when absent
    cwd: str | None = None
    log: str | None = None  # where a started process's output is appended (and tailed)
    memory_limit_bytes: Annotated[int, Field(gt=0)] | None = None
    expected: bool = False  # a finding is raised when none is running (e.g. the watchdog)

    _v = field_validator("cmdline_regex")(lambda v: v if v is None else _check_regex(v))


class ServerConfig(Strict):
    kind: Literal["sglang", "vllm", "trl"] | None = None
    url: str | None = None  # e.g. http://127.0.0.1:30000
    health_path: str | None = None  # default by kind: /health, /health, /health/
    timeout_s: PositiveFloat = 2.0
    interval_s: PositiveFloat = 5.0
    command: list[str] | None = None
    cwd: str | None = None
    log: str | None = None
    start_timeout_s: PositiveFloat = 600.0


class GpuConfig(Strict):
    backend: Literal["auto", "nvml", "simulated", "none"] = "auto"
    simulated_state: str | None = None  # JSON file a simulator writes (backend "simulated")
    device_glob: str = "/dev/nvidia*"
    query_timeout_s: PositiveFloat = 2.0


class TrainingConfig(Strict):
    """Where the run keeps its state. Paths are relative to the run directory unless absolute."""

    logs: list[str] = []  # globs
    checkpoint_dirs: list[str] = []
    recover_info: str | None = None  # path of step_info.json
    config_file: str | None = None  # the training YAML, to show its key knobs
    output_volume: str | None = None  # for free-disk checks; default: the run directory
    total_steps: Annotated[int, Field(gt=0)] | None = None


class Thresholds(Strict):
    stall_s: PositiveFloat = 600.0
    restart_loop_uptime_s: PositiveFloat = 60.0
    restart_loop_count: Annotated[int, Field(ge=2)] = 3
    brake_streak: Annotated[int, Field(ge=1)] = 10
    brake_free_bytes: NonNegInt = 2 * 1024**3
    memory_warn_fraction: Annotated[float, Field(gt=0, le=1)] = 0.90
    leak_bytes_per_hour: NonNegInt = 512 * 1024**2
    disk_free_bytes: NonNegInt = 10 * 1024**3
    weight_update_timeout_s: PositiveFloat = 120.0
    weight_update_warn_fraction: Annotated[float, Field(gt=0, le=1)] = 0.75
    connection_storm: Annotated[int, Field(ge=1)] = 5


class ActionsConfig(Strict):
    readonly: bool = False
    grace_s: PositiveFloat = 10.0
    allow_other_users: bool = False  # only honoured when running as root
    audit_log: str | None = None  # default: <run_dir>/.rlwatch/audit.jsonl
    resume_command: list[str] | None = None
    resume_cwd: str | None = None
    resume_log: str | None = None
    verify_timeout_s: PositiveFloat = 120.0
    protected_names: list[str] = [
        "nvidia-persistenced",
        "nv-hostengine",
        "dcgm-exporter",
        "dcgmi",
        "nvidia-smi",
        "node_exporter",
        "nvitop-exporter",
    ]


class Config(Strict):
    """The whole file. Every key has a default, so an empty file is valid."""

    profile: Profile = "auto"
    run_dir: str | None = None
    interval_s: PositiveFloat = 2.0
    simulated: bool = False  # set by the simulator so every view says SIMULATED
    training: TrainingConfig = TrainingConfig()
    server: ServerConfig = ServerConfig()
    gpu: GpuConfig = GpuConfig()
    processes: list[ProcessRule] = []
    events: EventsConfig = EventsConfig()
    thresholds: Thresholds = Thresholds()
    actions: ActionsConfig = ActionsConfig()
