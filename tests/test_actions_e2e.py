"""Each action fixes its incident on the simulated host, through the real `rlwatch act ... --yes` in another process,
and the real `rlwatch report --json` afterwards confirms it: server up, workers fresh, no strays, steps advancing
from the resume step. Also: a dry run changes nothing, read-only refuses, no terminal without --yes is exit 2, and
`--pid` stops a holder rlwatch cannot classify only when named, never the live run's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.simhost import Sim, report, settled, start, wait_until, with_id, younger_from_now_on

pytestmark = pytest.mark.slow

# A leftover of an earlier attempt: its starter exits, so it is re-parented to init with its session gone.
LEFTOVER = """
import os, sys, time
if os.fork():
    os._exit(0)
f = open(sys.argv[1], 'rb')
print(os.getpid(), flush=True)
time.sleep(300)
"""
# The live run: writes its log in the run directory (its working directory) and holds the GPU.
RUN = """
import sys, time
log = open('train.log', 'a')
f = open(sys.argv[1], 'rb')
print('ready', flush=True)
time.sleep(300)
"""
OTHER_JOB = "import sys, time; f = open(sys.argv[1], 'rb'); print('ready', flush=True); time.sleep(300)"


def act(run_dir: Path, action: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", "act", action, str(run_dir), *flags],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def audit(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / ".rlwatch" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def codes(rep: dict[str, Any]) -> set[str]:
    return {f["code"] for f in rep["findings"] if f["severity"] in ("critical", "warning")}


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def sim_pids(sim: Sim) -> set[int]:
    return {p.pid for p in with_id(sim.sim_id)}


# ------------------------------------------------------------------------------------------ incident 1: resume
def test_resume_after_the_server_crash(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "server-crash", 20)
    sim.wait(settled)
    before = report(sim.dir)
    assert before["server"]["up"] is False
    resume_step = before["recover"]["resume_global_step"]
    assert isinstance(resume_step, int)

    pids = sim_pids(sim)
    dry = act(sim.dir, "resume", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"training resumes at global step {resume_step}" in dry.stdout
    assert "dry run: nothing was done" in dry.stdout
    assert sim_pids(sim) == pids and audit(sim.dir) == []

    done = act(sim.dir, "resume", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"(past resume step {resume_step})" in done.stdout
    after = report(sim.dir)
    assert after["server"]["up"] is True
    assert after["training"]["last_step"] > resume_step
    assert "server_down" not in codes(after)

    lines = audit(sim.dir)
    assert lines[0]["event"] == "plan" and lines[-1]["event"] == "result" and lines[-1]["ok"] is True
    stopped = [r for r in lines if r["event"] == "signal" and r["outcome"] == "exited after SIGTERM"]
    assert stopped and all(r["create_time"] and r["cmdline"] and r["signals"][0] == "SIGTERM" for r in stopped)
    (spawned,) = [r for r in lines if r["event"] == "spawn"]
    assert spawned["argv"] == sim.rlwatch_yaml()["actions"]["resume_command"]
    sim.stop()


# --------------------------------------------------------------------------------- incident 1: restart-server
def test_restart_server_after_the_server_crash_is_left_to_the_resume(tmp_path: Path, sims: list[Sim]) -> None:
    """rlwatch first looks after the server is gone: who started it is not known, and this run's launcher starts
    one of its own. A server started now could be a second one on the GPU once the run is resumed: refused, with
    the resume named as what brings both back (tested whole in test_resume_after_the_server_crash)."""
    sim = start(sims, tmp_path, "server-crash", 20)
    sim.wait(settled)
    assert report(sim.dir)["server"]["up"] is False
    done = act(sim.dir, "restart-server", "--yes")
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "who started the server is not known" in said, said
    assert "resume alone brings both back" in said and audit(sim.dir) == []
    sim.stop()


# ------------------------------------------------------------------------------ incident 3: restart-workers
def test_restart_workers_frees_the_leak_and_stops_the_brake_streak(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "memory-leak", 6)
    sim.wait(lambda d: all(d["facts"].get(f"worker-{i}_brakes", 0) >= 3 for i in range(2)), timeout=60)
    before = report(sim.dir)
    old = {p["name"]: p for p in before["processes"] if p["role"] == "worker" and p["alive"]}
    assert set(old) == {"worker-0", "worker-1"}
    assert all(p["rss_bytes"] > 100 * 1024**2 for p in old.values())
    streak = before["events"]["emergency_brake"]["streak"]
    assert streak >= 3
    logs = {r["log"]: sim.dir / r["log"] for r in sim.rlwatch_yaml()["processes"] if r["role"] == "worker"}
    offsets = {name: path.stat().st_size for name, path in logs.items()}

    done = act(sim.dir, "restart-workers", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 workers running again with fresh memory" in done.stdout

    def trial_after_restart(path: Path, offset: int) -> bool:
        return re.search(rb"trial \d+ done in", path.read_bytes()[offset:]) is not None

    wait_until(lambda: all(trial_after_restart(logs[n], offsets[n]) for n in logs), 20)
    after = report(sim.dir)
    new = {p["name"]: p for p in after["processes"] if p["role"] == "worker" and p["alive"]}
    assert set(new) == set(old)
    for name, p in new.items():
        assert p["pid"] != old[name]["pid"]
        assert not running(old[name]["pid"])
        assert p["rss_bytes"] < old[name]["rss_bytes"]
    assert after["events"]["emergency_brake"]["streak"] < streak
    sim.stop()


# ------------------------------------------------------------------------- incident 4: kill-zombies, then server
def test_kill_zombies_then_restart_server_fixes_the_gpu_zombies(tmp_path: Path, sims: list[Sim]) -> None:
    sim = start(sims, tmp_path, "gpu-zombie", 20)
    ledger = sim.wait(settled, timeout=60)
    strays = set(ledger["facts"]["stray_pids"])
    assert len(strays) == 2
    before = report(sim.dir)
    assert {z["pid"] for z in before["zombies"]} == strays and "gpu_strays" in codes(before)

    dry = act(sim.dir, "kill-zombies", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert all(f"stop  pid {pid}" in dry.stdout for pid in strays)
    assert dry.stdout.count("why: stray: ") == 2
    assert all(running(pid) for pid in strays) and audit(sim.dir) == []

    done = act(sim.dir, "kill-zombies", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no stray process holds" in done.stdout
    assert not any(running(pid) for pid in strays)
    after = report(sim.dir)
    assert after["zombies"] == [] and "gpu_strays" not in codes(after)
    signals = [r for r in audit(sim.dir) if r["event"] == "signal"]
    assert {r["pid"] for r in signals} == strays
    for r in signals:
        assert r["action"] == "kill-zombies" and r["cmdline"] and r["create_time"] and r["time"]
        assert r["signals"][0] == "SIGTERM" and r["outcome"] in ("exited after SIGTERM", "killed")

    # Then r: the launcher that gave up is run again, and starts its server on the GPU now free (a server started
    # on its own would be a second one once the launcher runs: who started the first is not known).
    served = act(sim.dir, "resume", "--yes")
    assert served.returncode == 0, served.stdout + served.stderr
    fixed = report(sim.dir)
    assert fixed["server"]["up"] is True
    assert "server_down" not in codes(fixed)
    results = [r for r in audit(sim.dir) if r["event"] == "result"]
    assert [(r["action"], r["ok"]) for r in results] == [("kill-zombies", True), ("resume", True)]
    sim.stop()


# ---------------------------------------------------------------------------------------------- refusals
class StrayDir:
    """A run directory with a live run (it writes train.log there and holds the stand-in GPU) and a leftover of an
    earlier attempt holding the GPU: orphaned (its starter exited, it was re-parented to init) and older than the
    run, so rlwatch has positive reasons to call it a stray."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.device = tmp_path / "dev" / "nvidia0"
        self.device.parent.mkdir()
        self.device.write_bytes(b"\0" * 4096)
        self.started: list[subprocess.Popen[str]] = []
        starter, line = self.start(LEFTOVER)
        self.stray = int(line)
        wait_until(lambda: starter.poll() is not None and psutil.Process(self.stray).ppid() != starter.pid, 5)
        self.stray_started = psutil.Process(self.stray).create_time()
        younger_from_now_on(self.stray)
        self.run, _ = self.start(RUN, cwd=tmp_path)

    def start(self, code: str, cwd: Path | None = None) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(self.device)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=cwd,
            start_new_session=True,
        )
        self.started.append(proc)
        assert proc.stdout is not None
        return proc, proc.stdout.readline().strip()

    def configure(self, **actions: Any) -> Path:
        cfg = {
            "gpu": {"backend": "none", "device_glob": f"{self.device.parent}/nvidia*"},
            "actions": {"grace_s": 1.0, **actions},
        }
        (self.dir / "rlwatch.yaml").write_text(yaml.safe_dump(cfg))
        return self.dir

    def stop(self) -> None:
        for proc in self.started:
            proc.kill()
            proc.wait(timeout=10)
        if running(self.stray) and abs(psutil.Process(self.stray).create_time() - self.stray_started) < 0.01:
            psutil.Process(self.stray).kill()


@pytest.fixture
def stray_dir(tmp_path: Path) -> Iterator[StrayDir]:
    made = StrayDir(tmp_path)
    yield made
    made.stop()


def test_readonly_config_refuses(stray_dir: StrayDir) -> None:
    run_dir = stray_dir.configure(readonly=True)
    out = act(run_dir, "kill-zombies", "--yes")
    assert out.returncode == 1
    assert "refused: read-only mode: actions are disabled" in out.stdout
    assert running(stray_dir.stray) and audit(run_dir) == []


def test_no_terminal_and_no_yes_is_a_usage_error(stray_dir: StrayDir) -> None:
    run_dir = stray_dir.configure()
    stray = stray_dir.stray
    out = act(run_dir, "kill-zombies")
    assert out.returncode == 2
    assert f"stop  pid {stray}" in out.stdout  # the plan is shown first
    assert "why: stray: orphaned" in out.stdout
    assert "confirm with --yes" in out.stderr and "Traceback" not in out.stderr
    assert running(stray) and audit(run_dir) == []
    done = act(run_dir, "kill-zombies", "--yes")  # the same plan, confirmed, does the job
    assert done.returncode == 0, done.stdout + done.stderr
    assert wait_until(lambda: not running(stray), 10)
    assert stray_dir.run.poll() is None


def test_a_holder_is_stopped_by_pid_only_when_named_and_the_run_never(stray_dir: StrayDir) -> None:
    run_dir = stray_dir.configure()
    run = stray_dir.run.pid
    other, _ = stray_dir.start(OTHER_JOB)  # its session lives: another job, maybe
    refused = act(run_dir, "kill-zombies", "--yes", "--pid", str(run))
    assert refused.returncode == 1
    assert f"pid {run} must not be stopped: part of the live run: writes train.log" in refused.stdout
    first = act(run_dir, "kill-zombies", "--yes")  # the leftover only
    assert first.returncode == 0, first.stdout + first.stderr
    assert "not sure it is a stray (not part of the live run, but not orphaned" in first.stdout
    assert not running(stray_dir.stray) and other.poll() is None
    second = act(run_dir, "kill-zombies", "--yes")
    assert second.returncode == 1
    assert "1 holder rlwatch cannot classify was left alone" in second.stdout
    assert f"pid {other.pid}: not part of the live run, but not orphaned" in second.stdout
    assert "--pid PID" in second.stdout and other.poll() is None
    named = act(run_dir, "kill-zombies", "--yes", "--pid", str(other.pid))
    assert named.returncode == 0, named.stdout + named.stderr
    assert "named by you; rlwatch's view: unknown" in named.stdout
    assert other.wait(timeout=10) is not None
    assert stray_dir.run.poll() is None
    signalled = {r["pid"] for r in audit(run_dir) if r["event"] == "signal"}
    assert signalled == {stray_dir.stray, other.pid}
