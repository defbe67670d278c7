"""The TRL GRPO trainer stand-in (``accelerate launch train_grpo.py``) against the ``trl vllm-serve`` stand-in.

It writes what transformers and TRL print to stdout (metric dicts through ``str(dict)``, a tqdm bar on ``\\r``),
syncs weights the way TRL's vLLM client does (``/update_named_param/`` then ``/reset_prefix_cache/``), and saves
``checkpoint-N/trainer_state.json``. At the first save it runs the user's ``train_grpo.py`` callback, a real Python
file in the run directory with incident 5's bug in it, so the crash is a genuine ``AttributeError`` whose traceback
points at a real file and line (fix the file and the next attempt trains on).
"""

from __future__ import annotations

import random
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rlwatch.sim import formats, lifeline, saver
from rlwatch.sim.client import CallError, call
from rlwatch.sim.common import Layout, holding_device, parse_with_spec, scaled, sleep_until
from rlwatch.sim.ledger import LogSink, PieceLedger

TRANSFORMERS = f"{formats.SITE}/transformers"
CALL_CHAIN = [
    (f"{TRANSFORMERS}/trainer.py", 2245, "train", "return inner_training_loop("),
    (f"{TRANSFORMERS}/trainer.py", 2661, "_inner_training_loop", "self._maybe_log_save_evaluate("),
    (f"{TRANSFORMERS}/trainer.py", 3103, "_maybe_log_save_evaluate", "self._save_checkpoint(model, trial)"),
    (
        f"{TRANSFORMERS}/trainer.py",
        3215,
        "_save_checkpoint",
        "self.control = self.callback_handler.on_save(self.args, self.state, self.control)",
    ),
    (f"{TRANSFORMERS}/trainer_callback.py", 557, "on_save", 'return self.call_event("on_save", args, state, control)'),
    (f"{TRANSFORMERS}/trainer_callback.py", 571, "call_event", "result = getattr(callback, event)("),
]


class TrlTrainer:
    def __init__(self, layout: Layout, spec: dict[str, Any], speed: float, seed: int) -> None:
        self.layout = layout
        self.speed = speed
        self.rng = random.Random(seed)
        self.port = int(spec["port"])
        self.max_steps = int(spec.get("max_steps", 50))
        self.save_steps = int(spec.get("save_steps", 2))
        self.step_time = float(spec.get("step_time", 2.0))
        self.ledger = PieceLedger(layout, "trainer")
        self.out = LogSink(self.ledger)
        self.history: list[dict[str, Any]] = []
        self.t0 = time.monotonic()

    def url(self, endpoint: str) -> str:
        return f"http://127.0.0.1:{self.port}{endpoint}"

    def startup(self) -> None:
        t = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}"
        self.out.write(
            f"[{stamp}] [INFO] [real_accelerator.py:239:get_accelerator] Setting ds_accelerator to cuda (auto detect)"
        )
        self.out.write(
            f"Loading checkpoint shards: 100%|██████████| 4/4 [00:0{self.rng.randint(2, 9)}<00:00,  "
            f"{self.rng.uniform(0.5, 1.5):.2f}it/s]"
        )
        deadline = time.monotonic() + scaled(240.0, self.speed, floor=2.0)
        while True:
            try:
                call(self.url("/health/"), timeout=scaled(5.0, self.speed, floor=0.2))
                return
            except CallError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(scaled(2.0, self.speed, floor=0.05))

    def bar(self, step: int) -> str:
        elapsed = time.monotonic() - self.t0
        pct = int(100 * step / self.max_steps)
        filled = "█" * (pct // 10)
        rate = f"{self.step_time:.2f}s/it" if step else "?it/s"
        clock = f"{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}"
        return f"{pct:3d}%|{filled:<10}| {step}/{self.max_steps} [{clock}<?, {rate}]"

    def metrics(self, step: int) -> dict[str, Any]:
        reward = min(1.0, max(0.0, 0.3 + 0.4 * step / self.max_steps + self.rng.gauss(0, 0.05)))
        return {
            "loss": round(self.rng.gauss(0.0, 0.01), 4),
            "grad_norm": round(abs(self.rng.gauss(0.09, 0.02)), 6),
            "learning_rate": 1e-06 * (1 - step / self.max_steps),
            "num_tokens": float(140_000 * step),
            "completions/mean_length": round(self.rng.uniform(140, 190), 1),
            "rewards/accuracy_reward/mean": round(reward, 4),
            "rewards/accuracy_reward/std": round(self.rng.uniform(0.3, 0.5), 4),
            "reward": round(reward, 4),
            "reward_std": round(self.rng.uniform(0.3, 0.5), 4),
            "frac_reward_zero_std": 0.0,
            "kl": round(abs(self.rng.gauss(0.001, 0.0005)), 6),
            "clip_ratio/low_mean": 0.0,
            "epoch": round(step / self.max_steps, 2),
        }

    def sync_weights(self) -> None:
        for _ in range(2):
            call(self.url("/update_named_param/"), {"name": "model.layers.0.mlp.up_proj.weight"}, timeout=5.0)
        call(self.url("/reset_prefix_cache/"), {}, timeout=5.0)

    def crash(self, step: int) -> None:
        """Run the user's save callback from ``train_grpo.py``; its exception ends the process like the incident."""
        script = self.layout.train_script
        try:
            namespace = runpy.run_path(str(script))
            callback = namespace["PushRevisionCallback"](namespace["parse_args"]([]))
            callback.on_save(None, {"global_step": step}, None)
        except Exception as exc:
            frames = [
                (str(script), _line_of(script, "main(GRPOTrainer)"), "<module>", "main(GRPOTrainer)"),
                (str(script), _line_of(script, "trainer.train()"), "main", "trainer.train()"),
                *CALL_CHAIN,
                *[
                    (f.filename, f.lineno or 0, f.name, (f.line or "").strip())
                    for f in traceback.extract_tb(exc.__traceback__)
                    if f.filename == str(script)
                ],
            ]
            self.out.write(formats.traceback_block(frames, f"{type(exc).__name__}: {exc}"))
            raise SystemExit(1) from None

    def run(self) -> int:
        self.startup()
        self.ledger.update("running", max_steps=self.max_steps)
        self.out.write(self.bar(0) + "\r")
        for step in range(1, self.max_steps + 1):
            t0 = time.monotonic()
            call(
                self.url("/generate/"),
                {"prompts": ["Natalia sold clips to 48 of her friends..."], "n": 8},
                timeout=10.0,
            )
            self.sync_weights()
            logs = self.metrics(step)
            self.history.append({**logs, "step": step})
            self.out.write(self.bar(step) + "\r")
            self.out.write(str(logs))
            self.ledger.update(last_step=step, last_step_at=time.time())
            if step % self.save_steps == 0:
                saver.hf_checkpoint(
                    self.layout.trl_output,
                    step,
                    max_steps=self.max_steps,
                    save_steps=self.save_steps,
                    epoch=logs["epoch"],
                    log_history=self.history,
                )
                self.ledger.update(last_checkpoint_global_step=step)
                self.crash(step)
            sleep_until(t0 + scaled(self.step_time, self.speed))
        runtime = time.monotonic() - self.t0
        self.out.write(
            str(
                {
                    "train_runtime": round(runtime, 2),
                    "train_samples_per_second": 3.2,
                    "train_steps_per_second": round(self.max_steps / runtime, 3),
                    "train_loss": 0.0012,
                    "epoch": 1.0,
                }
            )
        )
        self.ledger.update("finished")
        while True:
            time.sleep(3600)


def _line_of(path: Path, needle: str) -> int:
    try:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if needle in line:
                return n
    except OSError:
        pass
    return 1


def main(argv: list[str] | None = None) -> int:
    started = parse_with_spec("trl_trainer", __doc__ or "", argv)
    if started is None:
        return 2
    args, layout, spec = started
    lifeline.watch(layout.alive, args.sim_id)
    with holding_device(layout):
        trainer = TrlTrainer(layout, spec, args.speed, args.seed)
        try:
            return trainer.run()
        except SystemExit as exc:
            trainer.ledger.update("failed", failed_at=time.time())
            return int(exc.code or 1)
        except CallError as exc:
            trainer.out.write(
                formats.traceback_block(
                    [],
                    f"requests.exceptions.ConnectionError: The vLLM server can't "
                    f"be reached at http://127.0.0.1:{trainer.port} ({exc})",
                )
            )
            trainer.ledger.update("failed", failed_at=time.time())
            return 1


if __name__ == "__main__":
    sys.exit(main())
