"""Collectives compared across ranks (engine/diagnosis/collectives) over what real torch wrote on two H200s
(tests/real/collective-2gpu/): the flight recorder's dumps and the NCCL watchdog's lines, and a GPU-bound straggler
from the NVML readings of the same host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rlwatch.common.state import (
    GpuActivity,
    JobInfo,
    JobRank,
    RunState,
    SampledProcess,
    Severity,
    Snapshot,
    StackSample,
    StackSampling,
)
from rlwatch.engine.diagnosis import diagnose
from rlwatch.engine.diagnosis.base import Context
from rlwatch.engine.diagnosis.collectives import GPU_WINDOW_S, collectives, compare, gpu_bound, gpu_straggler
from rlwatch.engine.job import JobWatch
from rlwatch.logs.collectives import read_lines
from rlwatch.sources import flight
from tests.simhost import wait_until
from tests.snapshot_data import event

REAL = Path(__file__).resolve().parents[1] / "real" / "collective-2gpu"


def _dumps(case: str, sub: str = "") -> list[flight.FlightDump]:
    base = REAL / case / sub if sub else REAL / case
    return [flight.read_flight_dump(str(base / f"nccl_trace_rank_{r}"), r) for r in (0, 1)]


def _compare(dumps: list[flight.FlightDump]):  # type: ignore[no-untyped-def]
    ops = tuple(o for d in dumps for o in d.ops)
    progress = tuple(p for d in dumps for p in d.progress)
    names = {k: v for d in dumps for k, v in d.groups.items()}
    return compare(ops, progress, names)


def _flight(case: str):  # type: ignore[no-untyped-def]
    dumps = _dumps(case)
    return (
        tuple(o for d in dumps for o in d.ops),
        tuple(p for d in dumps for p in d.progress),
        {k: v for d in dumps for k, v in d.groups.items()},
    )


def _log_lines(case: str) -> list[tuple[str, int, str]]:
    path = REAL / case / "torchrun.log"
    text = path.read_text(errors="replace").splitlines()
    return [(str(path), i, line) for i, line in enumerate(text, 1)]


def test_the_mismatch_in_the_real_dumps_names_rank_0_with_one_more_collective_and_both_sizes() -> None:
    (issue,) = _compare(_dumps("mismatch"))
    assert issue.code == "collective_mismatch"
    assert (issue.pg, issue.seq, issue.ranks) == ("0", 13, (0,))
    assert "rank 0 called all_reduce of 1 element in main (collective_2gpu.py:58)" in issue.message
    assert "rank 1 called all_reduce of 4194304 elements in main (collective_2gpu.py:53)" in issue.message
    assert "rank 0 made one more collective than rank 1" in issue.message
    assert "process group 0 (default_pg)" in issue.message
    assert issue.evidence == (
        "rank 0: nccl_trace_rank_0 entry 12 [[1]]",
        "rank 1: nccl_trace_rank_1 entry 12 [[4194304]]",
    )


def test_the_stalled_rank_is_missing_from_the_collective_rank_0_entered_in_both_dumps() -> None:
    for sub in ("", "pipe"):  # on timeout, and asked through the debug pipe while the run lived
        (issue,) = _compare(_dumps("stall", sub))
        assert issue.code == "collective_missing_rank"
        assert (issue.seq, issue.ranks) == (11, (1,))
        assert issue.message.startswith(
            "rank 1 never entered all_reduce of 4194304 elements #11 of process group 0 (default_pg) "
            "(called in main (collective_2gpu.py:53)), which rank 0 entered and waits in; rank 1 last entered #10"
        )


def test_the_watchdog_lines_alone_name_the_mismatch_with_their_lines() -> None:
    ops, progress = read_lines(_log_lines("mismatch"))
    assert {(o.rank, o.seq, o.op, o.numel_in) for o in ops} == {
        (0, 13, "all_reduce", 1),
        (1, 13, "all_reduce", 4194304),
    }
    (issue,) = compare(ops, progress)
    assert issue.code == "collective_mismatch" and issue.seq == 13
    # Two ranks and no history in the lines: which one made the extra call cannot be told, only that they differ.
    assert issue.ranks == ()
    assert "rank 0 called all_reduce of 1 element" in issue.message and "torchrun.log:" in " ".join(issue.evidence)


def test_the_watchdog_lines_alone_say_the_stalled_rank_never_entered() -> None:
    ops, progress = read_lines(_log_lines("stall"))
    by_rank = {p.rank: p.last_enqueued for p in progress}
    assert by_rank == {0: 11, 1: 10}
    (issue,) = compare(ops, progress)
    assert issue.code == "collective_missing_rank" and issue.ranks == (1,) and issue.seq == 11


def test_healthy_collectives_say_nothing() -> None:
    dumps = _dumps("mismatch")
    # The same ranks up to collective 12, all completed: nothing differs, nobody is missing.
    ops = tuple(o for d in dumps for o in d.ops if o.seq <= 12)
    assert compare(ops, ()) == ()
    assert read_lines(_log_lines("healthy")) == ((), ())


def _snapshot(run_dir: Path, case: str, now: float) -> Snapshot:
    lines = [x for x in _log_lines(case) if "Watchdog caught" in x[2]]
    ev = event("nccl_timeout", Severity.CRITICAL, len(lines), now - 5, now - 5, recent=[(*x, now - 5) for x in lines])
    return Snapshot(
        host="h",
        time=now,
        profile="auto",
        run_dir=str(run_dir),
        run_uptime_s=600.0,
        events={"nccl_timeout": ev},
        run_state=RunState("crashed", "rank 0 aborted"),
    )


def _read(run_dir: Path, snap: Snapshot) -> Snapshot:
    """The snapshot as the engine gives it: the dumps read into ``flight`` when the snapshot is suspicious."""
    watch = JobWatch()
    watch.read_flight(snap)
    return replace(snap, flight=watch.flight)


def test_the_rule_reads_the_dumps_the_run_left_in_its_directory(tmp_path: Path) -> None:
    for r in (0, 1):
        shutil.copy(REAL / "mismatch" / f"nccl_trace_rank_{r}", tmp_path / f"nccl_trace_rank_{r}")
    now = os.stat(tmp_path / "nccl_trace_rank_0").st_mtime + 10
    snap = _read(tmp_path, _snapshot(tmp_path, "mismatch", now))
    assert snap.flight is not None and snap.flight.ranks == (0, 1) and snap.flight.errors == ()
    (finding,) = list(collectives(snap, Context()))
    assert finding.code == "collective_mismatch" and finding.severity is Severity.CRITICAL
    assert "Rank 0 made one more collective" not in finding.message  # the sentence starts with the difference
    assert "rank 0 made one more collective than rank 1: all_reduce of 1 element in main (collective_2gpu.py:58)" in (
        finding.message
    )
    assert "nccl_trace_rank_0 entry 12 [[1]]" in finding.message
    assert any(f.code == "collective_mismatch" for f in diagnose(snap, Context()))


def test_the_ranks_gpus_are_named_beside_them_where_the_job_says(tmp_path: Path) -> None:
    for r in (0, 1):
        shutil.copy(REAL / "mismatch" / f"nccl_trace_rank_{r}", tmp_path / f"nccl_trace_rank_{r}")
    now = os.stat(tmp_path / "nccl_trace_rank_0").st_mtime + 10
    snap = replace(_read(tmp_path, _snapshot(tmp_path, "mismatch", now)), job=_job({0: 0, 1: 1}))
    (finding,) = list(collectives(snap, Context()))
    assert "rank 0 (GPU 0) called all_reduce of 1 element" in finding.message
    assert "rank 1 (GPU 1) called all_reduce of 4194304 elements" in finding.message
    assert "rank 0 (GPU 0) made one more collective than rank 1 (GPU 1)" in finding.message
    # The stalled rank too; with no job known (its ranks gone), ranks alone.
    (issue,) = compare(*_flight("stall"), gpus={0: 0, 1: 1})
    assert issue.message.startswith("rank 1 (GPU 1) never entered all_reduce of 4194304 elements #11")
    assert "which rank 0 (GPU 0) entered" in issue.message
    assert "(GPU" not in _compare(_dumps("stall"))[0].message


def test_a_collective_nccl_failed_is_reason_enough_to_read_the_dumps(tmp_path: Path) -> None:
    # Two ranks sharing one H200 (each its own host to NCCL, over sockets): NCCL failed rank 0's extra all_reduce at
    # once, 30 s before its watchdog's timeout; the dumps asked for then name the mismatch.
    for r in (0, 1):
        shutil.copy(REAL / "mismatch" / f"nccl_trace_rank_{r}", tmp_path / f"nccl_trace_rank_{r}")
    now = os.stat(tmp_path / "nccl_trace_rank_0").st_mtime + 10
    line = (
        "[rank0]:[E1129 00:21:34.449082790 ProcessGroupNCCL.cpp:612] [Rank 0] Collective WorkNCCL(SeqNum=13, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=30000) raised the following async exception: NCCL "
        "error: invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9"
    )
    failed = event("nccl_error", Severity.CRITICAL, 1, now - 5, now - 5, recent=[("torchrun.log", 9, line, now - 5)])
    snap = replace(_snapshot(tmp_path, "mismatch", now), events={"nccl_error": failed}, run_state=None)
    read = _read(tmp_path, snap)
    assert read.flight is not None and read.flight.ranks == (0, 1)
    assert [f.code for f in collectives(read, Context())] == ["collective_mismatch"]
    # An NCCL error that names no collective (a communicator's set-up) is no such reason.
    other = replace(failed, recent=(replace(failed.recent[0], text="NCCL error: unhandled system error"),))
    assert _read(tmp_path, replace(snap, events={"nccl_error": other})).flight is None


def test_the_dumps_are_not_read_without_a_reason(tmp_path: Path) -> None:
    for r in (0, 1):
        shutil.copy(REAL / "mismatch" / f"nccl_trace_rank_{r}", tmp_path / f"nccl_trace_rank_{r}")
    now = os.stat(tmp_path / "nccl_trace_rank_0").st_mtime + 10
    calm = replace(_snapshot(tmp_path, "mismatch", now), events={}, run_state=RunState("progressing", "steps"))
    assert _read(tmp_path, calm).flight is None


def test_a_dump_older_than_the_run_is_not_its(tmp_path: Path) -> None:
    for r in (0, 1):
        shutil.copy(REAL / "mismatch" / f"nccl_trace_rank_{r}", tmp_path / f"nccl_trace_rank_{r}")
    now = os.stat(tmp_path / "nccl_trace_rank_0").st_mtime + 10_000  # the run started long after the dumps
    snap = _read(tmp_path, _snapshot(tmp_path, "mismatch", now))
    assert snap.flight is not None and snap.flight.ranks == ()
    found = list(collectives(snap, Context()))
    # Only the watchdog's lines speak, without the dumps' history: the difference, no rank blamed.
    assert [f.code for f in found] == ["collective_mismatch"]
    assert "made one more" not in found[0].message


def _readings(case: str) -> dict[int, list[GpuActivity]]:
    out: dict[int, list[GpuActivity]] = {0: [], 1: []}
    for line in (REAL / case / "nvml.jsonl").read_text().splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        for g in row["gpus"]:
            if g["util_gpu"] > 0:  # the run's steps, not NCCL's start or the end
                out[g["index"]].append(
                    GpuActivity(row["t"], g["power_mw"] / 1000, float(g["sm_clock_mhz"]), float(g["util_gpu"]))
                )
    return out


def test_the_real_gpu_bound_straggler_is_named_with_its_power_beside_the_others() -> None:
    got = gpu_bound(_readings("straggler"), {"rank 0": 0, "rank 1": 1})
    assert got is not None
    text, figures = got
    assert text.startswith("rank 1 (GPU 1) computes longer each step: 693 W beside 281 W")
    assert figures == (
        "rank 0 (GPU 0): 281 W, SM 1965 MHz, 100 % busy",
        "rank 1 (GPU 1): 693 W, SM 1515 MHz, 100 % busy",
    )


def test_the_real_healthy_run_has_no_gpu_straggler() -> None:
    assert gpu_bound(_readings("healthy"), {"rank 0": 0, "rank 1": 1}) is None


def _sampled(now: float) -> StackSampling:
    frames = ("main (collective_2gpu.py:55)", "<module> (collective_2gpu.py:69)")
    procs = tuple(
        SampledProcess(
            900 + r,
            1.0,
            f"rank {r}",
            r,
            tuple(StackSample(now - 50 + 10 * i, frames, frames[0], None, False, False) for i in range(6)),
        )
        for r in (0, 1)
    )
    return StackSampling(True, None, "py-spy dump --nonblocking", 10.0, 0.005, procs)


def _job(gpus: dict[int, int]) -> JobInfo:
    ranks = tuple(JobRank(r, r, g, 900 + r) for r, g in gpus.items())
    return JobInfo("rdzv:exp", "torchrun", "10.0.0.1:29500", 0, len(gpus), ranks)


def _activity(case: str, end: float) -> dict[int, tuple[GpuActivity, ...]]:
    """A case's readings moved to end at ``end``, the last GPU_WINDOW_S of them."""
    out = {}
    for gpu, rs in _readings(case).items():
        moved = [GpuActivity(end - (rs[-1].at - r.at), r.power_w, r.sm_clock_mhz, r.util) for r in rs]
        out[gpu] = tuple(r for r in moved if r.at >= end - GPU_WINDOW_S)
    return out


def test_the_rule_names_the_gpu_bound_straggler_when_the_stacks_agree() -> None:
    end = 10_000.0
    snap = Snapshot(
        host="h",
        time=end,
        profile="auto",
        run_dir="/job",
        sampling=_sampled(end),
        job=_job({0: 0, 1: 1}),
        gpu_activity=_activity("straggler", end),
        run_state=RunState("progressing", "steps every 1.1 s"),
    )
    (finding,) = list(gpu_straggler(snap, Context()))
    assert finding.code == "gpu_straggler" and finding.severity is Severity.WARNING
    assert "rank 1 (GPU 1) computes longer each step: 693 W beside 281 W" in finding.message
    assert list(gpu_straggler(replace(snap, gpu_activity=_activity("healthy", end)), Context())) == []
    # A one-shot look (no sampling) judges the reads it took, as report does.
    (once,) = list(gpu_straggler(replace(snap, sampling=None), Context()))
    assert once.message == finding.message
    # Two ranks on one GPU: their draws cannot be told apart.
    assert list(gpu_straggler(replace(snap, job=_job({0: 0, 1: 0})), Context())) == []


@pytest.mark.slow
def test_a_declared_hang_asks_each_rank_for_its_flight_record_through_its_pipe_once(tmp_path: Path) -> None:
    prefix = str(tmp_path / "nccl_pipe_rank_")
    os.mkfifo(prefix + "1.pipe")
    reader = os.open(prefix + "1.pipe", os.O_RDONLY | os.O_NONBLOCK)  # as ProcessGroupNCCL opens it
    env = {"PATH": "/usr/bin:/bin", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] = prefix
    rank = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env=env)
    # until the child has exec'd, /proc shows the parent's environment, without the rank's RANK
    wait_until(lambda: b"RANK=1\0" in Path(f"/proc/{rank.pid}/environ").read_bytes(), 30)
    try:
        frames = ("fetch_batch_from_service (train.py:20)", "main (train.py:60)")
        samples = tuple(StackSample(1000.0 + 10 * i, frames, frames[0], None, False, True) for i in range(3))
        sampling = StackSampling(
            True, None, "py-spy dump", 10.0, None, (SampledProcess(rank.pid, 1.0, "rank 1", 1, samples),)
        )
        snap = Snapshot(
            host="h",
            time=1030.0,
            profile="auto",
            run_dir=str(tmp_path),
            sampling=sampling,
            run_state=RunState("hung", "its ranks' stacks have not moved"),
        )
        watch = JobWatch()
        watch.sample([(rank.pid, 1.0)], (), snap, flight=False)
        assert watch.job is not None and [r.rank for r in watch.job.ranks] == [1]
        watch.read_flight(snap)
        watch.read_flight(replace(snap, time=1040.0))  # the same hang: asked once
        assert os.read(reader, 16) == b"1"
        assert watch.flight is not None and watch.flight.asked == (f"rank 1: asked through {prefix}1.pipe",)
        healthy = Snapshot(host="h", time=1030.0, profile="auto", run_dir=str(tmp_path), sampling=sampling)
        watch.read_flight(healthy)  # not hung: nothing asked
        assert watch.flight is None
        assert os.read(reader, 16) == b""  # nothing more was written
    finally:
        os.close(reader)
        assert rank.stdin is not None
        rank.stdin.close()
        rank.wait(timeout=30)
