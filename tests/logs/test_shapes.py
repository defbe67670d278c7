"""Failures by their shape: each wording the frameworks print, from their own source (tests/real/threads/WORDINGS.md
gives file and commit), is read as the shape it is; ordinary lines are not."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlwatch.logs.ending import ending_of
from rlwatch.logs.shapes import EXCEPTION, EXIT, KERNEL, SIGNAL, is_progress, shape_of

# (line, kind, what else must be read out of it), each with where the wording comes from.
CASES = [
    # Python's traceback module: the exception line, dotted type, also with the header out of view.
    (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        EXCEPTION,
        {"exc_type": "ray.exceptions.ActorDiedError"},
    ),
    # ray/exceptions.py RayTaskError.as_instanceof_cause: the remote exception's class in parentheses.
    (
        "RayTaskError(ValueError): ray::WorkerDict.actor_rollout_generate_sequences() (pid=1234, ip=10.0.0.2)",
        EXCEPTION,
        {"exc_type": "RayTaskError(ValueError)"},
    ),
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB",
        EXCEPTION,
        {"exc_type": "torch.OutOfMemoryError"},
    ),
    # vllm/v1/engine/exceptions.py ENGINE_DEAD_MESSAGE
    (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
        EXCEPTION,
        {},
    ),
    # vllm/engine/async_llm_engine.py start_background_loop (V0)
    ("vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.", EXCEPTION, {}),
    # torch/distributed/elastic/multiprocessing/errors/__init__.py: the report's signal line and exit code line
    ("  traceback : Signal 9 (SIGKILL) received by PID 14750", SIGNAL, {"signal": "SIGKILL", "pid": 14750, "code": -9}),
    ("  exitcode  : -9 (pid: 14750)", SIGNAL, {"signal": "SIGKILL", "code": -9, "pid": 14750}),
    # pytorch PR #175254 (2026): the signal's name after the exit code
    ("  exitcode  : -11 (pid: 5277) (SIGSEGV)", SIGNAL, {"signal": "SIGSEGV"}),
    # torch/distributed/elastic/multiprocessing/api.py, the agent (glog style since torch 2.2)
    (
        "E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 0 (pid: 1322) of binary: /usr/bin/python",
        SIGNAL,
        {"code": -9, "pid": 1322},
    ),
    (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 1 (pid: 7) of binary: /usr/bin/python3",
        EXIT,
        {"code": 1},
    ),
    # torch/distributed/elastic/agent/server/api.py
    (
        "W0409 07:28:49.530000 1359 torch/distributed/elastic/agent/server/api.py:719] Received 15 death signal, shutting down workers",
        SIGNAL,
        {"signal": "SIGTERM"},
    ),
    # deepspeed/launcher/launch.py sigkill_handler
    (
        "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['python3', 'main.py'] exits with return code = -9",
        SIGNAL,
        {"signal": "SIGKILL"},
    ),
    ("[2024-11-29 07:06:04,233] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 12481", EXIT, {"pid": 12481}),
    # subprocess.CalledProcessError (accelerate launch)
    ("subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1.", EXCEPTION, {}),
    # bash job control, the C library, CPython's faulthandler
    ("bash: line 1:  1234 Killed                  python train.py", SIGNAL, {"signal": "SIGKILL", "pid": 1234}),
    ("Killed", SIGNAL, {"signal": "SIGKILL"}),
    ("Bus error (core dumped)", SIGNAL, {"signal": "SIGBUS"}),
    ("Fatal Python error: Segmentation fault", SIGNAL, {}),
    ("terminate called after throwing an instance of 'c10::DistBackendError'", "error", {"signal": "SIGABRT"}),
    # ray/exceptions.py ActorDiedError's detail, and the raylet's message (worker.py)
    (
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2.",
        EXIT,
        {"detail": "SYSTEM_ERROR"},
    ),
    (
        "A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker.",
        EXIT,
        {},
    ),
    # ray's memory monitor (src/ray/raylet/node_manager.cc)
    (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
        KERNEL,
        {"detail": "ray_memory_monitor"},
    ),
    # the kernel (mm/oom_kill.c) and NVIDIA's driver
    (
        "[441280.839852] Out of memory: Killed process 698405 (python) total-vm:49978204kB, anon-rss:46234012kB",
        KERNEL,
        {"pid": 698405},
    ),
    ("[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.", KERNEL, {"detail": "xid 79"}),
    # SGLang: scheduler.py, tokenizer_manager.py (newer SIGQUIT wording)
    ("Scheduler hit an exception: Traceback (most recent call last):", "error", {}),
    ("SIGQUIT received. signum=None, frame=None. It usually means one child failed.", SIGNAL, {"signal": "SIGQUIT"}),
    ("Received sigquit from a child process. It usually means the child failed.", SIGNAL, {"signal": "SIGQUIT"}),
    # vLLM's logger (vllm/logger.py _FORMAT), glog, torch's C++ logs, Ray's C++ logs, NCCL
    (
        "CRITICAL 03-15 17:24:18 [multiproc_executor.py:48] MulitprocExecutor got fatal signal from worker processes, shutting down.",
        "error",
        {},
    ),
    ("F0314 10:00:00.123456  1234 collective.cc:12] Check failed: ok", "error", {}),
    (
        "[E822 16:31:16.131931664 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout",
        "error",
        {},
    ),
    ("[2022-06-21 19:14:10,710 C 31945 31971] pb_util.h:202:  Check failed: death_cause", "error", {}),
    (
        "host:1112:13532 [0] ibvwrap.c:160 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out",
        "error",
        {},
    ),
]


@pytest.mark.parametrize(("line", "kind", "fields"), CASES, ids=[c[0][:50] for c in CASES])
def test_each_wording_has_its_shape(line: str, kind: str, fields: dict[str, object]) -> None:
    found = shape_of(line)
    assert found is not None and found.kind == kind, found
    for key, value in fields.items():
        assert getattr(found, key) == value, (key, found)


@pytest.mark.parametrize(
    "line",
    [
        "INFO 03-15 17:24:17 [pynccl.py:69] vLLM is using nccl==2.25.1",
        "UserWarning: TypedStorage is deprecated",
        '  File "/srv/train.py", line 9, in <module>',
        "{'loss': 0.0123, 'grad_norm': 1.25, 'learning_rate': 1e-06, 'epoch': 0.5}",
        "step:12 - actor/pg_loss:0.013 - critic/score/mean:0.41",
        "Loading checkpoint shards: 100%|██████████| 4/4 [00:03<00:00,  1.2it/s]",
        "error_rate: 0.01",
        "No errors found",
    ],
)
def test_ordinary_lines_have_no_failure_shape(line: str) -> None:
    assert shape_of(line) is None


@pytest.mark.parametrize(
    "line",
    [
        "Train step 12/100 done.",
        "step:12 - actor/pg_loss:0.013 - critic/score/mean:0.41",
        "{'loss': 0.0123, 'grad_norm': 1.25}",
        " 12%|█▏        | 36/300 [00:41<05:03,  1.15s/it]",
    ],
)
def test_progress_lines(line: str) -> None:
    assert is_progress(line)


def _end(lines: list[str]) -> object:
    return ending_of("/run/train.log", lines, 1, time.time(), None)


def test_a_log_ending_in_a_failure_after_its_last_progress() -> None:
    e = _end(
        [
            "step:3 - actor/pg_loss:0.1",
            "(WorkerDict pid=616, ip=10.0.0.2) \x1b[36mloading\x1b[0m",
            "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
            "\tclass_name: WorkerDict",
            "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: x",
            "",
            "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
        ]
    )
    assert e.failed and e.title.startswith("ray.exceptions.ActorDiedError")  # type: ignore[attr-defined]
    assert e.detail == "SYSTEM_ERROR" and e.lineno == 3 and e.progress_lineno == 1  # type: ignore[attr-defined]


def test_progress_after_a_failure_is_not_an_ending_in_it() -> None:
    e = _end(["RuntimeError: transient", "step:4 - actor/pg_loss:0.1"])
    assert not e.failed  # type: ignore[attr-defined]


def test_life_after_an_error_is_not_an_ending_in_it() -> None:
    """A server logs an error, then goes on serving: the failure did not end the log."""
    lines = ["ERROR 01-01 00:00:00 [api.py:1] request 7 failed"] + [
        f'INFO 01-01 00:00:{i:02d} [api.py:2] 127.0.0.1 - "POST /generate HTTP/1.1" 200 OK' for i in range(80)
    ]
    assert not _end(lines).failed  # type: ignore[attr-defined]


def test_a_traceback_cut_before_its_exception_is_a_failure() -> None:
    e = _end(["Train step 3/10 done.", "Traceback (most recent call last):", '  File "a.py", line 1, in <module>'])
    assert e.failed and "exception line is not in the log" in e.title  # type: ignore[attr-defined]


def test_a_vllm_error_record_spread_over_lines_is_one_failure_named_by_its_first_line() -> None:
    e = _end(
        [
            "(EngineCore_0 pid=1) ERROR 04-17 23:05:06 [core.py:390] EngineCore failed to start.",
            "(EngineCore_0 pid=1) ERROR 04-17 23:05:06 [core.py:390] Traceback (most recent call last):",
            '(EngineCore_0 pid=1) ERROR 04-17 23:05:06 [core.py:390]   File "x.py", line 1, in f',
        ]
    )
    assert e.failed and e.title == "EngineCore failed to start."  # type: ignore[attr-defined]


def test_any_frameworks_step_line_is_progress_but_not_a_failure_or_a_quoted_line() -> None:
    assert is_progress(" iteration      204/  250000 | consumed samples:       208896 | lm loss: 2.425973E+00 |")
    assert is_progress("iter 240: loss 1.6524, time 895.31ms, mfu 16.62%")
    assert is_progress(" 45%|████▌     | 45/100 [00:05<00:06,  8.20it/s]")
    assert not is_progress("RuntimeError: loss is nan at step 52")
    assert not is_progress("    for step in range(1, 1001):")
    assert not is_progress("Retry 3/5: step 12 of the barrier timed out")


REAL_JOB = Path(__file__).resolve().parents[1] / "real" / "job-2node-1gpu-watched"


@pytest.mark.parametrize(
    "line",
    [
        # torch 2.11's ProcessGroupNCCL.cpp, as a hung rank logged them when asked for a dump through its debug pipe
        # (tests/real/job-2node-1gpu-watched/job-stall) and when another rank signalled one (job-mismatch)
        "[E1128 23:34:49.535917686 ProcessGroupNCCL.cpp:1628] [PG ID 0 PG GUID 0(default_pg) Rank 0] ProcessGroupNCCL "
        "preparing to dump debug info. Include stack trace: 1, only active collectives: 0",
        "[E1128 23:35:36.676684619 ProcessGroupNCCL.cpp:1849] [PG ID 0 PG GUID 0(default_pg) Rank 1] Observed flight "
        "recorder dump signal from another rank via TCPStore.",
        "[E1128 23:35:35.170443931 ProcessGroupNCCL.cpp:2636] [PG ID 0 PG GUID 0(default_pg) Rank 0] First PG on this "
        "rank to signal dumping.",
    ],
)
def test_a_flight_recorder_dump_notice_is_no_failure(line: str) -> None:
    assert shape_of(line) is None


def test_a_hung_rank_asked_for_its_dump_has_not_failed() -> None:
    """The stalled job's ranks, asked for their flight records through the debug pipe, each logged one error-level
    notice of the dump: the log did not end in a failure (the run was read as retrying one, and left 'hung')."""
    for node in ("node-a", "node-b"):
        log = REAL_JOB / "job-stall" / node / "torchrun.log"
        e = ending_of(str(log), log.read_text().splitlines(), 1, time.time(), None)
        assert e is not None and not e.failed, e
    log = REAL_JOB / "job-mismatch" / "node-a" / "torchrun.log"  # the timeout that led to a dump stays a failure
    e = ending_of(str(log), log.read_text().splitlines(), 1, time.time(), None)
    assert e is not None and e.failed and "WorkNCCL(SeqNum=13" in e.title
