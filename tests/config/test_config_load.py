"""Loading valid configurations, where a run's configuration comes from, and its paths."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlwatch.config.models import Config
from rlwatch.discover.load import ConfigError, absolute, load_config, missing_paths, parse_config, resolve_config

FULL = """\
profile: areal
interval_s: 1.5
training:
  logs: [logs/**/*.log, extra.log]
  checkpoint_dirs: [checkpoints]
  recover_info: checkpoints/**/recover_info/step_info.json
  total_steps: 4675
server:
  kind: sglang
  url: http://127.0.0.1:31234
  command: [python3, -m, sglang.launch_server, --port, "31234"]
gpu:
  backend: none
processes:
  - role: trainer
    cmdline_regex: '(^|/)torchrun( |$)'
    memory_limit_bytes: 8589934592
events:
  custom:
    - name: reward_nan
      pattern: 'reward.*nan'
      severity: critical
thresholds:
  stall_s: 900
actions:
  readonly: true
"""


def test_full_file_loads_every_value(tmp_path: Path) -> None:
    path = tmp_path / "rlwatch.yaml"
    path.write_text(FULL)
    cfg = load_config(path)
    assert cfg.profile == "areal"
    assert cfg.interval_s == 1.5
    assert cfg.training.logs == ["logs/**/*.log", "extra.log"]
    assert cfg.training.total_steps == 4675
    assert cfg.server.url == "http://127.0.0.1:31234"
    assert cfg.server.command == ["python3", "-m", "sglang.launch_server", "--port", "31234"]
    assert cfg.gpu.backend == "none"
    assert cfg.processes[0].memory_limit_bytes == 8 * 1024**3
    assert cfg.events.custom[0].severity == "critical"
    assert cfg.thresholds.stall_s == 900.0
    assert cfg.thresholds.brake_streak == Config().thresholds.brake_streak
    assert cfg.actions.readonly is True


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "~\n", "null\n", "---\n", "{}\n"])
def test_empty_files_are_the_defaults(text: str) -> None:
    assert parse_config(text) == Config()


def test_empty_sections_mean_defaults() -> None:
    text = "thresholds:\n  # stall_s: 5\ntraining:\n  logs:\nevents:\n  custom:\n"
    assert parse_config(text) == Config()


def test_null_where_null_is_allowed_stays_null() -> None:
    cfg = parse_config("server:\n  url: null\ntraining:\n  recover_info: ~\n")
    assert cfg.server.url is None
    assert cfg.training.recover_info is None


def test_anchors_and_merge_keys() -> None:
    text = """\
processes:
  - &worker
    role: worker
    cmdline_regex: 'worker\\.py'
    memory_limit_bytes: 100
  - <<: *worker
    memory_limit_bytes: 200
"""
    cfg = parse_config(text)
    assert [p.memory_limit_bytes for p in cfg.processes] == [100, 200]
    assert cfg.processes[1].cmdline_regex == r"worker\.py"


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "rlwatch.yaml"
    path.write_bytes(b"\xef\xbb\xbfprofile: trl\n")
    assert load_config(path).profile == "trl"


def test_error_in_a_merged_mapping_points_at_its_anchor() -> None:
    text = "thresholds: &t\n  stall_s: 5\nactions:\n  <<: *t\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    assert str(info.value).startswith("c.yaml:2: actions.stall_s: unknown key")


def test_permission_denied(tmp_path: Path) -> None:
    path = tmp_path / "rlwatch.yaml"
    path.write_text("profile: areal\n")
    path.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert str(info.value) == f"{path}: cannot read: Permission denied"
        return
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions are not enforced")
    # Root without CAP_DAC_OVERRIDE obeys file modes, which is what an unprivileged user sees.
    code = (
        "import sys; from pathlib import Path; from rlwatch.discover.load import load_config, ConfigError\n"
        "try:\n    load_config(Path(sys.argv[1]))\nexcept ConfigError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [setpriv, "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert out.stdout.strip() == f"{path}: cannot read: Permission denied", out.stderr


# --------------------------------------------------------------------------------------------- resolve_config


def test_explicit_config_wins_over_run_dir_file(tmp_path: Path) -> None:
    (tmp_path / "rlwatch.yaml").write_text("profile: trl\n")
    other = tmp_path / "elsewhere" / "mine.yaml"
    other.parent.mkdir()
    other.write_text("profile: workers\ninterval_s: 7\n")
    cfg, source = resolve_config(tmp_path, other)
    assert (cfg.profile, cfg.interval_s) == ("workers", 7.0)
    assert source == f"--config {other}"
    assert cfg.run_dir == str(tmp_path)  # paths stay relative to the run, not to the file


def test_run_dir_file_is_used_when_present(tmp_path: Path) -> None:
    (tmp_path / "rlwatch.yaml").write_text("profile: trl\ntraining:\n  logs: [out.log]\n")
    cfg, source = resolve_config(tmp_path, None)
    assert source == "rlwatch.yaml"
    assert cfg.profile == "trl"
    assert cfg.training.logs == ["out.log"]
    assert cfg.run_dir == str(tmp_path)


def test_broken_run_dir_file_is_an_error_not_a_silent_discovery(tmp_path: Path) -> None:
    (tmp_path / "rlwatch.yaml").write_text("gpu:\n  bakend: x\n")
    with pytest.raises(ConfigError) as info:
        resolve_config(tmp_path, None)
    assert str(info.value).startswith(f"{tmp_path / 'rlwatch.yaml'}:2: gpu.bakend: unknown key")


def test_without_a_file_the_run_is_discovered(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "u" / "e" / "t" / "default" / "epoch0epochstep3globalstep3").mkdir(parents=True)
    cfg, source = resolve_config(tmp_path, None)
    assert source == "discovered"
    assert cfg.profile == "areal"
    assert cfg.training.checkpoint_dirs == ["checkpoints/u/e/t"]


def test_profile_option_replaces_the_files_label(tmp_path: Path) -> None:
    (tmp_path / "rlwatch.yaml").write_text("profile: areal\ninterval_s: 3\n")
    cfg, _ = resolve_config(tmp_path, None, "workers")
    assert cfg.profile == "workers"
    assert cfg.interval_s == 3.0
    cfg, _ = resolve_config(tmp_path, None, "auto")
    assert cfg.profile == "areal"


def test_unknown_profile_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config(tmp_path, None, "nemo")
    assert str(info.value).startswith("--profile: unknown profile 'nemo'")


def test_run_dir_written_in_the_file_is_relative_to_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "run.yaml").write_text("run_dir: ../data/run1\n")
    cfg, _ = resolve_config(tmp_path / "ignored", conf / "run.yaml")
    assert cfg.run_dir == str(tmp_path / "data" / "run1")


def test_relative_run_dir_argument_becomes_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rlwatch.yaml").write_text("profile: trl\n")
    monkeypatch.chdir(tmp_path)
    cfg, _ = resolve_config(Path("."), None)
    assert cfg.run_dir == str(tmp_path)


# ---------------------------------------------------------------------------------------------- paths


def test_absolute_resolves_against_the_run_dir(tmp_path: Path) -> None:
    cfg = Config(run_dir=str(tmp_path))
    assert absolute(cfg, "logs/**/*.log") == tmp_path / "logs" / "**" / "*.log"
    assert absolute(cfg, "a/../b.log") == tmp_path / "b.log"
    assert absolute(cfg, "/var/log/x.log") == Path("/var/log/x.log")
    assert absolute(cfg, "~/x.log") == Path.home() / "x.log"


def test_absolute_without_run_dir_uses_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute(Config(), "x.log") == tmp_path / "x.log"


def test_missing_paths_names_only_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "logs" / "u").mkdir(parents=True)
    (tmp_path / "logs" / "u" / "trainer.log").write_text("x\n")
    (tmp_path / "checkpoints").mkdir()
    cfg = Config.model_validate(
        {
            "training": {
                "logs": ["logs/**/*.log", "wandb/*.log"],
                "checkpoint_dirs": ["checkpoints", "out"],
                "recover_info": "checkpoints/**/recover_info/step_info.json",
                "config_file": "config.yaml",
            },
            "gpu": {"backend": "simulated", "simulated_state": ".sim/gpu_state.json"},
        }
    )
    lines = missing_paths(cfg, tmp_path)
    assert lines == [
        "training.logs[1]: wandb/*.log matches nothing (yet)",
        "training.checkpoint_dirs[1]: out does not exist (yet)",
        "training.recover_info: checkpoints/**/recover_info/step_info.json matches nothing (yet)",
        "training.config_file: config.yaml does not exist (yet)",
        "gpu.simulated_state: .sim/gpu_state.json does not exist (yet)",
    ]
    (tmp_path / "config.yaml").write_text("a: 1\n")
    assert not any(line.startswith("training.config_file") for line in missing_paths(cfg, tmp_path))
