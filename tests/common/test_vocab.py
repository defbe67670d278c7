"""The vocabularies rlwatch decides in (rlwatch.common.vocab): each listed once, and a word from outside the list
read back from another process's file is no state."""

from __future__ import annotations

import os
import time

import psutil

from rlwatch.common.vocab import JOB_STATES, RUN_STATES, STATUSES, is_run_state
from rlwatch.sources.watchdog_state import status_from


def test_run_states_are_the_designs_six() -> None:
    assert set(RUN_STATES) == {"progressing", "finished", "crashed", "hung", "stopped", "unknown"}
    assert set(STATUSES) == {"CRITICAL", "WARNING", "OK", "UNKNOWN", "NO RUN"}
    assert JOB_STATES[0] == "hung" and JOB_STATES[-1] == "progressing"  # the fleet lists the worst job first


def test_is_run_state() -> None:
    assert all(is_run_state(s) for s in RUN_STATES)
    assert not any(is_run_state(s) for s in ("hang", "HUNG", "", None, 3, "OK"))


def test_a_watchdog_state_file_with_a_misspelt_state_says_no_state() -> None:
    """The watchdog's state file is read by other processes: a state that is not one of the list is dropped, never
    passed on as if it were one."""
    me = psutil.Process()
    base = {"pid": os.getpid(), "create_time": me.create_time(), "heartbeat": time.time()}
    good = status_from({**base, "run_state": {"state": "hung", "why": "no step", "since": 5.0}}, time.time())
    assert good.run_state == ("hung", "no step", 5.0)
    bad = status_from({**base, "run_state": {"state": "hang", "why": "no step"}}, time.time())
    assert bad.run_state is None
