"""The handful of training-config values that decide how a run behaves when something goes wrong.

After incident 1 the fix was a matter of four knobs (server memory fraction, concurrent rollouts, request timeout
and retries); showing them next to the failure saves opening the YAML. Only known keys are read, each looked up by
path, so a hostile or enormous file cannot make this expensive, and nothing is ever evaluated.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from rlwatch.common.trust import open_read

AREAL_KNOBS: tuple[str, ...] = (
    "experiment_name",
    "trial_name",
    "allocation_mode",
    "total_train_epochs",
    "train_dataset.batch_size",
    "sglang.mem_fraction_static",
    "vllm.gpu_memory_utilization",
    "rollout.max_concurrent_rollouts",
    "rollout.max_head_offpolicyness",
    "rollout.request_timeout",
    "rollout.request_retries",
    "rollout.setup_timeout",
    "actor.weight_update_mode",
    "recover.mode",
    "recover.retries",
    "recover.freq_steps",
    "recover.freq_epochs",
    "recover.freq_secs",
    "saver.freq_steps",
    "saver.freq_epochs",
    "saver.freq_secs",
    "cluster.fileroot",
)

TRL_KNOBS: tuple[str, ...] = (
    "use_vllm",
    "vllm_mode",
    "vllm_server_host",
    "vllm_server_port",
    "vllm_server_timeout",
    "vllm_gpu_memory_utilization",
    "max_steps",
    "num_train_epochs",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "beta",
    "logging_steps",
    "save_steps",
    "output_dir",
)

MAX_BYTES = 4 * 1024 * 1024
MAX_VALUE_CHARS = 80
_INTERPOLATION = re.compile(r"\$\{([A-Za-z0-9_.]{1,200})\}")
_MISSING = object()


def _lookup(data: dict[object, object], key: str) -> object:
    """A dotted key, nested (``rollout: {request_timeout: …}``) or literal (``"rollout.request_timeout": …``)."""
    if key in data:
        return data[key]
    node: object = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _resolve(data: dict[object, object], value: object) -> object:
    """Follow a whole-value OmegaConf reference such as ``${train_dataset.batch_size}`` a few hops."""
    for _ in range(5):
        if not isinstance(value, str):
            return value
        m = _INTERPOLATION.fullmatch(value.strip())
        if m is None:
            return value
        target = _lookup(data, m.group(1))
        if target is _MISSING:
            return value
        value = target
    return value


def _short(value: object) -> str | None:
    """A scalar as a short string; containers and other objects are not knobs."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        text = str(value) if -(10**30) < value < 10**30 else "out of range"
    elif isinstance(value, float):
        text = repr(value) if math.isfinite(value) else str(value)
    elif isinstance(value, str):
        text = " ".join(value.split())
    else:
        return None
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def knobs_from_mapping(data: dict[object, object]) -> dict[str, str]:
    """The known knobs present in an already-loaded config mapping, in a stable order."""
    out: dict[str, str] = {}
    for key in (*AREAL_KNOBS, *TRL_KNOBS):
        value = _lookup(data, key)
        if value is _MISSING:
            continue
        text = _short(_resolve(data, value))
        if text is not None:
            out[key] = text
    return out


def load_knobs(path: Path) -> tuple[dict[str, str], str | None]:
    """The knobs of a training YAML and a one-line error when the file could not be used."""
    import yaml  # here: a run without a training config does not pay for PyYAML at the start

    try:
        with open_read(path) as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        return {}, f"cannot read training config {path}: {exc.strerror or exc}"
    except ValueError:
        return {}, f"training config path is not valid: {path!r}"
    if len(raw) > MAX_BYTES:
        return {}, f"training config {path} is larger than {MAX_BYTES // (1024 * 1024)} MiB"
    try:
        data = yaml.safe_load(raw.decode("utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        return {}, f"training config {path} is not valid YAML{where}"
    except (ValueError, RecursionError, MemoryError, OverflowError):
        return {}, f"training config {path} could not be parsed"
    if not isinstance(data, dict):
        return {}, f"training config {path} is not a mapping"
    return knobs_from_mapping(data), None


def read_knobs(path: Path) -> dict[str, str]:
    """Key training-config values as short strings; ``{}`` for a missing, unreadable or corrupt file."""
    return load_knobs(path)[0]
