"""Event kinds: the things worth counting in logs, built in and configured.

Every kind is a regular expression over one log line plus *literals*: fixed strings of which at least one occurs in
every line the expression can match (the matcher looks for the literals first, see ``rlwatch.logs.matcher``; a
user's expression has them worked out by ``rlwatch.logs.literals``). A foreign program's message (the kernel's,
Slurm's) is written once, in ``rlwatch.logs.foreign``, and its kind built from there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlwatch.common.patterns import Pattern, compile_pattern
from rlwatch.common.state import Severity
from rlwatch.config.models import EventsConfig
from rlwatch.logs import wording
from rlwatch.logs.foreign import kernel, slurm
from rlwatch.logs.literals import required_literals
from rlwatch.logs.progress_shape import CANDIDATE, CANDIDATE_LITERALS

__all__ = ["CODE_LINE", "PROGRESS_KINDS", "REDRAWN_KINDS", "EventKind", "build_kinds", "builtin_kinds"]


@dataclass(frozen=True, slots=True)
class EventKind:
    """One thing worth counting in logs.

    ``literals``: at least one of them occurs in every line ``regex`` matches (empty: no prefilter, every line is
    tried, which is slow). ``progress``: a sign the run moves on, which ends the streaks of failure kinds in the
    same file. ``internal`` kinds (names starting with ``_``) feed subscribers but are never reported.
    ``exclude``: lines that match ``regex`` but are not an occurrence, such as the source lines a traceback quotes.
    """

    name: str
    severity: Severity
    regex: Pattern  # re's; or RE2's for an untrusted file's expression (rlwatch.common.patterns), linear in the line
    literals: tuple[str, ...]
    progress: bool = False
    internal: bool = False
    ignore_case: bool = False
    exclude: re.Pattern[str] | None = None


# A traceback quotes the source line of each frame (`    raise ChildFailedError(`, `    except TimeoutError:`).
# Such a line names the error without being one; without this, every chained traceback would count its own code.
CODE_LINE = re.compile(r"^\s*(?:#|(?:" + "|".join(map(re.escape, wording.CODE_KEYWORDS)) + r")\b)")


def _kind(
    name: str,
    severity: Severity,
    regex: str,
    literals: tuple[str, ...],
    *,
    progress: bool = False,
    internal: bool = False,
    code_lines_excluded: bool = False,
) -> EventKind:
    return EventKind(
        name=name,
        severity=severity,
        regex=re.compile(regex),
        literals=literals,
        progress=progress,
        internal=internal,
        exclude=CODE_LINE if code_lines_excluded else None,
    )


_C, _W, _I = Severity.CRITICAL, Severity.WARNING, Severity.INFO

# The strings are those the frameworks print (see the formats fact sheet). Literals are chosen to be shared where
# one covers several forms ("Error" for every `...Error`), because each literal costs the bulk scan time.
_BUILTIN: tuple[EventKind, ...] = (
    _kind(
        "connection_refused",
        _W,
        # `Connection refused`: errno 111 as urllib3/requests, aiohttp and httpx print it; `Connect call failed`:
        # asyncio's ConnectionRefusedError (AReaL's aiohttp client, areal/utils/http.py, v0.4+);
        # `Cannot connect to host H:P ssl:default [...]`: aiohttp ClientConnectorError (aiohttp 3.x
        # client_exceptions.py, what AReaL and SGLang's router print whatever the cause); `All connection attempts
        # failed`: httpx/httpcore ConnectError over anyio (openai >= 1.0 clients, vLLM/SGLang benchmark clients);
        # `server can't be reached at`: TRL's VLLMClient.check_server_health (trl/generation/vllm_client.py,
        # trl/extras/vllm_client.py before, TRL >= 0.16).
        r"Connection refused|ConnectionRefusedError|Connect call failed|server can't be reached at"
        r"|Cannot connect to host|All connection attempts failed",
        ("Connect", "can't be reached at", "Cannot connect to host", "All connection attempts failed"),
        code_lines_excluded=True,
    ),
    _kind("traceback", _W, r"Traceback \(most recent call last\):\s*$", ("Traceback (most recent call last)",)),
    _kind("cuda_oom", _C, r"CUDA out of memory|CUDA error: out of memory", ("CUDA",), code_lines_excluded=True),
    _kind("cuda_busy", _C, r"CUDA[^\n]{0,200}?busy or unavailable", ("CUDA",), code_lines_excluded=True),
    _kind(
        "nccl_timeout",
        _C,
        # torch ProcessGroupNCCL.cpp: the collective timeout (torch >= 1.x, behind `[PG ID 0 PG GUID 0(default_pg)
        # Rank 0] ` since 2.3), and the heartbeat monitor's "watchdog got stuck for 480 seconds" (torch >= 2.2),
        # which aborts a process whose collectives hang without timing out.
        r"Watchdog caught collective operation timeout|ProcessGroupNCCL's watchdog got stuck for \d+ seconds",
        ("Watchdog caught", "watchdog got stuck for"),
    ),
    _kind(
        "nccl_error",
        _C,
        r"\bNCCL error\b|\bnccl(?:UnhandledCuda|System|Internal|InvalidArgument|InvalidUsage|Remote)Error\b",
        ("NCCL error", "Error"),
        code_lines_excluded=True,
    ),
    _kind(
        "timeout",
        _W,
        r"Timeout waiting for|[Tt]imed out after|TimeoutError|Read timed out",
        ("Timeout", "imed out"),
        code_lines_excluded=True,
    ),
    _kind("child_failed", _C, r"ChildFailedError", ("ChildFailedError",), code_lines_excluded=True),
    _kind(
        "server_wait",
        _W,
        # TRL's client waiting for `trl vllm-serve` (trl/extras/vllm_client.py from v0.16, trl/generation/ from
        # v0.28): `Server is not up yet. Retrying in 2.0 seconds...` every retry, then `ConnectionError: The vLLM
        # server can't be reached at 0.0.0.0:8000 after 240 seconds. …`; its async GRPO client
        # (trl/experimental/async_grpo/vllm_client.py): `Still waiting for vLLM server... (120s)`.
        r"Server is not up yet\. Retrying in|The vLLM server can't be reached at|Still waiting for vLLM server",
        ("Server is not up yet", "server can't be reached at", "Still waiting for vLLM server"),
        code_lines_excluded=True,
    ),
    _kind(
        "engine_dead",
        _C,
        # vLLM V1 (vllm/v1/engine/core.py, core_client.py, exceptions.py, v1/executor/multiproc_executor.py;
        # v0.8 to now): `EngineCore failed to start.`, `EngineCore encountered a fatal error.`,
        # `vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. …`,
        # `Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.` (also printed when an offline
        # `LLM` is torn down at interpreter exit, vllm-project/vllm#32468), `Worker proc VllmWorker-0 died
        # unexpectedly, shutting down executor.`.
        # vLLM V0 (vllm/engine/async_llm_engine.py, multiprocessing/client.py, entrypoints/launcher.py;
        # v0.2 to v0.10): `AsyncEngineDeadError: Background loop has errored already.`,
        # `RuntimeError('Engine loop has died')` (v0.6 to v0.10), `AsyncLLMEngine has failed, terminating server
        # process` (CRITICAL, launcher.py, v0.4 to v0.10).
        r"EngineDeadError|EngineCore encountered a fatal error|EngineCore failed to start"
        r"|Engine core proc \S+ died unexpectedly|Worker proc \S+ died unexpectedly"
        r"|Engine loop has died|AsyncLLMEngine has failed, terminating server process"
        # vLLM, more wordings of its versions (tests/real/threads/WORDINGS.md): V1's front end giving up on its core,
        # `RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {…}`
        # (v1/engine/utils.py, 0.9+; core_client.py in 0.8); V0's multiprocessing front end `Engine process failed
        # to start` (entrypoints/openai/api_server.py, 0.6); the worker-to-executor fatal signal of 0.7 and 0.8,
        # `MulitprocExecutor got fatal signal from worker processes` (vLLM's own typo) and the client's `Got fatal
        # signal from worker processes`; V0's `Engine iteration timed out. This should never happen!` (0.4.3 to
        # 0.5); V0's `Worker VllmWorkerProcess pid 1159 died, exit code: -6` (executor/multiproc_worker_utils.py);
        # V1's `WorkerProc hit an exception` / `WorkerProc failed to start.` (v1/executor/multiproc_executor.py).
        r"|Engine core initialization failed|Engine process failed to start"
        r"|[Gg]ot fatal signal from worker processes|Engine iteration timed out"
        r"|Worker \w+ pid \d+ died, exit code|WorkerProc (?:hit an exception|failed to start)"
        # SGLang: every subprocess logs `<Name> hit an exception: <traceback>` and sends SIGQUIT to its parent
        # (managers/scheduler.py `Scheduler`, detokenizer_manager.py `DetokenizerManager`,
        # data_parallel_controller.py `DataParallelController`, tp_worker_overlap_thread.py
        # `TpModelWorkerClient`, multi_tokenizer_mixin.py `MultiDetokenizerRouter`, scheduler subclasses such as
        # `PipelinedDecoupledSMCScheduler`; v0.3.1 to now). The parent logs `Received sigquit from a child
        # process. It usually means the child failed.` (srt/server.py then entrypoints/engine.py; spelt
        # `child proces.` up to v0.4.3, sgl-project/sglang#3685), since v0.5 the TokenizerManager's
        # running-phase handler `SIGQUIT received. signum=None, frame=None. It usually means one child failed.`
        # (managers/tokenizer_manager.py, sgl-project/sglang#12076), and the subprocess watchdog
        # `Subprocess scheduler_0 (pid=N) crashed with exit code -3. Triggering SIGQUIT for cleanup...`.
        # SGLang v0.1 to v0.3.0: `Exception in ModelTpServer:` (managers/controller/tp_worker.py) and
        # `Exception in ControllerSingle:` / `Exception in ControllerMulti:` (managers/controller_*.py).
        r"|\b\w*(?:Scheduler|Manager|Controller|WorkerClient|Router) hit an exception"
        r"|Received sigquit from a child proces|SIGQUIT received\.[^\n]*It usually means one child failed"
        r"|Subprocess \S+ \(pid=\d+\) crashed with exit code"
        r"|Exception in (?:ModelTpServer|ControllerSingle|ControllerMulti)\b",
        (
            "EngineDeadError",
            "EngineCore",
            "Engine core proc ",
            "Worker proc ",
            "Engine loop has died",
            "AsyncLLMEngine has failed",
            "Engine core initialization failed",
            "Engine process failed to start",
            "ot fatal signal from worker processes",
            "Engine iteration timed out",
            " died, exit code",
            "WorkerProc ",
            "hit an exception",
            "Received sigquit",
            "It usually means one child failed",
            "Subprocess ",
            "Exception in ModelTpServer",
            "Exception in Controller",
        ),
        code_lines_excluded=True,
    ),
    # emergency_brake comes from the configuration: see build_kinds.
    # The kernel's OOM killer (`Killed process 1234 (python)`), and as Slurm reports it; Slurm ending a job or step
    # (the node's failure is a kind of its own). The wordings and where each comes from: rlwatch/logs/foreign/.
    _kind(
        "oom_kill",
        _C,
        f"{kernel.OOM_KILL_WORDS}|{slurm.OOM_WORDS}",
        kernel.OOM_KILL_LITERALS + slurm.OOM_LITERALS,
    ),
    _kind("slurm_cancelled", _C, slurm.CANCELLED_WORDS, slurm.CANCELLED_LITERALS),
    _kind("node_failure", _C, slurm.NODE_FAILURE_WORDS, slurm.NODE_FAILURE_LITERALS),
    _kind(
        "shm_error",
        _C,
        # A full /dev/shm, as each framework says it. PyTorch DataLoader (torch/csrc/DataLoader.cpp, and
        # torch/utils/data/_utils/signal_handling.py): "ERROR: Unexpected bus error encountered in worker. This might
        # be caused by insufficient shared memory (shm).", "DataLoader worker (pid 7579) is killed by signal: Bus
        # error. It is possible that dataloader's workers are out of shared memory." (open-mmlab/mmsegmentation#1356);
        # torch.multiprocessing: "unable to write to file </torch_…>: No space left on device"; faulthandler "Fatal
        # Python error: Bus error" (vllm-project/vllm#1771, rwth-i6/returnn#1648) and the shell's "Bus error (core
        # dumped)". NCCL (src/misc/shmutils.cc, later src/os/linux.cc): "Error while creating shared memory segment
        # /dev/shm/nccl-… (size …)", "Error: failed to extend /dev/shm/nccl-… to … bytes", "failed to create shared
        # memory file", "Could not map /dev/shm/…"; NCCL 2.9: "Call to posix_fallocate failed : No space left on
        # device" (NVIDIA/nccl#525). Ray's raylet: "System memory request exceeds memory available in /dev/shm"
        # (gpustack/gpustack#5014).
        r"insufficient shared memory|out of shared memory|\bBus error\b|unable to write to file </torch_"
        r"|Error while (?:creating|attaching to) shared memory segment|failed to extend /dev/shm/"
        r"|failed to create shared memory file|Could not map /dev/shm|posix_fallocate failed"
        r"|memory request exceeds memory available in /dev/shm",
        ("shared memory", "Bus error", "/dev/shm", "unable to write to file", "posix_fallocate"),
        code_lines_excluded=True,
    ),
    _kind(
        "gpu_fault",
        _C,
        # The GPU's hardware failing, as the CUDA runtime and NVML tell a program: cudaErrorECCUncorrectable
        # "uncorrectable ECC error encountered" (torch: "CUDA error: uncorrectable ECC error encountered",
        # huggingface/accelerate#1192), cudaErrorNvlinkUncorrectable "uncorrectable NVLink error detected during the
        # execution", NVML_ERROR_GPU_IS_LOST "GPU is lost", and the driver's "GPU has fallen off the bus".
        r"uncorrectable ECC error encountered|uncorrectable NVLink error|\bGPU is lost\b|GPU has fallen off the bus",
        ("uncorrectable", "GPU is lost", "fallen off the bus"),
        code_lines_excluded=True,
    ),
    # fp16 dynamic loss scaling skipping a step on an overflow, each framework in its own words: fairseq
    # (fairseq/trainer.py) `NOTE: overflow detected, setting loss scale to: 16384.0`, Megatron-LM's `WARNING:
    # Overflow detected, setting loss scale to 32768.0`, apex amp (apex/amp/handle.py) `Gradient overflow.  Skipping
    # step, loss scaler 0 reducing loss scale to 32768.0`, DeepSpeed (runtime/fp16/loss_scaler.py, the ZeRO and fused
    # optimizers) `[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768` and
    # `[deepspeed] fp16 dynamic loss scale overflow! Rank 0 Skipping step. …`; and the end of the road: fairseq's
    # `FloatingPointError: Minimum loss scale reached (0.0001).`, DeepSpeed's `Current loss scale already at minimum -
    # cannot decrease scale anymore. Exiting run.`. A few at the start of every fp16 run are normal; the rule
    # (engine/diagnosis/loss_scale.py) names a storm and a collapse from their repetition.
    _kind(
        "loss_scale_overflow",
        _I,
        r"[Oo]verflow detected, setting loss scale to|Gradient overflow\.\s+Skipping step, loss scaler"
        r"|OVERFLOW! Rank \d+ Skipping step|loss scale overflow! Rank \d+ Skipping step"
        r"|Minimum loss scale reached|Current loss scale already at minimum",
        ("verflow detected, setting loss scale", "Skipping step", "Minimum loss scale reached", "loss scale already"),
        code_lines_excluded=True,
    ),
    _kind(
        "weight_update",
        _I,
        r"Loading weights from disk done in|Update weights end\.|\"POST /reset_prefix_cache/ HTTP/[\d.]+\" 2\d\d",
        ("Loading weights from disk done", "Update weights end", "POST /reset_prefix_cache/"),
        progress=True,
    ),
    _kind(
        "checkpoint_saved",
        _I,
        r"Saved recover checkpoint to|Saving model checkpoint to",
        ("Saved recover checkpoint to", "Saving model checkpoint to"),
        progress=True,
    ),
    _kind(
        "step",
        _I,
        # AReaL's per-step line; a TRL/transformers metric dict with a loss or reward (not the final summary);
        # verl's console logger, one line per step, `step:12 - actor/pg_loss:0.0423… - …` (verl/utils/logger/
        # aggregate_logger.py concat_dict_to_str; `key:{v:.3f}` before verl 18c6ffcf0, 2025-07; not the validation
        # before training, `step:0 - val-core/…:…`, whose keys are all val-: no step was done); OpenRLHF's `✨ Global
        # step 12: {'policy_loss': …}` (openrlhf/trainer/ppo_trainer.py, v0.9+). The same texts as
        # rlwatch/logs/shapes.py PROGRESS.
        r"Train step \d+/\d+ done\.|^\s*\{'(?:[^\n]*?, ')?(?:loss|reward)': [^\n]*\}\s*$"
        r"|^step:\d+ - (?!val-)[^\s:]+:|Global step \d+: \{",
        ("Train step", "{'", "step:", "Global step "),
        progress=True,
    ),
    _kind(
        "server_ready",
        _I,
        # SGLang: `The server is fired up and ready to roll!` (srt/server.py, then entrypoints/http_server.py;
        # v0.1 to now, INFO). AReaL: `Servers are all ready!` (RemoteInfEngine) and `SGLang server launched at:`
        # (SGLangWrapper). vLLM: `Starting vLLM API server on http://…` (v0.4 to v0.9), `Starting vLLM API server
        # 0 on http://…` (v0.10+), `Starting vLLM server on …` (api_server.py). uvicorn: `Application startup
        # complete.` (vLLM's OpenAI server, `trl vllm-serve`, SGLang's HTTP server).
        r"The server is fired up and ready to roll|Servers are all ready!|SGLang server launched at"
        r"|Starting vLLM (?:API )?server|Application startup complete\.",
        (
            "The server is fired up",
            "Servers are all ready",
            "SGLang server launched at",
            "Starting vLLM",
            "Application startup complete",
        ),
        progress=True,
    ),
    _kind(
        "restart",
        _I,
        # One line per restart: AReaL logs "Loading recover info from" just before "Recovering from StepInfo(",
        # and transformers three "Continuing training from ..." lines per resume, so only one of each counts.
        r"Recovering from StepInfo\(|LocalLauncher: [^\n]*\brun_id=0*[1-9]\d*|Continuing training from checkpoint",
        ("Recovering from StepInfo", "LocalLauncher: ", "Continuing training from checkpoint"),
    ),
    _kind(
        "_reward",
        _I,
        r"task_reward/avg|rollout/reward|timeperf/update_weights",
        ("task_reward/avg", "rollout/reward", "timeperf/update_weights"),
        internal=True,
    ),
    # The end of a run: AReaL's last line, and the summary dict transformers prints after the last step; verl's
    # `Final validation metrics: {…}` (verl/trainer/ppo/ray_trainer.py fit(), pprint of the f-string, so it may
    # start with `("`); `ray job submit`'s `Job 'raysubmit_…' succeeded` (ray/dashboard/modules/job/cli.py).
    _kind(
        "_finished",
        _I,
        r"Training completes! Total time elapsed|\{'train_runtime':|^\(?[\"']?Final validation metrics: "
        r"|Job '[^']+' succeeded",
        ("Training completes!", "{'train_runtime'", "Final validation metrics: ", "' succeeded"),
        internal=True,
    ),
    # Where a run stands between its steps: verl's tqdm bar `Training Progress:  33%|███▎      | 4/12 [00:04<00:09,
    # 1.17s/it]` (ray_trainer.py fit(): total and speed) and `Total training steps: 12`.
    _kind(
        "_progress",
        _I,
        r"Training Progress:\s+\d+%\|[^\n]*\| *\d+/\d+ \[|^Total training steps: \d+",
        ("Training Progress:", "Total training steps: "),
        internal=True,
    ),
    # Progress known by its shape, in any framework: a step-like name before a number, a fraction in a bar or in
    # brackets, a Keras bar, an epoch line (rlwatch/logs/progress_shape.py says which are steps; the training
    # tracker follows them).
    _kind(
        "_steplike",
        _I,
        CANDIDATE,
        CANDIDATE_LITERALS,
        internal=True,
    ),
    _kind(
        "_banner",
        _I,
        r"rlwatch-sim start|\*{5} Running training \*{5}|LocalLauncher: [^\n]*\brun_id=\d+",
        ("rlwatch-sim start", "***** Running training *****", "LocalLauncher: "),
        internal=True,
    ),
    _kind("_server_exit", _C, r"\bexits, returncode=-?\d+", ("exits, returncode=",), internal=True),
    # The learning metrics rlwatch.logs.learning reads besides TRL dicts and AReaL's reward rows: verl's "step:N - k:v"
    # line, AReaL's loss/grad-norm/entropy/KL/no-EOS rows, OpenRLHF's actor progress bar.
    _kind(
        "_learning",
        _I,
        r"(?:^|[\s)])step:\d+ - |update/(?:actor_loss|grad_norm|entropy|approx_kl)|no_eos_ratios/avg|act_loss=",
        ("step:", "update/", "no_eos_ratios/avg", "act_loss="),
        internal=True,
    ),
)

PROGRESS_KINDS = frozenset(k.name for k in _BUILTIN if k.progress)
# The kinds a bar's redraw is counted as (verl's bar, any tqdm bar): a run of redraws of one bar, line after line, is
# counted in bulk and only its first and last lines are handed to subscribers (rlwatch/logs/progress_shape.py
# redraw_key says what a redraw is; a line that is also of any other kind is never one).
REDRAWN_KINDS = frozenset({"_progress", "_steplike"})


_DEFAULT_BRAKE = EventsConfig().brake_pattern


def builtin_kinds(brake_pattern: str = _DEFAULT_BRAKE, *, bounded: bool = False) -> list[EventKind]:
    """The built-in kinds, with the emergency-brake kind made from ``brake_pattern`` (case-insensitive).

    ``bounded``: the pattern is an untrusted file's, run by RE2 (one RE2 cannot run was dropped where the file was
    loaded; given here anyway, the default pattern is used instead of failing)."""
    try:
        regex = compile_pattern(brake_pattern, re.IGNORECASE, bounded=bounded)
    except ValueError:
        brake_pattern = _DEFAULT_BRAKE
        regex = compile_pattern(brake_pattern, re.IGNORECASE, bounded=bounded)
    literals, _ = required_literals(brake_pattern, re.IGNORECASE)
    brake = EventKind(
        name="emergency_brake",
        severity=_W,
        regex=regex,
        literals=literals,
        ignore_case=True,
        exclude=CODE_LINE,
    )
    kinds = list(_BUILTIN)
    kinds.insert(next(i for i, k in enumerate(kinds) if k.name == "oom_kill"), brake)
    return kinds


def build_kinds(cfg: EventsConfig, *, bounded: bool = False) -> list[EventKind]:
    """Built-in kinds followed by the configured custom ones (a custom kind may not reuse a built-in name).

    ``bounded``: the configuration comes from a file rlwatch does not trust, whose expressions RE2 runs, so that
    none can keep the log loop busy for ever (``^(a+)+$`` over a line of ``a``s); the built-in ones are rlwatch's
    own and stay Python's. An expression RE2 cannot run is left out (where the file was loaded it was dropped, and
    said so)."""
    kinds = builtin_kinds(cfg.brake_pattern, bounded=bounded)
    taken = {k.name for k in kinds}
    for custom in cfg.custom:
        if custom.name in taken:
            continue
        flags = re.IGNORECASE if custom.ignore_case else 0
        try:
            regex = compile_pattern(custom.pattern, flags, bounded=bounded)
        except ValueError:
            continue
        taken.add(custom.name)
        literals, ignore_case = required_literals(custom.pattern, flags)
        kinds.append(
            EventKind(
                name=custom.name,
                severity=Severity(custom.severity),
                regex=regex,
                literals=literals,
                progress=custom.progress,
                ignore_case=ignore_case,
            )
        )
    return kinds
