"""rlwatch on a live Ray cluster (marker ``ray``): the verl- and OpenRLHF-shaped jobs of tests/real/ray/jobs run on a
real Ray head node this test starts, and ``rlwatch report`` reads the run while the cluster lives (its State API,
with Ray 2.60's token authentication on) and after it is gone (the driver's log and Ray's session logs).

It needs a Python with ``ray[default]`` (the project itself never does): ``$RLWATCH_RAY_PYTHON``, else
the interpreter running the tests; it is skipped when neither can ``import ray``. The cluster gets a temp dir and ports of
its own, and only its processes (found by that temp dir, and their descendants) are stopped at the end: never a
``ray stop``, which would stop every cluster of the host.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rlwatch.sources import procfs

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

JOBS = Path(__file__).parent / "real" / "ray" / "jobs"
CANDIDATES = [os.environ.get("RLWATCH_RAY_PYTHON", ""), sys.executable]


def _ray_python() -> str | None:
    for python in CANDIDATES:
        if python and os.path.exists(python):
            done = subprocess.run([python, "-c", "import ray, ray.dashboard"], capture_output=True, timeout=120)
            if done.returncode == 0:
                return python
    return None


RAY_PYTHON = _ray_python()
if RAY_PYTHON is None:
    pytest.skip("no Python with ray[default] (set RLWATCH_RAY_PYTHON)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Cluster:
    """One Ray head node of this test's own: its temp dir, ports, HOME (holding the token) and environment."""

    temp: Path
    home: Path
    port: int
    dashboard: int
    env: dict[str, str] = field(default_factory=dict)

    @property
    def bin(self) -> Path:
        assert RAY_PYTHON is not None
        return Path(RAY_PYTHON).parent

    def run(self, *argv: str, timeout: float = 240, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env={**self.env, **extra}, capture_output=True, text=True, timeout=timeout, check=False
        )

    def pids(self) -> set[int]:
        """Our cluster's processes: those whose command line names our temp dir, and their descendants."""
        mine = {
            pid
            for pid in procfs.list_pids()
            if str(self.temp) in " ".join(procfs.read_cmdline(pid)) and pid != os.getpid()
        }
        return mine | procfs.descendants(mine, procfs.children_map())

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("raylive")
    temp = Path(f"/tmp/rlwr-{os.getpid()}")  # Ray's socket paths must stay short
    home = base / "home"
    home.mkdir()
    c = Cluster(temp=temp, home=home, port=_free_port(), dashboard=_free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), PATH=f"{c.bin}:{env.get('PATH', '')}", RAY_ADDRESS=f"127.0.0.1:{c.port}")
    env["PYTHONUNBUFFERED"] = "1"
    c.env = env
    # A driver given RAY_ADDRESS does not turn token mode on by itself (a bare ray.init() does): tell it, as the CLI
    # must be told (tests/real/ray/README). `ray start` is not told: it finds the token and turns it on alone.
    drivers = {**env, "RAY_AUTH_MODE": "token"}
    # A token in ~/.ray/auth_token makes `ray start` turn Ray 2.60's token authentication on.
    done = c.run(str(c.bin / "ray"), "get-auth-token", "--generate")
    assert (home / ".ray" / "auth_token").is_file(), done.stderr
    start = c.run(
        str(c.bin / "ray"),
        "start",
        "--head",
        "--num-cpus=10",  # the OpenRLHF-shaped job asks 8 (tests/real/ray/jobs/capture.sh), verl's 3
        "--disable-usage-stats",
        f"--temp-dir={temp}",
        f"--port={c.port}",
        f"--dashboard-port={c.dashboard}",
        f"--ray-client-server-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}",
        f"--dashboard-agent-grpc-port={_free_port()}",
        f"--runtime-env-agent-port={_free_port()}",
    )
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        assert "Token authentication is enabled" in start.stdout + start.stderr
        c.env = drivers
        yield c
    finally:
        c.stop()
        shutil.rmtree(temp, ignore_errors=True)


def _report(run: Path, c: Cluster, **extra: str) -> dict[str, Any]:
    """`rlwatch report --json RUN` as a person on the head node runs it (their HOME holds the cluster's token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(c.home), **extra)
    done = subprocess.run(
        [sys.executable, "-m", "rlwatch", "report", "--json", str(run)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )
    assert done.stdout, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    token = (c.home / ".ray" / "auth_token").read_text().strip()
    assert token not in done.stdout and token not in done.stderr
    return report


def _codes(report: dict[str, Any], severity: str = "critical") -> set[str]:
    return {f["code"] for f in report["findings"] if f["severity"] == severity}


@pytest.fixture(scope="module")
def verl_run(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("verl")
    shutil.copy(JOBS / "verl_shaped.py", run / "verl_shaped.py")
    with open(run / "driver.log", "w") as log:
        scenario = ["--scenario", "actor-sigkill", "--steps", "8", "--fail-step", "6", "--save-freq", "4"]
        done = subprocess.run(
            [RAY_PYTHON or "", "verl_shaped.py", str(run), *scenario, "--test-freq", "4"],
            cwd=run,
            env=cluster.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=300,
            check=False,
        )
    assert done.returncode != 0, (run / "driver.log").read_text()[-2000:]
    return run


@pytest.fixture(scope="module")
def openrlhf_run(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("openrlhf")
    ckpt = run / "ckpt" / "checkpoints_ppo_ray"
    with open(run / "driver.log", "w") as log:
        submit = [str(cluster.bin / "ray"), "job", "submit", f"--address=http://127.0.0.1:{cluster.dashboard}"]
        env_json = ["--runtime-env-json", json.dumps({"working_dir": str(JOBS)}), "--"]
        job = ["python3", "openrlhf_shaped.py", "--ckpt.path", str(ckpt), "--ckpt.output_dir", str(run / "ckpt")]
        subprocess.run(
            [*submit, *env_json, *job, "--ckpt.save_steps", "2", "--scenario", "actor-sigkill"],
            cwd=run,
            env=cluster.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=300,
            check=False,
        )
    text = (run / "driver.log").read_text()
    assert "failed" in text, text[-2000:]
    return run


def test_verl_on_the_live_cluster(cluster: Cluster, verl_run: Path) -> None:
    report = _report(verl_run, cluster)
    assert report["profile"] == "verl"
    assert report["run_state"]["state"] == "crashed"
    assert _codes(report) == {"ray_actor_died"}
    ray = report["ray"]
    # The State API answered, with the cluster's token, at the dashboard the raylet's command line names.
    assert ray["state_api_error"] is None, ray["state_api_error"]
    assert ray["dashboard"] == f"http://127.0.0.1:{cluster.dashboard}"
    assert ray["session_logs"].startswith(str(cluster.temp))
    failure = ray["failure"]
    actor = failure["actor"]
    assert actor["class_name"] == "WorkerDict" and actor["exit_type"] == "SYSTEM_ERROR"
    assert actor["reason"] == "WORKER_DIED" and actor["node_id"]  # the node id only the State API gives
    assert failure["step"] == 5
    dead = [a for a in ray["actors"] if a["pid"] == actor["pid"]]
    assert dead and dead[0]["state"] == "DEAD" and dead[0]["source"] == "State API"
    assert report["checkpoint"]["latest"]["global_step"] == 4
    assert report["checkpoint"]["latest"]["tracker"].endswith("latest_checkpointed_iteration.txt")
    assert any(p.endswith(f"-{actor['pid']}.err") for p in report["logs"])  # the dead worker's stderr, followed


def test_openrlhf_on_the_same_cluster_is_told_apart(cluster: Cluster, verl_run: Path, openrlhf_run: Path) -> None:
    report = _report(openrlhf_run, cluster)
    assert report["profile"] == "openrlhf"
    assert _codes(report) == {"ray_actor_died"}
    ray = report["ray"]
    assert ray["state_api_error"] is None
    actor = ray["failure"]["actor"]
    assert actor["class_name"] == "PolicyModelActor" and actor["exit_type"] == "SYSTEM_ERROR"
    # Only this job's actors: not the verl job's that ran on the same cluster before it, not Ray's JobSupervisor.
    classes = {a["class_name"] for a in ray["actors"]}
    assert "WorkerDict" not in classes and "TaskRunner" not in classes and "JobSupervisor" not in classes
    assert {"PPOTrainer", "PolicyModelActor"} <= classes
    assert len({a["job_id"] for a in ray["actors"]}) == 1


def test_a_live_run_whose_workers_hang(
    cluster: Cluster, verl_run: Path, openrlhf_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """While the run lives: its Ray actors are the run's (its log relays them: the TaskRunner and both WorkerDicts,
    which work elsewhere and write nothing here), the State API sees them alive, and the steps before the workers
    blocked are read. Whether that is a hang is the health model's to say; here no actor is blamed."""
    run = tmp_path_factory.mktemp("hang")
    shutil.copy(JOBS / "verl_shaped.py", run / "verl_shaped.py")
    with open(run / "driver.log", "w") as log:
        driver = subprocess.Popen(
            [RAY_PYTHON or "", "verl_shaped.py", str(run), "--scenario", "hang", "--steps", "8", "--fail-step", "3"],
            cwd=run,
            env=cluster.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while "waiting for rollout workers" not in (run / "driver.log").read_text():
            assert driver.poll() is None and time.monotonic() < deadline, (run / "driver.log").read_text()[-2000:]
            time.sleep(0.5)
        report = _report(run, cluster)
        assert report["profile"] == "verl"
        assert report["training"]["last_step"] == 2 and report["training"]["total_steps"] == 8
        assert report["ray"]["failure"] is None and not _codes(report) & {"ray_actor_died", "ray_node_died"}
        alive = {a["pid"]: a["class_name"] for a in report["ray"]["actors"] if a["state"] == "ALIVE"}
        assert sorted(alive.values()) == ["TaskRunner", "WorkerDict", "WorkerDict"]
        members = {m["pid"]: m["evidence"] for m in report["live_run"]["members"]}
        for pid, cls in alive.items():
            # The TaskRunner by its lines in the driver's log; the WorkerDicts, silent here, by the State API.
            said = f"({cls} pid={pid})" if cls == "TaskRunner" else f"the State API lists {cls} (pid {pid})"
            assert pid in members and said in members[pid], (pid, members.get(pid))
        roles = {p["pid"]: p["role"] for p in report["processes"] if p["alive"]}
        assert sorted(roles[pid] for pid in alive) == ["ray-worker", "ray-worker", "task-runner"]
    finally:
        driver.send_signal(signal.SIGINT)  # Ctrl-C, as the capture of verl-hang did
        try:
            driver.wait(30)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait(10)


def test_after_the_cluster_is_gone(cluster: Cluster, verl_run: Path, openrlhf_run: Path) -> None:
    """The post-mortem: no State API any more, but the driver's log and the session's logs (found under
    $RAY_TMPDIR, tied to the run by the worker files of the actors its log names) still say it all."""
    cluster.stop()
    assert not cluster.pids()
    report = _report(verl_run, cluster, RAY_TMPDIR=str(cluster.temp))
    ray = report["ray"]
    assert ray["state_api_error"] is not None and "no Ray cluster runs" in ray["state_api_error"]
    assert ray["session_logs"] is not None and ray["session_logs"].startswith(str(cluster.temp))
    failure = ray["failure"]
    assert failure["actor"]["class_name"] == "WorkerDict" and failure["actor"]["exit_type"] == "SYSTEM_ERROR"
    assert failure["time"] is not None  # when the raylet dropped the worker, from raylet.out
    assert _codes(report) == {"ray_actor_died"}
