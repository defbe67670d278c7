"""Fixed snapshots of the incidents rlwatch exists for, for the dashboard's snapshot and pilot tests.

Every value is fixed (times, pids, histories built from closed-form curves), so a rendered screen depends only on
the code that renders it. Times are UTC on 2025-11-21; the tests pin the process time zone to UTC.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from rlwatch.common.state import (
    ActionPlan,
    ActionTarget,
    CheckpointInfo,
    CheckpointState,
    ChildFailure,
    CollectiveTimeout,
    DiskState,
    EventSummary,
    Finding,
    GpuHolder,
    GpuState,
    GpuStatus,
    History,
    Incident,
    LogLine,
    MemoryState,
    ProcessInfo,
    RecoverState,
    Series,
    ServerState,
    Severity,
    Snapshot,
    SourceStatus,
    TaggedLine,
    TimelineEntry,
    TrainingState,
)
from rlwatch.engine.feed import StaticFeed

DAY = 1_763_683_200.0  # 2025-11-21 00:00:00 UTC
GB = 1_000_000_000
GIB = 1024**3
CRIT, WARN, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO

AREAL_RUN = "/data/areal/experiments"
AREAL_LOGS = f"{AREAL_RUN}/logs/root/gsm8k-grpo/trial0"
AREAL_CKPT = f"{AREAL_RUN}/checkpoints/root/gsm8k-grpo/trial0"
TRAINER_LOG = f"{AREAL_LOGS}/trainer.log"
SERVER_LOG = f"{AREAL_LOGS}/llm_server.log"
WANDB_LOG = f"{AREAL_LOGS}/wandb/output.log"
LAUNCHER = (
    "python3",
    "-m",
    "areal.launcher.local",
    "examples/math/gsm8k_grpo.py",
    "--config",
    "examples/math/gsm8k_grpo.yaml",
    "experiment_name=gsm8k-grpo",
    "trial_name=trial0",
)
SGLANG = (
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "Qwen/Qwen2.5-1.5B-Instruct",
    "--mem-fraction-static",
    "0.8",
    "--host",
    "10.244.3.17",
    "--port",
    "17331",
)
TORCHRUN = (
    "torchrun",
    "--nnodes",
    "1",
    "--nproc-per-node",
    "1",
    "--master-addr",
    "localhost",
    "--master-port",
    "29501",
    "examples/math/gsm8k_grpo.py",
    "--config",
    "examples/math/gsm8k_grpo.yaml",
)
AREAL_KNOBS = {
    "sglang.mem_fraction_static": "0.8",
    "rollout.max_concurrent_rollouts": "32",
    "rollout.request_timeout": "3600",
    "rollout.request_retries": "3",
}


@contextlib.contextmanager
def utc_timezone() -> Iterator[None]:
    """Render clock times in UTC for the duration, so screens do not depend on the machine's time zone."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


def snapshot(**fields: Any) -> Snapshot:
    """A fixture snapshot whose live processes carry the evidence rlwatch shows for them: each role's process matches
    its role rule and works in the run directory, as on the hosts these pictures stand for."""
    snap = Snapshot(**fields)
    run = snap.run_dir or "/job"
    procs = tuple(
        replace(p, evidence=f"matches the {p.role} role and works in {run}") if p.alive and p.evidence is None else p
        for p in snap.processes
    )
    return replace(snap, processes=procs)


def at(h: int, m: int, s: int = 0) -> float:
    return DAY + h * 3600 + m * 60 + s


def _busy(_: int) -> float:
    return 3.0


def _bursts(j: int) -> float:
    return 0.0 if j % 20 else 9.0


def _full(_: int) -> float:
    return 78.6


def _empty(_: int) -> float:
    return 0.4


def series(now: float, fn: Callable[[int], float | None], *, n: int = 120, step: float = 5.0) -> Series:
    """``n`` samples every ``step`` seconds ending at ``now``; ``fn(i)`` gives sample ``i`` (0 is the oldest)."""
    times = tuple(now - (n - 1 - i) * step for i in range(n))
    return Series(times=times, values=tuple(fn(i) for i in range(n)))


def wobble(base: float, amp: float, period: float = 17.0) -> Callable[[int], float]:
    return lambda i: max(0.0, min(100.0, base + amp * math.sin(i / period * 2 * math.pi)))


def event(
    kind: str,
    severity: Severity,
    count: int,
    first: float | None,
    last: float | None,
    *,
    rate: float = 0.0,
    streak: int = 0,
    files: dict[str, int] | None = None,
    recent: Sequence[tuple[str, int, str, float]] = (),
) -> EventSummary:
    return EventSummary(
        kind=kind,
        severity=severity,
        count=count,
        first=first,
        last=last,
        rate_per_min=rate,
        streak=streak,
        files=files or {},
        recent=tuple(LogLine(path=p, lineno=n, text=t, time=tm) for p, n, t, tm in recent),
    )


def zero(kind: str, severity: Severity) -> EventSummary:
    return event(kind, severity, 0, None, None)


def tagged(lines: Sequence[tuple[str, str, frozenset[str]]], start_lineno: int = 1) -> tuple[TaggedLine, ...]:
    out: list[TaggedLine] = []
    per_file: dict[str, int] = {}
    for seq, (path, text, kinds) in enumerate(lines, start=1):
        per_file[path] = per_file.get(path, start_lineno - 1) + 1
        out.append(TaggedLine(seq=seq, path=path, lineno=per_file[path], text=text, kinds=kinds))
    return tuple(out)


K = frozenset


def areal_line(ts: str, logger: str, level: str, msg: str) -> str:
    return f"(AReaL) 20251121-{ts}.000 {logger} {level}: {msg}"


REFUSED_WARN = (
    "HTTP request to 10.244.3.17:17331/generate failed with ClientConnectorError: Cannot connect to host "
    "10.244.3.17:17331 ssl:default [Connect call failed ('10.244.3.17', 17331)] (attempt 3/3)"
)
REFUSED_ERR = (
    "RuntimeError: Failed after 3 retries each. Addr: 10.244.3.17:17331. Endpoint: /generate. Last error: "
    "ClientConnectorError(ConnectionKey(host='10.244.3.17', port=17331, is_ssl=False), "
    "ConnectionRefusedError(111, \"Connect call failed ('10.244.3.17', 17331)\"))"
)


# --------------------------------------------------------------------------------------------------- healthy


def healthy() -> Snapshot:
    now = at(9, 20)
    gpus = (
        GpuState(
            0,
            "NVIDIA H100 80GB HBM3",
            "GPU-0a1b",
            97.0,
            61_400_000_000,
            85_520_000_000,
            71.0,
            612.0,
            "DEFAULT",
            (4711,),
        ),
        GpuState(
            1,
            "NVIDIA H100 80GB HBM3",
            "GPU-2c3d",
            88.0,
            68_900_000_000,
            85_520_000_000,
            66.0,
            540.0,
            "DEFAULT",
            (4650,),
        ),
    )
    holders = (
        GpuHolder(
            4711,
            at(6, 2),
            "root",
            TORCHRUN,
            ("/dev/nvidia0",),
            61_000_000_000,
            True,
            None,
            evidence="matches the trainer role and writes logs/trainer.log",
            gpus=(0,),
            attribution="nvml",
        ),
        GpuHolder(
            4650,
            at(6, 1),
            "root",
            SGLANG,
            ("/dev/nvidia1",),
            68_500_000_000,
            True,
            None,
            evidence="matches the server role and writes logs/llm_server.log",
            gpus=(1,),
            attribution="nvml",
        ),
    )
    history = History(
        gpu_util={0: series(now, wobble(93, 6)), 1: series(now, wobble(84, 10, 11))},
        gpu_mem={0: series(now, lambda i: 71.8), 1: series(now, lambda i: 80.6)},
        ram_used=series(now, wobble(41, 2, 40)),
        swap_used=series(now, lambda i: 0.0),
        rss={"trainer": series(now, lambda i: 18.2 * GB + i * 1e6), "launcher": series(now, lambda i: 0.3 * GB)},
    )
    events = {
        "step": event(
            "step",
            INFO,
            1200,
            at(6, 4),
            at(9, 19, 41),
            rate=2.3,
            files={TRAINER_LOG: 1200},
            recent=[(TRAINER_LOG, 81233, "Epoch 2/3 Step 266/935 Train step 1201/2805 done.", at(9, 19, 41))],
        ),
        "weight_update": event(
            "weight_update", INFO, 1200, at(6, 4), at(9, 19, 30), rate=2.3, files={TRAINER_LOG: 1200}
        ),
        "checkpoint_saved": event("checkpoint_saved", INFO, 12, at(6, 20), at(9, 1), rate=0.1),
        "server_ready": event("server_ready", INFO, 1, at(6, 3), at(6, 3), files={TRAINER_LOG: 1}),
        "timeout": event(
            "timeout",
            WARN,
            1,
            at(7, 12, 5),
            at(7, 12, 5),
            files={TRAINER_LOG: 1},
            recent=[
                (
                    TRAINER_LOG,
                    40210,
                    "HTTP request to 10.244.3.17:17331/generate timed out after 3600.00s (attempt 1/3)",
                    at(7, 12, 5),
                )
            ],
        ),
        "connection_refused": zero("connection_refused", CRIT),
        "traceback": zero("traceback", WARN),
        "cuda_oom": zero("cuda_oom", CRIT),
        "nccl_timeout": zero("nccl_timeout", CRIT),
        "emergency_brake": zero("emergency_brake", WARN),
    }
    return snapshot(
        host="gpu-pod-7f3c",
        time=now,
        profile="areal",
        run_dir=AREAL_RUN,
        uptime_s=3 * 3600 + 25 * 60,
        run_uptime_s=3 * 3600 + 18 * 60,
        events=events,
        training=TrainingState(
            last_step=1201,
            total_steps=2805,
            reward=0.712,
            steps_per_hour=142.0,
            stalled=False,
            last_step_at=at(9, 19, 41),
            last_line_at=at(9, 19, 58),
            rewards=tuple(0.31 + 0.4 * (1 - math.exp(-i / 14)) + 0.02 * math.sin(i) for i in range(40)),
            weight_update_s=(10.2, 10.6, 10.1, 10.9, 10.4, 10.5),
            weight_update_timeout_s=120.0,
            knobs=AREAL_KNOBS,
        ),
        checkpoint=CheckpointState(
            latest=CheckpointInfo(
                f"{AREAL_CKPT}/default/epoch1epochstep264globalstep1199", 1199, 1, 264, at(9, 1), 3_090_000_000
            ),
            count=12,
        ),
        recover=RecoverState(
            f"{AREAL_CKPT}/recover_info/step_info.json", 1, 264, 1199, 935, 1, 265, 1200, saved_at=at(9, 1)
        ),
        server=ServerState(
            "sglang", "http://10.244.3.17:17331", True, None, 4650, status_code=200, latency_s=0.004, process_alive=True
        ),
        gpu=GpuStatus("nvml", True, None, gpus),
        holders=holders,
        memory=MemoryState(2_015_000_000_000, 1_190_000_000_000, 0, 0, 0, None),
        processes=(
            ProcessInfo(
                4601,
                at(6, 0),
                "launcher",
                "launcher",
                310_000_000,
                0.0,
                at(6, 0),
                0,
                LAUNCHER,
                "/job/AReaL",
                "root",
            ),
            ProcessInfo(
                4650, at(6, 1), "server", "server", 9_800_000_000, 2e6, at(6, 1), 0, SGLANG, "/job/AReaL", "root"
            ),
            ProcessInfo(
                4711,
                at(6, 2),
                "trainer",
                "trainer",
                18_300_000_000,
                1.1e8,
                at(6, 2),
                0,
                TORCHRUN,
                "/job/AReaL",
                "root",
            ),
        ),
        disk=DiskState("/data", 1_210_000_000_000, 3_840_000_000_000),
        timeline=(TimelineEntry(at(9, 1), "last checkpoint saved (epoch1epochstep264globalstep1199)"),),
        history=history,
        sources=(SourceStatus("gpu", True, now), SourceStatus("logs", True, now)),
        logs=(TRAINER_LOG, SERVER_LOG),
    )


def healthy_lines() -> tuple[TaggedLine, ...]:
    rows: list[tuple[str, str, frozenset[str]]] = []
    for i in range(12):
        g = 1190 + i
        ts = f"09:{17 + i * 13 // 60:02d}:{(i * 13) % 60:02d}"
        rows.append(
            (
                TRAINER_LOG,
                areal_line(
                    ts,
                    "[RemoteInfEngine Rank 0]",
                    "INFO",
                    "Loading weights from disk done in 10.48s. Respond time: 2.19s.",
                ),
                K({"weight_update"}),
            )
        )
        rows.append(
            (
                TRAINER_LOG,
                areal_line(ts, "StatsLogger", "INFO", f"Epoch 2/3 Step {g - 934}/935 Train step {g}/2805 done."),
                K({"step"}),
            )
        )
        if i == 5:
            rows.append(
                (
                    SERVER_LOG,
                    '[2025-11-21 09:18:31] INFO:     10.244.3.17:47260 - "POST /generate HTTP/1.1" 200 OK',
                    K(),
                )
            )
    rows.append(
        (
            TRAINER_LOG,
            areal_line(
                "09:19:59",
                "HTTPUtils",
                "WARNING",
                "HTTP request to 10.244.3.17:17331/generate timed out after 3600.00s (attempt 1/3)",
            ),
            K({"timeout"}),
        )
    )
    return tagged(rows, start_lineno=81200)


def plans_all_runnable() -> dict[str, ActionPlan]:
    """One runnable plan per action, for the key-binding tests."""
    worker = ActionTarget(
        4711, at(6, 2), "root", 3 * 3600 + 18 * 60, TORCHRUN, 61_000_000_000, "trainer", "restart requested"
    )
    return {
        "restart-workers": ActionPlan(
            "restart-workers",
            (worker,),
            ("SIGTERM process group 4711", "wait up to 10 s", "SIGKILL if still alive", "start the worker again"),
        ),
        "kill-zombies": zombie_plan(),
        "resume": ActionPlan(
            "resume",
            (),
            ("start the launcher again in /job/AReaL",),
            start=(ActionTarget(None, None, "root", None, LAUNCHER, role="launcher"),),
        ),
        "restart-server": ActionPlan(
            "restart-server",
            (
                ActionTarget(
                    4650, at(6, 1), "root", 3 * 3600 + 19 * 60, SGLANG, 68_500_000_000, "server", "health check failing"
                ),
            ),
            (
                "SIGTERM process group 4650",
                "wait up to 10 s",
                "SIGKILL if still alive",
                "start the server again",
                "wait for GET /health to answer 200",
            ),
        ),
    }


# ---------------------------------------------------------------------------------------------- server-crash


def server_crash() -> Snapshot:
    now = at(18, 12)
    refused_files = {TRAINER_LOG: 64, WANDB_LOG: 64}
    gpus = (
        GpuState(
            0, "Tesla V100-SXM2-16GB", "GPU-9e8f", 0.0, 1_470_000_000, 16_940_000_000, 38.0, 41.0, "DEFAULT", (4711,)
        ),
    )
    events = {
        "connection_refused": event(
            "connection_refused",
            CRIT,
            128,
            at(5, 9, 20),
            at(5, 31, 2),
            rate=0.0,
            streak=128,
            files=refused_files,
            recent=[(TRAINER_LOG, 112874 + i, REFUSED_ERR, at(5, 31, 2)) for i in range(3)]
            + [(WANDB_LOG, 40110, REFUSED_ERR, at(5, 31, 2))],
        ),
        "traceback": event(
            "traceback",
            WARN,
            64,
            at(5, 9, 20),
            at(5, 31, 2),
            streak=64,
            files={TRAINER_LOG: 64},
            recent=[(TRAINER_LOG, 112870, "Traceback (most recent call last):", at(5, 31, 2))],
        ),
        "step": event("step", INFO, 1873, at(0, 41), at(5, 8, 51), files={TRAINER_LOG: 1873}),
        "weight_update": event("weight_update", INFO, 1873, at(0, 41), at(5, 8, 40)),
        "checkpoint_saved": event("checkpoint_saved", INFO, 18, at(1, 5), at(5, 4, 11)),
        "server_ready": event("server_ready", INFO, 1, at(0, 40), at(0, 40)),
        "cuda_oom": zero("cuda_oom", CRIT),
        "oom_kill": zero("oom_kill", CRIT),
        "nccl_timeout": zero("nccl_timeout", CRIT),
    }
    history = History(
        gpu_util={0: series(now, lambda i: 0.0)},
        gpu_mem={0: series(now, lambda i: 8.7)},
        ram_used=series(now, lambda i: 22.0),
        swap_used=series(now, lambda i: 0.0),
        rss={"trainer": series(now, lambda i: 6.1 * GB)},
    )
    latest = CheckpointInfo(
        f"{AREAL_CKPT}/default/epoch1epochstep934globalstep1869", 1869, 1, 934, at(5, 4, 11), 3_090_000_000
    )
    return snapshot(
        host="gsm8k-pod-0",
        time=now,
        profile="areal",
        run_dir=AREAL_RUN,
        uptime_s=17 * 3600 + 40 * 60,
        run_uptime_s=17 * 3600 + 32 * 60,
        events=events,
        incidents=(
            Incident(
                "retry_storm",
                TRAINER_LOG,
                112801,
                at(5, 9, 20),
                at(5, 31, 2),
                64,
                "ConnectionRefusedError(111, \"Connect call failed ('10.244.3.17', 17331)\")",
                None,
                "c0ffee01",
            ),
        ),
        training=TrainingState(
            last_step=1873,
            total_steps=2805,
            reward=0.684,
            steps_per_hour=0.0,
            stalled=True,
            last_step_at=at(5, 8, 51),
            last_line_at=at(5, 31, 2),
            rewards=tuple(0.3 + 0.38 * (1 - math.exp(-i / 10)) for i in range(40)),
            weight_update_s=(10.5, 10.4, 10.7, 10.5, 10.6),
            weight_update_timeout_s=120.0,
            knobs=AREAL_KNOBS,
        ),
        checkpoint=CheckpointState(latest=latest, count=18),
        recover=RecoverState(
            f"{AREAL_CKPT}/recover_info/step_info.json", 1, 934, 1869, 935, 2, 0, 1870, saved_at=at(5, 4, 11)
        ),
        server=ServerState(
            "sglang",
            "http://10.244.3.17:17331",
            False,
            at(5, 9, 14),
            4650,
            error="connection refused",
            process_alive=False,
        ),
        gpu=GpuStatus("nvml", True, None, gpus),
        holders=(
            GpuHolder(
                4711,
                at(0, 39),
                "root",
                TORCHRUN,
                ("/dev/nvidia0",),
                1_400_000_000,
                True,
                None,
                evidence="matches the trainer role and writes logs/trainer.log",
                gpus=(0,),
                attribution="nvml",
            ),
        ),
        memory=MemoryState(64_000_000_000, 49_900_000_000, 0, 0, 0, None),
        processes=(
            ProcessInfo(
                4601,
                at(0, 38),
                "launcher",
                "launcher",
                300_000_000,
                0.0,
                at(0, 38),
                0,
                LAUNCHER,
                "/job/AReaL",
                "root",
            ),
            ProcessInfo(
                4711,
                at(0, 39),
                "trainer",
                "trainer",
                6_100_000_000,
                0.0,
                at(0, 39),
                0,
                TORCHRUN,
                "/job/AReaL",
                "root",
            ),
            ProcessInfo(
                4650,
                at(0, 39),
                "server",
                "server",
                None,
                None,
                at(0, 39),
                0,
                SGLANG,
                "/job/AReaL",
                "root",
                alive=False,
            ),
        ),
        disk=DiskState("/data", 402_000_000_000, 1_000_000_000_000),
        findings=(
            Finding(
                CRIT,
                "server_down",
                "Inference server http://10.244.3.17:17331 is down since 05:09:14 (connection refused); 128 "
                "connection-refused errors (trainer.log 64, output.log 64), first 05:09:20, last 05:31:02. "
                "Training cannot make progress.",
                at(5, 9, 14),
                action="restart-server",
            ),
            Finding(
                WARN,
                "stalled",
                "Training stalled: no step since 05:08:51 (step 1873) and the GPU is idle.",
                at(5, 8, 51),
            ),
        ),
        timeline=(
            TimelineEntry(at(5, 4, 11), "last checkpoint saved (epoch1epochstep934globalstep1869)"),
            TimelineEntry(at(5, 8, 51), "last training step (1873)"),
            TimelineEntry(at(5, 9, 14), "inference server down (connection refused)"),
            TimelineEntry(at(5, 9, 20), "connection-refused errors begin (128 until 05:31:02)"),
        ),
        history=history,
        sources=(
            SourceStatus("gpu", True, now),
            SourceStatus("logs", True, now),
            SourceStatus("server", False, now, "connection refused"),
        ),
        logs=(TRAINER_LOG, SERVER_LOG, WANDB_LOG),
    )


def server_crash_lines() -> tuple[TaggedLine, ...]:
    rows: list[tuple[str, str, frozenset[str]]] = [
        (
            TRAINER_LOG,
            areal_line("05:08:51", "StatsLogger", "INFO", "Epoch 2/3 Step 4/935 Train step 1873/2805 done."),
            K({"step"}),
        ),
        (
            SERVER_LOG,
            "[2025-11-21 05:09:13 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            K({"traceback"}),
        ),
        (SERVER_LOG, "Received sigquit from a child process. It usually means the child failed.", K({"engine_dead"})),
    ]
    for i in range(20):
        ts = f"05:{9 + i:02d}:20"
        rows.append((TRAINER_LOG, areal_line(ts, "HTTPUtils", "WARNING", REFUSED_WARN), K({"connection_refused"})))
        rows.append(
            (
                TRAINER_LOG,
                areal_line(ts, "[RemoteInfEngine Rank 0]", "ERROR", "Workflow execution failed: " + REFUSED_ERR),
                K({"connection_refused"}),
            )
        )
        rows.append((TRAINER_LOG, "Traceback (most recent call last):", K({"traceback"})))
        rows.append((WANDB_LOG, REFUSED_ERR, K({"connection_refused"})))
    return tagged(rows, start_lineno=112700)


def server_crash_plans() -> dict[str, ActionPlan]:
    return {
        "resume": ActionPlan(
            "resume",
            (
                ActionTarget(
                    4601,
                    at(0, 38),
                    "root",
                    17 * 3600 + 34 * 60,
                    LAUNCHER,
                    None,
                    "launcher",
                    "run is stuck: inference server gone",
                ),
            ),
            (
                "SIGTERM process group 4601 (launcher and trainer)",
                "wait up to 10 s",
                "SIGKILL if still alive",
                "start the launcher again: resumes at global step 1870 (epoch 2, step 0)",
            ),
            start=(ActionTarget(None, None, "root", None, LAUNCHER, role="launcher"),),
        ),
        "restart-server": ActionPlan(
            "restart-server",
            (),
            ("start the server again",),
            start=(ActionTarget(None, None, "root", None, SGLANG, role="server"),),
        ),
        "kill-zombies": ActionPlan("kill-zombies", (), (), refused="nothing to do: no stray process holds a GPU"),
        "restart-workers": ActionPlan("restart-workers", (), (), refused="no worker processes are configured"),
    }


# ---------------------------------------------------------------------------------------------- restart-loop


def restart_loop() -> Snapshot:
    now = at(14, 3, 30)
    ws = "/job/run"
    log = f"{ws}/logs/train.log"
    gpus = (GpuState(0, "NVIDIA H100 80GB HBM3", "GPU-77aa", 0.0, 0, 85_520_000_000, 33.0, 70.0, "DEFAULT"),)
    history = History(
        gpu_util={0: series(now, lambda i: 35.0 if i % 4 == 0 else 0.0)},
        gpu_mem={0: series(now, lambda i: 12.0 if i % 4 in (0, 1) else 0.0)},
        ram_used=series(now, lambda i: 9.0 + (i % 4)),
        swap_used=series(now, lambda i: 0.0),
    )
    events = {
        "restart": event(
            "restart",
            WARN,
            212,
            at(13, 3),
            at(14, 3, 21),
            rate=3.5,
            streak=212,
            files={log: 212},
            recent=[
                (log, 9001 + i, "+ git clone https://github.com/inclusionAI/AReaL", at(14, 3, 21)) for i in range(2)
            ],
        ),
        "timeout": event(
            "timeout",
            WARN,
            3,
            at(13, 11),
            at(13, 48),
            files={log: 3},
            recent=[
                (
                    log,
                    512,
                    "TimeoutError: Timeout waiting for key 'root/grpo/trial0/"
                    "update_weights_from_disk/13' (NfsNameRecordRepository)",
                    at(13, 48),
                )
            ],
        ),
        "step": event("step", INFO, 57, at(13, 0, 30), at(13, 2, 40), files={log: 57}),
        "weight_update": event("weight_update", INFO, 57, at(13, 0, 31), at(13, 2, 39)),
        "traceback": zero("traceback", WARN),
        "connection_refused": zero("connection_refused", CRIT),
    }
    return snapshot(
        host="runpod-a1b2c3",
        time=now,
        profile="areal",
        run_dir=ws,
        uptime_s=9.0,
        run_uptime_s=8.0,
        events=events,
        training=TrainingState(
            last_step=57,
            total_steps=250,
            reward=0.41,
            steps_per_hour=None,
            stalled=True,
            last_step_at=at(13, 2, 40),
            last_line_at=at(14, 3, 29),
            rewards=tuple(0.2 + 0.004 * i for i in range(57)),
            weight_update_s=(10.5, 12.0, 14.8, 19.3, 26.0, 38.5, 61.2, 97.4),
            weight_update_timeout_s=120.0,
        ),
        checkpoint=CheckpointState(
            latest=CheckpointInfo(f"{ws}/checkpoints/checkpoint-50", 50, 0, 50, at(13, 2, 10), 3_200_000_000), count=5
        ),
        server=ServerState("sglang", "http://127.0.0.1:30000", None, None, None),
        gpu=GpuStatus("nvml", True, None, gpus),
        memory=MemoryState(251_000_000_000, 228_000_000_000, 0, 0, 0, None),
        processes=(
            ProcessInfo(
                1,
                now - 9,
                "launcher",
                "start.sh",
                4_000_000,
                None,
                now - 9,
                212,
                ("bash", "/job/start.sh"),
                ws,
                "root",
            ),
        ),
        disk=DiskState("/job", 7_400_000_000, 200_000_000_000),
        findings=(
            Finding(
                CRIT,
                "restart_loop",
                "Restart loop: the container started 212 times, every ~17s, never staying up past 1m00s. This "
                "is not a crash at a training step: look at what the start command does.",
                at(13, 3),
            ),
            Finding(WARN, "weight_update_slow", "Weight update took 97.4s, near its 120s timeout.", None),
            Finding(WARN, "disk_low", "Only 7.4 GB free on /job; a checkpoint takes 3.2 GB.", None),
            Finding(WARN, "timeout", "3 timeout errors (train.log 3), last 13:48:00.", at(13, 11)),
        ),
        timeline=(
            TimelineEntry(at(13, 2, 40), "last training step (57)"),
            TimelineEntry(at(13, 3), "restarts begin (212 until 14:03:21)"),
        ),
        sources=(SourceStatus("holders", True, now - 2),),
        history=history,
        logs=(log,),
    )


def restart_loop_lines() -> tuple[TaggedLine, ...]:
    log = "/job/run/logs/train.log"
    rows: list[tuple[str, str, frozenset[str]]] = []
    for _ in range(6):
        rows.append((log, "+ cd /job", K()))
        rows.append((log, "+ git clone https://github.com/inclusionAI/AReaL", K({"restart"})))
        rows.append((log, "fatal: destination path 'AReaL' already exists and is not an empty directory.", K()))
    return tagged(rows, start_lineno=9000)


# ---------------------------------------------------------------------------------------------- memory-leak


def memory_leak() -> Snapshot:
    now = at(13, 32)
    total = 31_200_000_000
    log = "/srv/optim/logs/pool.log"
    brake_line = "WARNING emergency brake: only 1.8 GB free (< 2.0 GB), not starting trial 4187"
    history = History(
        ram_used=series(now, lambda i: 91.0 + 3.2 * i / 119),
        swap_used=series(now, lambda i: 70.0 + 8.0 * i / 119),
        rss={
            "worker-0": series(now, lambda i: 15.05 * GB + i * 0.72e6),
            "worker-1": series(now, lambda i: 14.55 * GB + i * 0.67e6),
        },
    )
    worker = ("python3", "-m", "optim.worker", "--pool", "trials", "--slot")
    return snapshot(
        host="optim-box-2",
        time=now,
        profile="workers",
        run_dir="/srv/optim",
        uptime_s=6 * 3600 + 12 * 60,
        run_uptime_s=6 * 3600 + 10 * 60,
        events={
            "emergency_brake": event(
                "emergency_brake",
                WARN,
                951,
                at(7, 40),
                at(13, 31, 50),
                rate=2.7,
                streak=951,
                files={log: 951},
                recent=[(log, 88010 + i, brake_line, at(13, 31, 30 + 10 * i)) for i in range(3)],
            ),
            "oom_kill": zero("oom_kill", CRIT),
            "traceback": zero("traceback", WARN),
            "restart": zero("restart", WARN),
        },
        gpu=GpuStatus("none", False, "NVML library not found"),
        memory=MemoryState(total, 1_800_000_000, 4_000_000_000, 3_100_000_000, 0, at(15, 42), brake_free_bytes=2 * GIB),
        processes=(
            ProcessInfo(
                2201,
                at(7, 22),
                "launcher",
                "pool",
                120_000_000,
                0.0,
                at(7, 22),
                0,
                ("python3", "-m", "optim.pool", "--workers", "2"),
                "/srv/optim",
                "optim",
            ),
            ProcessInfo(
                2230,
                at(7, 22),
                "worker",
                "worker-0",
                15_140_000_000,
                5.2e8,
                at(7, 22),
                0,
                (*worker, "0"),
                "/srv/optim",
                "optim",
            ),
            ProcessInfo(
                2231,
                at(7, 22),
                "worker",
                "worker-1",
                14_630_000_000,
                4.8e8,
                at(7, 22),
                0,
                (*worker, "1"),
                "/srv/optim",
                "optim",
            ),
        ),
        disk=DiskState("/srv", 88_000_000_000, 500_000_000_000),
        findings=(
            Finding(
                CRIT,
                "brake_no_relief",
                "Emergency brake fired 951 times in a row (951 in all, 2.7/min) and memory is not coming back: "
                "the brake cannot free leaked memory, only restarting the worker does.",
                at(7, 40),
                action="restart-workers",
            ),
            Finding(
                CRIT,
                "expected_missing",
                "The expected watchdog is not running: nothing will restart leaking or crashed processes.",
                None,
                command="rlwatch service install",
            ),
            Finding(WARN, "memory_high", "Host RAM at 94.2% (29.4 GB of 31.2 GB); 1.8 GB available.", now),
            Finding(
                WARN,
                "memory_leak",
                "worker-0 (pid 2230) grows 520.0 MB/h, now 15.1 GB; at this rate RAM runs out at 15:42:00. "
                "Only restarting it frees leaked memory.",
                at(7, 22),
                action="restart-workers",
            ),
            Finding(
                WARN,
                "memory_leak",
                "worker-1 (pid 2231) grows 480.0 MB/h, now 14.6 GB; at this rate RAM runs out at 15:42:00. "
                "Only restarting it frees leaked memory.",
                at(7, 22),
                action="restart-workers",
            ),
        ),
        timeline=(TimelineEntry(at(7, 40), "emergency brake firing begin (951 until 13:31:50)"),),
        history=history,
        sources=(SourceStatus("gpu", False, None, "NVML library not found"),),
        logs=(log,),
    )


def memory_leak_lines() -> tuple[TaggedLine, ...]:
    log = "/srv/optim/logs/pool.log"
    rows = [
        (
            log,
            f"2025-11-21 13:{20 + i // 2:02d}:{(i % 2) * 30:02d} WARNING emergency brake: only 1.8 GB free "
            f"(< 2.0 GB), not starting trial {4170 + i}",
            K({"emergency_brake"}),
        )
        for i in range(18)
    ]
    return tagged(rows, start_lineno=88000)


def memory_leak_plans() -> dict[str, ActionPlan]:
    worker = ("python3", "-m", "optim.worker", "--pool", "trials", "--slot")
    return {
        "restart-workers": ActionPlan(
            "restart-workers",
            (
                ActionTarget(
                    2230,
                    at(7, 22),
                    "optim",
                    6 * 3600 + 10 * 60,
                    (*worker, "0"),
                    None,
                    "worker",
                    "15.1 GB, growing 520 MB/h",
                ),
                ActionTarget(
                    2231,
                    at(7, 22),
                    "optim",
                    6 * 3600 + 10 * 60,
                    (*worker, "1"),
                    None,
                    "worker",
                    "14.6 GB, growing 480 MB/h",
                ),
            ),
            (
                "SIGTERM each worker's process group",
                "wait up to 10 s",
                "SIGKILL what is still alive",
                "start both workers again with their recorded command lines",
                "check they come up",
            ),
            start=(
                ActionTarget(None, None, "optim", None, (*worker, "0"), role="worker"),
                ActionTarget(None, None, "optim", None, (*worker, "1"), role="worker"),
            ),
        ),
    }


# ------------------------------------------------------------------------------------------------ gpu-zombie


STRAY_PY = (
    "python3",
    "-c",
    "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=7, pipe_handle=9)",
    "--multiprocessing-fork",
)
STRAY_SCHED = ("sglang::scheduler_TP1",)


def gpu_zombie() -> Snapshot:
    now = at(11, 47)
    mode = "EXCLUSIVE_PROCESS"
    gpus = (
        GpuState(0, "NVIDIA H100 80GB HBM3", "GPU-a0", 0.0, 18_200_000_000, 85_520_000_000, 36.0, 71.0, mode, (31337,)),
        GpuState(1, "NVIDIA H100 80GB HBM3", "GPU-a1", 0.0, 71_300_000_000, 85_520_000_000, 38.0, 74.0, mode, (31402,)),
        GpuState(2, "NVIDIA H100 80GB HBM3", "GPU-a2", 0.0, 0, 85_520_000_000, 30.0, 68.0, mode),
        GpuState(3, "NVIDIA H100 80GB HBM3", "GPU-a3", 0.0, 0, 85_520_000_000, 31.0, 69.0, mode),
    )
    holders = (
        GpuHolder(
            31337,
            at(9, 58),
            "root",
            STRAY_PY,
            ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"),
            18_200_000_000,
            False,
            "orphaned: the session that started it (leader pid 31300) is gone and it was re-parented to init; "
            "started 1h49m before the live run",
            gpus=(0,),
            attribution="nvml",
        ),
        GpuHolder(
            31402,
            at(9, 58, 30),
            "root",
            STRAY_SCHED,
            ("/dev/nvidia1", "/dev/nvidiactl"),
            71_300_000_000,
            False,
            "a leftover of an earlier attempt: works in /job but is not part of the live run; orphaned: the session "
            "that started it (leader pid 31390) is gone and it was re-parented to init; started 1h48m before the "
            "live run",
            gpus=(1,),
            attribution="nvml",
        ),
        GpuHolder(
            215,
            at(11, 2),
            "root",
            ("nvidia-persistenced", "--user", "root"),
            ("/dev/nvidiactl",),
            None,
            False,
            None,
            protected="system daemon (nvidia-persistenced)",
        ),
    )
    log = "/job/logs/llm_server.log"
    busy = "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"
    history = History(
        gpu_util={i: series(now, lambda j: 0.0) for i in range(4)},
        gpu_mem={
            0: series(now, lambda j: 21.3),
            1: series(now, lambda j: 83.4),
            2: series(now, lambda j: 0.0),
            3: series(now, lambda j: 0.0),
        },
        ram_used=series(now, lambda i: 12.0),
        swap_used=series(now, lambda i: 0.0),
    )
    return snapshot(
        host="h100x4-pod-19",
        time=now,
        profile="areal",
        run_dir="/job",
        uptime_s=45 * 60,
        run_uptime_s=2 * 60 + 10,
        events={
            "cuda_busy": event(
                "cuda_busy",
                CRIT,
                6,
                at(11, 5, 12),
                at(11, 44, 50),
                rate=0.2,
                streak=6,
                files={log: 6},
                recent=[(log, 310 + i * 41, busy, at(11, 44, 50)) for i in range(3)],
            ),
            "traceback": event("traceback", WARN, 6, at(11, 5, 12), at(11, 44, 50), streak=6, files={log: 6}),
            "restart": event("restart", WARN, 6, at(11, 5), at(11, 44, 40), files={log: 6}),
            "server_ready": zero("server_ready", INFO),
            "connection_refused": zero("connection_refused", CRIT),
        },
        incidents=(
            Incident(
                "traceback", log, 516, at(11, 44, 48), at(11, 44, 50), 31, busy, "model_runner.py:215", "9b1d2c77"
            ),
        ),
        server=ServerState(
            "sglang",
            "http://127.0.0.1:30000",
            False,
            at(11, 5, 12),
            None,
            error="connection refused",
            process_alive=False,
        ),
        gpu=GpuStatus("nvml", True, None, gpus),
        holders=holders,
        memory=MemoryState(1_007_000_000_000, 886_000_000_000, 0, 0, 0, None),
        processes=(
            ProcessInfo(
                402,
                at(11, 44, 40),
                "launcher",
                "launcher",
                280_000_000,
                None,
                at(11, 44, 40),
                6,
                LAUNCHER,
                "/job/AReaL",
                "root",
            ),
        ),
        findings=(
            Finding(
                CRIT,
                "gpu_strays",
                "2 stray process(es) hold the GPU (pid 31337, 31402) outside the live run. "
                "Compute mode EXCLUSIVE_PROCESS.",
                at(9, 58),
                action="kill-zombies",
            ),
            Finding(
                CRIT,
                "device_busy",
                "6 'CUDA-capable device(s) is/are busy or unavailable' errors (llm_server.log 6), last 11:44:50.",
                at(11, 5, 12),
                action="kill-zombies",
            ),
            Finding(
                CRIT,
                "server_down",
                "Inference server http://127.0.0.1:30000 is down since 11:05:12 (connection refused).",
                at(11, 5, 12),
                action="resume",
            ),
        ),
        history=history,
        logs=(log,),
    )


def gpu_zombie_lines() -> tuple[TaggedLine, ...]:
    log = "/job/logs/llm_server.log"
    rows: list[tuple[str, str, frozenset[str]]] = []
    for _ in range(3):
        rows += [
            (log, "Traceback (most recent call last):", K({"traceback"})),
            (
                log,
                '  File "/usr/local/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py", '
                "line 215, in __init__",
                K(),
            ),
            (
                log,
                "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
                K({"cuda_busy"}),
            ),
            (
                log,
                "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                "below might be incorrect.",
                K(),
            ),
        ]
    return tagged(rows, start_lineno=300)


def zombie_plan() -> ActionPlan:
    return ActionPlan(
        "kill-zombies",
        (
            ActionTarget(
                31337,
                at(9, 58),
                "root",
                109 * 60,
                STRAY_PY,
                18_200_000_000,
                "stray",
                "orphaned (parent is pid 1), from before the container restart",
            ),
            ActionTarget(
                31402,
                at(9, 58, 30),
                "root",
                108 * 60 + 30,
                STRAY_SCHED,
                71_300_000_000,
                "stray",
                "server child left behind by a previous run",
            ),
        ),
        (
            "SIGTERM to 31337 and 31402 (checked by pid and start time)",
            "wait up to 10 s",
            "SIGKILL what is left",
            "check /dev/nvidia0 and /dev/nvidia1 are free",
        ),
    )


# --------------------------------------------------------------------------------------------- startup-crash


def startup_crash() -> Snapshot:
    now = at(16, 25)
    title = "AttributeError: 'Namespace' object has no attribute 'model_id'"
    log = "/job/grpo/logs/train.log"
    gpus = tuple(
        GpuState(
            i,
            "NVIDIA H200",
            f"GPU-b{i}",
            3.0 if i < 4 else 0.0,
            (118_000_000_000 if i < 4 else 600_000_000),
            150_100_000_000,
            41.0 if i < 4 else 29.0,
            130.0 if i < 4 else 72.0,
            "DEFAULT",
            (7001,) if i < 4 else (),
        )
        for i in range(8)
    )
    vllm = ("trl", "vllm-serve", "--model", "Qwen/Qwen3-8B", "--tensor-parallel-size", "4", "--port", "8000")
    trainer = ("accelerate", "launch", "--num_processes", "4", "grpo_train.py", "--model_name", "Qwen/Qwen3-8B")
    history = History(
        gpu_util={i: series(now, _busy if i < 4 else _bursts) for i in range(8)},
        gpu_mem={i: series(now, _full if i < 4 else _empty) for i in range(8)},
        ram_used=series(now, lambda i: 18.0),
        swap_used=series(now, lambda i: 0.0),
    )
    incidents = tuple(
        Incident(
            "traceback",
            log,
            40 + 37 * k,
            at(16, 6 + 5 * k, 31),
            at(16, 6 + 5 * k, 31),
            14,
            title,
            "grpo_train.py:88",
            "5e1f0a42",
        )
        for k in range(4)
    )
    return snapshot(
        host="trl-pod-3",
        time=now,
        profile="trl",
        run_dir="/job/grpo",
        uptime_s=20 * 60,
        run_uptime_s=None,
        events={
            "traceback": event(
                "traceback",
                WARN,
                4,
                at(16, 6, 31),
                at(16, 21, 31),
                streak=4,
                files={log: 4},
                recent=[(log, 40 + 37 * k + 13, title, at(16, 6 + 5 * k, 31)) for k in range(4)],
            ),
            "child_failed": event("child_failed", CRIT, 4, at(16, 6, 32), at(16, 21, 32), files={log: 4}),
            "restart": event("restart", WARN, 4, at(16, 6), at(16, 21), files={log: 4}),
            "server_ready": event("server_ready", INFO, 1, at(16, 5, 40), at(16, 5, 40)),
            "step": zero("step", INFO),
        },
        incidents=incidents,
        training=TrainingState(None, 500, None, None, False, None, at(16, 21, 32)),
        server=ServerState(
            "trl", "http://0.0.0.0:8000", True, None, 7001, status_code=200, latency_s=0.002, process_alive=True
        ),
        gpu=GpuStatus("nvml", True, None, gpus),
        holders=(
            GpuHolder(
                7001,
                at(16, 5),
                "root",
                vllm,
                tuple(f"/dev/nvidia{i}" for i in range(4)),
                472_000_000_000,
                True,
                None,
                evidence="matches the server role and works in /job",
                gpus=(0, 1, 2, 3),
                attribution="nvml",
            ),
        ),
        memory=MemoryState(2_015_000_000_000, 1_650_000_000_000, 0, 0, 0, None),
        processes=(
            ProcessInfo(7001, at(16, 5), "server", "server", 21_000_000_000, 0.0, at(16, 5), 0, vllm, "/job", "root"),
            ProcessInfo(
                7240,
                at(16, 21),
                "trainer",
                "trainer",
                None,
                None,
                at(16, 21),
                3,
                trainer,
                "/job/grpo",
                "root",
                alive=False,
            ),
        ),
        findings=(
            Finding(
                CRIT,
                "crash_repeating",
                f"The same crash happened 4 times: {title} at grpo_train.py:88 [5e1f0a42].",
                at(16, 6, 31),
            ),
            Finding(CRIT, "child_failed", "4 torchrun child failures (train.log 4), last 16:21:32.", at(16, 6, 32)),
        ),
        timeline=tuple(TimelineEntry(i.first, f"crash: {title}") for i in incidents),
        history=history,
        logs=(log,),
    )


def startup_crash_lines() -> tuple[TaggedLine, ...]:
    log = "/job/grpo/logs/train.log"
    rows: list[tuple[str, str, frozenset[str]]] = []
    for _ in range(2):
        rows += [
            (log, "[rank0]: Traceback (most recent call last):", K({"traceback"})),
            (log, '[rank0]:   File "/job/grpo/grpo_train.py", line 88, in main', K()),
            (log, "[rank0]:     model = load(args.model_id)", K()),
            (log, "[rank0]: AttributeError: 'Namespace' object has no attribute 'model_id'", K()),
            (log, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", K({"child_failed"})),
        ]
    return tagged(rows, start_lineno=40)


# --------------------------------------------------------------------------------------------- trl-colocated


def trl_colocated() -> Snapshot:
    """A TRL GRPO run with colocated generation (no inference server), started as ``python3 train.py``: it trains."""
    now = at(10, 12)
    log = "/data/grpo/train.log"
    train = ("python3", "train.py", "--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct", "--use_vllm")
    gpus = (
        GpuState(0, "NVIDIA H200", "GPU-c0", 91.0, 96_300_000_000, 150_100_000_000, 58.0, 410.0, "DEFAULT", (8120,)),
    )
    history = History(
        gpu_util={0: series(now, wobble(88, 8, 13))},
        gpu_mem={0: series(now, lambda i: 64.2)},
        ram_used=series(now, wobble(22, 1, 30)),
        swap_used=series(now, lambda i: 0.0),
        rss={"trainer": series(now, lambda i: 9.1 * GB + i * 2e5)},
    )
    metric = "{'loss': '-0.01234', 'grad_norm': '0.8898', 'reward': '0.6113', 'epoch': '0.41'}"
    return snapshot(
        host="h200-pod-1",
        time=now,
        profile="trl",
        run_dir="/data/grpo",
        uptime_s=2 * 3600,
        run_uptime_s=41 * 60,
        events={
            "step": event(
                "step",
                INFO,
                412,
                at(9, 31),
                at(10, 11, 55),
                rate=10.0,
                files={log: 412},
                recent=[(log, 9012, metric, at(10, 11, 55))],
            ),
            "checkpoint_saved": event("checkpoint_saved", INFO, 8, at(9, 36), at(10, 11), files={log: 8}),
            "connection_refused": zero("connection_refused", CRIT),
            "traceback": zero("traceback", WARN),
        },
        training=TrainingState(
            last_step=412,
            total_steps=1000,
            reward=0.611,
            steps_per_hour=600.0,
            stalled=False,
            last_step_at=at(10, 11, 55),
            last_line_at=at(10, 11, 59),
            rewards=tuple(0.2 + 0.4 * (1 - math.exp(-i / 9)) + 0.03 * math.sin(i * 1.7) for i in range(40)),
        ),
        checkpoint=CheckpointState(
            latest=CheckpointInfo("/data/grpo/out/checkpoint-400", 400, None, None, at(10, 11), 1_130_000_000), count=8
        ),
        server=ServerState(
            None,
            None,
            None,
            None,
            None,
            expected=False,
            evidence=("no server process, server log or URL: generation is colocated (use_vllm, vllm_mode=colocate)",),
        ),
        gpu=GpuStatus("nvml", True, None, gpus),
        holders=(
            GpuHolder(
                8120,
                at(9, 31),
                "root",
                train,
                ("/dev/nvidia0",),
                96_000_000_000,
                True,
                None,
                evidence="writes train.log under /data/grpo",
                gpus=(0,),
                attribution="nvml",
            ),
        ),
        memory=MemoryState(503_000_000_000, 392_000_000_000, 0, 0, 0, None),
        processes=(
            ProcessInfo(
                8120, at(9, 31), "trainer", "trainer", 9_100_000_000, 2.4e7, at(9, 31), 0, train, "/data/grpo", "root"
            ),
        ),
        disk=DiskState("/work", 640_000_000_000, 2_000_000_000_000),
        timeline=(TimelineEntry(at(10, 11), "last checkpoint saved (checkpoint-400)"),),
        history=history,
        sources=(SourceStatus("gpu", True, now), SourceStatus("holders", True, now - 3)),
        logs=(log,),
    )


def trl_colocated_lines() -> tuple[TaggedLine, ...]:
    log = "/data/grpo/train.log"
    rows: list[tuple[str, str, frozenset[str]]] = []
    for i in range(8):
        rows.append((log, f" 41%|████      | {405 + i}/1000 [40:12<59:01,  5.95s/it]", K()))
        loss = -0.0123 + 0.001 * i
        rows.append(
            (log, f"{{'loss': '{loss:.5f}', 'grad_norm': '0.88', 'reward': '0.61', 'epoch': '0.41'}}", K({"step"}))
        )
    return tagged(rows, start_lineno=8998)


# ---------------------------------------------------------------------------------------------- nccl-timeout

NCCL_WORK = (
    "[rank0]:[E1121 11:40:12.079294208 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=13, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=10000) ran for 10032 "
    "milliseconds before timing out."
)


def nccl_timeout() -> Snapshot:
    """torchrun with two ranks: rank 1 stops joining, rank 0's NCCL watchdog aborts it, torchrun names rank 0."""
    now = at(11, 41)
    log = "/data/ddp/torchrun.log"
    timeout = Incident(
        "nccl_timeout",
        log,
        27,
        at(11, 40, 12),
        at(11, 40, 15),
        3,
        "Watchdog caught collective operation timeout: ALLREDUCE SeqNum=13",
        None,
        "c1a7e2d0",
        rank=0,
        collective=CollectiveTimeout(0, 13, "ALLREDUCE", 10000, 10032, "0"),
    )
    root = ChildFailure(
        0, 0, -6, "SIGABRT", 31483, "ddp-pod-2", "2025-11-21_11:40:15", "Signal 6 (SIGABRT) received by PID 31483"
    )
    failed = Incident(
        "crash",
        log,
        88,
        at(11, 40, 15),
        at(11, 40, 15),
        24,
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED",
        None,
        "7d00e1b9",
        root_cause=root,
        victims=(ChildFailure(1, 1, -15, "SIGTERM", 31484, "ddp-pod-2", "2025-11-21_11:40:15", None),),
        cause=timeout,
    )
    return snapshot(
        host="ddp-pod-2",
        time=now,
        profile="generic",
        run_dir="/data/ddp",
        uptime_s=5 * 3600,
        run_uptime_s=None,
        events={
            "nccl_timeout": event(
                "nccl_timeout",
                CRIT,
                3,
                at(11, 40, 12),
                at(11, 40, 15),
                rate=0.0,
                streak=3,
                files={log: 3},
                recent=[(log, 27, NCCL_WORK, at(11, 40, 12))],
            ),
            "child_failed": event("child_failed", CRIT, 1, at(11, 40, 15), at(11, 40, 15), files={log: 1}),
            "traceback": event("traceback", WARN, 1, at(11, 40, 15), at(11, 40, 15), files={log: 1}),
            "step": event("step", INFO, 12, at(11, 39, 20), at(11, 39, 44), files={log: 12}),
        },
        incidents=(timeout, failed),
        training=TrainingState(12, None, None, 1800.0, False, at(11, 39, 44), at(11, 40, 15)),
        server=ServerState(
            None, None, None, None, None, expected=False, evidence=("no server process, server log or URL",)
        ),
        gpu=GpuStatus(
            "nvml",
            True,
            None,
            tuple(
                GpuState(
                    i, "NVIDIA H100 80GB HBM3", f"GPU-d{i}", 0.0, 600_000_000, 85_520_000_000, 35.0, 70.0, "DEFAULT"
                )
                for i in range(2)
            ),
        ),
        memory=MemoryState(2_015_000_000_000, 1_930_000_000_000, 0, 0, 0, None),
        processes=(
            ProcessInfo(
                31470,
                at(11, 39, 10),
                "launcher",
                "torchrun",
                None,
                None,
                at(11, 39, 10),
                0,
                ("torchrun", "--nproc-per-node", "2", "train.py"),
                "/data/ddp",
                "root",
                alive=False,
            ),
        ),
        findings=(
            Finding(
                CRIT,
                "torchrun_failed",
                "torchrun's root cause (first observed failure): rank 0 (exit code -6, SIGABRT, host ddp-pod-2), after "
                "NCCL collective timeout on rank 0: ALLREDUCE SeqNum=13, timeout 10000 ms, ran 10032 ms (printed 3 "
                "times) (torchrun.log:27, 11:40:12). Stopped after it: rank 1 (exit code -15, SIGTERM, host "
                "ddp-pod-2). (torchrun.log:88)",
                at(11, 40, 12),
            ),
            Finding(
                CRIT,
                "nccl_timeout",
                "1 NCCL collective timeout (printed 3 times): rank 0 ALLREDUCE SeqNum=13, timeout 10000 ms "
                "(torchrun.log:27, 11:40:12).",
                at(11, 40, 12),
            ),
        ),
        timeline=(
            TimelineEntry(at(11, 39, 44), "last training step (12)"),
            TimelineEntry(at(11, 40, 12), "NCCL timeouts begin (3, last 11:40:15)"),
        ),
        history=History(
            gpu_util={
                0: series(now, lambda i: 100.0 if i > 100 else 60.0),
                1: series(now, lambda i: 0.0 if i > 100 else 60.0),
            },
            gpu_mem={0: series(now, lambda i: 0.7), 1: series(now, lambda i: 0.7)},
            ram_used=series(now, lambda i: 4.2),
            swap_used=series(now, lambda i: 0.0),
        ),
        sources=(SourceStatus("gpu", True, now), SourceStatus("holders", True, now - 2)),
        logs=(log,),
    )


def nccl_timeout_lines() -> tuple[TaggedLine, ...]:
    log = "/data/ddp/torchrun.log"
    rows: list[tuple[str, str, frozenset[str]]] = [
        (log, "[rank0]: step 12 loss 0.4121", K({"step"})),
        (log, NCCL_WORK, K({"nccl_timeout"})),
        (
            log,
            "[rank0]:[E1121 11:40:15.091774208 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
            "Process group watchdog thread terminated with exception",
            K({"nccl_timeout"}),
        ),
        (
            log,
            "W1121 11:40:15.220000 31470 torch/distributed/elastic/multiprocessing/api.py:897] Sending process "
            "31484 closing signal SIGTERM",
            K(),
        ),
        (log, "Traceback (most recent call last):", K({"traceback"})),
        (log, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", K({"child_failed"})),
        (log, "Root Cause (first observed failure):", K()),
        (log, "[0]:", K()),
        (log, "  rank      : 0 (local_rank: 0)", K()),
        (log, "  exitcode  : -6 (pid: 31483)", K()),
        (log, "  traceback : Signal 6 (SIGABRT) received by PID 31483", K()),
    ]
    return tagged(rows, start_lineno=26)


# ----------------------------------------------------------------------------------------------- registry

SCENARIOS: dict[str, tuple[Callable[[], Snapshot], Callable[[], tuple[TaggedLine, ...]]]] = {
    "healthy": (healthy, healthy_lines),
    "server-crash": (server_crash, server_crash_lines),
    "restart-loop": (restart_loop, restart_loop_lines),
    "memory-leak": (memory_leak, memory_leak_lines),
    "gpu-zombie": (gpu_zombie, gpu_zombie_lines),
    "startup-crash": (startup_crash, startup_crash_lines),
    "trl-colocated": (trl_colocated, trl_colocated_lines),
    "nccl-timeout": (nccl_timeout, nccl_timeout_lines),
}

PLANS: dict[str, Callable[[], dict[str, ActionPlan]]] = {
    "healthy": plans_all_runnable,
    "server-crash": server_crash_plans,
    "memory-leak": memory_leak_plans,
    "gpu-zombie": lambda: {"kill-zombies": zombie_plan()},
}


def feed(name: str, *, readonly: bool = False, plans: dict[str, ActionPlan] | None = None) -> StaticFeed:
    snap, lines = SCENARIOS[name]
    chosen = plans if plans is not None else PLANS.get(name, dict)()
    return StaticFeed(decided(snap()), lines(), chosen, readonly=readonly)


def decided(snap: Snapshot) -> Snapshot:
    """The snapshot with the verdict the engine would put on it (engine/diagnosis/verdict): every view renders it."""
    from rlwatch.engine.diagnosis import Context, decide

    verdict, findings = decide(snap, Context())
    return replace(snap, verdict=verdict, findings=findings)
