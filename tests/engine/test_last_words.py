"""A run whose processes all died is judged on its logs' last words, never on an ending read before them.

torchrun writes its ChildFailedError report as its last act. The engine reads a growing log's ending at most every
few seconds; the sample that saw every process gone used the ending read before the report, and for that while the
run was "stopped" (a clean end, a warning) before it was "crashed" (issue 34). In process: a /proc laid out by hand,
a real log, a clock that moves only when told.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import Config
from rlwatch.engine.engine import Engine
from rlwatch.sim.formats import torch_pylog, torchrun_child_failed

BTIME = 1_763_700_000
TICKS = 1000  # the start time of the fake processes, in clock ticks after boot


def _proc(root: Path, pid: int, cmdline: bytes, cwd: Path) -> None:
    """One /proc/<pid> as the kernel lays it out, for the parts rlwatch reads."""
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    rest = ["S", "1", "0", "0", *["0"] * 15, str(TICKS), "0", "0"]
    (d / "cwd").symlink_to(cwd)
    (d / "stat").write_text(f"{pid} (torchrun) {' '.join(rest)}\n")
    (d / "cmdline").write_bytes(cmdline)
    (d / "status").write_text("Name:\ttorchrun\nUid:\t0\t0\t0\t0\n")
    (d / "statm").write_text("1000 250 0 0 0 0 0\n")


def _root(root: Path) -> Path:
    (root / "1").mkdir(parents=True)
    (root / "stat").write_text(f"cpu 0 0 0 0\nbtime {BTIME}\n")
    (root / "uptime").write_text("5000.00 9000.00\n")
    (root / "1" / "stat").write_text("1 (init) S 0 0 0 " + " ".join(["0"] * 15) + " 1 0 0\n")
    (root / "1" / "cmdline").write_bytes(b"/sbin/init\0")
    return root


def test_the_sample_that_sees_every_process_gone_reads_the_failure_report_written_as_they_went(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    root = _root(tmp_path / "proc")
    _proc(root, 4242, b"torchrun\0--nproc-per-node\0002\0train.py\0", run)
    log = run / "train.log"
    now = time.time()
    log.write_text("".join(f"step {n}/100 loss 0.{n:02d}\n" for n in range(1, 6)))
    clock = FakeClock(now)
    cfg = Config.model_validate(
        {
            "gpu": {"backend": "none"},
            "interval_s": 1.0,
            "training": {"logs": ["train.log"]},
            "processes": [{"role": "trainer", "cmdline_regex": "torchrun"}],
        }
    )
    engine = Engine(cfg, run, clock=clock, proc_root=str(root))
    engine.poll_logs()
    engine.sample()
    snap = engine.build()
    assert snap.live_run is not None and [pid for pid, _ in snap.live_run.members] == [4242]
    assert snap.run_state is not None and snap.run_state.state != "stopped"

    clock.advance(1.0)  # the run steps on: its ending is read again, then kept while the file grows
    with log.open("a") as fh:
        fh.write("step 6/100 loss 0.06\n")
    engine.poll_logs()
    engine.sample()
    assert engine.build().run_state.state != "stopped"  # type: ignore[union-attr]

    clock.advance(1.0)  # a rank is killed; torchrun reports it and exits; rlwatch's next look finds nobody
    t = clock.time()
    root_cause, victim = (1, -9, 4300), (0, -15, 4299)
    report = torchrun_child_failed(4242, "train.py", "host", "/usr/bin/python3", root_cause, [victim], t)
    with log.open("a") as fh:
        fh.write(torch_pylog("W", 4242, "torch/distributed/elastic/multiprocessing/api.py:908", "Sending", t) + "\n")
        fh.write(report + "\n")
    shutil.rmtree(root / "4242")
    engine.sample()  # the log loop has not read the report yet: the sample's own reading of the ending must
    snap = engine.build()
    assert snap.live_run is not None and [pid for pid, _ in snap.live_run.gone] == [4242]
    rs = snap.run_state
    assert rs is not None and rs.state == "crashed", rs
    assert "SIGKILL" in rs.why
