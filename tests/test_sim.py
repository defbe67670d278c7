"""The simulator: every scenario played with real processes, its files checked against its own ledger.

The end-to-end tests start ``python -m rlwatch.sim`` at high speed, wait (condition + deadline, never a bare sleep)
for the incident to play out, count the lines of each log with regexes written here independently of the simulator's
own, and check that SIGINT leaves no process carrying the simulation's id behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlwatch.config.models import Config
from rlwatch.sim import SCENARIOS, run_sim
from rlwatch.sim import commands as sim_commands
from rlwatch.sim.client import CallError, call
from rlwatch.sim.common import Layout
from rlwatch.sim.formats import fancy_grid, tqdm_bar
from rlwatch.sim.ledger import kinds_of_line
from rlwatch.sim.lifeline import SupervisorHeartbeat
from rlwatch.sim.runconfig import rlwatch_config
from rlwatch.sim.saver import step_after
from rlwatch.sim.scenarios import ALL
from rlwatch.sim.supervisor import free_port
from rlwatch.sim.trainer import Trainer
from tests.simhost import Sim, alive, piece, settled, start, wait_until, with_id

ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Independent of rlwatch.sim.ledger.KINDS on purpose: the same lines, recognised by other means.
CHECK: dict[str, re.Pattern[str]] = {
    "connection_refused": re.compile(r"ConnectionRefusedError\(111|\[Connect call failed \("),
    "traceback": re.compile(r"^(\[rank\d+\]: )?Traceback \(most recent call last\):$"),
    "cuda_busy": re.compile(r"CUDA error: CUDA-capable device\(s\) is/are busy or unavailable$"),
    "step": re.compile(r"StatsLogger INFO: Epoch \d+/\d+ Step \d+/\d+ Train step \d+/\d+ done\.$|^\{'loss': "),
    "weight_update": re.compile(
        r"INFO: Loading weights from disk done in [\d.]+s\.|\] Update weights end\.$|\"POST /reset_prefix_cache/ HTTP"
    ),
    "checkpoint_saved": re.compile(r"Recover INFO: Saved recover checkpoint to /"),
    "server_ready": re.compile(
        r"ready to roll!$|Servers are all ready!$|SGLang server launched at: http|INFO: +Application startup complete"
        r"|Starting vLLM server on http"
    ),
    "restart": re.compile(r"Recover INFO: Recovering from StepInfo\(|LocalLauncher: .*run_id=[1-9]"),
    "emergency_brake": re.compile(r" WARNING EMERGENCY BRAKE: only [\d.]+ GB free"),
    "trial": re.compile(r" INFO trial \d+ done in [\d.]+ s"),
    "child_failed": re.compile(r"^torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError: $"),
    "timeout": re.compile(r"TimeoutError|[Tt]imed out after"),
}
# A start-up banner: the second and later ones in a file are the process starting again (a restart).
BANNER = re.compile(r"\] rlwatch-sim start: container boot \d+|LocalLauncher INFO: LocalLauncher: .*run_id=\d+")
ERRORS = {"connection_refused", "cuda_busy", "child_failed", "timeout"}


# --------------------------------------------------------------------------------------------------------- helpers
def lines(path: Path) -> list[str]:
    return [ANSI.sub("", line) for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]


def count(path: Path, kind: str) -> int:
    rx = CHECK[kind]
    text = lines(path)
    if kind in ERRORS:  # a traceback's quoted `raise ...` source line names an error without being one
        text = [line for line in text if not line.lstrip().startswith("raise ")]
    n = sum(1 for line in text if rx.search(line))
    if kind == "restart":
        n += max(0, sum(1 for line in text if BANNER.search(line)) - 1)
    return n


def check_ledger_against_files(run_dir: Path, data: dict[str, Any]) -> None:
    """Every count the ledger claims is in the file, and no checked kind appears in a file the ledger did not say."""
    assert data["files"], "the simulation wrote no counted line at all"
    for rel, kinds in data["files"].items():
        path = run_dir / rel
        for kind in CHECK:
            assert count(path, kind) == kinds.get(kind, 0), f"{rel}: {kind}"


def rule_matches(rules: list[dict[str, Any]], sim_id: str) -> dict[str, list[int]]:
    """Role → pids of live processes each rule's regex selects (over the command line joined by spaces)."""
    procs = with_id(sim_id)
    out: dict[str, list[int]] = {}
    for rule in rules:
        rx = re.compile(rule["cmdline_regex"])
        out.setdefault(rule["role"], []).extend(p.pid for p in procs if rx.search(" ".join(p.cmdline())))
    return out


# --------------------------------------------------------------------------------------------------------- units
def test_scenarios_are_listed_with_descriptions() -> None:
    assert set(SCENARIOS) == {
        "healthy",
        "server-crash",
        "restart-loop",
        "memory-leak",
        "gpu-zombie",
        "startup-crash",
        "trl-colocated",
        "nccl-timeout",
        "gpu-xid",
        "shm-small",
        "nan-loss",
        "kernel-oom",
        "hang",
    }
    assert all(len(text) > 20 for text in SCENARIOS.values())


@pytest.mark.parametrize("name", sorted(n for n, scenario in ALL.items() if scenario.rlwatch_yaml))
def test_rlwatch_yaml_is_valid_and_its_regexes_select_only_their_piece(tmp_path: Path, name: str) -> None:
    layout = Layout.of(tmp_path)
    sim_id, other = "11111111-2222-3333-4444-555555555555", "99999999-2222-3333-4444-555555555555"
    data = rlwatch_config(layout, ALL[name], sim_id, port=31234, speed=20.0, seed=1)
    cfg = Config.model_validate(data)
    assert cfg.simulated and cfg.gpu.backend == "simulated"
    argvs = {
        "launcher": sim_commands.launcher(sim_id, tmp_path, 20, 1, "areal"),
        "trainer": sim_commands.trainer(sim_id, tmp_path, 20, 1, "areal"),
        "trl_trainer": sim_commands.trainer(sim_id, tmp_path, 20, 1, "trl"),
        "server": sim_commands.server(sim_id, tmp_path, 20, 1, "areal", port=31234),
        "worker-0": sim_commands.worker(sim_id, tmp_path, 20, 1, 0),
        "worker-1": sim_commands.worker(sim_id, tmp_path, 20, 1, 1),
        "worker-10": sim_commands.worker(sim_id, tmp_path, 20, 1, 10),
        "holder": sim_commands.holder(sim_id, tmp_path, 20, 1, 4242),
        "entrypoint": sim_commands.entrypoint(sim_id, tmp_path, 20, 1, 3),
    }
    for rule in cfg.processes:
        assert rule.cmdline_regex is not None
        rx = re.compile(rule.cmdline_regex)
        hits = [key for key, argv in argvs.items() if rx.search(" ".join(argv))]
        if rule.role == "watchdog":
            assert rx.search(f"/usr/bin/python3 -m rlwatch watch {tmp_path}")
            assert not hits
            continue
        assert len(hits) == 1, (rule.role, hits)
        if rule.role != "container":  # the platform starts the container, not rlwatch
            assert rule.command is not None and rx.search(" ".join(rule.command))
        assert not rx.search(" ".join(argvs[hits[0]]).replace(sim_id, other))


def test_tqdm_bar_reads_like_the_real_capture() -> None:
    # tests/real/trl-grpo-colocated/run/train.log
    assert tqdm_bar(0, 30, 0.0) == "  0%|          | 0/30 [00:00<?, ?it/s]"
    assert tqdm_bar(1, 30, 7.54) == "  3%|▎         | 1/30 [00:07<03:38,  7.54s/it]"
    assert tqdm_bar(4, 30, 7.6).startswith(" 13%|█▎        | 4/30 [00:07<")
    assert tqdm_bar(30, 30, 3.48) == "100%|██████████| 30/30 [00:03<00:00,  8.62it/s]"


def test_classify_counts_each_kind_once_per_line() -> None:
    line = (
        '\x1b[31m(AReaL)\x1b[0m ERROR: Workflow execution failed: ConnectionRefusedError(111, "Connect call failed '
        "('127.0.0.1', 1)\")"
    )
    assert kinds_of_line(line) == {"connection_refused"}
    assert kinds_of_line("[rank0]: Traceback (most recent call last):") == {"traceback"}
    assert kinds_of_line("{'train_runtime': 12.0, 'train_loss': 0.1, 'epoch': 1.0}") == set()
    assert kinds_of_line("{'loss': 0.01, 'reward': 0.5}") == {"step"}
    assert kinds_of_line("2025-01-01 00:00:00,000 worker-0 WARNING Emergency-Brake: refusing") == {"emergency_brake"}


def test_fancy_grid_is_column_major_and_aligned() -> None:
    table = fancy_grid([(f"k{i}", float(i)) for i in range(6)], col=4).split("\n")
    assert table[0].startswith("╒") and table[-1].startswith("╘")
    assert len({len(row) for row in table}) == 1  # every row the same width
    assert table[1].split("│")[1].strip() == "k0" and table[1].split("│")[3].strip() == "k2"  # column-major
    assert table[3].split("│")[1].strip() == "k1"


def test_next_step_rolls_over_at_the_end_of_an_epoch() -> None:
    assert step_after({"epoch": 1, "epoch_step": 934, "global_step": 1869, "steps_per_epoch": 935}) == (2, 0, 1870)
    assert step_after({"epoch": 0, "epoch_step": 5, "global_step": 5, "steps_per_epoch": 935}) == (0, 6, 6)


def test_the_seed_makes_the_random_parts_reproducible(tmp_path: Path) -> None:
    spec = {**ALL["healthy"].spec, "port": 1}
    layout = Layout.of(tmp_path)

    def rows(seed: int) -> list[tuple[str, float]]:
        trainer = Trainer(layout, spec, speed=1.0, seed=seed)
        return [row for g in range(5) for row in trainer.stats(g, trainer.weight_seconds(g))]

    assert rows(3) == rows(3)
    assert rows(3) != rows(4)


def test_a_foreign_non_empty_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    assert run_sim("healthy", tmp_path, speed=20) == 2
    assert (tmp_path / "precious.txt").read_text() == "keep me"
    assert "not a simulator directory" in capsys.readouterr().err
    assert run_sim("no-such-scenario", tmp_path / "new") == 2


# --------------------------------------------------------------------------------------------------------- scenarios
@pytest.mark.slow
def test_healthy_trains_checkpoints_and_finishes(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "healthy", 30)
    data = sim.wait(settled)
    check_ledger_against_files(sim.dir, data)
    layout = Layout.of(sim.dir)
    assert data["totals"]["step"] == data["facts"]["total_steps"] == 60
    ckpts = sorted(p.name for p in layout.ckpt_dir.iterdir() if p.name.startswith("epoch"))
    assert len(ckpts) == data["totals"]["checkpoint_saved"] == 12
    assert json.loads(layout.step_info.read_text()) == {
        "epoch": 1,
        "epoch_step": 29,
        "global_step": 59,
        "steps_per_epoch": 30,
    }
    assert "Training completes!" in lines(layout.trainer_log)[-1]
    cfg = sim.rlwatch_yaml()
    Config.model_validate(cfg)
    matches = rule_matches(cfg["processes"], sim.sim_id)
    assert {role: len(pids) for role, pids in matches.items()} == {"launcher": 1, "trainer": 1, "server": 1}
    assert call(cfg["server"]["url"] + "/health", timeout=5) is None  # 200 with an empty body, as SGLang answers
    gpu = wait_until(lambda: _gpu_holders(sim.dir) >= {*matches["server"], *matches["trainer"]}, 5)
    assert gpu
    sim.stop()


def _gpu_holders(run_dir: Path) -> set[int]:
    try:
        state = json.loads((run_dir / ".sim" / "gpu_state.json").read_text())
    except (OSError, ValueError):
        return set()
    return {p["pid"] for p in state["gpus"][0]["processes"]}


@pytest.mark.slow
def test_server_crash_storms_then_a_rerun_resumes(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "server-crash", 25)
    data = sim.wait(settled)
    check_ledger_against_files(sim.dir, data)
    layout = Layout.of(sim.dir)
    assert piece(data, "server")["state"] == "died" and not piece(data, "server")["alive"]
    assert piece(data, "trainer")["state"] == "failed" and piece(data, "launcher")["alive"]
    files = data["files"]
    assert files[layout.rel(layout.trainer_log)]["connection_refused"] >= 40
    assert files[layout.rel(layout.wandb_log)]["connection_refused"] >= 40
    assert files[layout.rel(layout.trainer_log)]["child_failed"] == 1
    with pytest.raises(CallError) as refused:
        call(f"http://127.0.0.1:{data['facts']['server_port']}/health", timeout=5)
    assert refused.value.kind == "refused"
    recover = data["facts"]["recover_global_step"]
    assert recover is not None and recover <= data["facts"]["trainer_last_step"]

    rerun = sim.run_resume()
    data = sim.wait(lambda d: settled(d) and piece(d, "trainer")["state"] == "finished")
    check_ledger_against_files(sim.dir, data)
    text = lines(layout.trainer_log)
    at = next(i for i, line in enumerate(text) if "Recovering from StepInfo(" in line)
    assert f"global_step={recover}," in text[at]
    first = next(line for line in text[at:] if CHECK["step"].search(line))
    assert f"Train step {recover + 2}/60 done." in first  # AReaL's next step, 1-based in the log
    sim.stop()
    assert rerun.wait(timeout=10) is not None


@pytest.mark.slow
def test_restart_loop_container_keeps_failing_its_clone(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "restart-loop", 40)
    data = sim.wait(lambda d: d["facts"]["loops"] >= 3, timeout=40)
    assert data["phase"] == "running"  # a restart loop never settles
    layout = Layout.of(sim.dir)
    boots = data["facts"]["boots"]
    container = lines(layout.container_log)
    assert count(layout.container_log, "restart") >= 2
    fatal = sum(1 for line in container if line.startswith("fatal: destination path 'repo' already exists"))
    assert fatal >= boots - 2 >= 2  # every boot after the first, the newest possibly still being written
    assert data["facts"]["trainer_last_step"] == 56  # "crash at step 57": 57 steps completed, 0-based 56
    assert count(layout.trainer_log, "step") == 57
    assert not piece(data, "trainer")["alive"]  # killed with the container, without a word
    assert not any("Traceback" in line for line in lines(layout.trainer_log))
    sim.stop()


@pytest.mark.slow
def test_memory_leak_workers_really_grow_and_brake(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "memory-leak", 25)
    data = sim.wait(settled)
    check_ledger_against_files(sim.dir, data)
    for i in range(2):
        rel = f"logs/worker-{i}.log"
        assert data["files"][rel]["emergency_brake"] == 12
        assert data["files"][rel]["trial"] == 10
        proc = psutil.Process(piece(data, f"worker-{i}")["pid"])
        assert proc.memory_info().rss > 150 * 1024 * 1024  # the leak is real memory, not a number in a log
    cfg = sim.rlwatch_yaml()
    assert any(r["role"] == "watchdog" and r["expected"] for r in cfg["processes"])
    assert {role: len(p) for role, p in rule_matches(cfg["processes"], sim.sim_id).items()} == {
        "worker": 2,
        "watchdog": 0,
    }
    sim.stop()


@pytest.mark.slow
def test_gpu_zombie_strays_block_the_server_until_killed(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "gpu-zombie", 25)
    data = sim.wait(settled)
    check_ledger_against_files(sim.dir, data)
    layout = Layout.of(sim.dir)
    assert data["files"][layout.rel(layout.server_log)]["cuda_busy"] == 3
    strays = data["facts"]["stray_pids"]
    assert len(strays) == 2
    device = str(layout.device)
    for pid in strays:
        proc = psutil.Process(pid)
        assert proc.ppid() != sim.proc.pid  # orphaned: nothing in the run is its parent
        assert any(os.readlink(f"/proc/{pid}/fd/{fd}") == device for fd in os.listdir(f"/proc/{pid}/fd"))
    wait_until(lambda: set(strays) <= _gpu_holders(sim.dir), 5)  # the simulated GPU lists them too

    for pid in strays:
        psutil.Process(pid).terminate()
    wait_until(lambda: not any(psutil.pid_exists(pid) and _alive(pid) for pid in strays), 10)
    rerun = sim.run_resume()
    sim.wait(lambda d: (d["facts"]["trainer_last_step"] or 0) >= 2)  # the server came up, training goes on
    assert count(layout.server_log, "server_ready") >= 2
    sim.stop()
    assert rerun.wait(timeout=10) is not None


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.slow
def test_startup_crash_same_traceback_each_retry_and_a_hung_server(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "startup-crash", 25)
    data = sim.wait(settled)
    check_ledger_against_files(sim.dir, data)
    layout = Layout.of(sim.dir)
    text = lines(layout.trl_trainer_log)
    finals = [
        i for i, line in enumerate(text) if line == "AttributeError: 'Namespace' object has no attribute 'model_id'"
    ]
    assert len(finals) == data["files"]["logs/train.log"]["traceback"] == 3
    where = re.match(r'  File "(.+)", line (\d+), in on_save$', text[finals[0] - 2])
    assert where is not None and where.group(1) == str(layout.train_script)
    assert "model_id" in layout.train_script.read_text().splitlines()[int(where.group(2)) - 1]
    assert sum(1 for line in text if line.startswith("+ accelerate launch ")) == 3  # the wrapper's retries
    assert (layout.trl_output / "checkpoint-2" / "trainer_state.json").is_file()
    server = piece(data, "server")
    assert server["state"] == "hung" and server["alive"]
    with pytest.raises(CallError) as hung:
        call(f"http://127.0.0.1:{data['facts']['server_port']}/health/", timeout=1)
    assert hung.value.kind == "timeout"  # the process lives, the port accepts, nothing answers
    sim.stop()  # the hung server ignores SIGTERM: only the KILL after the grace period ends it


@pytest.mark.slow
def test_children_end_when_the_supervisor_dies(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "gpu-zombie", 1)
    sim.wait(
        lambda d: len(d["facts"]["stray_pids"]) == 2 and any(p["name"] == "launcher" for p in d["facts"]["pieces"])
    )
    assert len(with_id(sim.sim_id)) >= 3
    sim.proc.kill()  # no cleanup at all: the lifelines must do it
    sim.proc.wait(timeout=10)
    wait_until(lambda: not with_id(sim.sim_id), 15)


@pytest.mark.slow
def test_processes_tagged_only_by_environment_end_when_the_supervisor_dies(tmp_path: Path, sims: list[Sim]) -> None:
    """torchrun and its ranks carry the sim id in their environment only; their lifelines still end them."""
    sim = start(sims, tmp_path, "nccl-timeout", 1)
    data = sim.wait(alive("torchrun", "rank-0", "rank-1"))
    pids = {piece(data, name)["pid"] for name in ("torchrun", "rank-0", "rank-1")}
    assert pids <= {p.pid for p in with_id(sim.sim_id)}
    assert not any(sim.sim_id in psutil.Process(pid).cmdline() for pid in pids)
    sim.proc.kill()  # no cleanup at all: the lifelines must do it
    sim.proc.wait(timeout=10)
    wait_until(lambda: not with_id(sim.sim_id), 15)


@pytest.mark.slow
def test_server_hang_after_accepts_but_never_answers_and_follows_its_lifeline(tmp_path: Path) -> None:
    layout = Layout.of(tmp_path)
    layout.device.parent.mkdir(parents=True)
    layout.device.touch()
    sim_id = str(uuid.uuid4())
    heartbeat = SupervisorHeartbeat(layout.alive, sim_id)
    heartbeat.start()
    port = free_port()
    argv = [*sim_commands.server(sim_id, tmp_path, 2, 1, "trl", port=port), "--hang-after", "2"]
    with open(tmp_path / "server.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/health/"

    def answers() -> bool:
        try:
            return bool(call(url, timeout=1) == {"status": "ok"})
        except CallError:
            return False

    def hangs() -> bool:
        try:
            call(url, timeout=0.3)
        except CallError as exc:
            return exc.kind == "timeout"
        return False

    try:
        wait_until(answers, 15)
        access = r'^INFO: {5}127\.0\.0\.1:\d+ - "GET /health/ HTTP/1\.1" 200 OK$'
        # uvicorn's own format; the server writes it after the response, so it may land a moment after the answer
        assert wait_until(lambda: any(re.match(access, line) for line in lines(tmp_path / "server.log")), 10)
        wait_until(hangs, 10)
        assert proc.poll() is None  # alive, listening, silent
        heartbeat.stop()  # the supervisor is gone: the piece ends itself
        wait_until(lambda: proc.poll() is not None, 10)
    finally:
        heartbeat.stop()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_trl_colocated_is_python3_train_py_in_its_directory(tmp_path: Path, sims: list[Sim]) -> None:
    """The process is `python3 train.py` (nothing names TRL or the simulator), works in the run directory with its
    output in train.log there, writes TRL's shapes, saves every 5 steps and exits 0; no rlwatch.yaml, no server."""
    sim = start(sims, tmp_path, "trl-colocated", 8)
    layout = Layout.of(sim.dir)
    data = sim.wait(lambda d: (d["facts"]["trainer_last_step"] or 0) >= 1)
    proc = psutil.Process(piece(data, "trainer")["pid"])
    assert proc.cmdline() == ["python3", "train.py"]
    assert proc.cwd() == str(sim.dir)
    assert os.readlink(f"/proc/{proc.pid}/fd/1") == str(layout.user_log)
    assert not (sim.dir / "rlwatch.yaml").exists() and not (sim.dir / "config.yaml").exists()
    assert "use_vllm=False" in layout.user_script.read_text()
    data = sim.wait(lambda d: settled(d) and not piece(d, "trainer")["alive"], timeout=60)  # it exits when done
    check_ledger_against_files(sim.dir, data)
    assert data["totals"]["step"] == 30
    raw = layout.user_log.read_bytes().decode("utf-8")  # with its \r, which read_text would turn into \n
    assert "\r  3%|▎         | 1/30 [" in raw and "\r100%|██████████| 30/30 [" in raw
    assert raw.count("\rWriting model shards: 100%") == 6
    assert re.search(r"\r {47}\r\{'train_runtime': '[\d.]+', ", raw)  # tqdm clears its bar for the summary
    ckpts = sorted(int(p.name.split("-")[1]) for p in (sim.dir / "output").glob("checkpoint-*"))
    assert ckpts == [5, 10, 15, 20, 25, 30]
    state = json.loads((sim.dir / "output" / "checkpoint-30" / "trainer_state.json").read_text())
    assert state["global_step"] == 30 and len(state["log_history"]) == 30
    assert "- TRL: 1.16.0" in (sim.dir / "output" / "README.md").read_text()
    assert data["facts"]["server_url"] is None
    sim.stop()


@pytest.mark.slow
def test_nccl_timeout_torchrun_tree_and_its_report(tmp_path: Path, sims: list[Sim]) -> None:
    """torchrun with two `python -u train.py` ranks writing torchrun.log; rank 0 times out, aborts with SIGABRT,
    torchrun stops rank 1 with SIGTERM and reports rank 0 as the root cause, exiting 1."""
    sim = start(sims, tmp_path, "nccl-timeout", 8)
    layout = Layout.of(sim.dir)
    data = sim.wait(alive("torchrun", "rank-0", "rank-1"))
    agent = psutil.Process(piece(data, "torchrun")["pid"])
    argv = agent.cmdline()
    assert argv[1].endswith("/torchrun") and argv[2:] == ["--nproc-per-node", "2", "train.py"]
    ranks = {int(p.environ()["RANK"]): p for p in agent.children()}
    assert sorted(ranks) == [0, 1] and all(p.cmdline()[1:] == ["-u", "train.py"] for p in ranks.values())
    assert all(p.cwd() == str(sim.dir) for p in [agent, *ranks.values()])
    # torchrun says it exited just before it does: wait (with a deadline) until its processes are gone too.
    data = sim.wait(lambda d: settled(d) and not any(p["alive"] for p in d["facts"]["pieces"]), timeout=60)
    check_ledger_against_files(sim.dir, data)
    text = lines(layout.torchrun_log)
    assert (
        sum("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=13, OpType=ALLREDUCE" in t for t in text)
        == 3
    )
    assert text.count("terminate called after throwing an instance of 'c10::DistBackendError'") == 1
    assert any(t.endswith("closing signal SIGTERM") and str(ranks[1].pid) in t for t in text)
    at = text.index("Root Cause (first observed failure):")
    assert text[at + 4] == "  rank      : 0 (local_rank: 0)"
    assert text[at + 5] == f"  exitcode  : -6 (pid: {ranks[0].pid})"
    assert f"  exitcode  : -15 (pid: {ranks[1].pid})" in text[:at]
    assert piece(data, "rank-0")["state"] == "aborted"
    assert not any(p["alive"] for p in data["facts"]["pieces"])
    assert not list(sim.dir.glob("core*"))
    sim.stop()
