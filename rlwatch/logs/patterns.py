"""Event kinds and the matcher that finds them in bulk log bytes.

Every kind is a regular expression over one log line plus *literals*: fixed strings of which at least one occurs in
every line the expression can match. A backlog of gigabytes cannot be split into Python strings line by line, so
the matcher first looks for the literals in the raw bytes of a whole chunk in one pass (a compiled alternation, or
Hyperscan for big spans when it is installed), and only the few lines around a hit are decoded, stripped of colour
codes and of rank/role prefixes, and tried against the expressions of the kinds the literals found point to. The
literal search sees raw bytes, so a literal broken in two by a colour code inside it is missed; loggers colour
whole lines, which keeps this theoretical.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from rlwatch.common.state import Severity
from rlwatch.common.textsafe import strip_ansi
from rlwatch.config.models import EventsConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants
    import sre_parse

__all__ = [
    "PROGRESS_KINDS",
    "EventKind",
    "Matcher",
    "build_kinds",
    "builtin_kinds",
    "prepare",
    "required_literals",
    "split_prefix",
]


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
    regex: re.Pattern[str]
    literals: tuple[str, ...]
    progress: bool = False
    internal: bool = False
    ignore_case: bool = False
    exclude: re.Pattern[str] | None = None


# A traceback quotes the source line of each frame (`    raise ChildFailedError(`, `    except TimeoutError:`).
# Such a line names the error without being one; without this, every chained traceback would count its own code.
_CODE_LINE = re.compile(r"^\s*(?:#|(?:raise|except|if|elif|assert|return|def|class|await|yield|lambda)\b)")

# ------------------------------------------------------------------------------------------------- line prefixes
# What wraps a line on its way to the file, outermost first. Each is split off before matching, so that a kind
# anchored at the start of a message (a metric dict) and the incident tracker (`  File "…", line N`) see the
# message itself. Timestamps and record prefixes are dropped; the names of writers (a compose service, a rank, a
# role, a process) are kept as the line's tag, which tells interleaved writers apart.
#
# Docker and Kubernetes stamp each line with RFC 3339 time and nanoseconds, then a space:
#   `docker logs --timestamps` and `kubectl logs --timestamps`: `2026-11-24T05:09:01.123456789Z msg`
#   CRI log files (/var/log/pods, containerd and CRI-O, kubernetes pkg/kubelet/kuberuntime/logs/logs.go):
#   `2026-11-24T05:09:01.123456789Z stdout F msg`, `P` for a partial line that the next record continues
# CI log viewers put the same stamp in brackets (`[2026-01-31T04:40:19Z] `, pytorch/pytorch#174081).
_STAMP = re.compile(
    r"\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)\]? (?:(?:stdout|stderr) [FP] )?",
    re.ASCII,
)
# docker compose: the service (container) name left-aligned in the width of the longest name plus one, then "| "
# (docker/compose cmd/formatter/logs.go `%-*s | `, v2; v1 printed `name_1  | ` alike), all of it coloured.
_COMPOSE = re.compile(r"([A-Za-z0-9][\w.-]*) +\| ", re.ASCII)
# Writer prefixes:
#   torch's excepthook and C++ logs after init_process_group: `[rank3]: ` / `[rank3]:[E1124 …`
#     (torch/distributed/distributed_c10d.py, torch >= 2.3, PR #118190)
#   AReaL v1 merged.log: `[role]` padded to ten characters, nothing after a longer one (areal/infra/utils/proc.py
#     `f"[{role}]".ljust(LOG_PREFIX_WIDTH)`); `kubectl logs --prefix`: `[pod/name/container] `
#   vLLM child processes: `(EngineCore_DP0 pid=456) `, `(APIServer pid=123) `, `(Worker_TP1 pid=899) `, and
#     before v0.10 `(VllmWorker rank=0 pid=2120280) ` / `(VllmWorkerProcess pid=12) ` (vllm/utils, decorate_logs)
#   Ray drivers: `(TaskRunner pid=123) `, `(WorkerDict pid=616, ip=192.168.149.159) `, `(pid=12) `, `(raylet) `,
#     `(autoscaler +1m2s) ` (ray/_private/worker.py print_worker_logs)
_WRITER = re.compile(
    r"\[rank\d+\]:\s?"
    r"|\[[A-Za-z][\w./-]*\]"
    r"|\((?:[A-Za-z][\w.:-]*(?: [A-Za-z]\w*)* )?\w+=[^\s,()]+(?:,? \w+=[^\s,()]+)*\) ?"
    r"|\((?:raylet|autoscaler(?: \+\w+)?)\) ",
    re.ASCII,
)
# vLLM's record prefix, which NewLineFormatter repeats on every line of a multi-line record (a logged traceback):
#   >= v0.6.4: `INFO 11-24 05:09:01 [api_server.py:1234] `, newer ones with a path `[v1/engine/core.py:700] `
#   older:     `INFO 11-24 05:09:01 api_server.py:1234] ` (vllm/logger.py _FORMAT)
_RECORD = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\] ", re.ASCII
)
_ROLE_WIDTH = 10  # AReaL's LOG_PREFIX_WIDTH: a role's padding ends there, and the message's own indentation begins
_MAX_PREFIXES = 6
# The characters a writer or record prefix can start with; a line starting otherwise has none unless it starts
# with a date (a stamp) or holds " | " near its start (compose). Most lines are decided by these tests alone.
_PREFIX_STARTS = frozenset("[(DIWEC")
_DIGITS = frozenset("0123456789")
_MAY_START = frozenset("[(0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_COMPOSE_NAME_MAX = 96  # where compose's " | " must have appeared (a name padded to the longest service name)


def split_prefix(text: str) -> tuple[str, str]:
    """Split a line into (tag, body): the writer prefixes, and the message behind every prefix.

    The tag tells interleaved writers apart (rank 0 and rank 1 printing tracebacks into one file at once, two
    compose services in one `docker compose logs`); it never holds a timestamp, which differs on every line.
    """
    first = text[:1]  # the test for "no prefix", inline: it runs on every line of an open traceback
    if first not in _MAY_START:  # table rules and rows, indented frames, metric dicts: one set lookup
        return "", text
    if first in _PREFIX_STARTS:
        if first == "(" and "=" not in text and not text.startswith(("(raylet)", "(autoscaler")):
            return "", text
    elif first in _DIGITS:
        if text[10:11] != "T" or text[4:5] != "-":
            return "", text
    elif text.find(" | ", 0, _COMPOSE_NAME_MAX) < 0:
        return "", text
    pos = 0
    tag = ""
    for _ in range(_MAX_PREFIXES):
        c = text[pos : pos + 1]
        if c in "[(":
            m = _WRITER.match(text, pos)
            if m is not None:
                tag += m.group().strip()
                end = m.end()
                if text[end - 1] == "]":  # a role: its padding, or one space, but not the message's indentation
                    stop = max(pos + _ROLE_WIDTH, end + 1)
                    while end < stop and text[end : end + 1] == " ":
                        end += 1
                pos = end
                continue
            m = _STAMP.match(text, pos) if c == "[" else None
        elif c.isdigit():
            m = _STAMP.match(text, pos)
        elif c in "DIWEC" and (m := _RECORD.match(text, pos)) is not None:
            pass
        elif pos == 0 and c.isalnum():  # compose's prefix is always the outermost
            m = _COMPOSE.match(text, pos)
            if m is not None:
                tag += m.group(1) + "|"
        else:
            break
        if m is None:
            break
        pos = m.end()
    return tag, text[pos:] if pos else text


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
        exclude=_CODE_LINE if code_lines_excluded else None,
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
    _kind("oom_kill", _C, r"Killed process \d+", ("Killed process",)),
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
        # AReaL's per-step line; a TRL/transformers metric dict with a loss or reward (not the final summary).
        r"Train step \d+/\d+ done\.|^\s*\{'(?:[^\n]*?, ')?(?:loss|reward)': [^\n]*\}\s*$",
        ("Train step", "{'"),
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
    # The end of a run: AReaL's last line, and the summary dict transformers prints after the last step.
    _kind(
        "_finished",
        _I,
        r"Training completes! Total time elapsed|\{'train_runtime':",
        ("Training completes!", "{'train_runtime'"),
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
)

PROGRESS_KINDS = frozenset(k.name for k in _BUILTIN if k.progress)


def builtin_kinds(brake_pattern: str = EventsConfig().brake_pattern) -> list[EventKind]:
    """The built-in kinds, with the emergency-brake kind made from ``brake_pattern`` (case-insensitive)."""
    literals, _ = required_literals(brake_pattern, re.IGNORECASE)
    brake = EventKind(
        name="emergency_brake",
        severity=_W,
        regex=re.compile(brake_pattern, re.IGNORECASE),
        literals=literals,
        ignore_case=True,
        exclude=_CODE_LINE,
    )
    kinds = list(_BUILTIN)
    kinds.insert(next(i for i, k in enumerate(kinds) if k.name == "oom_kill"), brake)
    return kinds


def build_kinds(cfg: EventsConfig) -> list[EventKind]:
    """Built-in kinds followed by the configured custom ones (a custom kind may not reuse a built-in name)."""
    kinds = builtin_kinds(cfg.brake_pattern)
    taken = {k.name for k in kinds}
    for custom in cfg.custom:
        if custom.name in taken:
            continue
        taken.add(custom.name)
        flags = re.IGNORECASE if custom.ignore_case else 0
        literals, ignore_case = required_literals(custom.pattern, flags)
        kinds.append(
            EventKind(
                name=custom.name,
                severity=Severity(custom.severity),
                regex=re.compile(custom.pattern, flags),
                literals=literals,
                progress=custom.progress,
                ignore_case=ignore_case,
            )
        )
    return kinds


# ------------------------------------------------------------------------------------------- literal extraction
_MIN_LITERAL = 2
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT}
_REPEATS.update(getattr(sre_constants, name) for name in ("POSSESSIVE_REPEAT",) if hasattr(sre_constants, name))


def _better(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Prefer the alternative set whose shortest member is longest (fewer spurious hits), then fewer members."""
    if a is None:
        return b
    if b is None:
        return a
    ka = (min(map(len, a)), -len(a))
    kb = (min(map(len, b)), -len(b))
    return b if kb > ka else a


def _required(items: list[tuple[Any, Any]], state: list[bool]) -> tuple[str, ...] | None:
    """Strings of which one must occur in any match of the parsed sequence ``items``."""
    best: tuple[str, ...] | None = None
    run: list[str] = []
    for op, av in [*items, (None, None)]:
        if op is sre_constants.LITERAL:
            run.append(chr(av))
            continue
        if run:
            best = _better(best, ("".join(run),))
            run = []
        if op is sre_constants.SUBPATTERN:
            if av[1] & re.IGNORECASE:
                state[0] = True
            best = _better(best, _required(list(av[3]), state))
        elif op is sre_constants.BRANCH:
            alternatives = [_required(list(branch), state) for branch in av[1]]
            if all(alt is not None for alt in alternatives):
                merged = tuple(dict.fromkeys(s for alt in alternatives if alt is not None for s in alt))
                best = _better(best, merged)
        elif op in _REPEATS and av[0] >= 1:
            best = _better(best, _required(list(av[2]), state))
    return best


def required_literals(pattern: str, flags: int = 0) -> tuple[tuple[str, ...], bool]:
    """(literals, ignore_case) for a user's expression: strings of which one occurs in every match.

    Returns no literals when none can be proven (the kind is then tried on every line, which is slow but right).
    """
    try:
        parsed = sre_parse.parse(pattern, flags)
    except (re.error, ValueError, TypeError, OverflowError, RecursionError):
        return (), bool(flags & re.IGNORECASE)
    state = [bool(parsed.state.flags & re.IGNORECASE)]
    try:
        found = _required(list(parsed.data), state)
    except RecursionError:
        found = None
    if found is None or min(map(len, found)) < _MIN_LITERAL:
        return (), state[0]
    return found, state[0]


# ---------------------------------------------------------------------------------------------------- matcher
def _case_variants(literal: str) -> tuple[str, ...]:
    """lower, UPPER and Capitalised spellings of a case-insensitive literal."""
    return tuple(dict.fromkeys((literal.lower(), literal.upper(), literal[:1].upper() + literal[1:].lower())))


def _case_needles(literal: str) -> tuple[str, ...]:
    """Needles that find a case-insensitive literal in raw bytes in its usual spellings.

    An alternation with an inline (?i:...) group is an order of magnitude slower in `re`, so the bulk scan looks
    for the tail of the literal's longest word in lower and upper case: that finds the word written lower case,
    Capitalised or in CAPITALS ("emergency", "Emergency", "EMERGENCY" all contain "mergency" or "MERGENCY").
    Only freak spellings such as "eMeRgEnCy" are found solely when another kind's literal is on the same line.
    """
    words = sorted(re.findall(r"[^\W\d_]{4,}", literal), key=len, reverse=True)
    if not words:
        return _case_variants(literal)
    word = words[0]
    tail = word[1:] if len(word) > 4 else word
    return tuple(dict.fromkeys((tail.lower(), tail.upper())))


# How common a byte is in training logs, measured on AReaL logs (stats tables: spaces, digits, lowercase keys) and
# TRL's metric dicts (quotes). The bulk scan stops at every byte that can start a needle, so needles should start
# with rare bytes; anything not listed (capitals, most punctuation) counts as rare.
_COMMON = {" ": 100, **{d: 70 for d in "0123456789"}}
_COMMON.update(
    zip(
        "eaoptr/_mnc.id-s[gl:;'",
        (75, 74, 72, 72, 71, 68, 66, 64, 60, 60, 58, 58, 58, 55, 55, 55, 50, 50, 48, 48, 45, 45),
        strict=True,
    )
)
_COMMON.update(dict.fromkeys("kuv,]fxhw", 40) | dict.fromkeys('()="|', 32) | dict.fromkeys("qby", 25))
_MIN_NEEDLE = 6  # shorter tails are no longer specific ("ward" is in every reward key)


def _needle(literal: bytes) -> bytes:
    """The tail of ``literal`` (at least six bytes long) that starts at its rarest byte."""
    if len(literal) <= _MIN_NEEDLE:
        return literal
    best = min(range(len(literal) - _MIN_NEEDLE + 1), key=lambda i: (_COMMON.get(chr(literal[i]), 20), i))
    return literal[best:]


def _alternation(needles: Sequence[bytes]) -> bytes:
    """One expression for all needles, grouped by first byte: `re` then tries one branch per distinct first
    byte at each position where the scan stops, instead of one per needle."""
    groups: dict[bytes, list[bytes]] = {}
    for needle in sorted(needles):
        groups.setdefault(needle[:1], []).append(needle[1:])
    return b"|".join(
        re.escape(first) + (b"(?:" + b"|".join(re.escape(rest) for rest in rests) + b")" if rests != [b""] else b"")
        for first, rests in groups.items()
    )


# Below this many bytes `re` is as quick as Hyperscan's call overhead, and live tailing never pays for compiling.
_NATIVE_MIN_BYTES = 256 << 10
_DATABASES: dict[tuple[bytes, ...], Any] = {}  # compiled Hyperscan databases by needle set (read-only once built)
_DATABASES_LOCK = threading.Lock()


# Hyperscan is given at most this many first bytes of each needle: compiling a set that holds longer literals is
# slow (the built-in set took 36 ms with its 28-byte "***** Running training *****", 0.6 ms with every needle cut
# short). It still reports the whole needle. A line that holds the start of a needle and not the rest
# becomes a candidate that the needle's kinds do not match, which changes nothing: every kind is decided by its own
# literals and expression, and a line that matches no kind is counted as nothing (a traceback header holds the
# start of its own needle, so incidents see the same headers).
_NATIVE_NEEDLE_BYTES = 16


class _Hyperscan:
    """The needle search done by Hyperscan (Vectorscan): several GB/s where `re`'s alternation does ~0.4.

    Compiling a database takes a millisecond or more, so one is built per needle set and shared; each matcher has
    its own scratch space, which serves one scan at a time, hence the lock (a matcher is normally fed by one
    thread, so it is never contended).
    """

    def __init__(self, needles: Sequence[bytes]) -> None:
        import hyperscan  # type: ignore[import-not-found,unused-ignore]  # optional: rlwatch[fast]

        self._needles = list(needles)
        heads = [n[:_NATIVE_NEEDLE_BYTES] for n in self._needles]
        self._lengths = [len(h) for h in heads]
        key = tuple(self._needles)
        with _DATABASES_LOCK:
            db = _DATABASES.get(key)
            if db is None:
                db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                db.compile(
                    expressions=heads,
                    ids=list(range(len(heads))),
                    elements=len(heads),
                    flags=0,
                    literal=True,
                )
                while len(_DATABASES) >= 16:
                    _DATABASES.pop(next(iter(_DATABASES)))
                _DATABASES[key] = db
        self._db = db
        self._scratch = hyperscan.Scratch(db)
        self._lock = threading.Lock()

    def hits(self, data: bytes, pos: int, endpos: int) -> list[tuple[int, bytes]]:
        found: list[tuple[int, bytes]] = []
        add = found.append
        needles = self._needles
        start = [pos - n for n in self._lengths]  # Hyperscan reports where a match ends, relative to the view

        def on_match(i: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            add((to + start[i], needles[i]))

        view = data if pos == 0 and endpos >= len(data) else memoryview(data)[pos:endpos]
        with self._lock:
            # The extension takes any buffer; its stubs say str or bytes only.
            self._db.scan(cast(bytes, view), match_event_handler=on_match, scratch=self._scratch)
        found.sort()
        return found


def _native_scanner(needles: Sequence[bytes]) -> _Hyperscan | None:
    """Hyperscan when it is installed, works on this CPU and is not switched off (``RLWATCH_SCANNER=re``)."""
    if os.environ.get("RLWATCH_SCANNER", "").strip().lower() == "re":
        return None
    try:
        return _Hyperscan(needles)
    except Exception:  # not installed, an unsupported CPU, a needle it refuses: `re` does the same job slower
        return None


class Matcher:
    """Finds candidate lines in a chunk by literal, then decides which kinds a line really is."""

    def __init__(self, kinds: Sequence[EventKind]) -> None:
        self.kinds: tuple[EventKind, ...] = tuple(kinds)
        self._checks: list[tuple[EventKind, tuple[str, ...], bool]] = [
            (k, tuple(s.lower() for s in k.literals) if k.ignore_case else k.literals, _literals_decide(k))
            for k in self.kinds
        ]
        self._unfiltered = tuple(i for i, k in enumerate(self.kinds) if not k.literals)
        self.every_line = bool(self._unfiltered)
        spellings: dict[int, set[bytes]] = {}
        needles: set[bytes] = set()
        for i, k in enumerate(self.kinds):
            for lit in k.literals:
                for variant in _case_variants(lit) if k.ignore_case else (lit,):
                    spellings.setdefault(i, set()).add(variant.encode("utf-8", "surrogatepass"))
                for needle in _case_needles(lit) if k.ignore_case else (lit,):
                    needles.add(_needle(needle.encode("utf-8", "surrogatepass")))
        # A needle that contains another one is redundant: any line with it also has the shorter one.
        minimal = sorted(n for n in needles if not any(o != n and o in n for o in needles))
        self._prefilter: re.Pattern[bytes] | None = re.compile(_alternation(minimal)) if minimal else None
        self._needles = minimal
        self._native: _Hyperscan | None = None
        self._native_tried = not minimal or self.every_line  # built on the first big span, never for live lines
        # Which kinds a needle found in a line can belong to: those with a literal containing that needle.
        self._by_needle: dict[bytes, tuple[int, ...]] = {
            n: tuple(i for i, group in sorted(spellings.items()) if any(n in lit for lit in group)) for n in minimal
        }
        # Kinds to try on a line, by the set of needles found in it (most lines hold one needle).
        self._tries: dict[bytes | frozenset[bytes], tuple[int, ...]] = {n: ks for n, ks in self._by_needle.items()}

    @property
    def scanner(self) -> str:
        """Which engine finds the needles in a backlog: "hyperscan" or "re" (small spans always use `re`)."""
        return "hyperscan" if self._big_scanner() is not None else "re"

    def _big_scanner(self) -> _Hyperscan | None:
        if not self._native_tried:
            self._native_tried = True
            self._native = _native_scanner(self._needles)
        return self._native

    def hits(self, data: bytes, pos: int, endpos: int) -> list[tuple[int, bytes]]:
        """Needles in ``data[pos:endpos]`` as (offset, needle), ordered by offset: one pass over a whole chunk.

        No needle holds a line terminator, so every needle a search of one line alone would find is among those
        inside that line's bounds (the native scanner also reports needles that overlap one another: trying a
        few more kinds on a line never changes what it is counted as).
        """
        if self._prefilter is None or self.every_line:
            return []
        if endpos - pos >= _NATIVE_MIN_BYTES:
            native = self._big_scanner()
            if native is not None:
                return native.hits(data, pos, endpos)
        return [(m.start(), m.group()) for m in self._prefilter.finditer(data, pos, endpos)]

    def match_hits(self, body: str, hits: Sequence[tuple[int, bytes]]) -> list[EventKind]:
        """Like :meth:`match`, trying only the kinds that ``hits`` (the needles found in the line) point to."""
        if not hits:
            return []
        if len(hits) == 1:
            key: bytes | frozenset[bytes] = hits[0][1]
        else:
            key = frozenset(h[1] for h in hits)
            if len(key) == 1:
                key = hits[0][1]
        tries = self._tries.get(key)
        if tries is None:
            assert isinstance(key, frozenset)
            tries = tuple(sorted({i for n in key for i in self._by_needle.get(n, ())}))
            if len(self._tries) < 4096:
                self._tries[key] = tries
        return self._match(body, tries)

    def match_raw(self, raw: bytes, body: str) -> list[EventKind]:
        """Like :meth:`match`, trying only the kinds whose literals occur in the raw line."""
        if self._prefilter is None:
            return self._match(body, self._unfiltered)
        hits = set(self._prefilter.findall(raw))
        if not hits and not self._unfiltered:
            return []
        indices: set[int] = set(self._unfiltered)
        for needle in hits:
            indices.update(self._by_needle.get(needle, ()))
        return self._match(body, sorted(indices))

    def match(self, body: str) -> list[EventKind]:
        """The kinds one line (ANSI-stripped, prefix removed) is an occurrence of."""
        return self._match(body, range(len(self._checks)))

    def _match(self, body: str, indices: Sequence[int]) -> list[EventKind]:
        found: list[EventKind] = []
        lowered: str | None = None
        for i in indices:
            kind, literals, decided = self._checks[i]
            if literals:
                if kind.ignore_case:
                    if lowered is None:
                        lowered = body.lower()
                    hay = lowered
                else:
                    hay = body
                for lit in literals:
                    if lit in hay:
                        break
                else:
                    continue
            if not decided and kind.regex.search(body) is None:
                continue
            if kind.exclude is not None and kind.exclude.search(body) is not None:
                continue
            found.append(kind)
        return found


def _literals_decide(kind: EventKind) -> bool:
    """True when the expression is just its literals, alternated (``_reward``): finding one of them is a match,
    and the expression need not be run over the (often long) line."""
    return (
        bool(kind.literals)
        and not kind.ignore_case
        and kind.regex.flags == re.UNICODE
        and kind.regex.pattern == "|".join(re.escape(lit) for lit in kind.literals)
    )


def prepare(raw: bytes) -> tuple[str, str, str]:
    """(text, tag, body) of one raw line: decoded leniently, colour codes stripped, prefixes split off."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:  # strip_ansi's own first test, made here: it saves a call on every uncoloured line
        text = strip_ansi(text)
    tag, body = split_prefix(text)
    return text, tag, body
