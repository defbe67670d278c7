"""The users' training scripts: incident 5's ``train_grpo.py``, and the ``train.py`` of runs started by hand.

Incident 5's is real Python with its bug in it: the callback reads ``script_args.model_id`` although the parser only
defines ``--model_name_or_path``. The TRL trainer stand-in runs it at the first checkpoint save, so the crash, its
traceback and its ``file:line`` are genuine; fixing the file fixes the next attempt.
"""

from __future__ import annotations

TRAIN_SCRIPT = '''\
"""GRPO fine-tuning of an instruction model on GSM8K with TRL, generation served by `trl vllm-serve`."""

import argparse


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_name_or_path", default="Qwen/Qwen2.5-7B-Instruct")
    parser.add_argument("--output_dir", default="output")
    parser.add_argument("--save_steps", type=int, default=2)
    parser.add_argument("--hub_revision_prefix", default="grpo")
    return parser.parse_args(argv)


class PushRevisionCallback:
    """Tags every saved checkpoint with a revision named after the model."""

    def __init__(self, script_args):
        self.script_args = script_args

    def on_save(self, args, state, control, **kwargs):
        revision = f"{self.script_args.hub_revision_prefix}-{self.script_args.model_id.split('/')[-1]}"
        return f"{revision}-step{state['global_step']}"


def main(trainer_cls):
    script_args = parse_args()
    trainer = trainer_cls(callbacks=[PushRevisionCallback(script_args)])
    trainer.train()


if __name__ == "__main__":
    from trl import GRPOTrainer

    main(GRPOTrainer)
'''


def colocated_script(max_steps: int, save_steps: int) -> str:
    """The user's ``train.py`` of a colocated TRL GRPO run (scenario ``trl-colocated``), run as ``python3 train.py``.

    It is the real script's shape (tests/real/capture/grpo_colocated.py): ``GRPOConfig`` with ``use_vllm=False``, so
    completions are generated in the trainer and no server exists. Only the import differs: the simulator's
    stand-ins for TRL's classes, which write what TRL and transformers print and save.
    """
    return f'''\
"""GRPO with TRL, completions generated in the trainer (transformers generate): no inference server."""

from rlwatch.sim.colocated import GRPOConfig, GRPOTrainer  # stand-ins for: from trl import GRPOConfig, GRPOTrainer


def reward_len(completions, **kwargs):
    """Shorter completions score higher."""
    return [-abs(12 - len(c.split())) / 12.0 for c in completions]


def main():
    config = GRPOConfig(
        output_dir="output",
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=16,
        max_steps={max_steps},
        save_steps={save_steps},
        logging_steps=1,
        learning_rate=1e-4,
        report_to="none",
        bf16=True,
        use_vllm=False,
        seed=0,
    )
    trainer = GRPOTrainer(model="tiny-llama", reward_funcs=reward_len, args=config)
    trainer.train()


if __name__ == "__main__":
    main()
'''


DDP_SCRIPT = '''\
"""Data-parallel training with torch.distributed over NCCL, one process per GPU, started by torchrun."""

import sys

from rlwatch.sim.ddp import main  # stand-in for the torch training loop: all-reduces gradients every step

if __name__ == "__main__":
    sys.exit(main())
'''
