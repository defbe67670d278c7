"""A real TRL GRPO run with colocated generation (transformers generate, no vLLM server), tiny model, checkpoints.

Usage: python3 grpo_colocated.py MODEL_DIR OUTPUT_DIR MAX_STEPS [resume]
"""

from __future__ import annotations

import sys

from datasets import Dataset
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer


def reward_len(completions: list[str], **_: object) -> list[float]:
    """Shorter completions score higher: any reward will do, the point is a real run's output."""
    return [-abs(12 - len(c.split())) / 12.0 for c in completions]


def main(model: str, out: str, max_steps: int, resume: bool) -> None:
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    prompts = [f"what is {words[i % 10]} plus {words[(i * 3) % 10]} the answer is" for i in range(256)]
    config = GRPOConfig(
        output_dir=out,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=16,
        max_steps=max_steps,
        save_steps=5,
        logging_steps=1,
        learning_rate=1e-4,
        report_to="none",
        bf16=True,
        use_vllm=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_len,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=AutoTokenizer.from_pretrained(model),
    )
    trainer.train(resume_from_checkpoint=True if resume else None)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == "resume")
