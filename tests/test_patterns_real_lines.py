"""Every built-in kind recognises the real lines the frameworks print, wrapped the ways they really are, and does
not fire on near misses. Lines are copied from the formats fact sheet (and the issues it cites)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from rlwatch.clock import FakeClock
from rlwatch.config import CustomEvent, EventsConfig
from rlwatch.events import EventCounter, build_kinds
from rlwatch.patterns import Matcher, builtin_kinds, required_literals
from rlwatch.state import LogLine
from rlwatch.tailer import Chunk


def counted(line: str, cfg: EventsConfig | None = None) -> list[str]:
    """Kinds one line is counted as, through the whole counter (bulk prefilter included)."""
    counter = EventCounter(build_kinds(cfg or EventsConfig()), FakeClock())
    seen: list[str] = []

    def recorder(name: str) -> Callable[[LogLine], None]:
        return lambda _line: seen.append(name)

    for kind in counter.kinds:
        counter.subscribe(kind.name, recorder(kind.name))
    counter.feed(Chunk("/run/logs/trainer.log", line.encode() + b"\n", 1, 1))
    return seen


def plain(msg: str) -> str:
    return msg


def areal(msg: str) -> str:
    """AReaL >= v0.5.2: colorlog escapes around a hard-coded coloured tag, written to the file as they are."""
    return f"\x1b[92m\x1b[1;38;2;180;140;80m(AReaL)\x1b[0m \x1b[92m20251121-09:15:30.652 StatsLogger INFO: {msg}\x1b[0m"


def rank(msg: str) -> str:
    return f"[rank0]: {msg}"


def merged(msg: str) -> str:
    return "[rollout]".ljust(10) + msg


ALL = (plain, areal, rank, merged)
WHOLE_LINE = (plain, rank, merged)  # formats that only ever start a line (metric dicts)

REAL: list[tuple[str, str, tuple[Callable[[str], str], ...]]] = [
    # connection_refused
    (
        "connection_refused",
        "[RemoteInfEngine Rank 0] WARNING: HTTP request to 10.244.3.17:17331/generate failed with "
        "ClientConnectorError: Cannot connect to host 10.244.3.17:17331 ssl:default "
        "[Connect call failed ('10.244.3.17', 17331)] (attempt 1/3)",
        ALL,
    ),
    (
        "connection_refused",
        "ConnectionRefusedError(111, \"Connect call failed ('10.244.3.17', 17331)\")",
        ALL,
    ),
    (
        "connection_refused",
        "requests.exceptions.ConnectionError: HTTPConnectionPool(host='0.0.0.0', port=8000): Max retries exceeded "
        "with url: /health/ (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f3>: "
        "Failed to establish a new connection: [Errno 111] Connection refused'))",
        ALL,
    ),
    (
        "connection_refused",
        "requests.exceptions.ConnectionError: The vLLM server can't be reached at http://0.0.0.0:8000 after 240.0 "
        "seconds. Make sure the server is running by running `trl vllm-serve`.",
        ALL,
    ),
    # traceback
    ("traceback", "Traceback (most recent call last):", ALL),
    ("traceback", "[2025-03-14 02:15:58 TP0] Scheduler hit an exception: Traceback (most recent call last):", ALL),
    # cuda_oom
    (
        "cuda_oom",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.15 GiB. GPU 0 has a total capacity of 39.56 "
        "GiB of which 6.80 GiB is free. Including non-PyTorch memory, this process has 36.61 GiB memory in use. Of "
        "the allocated memory 31.66 GiB is allocated by PyTorch, and 4.11 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        ALL,
    ),
    (
        "cuda_oom",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total "
        "capacity; 77.19 GiB already allocated; 1.25 MiB free; 78.01 GiB reserved in total by PyTorch)",
        ALL,
    ),
    ("cuda_oom", "RuntimeError: CUDA error: out of memory", ALL),
    # cuda_busy
    ("cuda_busy", "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", ALL),
    ("cuda_busy", "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable", ALL),
    # nccl_timeout
    (
        "nccl_timeout",
        "[rank0]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran "
        "for 600030 milliseconds before timing out.",
        ALL,
    ),
    # nccl_error
    (
        "nccl_error",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
        ALL,
    ),
    ("nccl_error", "ncclUnhandledCudaError: Call to CUDA function failed.", ALL),
    ("nccl_error", "RuntimeError: NCCL error: remote process exited or there was a network error", ALL),
    # timeout
    (
        "timeout",
        "[RemoteInfEngine Rank 0] WARNING: HTTP request to 10.244.3.17:17331/generate timed out after 3600.00s "
        "(attempt 1/3)",
        ALL,
    ),
    (
        "timeout",
        "TimeoutError: Timeout waiting for rollout servers to be ready. Expected 1 servers, found 0.",
        ALL,
    ),
    (
        "timeout",
        "TimeoutError: Timeout waiting for key 'root/gsm8k-grpo/trial0/update_weights_from_disk/13' "
        "(NfsNameRecordRepository)",
        ALL,
    ),
    ("timeout", "TimeoutError: server launch failed", ALL),
    # child_failed
    ("child_failed", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", ALL),
    # engine_dead
    (
        "engine_dead",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
        "root cause.",
        ALL,
    ),
    (
        "engine_dead",
        "(EngineCore_0 pid=4242) ERROR 05-06 20:59:57 [core.py:588] EngineCore encountered a fatal error.",
        ALL,
    ),
    ("engine_dead", "ERROR 05-06 20:59:57 [core.py:691] EngineCore failed to start.", ALL),
    ("engine_dead", "[2025-03-14 02:15:58 TP0] Scheduler hit an exception: Traceback (most recent call last):", ALL),
    (
        "engine_dead",
        "[2025-03-14 02:15:59] Received sigquit from a child process. It usually means the child failed.",
        ALL,
    ),
    # emergency_brake (the workers' own wording: no framework prints one)
    ("emergency_brake", "WARNING emergency brake: only 1.8 GB free, not starting trial 952", ALL),
    ("emergency_brake", "EMERGENCY_BRAKE engaged (free 1.2 GiB < 2.0 GiB)", ALL),
    ("emergency_brake", "worker-1: Emergency-brake fired", ALL),
    ("emergency_brake", "EmergencyBrake: refusing new trial", ALL),
    # oom_kill
    (
        "oom_kill",
        "[1234567.890123] Out of memory: Killed process 4242 (python3) total-vm:48123456kB, anon-rss:30123456kB, "
        "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:61234kB oom_score_adj:0",
        ALL,
    ),
    ("oom_kill", "Memory cgroup out of memory: Killed process 4242 (python3)", ALL),
    # weight_update
    (
        "weight_update",
        "[RemoteInfEngine Rank 0] INFO: Loading weights from disk done in 10.48s. Respond time: 2.19s.",
        ALL,
    ),
    ("weight_update", "[2025-03-14 02:15:58] Update weights end.", ALL),
    ("weight_update", 'INFO:     127.0.0.1:49876 - "POST /reset_prefix_cache/ HTTP/1.1" 200 OK', ALL),
    # checkpoint_saved
    (
        "checkpoint_saved",
        "Recover INFO: Saved recover checkpoint to "
        "/tmp/areal/experiments/checkpoints/root/gsm8k-grpo/trial0/default/recover_checkpoint (with_optim=True)",
        ALL,
    ),
    ("checkpoint_saved", "Saving model checkpoint to out/checkpoint-25", ALL),
    # step
    ("step", "StatsLogger INFO: Epoch 1/5 Step 935/935 Train step 935/4675 done.", ALL),
    (
        "step",
        "{'loss': 0.0, 'grad_norm': 0.0864, 'learning_rate': 6.9e-06, 'num_tokens': 280752.0, "
        "'completions/mean_length': 163.0, 'rewards/accuracy_reward/mean': 0.375, 'reward': 0.375, "
        "'reward_std': 0.51, 'frac_reward_zero_std': 0.0, 'clip_ratio/low_mean': 0.0, 'epoch': 0.02}",
        WHOLE_LINE,
    ),
    ("step", "{'loss': '0.0123', 'grad_norm': '0.08', 'reward': '0.375', 'epoch': '0.02'}", WHOLE_LINE),
    ("step", "{'reward': 0.5, 'reward_std': 0.1, 'epoch': 0.1}", WHOLE_LINE),
    # server_ready
    ("server_ready", "[2025-03-14 02:15:58] The server is fired up and ready to roll!", ALL),
    ("server_ready", "[RemoteInfEngine Rank 0] INFO: Servers are all ready!", ALL),
    ("server_ready", "SGLangWrapper INFO: SGLang server launched at: http://10.244.3.17:17331", ALL),
    ("server_ready", "INFO 05-06 20:59:57 [api_server.py:1024] Starting vLLM API server 0 on http://0.0.0.0:8000", ALL),
    ("server_ready", "Starting vLLM server on http://0.0.0.0:8000", ALL),
    ("server_ready", "INFO:     Application startup complete.", ALL),
    # restart
    (
        "restart",
        "Recover INFO: Recovering from StepInfo(epoch=0, epoch_step=5, global_step=5, steps_per_epoch=935).",
        ALL,
    ),
    (
        "restart",
        "LocalLauncher: experiment_name=gsm8k-grpo, trial_name=trial0, fileroot=/tmp/areal/experiments, run_id=1, "
        "is_recover_run=True",
        ALL,
    ),
    ("restart", "  Continuing training from checkpoint, will skip to saved global_step", ALL),
    # internal kinds
    ("_reward", "│ ppo_actor/task_reward/avg          │ 4.5000e-01  │ ppo_actor/task_reward/max │ 1.0000e+00 │", ALL),
    ("_reward", "│ rollout/reward                     │ 4.5000e-01  │ timeperf/rollout          │ 1.2000e+01 │", ALL),
    ("_banner", "rlwatch-sim start pid=4242 scenario=restart-loop", ALL),
    ("_banner", "***** Running training *****", ALL),
    (
        "_banner",
        "LocalLauncher: experiment_name=gsm8k-grpo, trial_name=trial0, fileroot=/tmp/areal/experiments, run_id=0, "
        "is_recover_run=False",
        ALL,
    ),
    ("_server_exit", "SGLangWrapper INFO: SGLang server http://10.244.3.17:17331 exits, returncode=-9", ALL),
    ("_finished", "RLTrainer INFO: Training completes! Total time elapsed 3601.52.", ALL),
    (
        "_finished",
        "{'train_runtime': 812.3, 'train_samples_per_second': 1.97, 'train_steps_per_second': 0.123, 'train_loss': 0.0123, 'epoch': 1.0}",
        ALL,
    ),
]

CASES = [
    pytest.param(kind, wrap(line), id=f"{kind}-{i}-{wrap.__name__}")
    for i, (kind, line, wraps) in enumerate(REAL)
    for wrap in wraps
]


@pytest.mark.parametrize(("kind", "line"), CASES)
def test_real_line_is_counted_once(kind: str, line: str) -> None:
    seen = counted(line)
    assert seen.count(kind) == 1, seen


def test_every_builtin_kind_has_real_lines() -> None:
    assert {k.name for k in builtin_kinds()} == {kind for kind, _, _ in REAL}


NEAR_MISSES: list[tuple[str, str]] = [
    # Prose and quoted source code name an error without being one.
    ("connection_refused", "retry when the connection refused us earlier (see docs)"),
    ("connection_refused", "    except ConnectionRefusedError:"),
    ("connection_refused", "    if isinstance(exc, ConnectionRefusedError):"),
    ("traceback", "see the traceback above for details"),
    ("traceback", "Traceback (most recent call last) is printed by Python"),
    ("cuda_oom", "Out of memory: Killed process 4242 (python3)"),
    ("cuda_oom", "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    ("cuda_oom", '    raise RuntimeError("CUDA out of memory")'),
    ("cuda_busy", "server busy, retrying in 2s"),
    ("cuda_busy", "the inference server is busy or unavailable"),
    ("nccl_timeout", "NCCL_TIMEOUT=1800"),
    ("nccl_error", "NCCL version 2.18.1+cuda12.1"),
    ("nccl_error", "[FSDPEngine Rank 0] INFO: Initialized NCCL group for distributed weight update"),
    ("nccl_error", "export NCCL_DEBUG=INFO"),
    ("timeout", "rollout.request_timeout: 3600"),
    ("timeout", "    except TimeoutError:"),
    ("timeout", "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, Timeout(ms)=600000)"),
    ("child_failed", "    raise ChildFailedError("),
    ("engine_dead", "(EngineCore_0 pid=4242) INFO 05-06 20:59:57 [core.py:58] Initializing a V1 LLM engine"),
    ("emergency_brake", "brake released"),
    ("emergency_brake", "emergency contact: none"),
    ("emergency_brake", "    if emergency_brake_enabled:"),
    ("oom_kill", "Killed"),
    ("oom_kill", "W1121 09:22:41.944000 40112 api.py:908] Sending process 4243 closing signal SIGTERM"),
    ("weight_update", "Update engine weights online from disk begin. avail mem=10.2 GB"),
    ("weight_update", 'INFO:     127.0.0.1:49876 - "POST /update_named_param/ HTTP/1.1" 200 OK'),
    ("weight_update", 'INFO:     127.0.0.1:49876 - "POST /reset_prefix_cache/ HTTP/1.1" 500 Internal Server Error'),
    ("checkpoint_saved", "│ timeperf/checkpoint_for_recover │ 1.2000e+00 │"),
    ("step", "StatsLogger INFO: Epoch 1/5 Step 5/935 Train step 5/4675"),
    (
        "step",
        "{'train_runtime': 1234.5, 'train_samples_per_second': 1.2, 'train_steps_per_second': 0.1, "
        "'train_loss': 0.01, 'epoch': 1.0}",
    ),
    ("step", "{'eval_loss': 0.3, 'eval_reward_std': 0.1, 'epoch': 1.0}"),
    ("step", "RuntimeError: Failed after 3 retries each. Payload: {'loss': 1, 'reward': 2}. Addr: x"),
    ("server_ready", "[RemoteInfEngine Rank 0] INFO: Waiting for server ready..."),
    ("server_ready", "INFO:     Waiting for application startup."),
    ("restart", "Recover INFO: Loading recover info from /tmp/areal/x/recover_info"),
    ("restart", "LocalLauncher: experiment_name=x, trial_name=y, fileroot=/z, run_id=0, is_recover_run=False"),
    ("restart", "  Continuing training from global step 25"),
    ("restart", "Recover info not found at: /tmp/areal/x/recover_info"),
    ("_reward", "│ ppo_actor/task_reward/max │ 1.0000e+00 │ ppo_actor/final_reward/avg │ 2.0000e-01 │"),
    ("_banner", "rlwatch-sim stopped"),
    ("_server_exit", "process exits normally"),
    ("_finished", "Training completes when the budget runs out"),
]


@pytest.mark.parametrize(("kind", "line"), NEAR_MISSES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(NEAR_MISSES)])
def test_near_miss_is_not_counted(kind: str, line: str) -> None:
    assert kind not in counted(line)


def test_a_line_counts_once_per_kind_however_often_it_says_so() -> None:
    line = (
        "RuntimeError: Failed after 3 retries each. Addr: 10.244.3.17:17331. Last error: ClientConnectorError("
        "ConnectionKey(host='10.244.3.17', port=17331), ConnectionRefusedError(111, \"Connect call failed "
        "('10.244.3.17', 17331)\")) Connection refused"
    )
    assert counted(line).count("connection_refused") == 1


def test_ansi_inside_the_message_is_stripped_before_matching() -> None:
    assert counted("\x1b[31mTimeoutError\x1b[0m: \x1b[1mTimeout waiting for key\x1b[0m") == ["timeout"]


def test_brake_pattern_is_configurable() -> None:
    cfg = EventsConfig(brake_pattern=r"memory guard tripped")
    assert counted("Memory Guard TRIPPED: free 1.0 GiB", cfg) == ["emergency_brake"]
    assert "emergency_brake" not in counted("emergency brake engaged", cfg)


def test_custom_kinds() -> None:
    cfg = EventsConfig(
        custom=[
            CustomEvent(name="reward_nan", pattern=r"reward(?:_std)?=nan", severity="critical"),
            CustomEvent(name="trial_done", pattern=r"trial \d+ finished", ignore_case=True, progress=True),
            CustomEvent(name="anything_digit", pattern=r"\d{3}"),  # no literal: tried on every line
        ]
    )
    assert counted("step 7: reward=nan reward_std=nan", cfg) == ["reward_nan"]
    assert counted("TRIAL 12 FINISHED in 3s", cfg) == ["trial_done"]
    assert counted("code 123", cfg) == ["anything_digit"]
    kinds = {k.name: k for k in build_kinds(cfg)}
    assert kinds["reward_nan"].literals == ("reward",)
    assert kinds["trial_done"].progress and kinds["trial_done"].ignore_case
    assert kinds["anything_digit"].literals == ()


@pytest.mark.parametrize(
    ("pattern", "flags", "expected"),
    [
        (r"emergency[ _-]?brake", re.IGNORECASE, (("emergency",), True)),
        (r"(?:foo|barbaz)qux+", 0, (("foo", "barbaz"), False)),
        (r"(?i)worker \d+ died", 0, (("worker ",), True)),
        (r"a|\d+", 0, ((), False)),
        (r"x(abc|def)+y", 0, (("abc", "def"), False)),
        (r"[", 0, ((), False)),
    ],
)
def test_required_literals(pattern: str, flags: int, expected: tuple[tuple[str, ...], bool]) -> None:
    assert required_literals(pattern, flags) == expected


def test_every_builtin_literal_is_implied_by_its_expression() -> None:
    """A literal that a matching line might lack would make the bulk scan miss that line."""
    matcher = Matcher(builtin_kinds())
    for kind, line, _ in REAL:
        k = next(x for x in matcher.kinds if x.name == kind)
        body = line.lower() if k.ignore_case else line
        assert any((lit.lower() if k.ignore_case else lit) in body for lit in k.literals), (kind, line)


def test_subscribers_get_clean_text() -> None:
    counter = EventCounter(build_kinds(EventsConfig()), FakeClock())
    got: list[LogLine] = []
    counter.subscribe("step", got.append)
    line = "\x1b[92m20251121-09:15:30.652 StatsLogger INFO: Epoch 1/1 Step 1/2 Train step 1/2 done.\x1b]0;pwn\x07"
    counter.feed(Chunk("/l/t.log", line.encode() + b"\n", 7, 1))
    assert [(g.lineno, g.text) for g in got] == [
        (7, "20251121-09:15:30.652 StatsLogger INFO: Epoch 1/1 Step 1/2 Train step 1/2 done.")
    ]
