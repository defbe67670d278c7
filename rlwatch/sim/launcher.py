"""The launcher stand-in: ``python3 -m areal.launcher.local gsm8k_grpo.py --config config.yaml`` (or, for TRL, the
shell wrapper that starts ``trl vllm-serve`` and retries ``accelerate launch train_grpo.py``).

It starts the server, waits for it, then starts the trainer, each as a child in its own session with its output
appended to its log (AReaL's ``cmd 2>&1 | tee -a <log>``). Recovery is off as in incident 1: when the trainer dies
the launcher reports it and then sits idle, the way that run sat for 13 hours. Running this same argv again is
"re-running the launch script": the trainer resumes from the recover info. One-shot faults are armed by the
supervisor as tokens, so a re-run is not hit by the same injected failure again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from rlwatch.sim import commands, formats, lifeline
from rlwatch.sim.client import CallError, call
from rlwatch.sim.common import Layout, claim_fault, parse_with_spec, scaled, spawn_piece
from rlwatch.sim.ledger import LogSink, PieceLedger

JOB = "gsm8k-grpo_trial0"


class Launcher:
    def __init__(self, layout: Layout, spec: dict[str, Any], sim_id: str, speed: float, seed: int) -> None:
        self.layout = layout
        self.spec = spec
        self.sim_id = sim_id
        self.speed = speed
        self.seed = seed
        self.flavour = str(spec.get("flavour", "areal"))
        self.port = int(spec["port"])
        self.ledger = PieceLedger(layout, "launcher")
        self.out = LogSink(self.ledger)
        self.children: list[subprocess.Popen[bytes]] = []

    # ------------------------------------------------------------------------------------------------ helpers
    def say(self, logger: str, level: str, message: str) -> None:
        if self.flavour == "areal":
            self.out.write(formats.areal(logger, level, message))
        else:
            self.out.write(f"[{formats.stamp_iso()}] {message}")

    def spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        proc = spawn_piece(argv, log, self.layout.run_dir)
        self.children.append(proc)
        return proc

    def stop_children(self) -> None:
        live = [p for p in self.children if p.poll() is None]
        for p in live:
            try:
                p.terminate()
            except OSError:
                pass
        deadline = time.monotonic() + 2.0
        for p in live:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()

    def idle(self, state: str) -> None:
        self.ledger.update(state)
        while True:
            time.sleep(3600)

    # ------------------------------------------------------------------------------------------------ server
    def server_argv(self) -> list[str]:
        argv = commands.server(self.sim_id, self.layout.run_dir, self.speed, self.seed, self.flavour, port=self.port)
        if self.spec.get("server_die_after") is not None and claim_fault(self.layout, "server-die"):
            argv += ["--die-after", str(self.spec["server_die_after"])]
        if self.spec.get("server_hang_on_shutdown") and claim_fault(self.layout, "server-hang-on-shutdown"):
            argv += ["--hang-on-shutdown"]
        return argv

    def start_server(self) -> subprocess.Popen[bytes] | None:
        """Start the server, retrying a bounded number of times; None when it never came up."""
        log = self.layout.server_log if self.flavour == "areal" else self.layout.trl_server_log
        health = "/health" if self.flavour == "areal" else "/health/"
        attempts = int(self.spec.get("server_attempts", 3))
        for attempt in range(1, attempts + 1):
            proc = self.spawn(self.server_argv(), log)
            self.ledger.update(server_pid=proc.pid, server_attempts=attempt)
            deadline = time.monotonic() + scaled(float(self.spec.get("setup_timeout", 120.0)), self.speed, 2.0)
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    call(f"http://127.0.0.1:{self.port}{health}", timeout=1.0)
                    return proc
                except CallError:
                    time.sleep(scaled(0.5, self.speed, floor=0.05))
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            self.say(
                "LocalLauncher",
                "ERROR",
                f"JobException: Job {JOB}:llm_server JobState.FAILED at node local "
                f"(exit code {proc.returncode}, attempt {attempt}/{attempts})",
            )
            if attempt < attempts:
                time.sleep(scaled(float(self.spec.get("server_retry_delay", 2.0)), self.speed))
        return None

    # ------------------------------------------------------------------------------------------------ runs
    def run_areal(self) -> int:
        resumed = self.layout.step_info.exists()
        self.say(
            "LocalLauncher",
            "INFO",
            f"LocalLauncher: experiment_name=gsm8k-grpo, trial_name=trial0, "
            f"fileroot={self.layout.run_dir}, run_id=0, is_recover_run={resumed}",
        )
        self.say("LauncherUtils", "INFO", f"Searching for recover info file in {self.layout.recover_dir}.")
        if not resumed:
            self.say("LauncherUtils", "INFO", f"Recover info not found at: {self.layout.recover_dir}")
        server = self.start_server()
        if server is None:
            self.say(
                "LauncherUtils",
                "ERROR",
                "TimeoutError: Timeout waiting for rollout servers to be ready. Expected 1 servers, found 0.",
            )
            self.ledger.update("gave_up")
            return 1
        self.say("LauncherUtils", "INFO", f"Found 1 rollout servers: 127.0.0.1:{self.port}")
        argv = commands.trainer(self.sim_id, self.layout.run_dir, self.speed, self.seed, self.flavour)
        trainer = self.spawn(argv, self.layout.trainer_log)
        self.ledger.update("waiting", trainer_pid=trainer.pid)
        rc = trainer.wait()
        state = "COMPLETED" if rc == 0 else "FAILED"
        self.say(
            "LocalLauncher",
            "ERROR" if rc else "INFO",
            f"JobException: Job {JOB}:trainer JobState.{state} at node local (exit code {rc})",
        )
        self.say("LocalLauncher", "INFO", "Recover mode is disabled (recover.retries=0): not relaunching.")
        self.idle("idle")
        return rc

    def run_trl(self) -> int:
        self.say("", "INFO", f"+ trl vllm-serve --model Qwen/Qwen2.5-7B-Instruct --port {self.port} &")
        server = self.start_server()
        if server is None:
            self.ledger.update("gave_up")
            return 1
        attempts = int(self.spec.get("trainer_attempts", 3))
        train_log = LogSink(self.ledger, self.layout.trl_trainer_log)
        argv = commands.trainer(self.sim_id, self.layout.run_dir, self.speed, self.seed, self.flavour)
        for attempt in range(1, attempts + 1):
            train_log.write(f"+ {' '.join(commands.TRL_COMMAND)}  # attempt {attempt}/{attempts}")
            trainer = self.spawn(argv, self.layout.trl_trainer_log)
            self.ledger.update("waiting", trainer_pid=trainer.pid, trainer_attempts=attempt)
            rc = trainer.wait()
            self.say("", "INFO", f"train_grpo.py exited with code {rc} (attempt {attempt}/{attempts})")
            if rc == 0:
                self.idle("idle")
            if attempt < attempts:
                time.sleep(scaled(float(self.spec.get("trainer_retry_delay", 5.0)), self.speed))
        self.say("", "INFO", f"giving up after {attempts} attempts; stopping the vLLM server")
        server.send_signal(signal.SIGTERM)  # incident 5: on one pod the server then hung while shutting down
        self.idle("gave_up")
        return 1


def main(argv: list[str] | None = None) -> int:
    started = parse_with_spec("launcher", __doc__ or "", argv, "the launch script and its arguments (informational)")
    if started is None:
        return 2
    args, layout, spec = started
    launcher = Launcher(layout, spec, args.sim_id, args.speed, args.seed)

    def on_term(signum: int, frame: FrameType | None) -> None:
        launcher.stop_children()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    lifeline.watch(layout.alive, args.sim_id, launcher.stop_children)
    if launcher.flavour == "trl":
        return launcher.run_trl()
    return launcher.run_areal()


if __name__ == "__main__":
    sys.exit(main())
