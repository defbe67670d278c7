"""The NCCL watchdog's lines read into each rank's collectives and progress (logs/collectives), on lines real torch
printed (tests/real/collective-2gpu/, tests/real/torchrun-nccl-timeout-2gpu/) and on the forms older versions print."""

from __future__ import annotations

from pathlib import Path

from rlwatch.logs.collectives import CollectiveOp, RankProgress, op_name, parse_line, read_lines

REAL = Path(__file__).resolve().parents[1] / "real"


def test_the_timeout_line_of_torch_2_11_gives_rank_group_number_op_and_size() -> None:
    line = (
        "[rank1]:[E1128 21:55:06.794972197 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=13, OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=30000) ran "
        "for 30083 milliseconds before timing out."
    )
    assert parse_line(line, "torchrun.log:12") == CollectiveOp(
        1, "0", 13, "all_reduce", 4194304, 4194304, "torchrun.log:12", state="timed out", timeout_ms=30000
    )


def test_progress_lines_of_three_torch_versions() -> None:
    new = (
        "[rank0]:[E1128 21:56:54.805019056 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure "
        "detected by watchdog at work sequence id: 11 PG status: last enqueued work: 11, last completed work: 10"
    )
    signal = (
        "[rank1]:[E1128 21:56:55.494888309 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a "
        "dump signal due to a collective timeout from  rank 0 and we will try our best to dump the debug info. Last "
        "enqueued NCCL work: 10, last completed NCCL work: 10.This is most likely caused by incorrect usages"
    )
    old = "[E ProcessGroupNCCL.cpp:1537] [PG 2 Rank 0] Timeout at NCCL work: 2, last enqueued NCCL work: 2, last completed NCCL work: 1"
    assert parse_line(new, "a:1") == RankProgress(0, "0", 11, 10, "a:1")
    assert parse_line(signal, "a:2") == RankProgress(1, "0", 10, 10, "a:2")
    assert parse_line(old, "a:3") == RankProgress(0, "2", 2, 1, "a:3")


def test_the_oldest_form_without_sizes_and_a_line_without_a_rank() -> None:
    old = (
        "[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64088, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25625251 milliseconds before timing out."
    )
    got = parse_line(old, "x:1")
    assert isinstance(got, CollectiveOp) and (got.rank, got.seq, got.numel_in) == (7, 64088, None)
    assert parse_line("WorkNCCL(SeqNum=1, OpType=ALLREDUCE) but nobody said which rank", "x:2") is None
    assert parse_line("Train step 3/100 done.", "x:3") is None


def test_op_names_agree_between_the_watchdog_and_the_flight_recorder() -> None:
    assert op_name("ALLREDUCE") == op_name("nccl:all_reduce") == "all_reduce"
    assert op_name("_ALLGATHER_BASE") == op_name("nccl:_allgather_base") == "all_gather_into_tensor"
    assert op_name("BROADCAST") == op_name("nccl:broadcast") == "broadcast"


def test_a_real_log_read_whole_counts_each_timeout_once_at_its_first_line() -> None:
    path = REAL / "torchrun-nccl-timeout-2gpu" / "torchrun.log"
    lines = [(str(path), i, t) for i, t in enumerate(path.read_text(errors="replace").splitlines(), 1)]
    ops, progress = read_lines(lines)
    (op,) = ops  # printed three times as the watchdog aborts
    assert (op.rank, op.seq, op.numel_in) == (0, 4, 1048576) and op.where.startswith("torchrun.log:")
    assert {(p.rank, p.last_enqueued, p.last_completed) for p in progress} == {(0, 4, 3), (1, 3, 3)}
