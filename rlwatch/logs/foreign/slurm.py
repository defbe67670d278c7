"""Slurm's records of how a job ended, each parsed here once: the catalogue counts them (the ``oom_kill``,
``slurm_cancelled`` and ``node_failure`` kinds of :mod:`rlwatch.logs.kinds`) and a log's ending names them
(:mod:`rlwatch.logs.shapes`).

The wordings, by where Slurm prints them:

- the cgroup's OOM kills: slurmstepd's cgroup plugins ``Detected 1 oom-kill event(s) in StepId=191.batch cgroup.
  Some of your processes may have been killed by the cgroup out-of-memory handler.`` (src/plugins/task/cgroup,
  src/plugins/cgroup/v2), since Slurm 23.02 ``Detected 2 oom_kill events in StepId=…. Some of the step tasks have
  been OOM Killed.``, and srun's ``srun: error: node107: task 0: Out Of Memory`` (src/srun/step_ctx.c, launch.c);
- a job or step ended from outside (src/slurmd/slurmstepd/req.c, _handle_signal_container; srun's own for a step):
  ``*** JOB 494583 ON node1 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***``, ``… DUE TO PREEMPTION ***``,
  ``… DUE TO JOB REQUEUE ***``, ``*** STEP 494583.0 ON node1 CANCELLED AT … ***`` (scancel): Slurm sends SIGTERM,
  then SIGKILL;
- the node failing under it: ``*** JOB 1 ON n1 CANCELLED AT … DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS
  ***`` (req.c; before 20.02 ``… DUE TO NODE FAILURE ***``), srun's and salloc's ``error: Node failure on worker-1``
  (srun_job.c, allocate.c), the ``NODE_FAIL`` state sacct reports.
"""

from __future__ import annotations

import re

__all__ = [
    "CANCELLED_LITERALS",
    "CANCELLED_WORDS",
    "NODE_FAILURE_LITERALS",
    "NODE_FAILURE_WORDS",
    "OOM_LITERALS",
    "OOM_WORDS",
    "cancelled",
    "node_failed",
    "oom_kill_reported",
]

OOM_WORDS = r"Detected \d+ oom[-_]kill event|\btask \d+: Out Of Memory"
OOM_LITERALS = ("oom-kill event", "oom_kill event", ": Out Of Memory")
_OOM = re.compile(OOM_WORDS)

_CANCELLED_AT = r"\*\*\* (?:JOB|STEP) \S+ (?:ON \S+ )?CANCELLED AT \S+"
# Counted as slurm_cancelled: the whole record, for any reason but the node's failure (a kind of its own).
CANCELLED_WORDS = _CANCELLED_AT + r" (?:DUE TO (?:TIME LIMIT|PREEMPTION|JOB REQUEUE) )?(?:ON \S+ )?\*\*\*"
CANCELLED_LITERALS = ("CANCELLED AT",)
_CANCELLED = re.compile(_CANCELLED_AT + r"(?: DUE TO (TIME LIMIT|PREEMPTION|JOB REQUEUE|NODE FAILURE))?")

NODE_FAILURE_WORDS = r"CANCELLED AT \S+ DUE TO NODE FAILURE|\bNode failure on \S+|\bNODE_FAIL\b"
NODE_FAILURE_LITERALS = ("DUE TO NODE FAILURE", "Node failure on", "NODE_FAIL")
_NODE_FAILURE = re.compile(r"\bNode failure on \S+")


def oom_kill_reported(text: str) -> bool:
    """Whether the line is Slurm's word that the job's cgroup OOM-killed some of its processes."""
    return ("oom" in text or "Out Of Memory" in text) and _OOM.search(text) is not None


def cancelled(text: str) -> str | None:
    """Why Slurm cancelled the job or step, in lower case ("time limit", "preemption", "job requeue", "node
    failure"; "scancel" when the record gives no reason); None: the line is no cancellation."""
    if "CANCELLED AT" not in text:
        return None
    m = _CANCELLED.search(text)
    if m is None:
        return None
    return (m.group(1) or "scancel").lower()


def node_failed(text: str) -> bool:
    """Whether the line is srun's or salloc's word that a node of the job failed (``Node failure on …``)."""
    return "Node failure on" in text and _NODE_FAILURE.search(text) is not None
