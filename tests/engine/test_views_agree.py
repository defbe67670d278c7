"""One verdict at every moment: what a live view reads and what a one-shot report reads of the same files agree.

Issue 42's "views that still disagree": each test drives the real rule or the real engine over a real log and checks
the one thing that two views said differently.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import Config
from rlwatch.engine.engine import Engine
from rlwatch.sim.formats import torch_pylog, torchrun_child_failed
from tests.engine.test_last_words import _proc, _root


def test_a_step_read_live_with_torchruns_failure_report_does_not_make_the_crash_history(tmp_path: Path) -> None:
    """kernel-oom watched live: the ranks' last step lines and torchrun's stamped ChildFailedError report came in
    one read. The steps, dated when read, were "later" than the report's own stamp: the crash was taken for history,
    the run called "stopped … its logs end without an error" and torchrun's root cause an INFO "progressed since",
    while a report over the same files said crashed."""
    run = tmp_path / "run"
    run.mkdir()
    root = _root(tmp_path / "proc")
    _proc(root, 4242, b"torchrun\0--nproc-per-node\0002\0train.py\0", run)
    log = run / "train.log"
    log.write_text("".join(f"step {n}/100 loss 0.{n:02d}\n" for n in range(1, 4)))
    (root / "4242" / "fd" / "1").symlink_to(log)  # torchrun writes the log (its stdout, opened O_WRONLY|O_APPEND)
    (root / "4242" / "fdinfo").mkdir()
    (root / "4242" / "fdinfo" / "1").write_text("pos:\t0\nflags:\t02002001\nmnt_id:\t1\n")
    clock = FakeClock(time.time())
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

    t = clock.time() + 1.0  # the rank is killed, torchrun stamps its report; rlwatch reads both a second later
    clock.advance(2.0)
    report = torchrun_child_failed(4242, "train.py", "host", "/usr/bin/python3", (1, -9, 4300), [(0, -15, 4299)], t)
    with log.open("a") as fh:
        fh.write("step 4/100 loss 0.04\n")
        fh.write(torch_pylog("W", 4242, "torch/distributed/elastic/multiprocessing/api.py:908", "Sending", t) + "\n")
        fh.write(report + "\n")
    shutil.rmtree(root / "4242")
    engine.poll_logs()
    engine.sample()
    snap = engine.build()
    assert snap.training is not None and snap.training.last_step == 4
    rs = snap.run_state
    assert rs is not None and rs.state == "crashed", rs
    assert "SIGKILL" in rs.why
    torchrun = next(f for f in snap.findings if f.code == "torchrun_failed")
    assert torchrun.severity.name == "CRITICAL" and "progressed since" not in torchrun.message
    engine.stop()


def test_with_no_process_of_the_run_seen_the_logs_last_words_are_read_at_once(tmp_path: Path) -> None:
    """A run none of whose processes rlwatch sees as the run's: a growing log's ending is kept a few seconds between
    reads, and it was kept past torchrun's report (written as the run died): "stopped … without an error"."""
    run = tmp_path / "run"
    run.mkdir()
    root = _root(tmp_path / "proc")
    log = run / "train.log"
    log.write_text("".join(f"step {n}/100 loss 0.{n:02d}\n" for n in range(1, 4)))
    clock = FakeClock(time.time())
    cfg = Config.model_validate({"gpu": {"backend": "none"}, "interval_s": 1.0, "training": {"logs": ["train.log"]}})
    engine = Engine(cfg, run, clock=clock, proc_root=str(root))
    engine.poll_logs()
    engine.sample()
    engine.build()
    clock.advance(0.5)
    with log.open("a") as fh:
        fh.write("step 4/100 loss 0.04\n")
    engine.sample()  # read again: it grew
    clock.advance(0.5)
    t = clock.time()
    report = torchrun_child_failed(4242, "train.py", "host", "/usr/bin/python3", (1, -9, 4300), [(0, -15, 4299)], t)
    with log.open("a") as fh:
        fh.write(report + "\n")
    clock.advance(0.5)
    engine.poll_logs()
    engine.sample()  # a second later: the ending kept from a moment ago must not stand for the log's last words
    rs = engine.build().run_state
    assert rs is not None and rs.state == "crashed", rs
    engine.stop()
