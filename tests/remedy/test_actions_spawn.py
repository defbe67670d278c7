"""Starting commands: own session, output appended to the log, argv passed literally, never a shell."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.remedy.actions.identity import Ident, ident_of, read_proc_stat, same_process
from rlwatch.remedy.actions.signals import send_signal
from rlwatch.remedy.actions.spawn import SpawnError, spawn
from tests.simhost import wait_until

ECHO = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), 'foo': os.environ.get('FOO')}))"
)
IDLE = "import signal, sys; open(sys.argv[1], 'w').close(); signal.pause()"


@pytest.fixture
def spawned() -> Iterator[list[Ident]]:
    idents: list[Ident] = []
    yield idents
    for ident in idents:
        send_signal(ident, signal.SIGKILL)


def echoed(log: Path) -> dict[str, object]:
    assert wait_until(lambda: log.exists() and log.read_text().count("\n") >= 2), "child output never arrived"
    return dict(json.loads(log.read_text().splitlines()[-1]))


def test_child_runs_in_its_own_session(tmp_path: Path, spawned: list[Ident]) -> None:
    ready = tmp_path / "ready"
    ident = spawn([sys.executable, "-S", "-c", IDLE, str(ready)], cwd=None, env=None, log_path=None)
    spawned.append(ident)
    assert wait_until(ready.exists)
    assert ident == ident_of(ident.pid)
    assert os.getsid(ident.pid) == ident.pid
    assert os.getpgid(ident.pid) == ident.pid
    assert os.getsid(ident.pid) != os.getsid(0)


def test_output_is_appended_and_argv_passed_literally(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "worker.log"
    log.parent.mkdir()
    log.write_text("earlier run\n")
    nasty = ["; rm -rf /", "$(touch PWNED)", "`touch PWNED2`", "a b", "*", "'quoted'", "&&", "|cat"]
    spawn([sys.executable, "-S", "-c", ECHO, *nasty], cwd=str(tmp_path), env={"FOO": "bar"}, log_path=log)
    got = echoed(log)
    assert log.read_text().startswith("earlier run\n")
    assert got == {"argv": nasty, "cwd": str(tmp_path), "foo": "bar"}
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "PWNED2").exists()


def test_log_directory_is_created(tmp_path: Path) -> None:
    log = tmp_path / "new" / "dir" / "out.log"
    spawn([sys.executable, "-S", "-c", "print('line one'); print('line two')"], cwd=None, env=None, log_path=log)
    assert wait_until(lambda: log.exists() and log.read_text() == "line one\nline two\n")


def test_exited_child_is_reaped_not_left_a_zombie(tmp_path: Path) -> None:
    ident = spawn([sys.executable, "-S", "-c", "pass"], cwd=None, env=None, log_path=None)
    assert wait_until(lambda: read_proc_stat(ident.pid) is None or not same_process(ident))
    assert wait_until(lambda: read_proc_stat(ident.pid) is None or ident_of(ident.pid) != ident)


@pytest.mark.slow
def test_child_outlives_the_process_that_started_it(tmp_path: Path, spawned: list[Ident]) -> None:
    ready = tmp_path / "ready"
    record = tmp_path / "ident.json"
    starter = (
        "import json, sys\n"
        "from rlwatch.remedy.actions.spawn import spawn\n"
        f"i = spawn([sys.executable, '-S', '-c', {IDLE!r}, {str(ready)!r}], cwd=None, env=None, log_path=None)\n"
        f"open({str(record)!r}, 'w').write(json.dumps([i.pid, i.create_time]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", starter], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    pid, create_time = json.loads(record.read_text())
    ident = Ident(pid, create_time)
    spawned.append(ident)
    assert wait_until(ready.exists)
    assert same_process(ident)  # its starter has exited; it has not


def test_missing_executable_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(SpawnError) as err:
        spawn([str(tmp_path / "no-such-program"), "--flag"], cwd=None, env=None, log_path=None)
    message = str(err.value)
    assert message == f"cannot start {tmp_path / 'no-such-program'}: No such file or directory"
    assert "\n" not in message


def test_bad_working_directory(tmp_path: Path) -> None:
    with pytest.raises(SpawnError, match=r"^cannot start .*: working directory .*/gone does not exist$"):
        spawn([sys.executable, "-c", "pass"], cwd=str(tmp_path / "gone"), env=None, log_path=None)


def test_unwritable_log(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SpawnError, match=r"^cannot start .*: log .*/file/x.log: "):
        spawn([sys.executable, "-c", "pass"], cwd=None, env=None, log_path=blocker / "x.log")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ("echo hi; rm -rf /", "must be an argv list, not a string"),
        ([], "the command is empty"),
        (["python", "bad\0arg"], "cannot start python"),
    ],
)
def test_bad_commands_are_refused(argv: object, words: str) -> None:
    with pytest.raises(SpawnError, match=words):
        spawn(argv, cwd=None, env=None, log_path=None)  # type: ignore[arg-type]


@pytest.mark.slow
def test_stderr_apart_is_appended_where_the_replaced_process_sent_it(tmp_path: Path, spawned: list[Ident]) -> None:
    """``python train.py >> train.log 2>> err.log`` started again: each stream appended to its own file, nothing of
    what was there truncated."""
    out, err = tmp_path / "train.log", tmp_path / "err.log"
    out.write_text("before\n")
    err.write_text("before\n")
    code = "import sys; print('out line'); print('err line', file=sys.stderr)"
    spawned.append(spawn([sys.executable, "-c", code], log_path=out, err_path=err))
    assert wait_until(lambda: "err line" in err.read_text() and "out line" in out.read_text())
    assert out.read_text().splitlines()[0] == "before" and "err line" not in out.read_text()
    assert err.read_text().splitlines()[0] == "before" and "out line" not in err.read_text()
