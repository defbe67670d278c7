"""Splitting a log line's writer prefixes from its message, before event kinds are matched against it.

What wraps a line on its way to the file, outermost first. Each is split off before matching, so that a kind
anchored at the start of a message (a metric dict) and the incident tracker (`  File "…", line N`) see the
message itself. Timestamps and record prefixes are dropped; the names of writers (a compose service, a rank, a
role, a process) are kept as the line's tag, which tells interleaved writers apart.
"""

from __future__ import annotations

import re

from rlwatch.common.textsafe import strip_ansi
from rlwatch.logs import wording

__all__ = ["prepare", "split_prefix"]


# Docker and Kubernetes stamp each line with RFC 3339 time and nanoseconds, then a space:
#   `docker logs --timestamps` and `kubectl logs --timestamps`: `2026-11-24T05:09:01.123456789Z msg`
#   CRI log files (/var/log/pods, containerd and CRI-O, kubernetes pkg/kubelet/kuberuntime/logs/logs.go):
#   `2026-11-24T05:09:01.123456789Z stdout F msg`, `P` for a partial line that the next record continues
# CI log viewers put the same stamp in brackets (`[2026-01-31T04:40:19Z] `, pytorch/pytorch#174081).
_STAMP = re.compile(
    r"\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)\]? (?:(?:"
    + "|".join(map(re.escape, wording.STREAM_TAGS))
    + r")[FP] )?",
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
    re.escape(wording.RANK_PREFIX) + r"\d+\]:\s?"
    r"|\[[A-Za-z][\w./-]*\]"
    r"|\((?:[A-Za-z][\w.:-]*(?: [A-Za-z]\w*)* )?\w+=[^\s,()]+(?:,? \w+=[^\s,()]+)*\) ?"
    rf"|{re.escape(wording.RAY_RAYLET)} |{re.escape(wording.RAY_AUTOSCALER)}(?: \+\w+)?\) ",
    re.ASCII,
)
# vLLM's record prefix, which NewLineFormatter repeats on every line of a multi-line record (a logged traceback):
#   >= v0.6.4: `INFO 11-24 05:09:01 [api_server.py:1234] `, newer ones with a path `[v1/engine/core.py:700] `
#   older:     `INFO 11-24 05:09:01 api_server.py:1234] ` (vllm/logger.py _FORMAT)
_RECORD = re.compile(
    "(?:" + "|".join(wording.LOG_LEVELS) + r") \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\] ", re.ASCII
)
_ROLE_WIDTH = 10  # AReaL's LOG_PREFIX_WIDTH: a role's padding ends there, and the message's own indentation begins
_MAX_PREFIXES = 6
_RAY_WRITERS = (wording.RAY_RAYLET, wording.RAY_AUTOSCALER)
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
        if first == "(" and "=" not in text and not text.startswith(_RAY_WRITERS):
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


def prepare(raw: bytes) -> tuple[str, str, str]:
    """(text, tag, body) of one raw line: decoded leniently, colour codes stripped, prefixes split off."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:  # strip_ansi's own first test, made here: it saves a call on every uncoloured line
        text = strip_ansi(text)
    tag, body = split_prefix(text)
    return text, tag, body
