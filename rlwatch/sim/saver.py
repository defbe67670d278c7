"""Checkpoints and recover info on disk, laid out as AReaL and Hugging Face write them.

The model files are small but well-formed: a real safetensors header followed by zeros (a sparse file where the
filesystem allows), so a tool that sizes or opens a checkpoint sees something genuine.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from rlwatch.sim.common import Layout, atomic_write_text

MODEL_BYTES = 1024 * 1024

MODEL_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "model_type": "qwen2",
    "num_attention_heads": 12,
    "num_hidden_layers": 28,
    "num_key_value_heads": 2,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}


def write_safetensors(path: Path, data_bytes: int = MODEL_BYTES) -> None:
    n = data_bytes // 4
    header = json.dumps(
        {
            "__metadata__": {"format": "pt"},
            "model.embed_tokens.weight": {"dtype": "F32", "shape": [n // 512, 512], "data_offsets": [0, n * 4]},
        },
        separators=(",", ":"),
    ).encode()
    header += b" " * (-len(header) % 8)  # safetensors pads the header to an 8-byte boundary
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.truncate(8 + len(header) + n * 4)


def write_model_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2) + "\n")
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": 151643, "eos_token_id": 151645}) + "\n")
    write_safetensors(path / "model.safetensors")


def areal_checkpoint(layout: Layout, epoch: int, epoch_step: int, global_step: int) -> Path:
    """HF weights for ``default`` (0-based counters in the name), like ``Saver.save``."""
    path = layout.ckpt_dir / f"epoch{epoch}epochstep{epoch_step}globalstep{global_step}"
    write_model_dir(path)
    return path


def recover_dump(layout: Layout, epoch: int, epoch_step: int, global_step: int, steps_per_epoch: int) -> Path:
    """The recover checkpoint and ``recover_info/`` (``RecoverInfo.dump``: rank 0, ``json.dump(indent=4)``)."""
    recover_ckpt = layout.ckpt_dir / "recover_checkpoint"
    recover_ckpt.mkdir(parents=True, exist_ok=True)
    (recover_ckpt / ".metadata").write_bytes(b"\x80\x04DCP" + global_step.to_bytes(8, "little"))
    info = {"epoch": epoch, "epoch_step": epoch_step, "global_step": global_step, "steps_per_epoch": steps_per_epoch}
    freq = {"epoch": {"last": epoch}, "step": {"last": global_step}, "time": {"last": None}}
    layout.recover_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(layout.recover_dir / "saver_info.json", json.dumps(freq, indent=4))
    atomic_write_text(layout.recover_dir / "checkpoint_info.json", json.dumps(freq, indent=4))
    atomic_write_text(
        layout.recover_dir / "stats_logger_info.json", json.dumps({"last_commit_step": global_step}, indent=4)
    )
    atomic_write_text(layout.step_info, json.dumps(info, indent=4))
    return recover_ckpt


def read_step_info(layout: Layout) -> dict[str, int] | None:
    try:
        data = json.loads(layout.step_info.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    keys = ("epoch", "epoch_step", "global_step", "steps_per_epoch")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), int) for k in keys):
        return None
    return {k: int(data[k]) for k in keys}


def step_after(info: dict[str, int]) -> tuple[int, int, int]:
    """AReaL's ``StepInfo.next()``: the step after the last completed one, rolling over at the epoch's end."""
    if info["epoch_step"] + 1 == info["steps_per_epoch"]:
        return info["epoch"] + 1, 0, info["global_step"] + 1
    return info["epoch"], info["epoch_step"] + 1, info["global_step"] + 1


def hf_checkpoint(
    output_dir: Path, step: int, *, max_steps: int, save_steps: int, epoch: float, log_history: list[dict[str, Any]]
) -> Path:
    """``<output_dir>/checkpoint-<step>`` with ``trainer_state.json`` (``indent=2, sort_keys=True``)."""
    path = output_dir / f"checkpoint-{step}"
    write_model_dir(path)
    state = {
        "best_global_step": None,
        "best_metric": None,
        "best_model_checkpoint": None,
        "epoch": epoch,
        "eval_steps": 500,
        "global_step": step,
        "is_hyper_param_search": False,
        "is_local_process_zero": True,
        "is_world_process_zero": True,
        "log_history": log_history,
        "logging_steps": 1,
        "max_steps": max_steps,
        "num_input_tokens_seen": 0,
        "num_train_epochs": 1,
        "save_steps": save_steps,
        "stateful_callbacks": {
            "TrainerControl": {
                "args": {
                    "should_epoch_stop": False,
                    "should_evaluate": False,
                    "should_log": False,
                    "should_save": True,
                    "should_training_stop": False,
                },
                "attributes": {},
            }
        },
        "total_flos": 0.0,
        "train_batch_size": 8,
        "trial_name": None,
        "trial_params": None,
    }
    (path / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    (path / "training_args.bin").write_bytes(b"PK\x03\x04" + bytes(60))
    return path
