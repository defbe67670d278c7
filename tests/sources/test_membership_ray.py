"""A Ray actor the run's logs name is the run's, with its children; not the rest of its session, which it shares
with the raylet and every other job's workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.sources.membership import assess

# Stands for a raylet: in a session of its own, it starts two "workers" (each its own process group, as Ray's are);
# the first starts a child. It prints the pids: worker, its child, the other worker.
RAYLET = """
import os, subprocess, sys, time
def start(code, group):
    return subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True,
                            preexec_fn=os.setpgrp if group else None)
kid = "import subprocess, sys, time; k = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print(k.pid, flush=True); time.sleep(60)"
a = start(kid, True)
child = a.stdout.readline().strip()
b = start("import time; print(1, flush=True); time.sleep(60)", True)
b.stdout.readline()
print(a.pid, child, b.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def raylet() -> Iterator[tuple[int, int, int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", RAYLET], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    worker, child, other = (int(w) for w in proc.stdout.readline().split())
    try:
        yield proc.pid, worker, child, other
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the session's leader group: the raylet stand-in
        for pid in (worker, child, other):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(5)


def test_a_named_actor_brings_its_children_not_its_session(raylet: tuple[int, int, int, int], tmp_path: Path) -> None:
    raylet_pid, worker, child, other = raylet
    view = assess(str(tmp_path), named={worker: "a Ray actor of the run: driver.log relays (WorkerDict pid=…)"})
    assert worker in view.core and child in view.members
    assert other not in view.members and raylet_pid not in view.members
    assert view.verdict(worker).status == "run"
