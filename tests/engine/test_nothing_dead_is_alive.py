"""Nothing dead is alive: "progressing" needs a process of the run alive now, never a log's fresh time alone.

Snapshots are built by hand (the rule reads nothing else): a log that ended in a step line a second ago, and the
run's processes alive, gone since rlwatch looked, never seen, or unseen while the log is written after the look.
"""

from __future__ import annotations

from dataclasses import replace

from rlwatch.common.state import Attempt, LiveRun, LogEnding, Snapshot
from rlwatch.engine.diagnosis import Context, decide_run_state, diagnose
from rlwatch.export.report import status_word

NOW = 1_800_000_000.0
STEP = "step 41/1000 loss 0.0320"


def _snap(run: LiveRun | None, *, written: float = NOW - 1.0) -> Snapshot:
    ending = LogEnding(
        path="/runs/a/train.log",
        failed=False,
        last_line=STEP,
        last_lineno=41,
        mtime=written,
        progress_lineno=41,
        progress_line=STEP,
    )
    return Snapshot(host="h", time=NOW, profile="generic", run_dir="/runs/a", live_run=run, endings=(ending,))


def _state(s: Snapshot) -> tuple[str, str, str]:
    ctx = Context()
    rs = decide_run_state(s, ctx)
    s = replace(s, run_state=rs)
    s = replace(s, findings=diagnose(s, ctx))
    return rs.state, rs.why, status_word(s)


def test_a_live_writer_that_stepped_a_second_ago_is_progressing() -> None:
    run = LiveRun(True, None, NOW - 60, members=((4242, "writes train.log"),), looked_at=NOW - 0.5)
    state, _, status = _state(_snap(run))
    assert (state, status) == ("progressing", "OK")


def test_a_trainer_gone_since_the_last_look_is_stopped_at_once_with_its_last_line() -> None:
    """SIGKILLed a second ago (the OOM killer, the platform): no line says so, the log's time is fresh."""
    run = LiveRun(False, "no process of the run is alive", None, gone=((4242, "writes train.log"),), looked_at=NOW - 3)
    state, why, status = _state(_snap(run))
    assert state == "stopped"
    assert "pid 4242" in why and f"train.log:41: {STEP}" in why
    assert status != "OK"


def test_no_process_seen_and_the_log_written_before_the_look_is_stopped() -> None:
    run = LiveRun(False, "rlwatch cannot tell what the live run is", None, looked_at=NOW - 0.5)
    state, why, status = _state(_snap(run, written=NOW - 1.0))
    assert state == "stopped" and "no process of the run is alive here" in why
    assert status == "WARNING"


def test_a_log_written_after_rlwatch_looked_and_found_no_writer_is_unknown_never_progressing() -> None:
    """Its writer runs where rlwatch cannot see (another container sharing the directory): not dead, not known."""
    run = LiveRun(False, "rlwatch cannot tell what the live run is", None, looked_at=NOW - 2.0)
    state, why, status = _state(_snap(run, written=NOW - 0.5))
    assert state == "unknown"
    assert "after rlwatch looked" in why and "cannot be told" in why
    assert status != "OK"


def test_before_rlwatch_looked_for_processes_a_fresh_log_is_unknown() -> None:
    state, why, _ = _state(_snap(None))
    assert state == "unknown" and "not looked" in why


def test_only_weak_members_reading_the_log_are_no_life() -> None:
    """A `tail -f` in the directory reads the log: it does not make the run alive."""
    run = LiveRun(True, None, NOW - 60, members=((77, "works in /runs/a"),), weak=(77,), looked_at=NOW - 0.5)
    state, _, status = _state(_snap(run))
    assert state == "stopped" and status != "OK"


def test_an_earlier_attempt_beside_the_new_run_is_a_finding_with_its_numbers_and_command() -> None:
    gib = 1024**3
    attempts = (
        Attempt(
            pids=(878, 879),
            current=False,
            started_at=NOW - 600,
            launcher_pid=837,
            launcher="torchrun",
            launcher_alive=False,
            launcher_gone_at=NOW - 120,
            orphaned="its launcher (pid 837, its process group's leader) is gone and it was re-parented to init",
            writes=("train.log",),
            gpus=(0, 1),
            gpu_mem_bytes=int(15.6e9),
        ),
        Attempt(pids=(923,), current=True, started_at=NOW - 30, launcher_pid=923, gpus=(0,), gpu_mem_bytes=gib),
    )
    run = LiveRun(True, None, NOW - 30, members=((923, "writes train.log"),), looked_at=NOW - 1, attempts=attempts)
    s = _snap(run)
    found = [f for f in diagnose(s, Context()) if f.code == "earlier_attempt"]
    assert len(found) == 1
    message = found[0].message
    assert "2 processes of an earlier attempt (pid 878, 879; their launcher torchrun, pid 837, is gone since" in message
    assert "hold 15.6 GB on GPUs 0–1" in message
    assert "shares GPU 0 with them" in message
    assert found[0].fix_command() == "rlwatch act kill-zombies --pid 878 --pid 879"


def test_a_launcher_gone_before_rlwatch_looked_is_gone_without_a_time() -> None:
    attempts = (
        Attempt(pids=(878, 879), current=False, started_at=NOW - 600, launcher_pid=837, launcher_alive=False),
        Attempt(pids=(923,), current=True, started_at=NOW - 30, launcher_pid=923),
    )
    run = LiveRun(True, None, NOW - 30, members=((923, "writes train.log"),), looked_at=NOW - 1, attempts=attempts)
    message = next(f.message for f in diagnose(_snap(run), Context()) if f.code == "earlier_attempt")
    assert "their launcher (pid 837) is gone)" in message and "since" not in message.split("is gone")[1][:8]


def test_torchrun_ranks_known_only_by_their_environment_name_their_launcher_without_a_pid() -> None:
    attempts = (
        Attempt(
            pids=(878, 879),
            current=False,
            started_at=NOW - 600,
            launcher_pid=None,
            launcher="torchrun",
            launcher_alive=False,
        ),
        Attempt(pids=(923,), current=True, started_at=NOW - 30, launcher_pid=923),
    )
    run = LiveRun(True, None, NOW - 30, members=((923, "writes train.log"),), looked_at=NOW - 1, attempts=attempts)
    message = next(f.message for f in diagnose(_snap(run), Context()) if f.code == "earlier_attempt")
    assert "(pid 878, 879; their launcher torchrun is gone)" in message


def test_a_resumed_run_is_starting_not_hung_since_the_old_attempts_last_step() -> None:
    """Resumed 3 s ago after the old trainer died 70 s ago: its last step is the earlier attempt's. The new one is
    starting (not hung since that step, and not progressing on the strength of it)."""
    run = LiveRun(True, None, NOW - 3, members=((5151, "writes train.log"),), looked_at=NOW - 0.5)
    state, why, _ = _state(_snap(run, written=NOW - 70))
    assert state == "unknown" and "still starting" in why and "earlier attempt" in why
    resumed_just_after = _state(_snap(run, written=NOW - 6))  # within the cadence, yet before this attempt began
    assert resumed_just_after[0] == "unknown"


def test_a_resumed_run_that_never_steps_is_hung_since_it_started() -> None:
    run = LiveRun(True, None, NOW - 2000, members=((5151, "writes train.log"),), looked_at=NOW - 0.5)
    state, why, _ = _state(_snap(run, written=NOW - 2100))  # past the 30 min a run is given to start
    assert state == "hung"
    assert "no progress since" in why


def test_an_old_failure_in_a_log_the_resumed_run_appends_to_is_not_this_attempts_crash() -> None:
    """The traceback's lines carry no time; the line after it does (16:22:07), and the new server's start moved the
    file's modification time past the resume: the failure is the earlier attempt's."""
    ending = LogEnding(
        path="/runs/a/llm_server.log",
        failed=True,
        last_line="(AReaL) 20261127-16:22:07.228 SGLangWrapper ERROR: server exited",
        last_lineno=62,
        mtime=NOW - 1,
        title="torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
        lineno=58,
        last_at=NOW - 90,
    )
    run = LiveRun(True, None, NOW - 3, members=((6161, "writes llm_server.log"),), looked_at=NOW - 0.5)
    s = Snapshot(host="h", time=NOW, profile="areal", run_dir="/runs/a", live_run=run, endings=(ending,))
    state, why, _ = _state(s)
    assert state == "unknown" and "still starting" in why
