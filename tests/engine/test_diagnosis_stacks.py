"""Hangs and stragglers from the sampled stacks (engine/diagnosis/stacks), and the sampler that reads them
(sources/sampler), in-process: readers, clocks and CPU injected."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import (
    EventSummary,
    Finding,
    GpuHolder,
    GpuState,
    GpuStatus,
    RunState,
    SampledProcess,
    Severity,
    Snapshot,
    StackReport,
    StackSample,
    StackSampling,
    WatchdogStatus,
)
from rlwatch.config.models import StacksConfig, Thresholds
from rlwatch.engine.diagnosis import diagnose
from rlwatch.engine.diagnosis.base import Context
from rlwatch.engine.diagnosis.health import health
from rlwatch.engine.diagnosis.stacks import rank_times, stack_run_state, stragglers
from rlwatch.export.exporter import SnapshotCollector
from rlwatch.sources import sampler as sampler_mod
from rlwatch.sources.sampler import StackSampler, ThreadClock, classify, may_read, stage_of
from rlwatch.sources.stacks import StackTarget

NOW = 1_763_716_800.0
ALLREDUCE = ("all_reduce (distributed_c10d.py:2501)", "train_step (train.py:31)", "main (train.py:60)")
FETCH = ("fetch_batch_from_service (train.py:27)", "train_step (train.py:29)", "main (train.py:60)")
DECODE = ("decode_and_augment (data.py:40)", "train_step (train.py:29)", "main (train.py:60)")
COMPUTE = ("matmul_loop (model.py:12)", "train_step (train.py:30)", "main (train.py:60)")
CTX = Context(thresholds=Thresholds(hang_floor_s=60), stacks=StacksConfig(straggler_window_s=90))
UNKNOWN = RunState("unknown", "its processes are alive; no progress seen yet")


def _sample(at: float, frames: Sequence[str], blocked: bool | None) -> StackSample:
    wait, collective = classify(frames)
    return StackSample(at, tuple(frames), frames[0], wait, collective, blocked, stage_of(frames))


def _proc(rank: int, samples: Sequence[StackSample], pid: int | None = None) -> SampledProcess:
    return SampledProcess(pid or 100 + rank, 1.0, f"rank {rank}", rank, tuple(samples))


def _still(frames: Sequence[str], since: float, blocked: bool = True, every: float = 10.0) -> list[StackSample]:
    n = int((NOW - since) / every) + 1
    return [_sample(since + i * every, frames, None if i == 0 else blocked) for i in range(n)]


def _snap(*procs: SampledProcess, **kw: object) -> Snapshot:
    sampling = StackSampling(True, None, "py-spy dump --nonblocking", 10.0, 0.004, tuple(procs))
    return Snapshot(host="h", time=NOW, profile="generic", run_dir="/r", sampling=sampling, **kw)  # type: ignore[arg-type]


def test_ranks_standing_still_in_their_waits_past_the_window_are_a_hang_with_the_odd_one_named() -> None:
    snap = _snap(_proc(0, _still(ALLREDUCE, NOW - 240)), _proc(1, _still(FETCH, NOW - 240)))
    rs = stack_run_state(snap, CTX, UNKNOWN)
    assert rs.state == "hung"
    assert "rank 1 has been in fetch_batch_from_service (train.py:27) for 4m" in rs.why, rs.why
    assert "rank 0 waits for it in all_reduce (distributed_c10d.py:2501)" in rs.why, rs.why
    assert "stage: training" in rs.why
    assert rs.since == NOW - 240
    assert any(line.startswith("rank 1: fetch_batch_from_service") for line in rs.evidence)


def test_a_hang_inside_the_window_is_not_declared_yet() -> None:
    snap = _snap(_proc(0, _still(ALLREDUCE, NOW - 40)), _proc(1, _still(FETCH, NOW - 40)))
    assert stack_run_state(snap, CTX, UNKNOWN).state == "unknown"


def test_the_window_is_the_runs_cadence_and_never_beyond_hang_max() -> None:
    procs = (_proc(0, _still(ALLREDUCE, NOW - 250)), _proc(1, _still(FETCH, NOW - 250)))
    slow = Context(thresholds=Thresholds(hang_floor_s=3600), stacks=StacksConfig(hang_max_s=240))
    assert stack_run_state(_snap(*procs), slow, UNKNOWN).state == "hung"  # declared before 300 s, whatever the floor


def test_stacks_that_move_or_ranks_that_run_are_no_hang() -> None:
    moving = _still(FETCH, NOW - 240)
    moving[-2] = _sample(moving[-2].at, COMPUTE, True)
    assert stack_run_state(_snap(_proc(0, _still(ALLREDUCE, NOW - 240)), _proc(1, moving)), CTX, UNKNOWN).state == (
        "unknown"
    )
    # The same frames read after read, but both threads ran between the reads: a long step that computes.
    busy = _snap(_proc(0, _still(COMPUTE, NOW - 240, blocked=False)), _proc(1, _still(DECODE, NOW - 240, False)))
    assert stack_run_state(busy, CTX, UNKNOWN).state == "unknown"


def test_progress_logged_after_the_ranks_stood_still_means_they_move_between_reads() -> None:
    step = EventSummary("step", Severity.INFO, 30, NOW - 900, NOW - 5, 0.5, 0, {})
    snap = _snap(_proc(0, _still(ALLREDUCE, NOW - 240)), _proc(1, _still(FETCH, NOW - 240)), events={"step": step})
    assert stack_run_state(snap, CTX, UNKNOWN).state == "unknown"


def test_a_hang_the_logs_declared_says_where_the_ranks_stand() -> None:
    snap = _snap(_proc(0, _still(ALLREDUCE, NOW - 30)), _proc(1, _still(FETCH, NOW - 30)))
    rs = stack_run_state(snap, CTX, RunState("hung", "no progress since 09:10", NOW - 300))
    assert rs.state == "hung" and rs.since == NOW - 300
    assert "where the ranks stand: rank 1 has been in fetch_batch_from_service" in rs.why


def test_a_hang_says_where_the_ranks_stand_once() -> None:
    """The hang demo's finding said it twice: "where the ranks stand: rank 1 has been in … rank 0 waits for it …"
    from the sampler, then "Where each waits: …" from the stacks read once when the hang was declared."""
    sampled = _snap(_proc(0, _still(ALLREDUCE, NOW - 30)), _proc(1, _still(FETCH, NOW - 30)))
    rs = stack_run_state(sampled, CTX, RunState("hung", "no progress since 09:10", NOW - 300))
    once = StackReport(
        NOW - 20,
        "hang declared",
        (),
        (),
        "rank 1 in fetch_batch_from_service (train.py:27), not in a collective; rank 0 waits for it in all_reduce",
        None,
    )
    (hung,) = [f for f in health(replace(sampled, run_state=rs, stacks=once), CTX) if f.code == "hung"]
    assert hung.message.count("fetch_batch_from_service") == 1, hung.message
    assert "where the ranks stand: " in hung.message and "Where each waits" not in hung.message
    # Without the sampler's reading, the stacks read once say it.
    (alone,) = health(
        replace(sampled, run_state=RunState("hung", "no progress since 09:10", NOW - 300), stacks=once), CTX
    )
    assert "Where each waits: rank 1 in fetch_batch_from_service" in alone.message


def test_a_last_line_ending_in_dots_gets_no_fourth() -> None:
    hung = RunState("hung", "no progress since 09:10; its last line: torchrun.log:55: waiting for workers...", NOW)
    (found,) = health(_snap(run_state=hung), CTX)
    assert "waiting for workers... Its stacks" in found.message, found.message


def test_crashed_and_finished_stand_whatever_the_stacks_say() -> None:
    snap = _snap(_proc(0, _still(ALLREDUCE, NOW - 240)), _proc(1, _still(FETCH, NOW - 240)))
    crashed = RunState("crashed", "killed", NOW - 200)
    assert stack_run_state(snap, CTX, crashed) is crashed


def _alternating(main: Sequence[str], other: Sequence[str], share: float, n: int = 12) -> list[StackSample]:
    out = []
    for i in range(n):
        frames = main if (i + 0.5) / n <= share else other
        out.append(_sample(NOW - 80 + i * 7, frames, False))
    return out


def test_a_straggler_is_named_with_the_share_each_spends_waiting() -> None:
    victims = [_proc(r, _alternating(ALLREDUCE, COMPUTE, 0.75)) for r in (0, 1, 3)]
    slow = _proc(2, _alternating(DECODE, ALLREDUCE, 0.9))
    gpus = GpuStatus(
        "nvml",
        True,
        None,
        tuple(GpuState(i, "H100", None, 100.0 if i != 2 else 0.0, None, None, None, None, None) for i in range(4)),
    )
    holders = tuple(
        GpuHolder(100 + i, 1.0, "u", ("python",), (f"/dev/nvidia{i}",), None, True, None, gpus=(i,)) for i in range(4)
    )
    snap = _snap(*victims, slow, gpu=gpus, holders=holders)
    report = stragglers(snap, CTX)
    assert report is not None and report.slow == ("rank 2",)
    assert report.message.startswith("ranks 0, 1, 3 spend 75 % of their time waiting in all_reduce for rank 2, "), (
        report.message
    )
    assert "which is in decode_and_augment (data.py:40) 92 % of its time" in report.message
    assert "rank 2 on GPU 2 at 0 %" in report.message and "rank 0 on GPU 0 at 100 %" in report.message
    found = [f for f in diagnose(snap, CTX) if f.code == "straggler"]
    assert found and "rank 2" in found[0].message
    times = {r.label: r for r in rank_times(snap, CTX)}
    assert times["rank 2"].straggler and not times["rank 0"].straggler and times["rank 2"].gpu_util == 0.0
    exported = replace(snap, rank_times=rank_times(snap, CTX))
    samples = {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for m in SnapshotCollector(lambda: exported).families(exported)
        for x in m.samples
    }
    assert samples[("rlwatch_rank_straggler", (("rank", "rank 2"),))] == 1
    assert samples[("rlwatch_rank_straggler", (("rank", "rank 0"),))] == 0
    assert samples[("rlwatch_rank_collective_wait_ratio", (("rank", "rank 0"),))] == pytest.approx(0.75)


def test_balanced_ranks_have_no_straggler() -> None:
    snap = _snap(*(_proc(r, _alternating(ALLREDUCE, COMPUTE, 0.3)) for r in range(4)))
    assert stragglers(snap, CTX) is None
    few = _snap(_proc(0, _alternating(ALLREDUCE, COMPUTE, 0.9, n=3)), _proc(1, _alternating(DECODE, COMPUTE, 1, n=3)))
    assert stragglers(few, CTX) is None  # too few reads to say


@pytest.mark.parametrize(
    ("frames", "wait", "collective"),
    [
        (("barrier (distributed_c10d.py:4100)", "main (t.py:1)"), "barrier", True),
        (("wait (distributed_c10d.py:300)", "main (t.py:1)"), "wait", False),
        (("_wait_for_workers (agent.py:3)",), "_wait_for_workers", True),
        (("accept (socket.py:294)", "serve (s.py:8)"), "socket accept", False),
        (("get (queues.py:103)", "loop (w.py:3)"), "queue get", False),
        (("result (_base.py:451)", "main (t.py:1)"), "future result", False),
        (("sleep (retry.py:5)",), "sleep", False),
        (("matmul_loop (model.py:12)",), None, False),
    ],
)
def test_waits_are_named_from_the_innermost_frames(frames: tuple[str, ...], wait: str | None, collective: bool) -> None:
    assert classify(frames) == (wait, collective)


def test_stages_from_the_frames() -> None:
    assert stage_of(("generate (vllm_rollout.py:88)", "main (t.py:1)")) == "generation"
    assert stage_of(("compute_score (reward.py:9)",)) == "reward"
    assert stage_of(("update_weights_from_tensor (sync.py:9)",)) == "weight sync"
    assert stage_of(("helper (x.py:1)",)) is None


# ----------------------------------------------------------------------------------------------------- sampler
def _sampler(reader: object, clock: FakeClock, cpu: list[float], woke_every: int = 2, **kw: object) -> StackSampler:
    me = os.getpid()
    ticks = iter(range(100))
    return StackSampler(
        lambda: [StackTarget(me, "rank 0")],
        clock,
        reader=reader,  # type: ignore[arg-type]
        cpu=lambda: cpu[0],
        thread_clock=lambda pid: ThreadClock(5, next(ticks) // woke_every),  # woke every other read by default
        **kw,  # type: ignore[arg-type]
    )


def test_the_sampler_keeps_a_bounded_history_per_process_and_paces_itself_to_its_budget() -> None:
    clock, cpu = FakeClock(NOW), [0.0]

    def read(target: StackTarget) -> tuple[tuple[str, ...], str, str | None]:
        cpu[0] += 0.05  # each read costs 50 ms of CPU
        return ALLREDUCE, ALLREDUCE[0], None

    sampler = _sampler(read, clock, cpu, woke_every=1, interval_s=2.0, cpu_budget=0.01, history=4)
    for _ in range(6):
        wait = sampler.round()
        clock.advance(wait)
    # 50 ms a round at 1 % of a core (paced to 90 % of it): a round every 5.6 s, not every 2 s
    assert wait == pytest.approx(0.05 / 0.009)
    st = sampler.state()
    assert st.available and st.interval_s == pytest.approx(0.05 / 0.009)
    assert st.cpu_fraction == pytest.approx(0.009)
    (proc,) = st.processes
    assert proc.pid == os.getpid() and len(proc.samples) == 4 and proc.samples[-1].collective
    assert [x.blocked for x in proc.samples] == [False] * 4  # it woke between every two reads


def test_a_main_thread_that_neither_ran_nor_woke_is_not_read_again_and_stands_where_it_stood() -> None:
    """Issue 35: a rank asleep or hung in a wait costs no py-spy: its frames are those of the last read, blocked."""
    clock, cpu, reads = FakeClock(NOW), [0.0], []

    def read(target: StackTarget) -> tuple[tuple[str, ...], str, str | None]:
        reads.append(clock.time())
        cpu[0] += 0.05
        return ALLREDUCE, ALLREDUCE[0], None

    sampler = _sampler(read, clock, cpu, woke_every=3, interval_s=2.0, cpu_budget=0.01)
    waits = []
    for _ in range(6):  # the thread clock moves before the 1st and the 4th round only
        waits.append(sampler.round())
        clock.advance(10.0)
    assert reads == [NOW, NOW + 30]  # py-spy ran twice, not six times
    (proc,) = sampler.state().processes
    assert [x.at for x in proc.samples] == [NOW + 10 * i for i in range(6)]  # every round still a read, in time
    assert all(x.frames == ALLREDUCE and x.collective for x in proc.samples)
    assert [x.blocked for x in proc.samples] == [None, True, True, False, True, True]
    assert waits[0] == pytest.approx(0.05 / 0.009) and waits[1] == 2.0  # a round without py-spy costs nothing


def test_a_read_that_failed_is_tried_again_even_when_the_thread_did_not_move() -> None:
    clock, cpu, said = FakeClock(NOW), [0.0], iter(["py-spy timed out", None, None])

    def read(target: StackTarget) -> tuple[tuple[str, ...], str, str | None]:
        error = next(said)
        return ((), "", error) if error else (ALLREDUCE, ALLREDUCE[0], None)

    sampler = _sampler(read, clock, cpu, woke_every=100)  # the thread never moves
    for _ in range(3):
        sampler.round()
        clock.advance(10.0)
    (proc,) = sampler.state().processes
    assert proc.error is None and len(proc.samples) == 2  # read again after the failure, then taken from that read


def test_a_refused_ptrace_or_a_missing_py_spy_is_not_available_with_why(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(NOW)

    def refused(target: StackTarget) -> tuple[tuple[str, ...], str, str | None]:
        return (), "", "ptrace not permitted: Permission denied (os error 1)"

    sampler = _sampler(refused, clock, [0.0])
    sampler.round()
    st = sampler.state()
    assert not st.available and st.reason is not None and st.reason.startswith("ptrace not permitted")
    monkeypatch.setattr(sampler_mod, "py_spy", lambda: None)
    missing = StackSampler(lambda: [], clock)
    assert missing.round() == missing.interval_s
    assert missing.state().reason == "py-spy is not installed (pip install py-spy)"


def _proc_dir(root: Path, pid: int, uid: int) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")


def test_root_never_reads_another_users_process(tmp_path: Path) -> None:
    _proc_dir(tmp_path, 10, 1000)
    _proc_dir(tmp_path, 11, 1001)
    assert may_read(10, 1000, str(tmp_path), euid=0)  # the run directory's owner
    assert not may_read(11, 1000, str(tmp_path), euid=0)  # another user's, even for root
    assert may_read(11, None, str(tmp_path), euid=1001)  # one's own
    assert not may_read(12, 1000, str(tmp_path), euid=0)  # gone


def test_without_ranks_a_process_running_in_one_frame_is_a_long_step_beside_idle_helpers() -> None:
    trainer = SampledProcess(10, 1.0, "python train.py (pid 10)", None, tuple(_still(COMPUTE, NOW - 240, False)))
    worker = SampledProcess(11, 1.0, "pt_data_worker (pid 11)", None, tuple(_still(FETCH, NOW - 240)))
    assert stack_run_state(_snap(trainer, worker), CTX, UNKNOWN).state == "unknown"


def test_a_rank_gone_mid_collective_is_named_beside_the_rank_that_waits_for_it() -> None:
    gone = SampledProcess(101, 1.0, "rank 1", 1, tuple(_still(DECODE, NOW - 200)[:3]), alive=False)
    snap = _snap(_proc(0, _still(ALLREDUCE, NOW - 120)), gone)
    rs = stack_run_state(snap, CTX, UNKNOWN)
    assert rs.state == "hung", rs
    assert "rank 1 (pid 101) is gone, last seen in decode_and_augment (data.py:40)" in rs.why, rs.why


def test_a_one_shot_report_shows_the_straggler_the_running_watchdog_names() -> None:
    said = "A straggler slows the run (rank 1): rank 0 spends 80 % of its time waiting in all_reduce for rank 1."
    wd = WatchdogStatus(True, os.getpid() + 1, NOW - 600, 1.0, straggler=said)
    snap = Snapshot(host="h", time=NOW, profile="generic", run_dir="/r", watchdog=wd)
    (found,) = [f for f in diagnose(snap, CTX) if f.code == "straggler"]
    assert found.message.startswith(said.rstrip(".")) and f"as the watchdog, pid {wd.pid}" in found.message
    stale = replace(wd, stale=True)
    assert not [f for f in diagnose(replace(snap, watchdog=stale), CTX) if f.code == "straggler"]


def test_py_spy_records_raw_lines_are_the_main_threads_stacks_innermost_first() -> None:
    raw = (
        "thread (14882): Thread-1 (heartbeat);Thread.run (threading.py:982);heartbeat (train.py:78) 5\n"
        "thread (14875): MainThread;<module> (train.py:166);rank_main (train.py:110);all_reduce (train.py:64) 4\n"
        "thread (14875): MainThread;<module> (train.py:166);rank_main (train.py:106);compute (train.py:40) 1\n"
    )
    assert sampler_mod.parse_raw(14875, raw) == [
        (("all_reduce (train.py:64)", "rank_main (train.py:110)", "<module> (train.py:166)"), 4),
        (("compute (train.py:40)", "rank_main (train.py:106)", "<module> (train.py:166)"), 1),
    ]


def test_a_window_of_records_becomes_reads_the_most_frequent_last_with_the_windows_clocks() -> None:
    clock = FakeClock(NOW)
    clocks = iter([ThreadClock(5, 9), ThreadClock(5, 9)])

    def window(targets: Sequence[StackTarget], seconds: float, stop: object) -> dict[int, object]:
        clock.advance(seconds)
        return {t.pid: ([(COMPUTE, 1), (ALLREDUCE, 3)], None) for t in targets}

    sampler = StackSampler(
        lambda: [StackTarget(os.getpid(), "rank 0")],
        clock,
        interval_s=4.0,
        reader=lambda t: ((), "", None),
        window=window,  # type: ignore[arg-type]
        cpu=lambda: 0.0,
        thread_clock=lambda pid: next(clocks),
    )
    assert sampler.round() == 0.0  # the window itself was the interval
    (proc,) = sampler.state().processes
    assert [x.frames for x in proc.samples] == [COMPUTE, ALLREDUCE, ALLREDUCE, ALLREDUCE]
    assert [x.at - NOW for x in proc.samples] == [1.0, 2.0, 3.0, 4.0]
    assert all(x.blocked for x in proc.samples)  # the main thread neither ran nor woke over the window


def test_a_stragglers_place_is_what_only_it_does_not_its_step_loop() -> None:
    """Every rank spends part of its step in the same loop (a GPU kernel, a sleep): the slow rank is read there more
    often than in its decode, but the decode is what the others do not do, so that is where it is."""
    frames = [COMPUTE] * 6 + [DECODE] * 5 + [ALLREDUCE]
    slow = _proc(1, [_sample(NOW - 80 + i * 7, f, False) for i, f in enumerate(frames)])
    waiting = _proc(0, _alternating(ALLREDUCE, COMPUTE, 0.75))
    report = stragglers(_snap(waiting, slow), CTX)
    assert report is not None and report.slow == ("rank 1",)
    assert "for rank 1, which is in decode_and_augment (data.py:40) 42 % of its time" in report.message, report.message


SIM_WAIT = ("all_reduce (distributed_c10d.py:50)", "train_step (ddp.py:120)", "hang (ddp.py:131)")
HEARTBEAT = ("never_reaches_collective (ddp.py:114)", "hang (ddp.py:126)", "main (ddp.py:84)")
OLD_WAIT = ("wait_in_collective (ddp.py:118)", "hang (ddp.py:126)", "main (ddp.py:84)")


def test_where_no_frame_is_a_known_collective_who_waits_for_whom_is_said_to_be_unknown() -> None:
    """The hang demo's old frames: rank 0 blocked in a function of its own, rank 1 printing a heartbeat. Which one
    never woke decided the culprit ("rank 0 … never woke; rank 1 waits for it"): backwards. Without a known
    collective frame, the finding says it does not know, and where each rank stands."""
    snap = _snap(_proc(0, _still(OLD_WAIT, NOW - 240)), _proc(1, _still(HEARTBEAT, NOW - 240, blocked=False)))
    rs = stack_run_state(snap, CTX, RunState("hung", "no progress since 09:10", NOW - 300))
    assert "waits for it" not in rs.why, rs.why
    assert "which rank waits for which is not known (no rank stands in a known collective frame" in rs.why, rs.why
    assert "rank 0 has been in wait_in_collective (ddp.py:118) for 4m; its main thread never woke" in rs.why, rs.why
    assert "rank 1 has been in never_reaches_collective (ddp.py:114) for 4m; its main thread keeps running" in rs.why


def test_ranks_in_a_collective_wait_for_the_rank_outside_one_whether_their_threads_sleep_or_spin() -> None:
    """The simulator's ranks stand where real ones do: rank 0 in torch's all_reduce (it polls, as NCCL spins), rank 1
    in its own loop. Past the window that is a hang from the stacks alone, with rank 1 the one waited for."""
    snap = _snap(_proc(0, _still(SIM_WAIT, NOW - 240, blocked=False)), _proc(1, _still(HEARTBEAT, NOW - 240, False)))
    rs = stack_run_state(snap, CTX, UNKNOWN)
    assert rs.state == "hung", rs
    assert "rank 1 has been in never_reaches_collective (ddp.py:114) for 4m, not in a collective" in rs.why, rs.why
    assert "rank 0 waits for it in all_reduce (distributed_c10d.py:50)" in rs.why, rs.why
    pids = {f.code: f.command for f in diagnose_and_decide(snap)}
    assert pids.get("hung") == "py-spy dump --pid 101", pids


def diagnose_and_decide(snap: Snapshot) -> tuple[Finding, ...]:
    from rlwatch.common.state import LiveRun
    from rlwatch.engine.diagnosis import decide

    live = LiveRun(True, None, NOW - 600, members=((100, "child"), (101, "child")))
    s = replace(snap, live_run=live, run_state=stack_run_state(snap, CTX, UNKNOWN))
    s = replace(s, findings=diagnose(s, CTX))
    return decide(s, CTX)[1]


def test_a_watchdogs_hang_that_says_where_the_ranks_stood_is_said_with_this_reading_once() -> None:
    """The dashboard beside a watchdog said "where the ranks stand" twice: the watchdog's (23 s old) and its own."""
    snap = _snap(_proc(0, _still(SIM_WAIT, NOW - 120, blocked=False)), _proc(1, _still(HEARTBEAT, NOW - 120, False)))
    theirs = (
        "no progress since 09:10 (2m); where the ranks stand: rank 1 has been in never_reaches_collective (ddp.py:114) "
        "for 23s (as the watchdog, pid 7995, watching the logs live, sees it)"
    )
    rs = stack_run_state(snap, CTX, RunState("hung", theirs, NOW - 300))
    assert rs.why.count("where the ranks stand") == 1, rs.why
    assert "for 2m, not in a collective" in rs.why and rs.why.endswith("watching the logs live, sees it)"), rs.why
