"""A distributed job over two hosts joined into one verdict (export/fleet/job): each host's exporter says which job its
ranks belong to (from the ranks' real environments, as torchrun sets them) and where each stands; the fleet joins them
and names the node, the rank and the collective, and never blames a host whose ranks all wait."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import (
    FlightState,
    RasRank,
    RasState,
    RunState,
    SampledProcess,
    Snapshot,
    StackSample,
    StackSampling,
)
from rlwatch.engine.diagnosis.base import Context
from rlwatch.engine.diagnosis.collectives import collectives
from rlwatch.engine.job import JobWatch
from rlwatch.export.exporter import SnapshotCollector, start_exporter
from rlwatch.export.fleet import host_from_samples, parse_exposition
from rlwatch.export.fleet.job import join_jobs
from rlwatch.sources.flight import read_flight_dump
from rlwatch.sources.sampler import classify
from rlwatch.tui.launch import main

pytestmark = pytest.mark.slow

NOW = 1_763_716_800.0
ALLREDUCE = ("all_reduce (distributed_c10d.py:3068)", "train_step (train.py:31)", "main (train.py:60)")
FETCH = ("fetch_batch_from_service (train.py:20)", "train_step (train.py:29)", "main (train.py:60)")
STEP = ("forward (model.py:12)", "train_step (train.py:30)", "main (train.py:60)")


def _env(rank: int, node: int) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank % 2),
        "GROUP_RANK": str(node),
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "exp-42",
    }


@pytest.fixture
def ranks() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Four rank processes with torchrun's environment (two per node), reading stdin until the test ends."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, env=_env(r, r // 2)
        )
        for r in range(4)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=30)


def _sampled(pid: int, rank: int, frames: Sequence[str], moving: bool = False) -> SampledProcess:
    wait, collective = classify(frames)
    samples = []
    for i in range(6):
        f = (*frames[:-1], f"main (train.py:{60 + i})") if moving else tuple(frames)
        samples.append(StackSample(NOW - 50 + 10 * i, f, f[0], wait, collective, None if i == 0 else not moving))
    return SampledProcess(pid, 1.0, f"rank {rank}", rank, tuple(samples))


def _host(name: str, procs: Sequence[SampledProcess], state: str = "hung") -> Snapshot:
    """A host's snapshot as its engine builds it: the job read from its ranks' real environments (engine/job)."""
    snap = Snapshot(
        host=name,
        time=NOW,
        profile="auto",
        run_dir="/job",
        sampling=StackSampling(True, None, "py-spy dump --nonblocking", 10.0, 0.005, tuple(procs)),
        run_state=RunState(state, "its ranks stand still"),
    )
    watch = JobWatch()
    watch.sample([(p.pid, p.create_time) for p in procs], (), snap, flight=False)
    return replace(snap, job=watch.job)


def _row(snap: Snapshot):  # type: ignore[no-untyped-def]
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, clock=FakeClock(NOW)))
    text = generate_latest(reg).decode()
    for pid in snap.sampling.processes if snap.sampling else ():  # no pid in any label
        assert f'"{pid.pid}"' not in text and f"pid {pid.pid}" not in text
    return host_from_samples(snap.host, parse_exposition(text), data_age_s=0.0, stale_after_s=60.0)


def test_the_job_names_the_node_rank_and_collective_the_others_wait_for(ranks: list[subprocess.Popen[bytes]]) -> None:
    pids = [p.pid for p in ranks]
    node_a = _host("node-a", [_sampled(pids[0], 0, ALLREDUCE), _sampled(pids[1], 1, ALLREDUCE)])
    node_b = _host("node-b", [_sampled(pids[2], 2, ALLREDUCE), _sampled(pids[3], 3, FETCH)])
    a, b = _row(node_a), _row(node_b)
    assert (a.run_job, a.node_rank, a.world_size) == ("rdzv:exp-42", 0, 4)
    assert [(r.rank, r.local_rank, r.state, r.wait) for r in b.ranks] == [
        (2, 0, "waiting", "all_reduce"),
        (3, 1, "elsewhere", None),
    ]
    (v,) = join_jobs([a, b])
    assert v.state == "hung" and v.culprit_host == "node-b" and v.culprit_ranks == (3,)
    assert v.message == (
        "job rdzv:exp-42: hung 50 s; node-b rank 3 never reached all_reduce (in fetch_batch_from_service, "
        "train.py:20); the 3 others wait for it"
    )
    assert dict(v.per_host)["node-a"] == "its ranks 0-1 wait for node-b rank 3"


def test_a_host_whose_ranks_all_wait_is_not_blamed(ranks: list[subprocess.Popen[bytes]]) -> None:
    pids = [p.pid for p in ranks]
    a = _row(_host("node-a", [_sampled(pids[0], 0, ALLREDUCE), _sampled(pids[1], 1, ALLREDUCE)]))
    (v,) = join_jobs([a])  # node-b's rlwatch does not answer
    assert v.culprit_host is None and v.culprit_ranks == () and v.missing_ranks == (2, 3)
    assert "the rank they wait for is among ranks 2-3, which no host reports" in v.message
    assert dict(v.per_host)["node-a"].endswith("the rank they wait for is on another node")


def test_a_healthy_job_says_nothing_is_wrong(ranks: list[subprocess.Popen[bytes]]) -> None:
    pids = [p.pid for p in ranks]
    rows = [
        _row(_host(f"node-{n}", [_sampled(pids[r], r, STEP, moving=True) for r in (2 * n, 2 * n + 1)], "progressing"))
        for n in (0, 1)
    ]
    (v,) = join_jobs(rows)
    assert v.state == "progressing" and v.culprit_ranks == () and v.missing_ranks == ()


def test_nccl_ras_gives_each_rank_its_collective_number_and_the_fleet_the_rank_behind(
    ranks: list[subprocess.Popen[bytes]],
) -> None:
    # No flight record on either node (the dumps were never written): NCCL RAS's job-wide counts, asked on each node,
    # say how many collectives each rank launched; each exporter exports its own ranks' numbers.
    pids = [p.pid for p in ranks]
    counts = {0: 4812, 1: 4812, 2: 4812, 3: 4811}
    ras = RasState(
        NOW - 5,
        "2.28.9",
        None,
        tuple(
            RasRank(r, n, "10.0.0.1" if r < 2 else "10.0.0.2", 700 + r, r % 2, "behind" if n < 4812 else "ok")
            for r, n in counts.items()
        ),
        "AllReduce",
    )
    node_a = replace(_host("node-a", [_sampled(pids[0], 0, ALLREDUCE), _sampled(pids[1], 1, ALLREDUCE)]), ras=ras)
    node_b = replace(_host("node-b", [_sampled(pids[2], 2, ALLREDUCE), _sampled(pids[3], 3, FETCH)]), ras=ras)
    a, b = _row(node_a), _row(node_b)
    assert [(r.rank, r.collective_seq) for r in a.ranks + b.ranks] == [(0, 4812), (1, 4812), (2, 4812), (3, 4811)]
    (v,) = join_jobs([a, b])
    assert v.culprit_host == "node-b" and v.culprit_ranks == (3,) and v.collective == "all_reduce #4812"
    # node-a alone says where the rank its ranks wait for stands, and never blames its own.
    (f,) = [f for f in collectives(node_a, Context()) if f.code == "collective_missing_rank"]
    assert f.message.startswith(
        "Rank 3 has launched up to operation 4811 while ranks 0, 1, 2 reached 4812 (NCCL RAS, AllReduce operations: "
        "rank 3 is process 703 on node 10.0.0.2, GPU 1); this host's ranks 0, 1 wait for it on another node"
    )


def test_fleet_json_joins_two_real_exporters(
    ranks: list[subprocess.Popen[bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pids = [p.pid for p in ranks]
    node_a = _host("node-a", [_sampled(pids[0], 0, ALLREDUCE), _sampled(pids[1], 1, ALLREDUCE)])
    node_b = _host("node-b", [_sampled(pids[2], 2, ALLREDUCE), _sampled(pids[3], 3, FETCH)])
    with (
        start_exporter(lambda: node_a, clock=FakeClock(NOW)) as ea,
        start_exporter(lambda: node_b, clock=FakeClock(NOW)) as eb,
    ):
        cfg = tmp_path / "fleet.yaml"
        cfg.write_text(f"fleet:\n  exporters: [127.0.0.1:{ea.port}, 127.0.0.1:{eb.port}]\n")
        code = main(["fleet", "--config", str(cfg), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    (job,) = out["jobs"]
    assert (job["job"], job["state"], job["culprit_host"], job["culprit_ranks"]) == (
        "rdzv:exp-42",
        "hung",
        "node-b",
        [3],
    )
    assert job["collective"] == "all_reduce"
    assert sorted(h["host"] for h in out["hosts"]) == ["node-a", "node-b"]


ITEM = ("main (train.py:56)",)  # real NCCL: a waiting rank stands at its own `.item()`, in no collective frame
REAL_JOB = Path(__file__).resolve().parents[1] / "real" / "job-2node-1gpu-watched"


def _ras(counts: dict[int, int]) -> RasState:
    top = max(counts.values())
    return RasState(
        NOW - 20,
        "2.28.9",
        None,
        tuple(
            RasRank(r, n, "10.0.0.1" if r < 2 else "10.0.0.2", 700 + r, r % 2, "behind" if n < top else "ok")
            for r, n in counts.items()
        ),
        "AllReduce",
    )


def test_ranks_waiting_outside_a_collective_frame_are_joined_by_nccl_ras(ranks: list[subprocess.Popen[bytes]]) -> None:
    """Live on the GPU host every rank stood 'elsewhere' (at `.item()`), and the job line said "progressing: no rank
    waits in a collective" while both hosts were hung and NCCL RAS had named the rank behind. node-a's state says
    unknown, as it did live after its flap: it is never read as progressing."""
    pids = [p.pid for p in ranks]
    ras = _ras({0: 4812, 1: 4812, 2: 4812, 3: 4811})
    a = _row(replace(_host("node-a", [_sampled(pids[0], 0, ITEM), _sampled(pids[1], 1, ITEM)], "unknown"), ras=ras))
    b = _row(replace(_host("node-b", [_sampled(pids[2], 2, ITEM), _sampled(pids[3], 3, FETCH)]), ras=ras))
    assert {r.state for r in a.ranks + b.ranks} == {"elsewhere"}
    assert (a.run_state, b.run_state) == ("unknown", "hung") and a.launched[3] == 4811
    (v,) = join_jobs([a, b])
    assert v.state == "hung" and v.culprit_host == "node-b" and v.culprit_ranks == (3,)
    assert v.message == (
        "job rdzv:exp-42: hung 50 s; node-b rank 3 never reached all_reduce #4812 (in fetch_batch_from_service, "
        "train.py:20); the 3 others wait for it"
    )
    assert dict(v.per_host) == {
        "node-a": "its ranks 0-1 wait for node-b rank 3",
        "node-b": "rank 3 never reached all_reduce #4812",
    }
    assert v.evidence == ("NCCL RAS",) and dict(v.host_states) == {"node-a": "unknown", "node-b": "hung"}
    # node-a alone holds the answer: the fleet still names node-b's rank, never one of node-a's.
    (alone,) = join_jobs([a])
    assert alone.culprit_ranks == (3,) and alone.culprit_host is None and "node-a" not in alone.message.split(";")[1]


def test_no_evidence_is_not_known_never_progressing(ranks: list[subprocess.Popen[bytes]]) -> None:
    pids = [p.pid for p in ranks]
    a = _row(_host("node-a", [_sampled(pids[0], 0, ITEM), _sampled(pids[1], 1, ITEM)], "unknown"))
    b = _row(_host("node-b", [_sampled(pids[2], 2, ITEM), _sampled(pids[3], 3, ITEM)], "unknown"))
    (v,) = join_jobs([a, b])
    assert v.state != "progressing" and v.culprit_ranks == ()
    assert v.message.startswith("job rdzv:exp-42: not known (every host unknown)"), v.message


def test_two_healthy_hosts_say_the_job_progresses_and_nothing_else(ranks: list[subprocess.Popen[bytes]]) -> None:
    pids = [p.pid for p in ranks]
    snaps = [
        replace(
            _host(f"node-{n}", [_sampled(pids[r], r, STEP, moving=True) for r in (2 * n, 2 * n + 1)], "progressing"),
            ras=_ras({0: 4812, 1: 4812, 2: 4812, 3: 4811}),  # counts differ by one between launches all the time
        )
        for n in (0, 1)
    ]
    assert [f for s in snaps for f in collectives(s, Context())] == []
    rows = [_row(s) for s in snaps]
    assert all(r.evidence == () and not r.launched and r.calls == () for r in rows)
    (v,) = join_jobs(rows)
    assert v.state == "progressing" and v.message == "job rdzv:exp-42: progressing on 2 hosts"
    assert v.culprit_ranks == () and v.per_host == () and v.collective is None


def test_a_mismatch_split_across_two_nodes_dumps_is_named_by_the_fleet(tmp_path: Path) -> None:
    """The mismatched job on the GPU host: each node's flight record holds only its own rank's #13 (rank 0's
    all_reduce of 1 element, rank 1's of 4194304); joined, the fleet names the mismatch."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()"],
            stdin=subprocess.PIPE,
            env={**_env(r, r), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "exp-gpu"},
        )
        for r in range(2)
    ]
    try:
        rows = []
        for r, node in enumerate(("node-a", "node-b")):
            dump = read_flight_dump(str(REAL_JOB / "job-mismatch" / node / f"nccl_trace_rank_{r}"), r)
            assert dump.error is None, dump.error
            flight = FlightState(NOW - 5, dump.ops, dump.progress, tuple(dump.groups.items()), (r,))
            snap = replace(_host(node, [_sampled(procs[r].pid, r, ITEM)], "unknown"), flight=flight)
            rows.append(_row(snap))
        assert [(c.rank, c.seq, c.op, c.numel) for row in rows for c in row.calls] == [
            (0, 13, "all_reduce", 1),
            (1, 13, "all_reduce", 4194304),
        ]
        (v,) = join_jobs(rows)
        assert v.state != "progressing" and v.collective == "#13"
        assert v.message.endswith(
            "collectives differ across hosts at #13: node-a rank 0 called all_reduce of 1 element; node-b rank 1 "
            "called all_reduce of 4194304 elements"
        ), v.message
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=30)


def test_stacks_still_for_a_moment_on_hosts_that_progress_name_no_rank(ranks: list[subprocess.Popen[bytes]]) -> None:
    """Both hosts say "progressing"; rank 0 stands in a write while ranks 1-3 wait in all_reduce. Still for 12 s, or
    while a host's checkpoint is being written, that is a rank saving or evaluating alone: the job progresses. Still
    for EARLY_HANG_S or more with no checkpoint written, the stacks name it."""
    pids = [p.pid for p in ranks]
    write = ("write (serialization.py:500)", "save (train.py:40)", "main (train.py:60)")
    a = _row(_host("node-a", [_sampled(pids[0], 0, write), _sampled(pids[1], 1, ALLREDUCE)], "progressing"))
    b = _row(_host("node-b", [_sampled(pids[2], 2, ALLREDUCE), _sampled(pids[3], 3, ALLREDUCE)], "progressing"))

    def still(row, seconds: float, saved: float | None = None):  # type: ignore[no-untyped-def]
        return replace(row, ranks=tuple(replace(r, still_s=seconds) for r in row.ranks), checkpoint_age_s=saved)

    (v,) = join_jobs([still(a, 12.0), still(b, 12.0)])
    assert v.state == "progressing" and v.culprit_ranks == (), v.message
    (v,) = join_jobs([still(a, 40.0, saved=30.0), still(b, 40.0)])
    assert v.state == "progressing" and v.culprit_ranks == (), v.message
    (v,) = join_jobs([still(a, 40.0, saved=300.0), still(b, 40.0)])
    assert v.state == "hung" and v.culprit_ranks == (0,), v.message
