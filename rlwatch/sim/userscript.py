"""The user's training script of incident 5, written into the run directory as ``train_grpo.py``.

It is real Python with the incident's bug in it: the callback reads ``script_args.model_id`` although the parser only
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
