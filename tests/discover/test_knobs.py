"""Key training-config values from AReaL and TRL YAML files, and from files that are not what they claim."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlwatch.discover.knobs import MAX_VALUE_CHARS, load_knobs, read_knobs

AREAL_YAML = """\
experiment_name: gsm8k-grpo
trial_name: trial0
total_train_epochs: 5
cluster:
  n_nodes: 1
  fileroot: /tmp/areal/experiments
allocation_mode: sglang:d1p1t1+d1p1t1
rollout:
  experiment_name: ${experiment_name}
  max_concurrent_rollouts: ${train_dataset.batch_size}
  request_timeout: 3600
  request_retries: 3
  setup_timeout: 300
  max_head_offpolicyness: 2
actor:
  path: Qwen/Qwen2.5-1.5B-Instruct
  weight_update_mode: disk
  optimizer:
    lr: 1.70e-5
sglang:
  mem_fraction_static: 0.8
train_dataset:
  batch_size: 32
saver:
  freq_epochs: 1
  freq_steps: null
recover:
  mode: auto
  retries: 3
"""

TRL_YAML = """\
output_dir: grpo-qwen
use_vllm: true
vllm_mode: server
vllm_server_host: 0.0.0.0
vllm_server_port: 8000
vllm_server_timeout: 240.0
max_steps: 250
num_generations: 8
learning_rate: 1.0e-06
logging_steps: 10
model_name_or_path: Qwen/Qwen2.5-0.5B
"""


def _file(tmp_path: Path, text: str | bytes, name: str = "train.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_areal_knobs(tmp_path: Path) -> None:
    knobs = read_knobs(_file(tmp_path, AREAL_YAML))
    assert knobs["sglang.mem_fraction_static"] == "0.8"
    assert knobs["rollout.max_concurrent_rollouts"] == "32"  # followed the ${...} reference
    assert knobs["rollout.request_timeout"] == "3600"
    assert knobs["rollout.request_retries"] == "3"
    assert knobs["rollout.setup_timeout"] == "300"
    assert knobs["actor.weight_update_mode"] == "disk"
    assert knobs["experiment_name"] == "gsm8k-grpo"
    assert knobs["trial_name"] == "trial0"
    assert knobs["total_train_epochs"] == "5"
    assert knobs["recover.mode"] == "auto"
    assert knobs["saver.freq_epochs"] == "1"
    assert knobs["saver.freq_steps"] == "null"
    assert "saver.freq_secs" not in knobs
    assert "vllm_mode" not in knobs
    assert "actor.optimizer" not in knobs


def test_trl_knobs(tmp_path: Path) -> None:
    knobs = read_knobs(_file(tmp_path, TRL_YAML))
    assert knobs == {
        "use_vllm": "true",
        "vllm_mode": "server",
        "vllm_server_host": "0.0.0.0",
        "vllm_server_port": "8000",
        "vllm_server_timeout": "240.0",
        "max_steps": "250",
        "num_generations": "8",
        "learning_rate": "1e-06",
        "logging_steps": "10",
        "output_dir": "grpo-qwen",
    }


def test_order_is_stable(tmp_path: Path) -> None:
    shuffled = "\n".join(reversed(TRL_YAML.strip().splitlines())) + "\n"
    assert list(read_knobs(_file(tmp_path, shuffled))) == list(read_knobs(_file(tmp_path, TRL_YAML, "b.yaml")))


def test_literal_dotted_keys_and_long_values(tmp_path: Path) -> None:
    text = '"sglang.mem_fraction_static": 0.6\nexperiment_name: "' + "x" * 500 + '"\n'
    knobs = read_knobs(_file(tmp_path, text))
    assert knobs["sglang.mem_fraction_static"] == "0.6"
    assert len(knobs["experiment_name"]) == MAX_VALUE_CHARS
    assert knobs["experiment_name"].endswith("…")


def test_reference_cycles_end(tmp_path: Path) -> None:
    knobs = read_knobs(_file(tmp_path, "experiment_name: ${trial_name}\ntrial_name: ${experiment_name}\n"))
    assert knobs["experiment_name"].startswith("${")


@pytest.mark.parametrize(
    ("content", "error_part"),
    [
        ("rollout: [unclosed\n", "not valid YAML (line"),
        ("- a\n- b\n", "not a mapping"),
        ("", "not a mapping"),
        (b"\xff\xfe\x00\x01binary\x00", "not"),
        ("!!python/object/apply:os.system ['echo pwned']\n", "not valid YAML"),
    ],
)
def test_bad_files_give_nothing_and_say_why(tmp_path: Path, content: str | bytes, error_part: str) -> None:
    path = _file(tmp_path, content)
    knobs, error = load_knobs(path)
    assert knobs == {}
    assert error is not None
    assert error_part in error
    assert "\n" not in error
    assert read_knobs(path) == {}


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert read_knobs(tmp_path / "absent.yaml") == {}
    _, error = load_knobs(tmp_path)
    assert error is not None
    assert str(tmp_path) in error


def test_alias_bomb_is_cheap(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 30)]
    lines += ["rollout: *a29", "trial_name: t"]
    knobs = read_knobs(_file(tmp_path, "\n".join(lines) + "\n"))
    assert knobs == {"trial_name": "t"}


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as fh:
        fh.write(b"trial_name: t\n")
        fh.seek(5 * 1024 * 1024)
        fh.write(b"\n")
    knobs, error = load_knobs(path)
    assert knobs == {}
    assert error is not None
    assert "larger than" in error


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads through permission bits")
def test_unreadable_file(tmp_path: Path) -> None:
    path = _file(tmp_path, TRL_YAML)
    path.chmod(0)
    knobs, error = load_knobs(path)
    assert knobs == {}
    assert error is not None
    assert "Permission denied" in error
