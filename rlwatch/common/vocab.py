"""The words rlwatch decides in, each vocabulary listed once.

A run's state, a verdict's status and where a rank stands are compared as plain strings all over the package (and
written as such into JSON, Prometheus labels and state files). They are ``Literal`` types rather than enums so the
JSON and every comparison stay exactly as they are, while mypy (strict, with ``strict_equality``) rejects a field
set to, or compared with, a word that is not in the list: a misspelt ``"hang"`` fails the type check instead of
silently never matching.
"""

from __future__ import annotations

from typing import Final, Literal, TypeGuard, get_args

__all__ = [
    "JOB_STATES",
    "RANK_PLACES",
    "RUN_STATES",
    "STATUSES",
    "JobStateName",
    "RankPlace",
    "RunStateName",
    "StatusName",
    "is_run_state",
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
