"""Keeping the watchdog alive: the systemd unit and the start-up hook, the notify protocol, the pidfile lock, and
what the state file tells every other rlwatch process (running, stuck, died, gave up)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlwatch.common.state import GaveUp, Snapshot, WatchdogStatus
from rlwatch.engine.diagnosis import Context, diagnose
from rlwatch.export.report import to_json_dict
from rlwatch.remedy.service import hook_text, install, unit_name, unit_text, watch_argv
from rlwatch.remedy.watchdog import Notifier
from rlwatch.sources.watchdog_state import STATE_FILE, PidLock, clear_gave_up, read_status, status_from, write_json
from tests.simhost import wait_until

RLWATCH = [sys.executable, "-m", "rlwatch"]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RLWATCH, *args], capture_output=True, text=True, timeout=60, env=env, check=False)


# ----------------------------------------------------------------------------------------------- systemd unit


def test_unit_is_a_notify_service_with_a_watchdog_that_leaves_the_run_alive(tmp_path: Path) -> None:
    text = unit_text(watch_argv(["/opt/venv/bin/rlwatch"], tmp_path, None), tmp_path, user=False)
    lines = text.splitlines()
    for line in (
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart=/opt/venv/bin/rlwatch watch {tmp_path}",
        "WatchdogSec=30",
        "Restart=on-failure",
        "RestartSec=5",
        "StartLimitIntervalSec=600",
        "StartLimitBurst=5",
        "KillMode=process",
        "WantedBy=multi-user.target",
    ):
        assert line in lines, line
    assert lines.index("StartLimitBurst=5") < lines.index("[Service]")  # a [Unit] setting since systemd 230
    user = unit_text(watch_argv(["/opt/venv/bin/rlwatch"], tmp_path, None), tmp_path, user=True)
    assert "WantedBy=default.target" in user.splitlines() and "network-online" not in user


def test_exec_start_quotes_what_systemd_would_split_or_substitute(tmp_path: Path) -> None:
    run = tmp_path / "my run 100%$HOME"
    text = unit_text(["/opt/rlwatch"], run, user=True).replace("ExecStart=/opt/rlwatch", "")
    argv = watch_argv(["/opt/rlwatch"], run, tmp_path / "c.yaml")
    line = next(x for x in unit_text(argv, run, user=True).splitlines() if x.startswith("ExecStart="))
    assert line == f'ExecStart=/opt/rlwatch watch "{tmp_path}/my run 100%%$$HOME" --config {tmp_path}/c.yaml'
    assert f"WorkingDirectory={tmp_path}/my run 100%%$HOME" in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shown = cli("service", "install", str(run), "--print", "--mode", "systemd")
    assert shown.returncode == 0, shown.stderr
    header, _, text = shown.stdout.partition("\n")
    assert header.startswith("# /etc/systemd/system/rlwatch-watch-run-")
    unit = tmp_path / unit_name(run.resolve())
    unit.write_text(text)
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert verify.returncode == 0, verify.stderr
    assert "ignoring" not in verify.stderr and "Unknown" not in verify.stderr, verify.stderr
    assert not (tmp_path / "etc").exists()  # --print wrote nothing


def test_user_unit_is_written_where_systemd_looks_and_nothing_is_enabled(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    out = cli("service", "install", str(run), "--user", "--mode", "systemd", env=env)
    assert out.returncode == 0, out.stderr
    (unit,) = (tmp_path / "cfg" / "systemd" / "user").iterdir()
    assert unit.name == unit_name(run.resolve()) and "Type=notify" in unit.read_text()
    assert f"systemctl --user daemon-reload && systemctl --user enable --now {unit.name}" in out.stdout
    assert "loginctl enable-linger" in out.stdout
    assert not (tmp_path / "cfg" / "systemd" / "user" / "default.target.wants").exists()


def test_unit_names_differ_per_run_directory(tmp_path: Path) -> None:
    assert unit_name(tmp_path / "a" / "run") != unit_name(tmp_path / "b" / "run")
    assert unit_name(Path("/srv/x y")).startswith("rlwatch-watch-x-y-")


# ------------------------------------------------------------------------------------------- start-up hook


def test_without_systemd_a_hook_is_written_and_how_it_stays_alive_is_said(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    out = cli("service", "install", str(run), "--mode", "hook")
    assert out.returncode == 0, out.stderr
    hook = run / ".rlwatch" / "start-watchdog.sh"
    assert os.access(hook, os.X_OK)
    text = hook.read_text()
    assert f"watch {run.resolve()}" in text and "flock -n 9" in text
    said = out.stdout
    assert "No systemd here" in said and "nothing restarts the watchdog by itself" in said
    assert f"setsid sh {hook.resolve()}" in said  # the line for the entrypoint and ~/.bashrc
    assert "[program:rlwatch-watch-run-" in said and "autorestart=unexpected" in said
    sh = subprocess.run(["sh", "-n", str(hook)], capture_output=True, text=True, check=False)
    assert sh.returncode == 0, sh.stderr


def test_the_hook_respawns_on_failure_backs_off_and_stops_on_a_clean_exit(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    starts = tmp_path / "starts"
    fake = tmp_path / "fake-watch.py"  # stands in for `rlwatch watch`: fails twice, then exits cleanly
    fake.write_text(
        "import sys, time\n"
        f"p = {str(starts)!r}\n"
        "n = len(open(p).read().split()) if __import__('os').path.exists(p) else 0\n"
        "open(p, 'a').write(f'{time.monotonic()}\\n')\n"
        "sys.exit(0 if n >= 2 else 3)\n"
    )
    hook = tmp_path / "hook.sh"
    hook.write_text(hook_text([sys.executable, str(fake)], run, first_delay_s=0.2, max_delay_s=0.4))
    t0 = time.monotonic()
    done = subprocess.run(["sh", str(hook)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    times = [float(x) for x in starts.read_text().split()]
    assert len(times) == 3
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4  # 0.2 s, then doubled
    assert time.monotonic() - t0 < 20
    log = (run / ".rlwatch" / "watchdog.log").read_text()
    assert log.count("exited with status 3; restarting") == 2 and "stopped cleanly; not restarting" in log


def test_a_second_copy_of_the_hook_exits_at_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    started = tmp_path / "started"
    fake = tmp_path / "fake-watch.py"
    fake.write_text(f"import time; open({str(started)!r}, 'a').write('x'); time.sleep(60)\n")
    hook = tmp_path / "hook.sh"
    hook.write_text(hook_text([sys.executable, str(fake)], run))
    first = subprocess.Popen(["sh", str(hook)], start_new_session=True)
    try:
        wait_until(started.exists, 10)
        second = subprocess.run(["sh", str(hook)], timeout=10, check=False)
        assert second.returncode == 0
        assert started.read_text() == "x"  # only one watchdog was started
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()


def test_install_refuses_a_missing_run_dir_in_one_line(tmp_path: Path) -> None:
    out = cli("service", "install", str(tmp_path / "nope"))
    assert out.returncode == 2 and out.stderr.strip() == f"rlwatch: {tmp_path / 'nope'}: no such directory"


def test_install_api_reports_the_files_it_wrote(tmp_path: Path) -> None:
    done = install(tmp_path, mode="hook", rlwatch=["/opt/rlwatch"])
    assert done.kind == "hook" and list(done.files) == [str(tmp_path / ".rlwatch" / "start-watchdog.sh")]
    shown = install(tmp_path / "other", mode="systemd", dry=True, rlwatch=["/opt/rlwatch"])
    assert shown.files == {} and any("Type=notify" in line for line in shown.lines)


# ------------------------------------------------------------------------------------------ notify protocol


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    name = f"@rlwatch-test-{uuid.uuid4().hex}"  # abstract namespace: no path length limit, nothing to clean up
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name[1:])
    sock.settimeout(10)
    yield sock, name
    sock.close()


def test_notifier_sends_datagrams_and_takes_its_variables_out_of_the_environment(
    notify_socket: tuple[socket.socket, str], tmp_path: Path
) -> None:
    sock, name = notify_socket
    env = {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid()), "KEEP": "1"}
    n = Notifier(env)
    assert env == {"KEEP": "1"}  # children started by actions never speak for the watchdog
    assert n.ping_every_s == 15.0
    assert n("READY=1")
    assert sock.recv(100) == b"READY=1"
    path = tmp_path / "n.sock"
    if len(str(path)) < 100:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as file_sock:
            file_sock.bind(str(path))
            assert Notifier({"NOTIFY_SOCKET": str(path)})("WATCHDOG=1")
            assert file_sock.recv(100) == b"WATCHDOG=1"


def test_notifier_without_systemd_or_for_another_pid_does_nothing() -> None:
    assert Notifier({})("READY=1") is False
    assert Notifier({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}).ping_every_s is None
    assert Notifier({"NOTIFY_SOCKET": "vsock:2:1234"})("READY=1") is False
    assert Notifier({"NOTIFY_SOCKET": "@rlwatch-nobody-listens"})("READY=1") is False


@pytest.mark.slow
def test_watch_under_systemd_says_ready_pings_and_says_stopping(
    tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, name = notify_socket
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text("gpu: {backend: none}\ninterval_s: 0.2\nwatchdog: {heartbeat_s: 0.2}\n")
    env = {**os.environ, "NOTIFY_SOCKET": name, "WATCHDOG_USEC": "1000000"}
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen([*RLWATCH, "watch", str(run), "--json"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        got = [sock.recv(200).decode()]
        assert got[0].startswith("READY=1\nSTATUS=")
        while got.count("WATCHDOG=1") < 3 or not any("STATUS=watching " in m for m in got):
            got.append(sock.recv(200).decode())  # pinged over and over from the decision loop
        status, _ = read_status(run, time.time())
        assert status is not None and status.running and status.pid == proc.pid
        proc.send_signal(signal.SIGTERM)
        while (msg := sock.recv(200).decode()) == "WATCHDOG=1":
            pass
        assert msg == "STOPPING=1"
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stdout is not None
    records = [json.loads(line) for line in proc.stdout]
    assert records[0]["type"] == "watchdog" and records[0]["acting"]  # said at once, before the logs are read
    assert "state" in {r["type"] for r in records}
    status, _ = read_status(run, time.time())
    assert status is not None and not status.running and status.stopped is not None
    assert not (run / ".rlwatch" / "watchdog.pid").read_text()  # emptied on the way out


@pytest.mark.slow
def test_watch_over_a_big_backlog_is_alive_at_once_acts_on_nothing_and_stops_when_told(
    tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    """After a night of tracebacks the backlog takes minutes to read. The watchdog must be alive meanwhile: ready for
    systemd (whose start timeout would kill it), a fresh heartbeat saying it reads (not taken for stuck), SIGTERM
    obeyed; and it acts on nothing, prints no complete record (only the partial ones of the backlog's newest part),
    until the whole backlog is read."""
    from bench.datagen import generate

    sock, name = notify_socket
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    log = run / "logs" / "trainer.log"
    generate(log, 64 << 20, dense=True)  # 4 s or more to read here
    (run / "rlwatch.yaml").write_text(
        "gpu: {backend: none}\ninterval_s: 0.2\nwatchdog: {heartbeat_s: 0.2}\ntraining: {logs: [logs/*.log]}\n"
    )
    env = {**os.environ, "NOTIFY_SOCKET": name}
    proc = subprocess.Popen(
        [*RLWATCH, "watch", str(run), "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        got = [sock.recv(300).decode()]
        assert got[0].startswith("READY=1")
        while not any("reading the logs' backlog" in m for m in got):
            got.append(sock.recv(300).decode())

        def reading() -> WatchdogStatus | None:
            status, _ = read_status(run, time.time())
            return status if status is not None and status.reading_backlog is not None else None

        status = wait_until(reading, 20)
        assert status.running and not status.stale and status.pid == proc.pid
        assert status.reading_backlog is not None
        read, total = status.reading_backlog
        assert 0 <= read < total == log.stat().st_size
        found = diagnose(snap_with(status), Context())
        assert [f.code for f in found] == ["watchdog_reading"] and "no policy until it is read" in found[0].message
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, err = proc.communicate()
    records = [json.loads(line) for line in out.splitlines()]
    assert "Traceback" not in err, err
    complete = [r["type"] for r in records if not r.get("partial")]
    assert complete == ["watchdog"], records  # its word, no counts: the backlog was not read
    assert {r["type"] for r in records if r.get("partial")} <= {"state", "finding", "finding_cleared", "backlog"}
    final, _ = read_status(run, time.time())
    assert final is not None and final.stopped is not None and final.reading_backlog is None


@pytest.mark.slow
def test_watch_for_a_duration_counts_it_once_the_backlog_is_read(tmp_path: Path) -> None:
    """`--duration` is how long the stream runs: over a backlog that takes longer to read than that, the stream still
    starts with the whole backlog counted, as it did when the backlog was read before anything else."""
    from bench.datagen import generate

    run = tmp_path / "run"
    expected = generate(run / "logs" / "trainer.log", 24 << 20, dense=True).expected
    (run / "rlwatch.yaml").write_text("gpu: {backend: none}\ntraining: {logs: [logs/*.log]}\n")
    done = cli("watch", str(run), "--json", "--duration", "0.2")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    (state,) = [r for r in records if r["type"] == "state" and not r.get("partial")]
    assert state["events"]["connection_refused"] == expected["connection_refused"]  # the whole backlog


# ------------------------------------------------------------------------------------------------ pidfile


def test_the_pidfile_lock_admits_one_watchdog_and_dies_with_its_holder(tmp_path: Path) -> None:
    path = tmp_path / ".rlwatch" / "watchdog.pid"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from rlwatch.sources.watchdog_state import PidLock;"
            "ok, _ = PidLock(Path(sys.argv[1])).acquire(); print(ok, flush=True); time.sleep(60)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        ok, why = PidLock(path).acquire()
        assert not ok and why == f"another watchdog (pid {holder.pid}) acts on this run"
    finally:
        holder.kill()  # killed, no clean-up: the kernel drops the lock with the process
        holder.wait()
    lock = PidLock(path)
    assert lock.acquire() == (True, None)
    assert path.read_text() == f"{os.getpid()}\n"
    lock.release()


# --------------------------------------------------------------------------------------------- state file


def state(**kw: Any) -> dict[str, Any]:
    me = __import__("psutil").Process()
    base = {"pid": me.pid, "create_time": me.create_time(), "started_at": 100.0, "heartbeat": 1000.0}
    return {**base, "stale_after_s": 60.0, "stopped_at": None, "gave_up": [], "last_actions": [], **kw}


def test_status_says_how_far_a_running_watchdog_has_read_its_backlog() -> None:
    assert status_from(state(reading_backlog=[41, 100]), 1010.0).reading_backlog == (41, 100)
    assert status_from(state(reading_backlog=None), 1010.0).reading_backlog is None
    for bad in ([101, 100], [-1, 100], [1.5, 2], ["1", "2"], [True, 2], [1, 2, 3], "41/100", {"read": 1}):
        assert status_from(state(reading_backlog=bad), 1010.0).reading_backlog is None, bad
    stopped = state(reading_backlog=[41, 100], stopped_at=1005.0)
    assert status_from(stopped, 1010.0).reading_backlog is None  # only a running watchdog reads


def test_status_running_stale_and_a_reused_pid() -> None:
    assert status_from(state(), 1010.0).running
    assert not status_from(state(), 1010.0).stale
    assert status_from(state(), 1100.0).stale  # alive, but no heartbeat for 100 s > 60 s
    reused = status_from(state(create_time=5.0), 1010.0)  # the pid now belongs to another process
    assert not reused.running and not reused.stale
    assert not status_from(state(stopped_at=1005.0), 1010.0).running


def test_status_of_garbage_files_is_none_with_a_reason(tmp_path: Path) -> None:
    assert read_status(tmp_path, 0.0) == (None, None)  # no watchdog ever ran here
    (tmp_path / ".rlwatch").mkdir()
    (tmp_path / ".rlwatch" / STATE_FILE).write_bytes(b"\x00{not json")
    status, error = read_status(tmp_path, 0.0)
    assert status is None and error is not None and error.endswith("not valid JSON")
    write_json(tmp_path / ".rlwatch" / STATE_FILE, {"pid": "x", "heartbeat": "soon", "gave_up": [1, {"no": 2}]})
    status, error = read_status(tmp_path, 0.0)
    assert error is None and status is not None and not status.running and status.gave_up == ()


def test_rearm_of_a_watchdog_that_is_not_running_edits_its_state(tmp_path: Path) -> None:
    gave = [{"target": "restart-server", "reason": "3 restarts in 9 min", "since": 1.0}, {"target": "x", "reason": "y"}]
    write_json(tmp_path / ".rlwatch" / STATE_FILE, state(pid=2**22 + 7, gave_up=gave))
    out = cli("act", "rearm", str(tmp_path), "--target", "restart-server")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "re-armed: restart-server (the watchdog is not running)"
    status, _ = read_status(tmp_path, 0.0)
    assert status is not None and [g.target for g in status.gave_up] == ["x"]
    assert clear_gave_up(tmp_path, None) == (["x"], None)


def test_rearm_dry_run_and_nothing_to_rearm(tmp_path: Path) -> None:
    out = cli("act", "rearm", str(tmp_path))
    assert out.returncode == 0 and "no watchdog has run" in out.stdout
    write_json(tmp_path / ".rlwatch" / STATE_FILE, state(gave_up=[{"target": "t", "reason": "r"}]))
    out = cli("act", "rearm", str(tmp_path), "--dry-run")
    assert out.returncode == 0 and out.stdout.strip() == "would re-arm: t"
    assert read_status(tmp_path, 0.0)[0] is not None


# ------------------------------------------------------------------------------------- findings and report


def snap_with(wd: WatchdogStatus) -> Snapshot:
    return Snapshot(host="h", time=10_000.0, profile="workers", run_dir="/r", watchdog=wd)


def test_findings_gave_up_not_responding_and_died() -> None:
    gave = GaveUp("restart-workers:worker-1", "3 restarts in 12 min (budget: 3 per 30 min)", 9000.0)
    running = WatchdogStatus(True, 42, 100.0, 3.0, gave_up=(gave,))
    (f,) = diagnose(snap_with(running), Context())
    assert (f.severity.value, f.code) == ("critical", "watchdog_gave_up")
    assert f.message == (
        "The watchdog gave up on restart-workers:worker-1 after 3 restarts in 12 min (budget: 3 per 30 min) — "
        "it will not act on it again until `rlwatch act rearm`."
    )
    stuck = WatchdogStatus(True, 42, 100.0, 300.0, stale=True)
    assert [x.code for x in diagnose(snap_with(stuck), Context())] == ["watchdog_not_responding"]
    died = WatchdogStatus(False, 42, 100.0, 300.0)
    (d,) = diagnose(snap_with(died), Context())
    assert d.code == "watchdog_died" and "pid 42" in d.message
    assert diagnose(snap_with(died), Context(missing_expected=("watchdog",))) != ()  # said once, as expected_missing
    assert "watchdog_died" not in {x.code for x in diagnose(snap_with(died), Context(missing_expected=("watchdog",)))}
    stopped = WatchdogStatus(False, 42, 100.0, 300.0, stopped=9000.0, gave_up=(gave,))
    assert diagnose(snap_with(stopped), Context()) == ()  # stopped on purpose: not a problem in itself


def test_report_json_has_the_watchdog() -> None:
    wd = WatchdogStatus(True, 42, 100.0, 1.25, gave_up=(GaveUp("restart-server", "r", None),), last_action="ok")
    data = to_json_dict(snap_with(wd))["watchdog"]
    assert data["running"] is True and data["pid"] == 42 and data["heartbeat_age_s"] == 1.2
    assert data["gave_up"] == [{"target": "restart-server", "reason": "r", "since": None}]
    assert to_json_dict(Snapshot(host="h", time=1.0, profile="p", run_dir="/r"))["watchdog"] is None


# ----------------------------------------------------------------------------------------------- exporter


@pytest.mark.slow
def test_watch_serves_prometheus_metrics_and_refuses_a_taken_port(tmp_path: Path) -> None:
    import urllib.request

    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text("gpu: {backend: none}\ninterval_s: 0.2\n")
    proc = subprocess.Popen(
        [*RLWATCH, "watch", str(run), "--json", "--prometheus", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["type"] == "exporter" and first["url"].startswith("http://127.0.0.1:")
        port = int(first["url"].rsplit(":", 1)[1].split("/")[0])
        body = wait_until(lambda: urllib.request.urlopen(first["url"], timeout=5).read().decode(), 15)
        assert "rlwatch_info{" in body
        taken = cli("watch", str(run), "--prometheus", f"127.0.0.1:{port}", "--duration", "1")
        assert taken.returncode == 2
        assert taken.stderr.strip() == f"rlwatch: --prometheus 127.0.0.1:{port}: address already in use"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
