"""Every simulated incident, judged by the real `rlwatch report --json` in another process.

The simulator keeps its own ledger of every line it wrote, per file and event kind; the report must count exactly the
same, and must name the incident in its findings. This is the end-to-end contract of the headless core.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlwatch.sim.scenarios import ALL
from tests.simhost import Sim, alive, piece, settled, start
from tests.simhost import run_report as report

pytestmark = pytest.mark.slow


def codes(rep: dict[str, Any], *severities: str) -> set[str]:
    return {f["code"] for f in rep["findings"] if not severities or f["severity"] in severities}


def assert_counts_match_ledger(run_dir: Path, ledger: dict[str, Any], rep: dict[str, Any]) -> None:
    checked = 0
    for rel, kinds in ledger["files"].items():
        path = str((run_dir / rel).resolve())
        for kind, expected in kinds.items():
            if kind not in rep["events"]:
                continue  # a ledger-only tally (e.g. trials), not an event kind
            got = rep["events"][kind]["files"].get(path, 0)
            assert got == expected, f"{kind} in {rel}: report counted {got}, the simulator wrote {expected}"
            checked += 1
    assert checked > 0
    for kind, total in ledger["totals"].items():
        if kind in rep["events"]:
            assert rep["events"][kind]["count"] == total, kind


def test_healthy_run_reports_no_problem(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "healthy", 40)
    ledger = sim.wait(settled, timeout=60)
    rc, rep = report(sim.dir)
    assert_counts_match_ledger(sim.dir, ledger, rep)
    assert rc == 0, rep["findings"]
    assert not codes(rep, "critical", "warning")
    assert rep["server"]["up"] is True
    assert rep["training"]["last_step"] == rep["training"]["total_steps"] == ledger["facts"]["total_steps"]
    assert rep["checkpoint"]["latest"]["global_step"] == ledger["facts"]["last_checkpoint_global_step"]
    assert rep["simulated"] is True
    sim.stop()


def test_server_crash_is_named_with_its_evidence_and_resume_point(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "server-crash", 20)
    ledger = sim.wait(settled)
    rc, rep = report(sim.dir)
    assert rc == 1
    assert_counts_match_ledger(sim.dir, ledger, rep)
    assert "server_down" in codes(rep, "critical")
    assert "crash_repeating" not in codes(rep)  # failed rollouts are the server's consequence, not a crash
    server = rep["server"]
    assert server["up"] is False and server["url"] == ledger["facts"]["server_url"]
    assert server["down_since"] == rep["events"]["connection_refused"]["first"]
    refused = rep["events"]["connection_refused"]["files"]
    assert len(refused) == 2 and len(set(refused.values())) == 1  # trainer.log and wandb/output.log alike
    rec = rep["recover"]
    assert rec["global_step"] == ledger["facts"]["recover_global_step"]
    assert rec["resume_global_step"] == rec["global_step"] + 1
    assert rep["checkpoint"]["latest"]["global_step"] == ledger["facts"]["last_checkpoint_global_step"]
    texts = [e["text"] for e in rep["timeline"]]
    assert texts.index(next(t for t in texts if t.startswith("last checkpoint"))) < texts.index(
        next(t for t in texts if t.startswith("connection-refused"))
    )
    sim.stop()


def test_restart_loop_is_called_a_restart_loop(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "restart-loop", 40)
    ledger = sim.wait(lambda d: d["facts"]["loops"] >= 4, timeout=60)
    rc, rep = report(sim.dir)
    assert rc == 1
    assert "restart_loop" in codes(rep, "critical")
    message = next(f["message"] for f in rep["findings"] if f["code"] == "restart_loop")
    assert "Restart loop" in message and "not a crash" in message
    assert rep["training"]["last_step"] == ledger["facts"]["trainer_last_step"] + 1 == 57
    sim.stop()


def test_memory_leak_brake_and_missing_watchdog(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "memory-leak", 20)
    ledger = sim.wait(settled, timeout=60)
    rc, rep = report(sim.dir)
    assert rc == 1
    assert_counts_match_ledger(sim.dir, ledger, rep)
    found = codes(rep, "critical")
    assert {"expected_missing", "brake_no_relief"} <= found
    brake = rep["events"]["emergency_brake"]
    assert brake["streak"] >= 10
    workers = [p for p in rep["processes"] if p["role"] == "worker" and p["alive"]]
    assert len(workers) == 2 and all(p["rss_bytes"] > 100 * 1024**2 for p in workers)
    sim.stop()


def test_gpu_zombies_are_listed_as_strays_with_device_busy(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "gpu-zombie", 20)
    ledger = sim.wait(settled, timeout=60)
    rc, rep = report(sim.dir)
    assert rc == 1
    assert_counts_match_ledger(sim.dir, ledger, rep)
    assert {"gpu_strays", "device_busy"} <= codes(rep, "critical")
    assert {z["pid"] for z in rep["zombies"]} == set(ledger["facts"]["stray_pids"])
    assert all(z["reason"] for z in rep["zombies"])
    assert rep["gpus"] and rep["gpus"][0]["compute_mode"] == "EXCLUSIVE_PROCESS"
    # The server's crashes on the busy device are the strays' doing, said with them: not a crash to fix in code.
    assert "crash_repeating" not in {f["code"] for f in rep["findings"]}
    text = subprocess.run(
        [sys.executable, "-m", "rlwatch", "report", str(sim.dir)], capture_output=True, text=True, check=False
    ).stdout
    steps = text.split("Next steps:", 1)[1]
    assert "rlwatch act kill-zombies" in steps
    assert "Fix the exception" not in steps and "Find what holds the GPU" not in steps
    sim.stop()


def test_startup_crash_puts_the_exception_first(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "startup-crash", 25)
    ledger = sim.wait(settled, timeout=60)
    rc, rep = report(sim.dir)
    assert rc == 1
    assert_counts_match_ledger(sim.dir, ledger, rep)
    crash = next(f for f in rep["findings"] if f["code"] == "crash_repeating")
    assert crash["severity"] == "critical"
    assert "AttributeError: 'Namespace' object has no attribute 'model_id'" in crash["message"]
    assert "train_grpo.py:" in crash["message"] and "3 times" in crash["message"]
    sigs = {i["signature"] for i in rep["incidents"] if i["title"].startswith("AttributeError")}
    assert len(sigs) == 1
    sim.stop()


def test_colocated_trl_run_started_by_hand_is_found_by_evidence_and_healthy(tmp_path: Path, sims: list[Sim]) -> None:
    """`python3 train.py > train.log` in its directory, no rlwatch.yaml, no server: TRL from what it writes, the
    live run from the log it holds open, no server expected, and healthy when it has finished."""
    sim = start(sims, tmp_path, "trl-colocated", 4)
    assert not (sim.dir / "rlwatch.yaml").exists()
    running = sim.wait(lambda d: (d["facts"]["trainer_last_step"] or 0) >= 2, timeout=60)
    trainer = piece(running, "trainer")["pid"]
    _, rep = report(sim.dir)
    assert rep["profile"] == "trl" and rep["profile_evidence"]
    assert not any("rlwatch.yaml" in why for why in rep["profile_evidence"])
    live = rep["live_run"]
    assert live["identified"] is True, live
    evidence = {m["pid"]: m["evidence"] for m in live["members"]}
    assert evidence.get(trainer, "").startswith("writes train.log"), evidence
    assert not rep["zombies"]

    ledger = sim.wait(settled, timeout=90)
    rc, rep = report(sim.dir)
    assert rc == 0, rep["findings"]
    assert_counts_match_ledger(sim.dir, ledger, rep)
    assert not codes(rep, "critical", "warning")
    assert rep["profile"] == "trl"
    assert rep["server"]["expected"] is False and rep["server"]["url"] is None
    assert rep["training"]["last_step"] == rep["training"]["total_steps"] == ledger["facts"]["total_steps"] == 30
    assert rep["checkpoint"]["latest"]["global_step"] == ledger["facts"]["last_checkpoint_global_step"] == 30
    sim.stop()


def test_nccl_timeout_under_torchrun_names_rank_0_as_root_cause(tmp_path: Path, sims: list[Sim]) -> None:
    """torchrun, rank 1 hung, rank 0's watchdog aborts: torchrun's report read whole comes first (rank 0, SIGABRT,
    after the ALLREDUCE timeout), the timeout torch printed three times is one incident, and the ChildFailedError
    line is not a finding of its own."""
    sim = start(sims, tmp_path, "nccl-timeout", 4)
    assert not (sim.dir / "rlwatch.yaml").exists()
    running = sim.wait(alive("torchrun", "rank-0", "rank-1"), timeout=30)
    pids = {piece(running, name)["pid"] for name in ("torchrun", "rank-0", "rank-1")}
    _, rep = report(sim.dir)
    members = {m["pid"] for m in rep["live_run"]["members"]}
    assert rep["live_run"]["identified"] is True and pids <= members, rep["live_run"]

    ledger = sim.wait(settled, timeout=90)
    rc, rep = report(sim.dir)
    assert rc == 1
    assert_counts_match_ledger(sim.dir, ledger, rep)
    assert ledger["totals"]["nccl_timeout"] == 3
    first = rep["findings"][0]
    assert first["code"] == "torchrun_failed" and first["severity"] == "critical", rep["findings"]
    seq = ALL["nccl-timeout"].spec["ddp_steps"] + 1
    for words in ("rank 0 (exit code -6, SIGABRT", f"ALLREDUCE SeqNum={seq}", "rank 1 (exit code -15, SIGTERM"):
        assert words in first["message"], first["message"]
    assert first["message"].index("rank 0") < first["message"].index("Stopped after it: rank 1")
    timeouts = [i for i in rep["incidents"] if i["kind"] == "nccl_timeout"]
    assert len(timeouts) == 1 and timeouts[0]["count"] == 3
    assert "child_failed" not in codes(rep)
    assert rep["server"]["expected"] is False
    sim.stop()
