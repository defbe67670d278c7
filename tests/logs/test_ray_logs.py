"""What Ray prints, read as Ray means it (rlwatch/logs/ray.py): the real texts of tests/real/ray, and the shapes
around them (both verl metric formats, relaunches appended to one log, the actors' lines a piped driver flushes after
its own traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlwatch.logs.ray import (
    ACTOR_PREFIX,
    actors_from_state,
    failures,
    last_exception_line,
    looks_like_ray_driver,
    nodes_from_state,
    parse_driver,
    parse_ray_logs,
    state_rows,
    task_actor,
)

RAY = Path(__file__).resolve().parents[1] / "real" / "ray"
CASES = sorted(p.name for p in RAY.iterdir() if (p / "state_actors.json").is_file())
T = "\x1b[36m(TaskRunner pid=11)\x1b[0m "


def _lines(case: str, name: str = "driver.log") -> list[str]:
    return (RAY / case / name).read_text(encoding="utf-8", errors="replace").splitlines()


def test_prefixes_as_ray_prints_them() -> None:
    m = ACTOR_PREFIX.match("(WorkerDict pid=616, ip=192.168.149.159) step:1 - a:1")
    assert m is not None and (m.group("name"), m.group("pid"), m.group("ip")) == (
        "WorkerDict",
        "616",
        "192.168.149.159",
    )
    m = ACTOR_PREFIX.match("(pid=12) hello")
    assert m is not None and m.group("name") is None and m.group("pid") == "12"
    assert ACTOR_PREFIX.match("(not a prefix) x") is None


@pytest.mark.parametrize("case", sorted(p.name for p in RAY.iterdir() if (p / "driver.log").is_file()))
def test_every_real_driver_log_is_a_ray_drivers(case: str) -> None:
    assert looks_like_ray_driver((RAY / case / "driver.log").read_text(errors="replace"))


def test_other_logs_are_not_ray_drivers() -> None:
    trl = next((Path(__file__).resolve().parents[1] / "real" / "trl-grpo-colocated").rglob("*.log"))
    assert not looks_like_ray_driver(trl.read_text(errors="replace"))
    assert not looks_like_ray_driver("step 1 loss 0.3\n(something pid-like) no\n")


def test_both_verl_number_formats_and_the_validation_line() -> None:
    lines = [
        "ray init kwargs: {}",
        f"{T}step:0 - val-core/openai/gsm8k/acc/mean@1:0.2965",
        f"{T}step:1 - global_seqlen/min:42576 - actor/pg_loss:0.042396901015308686",
        f"{T}step:2 - global_seqlen/min:340538.000 - actor/lr:0.000",
        f"{T}\rTraining Progress:  17%|█▋        | 2/12 [00:02<00:11,  1.17s/it]",
    ]
    (attempt,) = parse_driver("driver.log", lines).attempts
    assert [s for _, s in attempt.steps] == [0, 1, 2] and attempt.total == 12
    assert attempt.last_step == 2


def test_a_relaunch_appended_to_the_log_is_a_new_attempt_and_the_old_failure_history() -> None:
    log = parse_driver("driver.log", _lines("verl-resume"))
    assert len(log.attempts) == 2
    first, second = log.attempts
    assert first.last_step == 5 and first.failed
    assert second.resumed_from == 4 and second.finished and second.last_step == 12
    current, history = failures(log)
    assert current is None and len(history) == 1 and not history[0].current


def test_actor_lines_flushed_after_the_drivers_traceback_are_no_new_attempt() -> None:
    """The driver's stdout is a pipe: its actors' last lines reach the file after its own (stderr) traceback."""
    log = parse_driver("driver.log", _lines("verl-actor-sigkill"))
    (attempt,) = log.attempts
    traceback_line = attempt.last_exception[0] if attempt.last_exception else 0
    assert attempt.steps[-1][0] > traceback_line  # step:5 was written after the traceback
    current, _ = failures(log)
    assert current is not None and current.current and current.step == 5


def test_the_ray_error_block_fields() -> None:
    current, _ = failures(parse_driver("driver.log", _lines("openrlhf-actor-sigkill")))
    assert current is not None and current.actor is not None
    a = current.actor
    assert (a.class_name, a.pid, a.node_ip, a.actor_id) == (
        "PolicyModelActor",
        32508,
        "192.0.2.2",
        "6cdcd9751e9e54662ee1255202000000",
    )
    assert a.job_id == "02000000" and a.reason == "WORKER_DIED" and a.exit_type == "SYSTEM_ERROR"
    assert a.detail == "Worker unexpectedly exits with a connection error code 2. End of file."


def test_task_names_of_the_memory_monitors_victims() -> None:
    assert task_actor("W7k59oWorkerDict_0:1:WorkerDict.__init__") == "W7k59oWorkerDict_0:1"
    assert task_actor("TaskRunner.__init__") == "TaskRunner"


@pytest.mark.parametrize("case", CASES)
def test_every_state_dump_parses(case: str) -> None:
    rows = state_rows(json.loads((RAY / case / "state_actors.json").read_text()))
    actors = actors_from_state(rows)
    assert len(actors) == len(rows) > 0
    for a in actors:
        assert a.class_name and a.state in ("ALIVE", "DEAD") and a.job_id
        assert a.state == "ALIVE" or a.reason is not None, a


def test_death_causes_of_every_kind() -> None:
    def by_pid(case: str) -> dict[int | None, tuple[str | None, str | None]]:
        rows = state_rows(json.loads((RAY / case / "state_actors.json").read_text()))
        return {a.pid: (a.reason, a.exit_type) for a in actors_from_state(rows)}

    assert by_pid("verl-oom-killed")[21284] == ("OOM", "NODE_OUT_OF_MEMORY")
    assert by_pid("verl-actor-sigkill")[20101] == ("WORKER_DIED", "SYSTEM_ERROR")
    engine = by_pid("openrlhf-engine-init-fails")[3485]
    assert engine[0] == "CREATION_TASK_FAILED"
    rows = state_rows(json.loads((RAY / "openrlhf-engine-init-fails" / "state_actors.json").read_text()))
    (failed,) = [a for a in actors_from_state(rows) if a.pid == 3485]
    assert failed.detail is not None and failed.detail.startswith("RuntimeError: injected failure in vLLM engine")
    stopped = by_pid("openrlhf-job-stopped")
    assert {r for r, _ in stopped.values()} <= {"OWNER_DIED", "WORKER_DIED"}
    nodes = nodes_from_state(json.loads((RAY / "openrlhf-node-dies" / "state_nodes.json").read_text()))
    assert len(nodes) == 1 and "health check failed" in nodes[0]


def test_an_envelope_or_garbage() -> None:
    assert state_rows({"result": True, "data": {"result": {"result": [{"class_name": "X"}]}}}) == [{"class_name": "X"}]
    assert state_rows({"result": False}) == [] and state_rows("nope") == [] and state_rows([1, "a", {}]) == [{}]
    assert actors_from_state([{"class_name": 3}, {"pid": "12"}, {"class_name": "A", "pid": True}])[0].pid is None


def test_the_raylet_and_gcs_logs() -> None:
    lines = _lines("verl-actor-sigkill", "ray_logs/raylet.out") + _lines(
        "verl-actor-sigkill", "ray_logs/gcs_server.out"
    )
    facts = parse_ray_logs(lines, now=1_800_000_000.0)
    worker = facts.worker_ids[20101]
    assert worker.startswith("f0818a24") and worker in facts.disconnected
    assert facts.exits[worker][1] == "SYSTEM_ERROR"
    oom = parse_ray_logs(_lines("verl-oom-killed", "ray_logs/raylet.out"), now=1_800_000_000.0)
    assert oom.kills and "Killing 2 worker(s)" in oom.kills[-1][1]
    # `ray stop` at the end of a healthy run is no node death.
    healthy = parse_ray_logs(_lines("verl-healthy", "ray_logs/gcs_server.out"), now=1_800_000_000.0)
    assert healthy.dead_nodes == []
    dies = parse_ray_logs(_lines("openrlhf-node-dies", "ray_logs/gcs_server.out"), now=1_800_000_000.0)
    assert dies.dead_nodes and "health check failed" in dies.dead_nodes[0][1]


def test_last_exception_of_a_dead_actors_stderr() -> None:
    err = next((RAY / "openrlhf-engine-init-fails" / "ray_logs").glob("worker-*-3485.err"))
    said = last_exception_line(err.read_text().splitlines())
    assert said is not None and said.startswith("RuntimeError: injected failure in vLLM engine __init__")
    assert last_exception_line([":job_id:01000000", ":actor_name:WorkerDict"]) is None


def test_odd_text_never_raises() -> None:
    odd = ["\x00\x1b[31m(", "ray.exceptions.ActorDiedError:", "\tpid: x", "\tclass_name:", "Job '' failed", "(raylet)"]
    log = parse_driver("x.log", odd * 3)
    failures(log)
    parse_ray_logs(odd, now=0.0)
