"""The words rlwatch decides in, each vocabulary listed once.

A run's state, a verdict's status, where a rank stands and a finding's code are compared as plain strings all over
the package (and written as such into JSON, Prometheus labels and state files). They are ``Literal`` types rather
than enums so the JSON and every comparison stay exactly as they are, while mypy (strict, with ``strict_equality``)
rejects a field set to, or compared with, a word that is not in the list: a misspelt ``"hang"`` fails the type check
instead of silently never matching.
"""

from __future__ import annotations

from typing import Final, Literal, TypeGuard, cast, get_args

__all__ = [
    "FINDING_CODES",
    "FINDING_CODE_FAMILIES",
    "JOB_STATES",
    "RANK_PLACES",
    "RUN_STATES",
    "STATUSES",
    "FindingCode",
    "JobStateName",
    "RankPlace",
    "RunStateName",
    "StatusName",
    "finding_meaning",
    "is_run_state",
    "xid_code",
]

# What the run is doing, from evidence (design: "Health"). Only "progressing" and "finished" are healthy.
RunStateName = Literal["progressing", "finished", "crashed", "hung", "stopped", "unknown"]
RUN_STATES: Final[tuple[RunStateName, ...]] = get_args(RunStateName)

# The verdict's one word for the run and everything around it: CRITICAL or WARNING by the worst finding, OK only
# with progress, UNKNOWN where the run's state is not known, NO RUN where nothing of a run was found.
StatusName = Literal["CRITICAL", "WARNING", "OK", "UNKNOWN", "NO RUN"]
STATUSES: Final[tuple[StatusName, ...]] = get_args(StatusName)

# Where one rank of a distributed job stands: in a collective, standing still outside one, or its frames move.
RankPlace = Literal["waiting", "elsewhere", "moving"]
RANK_PLACES: Final[tuple[RankPlace, ...]] = get_args(RankPlace)

# A job across its hosts (``rlwatch fleet``): every rank still ("hung"), some ranks wait on others ("waiting"), no
# host says ("unknown"), or no rank waits ("progressing"). In the order the fleet lists jobs: the worst first.
JobStateName = Literal["hung", "waiting", "unknown", "progressing"]
JOB_STATES: Final[tuple[JobStateName, ...]] = get_args(JobStateName)


def is_run_state(value: object) -> TypeGuard[RunStateName]:
    """``value`` is a run state: for a state read back from a file another process wrote (the watchdog's)."""
    return isinstance(value, str) and value in RUN_STATES


# Every finding's code (the list is ``FINDING_CODES`` below, each with its meaning).
FindingCode = Literal[
    "run_crashed",
    "hung",
    "run_stopped",
    "run_finished",
    "run_state_unknown",
    "run_lost_launcher",
    "earlier_attempt",
    "no_run",
    "stalled",
    "weight_update_slow",
    "crashed",
    "crash_repeating",
    "torchrun_failed",
    "cuda_oom",
    "nccl_timeout",
    "nccl_error",
    "child_failed",
    "engine_dead",
    "oom_kill",
    "slurm_cancelled",
    "node_failure",
    "server_wait",
    "timeout",
    "restart_loop",
    "server_down",
    "server_unhealthy",
    "server_starting",
    "server_gone_after_finish",
    "connection_errors",
    "connection_refused",
    "memory_high",
    "memory_leak",
    "over_memory_limit",
    "brake",
    "brake_no_relief",
    "gpu_strays",
    "gpu_unknown_holders",
    "gpu_outside",
    "device_busy",
    "gpu_unavailable",
    "gpu_lost",
    "gpu_memory_fault",
    "gpu_memory_pending",
    "gpu_memory_history",
    "gpu_pcie_degraded",
    "gpu_throttled",
    "gpu_fault",
    "gpu_straggler",
    "kernel_oom_kill",
    "kernel_segfault",
    "kernel_gpf",
    "kernel_sigbus",
    "shm_small",
    "shm_exhausted",
    "memlock_low",
    "inodes_low",
    "disk_low",
    "checkpoint_wont_fit",
    "checkpoint_space",
    "learning_nonfinite",
    "learning_spike",
    "learning_kl_blowup",
    "learning_entropy_collapse",
    "learning_length_clipped",
    "learning_reward_collapse",
    "loss_scale_collapse",
    "loss_scale_overflow_storm",
    "straggler",
    "collective_mismatch",
    "collective_missing_rank",
    "ray_actor_died",
    "ray_memory_monitor",
    "ray_node_died",
    "ray_cluster_unreachable",
    "ray_job_failed",
    "ray_job_stopped",
    "ray_earlier_failure",
    "ray_node_dead",
    "expected_missing",
    "watchdog_gave_up",
    "watchdog_not_responding",
    "watchdog_died",
    "watchdog_reading",
    "actions_off",
]

# Every finding's code (``Finding.code``: the JSON report's ``code``, the exporter's label, the key every view's
# words and remedies are looked up by), with what it means in one line. A rule emits only these; the test
# ``tests/common/test_vocab.py`` checks that each is emitted somewhere and that nothing else is.
FINDING_CODES: Final[dict[FindingCode, str]] = {
    # the run's state (diagnosis/health)
    "run_crashed": "the run crashed: its last exception, exit code or signal, and where",
    "hung": "the run's processes live but it has not progressed for longer than its cadence allows",
    "run_stopped": "no process of the run lives and no failure was seen",
    "run_finished": "the run finished, by explicit completion evidence",
    "run_state_unknown": "whether the run progresses the evidence does not say",
    "run_lost_launcher": "the run's launcher is gone while its processes live on",
    "earlier_attempt": "an earlier attempt of the run failed; this one went on",
    "no_run": "nothing of a training run was found where rlwatch looked",
    "stalled": "no training step for longer than the stall threshold",
    "weight_update_slow": "a weight update took close to its timeout",
    # crashes and failures in the logs (diagnosis/crashes)
    "crashed": "an exception in the run's logs",
    "crash_repeating": "the same crash happened on several starts",
    "torchrun_failed": "torchrun's failure report: its root cause and the ranks it took down",
    "cuda_oom": "CUDA out-of-memory errors in the logs",
    "nccl_timeout": "an NCCL collective timed out (the watchdog's timeout line)",
    "nccl_error": "NCCL errors in the logs",
    "child_failed": "torchrun's ChildFailedError lines in the logs",
    "engine_dead": "the inference engine (SGLang, vLLM) died",
    "oom_kill": "an OOM kill the logs or the memory cgroup report",
    "slurm_cancelled": "Slurm cancelled the job (time limit, preemption, requeue, scancel)",
    "node_failure": "Slurm reported a node failure",
    "server_wait": "retries waiting for the vLLM server to come up",
    "timeout": "timeout errors in the logs",
    "restart_loop": "the container or a role restarts again and again, never staying up",
    # the inference server (diagnosis/server)
    "server_down": "the inference server does not answer",
    "server_unhealthy": "the server's process lives but its health check fails",
    "server_starting": "the server has not answered yet since it started",
    "server_gone_after_finish": "the server does not answer, after training finished",
    "connection_errors": "connection-refused errors while the server is up",
    "connection_refused": "connection-refused errors: the server is gone or not up yet",
    # memory (diagnosis/memory)
    "memory_high": "host or container memory is nearly used up",
    "memory_leak": "a process's memory grows steadily",
    "over_memory_limit": "a process is over its configured memory limit",
    "brake": "the emergency brake fired",
    "brake_no_relief": "the emergency brake keeps firing and frees no memory",
    # GPUs and their holders (diagnosis/gpu, diagnosis/hardware)
    "gpu_strays": "stray processes hold the GPU",
    "gpu_unknown_holders": "processes rlwatch cannot classify hold the GPU",
    "gpu_outside": "processes outside this container hold the GPU",
    "device_busy": "the GPU is busy or unavailable to the run",
    "gpu_unavailable": "GPU data cannot be read",
    "gpu_lost": "NVML says a GPU is lost: it fell off the bus or stopped answering",
    "gpu_memory_fault": "a GPU has a hardware memory fault",
    "gpu_memory_pending": "a GPU had an uncorrectable memory error and waits for a reset",
    "gpu_memory_history": "a GPU has had uncorrectable ECC errors over its life",
    "gpu_pcie_degraded": "a GPU's PCIe link runs narrower or slower than it can",
    "gpu_throttled": "a GPU is throttled (power, heat, clocks)",
    "gpu_fault": "the run's logs report a GPU hardware fault",
    "gpu_straggler": "a GPU-bound rank slows the others",
    # the host (diagnosis/host, diagnosis/disk)
    "kernel_oom_kill": "the kernel OOM killer killed a process",
    "kernel_segfault": "the kernel reports a segmentation fault",
    "kernel_gpf": "the kernel reports a general protection fault",
    "kernel_sigbus": "the kernel reports a bus error (SIGBUS)",
    "shm_small": "/dev/shm is smaller than the run needs",
    "shm_exhausted": "/dev/shm ran out",
    "memlock_low": "the locked-memory limit is too low for NCCL and RDMA",
    "inodes_low": "few inodes are left on a volume the run writes",
    "disk_low": "little space is left on the output volume",
    "checkpoint_wont_fit": "the next checkpoint will not fit on its volume",
    "checkpoint_space": "the checkpoints still to come will not fit on their volume",
    # learning and fp16 (diagnosis/learning, diagnosis/loss_scale)
    "learning_nonfinite": "a logged metric (loss, reward …) is NaN or infinite",
    "learning_spike": "a logged metric spiked",
    "learning_kl_blowup": "KL stays above its limit",
    "learning_entropy_collapse": "entropy collapsed",
    "learning_length_clipped": "many responses are cut at the length limit",
    "learning_reward_collapse": "reward collapsed after it had risen",
    "loss_scale_collapse": "fp16's loss scale was halved down to nothing",
    "loss_scale_overflow_storm": "fp16 overflows skip more steps than are taken",
    # ranks and collectives (diagnosis/stacks, diagnosis/collectives)
    "straggler": "one rank slows the others (where each rank spends its time)",
    "collective_mismatch": "ranks entered different collectives at one sequence number",
    "collective_missing_rank": "a rank never entered the collective the others wait in",
    # Ray (diagnosis/ray)
    "ray_actor_died": "a Ray actor or task died",
    "ray_memory_monitor": "Ray's memory monitor killed a worker",
    "ray_node_died": "a node of the Ray cluster died",
    "ray_cluster_unreachable": "the Ray cluster cannot be reached",
    "ray_job_failed": "the Ray job failed",
    "ray_job_stopped": "the Ray job was stopped",
    "ray_earlier_failure": "an earlier Ray attempt failed; the run went on",
    "ray_node_dead": "Ray reports dead nodes",
    # the watchdog and actions (diagnosis/watchdog, diagnosis/trust)
    "expected_missing": "an expected process (the watchdog) is not running",
    "watchdog_gave_up": "the watchdog gave up on a target after too many restarts",
    "watchdog_not_responding": "the watchdog's heartbeat stopped: it is stuck",
    "watchdog_died": "the watchdog is gone without stopping cleanly",
    "watchdog_reading": "the watchdog is still reading the logs' backlog",
    "actions_off": "actions are off (an untrusted configuration)",
}

# Codes made from a number the evidence carries, one family each: ``xid_79`` is NVIDIA's Xid 79 (diagnosis/hardware).
FINDING_CODE_FAMILIES: Final[dict[str, str]] = {
    "xid_": "an Xid error the NVIDIA driver logged, by its number",
}


def xid_code(xid: int) -> FindingCode:
    """The code of a finding about Xid ``xid``. The family is open (any number the driver logs), so no ``Literal``
    can list it; it is typed as a finding code so that every other code stays checked wherever it is compared."""
    return cast("FindingCode", f"xid_{xid}")


def finding_meaning(code: str) -> str | None:
    """What a finding's code means, in one line; None for a code rlwatch never emits."""
    if code in FINDING_CODES:
        return FINDING_CODES[code]
    family = next((f for f in FINDING_CODE_FAMILIES if code.startswith(f) and code[len(f) :].isdigit()), None)
    return FINDING_CODE_FAMILIES[family] if family is not None else None
