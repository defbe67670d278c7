"""Every built-in kind recognises the real lines the frameworks print, wrapped the ways they really are, and does
not fire on near misses or on the ordinary lines around them. Lines are copied from the frameworks' own format
strings and from the public issue threads named beside them (the formats fact sheet cites the rest); prefixes are
built as docker, docker compose, Kubernetes, torch, vLLM and Ray write them."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LogLine
from rlwatch.config.models import CustomEvent, EventsConfig
from rlwatch.logs.events import EventCounter, build_kinds
from rlwatch.logs.kinds import builtin_kinds
from rlwatch.logs.literals import required_literals
from rlwatch.logs.matcher import Matcher
from rlwatch.logs.prefixes import split_prefix
from rlwatch.logs.tailer import Chunk


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


def compose(msg: str) -> str:
    """`docker compose up` / `logs`: the service name padded to the longest one plus one, then "| " (docker/compose
    cmd/formatter/logs.go `%-*s | `), coloured as a whole."""
    return f"\x1b[36msglang-1  | \x1b[0m{msg}"


def compose_stamped(msg: str) -> str:
    """`docker compose logs --timestamps`: the prefix, then the RFC 3339 time with nanoseconds and its offset."""
    return f"trainer  | 2026-11-24T05:09:01.123456789+01:00 {msg}"


def docker(msg: str) -> str:
    """`docker logs --timestamps` and `kubectl logs --timestamps`: RFC3339Nano in UTC, trailing zeros dropped."""
    return f"2026-11-24T05:09:01.12345Z {msg}"


def cri(msg: str) -> str:
    """A CRI log file under /var/log/pods (containerd, CRI-O): time, stream, F for a full line."""
    return f"2026-11-24T05:09:01.123456789Z stderr F {msg}"


def vllm_child(msg: str) -> str:
    """vLLM >= 0.10: a child process's name and pid, then the record prefix with a path."""
    return f"(EngineCore_DP0 pid=456) ERROR 11-24 05:09:01 [v1/engine/core.py:700] {msg}"


def ray(msg: str) -> str:
    """A Ray driver relaying an actor's line (ray/_private/worker.py print_worker_logs), coloured."""
    return f"\x1b[36m(WorkerDict pid=616, ip=192.168.149.159)\x1b[0m {msg}"


def kube_rank(msg: str) -> str:
    """A torchrun rank's traceback line read from its pod's CRI log file."""
    return f"2026-11-24T05:09:01.5Z stdout F [rank3]: {msg}"


TRANSPORT = (compose, compose_stamped, docker, cri, vllm_child, ray, kube_rank)
ALL = (plain, areal, rank, merged, *TRANSPORT)
WHOLE_LINE = (plain, rank, merged, *TRANSPORT)  # formats that only ever start a line (metric dicts)

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
    # aiohttp ClientConnectorError (aiohttp 3.x client_exceptions.py) without asyncio's detail
    (
        "connection_refused",
        "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 10.244.3.17:17331 ssl:default "
        "[Name or service not known]",
        ALL,
    ),
    # httpcore/httpx over anyio (openai >= 1.0 clients), as pasted in a public vLLM-Ascend CI triage
    ("connection_refused", "httpcore.ConnectError: All connection attempts failed", ALL),
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
    # torch ProcessGroupNCCL heartbeat monitor (torch >= 2.2), as pasted with its rank prefix in a public report
    (
        "nccl_timeout",
        "[rank1]:[E1111 17:10:53] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in "
        "monitoring enqueued collectives.",
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
    # vLLM V1 core_client.py (v0.8 to now; [core_client.py:564] in 0.11): vllm-project/vllm#27549, #32468
    (
        "engine_dead",
        "ERROR 10-23 18:21:12 [core_client.py:597] Engine core proc EngineCore_DP0 died unexpectedly, shutting down "
        "client.",
        ALL,
    ),
    (
        "engine_dead",
        "(APIServer pid=215332) ERROR 09-05 01:15:59 [core_client.py:562] Engine core proc EngineCore_0 died "
        "unexpectedly, shutting down client.",
        ALL,
    ),
    # vLLM V1 v1/executor/multiproc_executor.py (v0.8 to now), as pasted in a public vLLM-Ascend report (2025-10)
    (
        "engine_dead",
        "(EngineCore_DP0 pid=137324) ERROR 10-29 08:32:36 [multiproc_executor.py:154] Worker proc VllmWorker-0 died "
        "unexpectedly, shutting down executor.",
        ALL,
    ),
    # vLLM V0 AsyncLLMEngine (vllm/engine/async_llm_engine.py, v0.2 to v0.10): vllm-project/vllm#5060 (0.4.2)
    ("engine_dead", "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.", ALL),
    # vLLM V0 MQLLMEngine client (vllm/engine/multiprocessing/client.py, v0.6 to v0.10): vllm-project/vllm#10102
    ("engine_dead", "ERROR 12-19 16:32:36 client.py:250] RuntimeError('Engine loop has died')", ALL),
    # vLLM V0 entrypoints/launcher.py (v0.4 to v0.10, CRITICAL): vllm-project/vllm#9230
    (
        "engine_dead",
        "CRITICAL 11-04 23:40:27 launcher.py:72] AsyncLLMEngine has failed, terminating server process",
        ALL,
    ),
    # SGLang <Name> hit an exception (managers/*.py, v0.3.1 to now): sgl-project/sglang#9329, #26265
    (
        "engine_dead",
        "[2025-08-15 14:25:48] DetokenizerManager hit an exception: Traceback (most recent call last):",
        ALL,
    ),
    ("engine_dead", "[TP0] Scheduler hit an exception: Traceback (most recent call last):", ALL),
    # SGLang data_parallel_controller.py and tp_worker_overlap_thread.py (their format strings, v0.4 to now)
    (
        "engine_dead",
        "[2025-03-14 02:15:58] DataParallelController hit an exception: Traceback (most recent call last):",
        ALL,
    ),
    (
        "engine_dead",
        "[2025-03-14 02:15:58 TP1] TpModelWorkerClient hit an exception: Traceback (most recent call last):",
        ALL,
    ),
    # SGLang srt/server.py up to v0.4.3 spelt "proces": sgl-project/sglang#3685 (a log of 2025-01-20)
    (
        "engine_dead",
        "[2025-01-20 19:10:07] Received sigquit from a child proces. It usually means the child failed.",
        ALL,
    ),
    # SGLang >= 0.5 managers/tokenizer_manager.py running_phase_sigquit_handler: sgl-project/sglang#12076 (where
    # it came compose-prefixed), #36081 (v0.5.18)
    (
        "engine_dead",
        "[2025-10-29 11:26:03] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        ALL,
    ),
    # SGLang's subprocess watchdog (entrypoints/engine.py, 2026), as pasted in a public report
    (
        "engine_dead",
        "[2026-08-10 09:47:36] Subprocess scheduler_0 (pid=3417555) crashed with exit code -3. Triggering SIGQUIT "
        "for cleanup...",
        ALL,
    ),
    # SGLang v0.1 to v0.3.0 managers/controller/tp_worker.py and controller_single.py: sgl-project/sglang#747
    ("engine_dead", "Exception in ModelTpServer:", ALL),
    ("engine_dead", "Exception in ControllerSingle:", ALL),
    # The vLLM wordings of other versions (tests/real/threads: 005/032 0.9+, 041 0.6, 008 0.8.0, 050 0.5, 029 0.5.x)
    (
        "engine_dead",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ALL,
    ),
    ("engine_dead", "RuntimeError: Engine process failed to start. See stack trace for the root cause.", ALL),
    (
        "engine_dead",
        "CRITICAL 03-15 17:24:18 [multiproc_executor.py:48] MulitprocExecutor got fatal signal from worker processes, "
        "shutting down. See stack trace above for root cause issue.",
        ALL,
    ),
    (
        "engine_dead",
        "ERROR 07-07 15:20:11 async_llm_engine.py:52] Engine iteration timed out. This should never happen!",
        ALL,
    ),
    (
        "engine_dead",
        "ERROR 07-01 13:54:43 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 1159 died, exit code: -6",
        ALL,
    ),
    # server_wait: TRL's vllm_client waiting for `trl vllm-serve` (tests/real/threads/003, huggingface/open-r1#543)
    (
        "server_wait",
        "2025-03-26 05:53:13 - INFO - trl.extras.vllm_client - Server is not up yet. Retrying in 2.0 seconds...",
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
    # Slurm's cgroup plugin and srun (ArjunaCluster/ArjunaUsers#52, brain-score/vision#950, and Slurm 23.02's
    # newer wording in snakemake/snakemake-executor-plugin-slurm#371)
    (
        "oom_kill",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may have "
        "been killed by the cgroup out-of-memory handler.",
        ALL,
    ),
    ("oom_kill", "srun: error: node107: task 0: Out Of Memory", ALL),
    (
        "oom_kill",
        "slurmstepd: error: Detected 2 oom_kill events in StepId=JOBID.13. Some of the step tasks have been OOM Killed.",
        ALL,
    ),
    # fp16 overflows: fairseq's trainer, apex amp (NVIDIA/apex#318), DeepSpeed's loss scaler (deepspeedai/DeepSpeed#5779)
    ("loss_scale_overflow", "NOTE: overflow detected, setting loss scale to: 16384.0", ALL),
    (
        "loss_scale_overflow",
        "Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 8.165126103939127e-202",
        ALL,
    ),
    (
        "loss_scale_overflow",
        "[2024-07-17 19:44:06,945] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
        "Attempted loss scale: 65536, reducing to 32768",
        ALL,
    ),
    # Slurm's slurmstepd ending a job (ZettaAI/zetta_utils#671, marbl/canu#1052)
    (
        "slurm_cancelled",
        "slurmstepd: error: *** JOB 494583 ON ... CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
        ALL,
    ),
    (
        "slurm_cancelled",
        "slurmstepd: error: *** JOB 3884617 ON node023 CANCELLED AT 2018-08-19T16:30:21 DUE TO TIME LIMIT ***",
        ALL,
    ),
    # Slurm's req.c wording for a failed node, and salloc's (nebius/soperator#854)
    (
        "node_failure",
        "slurmstepd: error: *** JOB 1449 ON gpu-07 CANCELLED AT 2025-01-01T00:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD "
        "LOG FOR DETAILS ***",
        ALL,
    ),
    ("node_failure", "salloc: error: Node failure on worker-1", ALL),
    # open-mmlab/mmsegmentation#1356 (PyTorch DataLoader over a 64 MiB /dev/shm)
    (
        "shm_error",
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
        ALL,
    ),
    (
        "shm_error",
        "RuntimeError: DataLoader worker (pid 7579) is killed by signal: Bus error. It is possible that dataloader's "
        "workers are out of shared memory. Please try to raise your shared memory limit.",
        ALL,
    ),
    ("shm_error", "Fatal Python error: Bus error", ALL),  # vllm-project/vllm#1771, rwth-i6/returnn#1648
    # llm-d/llm-d#352 (vLLM's NCCL over a full /dev/shm)
    (
        "shm_error",
        "[2025-10-13 09:06:25] vllm-deepseek-ep-decode-0:3663:4044 [0] misc/shmutils.cc:129 NCCL WARN Error while "
        "creating shared memory segment /dev/shm/nccl-Ewjreo (size 33030528), error: No space left on device (28)",
        ALL,
    ),
    # pytorch/ci-infra#490
    (
        "shm_error",
        "[2026-04-22 21:34:20] mt-l-x86iavx512-45-172-t4-4-csmpw-runner-g4sfw-workflow:202016:202235 [0] "
        "misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-WU88OE to 9637892 bytes, error: No "
        "space left on device (28)",
        ALL,
    ),
    ("shm_error", "[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device", ALL),
    # gpustack/gpustack#5014 (Ray's raylet)
    (
        "shm_error",
        "[2026-03-25 05:44:29,435 W 39 39] (raylet) store_runner.cc:83: System memory request exceeds memory available "
        "in /dev/shm. The request is for 10200547328 bytes, and the amount available is 9663676416 bytes.",
        ALL,
    ),
    # huggingface/accelerate#1192 (a training run on a GPU with failing memory)
    ("gpu_fault", "RuntimeError: CUDA error: uncorrectable ECC error encountered", ALL),
    ("gpu_fault", "NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.", ALL),
    ("gpu_fault", "pynvml.NVMLError_GPUIsLost: GPU is lost", ALL),
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
    # verl's console metric line, full precision (tests/real/ray/verl-healthy/driver.log) and the 3-decimal format of
    # verl before 18c6ffcf0 (verl-project/verl#1208); OpenRLHF's per-step line (tests/real/ray/openrlhf-healthy).
    (
        "step",
        "step:1 - global_seqlen/min:42576 - global_seqlen/max:47185 - actor/entropy:0.5425265634873527 - "
        "actor/ppo_kl:7.841441887050248e-06 - actor/pg_clipfrac_lower:4.3128402484130295e-07",
        WHOLE_LINE,
    ),
    ("step", "step:83 - global_seqlen/min:340538.000 - global_seqlen/max:391862.000 - actor/lr:0.000", WHOLE_LINE),
    (
        "step",
        "INFO 11-26 13:14:26 openrlhf_shaped.py:587] ✨ Global step 1: {'critic_loss': 0.08129668306400994, "
        "'values': 0.053945542515911535, 'policy_loss': -0.010582460867692784}",
        ALL,
    ),
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
    # verl-project/verl#721 (verl's console metrics line, aggregate_logger.py concat_dict_to_str)
    ("_learning", "step:59 - global_seqlen/min:16268.000 - actor/pg_loss:nan - actor/grad_norm:nan -", ALL),
    ("_learning", "│ ppo_actor/update/actor_loss/avg │ 1.2000e-01 │ ppo_actor/update/grad_norm │ 2.3000e+00 │", ALL),
    (
        "_learning",
        "Train epoch [1/1]: 100%|██████████| 8/8 [00:10<00:00,  1.31s/it, act_loss=0.0123, reward=0.5, return=0.5, "
        "gen_len=512, tot_len=1.02e+3, kl=0.00123, act_lr=3e-7, grad_norm=0.123]",
        ALL,
    ),
    # verl's tqdm bar as Ray relays it (tests/real/ray/verl-healthy/driver.log) and its total.
    ("_progress", "Training Progress:  33%|███▎      | 4/12 [00:04<00:09,  1.17s/it]", ALL),
    # progress known by its shape (tests/real/healthy: nanoGPT, Megatron-LM, mmengine, detectron2, Keras, tinygrad)
    ("_steplike", "iter 100: loss 2.4049, time 929.71ms, mfu 16.59%", ALL),
    ("_steplike", " 12%|█▏        | 60/500 [03:12<23:28,  3.20s/it]", ALL),
    ("_steplike", " iteration      201/  250000 | consumed samples:       205824 | lm loss: 2.373574E+00 |", ALL),
    ("_steplike", "Epoch(train) [1][10/90]  lr: 1.000e-02  eta: 0:00:25  time: 0.010  loss: 11.4723", ALL),
    ("_steplike", "eta: 8:05:12  iter: 1259  total_loss: 1.012  loss_cls: 0.714  lr: 0.010000  max_mem: 3961M", ALL),
    ("_steplike", "1079/1079 - 21s - loss: 0.2431 - 21s/epoch - 19ms/step", ALL),
    # a counter that leads its record is read at the start of the message: not behind a logger's own prefix
    (
        "_steplike",
        "   10 4.40 s run, 11.8750 loss, 0.000000000005 LR, 1454.57 GB used, 394520.83 GFLOPS",
        (plain, rank, merged, *TRANSPORT),
    ),
    ("_progress", "Total training steps: 12", WHOLE_LINE),
    ("_finished", "(\"Final validation metrics: {'val-aux/openai/gsm8k/reward/mean@1': 0.5352, \"", WHOLE_LINE),
    ("_finished", "2026-11-26 13:14:41,221\tSUCC cli.py:67 -- Job 'raysubmit_MWpJ1Vfjj7JLXN1d' succeeded", ALL),
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
    # Python's multiprocessing resource tracker, printed at the end of many healthy runs
    ("engine_dead", "resource_tracker: process died unexpectedly, relaunching. Some resources might leak."),
    ("engine_dead", "Exception in thread Thread-3 (_bootstrap):"),
    ("engine_dead", "DatabaseExists() hit an exception: timeout"),
    ("engine_dead", "Subprocess exited with code 0"),
    ("engine_dead", "INFO 06-11 11:46:37 [loggers.py:118] Engine 001: Avg prompt throughput: 1.5 tokens/s"),
    ("nccl_timeout", "export TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=1800  # the watchdog got stuck before"),
    ("connection_refused", "[2026-09-22 01:05:16] Scheduler debug info: cannot connect to the profiler"),
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
    ("shm_error", "docker run --shm-size=32g --ipc=host vllm/vllm-openai"),
    ("shm_error", "    if 'Bus errors' in message:"),
    ("gpu_fault", "ECC Mode: Enabled, 0 uncorrectable errors"),
    ("gpu_fault", "    raise RuntimeError('uncorrectable ECC error encountered')"),
    ("_learning", "global_step:12 saved"),
    ("step", "max_step:12 - this is no metric line"),
    # verl's validation before training: no step was done (tests/real/ray/verl-healthy/driver.log)
    ("step", "step:0 - val-aux/openai/gsm8k/reward/mean@1:0.2965 - val-core/openai/gsm8k/acc/mean@1:0.2965"),
    ("step", "the global step 3 was saved"),
    ("_progress", "Training Progress: resuming"),
    ("_finished", "Job 'raysubmit_x' submitted successfully"),
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
    assert counted("step 7: reward=nan reward_std=nan", cfg) == ["_steplike", "reward_nan"]  # a step line too
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


# Each prefix form as it arrives, with the tag it leaves (the writer, never a time) and the message behind it.
PREFIXES: list[tuple[str, str, str]] = [
    # docker compose v2 (docker/compose cmd/formatter/logs.go), verbatim from sgl-project/sglang#12076
    (
        "sglang-1  | [2025-10-29 11:26:03] SIGQUIT received. signum=None, frame=None. It usually means one child "
        "failed.",
        "sglang-1|",
        "[2025-10-29 11:26:03] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
    ),
    # compose in front of vLLM's child prefix and record prefix: a public vLLM report (qwen3-vl, 2025-11)
    (
        "qwen3-vl-32b  | (EngineCore_DP0 pid=413) ERROR 11-10 12:30:57 [core.py:710] EngineCore encountered a fatal "
        "error.",
        "qwen3-vl-32b|(EngineCore_DP0 pid=413)",
        "EngineCore encountered a fatal error.",
    ),
    # compose's single-service form (name padded by one), frames of a traceback keep their indentation
    (
        'sglang-1 |   File "/usr/lib/python3.12/asyncio/runners.py", line 195, in run',
        "sglang-1|",
        '  File "/usr/lib/python3.12/asyncio/runners.py", line 195, in run',
    ),
    # compose v1 (docker-compose 1.x): `name_1  | `
    ("trainer_1  | Traceback (most recent call last):", "trainer_1|", "Traceback (most recent call last):"),
    # docker compose logs --timestamps: RFC 3339 with nanoseconds and the local offset after the prefix
    (
        "trainer  | 2026-11-24T05:09:01.123456789+01:00 Traceback (most recent call last):",
        "trainer|",
        "Traceback (most recent call last):",
    ),
    # docker logs --timestamps / kubectl logs --timestamps (RFC3339Nano, UTC)
    ("2026-11-24T05:09:01.123456789Z Traceback (most recent call last):", "", "Traceback (most recent call last):"),
    ("2026-11-24T05:09:01Z     self.run()", "", "    self.run()"),
    # CRI log files (kubernetes pkg/kubelet/kuberuntime/logs/logs.go): full and partial records
    (
        "2026-11-24T05:09:01.123456789Z stdout F (APIServer pid=123) INFO 11-24 05:09:01 [api_server.py:1234] "
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
        "(APIServer pid=123)",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
    ),
    ("2026-11-24T05:09:01.1Z stderr P [rank3]: Traceback", "[rank3]:", "Traceback"),
    # a CI viewer's bracketed stamp in front of SGLang's own: sgl-project/sglang#12827
    (
        "[2025-11-06T02:10:00.703Z] [2025-11-06 02:10:00] Received sigquit from a child process. It usually means "
        "the child failed.",
        "",
        "[2025-11-06 02:10:00] Received sigquit from a child process. It usually means the child failed.",
    ),
    # vLLM's newer record prefix with a path, and the older one without brackets
    (
        "(Worker_TP3 pid=255093) ERROR 01-11 09:43:23 [v1/executor/multiproc_executor.py:671] WorkerProc hit an "
        "exception.",
        "(Worker_TP3 pid=255093)",
        "WorkerProc hit an exception.",
    ),
    (
        "ERROR 12-19 16:32:36 client.py:250] Traceback (most recent call last):",
        "",
        "Traceback (most recent call last):",
    ),
    # vLLM 0.10 nested workers, and the 0.8-0.9 forms with a space or a rank: vllm-project/vllm#23517, #21728
    (
        "(EngineCore_0 pid=675221) (VllmWorker TP1 pid=675229) INFO 08-25 11:01:23 [default_loader.py:267] Loading "
        "weights took 1.13 seconds",
        "(EngineCore_0 pid=675221)(VllmWorker TP1 pid=675229)",
        "Loading weights took 1.13 seconds",
    ),
    ("(VllmWorker rank=0 pid=2120280) ", "(VllmWorker rank=0 pid=2120280)", ""),
    # Ray (ray/_private/worker.py print_worker_logs): actor with remote ip, bare pid, raylet
    (
        "(WorkerDict pid=616, ip=192.168.149.159) Traceback (most recent call last):",
        "(WorkerDict pid=616, ip=192.168.149.159)",
        "Traceback (most recent call last):",
    ),
    ("(pid=4242) Engine loop has died", "(pid=4242)", "Engine loop has died"),
    ("(raylet) [2026-01-05 10:00:00] worker died", "(raylet)", "[2026-01-05 10:00:00] worker died"),
    # torch rank prefixes: the Python excepthook and glog
    ("[rank3]: Traceback (most recent call last):", "[rank3]:", "Traceback (most recent call last):"),
    (
        "[rank0]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] x",
        "[rank0]:",
        "[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] x",
    ),
    # AReaL merged.log and kubectl logs --prefix
    # (areal/infra/utils/proc.py: `f"[{role}]".ljust(10)`, so a frame's own indentation survives the padding)
    ('[rollout]   File "/x/rlvr.py", line 9, in arun', "[rollout]", '  File "/x/rlvr.py", line 9, in arun'),
    ("[actor]   RuntimeError: boom", "[actor]", "RuntimeError: boom"),
    ("[controller]RuntimeError: boom", "[controller]", "RuntimeError: boom"),
    ("[rollout] Traceback (most recent call last):", "[rollout]", "Traceback (most recent call last):"),
    ("[pod/sglang-0/server] Received sigquit", "[pod/sglang-0/server]", "Received sigquit"),
    # not prefixes: SGLang's own record start, a plain message with a bar, a number, a message in parentheses
    ("[2025-03-14 02:15:58 TP0] Decode batch", "", "[2025-03-14 02:15:58 TP0] Decode batch"),
    ("  | reward | 0.5 |", "", "  | reward | 0.5 |"),
    ("20251121-09:15:30.652 Recover INFO: x", "", "20251121-09:15:30.652 Recover INFO: x"),
    ("(see above) the run failed", "", "(see above) the run failed"),
    ("ValueError: a | b", "", "ValueError: a | b"),
]


@pytest.mark.parametrize(("line", "tag", "body"), PREFIXES, ids=[f"prefix-{i}" for i in range(len(PREFIXES))])
def test_prefixes_are_split_off(line: str, tag: str, body: str) -> None:
    from rlwatch.common.textsafe import strip_ansi

    assert split_prefix(strip_ansi(line)) == (tag, body)


def test_a_stamped_traceback_reads_as_one_from_compose() -> None:
    """Every line of a traceback from `docker compose logs -t` carries a different time: the tag must not."""
    lines = [
        "sglang-1  | 2026-11-24T05:09:01.100000001Z Traceback (most recent call last):",
        'sglang-1  | 2026-11-24T05:09:01.100000002Z   File "/x/scheduler.py", line 3, in run',
        "sglang-1  | 2026-11-24T05:09:01.100000003Z RuntimeError: boom",
    ]
    split = [split_prefix(line) for line in lines]
    assert {tag for tag, _ in split} == {"sglang-1|"}
    assert [body for _, body in split] == [
        "Traceback (most recent call last):",
        '  File "/x/scheduler.py", line 3, in run',
        "RuntimeError: boom",
    ]


# Ordinary lines each framework prints by the thousand beside the ones that matter: none is any kind.
UNREMARKABLE = [
    # SGLang scheduler_metrics_mixin.py
    "[2025-02-22 00:51:13 TP0] Prefill batch. #new-seq: 1, #new-token: 64, #cached-token: 0, cache hit rate: 0.00%, "
    "token usage: 0.02, #running-req: 0, #queue-req: 1",
    "sglang-1  | [2025-08-04 10:10:08] Load weight end. type=XLMRobertaModel, dtype=torch.float16, avail mem=77.66 GB",
    # vLLM v1/metrics/loggers.py and uvicorn access logs
    "(APIServer pid=1) INFO 06-11 11:46:37 [loggers.py:118] Engine 001: Avg prompt throughput: 1.5 tokens/s, Avg "
    "generation throughput: 10.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%",
    '2026-11-24T05:09:01.123456789Z stdout F INFO:     10.9.147.84:47210 - "GET /metrics HTTP/1.1" 200 OK',
    "(EngineCore_DP0 pid=456) INFO 11-24 05:09:01 [gpu_worker.py:255] Available KV cache memory: 18.83 GiB",
    "INFO:     Waiting for application startup.",
    "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
    # AReaL's noise, torch's harmless warning (the TRL/transformers progress bar is the `_steplike` candidate now)
    "[FSDPEngine Rank 1] INFO: Microbatch #tokens (rank 1): [4096, 4096], padded to: [4096, 4096], padding lengths: "
    "[0, 0]",
    "[rank4]:[W823 09:11:05.020988021 ProcessGroupNCCL.cpp:1624] Warning: WARNING: destroy_process_group() was not "
    "called before program exit, which can leak resources.",
    "(WorkerDict pid=616, ip=192.168.149.159) INFO 07-28 23:02:25 [cuda.py:290] Using Flash Attention backend.",
    "trainer  | 2026-11-24T05:09:01.123456789+01:00 ",
    "",
]


@pytest.mark.parametrize("line", UNREMARKABLE, ids=[f"quiet-{i}" for i in range(len(UNREMARKABLE))])
def test_an_unremarkable_line_is_not_counted(line: str) -> None:
    assert counted(line) == []
