"""``rlwatch.logs.prefixes`` is one text run two ways: compiled by Cython (what an import gives where it was built,
and what the compiled event path cimports) and interpreted from its .py (where nothing is compiled). Both are
compared here with the regular expressions the rule was first written as (below, kept only as the reference of
what each hand-matched prefix means) and with each other, on random text and on the lines where a hand matcher over
C characters could part from Python's: every cut of each prefix (an index one past the end reads no byte there),
non-ASCII digits and letters (the classes are ASCII's), empty lines, CRLF and other line ends.
"""

from __future__ import annotations

import importlib.machinery
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlwatch.logs import prefixes as imported
from rlwatch.logs import wording
from tests.logs.interpreted import interpreted

INTERPRETED = interpreted("prefixes")
COMPILED = imported.__file__ is not None and imported.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))

# ------------------------------------------------------------------------------- the reference: the expressions
_STAMP = re.compile(
    r"\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)\]? (?:(?:"
    + "|".join(map(re.escape, wording.STREAM_TAGS))
    + r")[FP] )?",
    re.ASCII,
)
_COMPOSE = re.compile(r"([A-Za-z0-9][\w.-]*) +\| ", re.ASCII)
_WRITER = re.compile(
    re.escape(wording.RANK_PREFIX) + r"\d+\]:\s?"
    r"|\[[A-Za-z][\w./-]*\]"
    r"|\((?:[A-Za-z][\w.:-]*(?: [A-Za-z]\w*)* )?\w+=[^\s,()]+(?:,? \w+=[^\s,()]+)*\) ?"
    rf"|{re.escape(wording.RAY_RAYLET)} |{re.escape(wording.RAY_AUTOSCALER)}(?: \+\w+)?\) ",
    re.ASCII,
)
_RECORD = re.compile(
    "(?:" + "|".join(wording.LOG_LEVELS) + r") \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\] ", re.ASCII
)
_MAY_START = frozenset("[(0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def by_expressions(text: str) -> tuple[str, str]:
    """split_prefix as it was written with the expressions above."""
    first = text[:1]
    if first not in _MAY_START:
        return "", text
    if first in "[(DIWEC":
        if first == "(" and "=" not in text and not text.startswith((wording.RAY_RAYLET, wording.RAY_AUTOSCALER)):
            return "", text
    elif first.isdigit():
        if text[10:11] != "T" or text[4:5] != "-":
            return "", text
    elif text.find(" | ", 0, 96) < 0:
        return "", text
    pos = 0
    tag = ""
    for _ in range(6):
        c = text[pos : pos + 1]
        if c in "[(":
            m = _WRITER.match(text, pos)
            if m is not None:
                tag += m.group().strip()
                end = m.end()
                if text[end - 1] == "]":
                    stop = max(pos + 10, end + 1)
                    while end < stop and text[end : end + 1] == " ":
                        end += 1
                pos = end
                continue
            m = _STAMP.match(text, pos) if c == "[" else None
        elif c.isdigit():
            m = _STAMP.match(text, pos)
        elif c in "DIWEC" and (m := _RECORD.match(text, pos)) is not None:
            pass
        elif pos == 0 and c.isalnum():
            m = _COMPOSE.match(text, pos)
            if m is not None:
                tag += m.group(1) + "|"
        else:
            break
        if m is None:
            break
        pos = m.end()
    return tag, text[pos:] if pos else text


# ------------------------------------------------------------------------------------------------ the lines
# Each prefix the rule knows, whole; every cut of each is tried, alone and before a message.
WHOLE = [
    "[rank3]: ",
    "[rank12]:\t",
    "[rank0]:[E1124 05:09:01.1]",
    "[actor]   ",
    "[pod/name/container] ",
    "(TaskRunner pid=123) ",
    "(WorkerDict pid=616, ip=192.168.149.159) ",
    "(VllmWorker rank=0 pid=2120280) ",
    "(EngineCore_DP0 pid=456)",
    "(pid=12) ",
    "(raylet) ",
    "(autoscaler +1m2s) ",
    "(autoscaler) ",
    "2026-11-24T05:09:01.123456789Z ",
    "2026-11-24T05:09:01Z stdout F ",
    "2026-11-24T05:09:01,5+01:00 stderr P ",
    "2026-11-24T05:09:01-0530 ",
    "[2026-01-31T04:40:19Z] ",
    "INFO 11-24 05:09:01 [api_server.py:1234] ",
    "WARNING 11-24 05:09:01.5 core.py:70] ",
    "CRITICAL 11-24 05:09:01 [v1/engine/core.py:700] ",
    "sglang-1  | ",
    "trainer_1 | 2026-11-24T05:09:01.1Z [rank1]: ",
]
MESSAGES = ["", "x", '  File "x.py", line 3, in f', "RuntimeError: boom", "\r", "\r\n", "\n", " | a"]
# Where a C character could be read as Python would not: non-ASCII digits, letters and spaces where ASCII ones go
# (Arabic-Indic and full-width digits are str.isdigit but not re.ASCII's \d), and line ends.
ODD = [
    "",
    " ",
    "\r\n",
    "[rank٣]: x",
    "[rank３]: x",
    "[rank3]:\u3000x",
    "[rank3]:\x85x",
    "[rank3]:\r\n",
    "[ünïcode] x",
    "[aü] x",
    "(Wörker pid=1) x",
    "(W pid=١) x",
    "(W pid=1)\u00a0x",
    "٢٠٢٦-11-24T05:09:01Z x",
    "2026-11-24T05:09:01.١Z x",
    "2026-11-24T05:09:01.1234567890Z x",
    "2026-11-24T05:09:01.Z x",
    "2026-11-24T05:09:01Z\r\n",
    "2026-11-24T05:09:01Z stdout F\r\n",
    "2026-11-24T05:09:01Z stdout X x",
    "INFO ١١-24 05:09:01 [a.py:1] x",
    "INFO 11-24 05:09:01 [a.py:١] x",
    "INFO 11-24 05:09:01. [a.py:1] x",
    "INFO 11-24 05:09:01 [a.py:1]\r\n",
    "ｓglang | x",
    "sglang\u3000 | x",
    "sglang |\r\n",
    "éa | x",
    "a" * 100 + " | x",
    "a" * 90 + " | x",
    "(" + "=" * 3,
    "(raylet)",
    "(autoscaler +",
    "(autoscaler +x)",
    "[rank3]: " * 8 + "x",
]


def _cases() -> list[str]:
    out = list(ODD)
    for whole in WHOLE:
        for cut in range(len(whole) + 1):
            for message in MESSAGES:
                out.append(whole[:cut] + message)
    return out


CASES = _cases()


def test_the_interpreted_text_reads_each_line_as_the_expressions_do() -> None:
    for text in CASES:
        assert INTERPRETED.split_prefix(text) == by_expressions(text), repr(text)


@pytest.mark.skipif(not COMPILED, reason="prefixes is not compiled here")
def test_the_compiled_text_reads_each_line_as_the_interpreted_one() -> None:
    for text in CASES:
        assert imported.split_prefix(text) == INTERPRETED.split_prefix(text), repr(text)


@pytest.mark.skipif(not COMPILED, reason="prefixes is not compiled here")
def test_the_compiled_split_at_writes_the_tag_it_returns_the_body_of() -> None:
    out = imported.Split()
    for text in CASES:
        pos = imported.split_at(text, out)
        assert (out.tag, text[pos:]) == INTERPRETED.split_prefix(text), repr(text)


_PIECES = st.sampled_from([*WHOLE, *MESSAGES, "[", "(", ")", "]", ":", "=", ",", " ", "|", "٣", "ü", "T", "-", "9"])


@settings(max_examples=800, deadline=None)
@given(st.one_of(st.text(max_size=60), st.lists(_PIECES, max_size=8).map("".join)))
def test_any_text_is_read_alike_by_the_expressions_and_both_runs(text: str) -> None:
    want = by_expressions(text)
    assert INTERPRETED.split_prefix(text) == want
    assert imported.split_prefix(text) == want
