"""The AReaL GRPO trainer stand-in (rank 0 of ``torchrun ... gsm8k_grpo.py``), writing v0.5-format ``trainer.log``.

Each step really calls the server (``POST /generate``, then ``POST /update_weights_from_disk``), so a dead or hung
server shows up here exactly as it would: retry warnings, "Workflow execution failed" errors with tracebacks, and in
the end rank 0 dying in the weight update. Checkpoints and recover info are written like AReaL's saver, and a start
with ``recover_info/step_info.json`` present resumes at AReaL's next step.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import time
from typing import Any

from rlwatch.sim import formats, lifeline, saver
from rlwatch.sim.client import CallError, call
from rlwatch.sim.common import (
    Layout,
    claim_fault,
    holding_device,
    parse_with_spec,
    scaled,
    sleep_until,
    write_kernel_log,
)
from rlwatch.sim.ledger import LogSink, PieceLedger

HOST = "127.0.0.1"
RETRIES = 3
ENGINE = "[RemoteInfEngine Rank 0]"
PAYLOAD = (
    "{'input_ids': [151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13], 'sampling_params': {'top_p': 1.0, "
    "'top_k': 100000000, 'max_new_tokens': 1024, 'temperature': 1.0, 'stop_token_ids': [151645, 151643]}, "
    "'return_logprob': True, 'stream': False}"
)


class Fatal(Exception):
    """Rank 0 cannot go on: the process ends with a failure exit code."""


class Trainer:
    def __init__(self, layout: Layout, spec: dict[str, Any], speed: float, seed: int) -> None:
        self.layout = layout
        self.speed = speed
        self.rng = random.Random(seed)
        self.port = int(spec["port"])
        self.epochs = int(spec.get("epochs", 2))
        self.per_epoch = int(spec.get("steps_per_epoch", 30))
        self.total = self.epochs * self.per_epoch
        self.save_freq = int(spec.get("save_freq", 5))
        self.step_time = float(spec.get("step_time", 2.0))
        self.max_failures = int(spec.get("max_workflow_failures", 8))
        self.timeout = scaled(float(spec.get("request_timeout", 10.0)), speed, floor=0.2)
        self.retry_delay = scaled(float(spec.get("retry_delay", 1.0)), speed)
        self.setup_timeout = scaled(float(spec.get("setup_timeout", 120.0)), speed, floor=2.0)
        self.weight_drift = bool(spec.get("weight_drift", False))
        stop_at = spec.get("stop_at_step")
        self.stop_at = int(stop_at) if stop_at and claim_fault(layout, "container-crash") else None
        gpu_at = spec.get("gpu_fault_at_step")
        self.gpu_fault_at = int(gpu_at) if gpu_at and claim_fault(layout, "gpu-xid") else None
        shm_at = spec.get("shm_error_at_step")
        self.shm_error_at = int(shm_at) if shm_at and claim_fault(layout, "shm-bus-error") else None
        self.ledger = PieceLedger(layout, "trainer")
        self.out = LogSink(self.ledger)
        self.wandb: LogSink | None = None
        self.failures = 0  # in a row
        self.total_failures = 0
        self.started = time.time()

    # ------------------------------------------------------------------------------------------------ output
    def info(self, logger: str, message: str) -> None:
        self.out.write(formats.areal(logger, "INFO", message))

    def storm(self, text: str) -> None:
        """A failure line: in ``trainer.log`` and, as in incident 1, in wandb's captured console output too."""
        self.out.write(text)
        if self.wandb is None:
            self.wandb = LogSink(self.ledger, self.layout.wandb_log)
        self.wandb.write(text)

    def url(self, endpoint: str) -> str:
        return f"http://{HOST}:{self.port}{endpoint}"

    # ------------------------------------------------------------------------------------------------ startup
    def start_step(self) -> int:
        info = saver.read_step_info(self.layout)
        if info is None:
            return 0
        self.info("Recover", f"Loading recover info from {self.layout.recover_dir}")
        self.info(
            "Recover",
            f"Recovering from StepInfo(epoch={info['epoch']}, epoch_step={info['epoch_step']}, "
            f"global_step={info['global_step']}, steps_per_epoch={info['steps_per_epoch']}).",
        )
        return saver.step_after(info)[2]

    def wait_server(self) -> None:
        self.info(ENGINE, "Get server addresses from name_resolve.")
        self.info(ENGINE, "Waiting for server ready...")
        deadline = time.monotonic() + self.setup_timeout
        while True:
            try:
                call(self.url("/health"), timeout=self.timeout)
                break
            except CallError:
                if time.monotonic() > deadline:
                    self.out.write(
                        formats.traceback_block(
                            [
                                (
                                    f"{formats.SITE}/areal/core/remote_inf_engine.py",
                                    301,
                                    "initialize",
                                    'raise TimeoutError("server launch failed")',
                                )
                            ],
                            "TimeoutError: server launch failed",
                        )
                    )
                    raise Fatal("server launch failed") from None
                time.sleep(scaled(0.5, self.speed, floor=0.05))
        self.info(ENGINE, "Servers are all ready!")

    # ------------------------------------------------------------------------------------------------ requests
    def request(self, endpoint: str, payload: dict[str, Any], shown_payload: str) -> Any:
        """``arequest_with_retry``: three attempts with a warning each, then a RuntimeError (here: CallError)."""
        last: CallError | None = None
        for attempt in range(1, RETRIES + 1):
            try:
                return call(self.url(endpoint), payload, timeout=self.timeout)
            except CallError as exc:
                last = exc
                if exc.kind == "refused":
                    msg = formats.refused_warning(HOST, self.port, endpoint, attempt, RETRIES)
                elif exc.kind == "timeout":
                    msg = (
                        f"HTTP request to {HOST}:{self.port}{endpoint} timed out after {self.timeout:.2f}s "
                        f"(attempt {attempt}/{RETRIES})"
                    )
                else:
                    msg = (
                        f"HTTP request to {HOST}:{self.port}{endpoint} failed with {exc} (attempt {attempt}/{RETRIES})"
                    )
                self.storm(formats.areal("HTTPUtils", "WARNING", msg))
                if attempt < RETRIES:
                    time.sleep(self.retry_delay)
        assert last is not None
        raise CallError(last.kind, self.final_error(last, endpoint, shown_payload))

    def final_error(self, exc: CallError, endpoint: str, shown_payload: str) -> str:
        if exc.kind == "refused":
            return formats.refused_error(HOST, self.port, endpoint, shown_payload)
        last = "TimeoutError()" if exc.kind == "timeout" else repr(str(exc))
        return (
            f"RuntimeError: Failed after 3 retries each. Payload: {shown_payload}. Addr: {HOST}:{self.port}. "
            f"Endpoint: {endpoint}. Last error: {last}"
        )

    def rollout(self) -> bool:
        """One batch of rollouts; False when the workflow failed (the trajectory is rejected)."""
        try:
            self.request(
                "/generate", {"input_ids": [151644, 8948, 198], "sampling_params": {"max_new_tokens": 1024}}, PAYLOAD
            )
            self.failures = 0  # a server brought back by hand ends the storm before rank 0 gives up
            return True
        except CallError as exc:
            final = str(exc)
            self.storm(
                formats.areal(
                    ENGINE, "ERROR", f"Workflow execution failed: {final}\n" + formats.workflow_traceback(final)
                )
            )
            self.failures += 1
            self.total_failures += 1
            self.ledger.update(workflow_failures=self.total_failures)
            return False

    def update_weights(self, global_step: int) -> float:
        path = f"{self.layout.ckpt_dir / 'weight_update'}/v{global_step + 1}"
        shown = f"{{'model_path': '{path}', 'abort_all_requests': True}}"
        t0 = time.monotonic()
        try:
            self.request("/update_weights_from_disk", {"model_path": path}, shown)
        except CallError as exc:
            self.storm(formats.update_weights_traceback(str(exc)))
            self.out.write(formats.torchrun_failure_report(os.getpid(), "gsm8k_grpo.py", socket.gethostname(), 1))
            raise Fatal("weight update failed") from None
        return time.monotonic() - t0

    # ------------------------------------------------------------------------------------------------ steps
    def stats(self, g: int, weight_s: float) -> list[tuple[str, float]]:
        reward = min(1.0, max(0.0, 0.22 + 0.55 * (1 - 2.718 ** (-g / 25)) + self.rng.gauss(0, 0.03)))
        seq = 180 + 60 * (g / max(1, self.total)) + self.rng.uniform(-15, 15)
        rows = {
            "ppo_actor/task_reward/avg": reward,
            "ppo_actor/task_reward/max": 1.0,
            "ppo_actor/task_reward/min": 0.0,
            "ppo_actor/seq_len/avg": seq,
            "ppo_actor/update/actor_loss/avg": self.rng.gauss(0, 0.01),
            "ppo_actor/update/approx_kl/avg": abs(self.rng.gauss(0.002, 0.001)),
            "ppo_actor/update/entropy/avg": 0.45 - 0.1 * g / max(1, self.total) + self.rng.uniform(-0.02, 0.02),
            "ppo_actor/update/grad_norm": abs(self.rng.gauss(0.08, 0.02)),
            "rollout/reward": reward,
            "timeperf/rollout": self.step_time * self.rng.uniform(6.0, 9.0),
            "timeperf/train_step": self.step_time * self.rng.uniform(3.0, 4.0),
            "timeperf/update_weights": weight_s,
        }
        return sorted(rows.items())

    def weight_seconds(self, g: int) -> float:
        """The reported disk weight-update time; in the restart-loop run it creeps toward the 120 s timeout."""
        if self.weight_drift and self.stop_at:
            return 8.0 + 100.0 * g / self.stop_at + self.rng.uniform(-1.5, 1.5)
        return self.rng.uniform(8.5, 12.5)

    def checkpoint(self, epoch: int, epoch_step: int, g: int) -> None:
        saver.areal_checkpoint(self.layout, epoch, epoch_step, g)
        path = saver.recover_dump(self.layout, epoch, epoch_step, g, self.per_epoch)
        self.info("Recover", f"Saved recover checkpoint to {path}")
        self.ledger.update(last_checkpoint_global_step=g, recover_global_step=g)

    def step(self, g: int) -> None:
        epoch, epoch_step = divmod(g, self.per_epoch)
        while not self.rollout():
            if self.failures >= self.max_failures:
                self.update_weights(g)  # the server is gone: rank 0 dies here
            time.sleep(scaled(self.step_time, self.speed))
        self.update_weights(g)
        shown = self.weight_seconds(g)
        self.info(
            ENGINE, f"Loading weights from disk done in {shown:.2f}s. Respond time: {self.rng.uniform(1.2, 3.0):.2f}s."
        )
        if (g + 1) % self.save_freq == 0:
            self.checkpoint(epoch, epoch_step, g)
        self.info(
            "StatsLogger",
            f"Epoch {epoch + 1}/{self.epochs} Step {epoch_step + 1}/{self.per_epoch} "
            f"Train step {g + 1}/{self.total} done.",
        )
        self.info("StatsLogger", "Stats (1/1):")
        self.info("StatsLogger", "\n" + formats.fancy_grid(self.stats(g, shown)))
        self.ledger.update(last_step=g, last_step_at=time.time(), total_steps=self.total)

    def gpu_falls_off(self) -> None:
        """Scenario gpu-xid: the GPU falls off the bus under the step. The driver says so in the kernel log (NVIDIA's
        lines, tests/real/host/kernel/xid-79-fallen-off-bus-aer.log), NVML loses the GPU (the simulated GPU reads the
        marker), and rank 0's next CUDA call fails."""
        pci = "0000:3b:00"
        write_kernel_log(
            self.layout,
            f"NVRM: GPU at PCI:{pci}: GPU-sim-0",
            f"NVRM: Xid (PCI:{pci}): 79, pid={os.getpid()}, name=python3, GPU has fallen off the bus.",
            f"NVRM: GPU {pci}.0: GPU has fallen off the bus.",
        )
        (self.layout.sim_dir / "gpu_lost").touch()
        self.out.write(formats.train_step_traceback(formats.CUDA_LAUNCH_FAILURE))
        self.ledger.update(gpu_fault_at=time.time())
        raise Fatal("the GPU fell off the bus")

    def shm_bus_error(self) -> None:
        """Scenario shm-small: a DataLoader worker dies of SIGBUS over the small /dev/shm, and rank 0 with it."""
        self.out.write(formats.dataloader_bus_error(os.getpid() + 1))
        self.ledger.update(shm_error_at=time.time())
        raise Fatal("a DataLoader worker died of SIGBUS")

    def run(self) -> int:
        try:
            g = self.start_step()
            self.info("[FSDPEngine Rank 0]", "Initializing device mesh with parallel dims (dp=1, sp=1, tp=1).")
            self.wait_server()
            self.ledger.update("running", start_step=g, total_steps=self.total)
            while g < self.total:
                t0 = time.monotonic()
                if self.gpu_fault_at is not None and g >= self.gpu_fault_at:
                    self.gpu_falls_off()
                if self.shm_error_at is not None and g >= self.shm_error_at:
                    self.shm_bus_error()
                self.step(g)
                g += 1
                if self.stop_at is not None and g >= self.stop_at:
                    self.ledger.update("doomed")  # the container is about to take this process down silently
                    while True:
                        time.sleep(3600)
                sleep_until(t0 + scaled(self.step_time, self.speed))
        except Fatal:
            self.ledger.update("failed", failed_at=time.time())
            return 1
        self.info("StatsLogger", f"Training completes! Total time elapsed {time.time() - self.started:.2f}.")
        self.ledger.update("finished")
        while True:  # the stage stays up for inspection; nothing more is written
            time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    started = parse_with_spec("trainer", __doc__ or "", argv)
    if started is None:
        return 2
    args, layout, spec = started
    lifeline.watch(layout.alive, args.sim_id)
    with holding_device(layout):
        return Trainer(layout, spec, args.speed, args.seed).run()


if __name__ == "__main__":
    sys.exit(main())
