"""What "the run" is, with real processes (issue 42, items 2 and 3): its processes with evidence of running it.

- Two runs started from one shell line with nohup share the gone shell's process group: each is its own run, told
  apart by where each works, neither "lost its launcher", and their parent directory lists both (exit 2) — or, with
  one of them dead, watches the live one and says so first.
- A process that only stands in the run directory brings in nothing above it: not the process that started it, nor
  what else that process runs (the pytest worker's other processes made `make test` fail).
- rlwatch's simulator is never a member of the run it plays the platform for.

Only the processes the tests started are signalled, by pid and start time; waits are on conditions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rlwatch.discover.discovery import SeveralRuns, discover
from rlwatch.sources.membership import assess
from tests.faults.conftest import run_cli
from tests.simhost import Sim, StartedProcesses, wait_until

pytestmark = pytest.mark.slow

TRAIN = """
import os, time
open("pid", "w").write(str(os.getpid()))
for e in range(10**6):
    for b in range(1, 21):
        print(f"epoch {e} batch {b}/20 loss 1.234", flush=True)
        time.sleep(0.2)
"""


@pytest.fixture
def mine() -> Iterator[StartedProcesses]:
    m = StartedProcesses()
    yield m
    m.kill_all()


def _pid_in(d: Path) -> int | None:
    try:
        return int((d / "pid").read_text())
    except (OSError, ValueError):
        return None


def _writes(pid: int, log: Path) -> bool:
    try:
        return any(f.path == str(log.resolve()) for f in psutil.Process(pid).open_files())
    except psutil.Error:
        return False


def test_two_runs_started_from_one_shell_line_are_two_runs(tmp_path: Path, mine: StartedProcesses) -> None:
    parent = tmp_path / "MY"
    a, b = parent / "runA", parent / "runB"
    for d in (a, b):
        d.mkdir(parents=True)
    (tmp_path / "train.py").write_text(TRAIN)
    line = (
        "(cd runA && nohup python3 ../../train.py > train.log 2>&1 &); "
        "(cd runB && nohup python3 ../../train.py > train.log 2>&1 &)"
    )
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    subprocess.run(["bash", "-c", line], cwd=parent, env=env, check=True, start_new_session=True)
    pa, pb = (mine.add(wait_until(lambda d=d: _pid_in(d), 20)) for d in (a, b))
    wait_until(lambda: _writes(pa, a / "train.log") and _writes(pb, b / "train.log"), 20)

    view = assess(str(a))
    assert pa in view.core and pb not in view.members, view.members  # not "in the process group of" runA's
    assert all(x.orphaned is None for x in view.launches)  # the shell that started it exited: an ordinary run
    out = json.loads(run_cli("report", "--json", str(a)).stdout)
    assert "run_lost_launcher" not in {f["code"] for f in out["findings"]}
    assert pb not in {m["pid"] for m in out["live_run"]["members"]}

    with pytest.raises(SeveralRuns) as said:
        discover(parent)
    assert [p.name for p, _ in said.value.runs] == ["runA", "runB"]
    res = run_cli("report", str(parent))
    assert res.returncode == 2 and "holds 2 separate runs, not one" in res.stderr, res.stderr

    # runA dies: the directory still holds two runs; the one a live process runs is watched, and said first.
    mine.kill(pa)
    cfg = discover(parent)
    assert cfg.run_dir == str(b)
    assert cfg.provenance.profile[0].startswith(f"{parent} holds 2 runs; this is the one a live process works in")


VIEWERS = """
import subprocess, sys, time
run, elsewhere = sys.argv[1], sys.argv[2]
tail = subprocess.Popen(["tail", "-f", "train.log"], cwd=run, stdout=subprocess.DEVNULL)
other = subprocess.Popen([sys.executable, "-c", "import time; f = open('own.log', 'a'); time.sleep(300)"], cwd=elsewhere)
print(tail.pid, other.pid, flush=True)
time.sleep(300)
"""


def test_a_viewers_parent_and_what_else_it_runs_are_not_the_run(tmp_path: Path, mine: StartedProcesses) -> None:
    """A `tail -f` started by a process (a pytest worker, an editor, a script) that also runs other things elsewhere:
    the viewer is weak evidence alone, and neither its parent nor that parent's other children come with it."""
    run, elsewhere = tmp_path / "run", tmp_path / "other"
    run.mkdir()
    elsewhere.mkdir()
    (run / "train.log").write_text("step 1\n")
    parent = subprocess.Popen(
        [sys.executable, "-c", VIEWERS, str(run), str(elsewhere)], stdout=subprocess.PIPE, text=True
    )
    mine.add(parent.pid)
    assert parent.stdout is not None
    tail, other = (mine.add(int(x)) for x in parent.stdout.readline().split())
    wait_until(lambda: _writes(other, elsewhere / "own.log"), 10)
    view = assess(str(run))
    assert tail in view.weak and not view.core
    assert parent.pid not in view.members and other not in view.members, view.members
    # A writer beside them is the run; what its parent started elsewhere is not.
    writer = subprocess.Popen(
        [sys.executable, "-c", "import time; f = open('train.log', 'a'); time.sleep(300)"], cwd=run
    )
    mine.add(writer.pid)
    wait_until(lambda: _writes(writer.pid, run / "train.log"), 10)
    view = assess(str(run))
    assert writer.pid in view.core and other not in view.members


def test_the_simulator_is_never_a_member_of_the_run_it_plays(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "nan-loss", 4.0)
    try:
        data = sim.wait(lambda d: any(p["alive"] for p in d["facts"]["pieces"]), 30)
        assert data is not None
        wait_until(lambda: (sim.dir / "train.log").exists() and "step" in (sim.dir / "train.log").read_text(), 30)
        out = json.loads(run_cli("report", "--json", str(sim.dir)).stdout)
        members = {m["pid"] for m in out["live_run"]["members"]}
        assert sim.proc.pid not in members and members, out["live_run"]
        trainers = {p["pid"] for p in out["processes"] if p["role"] == "trainer"}
        assert sim.proc.pid not in trainers
        view = assess(str(sim.dir))
        assert sim.proc.pid not in view.members
    finally:
        sim.stop()
