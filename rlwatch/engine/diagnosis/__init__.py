"""Turn a snapshot into findings: what is wrong, in the words a person would use after a health check.

Each rule is a small function over the snapshot plus a few facts that are not in it (:class:`Context`: thresholds,
start times, missing expected processes), in a module of its own concern: the server, restarts, memory, the
watchdog, the GPUs, training, crashes, the disk; the GPUs' hardware and Xids, the kernel and the pod's limits,
learning that breaks; and whether rlwatch may act at all (trust). ``health`` first says what the run is doing, from
evidence of progress (progressing, finished, crashed, hung, stopped, unknown). Rules never raise on absent data: a
rule whose inputs are ``None`` says nothing. ``wording`` says times, sizes and durations the way every view says
them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rlwatch.common.state import Finding, RankTime, RunState, Snapshot, TimelineEntry, Verdict
from rlwatch.common.vocab import FindingCode
from rlwatch.engine.diagnosis.attempts import attempts
from rlwatch.engine.diagnosis.base import CRIT, INFO, WARN, Context, Rule
from rlwatch.engine.diagnosis.collectives import collectives, gpu_straggler
from rlwatch.engine.diagnosis.crashes import catalogued_failures, crashes, failure_text, occurrences, torchrun_failure
from rlwatch.engine.diagnosis.disk import disk
from rlwatch.engine.diagnosis.gpu import OUTSIDE_MIN_BYTES, gpu
from rlwatch.engine.diagnosis.hardware import gpu_fault_in_logs, gpu_health, xid_errors
from rlwatch.engine.diagnosis.health import assess_run as _assess_health
from rlwatch.engine.diagnosis.health import health
from rlwatch.engine.diagnosis.host import checkpoint_space, kernel_kills, memlock, shared_memory
from rlwatch.engine.diagnosis.learning import learning
from rlwatch.engine.diagnosis.loss_scale import loss_scale
from rlwatch.engine.diagnosis.memory import brake, memory
from rlwatch.engine.diagnosis.ray import RAY_CODES, ray, ray_run_state
from rlwatch.engine.diagnosis.restarts import restart_loop
from rlwatch.engine.diagnosis.server import server_down
from rlwatch.engine.diagnosis.stacks import rank_times, stack_run_state, straggler
from rlwatch.engine.diagnosis.timeline import timeline
from rlwatch.engine.diagnosis.training import training
from rlwatch.engine.diagnosis.trust import actions_off
from rlwatch.engine.diagnosis.verdict import decide, loop_state
from rlwatch.engine.diagnosis.watchdog import watchdog, watchdog_state
from rlwatch.engine.diagnosis.wording import (
    backlog_text,
    exact_first,
    exact_time,
    first_text,
    hhmm,
    human_bytes,
    human_duration,
    incident_text,
    last_text,
    percent_read,
    when_text,
)

__all__ = [
    "CRIT",
    "INFO",
    "OUTSIDE_MIN_BYTES",
    "RULES",
    "WARN",
    "Context",
    "Diagnosis",
    "Rule",
    "backlog_text",
    "decide",
    "decide_run_state",
    "diagnose",
    "exact_first",
    "exact_time",
    "failure_text",
    "first_text",
    "hhmm",
    "human_bytes",
    "human_duration",
    "incident_text",
    "last_text",
    "occurrences",
    "percent_read",
    "run_diagnosis",
    "timeline",
    "torchrun_failure",
    "when_text",
]

# Findings that name a failure the run ended in, from the catalogue of known kinds.
NAMED_FAILURES: frozenset[FindingCode] = frozenset(
    {
        "torchrun_failed",
        "crash_repeating",
        "cuda_oom",
        "nccl_timeout",
        "nccl_error",
        "child_failed",
        "engine_dead",
        "oom_kill",
        "slurm_cancelled",
        "node_failure",
        "server_down",
        "connection_refused",
        "restart_loop",
        "kernel_oom_kill",
        "kernel_segfault",
        "kernel_sigbus",
        "gpu_lost",
        "collective_mismatch",
        "gpu_fault",
        "gpu_memory_fault",
        "shm_exhausted",
        *RAY_CODES,  # which Ray actor, worker or node died, and why (diagnosis/ray)
    }
)

RULES: tuple[Rule, ...] = (
    health,
    server_down,
    restart_loop,
    memory,
    brake,
    watchdog,
    watchdog_state,
    gpu,
    attempts,
    training,
    crashes,
    catalogued_failures,
    ray,
    disk,
    actions_off,
    # the machine and the numbers (issue #28): hardware, the kernel, the pod's limits, learning
    gpu_health,
    xid_errors,
    gpu_fault_in_logs,
    kernel_kills,
    shared_memory,
    memlock,
    checkpoint_space,
    learning,
    loss_scale,
    # where each rank stands: stragglers from the stacks sampled while the run lives
    straggler,
    # collectives compared across ranks (flight recorder, NCCL watchdog lines); a rank whose GPU computes longer
    collectives,
    gpu_straggler,
)


def decide_run_state(s: Snapshot, ctx: Context) -> RunState:
    """The run's state from evidence (:mod:`.health`), with what Ray says of a Ray-based run (:mod:`.ray`) and what
    the ranks' stacks say (:mod:`.stacks`: a hang whatever the logs print, who waits where); a run caught in a
    restart loop is crashed, in the loop's words (:func:`.verdict.loop_state`)."""
    rs = stack_run_state(s, ctx, ray_run_state(s, _assess_health(s, ctx)))
    if rs.state not in ("crashed", "finished"):
        loop = next(iter(restart_loop(s, ctx)), None)
        if loop is not None:
            return loop_state(rs, loop)
        # The same exception on every start, with no progress after the latest (it is critical only then): the run
        # is crashed, whatever its processes or a progress line read in the same chunk as the crash suggest.
        repeating = next((f for f in crashes(s, ctx) if f.code == "crash_repeating" and f.severity is CRIT), None)
        if repeating is not None:
            return RunState("crashed", repeating.message.rstrip("."), rs.since, rs.evidence)
    return rs


def diagnose(s: Snapshot, ctx: Context) -> tuple[Finding, ...]:
    """Every rule's findings, most severe first. The run's state (:func:`decide_run_state`) is on the snapshot first:
    rules that would say the same thing in other words (a stall beside a hang) look at it."""
    found: list[Finding] = []
    for rule in RULES:
        found.extend(rule(s, ctx))
    codes = {f.code for f in found if f.severity is CRIT}
    if codes & NAMED_FAILURES or any(code.startswith("xid_") for code in codes):
        # The catalogue named the failure (torchrun's root cause, an engine death, an NCCL timeout…): the run's state
        # is still crashed, shown as such, but the finding is the named one, not the same failure twice.
        found = [f for f in found if f.code != "run_crashed"]
    if codes & RAY_CODES:
        found = [f for f in found if f.code != "crashed"]  # the driver's last exception: Ray's finding says more
    if "hung" in codes:
        found = [f for f in found if f.code != "stalled"]  # the same silence, said by the stricter rule
    return tuple(sorted(found, key=lambda f: (f.severity.rank, f.since or 0.0)))


@dataclass(frozen=True)
class Diagnosis:
    """What the diagnosis makes of one snapshot, every part in one record: the run's state, where each rank spent its
    time, the findings in the order every view shows them, the timeline and the verdict."""

    run_state: RunState
    rank_times: tuple[RankTime, ...]
    findings: tuple[Finding, ...]
    timeline: tuple[TimelineEntry, ...]
    verdict: Verdict

    def applied(self, s: Snapshot) -> Snapshot:
        """``s`` with this diagnosis on it."""
        return replace(
            s,
            run_state=self.run_state,
            rank_times=self.rank_times,
            findings=self.findings,
            timeline=self.timeline,
            verdict=self.verdict,
        )


def run_diagnosis(s: Snapshot, ctx: Context) -> Diagnosis:
    """Diagnose an assembled snapshot, each pass reading what the one before decided: the run's state first (rules
    look at it), the ranks' times where stacks are sampled (the straggler rule reads them), every rule's findings and
    the timeline, then the one verdict, which orders the findings (its headline first)."""
    state = decide_run_state(s, ctx)
    s = replace(s, run_state=state)
    if s.sampling is not None:
        s = replace(s, rank_times=rank_times(s, ctx))
    s = replace(s, findings=diagnose(s, ctx), timeline=timeline(s))
    verdict, findings = decide(s, ctx)
    return Diagnosis(state, s.rank_times, findings, s.timeline, verdict)
