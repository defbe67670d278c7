"""Discovery over real directory trees and real processes, and what `rlwatch init` writes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlwatch.config.models import Config
from rlwatch.config.profiles import profile_defaults
from rlwatch.discover import discovery
from rlwatch.discover.describe import describe_config, dump_config
from rlwatch.discover.discovery import Proc, discover, server_of, walk_run_dir
from rlwatch.discover.load import parse_config, resolve_config
from tests.simhost import wait_until

DAY = 24 * 3600
ANY = "0.0.0.0"


def write(path: Path, text: str = "", *, age_s: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if age_s:
        t = time.time() - age_s
        os.utime(path, (t, t))
    return path


@pytest.fixture
def no_procs(tmp_path: Path) -> str:
    """A process table with nothing in it, so tree tests do not depend on what else runs on the machine."""
    root = tmp_path.parent / f"{tmp_path.name}-proc"
    root.mkdir()
    return str(root)


def areal_tree(run: Path) -> None:
    trial = ("root", "gsm8k-grpo", "trial0")
    logs = run.joinpath("logs", *trial)
    write(logs / "trainer.log", "\x1b[92m(AReaL) 20251121-05:04:00.000 Recover INFO: saved\x1b[0m\n")
    write(logs / "llm_server.log", "SGLangWrapper INFO: SGLang server launched at: http://10.0.0.5:17331\n")
    write(run / "logs" / "root" / "gsm8k-grpo" / "trial-old" / "trainer.log", "old\n", age_s=3 * DAY)
    ckpt = run.joinpath("checkpoints", *trial)
    (ckpt / "default" / "epoch1epochstep934globalstep1869").mkdir(parents=True)
    write(ckpt / "default" / "epoch1epochstep934globalstep1869" / "model.safetensors", "w")
    write(ckpt / "recover_info" / "step_info.json", json.dumps({"epoch": 1, "epoch_step": 934, "global_step": 1869}))
    (run / "checkpoints" / "root" / "gsm8k-grpo" / "trial-old" / "default" / "epoch0epochstep1globalstep1").mkdir(
        parents=True
    )
    write(run / "wandb" / "run-1" / "files" / "output.log", "ConnectionRefusedError(111, ...)\n")
    write(run / "wandb" / "run-1" / "logs" / "debug-internal.log", "wandb internals\n")
    (run / "wandb" / "latest-run").symlink_to(run / "wandb" / "run-1")
    write(run / "config.yaml", "experiment_name: gsm8k-grpo\ntrial_name: trial0\nrollout:\n  request_retries: 3\n")
    write(run / "notes.yaml", "todo: [a, b]\n")


def test_areal_layout(tmp_path: Path, no_procs: str) -> None:
    areal_tree(tmp_path)
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.profile == "areal"
    assert cfg.run_dir == str(tmp_path)
    assert cfg.training.logs == ["logs/root/gsm8k-grpo/trial0/*.log", "wandb/run-1/files/output.log"]
    assert cfg.training.checkpoint_dirs == ["checkpoints/root/gsm8k-grpo/trial0"]
    assert cfg.training.recover_info == "checkpoints/root/gsm8k-grpo/trial0/recover_info/step_info.json"
    assert cfg.training.config_file == "config.yaml"
    # No server process: the address the AReaL wrapper logged.
    assert (cfg.server.kind, cfg.server.url, cfg.server.health_path) == ("sglang", "http://10.0.0.5:17331", "/health")
    assert cfg.processes == profile_defaults("areal", tmp_path).processes


def test_areal_v1_single_controller_logs(tmp_path: Path, no_procs: str) -> None:
    logs = tmp_path / "logs" / "u" / "e" / "t"
    for name in ("main.log", "merged.log", "actor.log", "rollout.log"):
        write(logs / name, "x\n")
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.profile == "areal"
    assert cfg.training.logs == ["logs/u/e/t/*.log"]


def test_trl_layout(tmp_path: Path, no_procs: str) -> None:
    for step in (25, 50):
        write(tmp_path / "out" / f"checkpoint-{step}" / "trainer_state.json", json.dumps({"global_step": step}))
    (tmp_path / "out" / "checkpoint-75").mkdir()  # being written: no trainer_state.json yet
    write(tmp_path / "train.log", "{'loss': 0.0, 'reward': 0.375}\n")
    write(tmp_path / "old.log", "x\n", age_s=2 * DAY)
    write(tmp_path / "grpo.yaml", "use_vllm: true\nvllm_mode: server\nnum_generations: 8\n")
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.profile == "trl"
    assert cfg.training.checkpoint_dirs == ["out"]
    assert cfg.training.logs == ["train.log"]
    assert cfg.training.config_file == "grpo.yaml"
    assert (cfg.server.kind, cfg.server.url, cfg.server.health_path) == ("trl", "http://127.0.0.1:8000", "/health/")


def test_worker_logs_with_brake_lines(tmp_path: Path, no_procs: str) -> None:
    write(tmp_path / "logs" / "worker-0.log", "trial 3 done in 4.0 s\n")
    write(
        tmp_path / "logs" / "worker-1.log", "EMERGENCY BRAKE: only 1.8 GB free (< 2.0 GB), refusing to start trial 9\n"
    )
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.profile == "workers"
    assert cfg.training.logs == ["logs/worker-0.log", "logs/worker-1.log"]
    assert any(r.role == "watchdog" and r.expected for r in cfg.processes)


def test_empty_directory_is_no_run_and_invents_nothing(tmp_path: Path, no_procs: str) -> None:
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg == profile_defaults("generic", tmp_path)
    assert (cfg.server.url, cfg.server_expected, cfg.training.checkpoint_dirs) == (None, False, [])
    prov = cfg.provenance
    assert prov.source == "discovered" and prov.run_found is False and prov.profile == ()
    assert prov.looked_for is not None and "checkpoint-N/trainer_state.json" in prov.looked_for


def test_explicit_profile_is_kept_and_filled_with_what_was_found(tmp_path: Path, no_procs: str) -> None:
    areal_tree(tmp_path)
    cfg = discover(tmp_path, "workers", proc_root=no_procs)
    assert cfg.profile == "workers"
    assert cfg.training.logs[0] == "logs/root/gsm8k-grpo/trial0/*.log"


def test_walk_is_bounded_and_skips_what_it_should(
    tmp_path: Path, no_procs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path.joinpath(*[f"d{i}" for i in range(10)])
    write(deep / "deep.log", "x\n")
    write(tmp_path / "d0" / "d1" / "shallow.log", "x\n")
    write(tmp_path / ".git" / "hooks.log", "x\n")
    write(tmp_path / "node_modules" / "pkg" / "npm.log", "x\n")
    write(tmp_path / ".venv" / "pip.log", "x\n")
    (tmp_path / "loop").symlink_to(tmp_path)  # never followed
    (tmp_path / "dangling.log").symlink_to(tmp_path / "gone")
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.training.logs == ["d0/d1/shallow.log"]

    for i in range(60):
        write(tmp_path / "many" / f"f{i}.txt")
    monkeypatch.setattr(discovery, "MAX_ENTRIES", 40)
    found = walk_run_dir(tmp_path, time.time())
    assert found.truncated
    assert found.entries == 41


def test_a_huge_directory_beside_the_logs_is_read_in_part_and_said(
    tmp_path: Path, no_procs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: a dataset of a million files in the run directory made discovery read every entry of it into
    memory (11.7 s, 321 MB) and, once the walk's entry budget was spent in it, miss the logs beside it. Only the
    first MAX_DIR_ENTRIES of a directory are looked at, the walk goes on to the logs, and the report says so."""
    areal_tree(tmp_path)
    for i in range(300):
        write(tmp_path / "aaa-data" / f"sample-{i:04d}.json")
    monkeypatch.setattr(discovery, "MAX_DIR_ENTRIES", 50)
    monkeypatch.setattr(discovery, "MAX_ENTRIES", 200)
    found = walk_run_dir(tmp_path, time.time())
    assert found.cut == ["aaa-data/: only its first 50 entries"]
    assert not found.truncated and found.entries < 200
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.training.logs[0] == "logs/root/gsm8k-grpo/trial0/*.log"
    assert any("not walked whole: aaa-data/: only its first 50 entries" in e for e in cfg.provenance.profile)


def test_the_walk_stops_at_its_time_budget(tmp_path: Path) -> None:
    for i in range(5):
        write(tmp_path / f"d{i}" / "x.log", "x\n")
    ticks = iter(range(100))
    found = walk_run_dir(tmp_path, time.time(), budget_s=2.5, monotonic=lambda: float(next(ticks)))
    assert found.truncated
    assert found.cut == [f"the walk stopped after 2.5 s ({found.entries:,} entries)"]
    assert len(found.recent_logs) < 5


def test_unreadable_and_odd_names(tmp_path: Path, no_procs: str) -> None:
    write(tmp_path / "logs" / "u" / "exp[1]" / "t" / "trainer.log", "x\n")
    write(tmp_path / "logs" / "u" / "exp[1]" / "t" / "llm_server.log", "x\n")
    write(tmp_path / "bad.yaml", "\x00\x01 not yaml: [")
    (tmp_path / "locked").mkdir()
    write(tmp_path / "locked" / "x.log", "x\n")
    (tmp_path / "locked").chmod(0)
    try:
        cfg = discover(tmp_path, proc_root=no_procs)
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert cfg.training.logs[0] == "logs/u/exp[[]1]/t/*.log"  # a glob that matches the literal name
    assert sorted(Path(tmp_path).glob(cfg.training.logs[0])) == sorted(
        (tmp_path / "logs" / "u" / "exp[1]" / "t").glob("*.log")
    )


def test_garbage_in_a_process_table_is_skipped(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, raw in {
        "10": b"",
        "11": b"\xff\xfe\x00\x00",
        "12": b"python3\x00-m\x00sglang.launch_server\x00--port\x00x",
    }.items():
        write(proc / pid / "cmdline")
        (proc / pid / "cmdline").write_bytes(raw)
    (proc / "13").mkdir()  # vanished between listdir and open
    write(proc / "self" / "cmdline", "python3 -m sglang.launch_server")
    write(proc / "14" / "cmdline")
    (proc / "14" / "cmdline").write_bytes(b"python3\x00-m\x00sglang.launch_server\x00--port=30123\x00")
    procs = discovery.scan_processes(str(proc))
    assert [p.pid for p in procs] == [12, 14]
    assert server_of(procs[0]) is None  # --port x is not a port
    cfg = discover(tmp_path / "run", proc_root=str(proc))
    assert cfg.server.url is None  # no run there: a server elsewhere on the host is not its server
    write(tmp_path / "run" / "train.log", "step 1\n")
    cfg = discover(tmp_path / "run", proc_root=str(proc))
    assert cfg.server.url == "http://127.0.0.1:30123"  # a run, and the host's only server
    assert cfg.provenance.server[0].startswith("pid 14 is the only inference server on this host")


@pytest.mark.parametrize(
    ("argv", "url", "kind"),
    [
        (
            ("python3", "-m", "sglang.launch_server", "--port", "31000", "--host", ANY),
            "http://127.0.0.1:31000",
            "sglang",
        ),
        (
            ("python3", "-m", "sglang.launch_server", "--host=10.1.2.3", "--port=17331"),
            "http://10.1.2.3:17331",
            "sglang",
        ),
        (("python3", "-m", "sglang.launch_server", "--model-path", "/m"), "http://127.0.0.1:30000", "sglang"),
        (("/v/bin/python", "/v/bin/trl", "vllm-serve", "--model", "m", "--host", "::"), "http://[::1]:8000", "trl"),
        (("vllm", "serve", "m", "--port", "8001", "--host", "fd00::5"), "http://[fd00::5]:8001", "vllm"),
        (("vllm", "serve", "m", "--host", "localhost"), "http://localhost:8000", "vllm"),
    ],
)
def test_server_url_from_a_command_line(argv: tuple[str, ...], url: str, kind: str) -> None:
    proc = Proc(1, argv, None, discovery._classify(" ".join(argv)))
    server = server_of(proc)
    assert server is not None
    assert (server.url, server.kind) == (url, kind)


def test_areal_server_wrapper_alone_says_nothing_about_the_port() -> None:
    argv = ("python3", "-m", "areal.launcher.sglang_server", "x.py", "--config", "c.yaml")
    assert server_of(Proc(1, argv, None, discovery._classify(" ".join(argv)))) is None


# ------------------------------------------------------------------------------------------ real processes

SLEEP = "import time; time.sleep(120)"


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, cwd: Path | None = None, code: str = SLEEP) -> subprocess.Popen[bytes]:
        # Its own session, so teardown can stop the children it starts with it.
        proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd or tmp_path, start_new_session=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in started:
        proc.wait(timeout=10)


@pytest.mark.slow
def test_running_areal_processes(tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write(run / "conf" / "gsm8k_grpo.yaml", "experiment_name: e\n")
    spawn("-m", "areal.launcher.local", "gsm8k_grpo.py", "--config", "conf/gsm8k_grpo.yaml", cwd=run)
    spawn("-m", "areal.launcher.sglang_server", "gsm8k_grpo.py", "--config", "conf/gsm8k_grpo.yaml", cwd=run)
    spawn("-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1", "--port", "31234", cwd=run)

    def found() -> bool:
        return discover(run).server.url == "http://127.0.0.1:31234"

    assert wait_until(found)
    cfg = discover(run)
    assert cfg.profile == "areal"
    assert cfg.server.kind == "sglang"
    assert cfg.training.config_file == "conf/gsm8k_grpo.yaml"  # named in the launcher's --config


@pytest.mark.slow
def test_running_trl_server(tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]) -> None:
    spawn("trl", "vllm-serve", "--model", "Qwen/Qwen2.5-0.5B", "--port", "8123", "--host", ANY)
    spawn("accelerate", "launch", "train_grpo.py", "--config", "grpo.yaml")
    assert wait_until(lambda: discover(tmp_path).server.url == "http://127.0.0.1:8123")
    cfg = discover(tmp_path)
    assert (cfg.profile, cfg.server.kind, cfg.server.health_path) == ("trl", "trl", "/health/")
    assert cfg.training.config_file == "grpo.yaml"


@pytest.mark.slow
def test_areal_launched_from_its_source_tree_is_tied_to_the_run_by_its_yaml(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    run, src, elsewhere = tmp_path / "experiments", tmp_path / "AReaL", tmp_path / "other"
    run.mkdir()
    write(src / "examples" / "gsm8k_grpo.yaml", f"cluster:\n  fileroot: {run}\nexperiment_name: e\n")
    write(elsewhere / "other.yaml", "cluster:\n  fileroot: /somewhere/else\n")
    spawn("-m", "areal.launcher.local", "x.py", "--config", "other.yaml", cwd=elsewhere)
    spawn("-m", "sglang.launch_server", "--port", "31666", cwd=elsewhere)  # another run's server
    # The launcher starts its server as a child, as AReaL does: only the process tree ties the server to the run.
    server = [sys.executable, "-c", SLEEP, "-m", "sglang.launch_server", "--port", "31777"]
    launcher = f"import subprocess, time; subprocess.Popen({server!r}); time.sleep(120)"
    spawn("-m", "areal.launcher.local", "x.py", "--config", "examples/gsm8k_grpo.yaml", cwd=src, code=launcher)
    expected = str(src / "examples" / "gsm8k_grpo.yaml")
    assert wait_until(lambda: discover(run).server.url == "http://127.0.0.1:31777")
    cfg = discover(run)
    assert (cfg.profile, cfg.training.config_file) == ("areal", expected)


@pytest.mark.slow
def test_a_yaml_of_an_unrelated_process_is_never_taken(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    run, elsewhere = tmp_path / "run", tmp_path / "other"
    run.mkdir()
    write(elsewhere / "other.yaml", "experiment_name: x\n")
    proc = spawn("-m", "areal.launcher.local", "x.py", "--config", "other.yaml", cwd=elsewhere)
    assert wait_until(lambda: any(p.pid == proc.pid for p in discovery.scan_processes()))
    assert discover(run).training.config_file is None


@pytest.mark.slow
def test_a_server_of_another_run_is_not_taken_when_this_run_has_one(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    run, other = tmp_path / "run", tmp_path / "other"
    run.mkdir()
    other.mkdir()
    spawn("-m", "sglang.launch_server", "--port", "31999", cwd=other)
    spawn("-m", "sglang.launch_server", "--port", "31888", cwd=run)
    assert wait_until(lambda: discover(run).server.url == "http://127.0.0.1:31888")


# --------------------------------------------------------------------------------------- describe and init


def test_describe_says_what_is_watched(tmp_path: Path, no_procs: str) -> None:
    areal_tree(tmp_path)
    lines = describe_config(discover(tmp_path, proc_root=no_procs))
    assert lines[0] == "profile: areal"
    assert "logs: logs/root/gsm8k-grpo/trial0/*.log (2 files now)" in lines
    assert "checkpoints: checkpoints/root/gsm8k-grpo/trial0" in lines
    assert "server: sglang at http://10.0.0.5:17331 (health /health)" in lines
    assert any(line.startswith("process launcher: cmdline /") for line in lines)


def test_describe_says_what_is_not_there_yet(tmp_path: Path) -> None:
    lines = describe_config(profile_defaults("areal", tmp_path))
    assert "logs: logs/**/*.log (0 files now)" in lines
    assert "checkpoints: checkpoints (not there yet)" in lines


def test_dump_config_writes_only_non_defaults_and_loads_back(tmp_path: Path, no_procs: str) -> None:
    areal_tree(tmp_path)
    cfg = discover(tmp_path, proc_root=no_procs)
    text = dump_config(cfg)
    assert text.startswith("# rlwatch configuration")
    assert "run_dir" not in text
    assert "thresholds" not in text  # the areal profile keeps the default thresholds
    assert parse_config(text) == cfg.model_copy(update={"run_dir": None})

    (tmp_path / "rlwatch.yaml").write_text(text)
    again, source = resolve_config(tmp_path, None)
    assert source == "rlwatch.yaml"
    assert again == cfg


def test_dump_of_the_defaults_is_only_the_header() -> None:
    text = dump_config(Config())
    assert all(line.startswith("#") for line in text.splitlines())
    assert parse_config(text) == Config()


@pytest.mark.parametrize("name", ["areal", "trl", "workers"])
def test_dump_round_trips_every_profile(name: str, tmp_path: Path) -> None:
    cfg = profile_defaults(name, tmp_path)  # type: ignore[arg-type]
    assert parse_config(dump_config(cfg)) == cfg.model_copy(update={"run_dir": None})


# ------------------------------------------------------------------------------------ profiles from evidence

TRL_DICT = (
    "{'loss': 0.0123, 'grad_norm': 0.0861, 'learning_rate': 6.9e-06, 'num_tokens': 280752.0, "
    "'completions/mean_length': 163.0, 'rewards/accuracy_reward/mean': 0.375, 'reward': 0.375, "
    "'reward_std': 0.51, 'frac_reward_zero_std': 0.0, 'epoch': 0.02}\n"
)
TRL_END = (
    "{'train_runtime': 812.3, 'train_samples_per_second': 3.2, 'train_steps_per_second': 0.049, "
    "'train_loss': 0.0012, 'epoch': 1.0}\n"
)
TORCHRUN_LOG = (
    "W1121 09:22:41.944000 40112 torch/distributed/run.py:793] \n"
    "W1121 09:22:41.944000 40112 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable\n"
    "epoch 0 step 10 loss 2.31\n"
)


def trl_colocated_run(run: Path, *, steps: int = 10, finished: bool = True) -> None:
    """What a finished TRL GRPO run with colocated generation leaves: checkpoints and metric dicts, nothing else."""
    for step in range(5, steps + 1, 5):
        state = {"global_step": step, "max_steps": steps, "logging_steps": 1, "log_history": []}
        write(run / "output" / f"checkpoint-{step}" / "trainer_state.json", json.dumps(state))
    write(run / "train.log", TRL_DICT * steps + (TRL_END if finished else ""))


def fake_proc(root: Path, pid: int, argv: list[str], cwd: Path) -> None:
    """One process in a stand-in /proc tree: its command line and its working directory."""
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (root / str(pid) / "cwd").symlink_to(cwd)


def test_a_plain_torchrun_log_is_generic_and_invents_nothing(tmp_path: Path, no_procs: str) -> None:
    write(tmp_path / "train.log", TORCHRUN_LOG)
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.profile == "generic"
    assert cfg.training.logs == ["train.log"]
    assert (cfg.training.checkpoint_dirs, cfg.training.recover_info) == ([], None)
    assert (cfg.server.url, cfg.server_expected) == (None, False)
    assert [r.role for r in cfg.processes] == ["trainer"]
    assert cfg.policies == []
    assert cfg.provenance.run_found
    assert cfg.provenance.profile[0].startswith("train.log: a log written")
    assert cfg.provenance.server[0].startswith("no server evidence")


def test_a_finished_colocated_trl_run_is_trl_without_a_server(tmp_path: Path, no_procs: str) -> None:
    trl_colocated_run(tmp_path)
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.profile == "trl"
    assert cfg.training.checkpoint_dirs == ["output"]
    assert (cfg.server.url, cfg.server_expected) == (None, False)
    why = cfg.provenance.profile
    assert "output/checkpoint-N/trainer_state.json: HF Trainer checkpoints, as TRL writes them" in why
    assert any(w.startswith("train.log: TRL GRPO metric dicts") for w in why)


@pytest.mark.parametrize(
    ("yaml_text", "expected", "why"),
    [
        ("use_vllm: false\nnum_generations: 8\n", False, "transformers generate"),
        ("use_vllm: true\nvllm_mode: colocate\n", False, "vLLM runs inside the trainer"),
        ("use_vllm: true\nvllm_mode: server\n", True, "generation goes to a vLLM server"),
        ("use_vllm: true\nnum_generations: 8\n", False, "the TRL version is not known"),
    ],
)
def test_trl_settings_in_the_training_yaml_decide_the_server(
    tmp_path: Path, no_procs: str, yaml_text: str, expected: bool, why: str
) -> None:
    trl_colocated_run(tmp_path, finished=False)
    write(tmp_path / "grpo.yaml", yaml_text)
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.training.config_file == "grpo.yaml"
    assert cfg.server_expected is expected
    assert cfg.server.url == ("http://127.0.0.1:8000" if expected else None)
    assert why in cfg.provenance.server[0] and cfg.provenance.server[0].startswith("grpo.yaml: ")


@pytest.mark.parametrize(("version", "expected"), [("0.19.1", True), ("1.2.0", False)])
def test_use_vllm_without_a_mode_follows_the_trl_version_of_the_model_card(
    tmp_path: Path, no_procs: str, version: str, expected: bool
) -> None:
    trl_colocated_run(tmp_path, finished=False)
    write(tmp_path / "grpo.yaml", "use_vllm: true\nnum_generations: 8\n")
    card = f"# Model Card\n\n### Framework versions\n\n- TRL: {version}\n- Transformers: 4.56.0\n"
    write(tmp_path / "output" / "checkpoint-10" / "README.md", card)
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.server_expected is expected
    assert f"TRL {version.rsplit('.', 1)[0]}" in cfg.provenance.server[0]
    assert any("TRL's model card" in w for w in cfg.provenance.profile)


def test_the_trainers_command_line_names_its_server_and_overrides_the_yaml(tmp_path: Path) -> None:
    run, proc = tmp_path / "run", tmp_path / "proc"
    trl_colocated_run(run, finished=False)
    write(run / "grpo.yaml", "use_vllm: true\nvllm_mode: colocate\n")
    write(run / "train_grpo.py", "from trl import GRPOConfig, GRPOTrainer\n")
    argv = ["/usr/bin/python3", "/usr/bin/accelerate", "launch", "train_grpo.py", "--config", "grpo.yaml"]
    fake_proc(proc, 4242, [*argv, "--vllm_mode", "server", "--vllm-server-port=8123"], run)
    cfg = discover(run, proc_root=str(proc))
    assert cfg.profile == "trl"
    assert any(w.startswith("train_grpo.py (run by pid 4242) uses TRL") for w in cfg.provenance.profile)
    assert (cfg.server.kind, cfg.server.url, cfg.server_expected) == ("trl", "http://127.0.0.1:8123", True)
    assert cfg.provenance.server[0].startswith("grpo.yaml and pid 4242's command line: ")


def test_a_plain_accelerate_trainer_is_generic_and_its_colocated_script_says_no_server(tmp_path: Path) -> None:
    run, proc = tmp_path / "run", tmp_path / "proc"
    write(run / "train.py", "import torch\nconfig = dict(use_vllm=False)\n")
    write(run / "train.log", "epoch 0 loss 2.3\n")
    fake_proc(proc, 77, ["/usr/bin/python3", "/usr/bin/accelerate", "launch", "train.py"], run)
    fake_proc(proc, 78, ["/usr/bin/python3", "-m", "sglang.launch_server", "--port", "30001"], tmp_path)
    cfg = discover(run, proc_root=str(proc))
    assert cfg.profile == "generic"  # accelerate is no evidence of TRL, and an SGLang server none of AReaL
    assert any(w.startswith("pid 77, a trainer, works in or names this directory") for w in cfg.provenance.profile)
    # The script's literal setting wins over the host's only server, which nothing ties to this run.
    assert (cfg.server.url, cfg.server_expected) == (None, False)
    assert cfg.provenance.server[0].startswith("train.py: use_vllm=False")


@pytest.mark.parametrize(
    ("line", "url", "kind"),
    [
        (
            "requests.exceptions.ConnectionError: The vLLM server can't be reached at http://0.0.0.0:8000 after "
            "240.0 seconds. Make sure the server is running by running `trl vllm-serve`.",
            "http://127.0.0.1:8000",
            "trl",
        ),
        (
            "requests.exceptions.ConnectionError: HTTPConnectionPool(host='10.0.0.7', port=8001): Max retries "
            "exceeded with url: /update_named_param/ (Caused by NewConnectionError('Failed to establish a new "
            "connection: [Errno 111] Connection refused'))",
            "http://10.0.0.7:8001",
            "trl",
        ),
        (
            "INFO 05-06 20:59:57 [api_server.py:1043] Starting vLLM API server 0 on http://0.0.0.0:8002",
            "http://127.0.0.1:8002",
            "vllm",
        ),
    ],
)
def test_a_server_address_in_the_logs_makes_it_expected(
    tmp_path: Path, no_procs: str, line: str, url: str, kind: str
) -> None:
    write(tmp_path / "train.log", TRL_DICT + line + "\n")
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.profile == "trl"
    assert (cfg.server.url, cfg.server.kind, cfg.server_expected) == (url, kind, True)
    assert cfg.provenance.server[0].startswith("train.log: ") and url in cfg.provenance.server[0]


def test_areal_needs_its_own_evidence(tmp_path: Path) -> None:
    run, proc = tmp_path / "run", tmp_path / "proc"
    write(run / "out.log", "step 1\n")
    fake_proc(proc, 10, ["/usr/bin/torchrun", "--nproc-per-node", "2", "train.py"], run)
    assert discover(run, proc_root=str(proc)).profile == "generic"  # torchrun is no evidence of AReaL
    fake_proc(proc, 11, ["python3", "-m", "areal.launcher.local", "x.py", "--config", "c.yaml"], run)
    cfg = discover(run, proc_root=str(proc))
    assert cfg.profile == "areal"
    assert any(w.startswith("pid 11 runs AReaL") for w in cfg.provenance.profile)
    # No AReaL layout on disk yet: no checkpoints directory to report missing on every view.
    assert (cfg.training.checkpoint_dirs, cfg.training.recover_info) == ([], None)
    assert (cfg.server.url, cfg.server_expected) == (None, False)


def test_areal_server_log_without_an_address_expects_a_server_at_an_unknown_address(
    tmp_path: Path, no_procs: str
) -> None:
    logs = tmp_path / "logs" / "u" / "e" / "t"
    write(logs / "trainer.log", "(AReaL) 20251121-05:04:00.000 Trainer INFO: starting\n")
    write(logs / "llm_server.log", "loading weights\n")
    cfg = discover(tmp_path, proc_root=no_procs)
    assert cfg.profile == "areal"
    assert cfg.training.checkpoint_dirs == ["checkpoints"]  # AReaL's layout is here: checkpoints/ will follow
    assert (cfg.server.url, cfg.server.expected, cfg.server_expected) == (None, True, True)
    assert "logs/u/e/t/trainer.log: AReaL log lines ('(AReaL) …')" in cfg.provenance.profile
    write(logs / "llm_server.log", "vllm server launched at: http://10.0.0.9:17000\n")
    cfg = discover(tmp_path, proc_root=no_procs)
    assert (cfg.server.kind, cfg.server.url) == ("vllm", "http://10.0.0.9:17000")


def test_no_run_here_names_training_processes_elsewhere(tmp_path: Path) -> None:
    run, proc, other = tmp_path / "run", tmp_path / "proc", tmp_path / "other"
    run.mkdir()
    other.mkdir()
    fake_proc(proc, 5, ["/usr/bin/torchrun", "train.py"], other)
    cfg = discover(run, proc_root=str(proc))
    assert not cfg.provenance.run_found
    assert f"pid 5 in {other}" in (cfg.provenance.looked_for or "")


def test_a_forced_profile_says_so(tmp_path: Path, no_procs: str) -> None:
    trl_colocated_run(tmp_path)
    cfg = discover(tmp_path, "trl", proc_root=no_procs)
    assert cfg.provenance.profile[0] == "--profile trl" and len(cfg.provenance.profile) > 1
    cfg = discover(tmp_path, "generic", proc_root=no_procs)
    assert cfg.profile == "generic" and cfg.provenance.profile == ("--profile generic",)
    assert cfg.training.checkpoint_dirs == ["output"]  # what was seen is still watched


def test_init_writes_the_evidence_as_comments_and_loads_back(tmp_path: Path, no_procs: str) -> None:
    trl_colocated_run(tmp_path)
    write(tmp_path / "grpo.yaml", "use_vllm: false\nnum_generations: 8\n")
    cfg = discover(tmp_path, proc_root=no_procs)
    text = dump_config(cfg)
    assert "# profile trl, because:\n#   - output/checkpoint-N/trainer_state.json" in text
    assert "# server: none expected, because:\n#   - grpo.yaml: use_vllm=False" in text
    assert parse_config(text) == cfg.model_copy(update={"run_dir": None})
    assert parse_config(text).server.expected is False
    lines = describe_config(cfg)
    assert "server: none expected" in lines and any(line.startswith("  because grpo.yaml") for line in lines)


def test_init_comments_cannot_be_broken_by_a_file_name(tmp_path: Path, no_procs: str) -> None:
    write(tmp_path / "evil\nprofile: areal\n.log", TRL_DICT)
    text = dump_config(discover(tmp_path, proc_root=no_procs))
    assert parse_config(text).profile == "trl"
    assert all(line.startswith("#") or not line.startswith("profile: areal") for line in text.splitlines())


def test_a_file_is_its_own_evidence(tmp_path: Path) -> None:
    write(tmp_path / "rlwatch.yaml", "profile: trl\nserver:\n  url: http://127.0.0.1:8000\n")
    cfg, source = resolve_config(tmp_path, None)
    assert source == "rlwatch.yaml"
    assert cfg.provenance.profile == ("profile: trl in rlwatch.yaml",)
    assert cfg.provenance.server == ("server.url: http://127.0.0.1:8000 in rlwatch.yaml",)
    assert cfg.server_expected


def two_runs(parent: Path) -> None:
    """Two unrelated runs side by side, each with its own logs and checkpoints (as `cd /tmp; rlwatch` finds)."""
    for name in ("run-a", "run-b"):
        write(parent / name / "logs" / "train.log", "step 1\n")
        (parent / name / "output" / "checkpoint-5").mkdir(parents=True)
        write(parent / name / "output" / "checkpoint-5" / "trainer_state.json", '{"global_step": 5}')


def test_a_directory_of_several_runs_is_said_and_never_merged(tmp_path: Path, no_procs: str) -> None:
    two_runs(tmp_path)
    with pytest.raises(discovery.SeveralRuns) as said:
        discover(tmp_path, proc_root=no_procs)
    assert [p.name for p, _ in said.value.runs] == ["run-a", "run-b"]
    assert f"rlwatch {tmp_path / 'run-a'}" in str(said.value) and "2 separate runs" in str(said.value)
    # One run's own parts (logs/, checkpoints/) are never runs of their own.
    cfg = discover(tmp_path / "run-a", proc_root=no_procs)
    assert cfg.run_dir == str(tmp_path / "run-a")


def test_the_run_a_live_process_works_in_is_the_one_taken(tmp_path: Path) -> None:
    parent = tmp_path / "runs"
    two_runs(parent)
    proc = tmp_path / "proc"
    write(proc / "40" / "cmdline")
    (proc / "40" / "cmdline").write_bytes(b"python3\x00-m\x00sglang.launch_server\x00--port\x0030001\x00")
    (proc / "40" / "cwd").symlink_to(parent / "run-b")
    cfg = discover(parent, proc_root=str(proc))
    assert cfg.run_dir == str(parent / "run-b")
    # The choice is evidence every view shows first: which directory held several runs, and who works in this one.
    assert cfg.provenance.profile[0] == (
        f"{parent} holds 2 runs; this is the one a live process works in: pid 40 "
        "(python3 -m sglang.launch_server --port 30001)"
    )


def test_report_in_a_directory_of_several_runs_lists_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlwatch.cli import main

    two_runs(tmp_path)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"rlwatch: {tmp_path} holds 2 separate runs, not one:", err
    assert err[1].startswith(f"  rlwatch {tmp_path / 'run-a'}") and err[2].startswith(f"  rlwatch {tmp_path / 'run-b'}")


def test_loose_logs_beside_several_runs_do_not_merge_them_and_output_dirs_are_parts(
    tmp_path: Path, no_procs: str
) -> None:
    two_runs(tmp_path)
    write(tmp_path / "install.log", "pip install\n")  # `cd /tmp; rlwatch`: /tmp has loose logs of its own
    with pytest.raises(discovery.SeveralRuns):
        discover(tmp_path, proc_root=no_procs)
    one = tmp_path / "one"
    write(one / "train.log", "step 1\n")
    for out in ("model-a", "model-b"):  # two output_dirs of one run: parts of it, not runs
        (one / out / "checkpoint-5").mkdir(parents=True)
        write(one / out / "checkpoint-5" / "trainer_state.json", '{"global_step": 5}')
    assert discover(one, proc_root=no_procs).run_dir == str(one)


_WRITES_ITS_LOG = """
import sys, time
with open(sys.argv[1], "a", buffering=1) as log:
    for step in range(1, 100000):
        log.write(f"step {step}\\n")
        time.sleep(0.2)
"""


@pytest.mark.slow
def test_a_process_standing_in_a_dead_run_does_not_hide_the_live_one(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """A trainer writes run-b's log while a shell's `python3 -c` stands in run-a (dead, its log and checkpoint left):
    run-b is the run, by its writer, not "2 runs" because two directories have a live process in them."""
    parent = tmp_path / "runs"
    two_runs(parent)
    log = parent / "run-b" / "logs" / "train.log"
    idle = [sys.executable, "-c", "import time; time.sleep(120)"]
    for argv, cwd in (([sys.executable, "-c", _WRITES_ITS_LOG, str(log)], "run-b"), (idle, "run-a")):
        started.append(subprocess.Popen(argv, cwd=parent / cwd, start_new_session=True))
    wait_until(lambda: log.read_text().count("\n") >= 3, timeout=30.0)
    cfg = discover(parent)
    assert cfg.run_dir == str(parent / "run-b")
    assert cfg.provenance.profile[0].startswith(
        f"{parent} holds 2 runs; this is the one a live process works in: pid {started[0].pid} "
    ), cfg.provenance.profile
