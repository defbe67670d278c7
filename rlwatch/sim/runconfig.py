"""The files that describe a simulated run: the training YAML and ``rlwatch.yaml``.

``rlwatch.yaml`` is what makes every rlwatch command pointed at the run directory see this host exactly: the
simulated GPU backend and stand-in device, the server's URL and command, an explicit regex per process carrying
the simulation's id, where the logs, checkpoints and recover info are, and thresholds shortened by the speed-up
wherever they are durations of the demo.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import yaml

from rlwatch.config.models import Config
from rlwatch.sim import commands
from rlwatch.sim.common import EXPERIMENT, TRIAL, Layout, atomic_write_text
from rlwatch.sim.scenarios import Scenario
from rlwatch.sim.torchrun import SCRIPT as TORCHRUN_SCRIPT
from rlwatch.sim.userscript import DDP_SCRIPT, TRAIN_SCRIPT, colocated_script

MIB = 1024 * 1024


class _PlainDumper(yaml.SafeDumper):
    """Writes repeated lists out in full: a person reading rlwatch.yaml should not have to chase ``*id001``."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def training_yaml(layout: Layout, scenario: Scenario, port: int) -> str:
    """The run's own configuration, with the knobs incident 1's people had to change."""
    spec = scenario.spec
    if scenario.profile == "trl":
        cfg: dict[str, Any] = {
            "model_name_or_path": "Qwen/Qwen2.5-7B-Instruct",
            "output_dir": "output",
            "learning_rate": 1.0e-6,
            "per_device_train_batch_size": 8,
            "num_generations": 8,
            "max_steps": spec["max_steps"],
            "save_steps": spec["save_steps"],
            "logging_steps": 1,
            "use_vllm": True,
            "vllm_mode": "server",
            "vllm_server_host": "127.0.0.1",
            "vllm_server_port": port,
            "vllm_server_timeout": 240.0,
            "beta": 0.04,
        }
    elif scenario.profile == "workers":
        cfg = {
            "study": "gsm8k-reward-tuning",
            "workers": spec["workers"],
            "emergency_brake": {"min_free_gb": 2.0},
            "watchdog": {"restart_every_minutes": 60, "restart_above_gb": 8},
        }
    else:
        cfg = {
            "experiment_name": EXPERIMENT,
            "trial_name": TRIAL,
            "cluster": {"fileroot": str(layout.run_dir), "n_nodes": 1, "n_gpus_per_node": 1},
            "allocation_mode": "sglang.d1p1t1+d1p1t1",
            "total_train_epochs": spec["epochs"],
            "actor": {"path": "Qwen/Qwen2.5-1.5B-Instruct", "weight_update_mode": "disk"},
            "sglang": {"mem_fraction_static": 0.8, "context_length": 32768},
            "rollout": {
                "max_concurrent_rollouts": 32,
                "request_timeout": 3600,
                "request_retries": 3,
                "setup_timeout": 120,
                "max_head_offpolicyness": 2,
            },
            "saver": {"freq_steps": spec["save_freq"]},
            # Re-running the launch script resumes from recover info; a failed trainer is never relaunched.
            "recover": {"mode": "auto", "retries": 0, "freq_steps": spec["save_freq"]},
            "train_dataset": {"path": "openai/gsm8k", "batch_size": 256},
        }
    return yaml.safe_dump(cfg, sort_keys=False)


def _rule(role: str, regex: str, command: list[str] | None, layout: Layout, log: str, **extra: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {"role": role, "cmdline_regex": regex}
    if command is not None:
        rule["command"] = command
    rule.update({"cwd": str(layout.run_dir), "log": log, **extra})
    return rule


def rlwatch_config(
    layout: Layout, scenario: Scenario, sim_id: str, *, port: int, speed: float, seed: int
) -> dict[str, Any]:
    run_dir = layout.run_dir
    flavour = scenario.flavour
    rel = layout.rel
    total_steps: int | None = None
    logs = ["logs/*.log"]
    processes: list[dict[str, Any]] = []
    server: dict[str, Any] = {}
    actions: dict[str, Any] = {"grace_s": max(2.0, 10.0 / speed), "verify_timeout_s": max(10.0, 120.0 / speed)}
    training: dict[str, Any] = {}
    events: dict[str, Any] = {"rate_window_s": max(10.0, 300.0 / speed)}

    if flavour is not None:
        server_log = layout.server_log if flavour == "areal" else layout.trl_server_log
        trainer_log = layout.trainer_log if flavour == "areal" else layout.trl_trainer_log
        launcher_log = layout.launcher_log
        launcher_argv = commands.launcher(sim_id, run_dir, speed, seed, flavour)
        server_argv = commands.server(sim_id, run_dir, speed, seed, flavour, port=port)
        trainer_piece = "trainer" if flavour == "areal" else "trl_trainer"
        if scenario.start == "entrypoint":
            processes.append(
                _rule("container", commands.regex("entrypoint", sim_id), None, layout, rel(layout.container_log))
            )
        processes += [
            _rule("launcher", commands.regex("launcher", sim_id), launcher_argv, layout, rel(launcher_log)),
            _rule(
                "trainer",
                commands.regex(trainer_piece, sim_id),
                commands.trainer(sim_id, run_dir, speed, seed, flavour),
                layout,
                rel(trainer_log),
            ),
            _rule("server", commands.regex("server", sim_id), server_argv, layout, rel(server_log)),
        ]
        server = {
            "kind": "sglang" if flavour == "areal" else "trl",
            "url": f"http://127.0.0.1:{port}",
            "health_path": "/health" if flavour == "areal" else "/health/",
            "timeout_s": max(0.5, 2.0 / speed),
            "interval_s": max(0.5, 5.0 / speed),
            "command": server_argv,
            "cwd": str(run_dir),
            "log": rel(server_log),
            "start_timeout_s": max(10.0, 600.0 / speed),
        }
        actions.update({"resume_command": launcher_argv, "resume_cwd": str(run_dir), "resume_log": rel(launcher_log)})
    if flavour == "areal":
        trial = layout.trial_rel
        # One glob for the trial's logs and wandb's console capture, which the simulator writes only once a storm
        # begins: a path of its own would be a source "missing" in every demo where no storm comes.
        logs += [f"logs/{trial}/**/*.log"]
        total_steps = int(scenario.spec["epochs"]) * int(scenario.spec["steps_per_epoch"])
        training = {
            "checkpoint_dirs": [rel(layout.ckpt_root)],
            "recover_info": rel(layout.step_info),
            "config_file": rel(layout.config_yaml),
        }
    elif flavour == "trl":
        total_steps = int(scenario.spec["max_steps"])
        training = {"checkpoint_dirs": [rel(layout.trl_output)], "config_file": rel(layout.config_yaml)}
    else:
        for i in range(int(scenario.spec["workers"])):
            processes.append(
                _rule(
                    "worker",
                    commands.regex("worker", sim_id, rf".*--index {i}( |$)"),
                    commands.worker(sim_id, run_dir, speed, seed, i),
                    layout,
                    rel(layout.worker_log(i)),
                    memory_limit_bytes=120 * MIB,
                )
            )
        processes.append(
            _rule(
                "watchdog",
                rf"rlwatch watch .*{re.escape(str(run_dir))}",
                [sys.executable, "-m", "rlwatch", "watch", str(run_dir)],
                layout,
                "logs/watchdog.log",
                expected=True,
            )
        )
        training = {"config_file": rel(layout.config_yaml)}
        events["custom"] = [
            {"name": "trial", "pattern": r"\btrial \d+ done in\b", "severity": "info", "progress": True}
        ]
    training["logs"] = logs
    if total_steps is not None:
        training["total_steps"] = total_steps
    return {
        "profile": scenario.profile,
        "simulated": True,
        "interval_s": max(0.5, 2.0 / speed),
        "training": training,
        "server": server,
        "gpu": {
            "backend": "simulated",
            "simulated_state": rel(layout.gpu_state),
            "device_glob": str(layout.device.parent / "nvidia*"),
        },
        "processes": processes,
        "events": events,
        "thresholds": {
            "stall_s": max(5.0, 600.0 / speed),
            "restart_loop_uptime_s": max(1.0, 60.0 / speed),
        },
        # The simulated host's kernel is its dmesg.log alone (the real machine's ring is not the simulation's).
        "host": {"kernel_log": "files", **({"simulated_shm_bytes": scenario.shm_bytes} if scenario.shm_bytes else {})},
        "actions": actions,
        "policies": watchdog_policies(flavour, speed),
        "watchdog": watchdog_section(speed),
    }


def watchdog_policies(flavour: str | None, speed: float) -> list[dict[str, Any]]:
    """The shipped profiles' policies, with their durations shortened by the speed-up.

    The worker pool gets only the brake escalation: the simulated workers pass their 120 MiB limit a moment before
    the brake starts, and the incident to reproduce is the brake that cannot help until the worker is restarted.
    """
    if flavour is None:
        return [
            {
                "name": "brake-restarts-worker",
                "when": {"event": "emergency_brake", "streak": 10},
                "actions": ["restart-workers"],
            }
        ]
    return [
        {
            "name": "server-down",
            "when": {"server_down": True, "for_s": max(1.0, 60.0 / speed)},
            "actions": ["restart-server", "resume"],
        }
    ]


def watchdog_section(speed: float) -> dict[str, Any]:
    return {
        "budget": {
            "burst": 3,
            "window_s": max(60.0, 1800.0 / speed),
            "delay_s": max(0.5, 10.0 / speed),
            "max_delay_s": max(5.0, 300.0 / speed),
            "reset_after_s": max(10.0, 600.0 / speed),
            "startup_s": max(2.0, 60.0 / speed),
            "startup_retries": 2,
        },
        "heartbeat_s": max(0.5, 5.0 / speed),
        "stale_after_s": max(5.0, 60.0 / speed),
    }


def write_user_files(layout: Layout, scenario: Scenario) -> None:
    """A run started by hand: only the user's ``train.py`` (and, for torchrun, the ``torchrun`` this host runs)."""
    spec = scenario.spec
    if scenario.start == "script":
        atomic_write_text(layout.user_script, colocated_script(int(spec["max_steps"]), int(spec["save_steps"])))
    elif scenario.start == "torchrun":
        atomic_write_text(layout.user_script, DDP_SCRIPT)
        atomic_write_text(layout.torchrun_bin, TORCHRUN_SCRIPT.format(python=sys.executable))
        layout.torchrun_bin.chmod(0o755)


def write_run_files(layout: Layout, scenario: Scenario, sim_id: str, *, port: int, speed: float, seed: int) -> None:
    """Write ``config.yaml``, ``train_grpo.py`` (TRL) and a validated ``rlwatch.yaml`` into the run directory; for a
    scenario without ``rlwatch.yaml``, only the user's own files."""
    if not scenario.rlwatch_yaml:
        write_user_files(layout, scenario)
        return
    atomic_write_text(layout.config_yaml, training_yaml(layout, scenario, port))
    if scenario.profile == "trl":
        atomic_write_text(layout.train_script, TRAIN_SCRIPT)
    data = rlwatch_config(layout, scenario, sim_id, port=port, speed=speed, seed=seed)
    Config.model_validate(data)  # a simulator that writes a config rlwatch rejects is a bug: fail loudly here
    header = (
        f"# Written by `rlwatch sim {scenario.name}` (simulation {sim_id}); rewritten on every start.\n"
        "# Every process rule matches this simulation's id only, so nothing else on the host is ever selected.\n"
    )
    atomic_write_text(layout.rlwatch_yaml, header + yaml.dump(data, Dumper=_PlainDumper, sort_keys=False, width=120))
