"""Where a process's output goes, kept in its launch record when first seen: a process rlwatch starts again writes
where the one it replaces wrote (issue 34), so the log the person tails goes on."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from rlwatch.config.models import ActionsConfig, Config, GpuConfig, ProcessRule
from rlwatch.engine.engine import Engine
from rlwatch.remedy.actions.api import Actions
from rlwatch.remedy.actions.plan import RESUME
from rlwatch.sources import procfs
from rlwatch.sources.launches import LaunchBook


def fake_fds(root: Path, pid: int, *, uid: int | None = None, flags: str = "0102001", **fds: str) -> None:
    """A process of ``uid`` (this user unless given) whose descriptors lead to ``fds``, each opened with ``flags``
    (octal, as fdinfo says; O_WRONLY|O_APPEND unless given)."""
    me = os.geteuid() if uid is None else uid
    (root / str(pid) / "fd").mkdir(parents=True)
    (root / str(pid) / "fdinfo").mkdir()
    (root / str(pid) / "status").write_text(f"Name:\tpython3\nUid:\t{me}\t{me}\t{me}\t{me}\n")
    for fd, target in fds.items():
        (root / str(pid) / "fd" / fd.removeprefix("fd")).symlink_to(target)
        (root / str(pid) / "fdinfo" / fd.removeprefix("fd")).write_text(f"pos:\t0\nflags:\t{flags}\n")


def test_output_file_is_a_regular_file_or_none(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    proc = tmp_path / "proc"
    fake_fds(proc, 10, fd1=str(log), fd2="pipe:[4242]")
    fake_fds(proc, 11, fd1="/dev/null", fd2=str(tmp_path / "gone.log (deleted)"))
    assert procfs.output_file(10, 1, str(proc)) == str(log)
    assert procfs.output_file(10, 2, str(proc)) is None  # a pipe: nothing to append to
    assert procfs.output_file(11, 1, str(proc)) is None  # a device, not a log
    assert procfs.output_file(11, 2, str(proc)) is None
    assert procfs.output_file(12, 1, str(proc)) is None
    # only a descriptor opened for writing, of a process of this user, names where output goes
    fake_fds(proc, 13, flags="0100000", fd1=str(log))  # read-only: `1<file`
    fake_fds(proc, 14, uid=os.geteuid() + 1, fd1=str(log))  # another user's process
    assert procfs.output_file(13, 1, str(proc)) is None
    assert procfs.output_file(14, 1, str(proc)) is None


@pytest.mark.parametrize("name", ["trainer", "trainer-1"])  # a role of two rules names its processes by rule
def test_a_resume_appends_to_the_log_the_gone_trainer_wrote(tmp_path: Path, name: str) -> None:
    state = tmp_path / ".rlwatch"
    state.mkdir(mode=0o700)
    log, err = tmp_path / "train.log", tmp_path / "train.err"
    log.write_text("step 20\n")
    err.write_text("")
    record = {
        "argv": [sys.executable, "-c", "pass"],
        "cwd": str(tmp_path),
        "env": None,
        "first_seen": 1.0,
        "pid": 2**22 + 7,
        "create_time": 1.0,
        "stdout": str(log),
        "stderr": str(err),
        "uid": os.geteuid(),  # recorded from this user's own process: the only kind rlwatch runs again
    }
    book = state / "launches.json"
    book.write_text(json.dumps({name: record}))
    os.chmod(book, 0o600)
    assert LaunchBook(book).get(name) is not None  # the fields read back beside the others
    cfg = Config(
        interval_s=0.2,
        gpu=GpuConfig(backend="none"),
        processes=[ProcessRule(role="trainer", cmdline_regex=f"never-matches-{os.getpid()}")],
        actions=ActionsConfig(audit_log=str(tmp_path / "audit.jsonl")),
    )
    engine = Engine(cfg, tmp_path)
    try:
        prepared = Actions(engine).prepare(RESUME)
    finally:
        engine.stop()
    assert prepared.plan.runnable, prepared.plan.refused
    (launch,) = prepared.launches
    assert launch.log == str(log) and launch.err_log == str(err)
    assert f"output appended to {log}" in (prepared.plan.start[0].reason or "")
