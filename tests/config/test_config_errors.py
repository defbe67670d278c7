"""Malformed configurations: each gives one line that names the file, the line and the key, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlwatch.config.models import Config
from rlwatch.discover.load import ConfigError, load_config, parse_config

# (id, file text, line, key path or None, a fragment of the problem)
CASES: list[tuple[str, str, int, str | None, str]] = [
    # wrong types
    ("interval-not-number", "interval_s: fast\n", 1, "interval_s", "valid number"),
    ("simulated-not-bool", "profile: areal\nsimulated: maybe\n", 2, "simulated", "valid boolean"),
    ("logs-not-list", "training:\n  logs: logs/*.log\n", 2, "training.logs", "valid list"),
    (
        "command-is-string",
        "server:\n  kind: sglang\n  command: python -m sglang.launch_server\n",
        3,
        "server.command",
        "valid list",
    ),
    ("url-not-string", "server:\n  url: 8000\n", 2, "server.url", "valid string"),
    ("role-not-string", "processes:\n  - role: 7\n", 2, "processes[0].role", "valid string"),
    ("total-steps-fraction", "training:\n  total_steps: 10.5\n", 2, "training.total_steps", "fractional part"),
    ("grace-list", "actions:\n  readonly: true\n  grace_s: [1, 2]\n", 3, "actions.grace_s", "valid number"),
    ("run-dir-date", "run_dir: 2024-01-01\n", 1, "run_dir", "valid string"),
    # unknown keys at several depths
    ("unknown-top", "interval_s: 1\nintervall_s: 2\n", 2, "intervall_s", "unknown key (did you mean 'interval_s'?)"),
    (
        "unknown-section",
        "gpu:\n  backend: none\n\n  bakend: nvml\n",
        4,
        "gpu.bakend",
        "unknown key (did you mean 'backend'?)",
    ),
    (
        "unknown-in-list-item",
        "processes:\n  - role: a\n    cmdline_regex: x\n    regex: y\n",
        4,
        "processes[0].regex",
        "unknown key",
    ),
    (
        "unknown-deep",
        "events:\n  custom:\n    - name: a\n      pattern: b\n      colour: red\n",
        5,
        "events.custom[0].colour",
        "unknown key",
    ),
    # bad regexes and enums
    (
        "bad-brake-regex",
        "events:\n  brake_pattern: 'brake(('\n",
        2,
        "events.brake_pattern",
        "not a valid regular expression",
    ),
    (
        "bad-rule-regex",
        "processes:\n  - role: a\n    cmdline_regex: '[unclosed'\n",
        3,
        "processes[0].cmdline_regex",
        "not a valid regular expression",
    ),
    (
        "bad-custom-regex",
        "events:\n  custom:\n    - name: a\n      pattern: '*x'\n",
        4,
        "events.custom[0].pattern",
        "not a valid regular expression",
    ),
    ("bad-backend", "gpu:\n  backend: cuda\n", 2, "gpu.backend", "'auto', 'nvml', 'simulated' or 'none'"),
    ("bad-kind", "server:\n  kind: triton\n", 2, "server.kind", "'sglang', 'vllm' or 'trl'"),
    (
        "bad-profile",
        "profile: nemo\n",
        1,
        "profile",
        "'auto', 'areal', 'trl', 'verl', 'openrlhf', 'workers' or 'generic'",
    ),
    (
        "bad-severity",
        "events:\n  custom:\n    - name: a\n      pattern: b\n      severity: fatal\n",
        5,
        "events.custom[0].severity",
        "'critical', 'warning' or 'info'",
    ),
    ("bad-role-name", "processes:\n  - role: Trainer\n", 2, "processes[0].role", "should match pattern"),
    # negative / zero / out of range numbers
    ("zero-stall", "thresholds:\n  stall_s: 0\n", 2, "thresholds.stall_s", "greater than 0"),
    ("negative-interval", "interval_s: -2\n", 1, "interval_s", "greater than 0"),
    (
        "negative-brake-bytes",
        "thresholds:\n  brake_free_bytes: -1\n",
        2,
        "thresholds.brake_free_bytes",
        "greater than or equal to 0",
    ),
    (
        "restart-loop-one",
        "thresholds:\n  restart_loop_count: 1\n",
        2,
        "thresholds.restart_loop_count",
        "greater than or equal to 2",
    ),
    (
        "fraction-above-one",
        "thresholds:\n  memory_warn_fraction: 1.5\n",
        2,
        "thresholds.memory_warn_fraction",
        "less than or equal to 1",
    ),
    (
        "memory-limit-zero",
        "processes:\n  - role: w\n    memory_limit_bytes: 0\n",
        3,
        "processes[0].memory_limit_bytes",
        "greater than 0",
    ),
    # structure
    ("list-for-mapping", "training:\n  - logs/*.log\n", 1, "training", "should be a mapping"),
    ("mapping-for-list", "processes:\n  trainer: torchrun\n", 1, "processes", "valid list"),
    (
        "missing-role",
        "processes:\n  - role: a\n  - cmdline_regex: torchrun\n",
        3,
        "processes[1].role",
        "Field required",
    ),
    ("missing-pattern", "events:\n  custom:\n    - name: a\n", 3, "events.custom[0].pattern", "Field required"),
    ("scalar-section", "thresholds: 5\n", 1, "thresholds", "should be a mapping"),
    # duplicate keys (PyYAML would silently keep the last one)
    (
        "duplicate-top",
        "interval_s: 1\nprofile: trl\ninterval_s: 2\n",
        3,
        "interval_s",
        "duplicate key (first at line 1)",
    ),
    (
        "duplicate-nested",
        "gpu:\n  backend: none\n  backend: nvml\n",
        3,
        "gpu.backend",
        "duplicate key (first at line 2)",
    ),
    ("duplicate-in-item", "processes:\n  - role: a\n    role: b\n", 3, "processes[0].role", "duplicate key"),
    # YAML syntax and lexical problems
    (
        "unparsable",
        "profile: areal\nserver: url: x\n",
        2,
        None,
        "could not parse YAML: mapping values are not allowed here",
    ),
    ("unclosed-flow", "training: {logs: [a\n", 2, None, "could not parse YAML"),
    ("tab-indent", "gpu:\n\tbackend: nvml\n", 2, None, "tabs"),
    ("unknown-tag", "run_dir: !secret foo\n", 1, "run_dir", "could not determine a constructor"),
    ("bad-timestamp", "run_dir: 2024-13-45\n", 1, "run_dir", "cannot read this value"),
    ("recursive-alias", "processes: &p [*p]\n", 1, "processes[0]", "refers to itself"),
    ("two-documents", "profile: areal\n---\nprofile: trl\n", 2, None, "another document"),
    ("key-is-list", "? [a, b]\n: 1\n", 1, None, "plain name"),
    ("control-char", "profile: areal\nrun_dir: a\x07b\n", 2, None, "unacceptable character #x0007"),
    # the top level
    ("top-level-list", "- profile: areal\n", 1, None, "the top level must be a mapping"),
    ("top-level-scalar", "\n\njust some words\n", 3, None, "the top level must be a mapping"),
]


@pytest.mark.parametrize(("text", "line", "key", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_config_gives_one_line_with_file_line_and_key(
    tmp_path: Path, text: str, line: int, key: str | None, fragment: str
) -> None:
    path = tmp_path / "rlwatch.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    prefix = f"{path}:{line}: " + (f"{key}: " if key else "")
    assert message.startswith(prefix), message
    assert fragment in message
    assert "\n" not in message
    assert info.value.line == line
    assert info.value.key == key


def test_there_are_enough_distinct_cases() -> None:
    assert len({c[1] for c in CASES}) >= 20


def test_every_error_in_file_order() -> None:
    text = "thresholds:\n  stall_s: -1\ninterval_s: x\ngpu:\n  bakend: nvml\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, "cfg.yaml")
    # pydantic reports interval_s first (field order); the person reads the file top-down.
    assert str(info.value).startswith("cfg.yaml:2: thresholds.stall_s: Input should be greater than 0")
    # every mistake is named, one line each, in file order
    lines = [str(e) for e in info.value.every()]
    assert len(lines) == 3
    assert lines[1].startswith("cfg.yaml:3: interval_s:")
    assert lines[2].startswith("cfg.yaml:5: gpu.bakend: unknown key")
    assert all("\n" not in line for line in lines)


def test_unknown_key_without_a_close_match_has_no_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("gpu:\n  zzzzzz: 1\n", "c.yaml")
    assert str(info.value) == "c.yaml:2: gpu.zzzzzz: unknown key"


def test_odd_key_text_is_quoted_and_kept_on_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config('"bad\\nkey": 1\n', "c.yaml")
    message = str(info.value)
    assert message.startswith("c.yaml:1: 'bad\\nkey': unknown key")
    assert "\n" not in message


def test_yaml_booleans_as_keys_stay_names() -> None:
    """YAML 1.1 reads a bare `on:` key as True; rlwatch reports the key as written."""
    with pytest.raises(ConfigError) as info:
        parse_config("on: 1\n", "c.yaml")
    assert str(info.value) == "c.yaml:1: on: unknown key"


def test_alias_bomb_is_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 7):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    with pytest.raises(ConfigError) as info:
        parse_config("\n".join(lines) + "\n", "bomb.yaml")
    assert "too many values" in str(info.value)


def test_deep_nesting_is_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("[" * 3000 + "]" * 3000, "deep.yaml")
    assert str(info.value).startswith("deep.yaml")
    assert "\n" not in str(info.value)


def test_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "rlwatch.yaml"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}:1: a binary file, not a YAML configuration (NUL byte)"


def test_non_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "rlwatch.yaml"
    path.write_bytes("profile: areal\nrun_dir: /data/caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}:2: not UTF-8 text (byte 0xe9)"


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert str(info.value) == f"{tmp_path}: cannot read: Is a directory"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: cannot read: No such file or directory"


def test_huge_file(tmp_path: Path) -> None:
    path = tmp_path / "rlwatch.yaml"
    path.write_bytes(b"# padding\n" * 200_000)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: too large")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_any_text_gives_a_config_or_one_line_error(text: str) -> None:
    try:
        cfg = parse_config(text, "f.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("f.yaml")
        assert "\n" not in str(exc)
    else:
        assert isinstance(cfg, Config)


YAMLISH = st.recursive(
    st.one_of(
        st.sampled_from(["profile", "gpu", "backend", "training", "logs", "processes", "role", "- ", ": ", "\n", "  "]),
        st.sampled_from(["&a ", "*a", "<<: *a", "!!int ", "!!binary ", "{", "}", "[", "]", "'", '"', "#", "\t", "~"]),
        st.text(max_size=5),
    ),
    lambda children: st.lists(children, max_size=12).map("".join),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(YAMLISH)
def test_yaml_like_text_gives_a_config_or_one_line_error(text: str) -> None:
    try:
        parse_config(text, "f.yaml")
    except ConfigError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_any_bytes_give_a_config_or_one_line_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(data)
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        assert str(exc).startswith(str(path))
        assert "\n" not in str(exc)
    else:
        assert isinstance(cfg, Config)
