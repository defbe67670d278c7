"""Launches (attempts) from the process tree as /proc shows it, built by hand: which launch lost its launcher, how
its processes are grouped, and which one is the live run."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rlwatch.sources.membership import Proc, _launches

T0 = 1_800_000_000.0
BASH = Proc(500, 1, 500, 500, T0 - 3600, "bash", "/runs/a")
INIT = Proc(1, 0, 1, 1, T0 - 7200, "process_api", "/")
ELASTIC = {"TORCHELASTIC_RUN_ID": "none", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def _procs(*ps: Proc) -> dict[int, Proc]:
    return {p.pid: p for p in (INIT, BASH, *ps)}


def _env(table: Mapping[int, Mapping[str, str]]) -> Callable[[int], Mapping[str, str] | None]:
    return lambda pid: table.get(pid)


def test_torchrun_ranks_whose_agent_is_gone_are_one_earlier_attempt_beside_a_new_run() -> None:
    """torchrun starts each rank in a session of its own: after the agent's SIGKILL only their environment ties them."""
    r0 = Proc(878, 1, 878, 878, T0 - 600, "python3", "/runs/a")
    r1 = Proc(879, 1, 879, 879, T0 - 600, "python3", "/runs/a")
    new = Proc(923, 500, 923, 500, T0 - 30, "python3", "/runs/a")
    env = {878: ELASTIC, 879: {**ELASTIC, "LOCAL_RANK": "1"}}
    launches = _launches(
        {878: "writes train.log", 879: "x", 923: "writes train.log"}, _procs(r0, r1, new), {}, _env(env)
    )
    assert [(x.pids, x.current) for x in launches] == [((878, 879), False), ((923,), True)]
    earlier = launches[0]
    assert earlier.launcher is None and earlier.launcher_name == "torchrun" and not earlier.launcher_alive
    assert earlier.orphaned is not None and "elastic agent is gone" in earlier.orphaned


def test_a_launcher_seen_before_and_gone_since_is_named_by_its_pid() -> None:
    r0 = Proc(878, 1, 878, 878, T0 - 600, "python3", "/runs/a")
    r1 = Proc(879, 1, 879, 879, T0 - 600, "python3", "/runs/a")
    new = Proc(923, 500, 923, 500, T0 - 30, "python3", "/runs/a")
    former = {878: (T0 - 600, 837), 879: (T0 - 600, 837)}
    launches = _launches({878: "w", 879: "w", 923: "w"}, _procs(r0, r1, new), former)
    assert launches[0].pids == (878, 879) and launches[0].launcher == 837 and not launches[0].current


def test_a_process_started_as_itself_and_reparented_lost_nothing() -> None:
    """``nohup python train.py &`` from a shell since closed: it leads its own group, no rank's environment."""
    nohup = Proc(700, 1, 700, 500, T0 - 600, "python3", "/runs/a")
    launches = _launches({700: "writes train.log"}, _procs(nohup))
    assert len(launches) == 1 and launches[0].orphaned is None and launches[0].current


def test_children_of_a_killed_launcher_keep_its_group_and_one_orphaned_attempt_alone_is_the_run() -> None:
    k0 = Proc(801, 1, 800, 800, T0 - 600, "python3", "/runs/a")
    k1 = Proc(802, 1, 800, 800, T0 - 600, "python3", "/runs/a")
    launches = _launches({801: "w", 802: "w"}, _procs(k0, k1))
    assert len(launches) == 1
    only = launches[0]
    assert only.current and only.pids == (801, 802) and only.launcher == 800
    assert only.orphaned is not None and "pid 800, its process group's leader" in only.orphaned


def test_init_that_leads_the_group_started_its_children_itself() -> None:
    """A container whose command is the launcher: its ranks' parent is pid 1 and nothing was lost."""
    init = Proc(1, 0, 1, 1, T0 - 7200, "torchrun", "/runs/a")
    rank = Proc(30, 1, 1, 1, T0 - 7000, "python3", "/runs/a")
    launches = _launches({30: "w"}, {1: init, 30: rank})
    assert launches[0].orphaned is None


def test_a_younger_orphaned_launch_may_be_the_live_runs_own() -> None:
    live = Proc(900, 500, 900, 500, T0 - 600, "python3", "/runs/a")
    late = Proc(950, 1, 940, 940, T0 - 10, "python3", "/runs/a")
    launches = _launches({900: "w", 950: "w"}, _procs(live, late))
    assert all(x.current for x in launches)
