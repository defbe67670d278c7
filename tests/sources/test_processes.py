"""/proc helpers and the process table, against real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import ProcessRule
from rlwatch.sources import procfs
from rlwatch.sources.processes import ProcessTable, member_info
from tests.simhost import wait_until

SLEEPER = "import sys, time; print('ready', flush=True); time.sleep(120)"
TREE = """
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]])
        for _ in range(int(sys.argv[2]))]
print('ready', flush=True)
time.sleep(120)
"""
GROWER = """
import sys
hoard = []
print('ready', flush=True)
for line in sys.stdin:
    hoard.append(bytearray(b'x') * int(line))
    print('ok', flush=True)
"""


class Spawner:
    """Starts test processes in their own sessions and stops exactly those process groups afterwards."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self,
        code: str,
        *args: str | bytes,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        stdin: bool = False,
    ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            text=True,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        return proc

    def stop(self, proc: subprocess.Popen[str]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc)


@pytest.fixture
def spawn() -> Iterator[Spawner]:
    spawner = Spawner()
    yield spawner
    spawner.stop_all()


@pytest.fixture
def tag() -> str:
    return f"rlwatch-test-{uuid.uuid4().hex[:12]}"


def rule(role: str, regex: str | None = None, **kw: object) -> ProcessRule:
    return ProcessRule.model_validate({"role": role, "cmdline_regex": regex, **kw})


# ------------------------------------------------------------------------------------------------------ procfs
STAT = "4242 (my (odd) proc) S 17 4242 4242 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 1 0 123456 1000 200 18446744073709551615"


def test_parse_stat_after_the_last_parenthesis() -> None:
    stat = procfs.parse_stat(STAT)
    assert stat is not None
    assert (stat.comm, stat.state, stat.ppid, stat.starttime_ticks) == ("my (odd) proc", "S", 17, 123456)


def test_parse_stat_rejects_short_and_garbage() -> None:
    assert procfs.parse_stat("") is None
    assert procfs.parse_stat("1 (x) S 0") is None
    assert procfs.parse_stat(STAT.replace("123456", "soon")) is None


@given(st.text())
def test_parse_stat_never_raises(text: str) -> None:
    stat = procfs.parse_stat(text)
    assert stat is None or (stat.ppid >= 0 and stat.starttime_ticks >= 0)


@given(st.binary())
def test_binary_parsers_never_raise(data: bytes) -> None:
    argv = procfs.parse_cmdline(data)
    env = procfs.parse_environ(data)
    assert all(isinstance(a, str) for a in argv)
    assert all(k and isinstance(v, str) for k, v in env.items())


@given(st.text())
def test_text_parsers_never_raise(text: str) -> None:
    uid = procfs.parse_status_uid(text)
    btime = procfs.parse_btime(text)
    up = procfs.parse_uptime(text)
    pages = procfs.parse_statm_rss_pages(text)
    assert uid is None or uid >= 0
    assert btime is None or isinstance(btime, float)
    assert up is None or up >= 0
    assert pages is None or pages >= 0


def test_counts_are_ascii_digits_only() -> None:
    assert procfs.parse_count("42") == 42
    assert procfs.parse_count("¹") is None  # str.isdigit() says yes; int() says no
    assert procfs.parse_count("-1") is None
    assert procfs.parse_status_uid("Uid:\t¹\t0\t0\t0\n") is None


def test_parse_cmdline_forms() -> None:
    assert procfs.parse_cmdline(b"") == ()
    assert procfs.parse_cmdline(b"python\0-c\0a b\0") == ("python", "-c", "a b")
    assert procfs.parse_cmdline(b"sglang::scheduler_TP0") == ("sglang::scheduler_TP0",)  # retitled, no NULs
    assert procfs.parse_cmdline(b"x\0\xff\xfe\0") == ("x", "\ufffd\ufffd")


def test_start_time_matches_psutil() -> None:
    stat = procfs.read_stat(os.getpid())
    assert stat is not None
    assert procfs.start_time_from_ticks(stat.starttime_ticks, procfs.boot_time()) == psutil.Process().create_time()


def test_child_cmdline_env_cwd_and_tree(spawn: Spawner, tmp_path: Path, tag: str) -> None:
    env = {**os.environ, "RLWATCH_TEST_MARK": tag}
    child = spawn.start(SLEEPER, tag, "with space", "héllo", b"\xff\xfe", cwd=tmp_path, env=env)
    argv = procfs.read_cmdline(child.pid)
    assert argv[-4:] == (tag, "with space", "héllo", "\ufffd\ufffd")
    assert procfs.read_cwd(child.pid) == str(tmp_path)
    assert (procfs.read_environ(child.pid) or {}).get("RLWATCH_TEST_MARK") == tag
    assert procfs.ppid(child.pid) == os.getpid()
    assert procfs.ancestors(child.pid)[0] == os.getpid()
    assert child.pid in procfs.children_map()[os.getpid()]
    assert procfs.read_rss(child.pid) == psutil.Process(child.pid).memory_info().rss
    assert procfs.user(child.pid) == psutil.Process(child.pid).username()


def test_vanished_process_reads_as_nothing(spawn: Spawner, tag: str) -> None:
    child = spawn.start(SLEEPER, tag)
    spawn.stop(child)
    pid = child.pid
    assert procfs.read_stat(pid) is None
    assert procfs.read_cmdline(pid) == ()
    assert procfs.read_environ(pid) is None
    assert procfs.read_cwd(pid) is None
    assert procfs.read_rss(pid) is None
    assert procfs.user(pid) is None


def test_container_uptime() -> None:
    uptime = procfs.container_uptime_s()
    since_boot = procfs.parse_uptime(Path("/proc/uptime").read_text())
    assert uptime is not None and since_boot is not None
    assert 0 < uptime <= since_boot


def test_garbage_proc_root(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "123").mkdir(parents=True)
    (proc / "123" / "stat").write_text("garbage")
    (proc / "124").mkdir()
    (proc / "stat").write_text("cpu 1 2 3\n")
    assert procfs.container_uptime_s(str(proc)) is None
    assert procfs.read_stat(123, str(proc)) is None
    table = ProcessTable([rule("trainer", "x")], FakeClock(), proc_root=str(proc))
    assert table.sample() == ()
    assert table.error is not None and "cannot read processes" in table.error
    assert table.run_pids() == set()


# ------------------------------------------------------------------------------------------------ the table
def test_only_the_top_of_a_tree_is_reported(spawn: Spawner, tag: str) -> None:
    parent = spawn.start(TREE, tag, "2")
    table = ProcessTable([rule("trainer", tag)], FakeClock())
    (info,) = table.sample()
    assert (info.name, info.role, info.pid, info.alive) == ("trainer", "trainer", parent.pid, True)
    assert info.create_time == psutil.Process(parent.pid).create_time() == info.started_at
    assert info.rss_bytes is not None and info.rss_bytes > 0
    kids = {c.pid for c in psutil.Process(parent.pid).children()}
    assert len(kids) == 2
    assert table.run_pids() == {parent.pid, *kids}


@pytest.mark.slow
def test_siblings_are_each_reported_in_order_of_start(spawn: Spawner, tag: str) -> None:
    first = spawn.start(SLEEPER, tag)
    second = spawn.start(SLEEPER, tag)
    table = ProcessTable([rule("worker", tag)], FakeClock())
    infos = table.sample()
    assert [(p.name, p.pid) for p in infos] == [("worker-0", first.pid), ("worker-1", second.pid)]


@pytest.mark.slow
def test_a_role_with_one_rule_per_process_follows_rule_order(spawn: Spawner, tag: str) -> None:
    b = spawn.start(SLEEPER, f"{tag}-b")
    a = spawn.start(SLEEPER, f"{tag}-a")
    table = ProcessTable([rule("worker", f"{tag}-a"), rule("worker", f"{tag}-b")], FakeClock())
    names = {p.name: p.pid for p in table.sample()}
    assert names == {"worker-0": a.pid, "worker-1": b.pid}


@pytest.mark.slow
def test_restart_keeps_the_name_and_counts(spawn: Spawner, tag: str, tmp_path: Path) -> None:
    clock = FakeClock()
    env = {**os.environ, "RLWATCH_TEST_MARK": "first"}
    first = spawn.start(SLEEPER, tag, cwd=tmp_path, env=env)
    table = ProcessTable([rule("trainer", tag)], clock)
    (info,) = table.sample()
    assert info.restarts == 0
    seen_at = clock.time()

    clock.advance(30)
    spawn.stop(first)
    (gone,) = table.sample()
    assert (gone.name, gone.alive, gone.pid, gone.rss_bytes) == ("trainer", False, first.pid, None)
    assert table.dead("trainer") == gone
    assert table.runs("trainer") == [(info.started_at, clock.time())]

    clock.advance(30)
    second = spawn.start(SLEEPER, tag, env={**os.environ, "RLWATCH_TEST_MARK": "second"})
    (back,) = table.sample()
    assert (back.name, back.alive, back.pid, back.restarts) == ("trainer", True, second.pid, 1)
    assert table.dead("trainer") is None
    assert table.start_times("trainer") == [info.started_at, back.started_at]

    record = table.launch_record("trainer")
    assert record is not None
    assert record.pid == first.pid  # the first time it was seen, not the latest
    assert record.argv == (sys.executable, "-c", SLEEPER, tag)
    assert record.cwd == str(tmp_path)
    assert record.env is not None and record.env["RLWATCH_TEST_MARK"] == "first"
    assert record.first_seen == seen_at
    assert table.launch_record("nobody") is None

    history = table.history()["trainer"]
    assert len(history.times) == 2  # the sample while it was gone records nothing
    assert all(v is not None and v > 0 for v in history.values)


def test_dead_entries_expire(spawn: Spawner, tag: str) -> None:
    clock = FakeClock()
    proc = spawn.start(SLEEPER, tag)
    table = ProcessTable([rule("worker", tag)], clock, dead_keep_s=60)
    table.sample()
    spawn.stop(proc)
    assert [p.alive for p in table.sample()] == [False]
    clock.advance(61)
    assert table.sample() == ()


def test_pidfile_rules(spawn: Spawner, tag: str, tmp_path: Path) -> None:
    proc = spawn.start(SLEEPER, tag)
    (tmp_path / "good.pid").write_text(f"{proc.pid}\n")
    (tmp_path / "junk.pid").write_text("¹²³")
    rules = [
        rule("watchdog", pidfile="good.pid"),
        rule("both", tag, pidfile=str(tmp_path / "good.pid")),
        rule("wrongcmd", "no-such-command-line", pidfile=str(tmp_path / "good.pid")),
        rule("junk", pidfile=str(tmp_path / "junk.pid")),
        rule("missing", pidfile=str(tmp_path / "missing.pid")),
    ]
    table = ProcessTable(rules, FakeClock(), base_dir=tmp_path)
    found = {p.role: p.pid for p in table.sample()}
    assert found == {"watchdog": proc.pid, "both": proc.pid}


def test_missing_expected(spawn: Spawner, tag: str) -> None:
    table = ProcessTable([rule("watchdog", tag, expected=True), rule("trainer", f"{tag}-t")], FakeClock())
    table.sample()
    assert table.missing_expected() == ["watchdog"]
    spawn.start(SLEEPER, tag)
    table.sample()
    assert table.missing_expected() == []


@pytest.mark.slow
def test_rss_growth_of_a_leaking_process(spawn: Spawner, tag: str) -> None:
    clock = FakeClock()
    proc = spawn.start(GROWER, tag, stdin=True)
    assert proc.stdin is not None and proc.stdout is not None
    table = ProcessTable([rule("worker", tag)], clock)
    step = 16 * 1024**2
    (info,) = table.sample()
    assert info.rss_growth_bytes_per_hour is None  # no trend from one sample
    for _ in range(6):
        proc.stdin.write(f"{step}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"
        clock.advance(20)
        (info,) = table.sample()
    expected = step / 20 * 3600
    assert info.rss_growth_bytes_per_hour is not None
    assert 0.7 * expected < info.rss_growth_bytes_per_hour < 1.3 * expected


def test_no_rules_no_processes() -> None:
    table = ProcessTable([], FakeClock())
    assert table.sample() == ()
    assert table.run_pids() == set()
    assert table.history() == {}
    assert table.missing_expected() == []


LAUNCHER = """
import subprocess, sys, time
server = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1] + '-server'])
print('ready', flush=True)
time.sleep(120)
"""


def test_a_launch_record_names_the_process_it_was_started_under(spawn: Spawner, tag: str) -> None:
    """AReaL's launcher starts the inference server: the server's record says so (resume, which runs the launcher
    again, then knows a server comes with it); a server started on its own names nobody."""
    launcher = spawn.start(LAUNCHER, f"{tag}-launcher")
    rules = [rule("launcher", f"{tag}-launcher$"), rule("server", f"{tag}-launcher-server$|{tag}-alone$")]
    table = ProcessTable(rules, FakeClock())
    # The launcher starts its server after it starts: on a busy machine the first look may come before it.
    seen = wait_until(
        lambda: s if (s := {p.name: p.pid for p in table.sample()}).keys() == {"launcher", "server"} else None, 30
    )
    assert seen["launcher"] == launcher.pid
    server, top = table.launch_record("server"), table.launch_record("launcher")
    assert server is not None and server.started_by == "launcher"
    assert top is not None and top.started_by is None

    alone = spawn.start(SLEEPER, f"{tag}-alone")
    rules = [rule("launcher", f"{tag}-launcher-nothing$"), rule("server", f"{tag}-alone$")]
    table = ProcessTable(rules, FakeClock())
    (info,) = table.sample()
    assert info.pid == alone.pid
    record = table.launch_record("server")
    assert record is not None and record.started_by is None


@pytest.mark.slow
def test_a_defunct_process_is_not_alive(tmp_path: Path) -> None:
    """A zombie (exited, not yet reaped by its parent) named by a pidfile is gone, never "alive 0 B"."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_until(lambda: (st := procfs.read_stat(child.pid)) is not None and st.state == "Z")
        (tmp_path / "run.pid").write_text(f"{child.pid}\n")
        table = ProcessTable([rule("trainer", pidfile="run.pid")], FakeClock(), base_dir=tmp_path)
        assert [p for p in table.sample() if p.alive] == []
    finally:
        child.wait(timeout=10)


@pytest.mark.slow
def test_where_its_output_goes_is_recorded_when_first_seen(spawn: Spawner, tag: str, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-c", SLEEPER, tag], stdout=out, stderr=subprocess.PIPE)
    try:
        table = ProcessTable([rule("trainer", tag)], FakeClock())
        wait_until(lambda: any(p.alive for p in table.sample()))
        record = table.launch_record("trainer")
        assert record is not None and record.stdout == str(log) and record.stderr is None  # a pipe: nothing
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_defunct_member_of_the_run_is_shown_gone_not_alive() -> None:
    """A child that exited and that its parent has not reaped yet is defunct: a row of the run's processes, never
    one of those alive (it was `alive 0 B` in the table and counted as still alive)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for until the end: defunct meanwhile
    try:
        wait_until(lambda: (st := procfs.read_stat(child.pid)) is not None and st.state == "Z", 20)
        row = member_info(child.pid, "works in the run directory")
        assert row is not None and row.alive is False
        live = member_info(os.getpid(), "works in the run directory")
        assert live is not None and live.alive is True
    finally:
        child.wait()
