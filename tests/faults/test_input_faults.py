"""Bad input: every configuration field with a wrong type, unknown keys everywhere, unreadable YAML, missing paths.

Each is one line naming the file, the line and the key (exit status 2 on the command line), never a traceback; a
path that does not exist yet is not an error at all but a named blind spot until it appears.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from rlwatch.config.models import Config
from rlwatch.discover.load import ConfigError, parse_config
from tests.faults.conftest import FaultRow, run_cli

pytestmark = pytest.mark.faults

# A valid minimal item for each list of sections, so one of its fields at a time can be broken.
LIST_ITEMS: dict[str, dict[str, Any]] = {
    "processes": {"role": "worker"},
    "events.custom": {"name": "mine", "pattern": "x"},
    "policies": {"name": "p", "when": {"stalled": True}, "actions": ["resume"]},
    "policies.when": {"stalled": True},
    "notify.targets": {"url": "json://127.0.0.1/hook"},
}
WRONG = ({"a": 1}, [1, 2], "not-a-number", 12345, 1.5)


def _model(annotation: Any) -> type[BaseModel] | None:
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _list_model(annotation: Any) -> type[BaseModel] | None:
    for arg in (annotation, *get_args(annotation)):
        if get_origin(arg) is list:
            return _model(get_args(arg)[0])
        if get_origin(arg) is typing.Annotated:
            found = _list_model(get_args(arg)[0])
            if found:
                return found
    return None


def leaves(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, annotation) of every field that holds a value, through sections and list items."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation = field.annotation
        section = _model(annotation) if get_origin(annotation) is not list else None
        item = _list_model(annotation)
        if section is not None and get_origin(annotation) is not Literal:
            yield path, annotation
            yield from leaves(section, path + ".")
        elif item is not None:
            yield path, annotation
            yield from leaves(item, path + "[0].")
        else:
            yield path, annotation


def document(path: str, value: Any) -> dict[str, Any]:
    """A configuration that is valid except for ``path``, which is set to ``value``."""
    doc: dict[str, Any] = {}
    node: Any = doc
    parts = path.replace("[0]", ".[0]").split(".")
    walked: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "[0]":
            continue
        nxt = parts[i + 1] if not last else None
        if last:
            node[part] = value
        elif nxt == "[0]":
            key = ".".join([*walked, part]).replace(".[0]", "")
            item = json.loads(json.dumps(LIST_ITEMS.get(key, {})))
            node[part] = [item]
            node = item
        else:
            key = ".".join([*walked, part]).replace(".[0]", "")
            child = json.loads(json.dumps(LIST_ITEMS.get(key, {}))) if key in LIST_ITEMS else {}
            node = node.setdefault(part, child)
        walked.append(part)
    return doc


def test_every_field_with_a_wrong_type(fault_row: Callable[[str, str], FaultRow]) -> None:
    fields = list(leaves(Config))
    row = fault_row(
        f"input: every configuration field with a wrong type ({len(fields)} fields)",
        "each gives one line 'FILE:LINE: key.path: problem', the line and key exact",
    )
    checked = 0
    for path, _annotation in fields:
        errors: list[tuple[ConfigError, str]] = []
        for value in WRONG:
            text = yaml.safe_dump(document(path, value), sort_keys=False)
            found = _one_text(text)
            if found is not None:
                errors.append((found, text))
        assert errors, f"{path}: every wrong value was accepted"
        for error, _ in errors:
            message = str(error)
            assert "\n" not in message and message.startswith("rlwatch.yaml:"), message
            assert error.line is not None and error.key is not None
        exact = [(e, t) for e, t in errors if e.key == path]
        assert exact, (path, [str(e) for e, _ in errors])
        for error, text in exact:
            assert error.line is not None
            name = path.rsplit(".", 1)[-1].removesuffix("[0]")
            assert f"{name}:" in text.splitlines()[error.line - 1], (str(error), text)
        checked += 1
    assert checked == len(fields) > 60
    sample = _one(document("thresholds.stall_s", [1, 2]))
    row.saw(f"{checked} fields × 5 wrong values: every error one line, key and line exact; e.g. {str(sample)!r}")


def _one_text(text: str) -> ConfigError | None:
    try:
        parse_config(text, "rlwatch.yaml")
    except ConfigError as exc:
        return exc
    return None


def _one(doc: dict[str, Any]) -> ConfigError | None:
    return _one_text(yaml.safe_dump(doc, sort_keys=False))


def sections(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    yield prefix.rstrip(".")
    for name, field in model.model_fields.items():
        annotation = field.annotation
        item = _list_model(annotation)
        section = _model(annotation) if get_origin(annotation) is not list else None
        if item is not None:
            yield from sections(item, f"{prefix}{name}[0].")
        elif section is not None:
            yield from sections(section, f"{prefix}{name}.")


def test_unknown_keys_everywhere(fault_row: Callable[[str, str], FaultRow]) -> None:
    where = list(sections(Config))
    row = fault_row(
        f"input: an unknown key in every section ({len(where)} sections)",
        "one line naming the key path and 'unknown key', with a suggestion when a key is close",
    )
    for section in where:
        path = f"{section}.zz_unknown" if section else "zz_unknown"
        exc = _one(document(path, 1))
        assert exc is not None and exc.key == path and "unknown key" in exc.problem and "\n" not in str(exc), path
    close = _one({"thresholds": {"stal_s": 5}})
    assert close is not None and "did you mean 'stall_s'" in str(close)
    row.saw(f"all {len(where)} sections; e.g. {str(close)!r}")


@pytest.mark.slow
def test_unreadable_configuration(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "input: unreadable YAML (syntax error, binary, a directory, permission denied)",
        "the real command exits 2 with one line on stderr and nothing on stdout",
    )
    run = tmp_path / "run"
    run.mkdir()
    cases = {
        "syntax": b"training:\n  logs: [a, b\n",
        "tabs": b"training:\n\tlogs: []\n",
        "binary": b"\x00\xff\xfe\x89PNG\r\n\x1a\n",
        "not-a-mapping": b"- just\n- a list\n",
    }
    shown = []
    for name, data in cases.items():
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_bytes(data)
        out = run_cli("report", str(run), "--config", str(cfg))
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and out.stdout == "" and str(cfg) in lines[0], (name, out)
        shown.append(lines[0].replace(str(tmp_path) + "/", ""))
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    out = run_cli("watch", str(run), "--config", str(folder))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    shown.append(out.stderr.strip().replace(str(tmp_path) + "/", ""))
    # A file the user cannot read: test_privilege_faults (it needs a reader without root's rights).
    row.saw("; ".join(shown)[:400])


def test_config_referencing_missing_paths(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "input: a configuration that references missing paths",
        "not fatal (they may appear later): one line per missing path in the report, gone once it exists",
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(
        "gpu: {backend: none}\n"
        "training:\n"
        "  logs: ['logs/trainer.log', 'wandb/*.log']\n"
        "  checkpoint_dirs: ['checkpoints']\n"
        "  config_file: 'gsm8k_grpo.yaml'\n"
    )
    out = run_cli("report", str(run))
    assert out.returncode in (0, 1, 3) and "Traceback" not in out.stderr, out.stderr
    missing = [line.strip() for line in out.stdout.splitlines() if line.strip().startswith("config ")]
    assert len(missing) == 4, out.stdout
    assert "config training.logs[1]: wandb/*.log matches nothing (yet)" in missing
    (run / "logs").mkdir()
    (run / "logs" / "trainer.log").write_text("x\n")
    (run / "checkpoints").mkdir()
    rep = json.loads(run_cli("report", str(run), "--json").stdout)
    still = sorted(s["name"] for s in rep["sources"] if s["name"].startswith("config ") and not s["ok"])
    assert still == ["config training.config_file", "config training.logs[1]"]
    row.saw(f"{len(missing)} lines like {missing[1]!r}; after creating two of them, only the other two remain")
