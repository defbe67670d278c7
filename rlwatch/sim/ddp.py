"""One rank of a data-parallel job under torchrun (scenario ``nccl-timeout``), run as ``python -u train.py``.

Both ranks all-reduce once a step for ``ddp_steps`` steps; then rank 1 stops joining collectives (a hung rank) and
sleeps. Rank 0's next all-reduce times out: after ``nccl_timeout_ms`` (scaled by the speed) it prints what
ProcessGroupNCCL's watchdog prints in torch 2.11 (tests/real/torchrun-nccl-timeout-2gpu/torchrun.log): the timeout,
the failure, the failed collective's stack and the flight-recorder dump signal, which rank 1 sees through the store
(here a token file) and answers with its own dump lines. After the dump wait the watchdog takes rank 0 down: the
timeout printed a second and a third time, ``terminate called after throwing an instance of 'c10::DistBackendError'``,
and a real SIGABRT (exit code -6). The rest (SIGTERM to rank 1, the ``ChildFailedError`` report) is torchrun's.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time
from pathlib import Path
from types import ModuleType

from rlwatch.sim import formats, lifeline
from rlwatch.sim.c10d import install_c10d
from rlwatch.sim.common import Layout, load_spec, scaled, sleep_until, write_kernel_log
from rlwatch.sim.ledger import LogSink, PieceLedger

DUMP_KEY = "nccl-dump-signal"  # the store key the timed-out rank sets and the others watch
COLLECTIVE_LINE = "all_reduce(step)" + "  # the collective"  # joined here so that only the call's line holds it


def _line_of(path: Path, needle: str) -> int:
    try:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if needle in line:
                return n
    except OSError:
        pass
    return 1


def failed_collective_stack(script: Path) -> list[str]:
    """The Python stack of the collective that timed out, as the watchdog prints it (innermost first)."""
    here = Path(__file__)
    return [
        f"all_reduce from {formats.SITE}/torch/distributed/distributed_c10d.py:3068",
        f"wrapper from {formats.SITE}/torch/distributed/c10d_logger.py:83",
        f"main from {here}:{_line_of(here, COLLECTIVE_LINE)}",
        f"<module> from {script}:{_line_of(script, 'sys.exit(main())')}",
    ]


def main() -> int:
    rank = int(os.environ.get("RANK", "0"))
    layout = Layout.of(os.getcwd())
    spec = load_spec(layout)
    if "sim_id" in spec:
        lifeline.watch(layout.alive, str(spec["sim_id"]))
    speed = float(spec.get("speed", 1.0))
    steps = int(spec.get("ddp_steps", 3))
    step_time = float(spec.get("step_time", 2.0))
    timeout_ms = int(spec.get("nccl_timeout_ms", 10000))
    hung_rank = int(spec.get("hung_rank", 1))
    ledger = PieceLedger(layout, "rank", f"rank-{rank}")
    out = LogSink(ledger)
    token = layout.faults_dir / DUMP_KEY
    ledger.update("running", rank=rank)

    def all_reduce(step: int) -> None:
        sleep_until(time.monotonic() + scaled(step_time, speed))
        out.write(f"[rank{rank}] step {step} all_reduce ok")
        if spec.get("hang") and rank == 0:  # the trainer's own progress line (AReaL's, which rlwatch reads)
            out.write(f"Train step {step + 1}/{steps * 10} done.")
        ledger.update(last_step=step, last_step_at=time.time())

    oom_rank = spec.get("oom_rank")
    oom_at = int(spec.get("oom_at_step", 0))
    for step in range(steps):
        if oom_rank is not None and rank == int(oom_rank) and step == oom_at:
            oom_killed(layout, ledger, int(spec.get("oom_rss_kb", 61_234_567)))
        all_reduce(step)  # the collective
    if oom_rank is not None:
        return 0
    if spec.get("hang"):
        return hang(rank, hung_rank, out, ledger, speed, steps)
    seq = steps + 1
    if rank == hung_rank:
        ledger.update("hung")
        while not token.exists():
            time.sleep(0.05)
        out.write(formats.nccl_dump_signal(rank, seq, timed_out_rank=0))
        while True:  # stuck for good: only torchrun's SIGTERM ends it
            time.sleep(3600)
    waited = time.monotonic()
    sleep_until(waited + timeout_ms / 1000.0 / speed)
    ran_ms = timeout_ms + 32
    out.write(formats.nccl_watchdog_timeout(rank, seq, timeout_ms, ran_ms, failed_collective_stack(layout.user_script)))
    out.write(formats.nccl_dump_signal(rank, seq, timed_out_rank=rank))
    token.parent.mkdir(parents=True, exist_ok=True)
    token.touch()
    ledger.update("timed_out", seq=seq)
    sleep_until(time.monotonic() + scaled(60.0, speed, floor=0.5))  # the dump wait before the watchdog aborts
    out.write(formats.nccl_abort(rank, seq, timeout_ms, ran_ms))
    ledger.update("aborted", seq=seq)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a real abort, but no core file in the run directory
    sys.stdout.flush()
    os.abort()


def never_reaches_collective(out: LogSink, speed: float) -> None:
    """The hung rank (scenario ``hang``): it stops joining the collectives and prints a heartbeat for ever, as a
    rank waiting on rollout workers does. Its Python stack names this function, in the run's own code."""
    while True:
        out.write("waiting for rollout workers...")
        time.sleep(scaled(2.0, speed, floor=0.2))


def train_step(c10d: ModuleType, seq: int) -> None:
    """The next step's gradient all-reduce, which the hung rank never joins: the waiting rank stands in torch's
    ``all_reduce`` (distributed_c10d.py) under this frame, as a real rank does (tests/real/torchrun-hang-2gpu)."""
    c10d.all_reduce(seq)


def hang(rank: int, hung_rank: int, out: LogSink, ledger: PieceLedger, speed: float, seq: int) -> int:
    if rank == hung_rank:
        ledger.update("hung")
        never_reaches_collective(out, speed)
    ledger.update("waiting")
    layout = Layout.of(os.getcwd())
    c10d = install_c10d(layout.sim_dir)
    c10d.init_process_group(layout.sim_dir / "c10d", rank, int(os.environ.get("WORLD_SIZE", "2")))
    train_step(c10d, seq)
    return 0


def oom_killed(layout: Layout, ledger: PieceLedger, rss_kb: int) -> None:
    """Scenario kernel-oom: the container's memory cgroup hits its limit and the kernel kills this rank. The kernel's
    two lines (mm/oom_kill.c dump_oom_summary and __oom_kill_process, as in tests/real/host/kernel/) go to the run's
    dmesg.log, then the process really dies of SIGKILL, so torchrun reports exit code -9 for it."""
    pid = os.getpid()
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        comm = "python3"
    memcg = "/kubepods/burstable/pod5d8e1f0a-sim/ddp"
    write_kernel_log(
        layout,
        f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=ddp,mems_allowed=0,oom_memcg={memcg},"
        f"task_memcg={memcg},task={comm},pid={pid},uid=0",
        f"Memory cgroup out of memory: Killed process {pid} ({comm}) total-vm:{rss_kb + 9_000_000}kB, "
        f"anon-rss:{rss_kb}kB, file-rss:81234kB, shmem-rss:2048kB, UID:0 pgtables:130124kB oom_score_adj:0",
    )
    ledger.update("oom_killed", oom_killed_at=time.time())
    sys.stdout.flush()
    os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
