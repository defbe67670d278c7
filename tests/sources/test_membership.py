"""The live run from evidence: real processes for what /proc shows, constructed views for the verdict rules."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from rlwatch.sources.membership import RUN, STRAY, UNKNOWN, MembershipVerdict, ProcRow, RunView, assess, first_stamp
from tests.simhost import wait_until

SLEEP = "import time; print('ready', flush=True); time.sleep(120)"
WRITES_LOG = "import time; f = open('train.log', 'a'); print('ready', flush=True); time.sleep(120)"
READS = "import sys, time; f = open(sys.argv[1]); print('ready', flush=True); time.sleep(120)"
# A launcher whose child does the work: the child is the run's because its parent is.
TREE = """
import subprocess, sys, time
kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
print(kid.pid, flush=True)
time.sleep(120)
"""


class Procs:
    """Starts test processes (each in its own session unless told) and kills exactly those afterwards."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, code: str, *args: str, cwd: Path | None = None, own_session: bool = True) -> tuple[int, str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=cwd,
            start_new_session=own_session,
        )
        self.started.append(proc)
        assert proc.stdout is not None
        return proc.pid, proc.stdout.readline().strip()

    def stop(self) -> None:
        for proc in self.started:
            for child in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
                child.kill()
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.stop()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    return d


# ------------------------------------------------------------------------------------------- evidence from /proc
def test_writing_a_log_under_the_run_directory_is_core_evidence(procs: Procs, run_dir: Path) -> None:
    pid, _ = procs.start(WRITES_LOG, cwd=run_dir)
    view = assess(str(run_dir))
    assert view.core[pid] == "writes train.log"
    assert view.verdict(pid) == MembershipVerdict(RUN, "writes train.log")
    assert view.identified and view.started_at == psutil.Process(pid).create_time()


def test_working_in_or_reading_from_the_run_directory_is_weaker(procs: Procs, run_dir: Path, tmp_path: Path) -> None:
    (run_dir / "config.yaml").write_text("a: 1\n")
    worker, _ = procs.start(SLEEP, cwd=run_dir)
    reader, _ = procs.start(READS, str(run_dir / "config.yaml"), cwd=tmp_path)
    view = assess(str(run_dir))
    assert not view.core
    assert view.members[worker] == f"works in {run_dir.resolve()}"
    assert view.members[reader] == "holds config.yaml open"
    assert view.verdict(worker).status == RUN  # nothing stronger to set it against


def test_descendants_and_sessions_come_with_a_member(procs: Procs, run_dir: Path, tmp_path: Path) -> None:
    launcher, kid = procs.start(TREE, cwd=run_dir)
    view = assess(str(run_dir))
    assert view.verdict(launcher).status == RUN
    # The child inherited the cwd, so it is the run's on its own evidence; the session and group link it too.
    assert view.verdict(int(kid)).status == RUN
    other, _ = procs.start(SLEEP, cwd=tmp_path)
    assert other not in view.members


def test_a_role_rule_alone_does_not_make_a_process_the_runs(procs: Procs, run_dir: Path, tmp_path: Path) -> None:
    elsewhere, _ = procs.start(SLEEP, cwd=tmp_path)
    inside, _ = procs.start(SLEEP, cwd=run_dir)
    view = assess(str(run_dir), roles={elsewhere: "server", inside: "trainer"})
    verdict = view.verdict(elsewhere)
    assert verdict.status == UNKNOWN and "matches the server role" in verdict.why
    # Standing in the directory with a role stays weak: a rule that matches `python3` matches every interpreter a
    # person opens there (issue 42, H7).
    assert inside not in view.core and view.members[inside] == f"works in {run_dir.resolve()}"
    assert not view.identified or inside in view.weak


def test_a_python_standing_in_a_dead_runs_directory_is_never_its_trainer(procs: Procs, run_dir: Path) -> None:
    """A REPL, `python3 -c "import time; time.sleep(20)"` or a `python3 -c` reading `rlwatch report --json` through
    a pipe, in the directory of a run that is gone, with the trainer rule discovery made for `python3 -c`: weak
    evidence only, never the run (a dead run read "unknown: started 0s ago … still starting")."""
    (run_dir / "train.log").write_text("epoch 0 batch 1/20 loss 1.000\n")
    idle, _ = procs.start(SLEEP, cwd=run_dir)
    reader, _ = procs.start(READS, str(run_dir / "train.log"), cwd=run_dir)
    view = assess(str(run_dir), roles={idle: "trainer", reader: "trainer"})
    assert not view.core and {idle, reader} <= view.weak
    assert view.started_at is not None  # weak members still listed, with their evidence, for the views to name


def test_a_role_is_the_runs_when_its_family_writes_the_log(procs: Procs, run_dir: Path) -> None:
    launcher, kid = procs.start(
        TREE.replace("'import time; time.sleep(120)'", '\'f = open("train.log", "a"); import time; time.sleep(120)\''),
        cwd=run_dir,
    )
    assert wait_until(lambda: any(p.path.endswith("train.log") for p in psutil.Process(int(kid)).open_files()), 10)
    view = assess(str(run_dir), roles={launcher: "launcher"})
    assert view.core[int(kid)].startswith("writes train.log")
    assert view.core[launcher] == f"the launcher (its role rule matches, and pid {kid} of its family writes train.log)"


def test_a_pidfile_or_a_launch_is_evidence_wherever_the_process_works(
    procs: Procs, run_dir: Path, tmp_path: Path
) -> None:
    named, _ = procs.start(SLEEP, cwd=tmp_path)
    started, _ = procs.start(SLEEP, cwd=tmp_path)
    view = assess(
        str(run_dir),
        roles={named: "worker"},
        pidfile_pids={named},
        launched={(started, psutil.Process(started).create_time())},
    )
    assert view.core[named] == "the worker (named by its pidfile)"
    assert view.core[started] == "was started by rlwatch"
    # A launch is matched by identity: the same pid with another start time is not rlwatch's.
    assert started not in assess(str(run_dir), launched={(started, 1.0)}).members


def test_the_root_directory_is_no_evidence(procs: Procs) -> None:
    pid, _ = procs.start(SLEEP, cwd=Path("/"))
    view = assess("/")
    assert pid not in view.members


def test_excluded_paths_prove_nothing(procs: Procs, run_dir: Path, tmp_path: Path) -> None:
    (run_dir / "dev").mkdir()
    (run_dir / "dev" / "nvidia0").write_text("")
    pid, _ = procs.start(READS, str(run_dir / "dev" / "nvidia0"), cwd=tmp_path)
    assert pid in assess(str(run_dir)).members
    assert pid not in assess(str(run_dir), exclude=[str(run_dir / "dev") + "/"]).members


def test_nothing_found_says_what_was_looked_for(run_dir: Path) -> None:
    view = assess(str(run_dir))
    assert not view.identified
    assert view.unknown_reason is not None and view.unknown_reason.startswith("rlwatch cannot tell what the live run")
    assert view.verdict(os.getpid()).status == UNKNOWN


# ------------------------------------------------------------------------------------------------ verdict rules
def view_of(
    *procs: ProcRow, core: dict[int, str] | None = None, weak: dict[int, str] | None = None, **kw: object
) -> RunView:
    members = {**(weak or {}), **(core or {})}
    return RunView(
        run_dir="/data/run",
        procs={p.pid: p for p in procs},
        members=members,
        core=core or {},
        weak=frozenset(weak or {}),
        roles=kw.get("roles", {}),  # type: ignore[arg-type]
        container_started_at=kw.get("container_started_at"),  # type: ignore[arg-type]
        searched="nothing",
        proc_root="/nonexistent",
    )


INIT = ProcRow(1, 0, 1, 1, 100.0, "init", "/")
TRAINER = ProcRow(500, 400, 500, 400, 5000.0, "python3", "/data/run")
SHELL = ProcRow(400, 1, 400, 400, 4000.0, "bash", "/data/run")
# A leftover of an earlier attempt: its session's leader (300) is gone, it was re-parented to init.
LEFTOVER = ProcRow(310, 1, 310, 300, 3000.0, "python", "/data/run")
LEFTOVER_CHILD = ProcRow(311, 310, 310, 300, 3001.0, "python", "/data/run")


def test_an_orphaned_leftover_of_an_earlier_attempt_is_a_stray() -> None:
    view = view_of(
        INIT,
        SHELL,
        TRAINER,
        LEFTOVER,
        LEFTOVER_CHILD,
        core={500: "writes train.log"},
        weak={310: "works in /data/run", 311: "works in /data/run"},
    )
    for pid in (310, 311):
        verdict = view.verdict(pid)
        assert verdict.status == STRAY
        assert verdict.why.startswith(
            "a leftover of an earlier attempt: works in /data/run but is not part of the live"
        )
        assert "leader pid 300" in verdict.why and "33m before the live run" in verdict.why
    assert "pid 310 above it" in view.verdict(311).why


def test_a_leftover_is_a_stray_only_against_core_evidence_and_only_when_older() -> None:
    weak_only = view_of(INIT, LEFTOVER, weak={310: "works in /data/run"})
    assert weak_only.verdict(310).status == RUN  # no live run to set it against: it may be the run
    younger = ProcRow(310, 1, 310, 300, 6000.0, "python", "/data/run")
    view = view_of(INIT, SHELL, TRAINER, younger, core={500: "writes train.log"}, weak={310: "works in /data/run"})
    assert view.verdict(310).status == RUN
    role = view_of(
        INIT, SHELL, TRAINER, LEFTOVER, core={500: "writes x"}, weak={310: "works in /data/run"}, roles={310: "server"}
    )
    assert role.verdict(310).status == RUN  # a process a role rule names is never a stray by age alone


def test_a_session_leader_is_never_orphaned() -> None:
    daemon = ProcRow(310, 1, 310, 310, 3000.0, "python", "/srv")  # setsid'd, re-parented to init: a service
    view = view_of(INIT, SHELL, TRAINER, daemon, core={500: "writes train.log"})
    verdict = view.verdict(310)
    assert verdict.status == UNKNOWN and "not orphaned" in verdict.why
    zombie_leader = ProcRow(300, 1, 300, 300, 2999.0, "bash", "/", state="Z")
    view = view_of(INIT, SHELL, TRAINER, LEFTOVER, zombie_leader, core={500: "writes train.log"})
    assert view.verdict(310).status == STRAY  # an exited leader waiting to be reaped is gone


def test_an_orphan_younger_than_the_run_is_unknown() -> None:
    young = ProcRow(600, 1, 600, 590, 5500.0, "python", "/tmp")
    view = view_of(INIT, SHELL, TRAINER, young, core={500: "writes train.log"})
    verdict = view.verdict(600)
    assert verdict.status == UNKNOWN and "after the live run began" in verdict.why


def test_a_process_from_before_this_container_started_is_a_stray() -> None:
    old = ProcRow(50, 1, 50, 40, 50.0, "python", "/data/run")
    view = view_of(INIT, old, container_started_at=100.0)
    verdict = view.verdict(50)
    assert verdict.status == STRAY and verdict.why.startswith("left from an earlier container start")
    run = view_of(INIT, old, core={50: "writes train.log"}, container_started_at=100.0)
    assert run.verdict(50).status == RUN  # core evidence beats age


def test_real_orphan_is_seen_as_orphaned(procs: Procs, tmp_path: Path) -> None:
    orphan_code = "import os, time\nif os.fork():\n    os._exit(0)\nprint(os.getpid(), flush=True)\ntime.sleep(120)\n"
    _, line = procs.start(orphan_code, cwd=tmp_path)
    orphan = int(line)
    try:
        assert wait_until(lambda: psutil.Process(orphan).ppid() != 0 and psutil.Process(orphan).status() != "zombie")
        assert wait_until(lambda: assess(str(tmp_path / "x")).orphaned(orphan) is not None, timeout=10)
        why = assess(str(tmp_path / "x")).orphaned(orphan)
        assert why is not None and why.startswith("orphaned: the session that started it")
        assert assess(str(tmp_path / "x")).orphaned(os.getpid()) is None
    finally:
        os.kill(orphan, 9)
        assert wait_until(lambda: not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == "zombie")


def test_an_orphan_that_writes_files_of_its_own_is_never_a_stray(procs: Procs, tmp_path: Path) -> None:
    """A second experiment started with nohup elsewhere is orphaned and older than the live run, like a leftover;
    that it is writing its own log is what tells it apart."""
    (tmp_path / "other").mkdir()
    writer, _ = procs.start(WRITES_LOG, cwd=tmp_path / "other")
    idle, _ = procs.start(SLEEP, cwd=tmp_path / "other")

    def view(pid: int) -> RunView:
        old = ProcRow(pid, 1, pid, 300, 3000.0, "python", str(tmp_path / "other"))  # leader 300 gone, under init
        return RunView(
            run_dir=str(tmp_path / "run"),
            procs={1: INIT, 500: TRAINER, pid: old},
            members={500: "writes train.log"},
            core={500: "writes train.log"},
            weak=frozenset(),
            roles={},
            container_started_at=None,
            searched="nothing",
        )

    verdict = view(writer).verdict(writer)
    assert verdict.status == UNKNOWN
    assert f"writes {tmp_path / 'other' / 'train.log'}: a job of its own" in verdict.why
    assert view(idle).verdict(idle).status == STRAY  # the same orphan writing nothing is a leftover
    # Working in the run directory, older than the live run's first writer, orphaned: a trainer under nohup that logs
    # elsewhere, not a leftover, because it is writing.
    weak = replace(view(writer), members={500: "writes train.log", writer: "works in run"}, weak=frozenset({writer}))
    assert weak.verdict(writer).status == RUN and "and writes" in weak.verdict(writer).why
    weak_idle = replace(view(idle), members={500: "writes train.log", idle: "works in run"}, weak=frozenset({idle}))
    assert weak_idle.verdict(idle).status == STRAY


def test_the_earliest_timestamp_of_a_log_dates_an_attempt() -> None:
    head = b"==== AReaL launcher ====\n\n20261124-05:09:01.123 Launcher INFO: starting trial0\nmore\n"
    found = first_stamp(head, now=datetime(2026, 11, 24, 12, tzinfo=UTC).timestamp())
    assert found is not None and found[0] == 3
    assert first_stamp(b"no time here\njust words: yes\n", now=0.0) is None
    view = RunView(
        run_dir="/data/run",
        procs={1: INIT, 310: LEFTOVER},
        members={310: "works in /data/run"},
        core={},
        weak=frozenset({310}),
        roles={},
        container_started_at=None,
        searched="nothing",
        proc_root="/nonexistent",
        attempt=("the earliest line of its logs, logs/launcher.log:3, was written then", 3600.0),
    )
    verdict = view.verdict(310)
    assert verdict.status == STRAY
    assert "10m before the latest attempt (the earliest line of its logs, logs/launcher.log:3" in verdict.why


def test_how_much_earlier_a_leftover_started_is_said_to_a_tenth_under_ten_seconds() -> None:
    """A leftover restarted just before the attempt is "0.4s before" it, never "0s before", which reads as "not"."""
    from rlwatch.sources.membership import _minutes

    assert [_minutes(x) for x in (0.4, -0.4, 9.94, 42.4, 600, 3 * 3600)] == [
        "0.4s",
        "0.4s",
        "9.9s",
        "42s",
        "10m",
        "3.0h",
    ]
