"""A distributed run's state while its ranks wait for one that never came: the job's collectives (NCCL RAS asked on
suspicion, the flight records) hold it hung whatever its ranks log meanwhile; on the GPU host the state went from
hung to unknown as soon as the ranks logged an error-level line while waiting (tests/real/job-2node-1gpu-watched)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rlwatch.common.state import (
    JobInfo,
    JobRank,
    LiveRun,
    LogEnding,
    ProcessInfo,
    RasRank,
    RasState,
    RunState,
    Snapshot,
    TrainingState,
)
from rlwatch.engine.diagnosis import Context, decide_run_state
from rlwatch.engine.job import moving, ras_suspicion

NOW = 1_795_908_912.0
LAST_STEP = NOW - 88  # as in the stalled job: the fleet read it 88 s after the last step

# NCCL RAS's answer on both nodes of the stalled job (tests/real/job-2node-1gpu/job-stall/ras-status.txt)
RAS = RasState(
    NOW - 20,
    "2.28.9",
    None,
    (RasRank(0, 11, "127.0.0.1", 20, 0, "ok"), RasRank(1, 10, "127.0.0.1", 21, 0, "behind")),
    "AllReduce",
    "Communicator ranks have different AllReduce operation counts",
)


def _node(rank: int, *, ras: RasState | None = RAS) -> Snapshot:
    """A node of the stalled job: its torchrun and its rank alive, its last step 88 s ago, and an error its rank
    logged while it waits (NCCL's timeout report, as on the mismatched job)."""
    torchrun = ProcessInfo(
        3, NOW - 100, "trainer", "trainer", 500_000_000, None, NOW - 100, 0, ("torchrun",), "/r", "u"
    )
    waiting = ProcessInfo(34, NOW - 95, "run", "rank", 900_000_000, None, NOW - 95, 0, ("python3",), "/r", "u")
    failed = LogEnding(
        "/r/torchrun.log",
        True,
        "failure detected by watchdog at work sequence id: 11",
        3,
        NOW - 10,
        NOW - 10,
        title="[Rank 0] Collective WorkNCCL(SeqNum=11, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=30000) "
        "raised the following async exception",
        kind="error",
        lineno=3,
        at=NOW - 10,
        evidence=((3, "WorkNCCL(SeqNum=11, OpType=ALLREDUCE)"),),
        count=1,
    )
    return Snapshot(
        host=f"node-{'ab'[rank]}",
        time=NOW,
        profile="generic",
        run_dir="/r",
        training=TrainingState(10, 100, None, None, False, LAST_STEP, LAST_STEP),
        processes=(torchrun, waiting),
        live_run=LiveRun(
            True, None, NOW - 100, members=((3, "writes train.log"), (34, "writes train.log")), looked_at=NOW
        ),
        endings=(failed,),
        job=JobInfo("rdzv:exp-gpu", "torchrun", "127.0.0.1:29500", rank, 2, (JobRank(rank, 0, 0, 34),)),
        ras=ras,
    )


def test_ranks_that_wait_for_a_rank_named_by_nccl_ras_are_hung_whatever_they_log() -> None:
    rs = decide_run_state(_node(0), Context())
    assert rs.state == "hung" and rs.since == LAST_STEP, rs
    assert "the job waits for a rank: rank 1 has launched up to operation 10 while rank 0 reached 11" in rs.why
    assert "this host's rank 0 waits for it on another node" in rs.why


def test_without_that_evidence_the_logged_failure_leaves_the_state_unknown() -> None:
    assert decide_run_state(_node(0, ras=None), Context()).state == "unknown"
    even = replace(RAS, ranks=tuple(replace(r, collectives=11, status="ok") for r in RAS.ranks))
    assert decide_run_state(_node(0, ras=even), Context()).state == "unknown"


def test_progress_ends_it() -> None:
    moving = replace(_node(0), training=TrainingState(11, 100, None, None, False, NOW - 1, NOW - 1))
    assert decide_run_state(moving, Context()).state != "hung"


def _quiet_node(quiet_s: float, ras: RasState | None) -> Snapshot:
    """A node of a job stepping every second whose step lines stopped ``quiet_s`` ago, nothing logged since, still
    called progressing by the last snapshot (as the engine hands it on)."""
    last = NOW - quiet_s
    node = replace(
        _node(0, ras=ras),
        training=TrainingState(10, 100, None, 3600.0, False, last, last),
        endings=(),
    )
    return replace(node, run_state=RunState("progressing", "step 10", last))


def _asked(after_quiet_s: float, quiet_s: float, *, even: bool = False) -> RasState:
    ranks = RAS.ranks if not even else tuple(replace(r, collectives=11, status="ok") for r in RAS.ranks)
    return replace(RAS, asked_at=NOW - quiet_s + after_quiet_s, ranks=ranks)


def test_a_job_whose_steps_stopped_and_whose_rank_nccl_ras_names_behind_is_hung_before_the_floor() -> None:
    """Live on one H200 the hang came at the 60 s floor and the fleet's verdict at +64 s; asked on the quiet, NCCL
    RAS names the rank behind and the run is hung about 25 s after its last step."""
    rs = decide_run_state(_quiet_node(27, _asked(16, 27)), Context())
    assert rs.state == "hung" and rs.since == NOW - 27, rs
    assert "no progress since" in rs.why and "(27s)" in rs.why, rs.why
    assert "the job waits for a rank: rank 1 has launched up to operation 10 while rank 0 reached 11" in rs.why


def test_counts_read_early_in_the_quiet_or_even_or_a_short_quiet_are_no_early_hang() -> None:
    # read 5 s into the quiet: two ranks' launches differ by one all the time in a run that moves
    assert decide_run_state(_quiet_node(27, _asked(5, 27)), Context()).state == "progressing"
    # every rank at the same count: nobody is behind
    assert decide_run_state(_quiet_node(27, _asked(16, 27, even=True)), Context()).state == "progressing"
    # quiet for less than RAS_QUIET_S + RAS_SETTLED_S
    assert decide_run_state(_quiet_node(20, _asked(12, 20)), Context()).state == "progressing"
    # a run whose steps take 10 s: 5 of them (50 s) first
    slow = replace(_quiet_node(40, _asked(16, 40)), training=TrainingState(10, 100, None, 360.0, False, NOW - 40, NOW))
    assert decide_run_state(slow, Context()).state == "progressing"


def test_nccl_ras_is_asked_once_the_steps_stopped_for_a_while_and_the_answer_kept_while_quiet() -> None:
    assert ras_suspicion(_quiet_node(5, None)) is None and moving(_quiet_node(5, None))
    quiet = _quiet_node(16, None)
    assert ras_suspicion(quiet) is not None and not moving(quiet)
    assert ras_suspicion(quiet) == ras_suspicion(replace(quiet, time=NOW + 3))  # one suspicion while it lasts


def test_ranks_stuck_in_collectives_that_differ_are_hung_with_the_mismatch_named() -> None:
    """The mismatched job of tests/real/collective-2gpu: rank 0 made one all_reduce more; its ranks' flight records
    read on suspicion. Past the cadence's allowance, the run is hung by what its collectives say, whatever it logs."""
    from rlwatch.common.state import FlightState
    from rlwatch.sources import flight

    base = Path(__file__).resolve().parents[1] / "real" / "collective-2gpu" / "mismatch"
    dumps = [flight.read_flight_dump(str(base / f"nccl_trace_rank_{r}"), r) for r in (0, 1)]
    records = FlightState(
        NOW - 30,
        tuple(o for d in dumps for o in d.ops),
        tuple(p for d in dumps for p in d.progress),
        tuple({k: v for d in dumps for k, v in d.groups.items()}.items()),
        (0, 1),
    )
    rs = decide_run_state(replace(_node(0, ras=None), flight=records), Context())
    assert rs.state == "hung", rs
    assert "its ranks wait in collectives none of them completes: collectives differ across ranks at #13" in rs.why


def test_a_rank_saving_a_checkpoint_while_the_others_wait_is_left_to_the_cadence() -> None:
    """Rank 0 writing a checkpoint while the others wait in the next collective looks, to NCCL RAS, like a rank
    behind: a checkpoint of the run written since the quiet began leaves the run to its cadence's allowance."""
    from rlwatch.common.state import CheckpointInfo, CheckpointState

    saving = CheckpointState(CheckpointInfo("/r/checkpoint-11", 11, None, None, NOW - 5, None), 2)
    node = replace(_quiet_node(27, _asked(16, 27)), checkpoint=saving)
    assert decide_run_state(node, Context()).state == "progressing"
    before = CheckpointState(CheckpointInfo("/r/checkpoint-10", 10, None, None, NOW - 40, None), 1)
    assert decide_run_state(replace(node, checkpoint=before), Context()).state == "hung"


def test_a_raised_hang_floor_is_its_owners_word_that_ranks_work_alone_that_long() -> None:
    """`hang_floor_s: 600` where rank 0 evaluates alone for minutes while the others wait at a barrier: RAS's counts
    name rank 0 behind, and the run is left to the floor."""
    from rlwatch.config.models import Thresholds

    node = _quiet_node(27, _asked(16, 27))
    assert decide_run_state(node, Context()).state == "hung"
    assert decide_run_state(node, Context(thresholds=Thresholds(hang_floor_s=600))).state == "progressing"


def test_the_node_whose_own_rank_stalled_is_asked_from_its_bounded_last_step_and_named_hung_early() -> None:
    """Live on one H200 (tests/real/job-2node-1gpu-watched/job-stall-host-hung) node-b read its rank's ten undated
    step lines in one batch: "unknown", its last step bounded at 03:04:51. RAS was asked only on a progressing run's
    quiet, so node-b waited for the 60 s floor while node-a said hung at 27 s. Asked from the bound, the stalled
    rank's own host is hung as early, and says the rank behind is its own."""
    last = NOW - 27
    node = replace(
        _node(1, ras=_asked(16, 27)),
        training=TrainingState(10, 100, None, None, False, last, last),
        endings=(),
    )
    bounded = replace(node, run_state=RunState("unknown", "its step 10 came by … at the latest", last))
    assert ras_suspicion(bounded) is not None and not moving(bounded)
    rs = decide_run_state(bounded, Context())
    assert rs.state == "hung" and rs.since == last, rs
    assert "rank 1 has launched up to operation 10 while rank 0 reached 11" in rs.why
    assert "it is this host's rank 1" in rs.why and "on another node" not in rs.why
    # not asked before a quiet of RAS_QUIET_S, nor where no step was ever seen (still starting)
    assert ras_suspicion(replace(bounded, time=last + 5)) is None
    starting = replace(bounded, training=TrainingState(None, None, None, None, False, None, None))
    assert ras_suspicion(starting) is None
