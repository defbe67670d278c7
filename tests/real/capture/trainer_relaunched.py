"""A transformers Trainer under torchrun that fails at step 3 the first time and trains to the end when run again.

The first attempt's callback raises (the marker file does not exist yet, and it is then written), so torchrun prints
its ChildFailedError report; the same command run again, its output appended to the same log, trains all its steps
and prints the Trainer's metric dicts below that report: a root cause the run has got past.

Usage: torchrun --nproc-per-node 1 trainer_relaunched.py MODEL_DIR OUT_DIR
"""

from __future__ import annotations

import os
import sys

import torch
from torch.distributed.elastic.multiprocessing.errors import record
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)


class FailOnce(TrainerCallback):
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: object) -> None:
        if state.global_step == 3 and not os.path.exists(self.marker):
            with open(self.marker, "w") as fh:
                fh.write("failed once\n")
            raise RuntimeError("reward model returned NaN for batch 3")


class Rows(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, ids: list[list[int]]) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.tensor(self.ids[i])
        return {"input_ids": x, "labels": x.clone()}


@record
def main(model_dir: str, out: str) -> None:
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    text = "one plus two equals three and the answer is three"
    ids = [tok(text)["input_ids"][:12] for _ in range(64)]
    args = TrainingArguments(
        output_dir=out,
        max_steps=8,
        per_device_train_batch_size=4,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=Rows(ids), callbacks=[FailOnce(os.path.join(out, "failed-once"))]
    )
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
