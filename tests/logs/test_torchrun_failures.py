"""torchrun's failure report read whole, and one NCCL timeout however many times torch prints it.

The fixture is composed from pytorch's own format strings, not captured: ChildFailedError's report from
torch/distributed/elastic/multiprocessing/errors/__init__.py (_MSG_FORMAT_TEMPLATE, _FAILURE_FORMAT_TEMPLATE,
ProcessFailure's "Signal N (NAME) received by PID P", pytorch commit 0140b62d8bab203e4699faeba802b5204fa51d26) and
the watchdog's lines from torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp as torch 2.5-2.11 print them: the timeout
("Watchdog caught collective operation timeout: WorkNCCL(...) ran for N milliseconds before timing out."), the
"Exception (either an error or timeout) detected by watchdog at work" line, "Some NCCL operations have failed or
timed out", the watchdog thread's exception that repeats the WorkNCCL text, and the C++ terminate with its what().
The scene: two ranks; rank 1 stops joining, rank 0's watchdog times out ALLREDUCE SeqNum=4 and aborts (SIGABRT);
torchrun then stops rank 1 (SIGTERM), whose Python prints a SignalException traceback: the victim.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import Snapshot
from rlwatch.config.models import EventsConfig
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json, to_text
from rlwatch.logs.events import EventCounter, build_kinds
from rlwatch.logs.newlines import count_lines
from rlwatch.logs.tailer import Chunk
from rlwatch.sources.gpu import NoGpuBackend

WORK = (
    "WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) "
    "ran for 10035 milliseconds before timing out."
)
PG = "[PG ID 1 PG GUID 1 Rank 0]"
FRAMES = """\
Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 (most recent call \
first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f2a1c9e31b6 in /usr/lib/python3/torch/lib/libc10.so)
frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, \
1000l> > >) + 0x2b4 (0x7f29c8ffec74 in /usr/lib/python3/torch/lib/libtorch_cuda.so)
"""

TORCHRUN_LOG = f"""\
[rank0]: step 2 all_reduce ok
[rank1]: step 2 all_reduce ok
[rank0]:[E1124 06:10:21.123456789 ProcessGroupNCCL.cpp:632] {PG} Watchdog caught collective operation timeout: {WORK}
[rank0]:[E1124 06:10:21.124000000 ProcessGroupNCCL.cpp:2271] {PG} Exception (either an error or timeout) detected by \
watchdog at work: 4, last enqueued NCCL work: 4, last completed NCCL work: 3.
[rank0]:[E1124 06:10:21.124200000 ProcessGroupNCCL.cpp:684] [Rank 0] Some NCCL operations have failed or timed out. \
Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
[rank0]:[E1124 06:10:21.124300000 ProcessGroupNCCL.cpp:698] [Rank 0] To avoid data inconsistency, we are taking the \
entire process down.
[rank0]:[E1124 06:10:21.125000000 ProcessGroupNCCL.cpp:1899] {PG} Process group watchdog thread terminated with \
exception: [Rank 0] Watchdog caught collective operation timeout: {WORK}
{FRAMES}
terminate called after throwing an instance of 'c10::DistBackendError'
  what():  {PG} Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation \
timeout: {WORK}
{FRAMES}
W1124 06:10:22.000000 4242 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 4244 closing signal \
SIGTERM
[rank1]: Traceback (most recent call last):
[rank1]:   File "/srv/run/train.py", line 31, in <module>
[rank1]:     main()
[rank1]:   File "/srv/run/train.py", line 24, in main
[rank1]:     dist.barrier()
[rank1]:   File "/usr/lib/python3/torch/distributed/elastic/multiprocessing/api.py", line 84, in _terminate_process_handler
[rank1]:     raise SignalException(f"Process {{os.getpid()}} got signal: {{sigval}}", sigval=sigval)
[rank1]: torch.distributed.elastic.multiprocessing.api.SignalException: Process 4244 got signal: 15
E1124 06:10:22.300000 4242 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) local_rank: 0 \
(pid: 4243) of binary: /usr/bin/python3
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/lib/python3/torch/distributed/run.py", line 892, in main
    run(args)
  File "/usr/lib/python3/torch/distributed/launcher/api.py", line 270, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n\
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-24_06:10:22
  host      : gpu-host-1
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 4244)
  error_file: /tmp/torchelastic_x/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/usr/lib/python3/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper
      return f(*args, **kwargs)
  torch.distributed.elastic.multiprocessing.api.SignalException: Process 4244 got signal: 15
  \n\
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_06:10:21
  host      : gpu-host-1
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 4243)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 4243
============================================================
"""


def counted(text: str) -> EventCounter:
    c = EventCounter(build_kinds(EventsConfig()), FakeClock())
    data = text.encode()
    c.feed(Chunk("/srv/run/train.log", data, 1, count_lines(data)))
    return c


def test_one_timeout_printed_three_times_is_one_incident() -> None:
    c = counted(TORCHRUN_LOG)
    assert c.summaries()["nccl_timeout"].count == 3  # the counter still counts lines
    (timeout,) = [i for i in c.incidents() if i.kind == "nccl_timeout"]
    assert timeout.count == 3
    coll = timeout.collective
    assert coll is not None
    assert (coll.rank, coll.seq, coll.op, coll.timeout_ms, coll.ran_ms, coll.group) == (
        0,
        4,
        "ALLREDUCE",
        10000,
        10035,
        "1",
    )
    assert timeout.rank == 0
    assert timeout.title == (
        "NCCL collective timeout on rank 0: ALLREDUCE SeqNum=4, timeout 10000 ms, ran 10035 ms (printed 3 times)"
    )


def test_root_cause_is_the_rank_torchrun_names_with_its_preceding_error() -> None:
    c = counted(TORCHRUN_LOG)
    (failed,) = [i for i in c.incidents() if i.root_cause is not None]
    root = failed.root_cause
    assert root is not None
    assert (root.rank, root.local_rank, root.exitcode, root.signal, root.pid, root.host) == (
        0,
        0,
        -6,
        "SIGABRT",
        4243,
        "gpu-host-1",
    )
    assert root.time == "2026-11-24_06:10:21"
    (victim,) = failed.victims
    assert (victim.rank, victim.exitcode, victim.pid) == (1, 1, 4244)
    assert victim.error == "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4244 got signal: 15"
    assert failed.cause is not None and failed.cause.kind == "nccl_timeout"
    assert failed.cause.collective is not None and failed.cause.collective.seq == 4
    assert "rank 0 exitcode -6 (SIGABRT) on gpu-host-1" in failed.title
    # rank 1's SignalException is a traceback of its own, told apart by its rank prefix.
    victims = [i for i in c.incidents() if i.kind == "traceback" and i.rank == 1]
    assert victims and victims[0].title.startswith("torch.distributed.elastic.multiprocessing.api.SignalException")


def reported(tmp_path: Path, text: str) -> Snapshot:
    """`rlwatch report` of a run directory holding ``text`` as train.log, ten minutes after it was written."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text(text)
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run, clock=FakeClock(os.stat(log).st_mtime + 600), gpu_backend=NoGpuBackend())
    try:
        return engine.collect_once()
    finally:
        engine.stop()


def test_report_and_diagnosis_name_the_root_cause_not_the_victim(tmp_path: Path) -> None:
    snap = reported(tmp_path, TORCHRUN_LOG)
    text = to_text(snap)
    assert "1 NCCL collective timeout (printed 3 times): rank 0 ALLREDUCE SeqNum=4, timeout 10000 ms" in text
    assert "torchrun's root cause (first observed failure): rank 0 (exit code -6, SIGABRT, host gpu-host-1)" in text
    assert "after NCCL collective timeout on rank 0: ALLREDUCE SeqNum=4" in text
    assert "Stopped after it: rank 1 (exit code 1, host gpu-host-1)" in text
    assert "Last exception: torch.distributed.elastic.multiprocessing.api.SignalException" not in text
    codes = {f.code for f in snap.findings}
    assert "torchrun_failed" in codes and "crashed" not in codes

    data = json.loads(to_json(snap))
    (failed,) = [i for i in data["incidents"] if i["root_cause"]]
    assert failed["root_cause"]["rank"] == 0 and failed["root_cause"]["signal"] == "SIGABRT"
    assert [v["rank"] for v in failed["victims"]] == [1]
    assert failed["cause"]["kind"] == "nccl_timeout"
    assert failed["cause"]["collective"] == {
        "rank": 0,
        "seq": 4,
        "op": "ALLREDUCE",
        "timeout_ms": 10000,
        "ran_ms": 10035,
        "group": "1",
    }
    assert [i["count"] for i in data["incidents"] if i["kind"] == "nccl_timeout"] == [3]
    assert data["events"]["nccl_timeout"]["count"] == 3


def test_a_root_cause_the_relaunch_got_past_is_history_not_critical(tmp_path: Path) -> None:
    relaunched = "".join(
        f"2026-11-24 06:{20 + i // 60:02d}:{i % 60:02d} INFO Train step {i}/500 done.\n" for i in range(90)
    )
    snap = reported(tmp_path, TORCHRUN_LOG + relaunched)
    (finding,) = [f for f in snap.findings if f.code == "torchrun_failed"]
    assert finding.severity.value == "info" and finding.message.endswith("the run has progressed since.")
    assert "rank 0 (exit code -6, SIGABRT, host gpu-host-1)" in finding.message  # still told, with its evidence


def test_nccl_timeouts_no_longer_kept_are_counted_with_the_kept_ones(tmp_path: Path) -> None:
    """Older incidents than the kept ones are tallied apart; how many collectives timed out, and how often torch
    printed them, counts them too."""
    from dataclasses import replace

    from rlwatch.common.state import IncidentTally
    from rlwatch.engine.diagnosis import Context, diagnose

    snap = reported(tmp_path, TORCHRUN_LOG)
    (kept,) = [i for i in snap.incidents if i.kind == "nccl_timeout"]
    older = IncidentTally("nccl_timeout", kept.signature, 3, 6, None)
    text = " ".join(f.message for f in diagnose(replace(snap, dropped_incidents=(older,)), Context()))
    assert "4 NCCL collective timeouts (printed 9 times in all)" in text
