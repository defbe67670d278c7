# cython: boundscheck=False, wraparound=False, annotation_typing=False
"""Splitting a log line's writer prefixes from its message, before event kinds are matched against it.

What wraps a line on its way to the file, outermost first. Each is split off before matching, so that a kind
anchored at the start of a message (a metric dict) and the incident tracker (`  File "…", line N`) see the
message itself. Timestamps and record prefixes are dropped; the names of writers (a compose service, a rank, a
role, a process) are kept as the line's tag, which tells interleaved writers apart.

This text is the rule for both paths: where a C compiler and Cython are found setup.py compiles it (Cython's
pure-Python mode, the C types in prefixes.pxd beside it) and the compiled event path cimports ``split_at`` from
it; elsewhere it runs as it is. So each prefix is matched by hand, one character at a time, as the expression in
its docstring would (all ``re.ASCII``: the classes below are ASCII only): compiled, that is a loop over the
string's own characters with no Python object made until the tag is cut; interpreted, it is slower than ``re``
was, and only the Python event path (``RLWATCH_NATIVE=0``, or nothing compiled) pays for it.
"""

from __future__ import annotations

from rlwatch.common.textsafe import strip_ansi
from rlwatch.logs import textscan, wording

__all__ = ["Split", "prepare", "split_at", "split_prefix"]

# torch's excepthook and C++ logs after init_process_group: `[rank3]: ` / `[rank3]:[E1124 …`
#   (torch/distributed/distributed_c10d.py, torch >= 2.3, PR #118190)
_RANK = wording.RANK_PREFIX
# Ray drivers: `(raylet) `, `(autoscaler +1m2s) ` (ray/_private/worker.py print_worker_logs)
_RAYLET = wording.RAY_RAYLET
_AUTOSCALER = wording.RAY_AUTOSCALER
# CRI log files' stream after the stamp (`stdout F `), and vLLM's record levels
_STREAMS = tuple(wording.STREAM_TAGS)
_LEVELS = tuple(wording.LOG_LEVELS)
_ROLE_WIDTH = 10  # AReaL's LOG_PREFIX_WIDTH: a role's padding ends there, and the message's own indentation begins
_MAX_PREFIXES = 6
_COMPOSE_NAME_MAX = 96  # where compose's " | " must have appeared (a name padded to the longest service name)


class Split:
    """What ``split_at`` found besides where the message starts: the line's writer tag.

    An object the caller keeps and passes again, rather than a tuple made per line: the compiled event path's own
    record of a line's findings extends it (a C attribute there), and calls ``split_at`` on every line it reads.
    """

    def __init__(self) -> None:
        self.tag = ""


# The ASCII classes (re.ASCII's \d, \w, \s): a one-character string here, a C character compiled.
def _digit(c: str) -> bool:
    return "0" <= c <= "9"


def _alpha(c: str) -> bool:
    return "A" <= c <= "Z" or "a" <= c <= "z"


def _word(c: str) -> bool:
    return "0" <= c <= "9" or "A" <= c <= "Z" or "a" <= c <= "z" or c == "_"


def _space(c: str) -> bool:
    return c == " " or "\t" <= c <= "\r"


def _digits(text: str, n: int, i: int, count: int) -> int:
    """i + count when text[i:i+count] are that many ASCII digits, else -1."""
    if i + count > n:
        return -1
    for k in range(i, i + count):
        if not _digit(text[k]):
            return -1
    return i + count


def _rank_writer(text: str, n: int, pos: int) -> int:
    """``\\[rank\\d+\\]:\\s?`` at pos: its end, or -1."""
    if not textscan.startswith(text, _RANK, pos):
        return -1
    i = pos + len(_RANK)
    if i >= n or not _digit(text[i]):
        return -1
    while i < n and _digit(text[i]):
        i += 1
    if i + 1 >= n or text[i] != "]" or text[i + 1] != ":":
        return -1
    i += 2
    if i < n and _space(text[i]):
        i += 1
    return i


def _role_writer(text: str, n: int, pos: int) -> int:
    """``\\[[A-Za-z][\\w./-]*\\]`` at pos: a role (AReaL v1 merged.log's `[role]`, ``kubectl logs --prefix``'s
    `[pod/name/container]`)."""
    if pos + 1 >= n or text[pos] != "[" or not _alpha(text[pos + 1]):
        return -1
    i = pos + 2
    while i < n:
        c = text[i]
        if _word(c) or c in "./-":
            i += 1
        else:
            break
    if i < n and text[i] == "]":
        return i + 1
    return -1


def _value(c: str) -> bool:
    """``[^\\s,()]`` (ASCII \\s)."""
    return not (_space(c) or c in ",()")


def _kv_writer(text: str, n: int, pos: int) -> int:
    """``\\((?:[A-Za-z][\\w.:-]*(?: [A-Za-z]\\w*)* )?\\w+=[^\\s,()]+(?:,? \\w+=[^\\s,()]+)*\\) ?`` at pos: a
    process's name and fields, as vLLM's children (`(EngineCore_DP0 pid=456) `, before v0.10
    `(VllmWorker rank=0 pid=2120280) `, vllm/utils decorate_logs) and Ray's actors (`(TaskRunner pid=123) `,
    `(WorkerDict pid=616, ip=192.168.149.159) `) print it.

    No part of it can hold ``)``, so a match ends at the first ``)``; whether the text before it fits is decided
    by running the expression's automaton over it (its states a bit set), which is exact whatever it backtracks."""
    if pos >= n or text[pos] != "(":
        return -1
    close = textscan.find_char(text, ")", pos + 1, n)
    # every match holds a key's "=": most lines are let go here
    if close < 0 or textscan.find_char(text, "=", pos + 1, close) < 0:
        return -1
    # states: 1 name start, 2 in name, 3 part start, 4 in part, 5 key start, 6 in key, 7 value start, 8 in value
    # (accepting), 9 after a comma.
    s = (1 << 1) | (1 << 5)
    for i in range(pos + 1, close):
        c = text[i]
        t = 0
        if s & (1 << 1) and _alpha(c):
            t |= 1 << 2
        if s & (1 << 2):
            if _word(c) or c in ".:-":
                t |= 1 << 2
            if c == " ":
                t |= (1 << 3) | (1 << 5)
        if s & (1 << 3) and _alpha(c):
            t |= 1 << 4
        if s & (1 << 4):
            if _word(c):
                t |= 1 << 4
            if c == " ":
                t |= (1 << 3) | (1 << 5)
        if s & (1 << 5) and _word(c):
            t |= 1 << 6
        if s & (1 << 6):
            if _word(c):
                t |= 1 << 6
            if c == "=":
                t |= 1 << 7
        if s & ((1 << 7) | (1 << 8)) and _value(c):
            t |= 1 << 8
        if s & (1 << 8):
            if c == ",":
                t |= 1 << 9
            if c == " ":
                t |= 1 << 5
        if s & (1 << 9) and c == " ":
            t |= 1 << 5
        s = t
        if s == 0:
            return -1
    if not s & (1 << 8):
        return -1
    i = close + 1
    if i < n and text[i] == " ":
        i += 1
    return i


def _ray_writer(text: str, n: int, pos: int) -> int:
    """``\\(raylet\\) |\\(autoscaler(?: \\+\\w+)?\\) `` at pos."""
    i = pos + len(_RAYLET)
    if textscan.startswith(text, _RAYLET, pos) and i < n and text[i] == " ":
        return i + 1
    if not textscan.startswith(text, _AUTOSCALER, pos):
        return -1
    i = pos + len(_AUTOSCALER)
    if i + 2 < n and text[i] == " " and text[i + 1] == "+" and _word(text[i + 2]):
        i += 3
        while i < n and _word(text[i]):
            i += 1
        if i + 1 < n and text[i] == ")" and text[i + 1] == " ":
            return i + 2
        i = pos + len(_AUTOSCALER)
    if i + 1 < n and text[i] == ")" and text[i + 1] == " ":
        return i + 2
    return -1


def _writer(text: str, n: int, pos: int) -> int:
    """A writer's prefix at pos (the alternatives in order: rank, role, a process's fields, Ray's own): its end,
    or -1."""
    e = _rank_writer(text, n, pos)
    if e >= 0:
        return e
    e = _role_writer(text, n, pos)
    if e >= 0:
        return e
    e = _kv_writer(text, n, pos)
    if e >= 0:
        return e
    return _ray_writer(text, n, pos)


def _pairs(text: str, n: int, i: int, seps: str) -> int:
    """Two digits at i, then each of ``seps`` followed by two more (a stamp's ``11-24T05:09:01`` is ``-T::``): their
    end, or -1."""
    i = _digits(text, n, i, 2)
    for sep in seps:
        if i < 0 or i >= n or text[i] != sep:
            return -1
        i = _digits(text, n, i + 1, 2)
    return i


def _stamp(text: str, n: int, pos: int) -> int:
    """``\\[?\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(?:[.,]\\d{1,9})?(?:Z|[+-]\\d\\d:?\\d\\d)\\]? ``, then
    ``(?:(?:stdout |stderr )[FP] )?``, at pos: its end, or -1.

    Docker and Kubernetes stamp each line with RFC 3339 time and nanoseconds, then a space:
    `docker logs --timestamps` and `kubectl logs --timestamps`: `2026-11-24T05:09:01.123456789Z msg`; CRI log
    files (/var/log/pods, containerd and CRI-O, kubernetes pkg/kubelet/kuberuntime/logs/logs.go):
    `2026-11-24T05:09:01.123456789Z stdout F msg`, `P` for a partial line that the next record continues. CI log
    viewers put the same stamp in brackets (`[2026-01-31T04:40:19Z] `, pytorch/pytorch#174081)."""
    i = pos
    if i < n and text[i] == "[":
        i += 1
    i = _digits(text, n, i, 4)
    if i < 0 or i >= n or text[i] != "-":
        return -1
    i = _pairs(text, n, i + 1, "-T::")
    if i < 0:
        return -1
    if i < n and (text[i] == "." or text[i] == ","):
        j = i + 1
        while j < n and _digit(text[j]):
            j += 1
        if j - i - 1 < 1 or j - i - 1 > 9:
            return -1  # without the fraction a zone cannot follow the separator; with it, no zone after 9 digits
        i = j
    if i >= n:
        return -1
    c = text[i]
    if c == "Z":
        i += 1
    elif c in "+-":
        i = _digits(text, n, i + 1, 2)
        if i < 0:
            return -1
        if i < n and text[i] == ":":
            i += 1
        i = _digits(text, n, i, 2)
        if i < 0:
            return -1
    else:
        return -1
    if i < n and text[i] == "]":
        i += 1
    if i >= n or text[i] != " ":
        return -1
    i += 1
    for stream in _STREAMS:
        k = i + len(stream)
        if textscan.startswith(text, stream, i):
            if k + 1 < n and (text[k] == "F" or text[k] == "P") and text[k + 1] == " ":
                i = k + 2
            break
    return i


def _record(text: str, n: int, pos: int) -> int:
    """``(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d(?:\\.\\d+)? \\[?[\\w./-]+:\\d+\\] ``
    at pos: vLLM's record prefix, which NewLineFormatter repeats on every line of a multi-line record (a logged
    traceback). >= v0.6.4: `INFO 11-24 05:09:01 [api_server.py:1234] `, newer ones with a path
    `[v1/engine/core.py:700] `; older: `INFO 11-24 05:09:01 api_server.py:1234] ` (vllm/logger.py _FORMAT)."""
    i = -1
    for level in _LEVELS:
        if textscan.startswith(text, level, pos):
            i = pos + len(level)
            break
    if i < 0 or i >= n or text[i] != " ":
        return -1
    i = _pairs(text, n, i + 1, "- ::")
    if i < 0:
        return -1
    if i < n and text[i] == ".":
        j = i + 1
        while j < n and _digit(text[j]):
            j += 1
        if j > i + 1 and j < n and text[j] == " ":
            i = j
    if i >= n or text[i] != " ":
        return -1
    i += 1
    if i < n and text[i] == "[":
        i += 1
    j = i
    while j < n:
        c = text[j]
        if _word(c) or c in "./-":
            j += 1
        else:
            break
    if j == i or j >= n or text[j] != ":":
        return -1
    i = j + 1
    j = i
    while j < n and _digit(text[j]):
        j += 1
    if j == i or j + 1 >= n or text[j] != "]" or text[j + 1] != " ":
        return -1
    return j + 2


def _compose(text: str, n: int, pos: int) -> int:
    """``([A-Za-z0-9][\\w.-]*) +\\| `` at pos: docker compose's service (container) name left-aligned in the width
    of the longest name plus one, then "| " (docker/compose cmd/formatter/logs.go `%-*s | `, v2; v1 printed
    `name_1  | ` alike), all of it coloured. Its end, or -1; the name ends at the first space."""
    if pos >= n:
        return -1
    c = text[pos]
    if not (_alpha(c) or _digit(c)):
        return -1
    i = pos + 1
    while i < n:
        c = text[i]
        if _word(c) or c in ".-":
            i += 1
        else:
            break
    if i >= n or text[i] != " ":
        return -1
    while i < n and text[i] == " ":
        i += 1
    if i + 1 >= n or text[i] != "|" or text[i + 1] != " ":
        return -1
    return i + 2


def _may_have_prefix(text: str, n: int) -> bool:
    """The test for "no prefix", made before anything else: it runs on every line of an open traceback. A writer or
    record prefix starts with one of "[(DIWEC"; a line starting otherwise has none unless it starts with a date (a
    stamp) or holds " | " near its start (compose). Most lines are decided here."""
    if n == 0:
        return False
    first = text[0]
    if first in "[(DIWEC":
        return (
            first != "("
            or "=" in text
            or textscan.startswith(text, _RAYLET, 0)
            or textscan.startswith(text, _AUTOSCALER, 0)
        )
    if "0" <= first <= "9":  # the classes written out: a call costs more than the test, interpreted
        return n >= 11 and text[10] == "T" and text[4] == "-"
    if not ("A" <= first <= "Z" or "a" <= first <= "z"):
        return False  # table rules and rows, indented frames, metric dicts
    return textscan.find(text, " | ", 0, _COMPOSE_NAME_MAX) >= 0


def _split(text: str, n: int, out: Split) -> int:
    """split_at past the test for "no prefix"."""
    pos = 0
    tag = ""
    for _hop in range(_MAX_PREFIXES):
        if pos >= n:
            break
        c = text[pos]
        if c in "[(":
            m = _writer(text, n, pos)
            if m >= 0:
                stop = m  # the tag is the prefix without the one space it may end in
                if _space(text[stop - 1]):
                    stop -= 1
                tag += text[pos:stop]
                if text[m - 1] == "]":  # a role: its padding, or one space, but not the message's indentation
                    stop = max(pos + _ROLE_WIDTH, m + 1)
                    while m < stop and m < n and text[m] == " ":
                        m += 1
                pos = m
                continue
            m = _stamp(text, n, pos) if c == "[" else -1
        elif _digit(c):
            m = _stamp(text, n, pos)
        else:
            m = _record(text, n, pos) if c in "DIWEC" else -1
            if m < 0 and pos == 0 and _alpha(c):  # compose's prefix is always the outermost
                m = _compose(text, n, pos)
                if m >= 0:
                    stop = pos + 1
                    while text[stop] != " ":
                        stop += 1
                    tag += text[pos:stop] + "|"
        if m < 0:
            break
        pos = m
    out.tag = tag
    return pos


def split_at(text: str, out: Split) -> int:
    """Where the message behind every writer prefix of a line starts; the writer prefixes' tag goes to out.tag.

    The tag tells interleaved writers apart (rank 0 and rank 1 printing tracebacks into one file at once, two
    compose services in one `docker compose logs`); it never holds a timestamp, which differs on every line.
    """
    n = len(text)
    if not _may_have_prefix(text, n):
        out.tag = ""
        return 0
    return _split(text, n, out)


def split_prefix(text: str) -> tuple[str, str]:
    """Split a line into (tag, body): the writer prefixes, and the message behind every prefix. (A line with none,
    most, is let go before a Split is made for it: interpreted, that is most of the cost.)"""
    n = len(text)
    if not _may_have_prefix(text, n):
        return "", text
    out = Split()
    pos = _split(text, n, out)
    return out.tag, text[pos:] if pos else text


def prepare(raw: bytes) -> tuple[str, str, str]:
    """(text, tag, body) of one raw line: decoded leniently, colour codes stripped, prefixes split off."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:  # strip_ansi's own first test, made here: it saves a call on every uncoloured line
        text = strip_ansi(text)
    tag, body = split_prefix(text)
    return text, tag, body
