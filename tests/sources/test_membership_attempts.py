"""Launches (attempts) from the process tree as /proc shows it, built by hand: which launch lost its launcher, how
its processes are grouped, and which one is the live run."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rlwatch.common.state import EventSummary, GpuHolder, LogLine, Severity
from rlwatch.engine.attempts import AttemptTracker, busy_after
from rlwatch.sources.membership import RUN, ProcRow, RunView, _add_elastic_siblings, _launches

T0 = 1_800_000_000.0
BASH = ProcRow(500, 1, 500, 500, T0 - 3600, "bash", "/runs/a")
INIT = ProcRow(1, 0, 1, 1, T0 - 7200, "process_api", "/")
ELASTIC = {"TORCHELASTIC_RUN_ID": "none", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def _procs(*ps: ProcRow) -> dict[int, ProcRow]:
    return {p.pid: p for p in (INIT, BASH, *ps)}


def _env(table: Mapping[int, Mapping[str, str]]) -> Callable[[int], Mapping[str, str] | None]:
    return lambda pid: table.get(pid)


def test_torchrun_ranks_whose_agent_is_gone_are_one_earlier_attempt_beside_a_new_run() -> None:
    """torchrun starts each rank in a session of its own: after the agent's SIGKILL only their environment ties them."""
    r0 = ProcRow(878, 1, 878, 878, T0 - 600, "python3", "/runs/a")
    r1 = ProcRow(879, 1, 879, 879, T0 - 600, "python3", "/runs/a")
    new = ProcRow(923, 500, 923, 500, T0 - 30, "python3", "/runs/a")
    env = {878: ELASTIC, 879: {**ELASTIC, "LOCAL_RANK": "1"}}
    launches = _launches(
        {878: "writes train.log", 879: "x", 923: "writes train.log"}, _procs(r0, r1, new), {}, _env(env)
    )
    assert [(x.pids, x.current) for x in launches] == [((878, 879), False), ((923,), True)]
    earlier = launches[0]
    assert earlier.launcher is None and earlier.launcher_name == "torchrun" and not earlier.launcher_alive
    assert earlier.orphaned is not None and "elastic agent is gone" in earlier.orphaned


def test_ranks_of_another_directorys_torchrun_with_the_same_rendezvous_are_not_this_runs() -> None:
    """A plain ``torchrun`` gives every launch run id ``none`` and port 29500: the environment alone would tie a
    leftover rank of a run elsewhere on the host to this run's ranks (seen on a GPU host, where an earlier test's
    orphaned ranks joined the next run's earlier attempt). The directory the agent started them in tells them apart."""
    r0 = ProcRow(878, 1, 878, 878, T0 - 600, "python3", "/runs/a")
    r1 = ProcRow(879, 1, 879, 879, T0 - 600, "python3", "/runs/a")
    other = ProcRow(700, 1, 700, 700, T0 - 900, "python3", "/runs/b")
    env = {878: ELASTIC, 879: {**ELASTIC, "LOCAL_RANK": "1"}, 700: ELASTIC}
    members = {878: "writes train.log"}
    _add_elastic_siblings(members, _procs(r0, r1, other), (), _env(env))
    assert sorted(members) == [878, 879]
    launches = _launches({878: "w", 879: "w", 700: "w"}, _procs(r0, r1, other), {}, _env(env))
    assert sorted(x.pids for x in launches) == [(700,), (878, 879)]


def test_a_launcher_seen_before_and_gone_since_is_named_by_its_pid() -> None:
    r0 = ProcRow(878, 1, 878, 878, T0 - 600, "python3", "/runs/a")
    r1 = ProcRow(879, 1, 879, 879, T0 - 600, "python3", "/runs/a")
    new = ProcRow(923, 500, 923, 500, T0 - 30, "python3", "/runs/a")
    former = {878: (T0 - 600, 837), 879: (T0 - 600, 837)}
    launches = _launches({878: "w", 879: "w", 923: "w"}, _procs(r0, r1, new), former)
    assert launches[0].pids == (878, 879) and launches[0].launcher == 837 and not launches[0].current


def test_a_process_started_as_itself_and_reparented_lost_nothing() -> None:
    """``nohup python train.py &`` from a shell since closed: it leads its own group, no rank's environment."""
    nohup = ProcRow(700, 1, 700, 500, T0 - 600, "python3", "/runs/a")
    launches = _launches({700: "writes train.log"}, _procs(nohup))
    assert len(launches) == 1 and launches[0].orphaned is None and launches[0].current


def test_children_of_a_killed_launcher_keep_its_group_and_one_orphaned_attempt_alone_is_the_run() -> None:
    """DeepSpeed's launcher (no elastic agent) SIGKILLed: its ranks carry RANK/LOCAL_RANK/WORLD_SIZE."""
    k0 = ProcRow(801, 1, 800, 800, T0 - 600, "python3", "/runs/a")
    k1 = ProcRow(802, 1, 800, 800, T0 - 600, "python3", "/runs/a")
    env = {pid: {"RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": "2"} for i, pid in enumerate((801, 802))}
    launches = _launches({801: "w", 802: "w"}, _procs(k0, k1), {}, _env(env))
    assert len(launches) == 1
    only = launches[0]
    assert only.current and only.pids == (801, 802) and only.launcher == 800
    assert only.orphaned is not None and "pid 800, its process group's leader" in only.orphaned


def test_init_that_leads_the_group_started_its_children_itself() -> None:
    """A container whose command is the launcher: its ranks' parent is pid 1 and nothing was lost."""
    init = ProcRow(1, 0, 1, 1, T0 - 7200, "torchrun", "/runs/a")
    rank = ProcRow(30, 1, 1, 1, T0 - 7000, "python3", "/runs/a")
    launches = _launches({30: "w"}, {1: init, 30: rank})
    assert launches[0].orphaned is None


def test_a_younger_orphaned_launch_may_be_the_live_runs_own() -> None:
    live = ProcRow(900, 500, 900, 500, T0 - 600, "python3", "/runs/a")
    late = ProcRow(950, 1, 940, 940, T0 - 10, "python3", "/runs/a")
    launches = _launches({900: "w", 950: "w"}, _procs(live, late))
    assert all(x.current for x in launches)


def _view_with_earlier_holders() -> tuple[RunView, tuple[GpuHolder, ...]]:
    r0 = ProcRow(878, 1, 878, 878, T0 - 600, "python3", "/runs/a")
    r1 = ProcRow(879, 1, 879, 879, T0 - 600, "python3", "/runs/a")
    new = ProcRow(923, 500, 923, 500, T0 - 30, "python3", "/runs/a")
    procs = _procs(r0, r1, new)
    env = {878: ELASTIC, 879: {**ELASTIC, "LOCAL_RANK": "1"}}
    launches = _launches({878: "w", 879: "w", 923: "w"}, procs, {}, _env(env))
    view = RunView(
        run_dir="/runs/a",
        procs=procs,
        members={923: "writes train.log"},
        core={923: "writes train.log"},
        weak=frozenset(),
        roles={},
        container_started_at=None,
        searched="",
        launches=launches,
        earlier={878: "writes train.log", 879: "writes train.log"},
    )

    def holder(pid: int, gpu: int) -> GpuHolder:
        verdict = view.verdict(pid)
        return GpuHolder(pid, T0 - 600, "root", ("python3", "train.py"), (f"/dev/nvidia{gpu}",), 7_800_000_000,
                         in_run=verdict.status == RUN, reason=None, evidence=verdict.why, gpus=(gpu,), attribution="nvml")  # fmt: skip

    return view, (holder(878, 0), holder(879, 1))


def test_an_earlier_attempt_that_still_writes_is_unknown_never_a_stray_on_its_own() -> None:
    view, holders = _view_with_earlier_holders()
    assert all(h.status == "unknown" for h in holders)
    assert "of an earlier attempt beside the live run" in (holders[0].evidence or "")
    attempts, after = AttemptTracker(60.0).records(view, holders, None, T0)
    assert [a.current for a in attempts] == [False, True]
    assert attempts[0].gpus == (0, 1) and attempts[0].gpu_mem_bytes == 15_600_000_000 and attempts[0].stray is None
    assert all(h.status == "unknown" for h in after)


def test_the_new_run_failing_busy_on_their_gpu_makes_the_earlier_attempt_strays_with_that_reason() -> None:
    view, holders = _view_with_earlier_holders()
    text = "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"
    line = LogLine("/runs/a/train.log", 12, text, T0 - 5)
    busy = busy_after(
        {"cuda_busy": EventSummary("cuda_busy", Severity.CRITICAL, 1, T0 - 5, T0 - 5, 1.0, 1, {}, (line,))}, T0 - 30
    )
    assert busy is not None
    assert busy_after({"cuda_busy": busy}, T0) is None  # a failure before the new run began is not the new run's
    attempts, after = AttemptTracker(60.0).records(view, holders, busy, T0)
    assert all(h.status == "stray" for h in after)
    assert "busy or unavailable" in (after[0].reason or "") and "holds GPU 0, 1" in (after[0].reason or "")
    assert attempts[0].stray is not None


def test_a_server_left_running_by_a_script_that_exited_serves_the_live_run() -> None:
    server = ProcRow(600, 1, 590, 590, T0 - 900, "python3", "/runs/a")  # `nohup server &` from start_server.sh, gone
    trainer = ProcRow(923, 500, 923, 500, T0 - 30, "python3", "/runs/a")
    launches = _launches({600: "w", 923: "w"}, _procs(server, trainer), servers={600})
    assert all(x.current for x in launches)
    # A script that started it and exited is no launcher it lost: whatever its role, it is no earlier attempt.
    assert all(x.current and x.orphaned is None for x in _launches({600: "w", 923: "w"}, _procs(server, trainer)))


def test_runs_a_launch_script_started_with_nohup_and_exited_lost_no_launcher() -> None:
    """``(cd runA && nohup python3 train.py > train.log &); (cd runB && nohup … &)`` in a script or one shell line
    that has exited: both keep the group of the gone shell and were re-parented to init, with no rank's
    environment. Ordinary runs (issue 42, M7): nothing is "lost", nothing to stop before starting again."""
    a = ProcRow(801, 1, 800, 500, T0 - 600, "python3", "/runs/a")
    b = ProcRow(803, 1, 800, 500, T0 - 600, "python3", "/runs/b")
    for launches in (_launches({801: "w"}, _procs(a, b)), _launches({801: "w", 803: "w"}, _procs(a, b))):
        assert all(x.orphaned is None and x.current for x in launches)
