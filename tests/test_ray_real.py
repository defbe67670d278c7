"""rlwatch judged on real Ray runs shaped like verl and OpenRLHF (tests/real/ray: Ray 2.60.0, its README says how each
case was made), and on the State API's real HTTP answers (tests/real/ray/state-api-http).

Each case is copied to a temporary directory with its files' modification time set to the capture's end, discovered
with no configuration and no process of the host (an empty /proc), and judged as ``rlwatch report`` judges it, an
hour later. What must hold is what a person on that host would have found true: the profile; the step the run
reached (verl's ``step:N`` lines, OpenRLHF's ``Global step N``); which actor died, its pid, node and why (Ray's
exit type, the memory monitor's numbers, the exception its code raised, the node that went away) said as the root
cause; the checkpoint a resume starts from; healthy runs healthy; a failure a relaunch got past is history. With the
cluster's State API (served on loopback from what Ray really answered), the actor a node death took is named too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import Snapshot
from rlwatch.config.models import Config
from rlwatch.discover.discovery import discover
from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json, to_text
from rlwatch.logs.ray import actors_from_state, parse_driver, state_rows

RAY = Path(__file__).parent / "real" / "ray"
CAPTURED = datetime.fromisoformat("2026-11-26T13:22:00+00:00").timestamp()  # after every case's last write
HTTP_CAPTURED = datetime.fromisoformat("2026-11-26T13:31:00+00:00").timestamp()
CASES = sorted(p.name for p in RAY.iterdir() if (p / "driver.log").is_file())


def _copy(case: str, dest: Path, captured: float = CAPTURED) -> Path:
    run = dest / case
    shutil.copytree(RAY / case, run)
    for root, dirs, files in os.walk(run):
        for name in files + dirs:
            os.utime(os.path.join(root, name), (captured, captured))
    os.utime(run, (captured, captured))
    return run


@pytest.fixture
def no_proc(tmp_path: Path) -> str:
    """An empty /proc: no process of this host (another session's Ray cluster, say) is taken for the run's."""
    root = tmp_path / "proc"
    root.mkdir()
    (root / "stat").write_text("btime 1795690000\n")
    (root / "uptime").write_text("1000.0 1000.0\n")
    return str(root)


@pytest.fixture(autouse=True)
def _no_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No token of this host's Ray (~/.ray/auth_token) is read by a test that does not give one."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_TMPDIR", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


def _judge(run: Path, proc_root: str, *, dashboard: str | None = None, captured: float = CAPTURED) -> Snapshot:
    clock = FakeClock(captured + 3600)
    cfg = discover(run, proc_root=proc_root, clock=clock)
    ray = cfg.ray.model_copy(update={"dashboard": dashboard, "state_api": dashboard is not None})
    cfg = cfg.model_copy(update={"ray": ray}).with_provenance(cfg.provenance)
    engine = Engine(cfg, run, clock=clock, proc_root=proc_root)
    try:
        return engine.collect_once()
    finally:
        engine.stop()


def _codes(s: Snapshot, *severities: str) -> set[str]:
    return {f.code for f in s.findings if not severities or f.severity.value in severities}


def _message(s: Snapshot, code: str) -> str:
    return next(f.message for f in s.findings if f.code == code)


# ------------------------------------------------------------------------------------------------- every case


EXPECTED: dict[str, dict[str, Any]] = {
    "verl-healthy": {"profile": "verl", "state": "finished", "step": 12, "total": 12, "ckpt": 12, "code": None},
    "verl-actor-raises": {"profile": "verl", "state": "crashed", "step": 5, "total": 12, "ckpt": 4, "code": "ray_actor_died"},
    "verl-actor-sigkill": {"profile": "verl", "state": "crashed", "step": 5, "total": 12, "ckpt": 4, "code": "ray_actor_died"},
    "verl-oom-killed": {"profile": "verl", "state": "crashed", "step": 5, "total": 12, "ckpt": 4, "code": "ray_memory_monitor"},
    "verl-oom-killed-tight": {"profile": "verl", "state": "crashed", "step": 5, "total": 12, "ckpt": 4, "code": "ray_memory_monitor"},
    "verl-hang": {"profile": "verl", "state": None, "step": 5, "total": 12, "ckpt": 4, "code": None},
    "verl-resume": {"profile": "verl", "state": "finished", "step": 12, "total": 12, "ckpt": 12, "code": None},
    "verl-raylet-died": {"profile": "verl", "state": "crashed", "step": None, "total": 12, "ckpt": None, "code": "ray_cluster_unreachable"},
    "openrlhf-healthy": {"profile": "openrlhf", "state": "finished", "step": 8, "total": None, "ckpt": 8, "code": None},
    "openrlhf-actor-sigkill": {"profile": "openrlhf", "state": "crashed", "step": 4, "total": None, "ckpt": 4, "code": "ray_actor_died"},
    "openrlhf-node-dies": {"profile": "openrlhf", "state": "crashed", "step": 3, "total": None, "ckpt": 2, "code": "ray_node_died"},
    "openrlhf-engine-init-fails": {"profile": "openrlhf", "state": "crashed", "step": None, "total": None, "ckpt": None, "code": "ray_actor_died"},
    "openrlhf-job-stopped": {"profile": "openrlhf", "state": "stopped", "step": 3, "total": None, "ckpt": 2, "code": None},
}  # fmt: skip


def test_every_case_is_expected() -> None:
    assert set(EXPECTED) == {c for c in CASES if c in EXPECTED} and len(EXPECTED) == 13


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_profile_step_checkpoint_state_and_root_cause(case: str, tmp_path: Path, no_proc: str) -> None:
    want = EXPECTED[case]
    s = _judge(_copy(case, tmp_path), no_proc)
    assert s.profile == want["profile"]
    assert s.profile_evidence, "the profile is chosen with evidence"
    assert s.training is not None and s.training.last_step == want["step"]
    assert s.training.total_steps == want["total"]
    latest = s.checkpoint.latest if s.checkpoint else None
    assert (latest.global_step if latest else None) == want["ckpt"]
    if want["state"] is not None:
        assert s.run_state is not None and s.run_state.state == want["state"], s.run_state
    critical = _codes(s, "critical")
    if want["code"] is None:
        assert not critical & {"ray_actor_died", "ray_memory_monitor", "ray_node_died", "ray_cluster_unreachable"}
    else:
        assert want["code"] in critical
        # The root cause replaces the generic words: no "run_crashed", no bare "Last exception" beside it.
        assert "run_crashed" not in _codes(s) and "crashed" not in _codes(s)
    assert s.ray is not None and s.ray.session_logs is not None and s.ray.session_logs.endswith("ray_logs")
    # No verl or OpenRLHF run here has an inference server to probe.
    assert s.server is not None and s.server.expected is False


def test_healthy_runs_are_healthy(tmp_path: Path, no_proc: str) -> None:
    for case in ("verl-healthy", "openrlhf-healthy"):
        s = _judge(_copy(case, tmp_path), no_proc)
        assert [f for f in s.findings if f.severity.value in ("critical", "warning")] == [], case
        assert s.training is not None and s.training.finished
        assert s.ray is not None and s.ray.failure is None


def test_a_sigkilled_worker_is_named_with_its_pid_node_exit_type_step_and_resume_point(
    tmp_path: Path, no_proc: str
) -> None:
    s = _judge(_copy("verl-actor-sigkill", tmp_path), no_proc)
    assert s.ray is not None and s.ray.failure is not None
    f = s.ray.failure
    assert f.kind == "actor_died" and f.current
    assert f.actor is not None
    assert (f.actor.class_name, f.actor.name, f.actor.pid) == ("WorkerDict", "7qbikuWorkerDict_0:1", 20101)
    assert (f.actor.node_ip, f.actor.exit_type, f.actor.reason) == ("192.0.2.2", "SYSTEM_ERROR", "WORKER_DIED")
    assert f.step == 5
    assert f.at is not None  # the raylet dropped the worker at a time it wrote down
    msg = _message(s, "ray_actor_died")
    for words in (
        "WorkerDict 7qbikuWorkerDict_0:1 (pid 20101, node 192.0.2.2)",
        "SYSTEM_ERROR",
        "during step 6 of 12 (the last step logged: 5)",
        "global_step_4",
        "latest_checkpointed_iteration.txt",
        "ray.exceptions.ActorDiedError",
    ):
        assert words in msg, words
    # Ray's session logs are followed as logs of the run: the raylet's, and the dead worker's stderr.
    names = {os.path.basename(p) for p in s.logs}
    assert "raylet.out" in names
    assert any(n.startswith("worker-f0818a24") and n.endswith("-20101.err") for n in names)
    # ... but their endings are Ray's, not the run's.
    assert {os.path.basename(e.path) for e in s.endings} == {"driver.log"}


def test_a_kernel_oom_kill_of_the_worker_is_said(tmp_path: Path, no_proc: str) -> None:
    """Ray saw only the worker's connection drop (SYSTEM_ERROR); the kernel's report in a followed log names the pid."""
    run = _copy("verl-actor-sigkill", tmp_path)
    (run / "kern.log").write_text(
        "Nov 26 13:09:16 vm kernel: Out of memory: Killed process 20101 (ray::WorkerDic) total-vm:9123456kB, "
        "anon-rss:8123456kB\n"
    )
    os.utime(run / "kern.log", (CAPTURED, CAPTURED))
    s = _judge(run, no_proc)
    assert "The kernel: the kernel's OOM killer killed pid 20101 (kern.log: " in _message(s, "ray_actor_died")


def test_the_memory_monitor_is_said_with_its_numbers_and_victims(tmp_path: Path, no_proc: str) -> None:
    s = _judge(_copy("verl-oom-killed", tmp_path), no_proc)
    assert s.ray is not None and s.ray.failure is not None
    f = s.ray.failure
    assert f.kind == "memory_monitor" and f.memory is not None
    assert (f.memory.killed, f.memory.node_ip, f.memory.used_gb, f.memory.limit_gb) == (2, "192.0.2.2", 3.98, 23.59)
    assert f.memory.reason is not None and "exceeded threshold" in f.memory.reason
    assert {pid for _, pid, _ in f.memory.victims} == {21283, 21284}
    assert f.actor is not None and f.actor.pid == 21284 and f.actor.name == "W7k59oWorkerDict_0:1"
    msg = _message(s, "ray_memory_monitor")
    assert "3.98 GB used of a 23.59 GB limit" in msg and "W7k59oWorkerDict_0:1 (pid 21284, 2.26 GB)" in msg
    tight = _judge(_copy("verl-oom-killed-tight", tmp_path), no_proc)
    assert tight.ray is not None and tight.ray.failure is not None and tight.ray.failure.memory is not None
    assert tight.ray.failure.memory.killed == 3
    assert {pid for _, pid, _ in tight.ray.failure.memory.victims} == {22830, 22831, 22785}


def test_an_exception_in_an_actor_names_the_actor_and_its_error(tmp_path: Path, no_proc: str) -> None:
    s = _judge(_copy("verl-actor-raises", tmp_path), no_proc)
    assert s.ray is not None and s.ray.failure is not None
    f = s.ray.failure
    assert f.kind == "task_error" and f.actor is not None
    assert (f.actor.class_name, f.actor.pid) == ("WorkerDict", 18471)
    assert f.exception == "RuntimeError: injected failure in update_actor (rank 1, step 6)"
    assert "WorkerDict.actor_rollout_update_actor raised" in _message(s, "ray_actor_died")


def test_a_vllm_engine_that_fails_in_its_init(tmp_path: Path, no_proc: str) -> None:
    s = _judge(_copy("openrlhf-engine-init-fails", tmp_path), no_proc)
    assert s.ray is not None and s.ray.failure is not None
    f = s.ray.failure
    assert f.kind == "creation_failed" and f.actor is not None
    assert (f.actor.class_name, f.actor.pid) == ("RolloutRayActor", 3485)
    assert f.exception is not None and f.exception.startswith("RuntimeError: injected failure in vLLM engine")
    # The actor's own stderr, in Ray's session logs, says the same: read, and followed.
    assert any(e.startswith("worker-") and "RuntimeError" in e for e in f.evidence)
    assert "before the run's first step" in _message(s, "ray_actor_died")


def test_an_openrlhf_policy_rank_killed(tmp_path: Path, no_proc: str) -> None:
    s = _judge(_copy("openrlhf-actor-sigkill", tmp_path), no_proc)
    assert s.ray is not None and s.ray.failure is not None
    f = s.ray.failure
    assert f.actor is not None and (f.actor.class_name, f.actor.pid, f.actor.exit_type) == (
        "PolicyModelActor",
        32508,
        "SYSTEM_ERROR",
    )
    assert f.step == 4
    assert "global_step4" in _message(s, "ray_actor_died")  # DeepSpeed's `latest` names it


def test_a_node_death_and_a_relaunch_that_cannot_reach_the_cluster(tmp_path: Path, no_proc: str) -> None:
    s = _judge(_copy("openrlhf-node-dies", tmp_path), no_proc)
    assert s.ray is not None and s.ray.failure is not None
    assert s.ray.failure.kind == "node_died" and "raylet was terminated unexpectedly" in s.ray.failure.cause
    died = _judge(_copy("verl-raylet-died", tmp_path), no_proc)
    assert died.ray is not None and died.ray.failure is not None
    f = died.ray.failure
    assert f.kind == "cluster_unreachable" and "Failed to connect to Ray cluster at 192.0.2.2:6379" in f.cause
    # The relaunch never stepped: the node death before it is still the story, told with it.
    assert "marked dead because the detector has missed too many heartbeats" in f.cause
    assert f.actor is not None and (f.actor.class_name, f.actor.pid) == ("TaskRunner", 2989)


def test_a_failure_the_relaunch_got_past_is_history(tmp_path: Path, no_proc: str) -> None:
    s = _judge(_copy("verl-resume", tmp_path), no_proc)
    assert s.run_state is not None and s.run_state.state == "finished"
    assert s.ray is not None and s.ray.failure is None
    assert [h.actor.pid for h in s.ray.history if h.actor] == [27472]
    assert not s.ray.history[0].current
    assert "ray_earlier_failure" in _codes(s, "info")
    assert s.training is not None and (s.training.last_step, s.training.finished) == (12, True)


def test_a_stopped_job_is_stopped_not_finished(tmp_path: Path, no_proc: str) -> None:
    s = _judge(_copy("openrlhf-job-stopped", tmp_path), no_proc)
    assert s.run_state is not None and s.run_state.state == "stopped"
    assert "raysubmit_V5bEkbdw4hy3ArCC was stopped" in s.run_state.why
    assert "ray_job_stopped" in _codes(s, "info")


def test_the_hung_run_reads_its_progress_and_blames_no_actor(tmp_path: Path, no_proc: str) -> None:
    """The hang itself is the health model's to declare; what Ray's part must give it is the progress read (step 5
    of 12, its speed from verl's bar) and no actor death where none happened."""
    s = _judge(_copy("verl-hang", tmp_path), no_proc)
    assert s.training is not None and (s.training.last_step, s.training.total_steps) == (5, 12)
    assert s.training.steps_per_hour is not None and 2000 < s.training.steps_per_hour < 4000  # 1.17 s/it
    assert s.ray is not None and s.ray.failure is None


# ------------------------------------------------------------------------------------------------- State API


class _Dashboard:
    """Ray's dashboard State API on loopback, answering what Ray answered (the recorded bodies, or a case's
    ``list_actors`` dump wrapped as the dashboard wraps it), with token authentication as Ray 2.60 does it."""

    def __init__(self, actors: bytes, nodes: bytes, token: str | None) -> None:
        self.seen: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append({k.lower(): v for k, v in self.headers.items()} | {"path": self.path})
                given = self.headers.get("Authorization")
                if token is not None and given is None:
                    self._send(401, b"Unauthorized: Missing authentication token", "text/plain; charset=utf-8")
                elif token is not None and given != f"Bearer {token}":
                    self._send(403, b"Forbidden: Invalid authentication token", "text/plain; charset=utf-8")
                elif self.path.startswith("/api/v0/actors"):
                    self._send(200, actors, "application/json; charset=utf-8")
                elif self.path.startswith("/api/v0/nodes"):
                    self._send(200, nodes, "application/json; charset=utf-8")
                else:
                    self._send(404, b"", "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _wrapped(rows: list[Any]) -> bytes:
    """A ``list_actors`` dump as the dashboard sends it (the envelope of tests/real/ray/state-api-http)."""
    inner = {"total": len(rows), "num_after_truncation": len(rows), "num_filtered": len(rows), "result": rows}
    return json.dumps({"result": True, "msg": "", "data": {"result": inner | {"partial_failure_warning": ""}}}).encode()


@pytest.fixture
def dashboard() -> Iterator[list[_Dashboard]]:
    made: list[_Dashboard] = []
    yield made
    for d in made:
        d.close()


def _serve(made: list[_Dashboard], case: str, token: str | None = None) -> _Dashboard:
    actors = json.loads((RAY / case / "state_actors.json").read_text())
    nodes_path = RAY / case / "state_nodes.json"
    nodes = json.loads(nodes_path.read_text()) if nodes_path.is_file() else []
    d = _Dashboard(_wrapped(actors), _wrapped(nodes), token)
    made.append(d)
    return d


def test_the_state_api_names_the_actor_a_node_death_took(
    tmp_path: Path, no_proc: str, dashboard: list[_Dashboard]
) -> None:
    d = _serve(dashboard, "openrlhf-node-dies")
    s = _judge(_copy("openrlhf-node-dies", tmp_path), no_proc, dashboard=d.url)
    assert s.ray is not None and s.ray.api is None and s.ray.dashboard == d.url
    f = s.ray.failure
    assert f is not None and f.actor is not None
    # The driver only had the actor's id; the State API says it was policy rank 1, on the node that is DEAD.
    assert (f.actor.class_name, f.actor.pid) == ("PolicyModelActor", 1925)
    assert f.node is not None and "is DEAD" in f.node and "health check failed" in f.node
    assert "PolicyModelActor (pid 1925" in _message(s, "ray_node_died")
    assert any("c13dfc4f" in n for n in s.ray.dead_nodes)
    # The job's actors, not Ray's own JobSupervisor.
    assert {a.class_name for a in s.ray.actors} >= {"PPOTrainer", "PolicyModelActor", "LLMRayActor"}
    assert "JobSupervisor" not in {a.class_name for a in s.ray.actors}


def test_the_state_api_sees_the_resumed_job_and_the_dead_one(
    tmp_path: Path, no_proc: str, dashboard: list[_Dashboard]
) -> None:
    d = _serve(dashboard, "verl-resume")
    s = _judge(_copy("verl-resume", tmp_path), no_proc, dashboard=d.url)
    assert s.ray is not None
    assert {a.job_id for a in s.ray.actors} == {"01000000", "02000000"}
    killed = [a for a in s.ray.actors if a.reason == "WORKER_DIED" and a.exit_type == "SYSTEM_ERROR"]
    assert {a.pid for a in killed} >= {27472}
    assert s.ray.failure is None and s.run_state is not None and s.run_state.state == "finished"


def test_the_state_api_oom_context_and_the_hung_run_alive(
    tmp_path: Path, no_proc: str, dashboard: list[_Dashboard]
) -> None:
    d = _serve(dashboard, "verl-oom-killed")
    s = _judge(_copy("verl-oom-killed", tmp_path), no_proc, dashboard=d.url)
    assert s.ray is not None and {a.pid: a.reason for a in s.ray.actors if a.class_name == "WorkerDict"} == {
        21283: "OOM",
        21284: "OOM",
    }
    hung = _serve(dashboard, "verl-hang")
    h = _judge(_copy("verl-hang", tmp_path), no_proc, dashboard=hung.url)
    assert h.ray is not None and {a.state for a in h.ray.actors} == {"ALIVE"} and len(h.ray.actors) == 3


def _recorded(which: str) -> _Dashboard:
    base = RAY / "state-api-http" / which
    token = "tok-" + "x" * 40 if which == "token-auth" else None
    return _Dashboard((base / "actors.json").read_bytes(), (base / "nodes.json").read_bytes(), token)


def test_the_recorded_http_answers_parse() -> None:
    for which in ("no-auth", "token-auth"):
        rows = state_rows(json.loads((RAY / "state-api-http" / which / "actors.json").read_text()))
        actors = actors_from_state(rows)
        assert {a.class_name for a in actors} == {"TaskRunner", "WorkerDict"}
        dead = [a for a in actors if a.exit_type == "SYSTEM_ERROR"]
        assert len(dead) == 1 and dead[0].reason == "WORKER_DIED" and dead[0].state == "DEAD"
        # Rank 0 went with its placement group: WORKER_DIED too, but on purpose.
        assert {a.exit_type for a in actors if a.class_name == "WorkerDict"} == {"SYSTEM_ERROR", "INTENDED_SYSTEM_EXIT"}
        log = parse_driver("driver.log", (RAY / "state-api-http" / which / "driver.log").read_text().splitlines())
        assert dead[0].pid in log.named  # the driver's log named the actor the State API says died


def _http_case(tmp_path: Path, which: str) -> Path:
    run = tmp_path / which
    run.mkdir()
    shutil.copy(RAY / "state-api-http" / which / "driver.log", run / "driver.log")
    os.utime(run / "driver.log", (HTTP_CAPTURED, HTTP_CAPTURED))
    return run


def test_token_auth_the_token_is_found_sent_and_never_shown(
    tmp_path: Path, no_proc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _recorded("token-auth")
    try:
        run = _http_case(tmp_path, "token-auth")
        # Without a token: Ray's 401, said in one line.
        s = _judge(run, no_proc, dashboard=d.url, captured=HTTP_CAPTURED)
        assert s.ray is not None and s.ray.api is not None and s.ray.api.startswith("HTTP 401")
        assert "no token was found" in s.ray.api and not s.ray.actors
        # ~/.ray/auth_token, as `ray get-auth-token --generate` writes it.
        token = "tok-" + "x" * 40
        home = Path(os.environ["HOME"])
        (home / ".ray").mkdir()
        (home / ".ray" / "auth_token").write_text(token)
        s = _judge(run, no_proc, dashboard=d.url, captured=HTTP_CAPTURED)
        assert s.ray is not None and s.ray.api is None
        assert {a.class_name for a in s.ray.actors} == {"TaskRunner", "WorkerDict"}
        assert d.seen[-1]["authorization"] == f"Bearer {token}"
        assert s.ray.failure is not None and s.ray.failure.actor is not None
        assert s.ray.failure.actor.name == "qxrxQlWorkerDict_0:1"  # from the driver's log, confirmed by the API
        for shown in (to_json(s), to_text(s)):
            assert token not in shown
        # RAY_AUTH_TOKEN wins over the file; a wrong one is Ray's 403.
        monkeypatch.setenv("RAY_AUTH_TOKEN", "not-the-token")
        s = _judge(run, no_proc, dashboard=d.url, captured=HTTP_CAPTURED)
        assert s.ray is not None and s.ray.api is not None and s.ray.api.startswith("HTTP 403")
        assert "not-the-token" not in to_json(s) + to_text(s)
    finally:
        d.close()


def test_no_auth_cluster_answers_without_a_token(tmp_path: Path, no_proc: str) -> None:
    d = _recorded("no-auth")
    try:
        s = _judge(_http_case(tmp_path, "no-auth"), no_proc, dashboard=d.url, captured=HTTP_CAPTURED)
        assert s.ray is not None and s.ray.api is None
        assert "authorization" not in d.seen[-1]
        f = s.ray.failure
        assert f is not None and f.actor is not None and f.actor.pid == 22099 and f.actor.job_id == "01000000"
    finally:
        d.close()


def test_a_dashboard_that_is_not_there_is_one_line_not_an_error(tmp_path: Path, no_proc: str) -> None:
    s = _judge(_copy("verl-actor-sigkill", tmp_path), no_proc, dashboard="http://127.0.0.1:9")
    assert s.ray is not None and s.ray.api is not None and "connection refused" in s.ray.api
    assert s.ray.failure is not None  # the logs still say everything they said
    ray_source = next(src for src in s.sources if src.name == "ray")
    assert not ray_source.ok and ray_source.error is not None and "\n" not in ray_source.error


# ------------------------------------------------------------------------------------------------- the command


def test_rlwatch_report_on_a_case(tmp_path: Path) -> None:
    """The command a person types, in another process: the profile, the root cause, the exit status."""
    run = _copy("verl-actor-sigkill", tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run(
        [sys.executable, "-m", "rlwatch", "report", "--json", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["profile"] == "verl" and report["run_state"]["state"] == "crashed"
    assert report["training"]["last_step"] == 5 and report["training"]["total_steps"] == 12
    failure = report["ray"]["failure"]
    assert failure["actor"]["pid"] == 20101 and failure["actor"]["exit_type"] == "SYSTEM_ERROR"
    assert failure["step"] == 5 and report["checkpoint"]["latest"]["global_step"] == 4
    assert report["checkpoint"]["latest"]["tracker"].endswith("latest_checkpointed_iteration.txt")
    assert [f["code"] for f in report["findings"] if f["severity"] == "critical"] == ["ray_actor_died"]


def test_discovered_configuration_names_the_session_logs_and_checkpoints(tmp_path: Path, no_proc: str) -> None:
    run = _copy("verl-actor-sigkill", tmp_path)
    cfg: Config = discover(run, proc_root=no_proc, clock=FakeClock(CAPTURED + 60))
    assert cfg.profile == "verl"
    assert cfg.ray.session_logs == "ray_logs"
    assert "checkpoints" in cfg.training.checkpoint_dirs
    assert not any(log.startswith("ray_logs") for log in cfg.training.logs)  # Ray's own logs are Ray's
    assert any("latest_checkpointed_iteration.txt: 4" in e for e in cfg.provenance.profile)
    orl = discover(_copy("openrlhf-healthy", tmp_path), proc_root=no_proc, clock=FakeClock(CAPTURED + 60))
    assert orl.profile == "openrlhf" and "checkpoints/ckpt/checkpoints_ppo_ray" in orl.training.checkpoint_dirs
