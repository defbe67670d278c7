"""A fixed fleet for the fleet screen's snapshot and pilot tests: every status a host can have, and one failure
shared by two hosts. Every value is fixed; times are UTC on 2025-11-21 (the tests pin the time zone)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rlwatch.common.state import Severity
from rlwatch.export.fleet import FleetException, FleetFinding, FleetGpu, FleetHost, FleetProcess, FleetSnapshot
from rlwatch.export.fleet.model import FleetRank

NOW = 1_763_716_800.0  # 2025-11-21 09:20:00 UTC
GB = 1_000_000_000
CRIT, WARN, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO

SHARED_SIG = "50a9fb7ab353"
SHARED_TITLE = "AttributeError: 'Namespace' object has no attribute 'model_id'"


def gpus(n: int, util: float, used_gb: float) -> tuple[FleetGpu, ...]:
    return tuple(FleetGpu(str(i), util, used_gb * GB, 141 * GB) for i in range(n))


def areal(name: str, **changes: Any) -> FleetHost:
    base = FleetHost(
        key=f"10.244.3.{17 + int(name[-1])}:9400",
        host=name,
        job="rlwatch",
        profile="areal",
        run_dir=f"/data/areal/experiments/{name}",
        stale=False,
        age_s=1.2,
        step=1869,
        total_steps=3000,
        steps_per_hour=620.0,
        stalled=False,
        finished=False,
        reward=0.612,
        server_up=True,
        gpus=gpus(8, 0.87, 118),
        mem_total_bytes=2000 * GB,
        mem_available_bytes=1610 * GB,
        events={"step": 1869, "weight_update": 1869, "checkpoint_saved": 37, "traceback": 0},
        checkpoint_step=1850,
        checkpoint_age_s=1540.0,
        resume_step=1851,
        processes=(
            FleetProcess("launcher", "launcher", True, 310e6, 0),
            FleetProcess("server", "server", True, 21.4 * GB, 0),
            FleetProcess("trainer", "trainer", True, 48.2 * GB, 0),
        ),
    )
    return replace(base, **changes)


def startup_crash(name: str, attempt_at: float) -> FleetHost:
    return FleetHost(
        key=f"10.244.5.{int(name[-1])}:9400",
        host=name,
        job="rlwatch",
        profile="trl",
        run_dir=f"/workspace/trl-grpo/{name}",
        stale=False,
        age_s=0.8,
        step=None,
        total_steps=500,
        steps_per_hour=None,
        stalled=False,
        server_up=False,
        gpus=gpus(2, 0.0, 61),
        mem_total_bytes=512 * GB,
        mem_available_bytes=470 * GB,
        events={"traceback": 3, "restart": 3, "child_failed": 3},
        findings=(FleetFinding(CRIT, "crash_repeating"), FleetFinding(CRIT, "server_unhealthy")),
        exception=FleetException(SHARED_SIG, "AttributeError", SHARED_TITLE, attempt_at, 3),
        processes=(FleetProcess("launcher", "launcher", True, 120e6, 2),),
    )


def fleet() -> FleetSnapshot:
    hosts = (
        areal("pod-0"),
        areal(
            "pod-1",
            step=934,
            steps_per_hour=None,
            server_up=False,
            gpus=gpus(8, 0.02, 96),
            events={"step": 934, "connection_refused": 2412, "traceback": 12, "child_failed": 1},
            findings=(FleetFinding(CRIT, "server_down"), FleetFinding(WARN, "stalled")),
            exception=FleetException(
                "7d1c0f3e9a21",
                "ConnectionRefusedError",
                "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 10.244.3.18:17331",
                NOW - 410,
                12,
            ),
            checkpoint_step=930,
            resume_step=931,
        ),
        startup_crash("crash-2", NOW - 95),
        startup_crash("crash-3", NOW - 64),
        areal(
            "pod-4",
            stale=True,
            age_s=125.0,
            error="scrape failed: Get http://10.244.3.21:9400/metrics: connection refused",
            findings=(FleetFinding(WARN, "rss_growth"),),
            events={"step": 1500, "emergency_brake": 14},
        ),
        FleetHost(key="10.244.3.22:9400", job="rlwatch", error="scrape failed: context deadline exceeded"),
        areal(
            "pod-6",
            findings=(FleetFinding(WARN, "memory_high"), FleetFinding(INFO, "no_watchdog")),
            mem_available_bytes=150 * GB,
            events={"step": 1869, "emergency_brake": 3},
        ),
    )
    return FleetSnapshot(time=NOW, source="prometheus http://prometheus.monitoring:9090", hosts=hosts)


def broken() -> FleetSnapshot:
    """Prometheus stopped answering: the last known hosts, all stale, and the error."""
    snap = fleet()
    hosts = tuple(replace(h, stale=True, age_s=None if h.age_s is None else h.age_s + 30) for h in snap.hosts)
    return replace(snap, hosts=hosts, error="http://prometheus.monitoring:9090/api/v1/query: connection refused")


def job_fleet() -> FleetSnapshot:
    """Two nodes of one hung torchrun job (node-b's rank 3 stands in its own code, the 3 others wait in all_reduce
    #4812) beside a pod of another job that progresses."""
    allreduce = "all_reduce (distributed_c10d.py:3068) ← train_step (train.py:31)"
    fetch = "fetch_batch_from_service (train.py:20)"

    def node(name: str, node_rank: int, ranks: tuple[FleetRank, ...]) -> FleetHost:
        return areal(
            f"pod-{node_rank}",
            key=f"10.0.0.{node_rank + 1}:9410",
            host=name,
            profile="auto",
            run_dir="/job",
            steps_per_hour=None,
            stalled=True,
            findings=(FleetFinding(CRIT, "run_hung"),),
            run_job="rdzv:exp-42",
            node_rank=node_rank,
            world_size=4,
            ranks=ranks,
            run_state="hung",
            state_s=50.0,
        )

    hosts = (
        node(
            "node-a",
            0,
            (
                FleetRank(0, 0, "waiting", allreduce, "all_reduce", 52.0, 4812),
                FleetRank(1, 1, "waiting", allreduce, "all_reduce", 51.0, 4812),
            ),
        ),
        node(
            "node-b",
            1,
            (
                FleetRank(2, 0, "waiting", allreduce, "all_reduce", 50.0, 4812),
                FleetRank(3, 1, "elsewhere", fetch, None, 50.0, 4811),
            ),
        ),
        areal(
            "pod-0",
            run_job="rdzv:exp-7",
            node_rank=0,
            world_size=1,
            ranks=(FleetRank(0, 0, "moving", "forward (model.py:12)", None, 0.0),),
            run_state="progressing",
        ),
    )
    return FleetSnapshot(time=NOW, source="2 exporters", hosts=hosts)
