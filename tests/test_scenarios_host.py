"""The machine's faults and broken learning, simulated with real processes and files, judged by the real
`rlwatch report --json` in another process (issue #28): a GPU that falls off the bus, a 64 MiB /dev/shm, a loss that
turns NaN, a rank the kernel's OOM killer kills.

Each scenario's ledger says what the simulator did (which pid died, when); the report must say it, tied to the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlwatch.sim.common import Layout
from tests.simhost import Sim, piece, settled, start, wait_until
from tests.simhost import run_report as report

pytestmark = pytest.mark.slow


def findings(rep: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in rep["findings"] if f["code"] == code]


def codes(rep: dict[str, Any], *severities: str) -> set[str]:
    return {f["code"] for f in rep["findings"] if not severities or f["severity"] in severities}


def test_a_gpu_fallen_off_the_bus_is_a_hardware_fault_tied_to_the_trainer(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "gpu-xid", 20)
    ledger = sim.wait(settled, timeout=60)
    # The trainer's failure settles the run; the simulated GPU says it is lost on its next write of its state.
    state = Layout.of(sim.dir).gpu_state
    wait_until(lambda: state.exists() and "GPU is lost" in state.read_text(), 30)
    rc, rep = report(sim.dir)
    assert rc == 1
    trainer = piece(ledger, "trainer")
    xid = findings(rep, "xid_79")
    assert len(xid) == 1 and xid[0]["severity"] == "critical", rep["findings"]
    # a report made after the fact never saw the trainer alive: the Xid's own pid, and the logs stopping with it
    assert f"It hit pid {trainer['pid']} (python3); the run's last step was logged at" in xid[0]["message"]
    assert ", 3 times" not in xid[0]["message"]  # the driver's two lines and NVML's event are one fault
    assert "GPU 0 (PCI 0000:3b:00)" in xid[0]["message"]  # the kernel's PCI address, matched to NVML's index
    assert "drain this node" in xid[0]["message"]
    lost = findings(rep, "gpu_lost")
    assert lost and lost[0]["severity"] == "critical"
    assert rep["gpus"][0]["health"]["lost"] == "GPU is lost"
    assert rep["kernel"]["source"] == "files" and rep["kernel"]["files"] == [str(sim.dir / "dmesg.log")]
    # the trainer's own CUDA error is still its last exception, and the kernel log is not read as a training log
    assert any("unspecified launch failure" in f["message"] for f in rep["findings"])
    assert not any(path.endswith("dmesg.log") for e in rep["events"].values() for path in e["files"])
    sim.stop()


def test_a_small_dev_shm_warns_before_the_bus_error_and_is_critical_after(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "shm-small", 10)
    sim.wait(lambda d: (d["facts"]["trainer_last_step"] or -1) >= 1, timeout=60)
    _, before = report(sim.dir)
    assert before["limits"]["shm_total_bytes"] == 64 * 1024 * 1024 and before["limits"]["shm_simulated"] is True
    warn = findings(before, "shm_small")
    if not codes(before, "critical") & {"shm_exhausted"}:  # the bus error may already have come on a slow machine
        assert warn and warn[0]["severity"] == "warning", before["findings"]
        assert "sglang" in warn[0]["message"] and "--shm-size" in warn[0]["message"]
    sim.wait(settled, timeout=60)
    rc, after = report(sim.dir)
    assert rc == 1
    crit = findings(after, "shm_exhausted")
    assert crit and crit[0]["severity"] == "critical", after["findings"]
    assert "insufficient shared memory" in crit[0]["message"] or "Bus error" in crit[0]["message"]
    assert "shm_small" not in codes(after)  # the critical finding says it all
    sim.stop()


def test_a_loss_gone_nan_is_critical_with_the_checkpoint_before_it(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "nan-loss", 20)
    sim.wait(settled, timeout=60)
    rc, rep = report(sim.dir)
    assert rc == 1
    nan = [f for f in findings(rep, "learning_nonfinite") if f["message"].startswith("Loss")]
    assert nan and nan[0]["severity"] == "critical", rep["findings"]
    assert "since step 12" in nan[0]["message"] and "at step 10" in nan[0]["message"]
    assert rep["learning"]["series"]["loss"][-1]["value"] == "nan"
    assert rep["training"]["finished"] is True  # the run went on to the end: nothing crashed
    sim.stop()


def test_a_rank_killed_by_the_oom_killer_is_named_as_the_root_cause(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "kernel-oom", 20)
    ledger = sim.wait(settled, timeout=60)
    rc, rep = report(sim.dir)
    assert rc == 1
    rank1 = piece(ledger, "rank-1")
    oom = findings(rep, "kernel_oom_kill")
    assert oom and oom[0]["severity"] == "critical", rep["findings"]
    message = oom[0]["message"]
    assert message.startswith(f"Rank 1 (pid {rank1['pid']}) was killed by the kernel OOM killer at ")
    assert "RSS 62.8 GB" in message and "memory cgroup /kubepods/" in message
    sim.stop()
