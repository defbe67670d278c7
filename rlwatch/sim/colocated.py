"""TRL's ``GRPOConfig`` and ``GRPOTrainer`` with colocated generation, as the user's ``train.py`` imports them.

Scenario ``trl-colocated`` runs ``python3 train.py`` in the run directory with its output redirected to
``train.log``: nothing in its command line names TRL or the simulator, so rlwatch can only know it by what it does.
This trainer writes what transformers 5 and TRL 1.16 print on a real colocated run
(tests/real/trl-grpo-colocated/run/train.log): tqdm bars on ``\\r``, a metric dict per step with every value
formatted ``.4g``, "Writing model shards" at each save, the ``train_runtime`` summary; it saves
``output/checkpoint-N/trainer_state.json`` every ``save_steps`` and at the end, writes TRL's model card, and exits
0. There is no server: completions are generated in the trainer.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

from rlwatch.sim import formats, lifeline, saver
from rlwatch.sim.common import Layout, load_spec, scaled, sleep_until
from rlwatch.sim.ledger import LogSink, PieceLedger

WRITING_SHARDS = (
    "\rWriting model shards:   0%|          | 0/1 [00:00<?, ?it/s]\x1b[A"
    "\rWriting model shards: 100%|██████████| 1/1 [00:00<00:00, {rate:.2f}it/s]\n"
)

MODEL_CARD = """\
---
library_name: transformers
model_name: output
tags:
- generated_from_trainer
- trl
- grpo
licence: license
---

# Model Card for output

This model is a fine-tuned version of [None](https://huggingface.co/None).
It has been trained using [TRL](https://github.com/huggingface/trl).

## Training procedure

This model was trained with GRPO, a method introduced in [DeepSeekMath: Pushing the Limits of Mathematical \
Reasoning in Open Language Models](https://huggingface.co/papers/2402.03300).

### Framework versions

- TRL: 1.16.0
- Transformers: 5.17.0
- Pytorch: 2.11.0
- Datasets: 5.2.0
- Tokenizers: 0.23.2
"""


class GRPOConfig:
    """The settings the script passes; only those the stand-in acts on are read."""

    def __init__(self, **kwargs: Any) -> None:
        self.output_dir = str(kwargs.get("output_dir", "output"))
        self.max_steps = int(kwargs.get("max_steps", 30))
        self.save_steps = int(kwargs.get("save_steps", 5))
        self.use_vllm = bool(kwargs.get("use_vllm", False))
        self.extra = kwargs


class GRPOTrainer:
    """Trains for ``args.max_steps`` steps at the simulation's pace, in the current directory's simulation."""

    def __init__(
        self,
        model: str,
        reward_funcs: Callable[..., list[float]] | None = None,
        args: GRPOConfig | None = None,
        **_: Any,
    ) -> None:
        self.args = args or GRPOConfig()
        self.layout = Layout.of(os.getcwd())
        spec = load_spec(self.layout)
        self.speed = float(spec.get("speed", 1.0))
        self.step_time = float(spec.get("step_time", 2.0))
        self.rng = random.Random(int(spec.get("seed", 0)))
        self.reward_funcs = reward_funcs
        if "sim_id" in spec:
            lifeline.watch(self.layout.alive, str(spec["sim_id"]))
        self.ledger = PieceLedger(self.layout, "trainer")
        self.out = LogSink(self.ledger)
        self.history: list[dict[str, Any]] = []
        nan_from = spec.get("nan_from_step")  # scenario nan-loss: loss and grad norm turn NaN from this step on
        self.nan_from = int(nan_from) if nan_from else None

    def metrics(self, step: int, step_time: float) -> dict[str, float]:
        total = self.args.max_steps
        length = round(self.rng.uniform(12, 16), 2)
        completions = ["x " * int(length)] * 4
        rewards = self.reward_funcs(completions) if self.reward_funcs else [0.0]
        reward = sum(rewards) / len(rewards) + self.rng.gauss(0.0, 0.05)
        std = abs(self.rng.gauss(0.15, 0.05))
        diverged = self.nan_from is not None and step >= self.nan_from
        return {
            "loss": float("nan") if diverged else self.rng.gauss(-0.05, 0.12),
            "grad_norm": float("nan") if diverged else self.rng.uniform(0.8, 1.3),
            "learning_rate": 1e-4 * (1 - (step - 1) / total),
            "num_tokens": float(180 * step + self.rng.randint(0, 20)),
            "completions/mean_length": length,
            "completions/min_length": float(self.rng.randint(1, 12)),
            "completions/max_length": 16.0,
            "completions/clipped_ratio": round(self.rng.uniform(0.5, 1.0), 3),
            "completions/mean_terminated_length": round(self.rng.uniform(3, 14), 3),
            "completions/min_terminated_length": float(self.rng.randint(1, 7)),
            "completions/max_terminated_length": float(self.rng.randint(8, 15)),
            "rewards/reward_len/mean": reward,
            "rewards/reward_len/std": std,
            "reward": reward,
            "reward_std": std,
            "frac_reward_zero_std": 0.0,
            "entropy": 4.292 - 0.0001 * step,
            "clip_ratio/low_mean": 0.0,
            "clip_ratio/high_mean": 0.0,
            "clip_ratio/region_mean": 0.0,
            "clip_ratio/low_min": 0.0,
            "clip_ratio/high_max": 0.0,
            "step_time": step_time,
            "epoch": step / 128,
        }

    def save(self, step: int, epoch: float) -> str:
        saver.hf_checkpoint(
            self.layout.run_dir / self.args.output_dir,
            step,
            max_steps=self.args.max_steps,
            save_steps=self.args.save_steps,
            epoch=epoch,
            log_history=self.history,
        )
        self.ledger.update(last_checkpoint_global_step=step)
        return WRITING_SHARDS.format(rate=self.rng.uniform(400, 520))

    def train(self) -> None:
        total = self.args.max_steps
        self.ledger.update("running", total_steps=total)
        self.out.write(
            "\rLoading weights:   0%|          | 0/21 [00:00<?, ?it/s]"
            f"\rLoading weights: 100%|██████████| 21/21 [00:00<00:00, {self.rng.uniform(4000, 5000):.2f}it/s]\n"
        )
        t0 = time.monotonic()
        self.out.write("\r" + formats.tqdm_bar(0, total, 0.0) + "\r")
        for step in range(1, total + 1):
            started = time.monotonic()
            sleep_until(started + scaled(self.step_time, self.speed))
            logs = self.metrics(step, time.monotonic() - started)
            self.history.append({**logs, "step": step})
            bar = formats.tqdm_bar(step, total, time.monotonic() - t0)
            # tqdm clears its bar for the logged dict, then draws it again (transformers' ProgressCallback.on_log)
            text = f"{bar}\r{' ' * len(bar)}\r{formats.hf_logs(logs)}\n\r{bar}"
            self.ledger.update(last_step=step, last_step_at=time.time())
            if step % self.args.save_steps == 0 or step == total:
                text += "\n" + self.save(step, logs["epoch"]) + "\r"
            else:
                text += "\r"
            self.out.write(text)
        runtime = time.monotonic() - t0
        bar = formats.tqdm_bar(total, total, runtime)
        summary = {
            "train_runtime": runtime,
            "train_samples_per_second": 8 * total / runtime,
            "train_steps_per_second": total / runtime,
            "train_loss": sum(h["loss"] for h in self.history) / total,
            "epoch": total / 128,
        }
        final = formats.tqdm_bar(total, total, time.monotonic() - t0)
        self.out.write(f"{' ' * len(bar)}\r{formats.hf_logs(summary)}\n\r{bar}\r{final}\n")
        card = self.layout.run_dir / self.args.output_dir / "README.md"
        card.write_text(MODEL_CARD, encoding="utf-8")
        self.ledger.update("finished", finished_at=time.time())
