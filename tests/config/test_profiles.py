"""Built-in profiles, their YAML mirrors in configs/, and the reference of every key: they must never drift."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from rlwatch.config.models import Config, CustomEvent, ProcessRule
from rlwatch.config.profiles import PROFILE_NAMES, ProfileName, profile_defaults
from rlwatch.discover.load import load_config, parse_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
KEY_LINE = re.compile(r"^(\s*)(- )?([a-z_]+):")


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_profile_yaml_equals_profile_defaults(name: ProfileName, tmp_path: Path) -> None:
    from_file = load_config(CONFIGS / f"{name}.yaml")
    assert from_file.run_dir is None  # the only run-dependent value is filled in by whoever loads it
    assert from_file.model_copy(update={"run_dir": str(tmp_path)}) == profile_defaults(name, tmp_path)


@pytest.mark.parametrize("name", [*PROFILE_NAMES, "reference"])
def test_every_key_in_the_yaml_files_has_a_comment(name: str) -> None:
    lines = (CONFIGS / f"{name}.yaml").read_text().splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        if KEY_LINE.match(line) and "#" not in line.split(":", 1)[1]:
            above = lines[i - 1].strip() if i else ""
            if not above.startswith("#"):
                undocumented.append(line)
    assert undocumented == []


def test_profile_defaults_store_the_run_dir_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert profile_defaults("trl", Path(".")).run_dir == str(tmp_path)


def test_unknown_profile_name() -> None:
    with pytest.raises(ValueError, match="unknown profile 'nemo'"):
        profile_defaults("nemo", Path("."))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- reference.yaml


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> None:
    seen.add(model)
    for field in model.model_fields.values():
        ann = field.annotation
        candidates = [ann, *get_args(ann)] if get_origin(ann) is list else [ann]
        for sub in candidates:
            if isinstance(sub, type) and issubclass(sub, BaseModel) and sub not in seen:
                _models(sub, seen)


def _all_models() -> set[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    _models(Config, seen)
    return seen


def test_the_walk_finds_the_list_item_models() -> None:
    assert {ProcessRule, CustomEvent} <= _all_models()


def test_reference_loads_to_exactly_the_defaults() -> None:
    assert load_config(CONFIGS / "reference.yaml") == Config()


def _example(text: str, name: str) -> object:
    match = re.search(rf"^# >>> {name} example.*?\n(.*?)^# <<<", text, re.S | re.M)
    assert match, f"no {name} example"
    body = "\n".join(line[2:] for line in match.group(1).splitlines())
    return yaml.safe_load(body)


def test_reference_examples_of_list_items_are_valid_and_complete() -> None:
    text = (CONFIGS / "reference.yaml").read_text()
    for name, model in (("processes", ProcessRule), ("custom", CustomEvent)):
        items = _example(text, name)
        assert isinstance(items, list) and len(items) == 1
        model.model_validate(items[0])
        assert set(items[0]) == set(model.model_fields), name


def test_reference_mentions_every_field_of_every_model_in_its_section() -> None:
    text = (CONFIGS / "reference.yaml").read_text()
    data = yaml.safe_load(text)
    for field, info in Config.model_fields.items():
        assert field in data, field
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            assert set(data[field]) == set(sub.model_fields), field
    # Item models are documented by their examples (checked above); every model is covered by one or the other.
    keys_in_text = {m.group(3) for line in text.splitlines() if (m := KEY_LINE.match(line.lstrip("#").rstrip()))}
    for model in _all_models():
        missing = set(model.model_fields) - keys_in_text
        assert not missing, (model.__name__, missing)


def test_reference_defaults_are_written_as_the_models_have_them() -> None:
    """The commented examples state defaults too; they must be the models' defaults."""
    text = (CONFIGS / "reference.yaml").read_text()
    for name, model in (("processes", ProcessRule), ("custom", CustomEvent)):
        item = _example(text, name)
        assert isinstance(item, list)
        for key, value in item[0].items():
            field = model.model_fields[key]
            if not field.is_required() and key != "cmdline_regex":
                assert value == field.default, (name, key)


# --------------------------------------------------------------------------------------------- the rules


def _rule(cfg: Config, role: str) -> re.Pattern[str]:
    rule = next(r for r in cfg.processes if r.role == role)
    assert rule.cmdline_regex is not None
    return re.compile(rule.cmdline_regex)


MATCHES: list[tuple[ProfileName, str, str]] = [
    ("areal", "launcher", "python3 -m areal.launcher.local examples/math/gsm8k_grpo.py --config gsm8k_grpo.yaml"),
    ("areal", "launcher", "/usr/bin/python3 -m areal.infra.launcher.local train.py --config c.yaml"),
    ("areal", "server", "python3 -m areal.launcher.sglang_server gsm8k_grpo.py --config c.yaml sglang.random_seed=1"),
    ("areal", "server", "python3 -m sglang.launch_server --model-path /m --host 10.0.0.2 --port 17331"),
    ("areal", "trainer", "torchrun --nnodes 1 --nproc-per-node 8 --master-addr localhost --master-port 1 train.py"),
    ("areal", "trainer", "/usr/bin/python3 /usr/local/bin/torchrun --nnodes 1 train.py"),
    ("areal", "trainer", "python -m torch.distributed.run --nproc-per-node 2 train.py"),
    ("trl", "server", "/venv/bin/python /venv/bin/trl vllm-serve --model Qwen/Qwen2.5-7B --port 8000"),
    ("trl", "server", "python -m trl.scripts.vllm_serve --model m"),
    ("trl", "server", "vllm serve Qwen/Qwen2.5-7B --port 8001"),
    ("trl", "server", "python3 -m vllm.entrypoints.openai.api_server --model m"),
    ("trl", "trainer", "/venv/bin/python /venv/bin/accelerate launch --num_processes 7 train_grpo.py"),
    ("trl", "trainer", "trl grpo --model_name_or_path m"),
    ("trl", "trainer", "python train_grpo.py --config grpo.yaml"),
    ("workers", "worker", "python3 optimisation_worker.py --id 3"),
    ("workers", "worker", "/usr/bin/python3.11 -u -m pool.worker --slot 1"),
    ("workers", "watchdog", "/venv/bin/python /venv/bin/rlwatch watch /data/run"),
    ("workers", "watchdog", "python -m rlwatch watch ."),
]

DECOYS: list[tuple[ProfileName, str, str]] = [
    ("areal", "server", "grep sglang.launch_server logs/trainer.log"),
    ("areal", "server", "tail -f llm_server.log"),
    ("areal", "trainer", "vim torchrun_notes.txt"),
    ("areal", "trainer", "less /var/log/torchrun.log"),
    ("areal", "launcher", "cat areal/launcher/local.py"),
    ("trl", "server", "pip install vllm"),
    ("trl", "server", "grep 'trl vllm-serve' README.md"),
    ("trl", "trainer", "vim train_grpo.py"),
    ("trl", "trainer", "python -c 'import grpo'"),
    ("workers", "worker", "vim worker.py"),
    ("workers", "watchdog", "rlwatch report /data/run"),
    ("workers", "watchdog", "/venv/bin/python /venv/bin/rlwatch /data/run"),
]


@pytest.mark.parametrize(("name", "role", "cmdline"), MATCHES)
def test_rules_recognise_real_command_lines(name: ProfileName, role: str, cmdline: str) -> None:
    assert _rule(profile_defaults(name, Path(".")), role).search(cmdline)


@pytest.mark.parametrize(("name", "role", "cmdline"), DECOYS)
def test_rules_ignore_editors_pagers_and_greps(name: ProfileName, role: str, cmdline: str) -> None:
    assert not _rule(profile_defaults(name, Path(".")), role).search(cmdline)


def test_workers_profile_expects_a_watchdog_it_can_start() -> None:
    cfg = profile_defaults("workers", Path("/srv/run"))
    watchdog = next(r for r in cfg.processes if r.role == "watchdog")
    assert watchdog.expected is True
    assert watchdog.command == ["rlwatch", "watch", "."]
    assert (cfg.thresholds.brake_streak, cfg.thresholds.brake_free_bytes) == (10, 2 * 1024**3)


def test_profiles_round_trip_through_yaml_text(tmp_path: Path) -> None:
    for name in PROFILE_NAMES:
        cfg = profile_defaults(name, tmp_path)  # type: ignore[arg-type]
        text = yaml.safe_dump(cfg.model_dump(mode="json"))
        assert parse_config(text) == cfg
