"""How a log ends: with progress, with a failure (in its own words), or with neither.

"A log whose last meaningful lines are an error, with no progress after, is a failure whatever words it uses." The
newest lines of each log are read (a bounded tail: never the backlog), and walked back from the end to the last
line that shows progress (:data:`rlwatch.logs.shapes.PROGRESS`). The lines after it are looked at for failure
shapes (:func:`rlwatch.logs.shapes.shape_of`): if the last of them is followed only by lines of a process winding
down (blank lines, frames, shutdown and cleanup words, other failures) the log *ended in* that failure.

The headline is the failure a person names: the last exception line (the outermost, as Python prints chained ones
last), with what the lines around it add — the signal or exit code a launcher reported, Ray's worker exit type —
and the first failure line after the last progress when it differs (often the root cause, the rest its echo).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from rlwatch.common.state import LogEnding
from rlwatch.common.textsafe import clean_line, strip_ansi
from rlwatch.common.trust import open_read
from rlwatch.logs.prefixes import split_prefix
from rlwatch.logs.shapes import ERROR, EXCEPTION, EXIT, KERNEL, RECORD_LEVEL, SIGNAL, Shape, is_progress, shape_of
from rlwatch.logs.timestamps import parse_time

__all__ = ["TAIL_BYTES", "ending_of", "read_ending"]

TAIL_BYTES = 64 * 1024  # the newest lines of a log that its ending is read from
_WIND_DOWN_LINES = 60  # more lines than this after the last failure, none of them winding down: the run went on
_EVIDENCE = 5
# Lines a process prints while it dies or is torn down, after the failure that ended it.
_WIND_DOWN = re.compile(
    r"(?i)shut(?:ting)? ?down|exiting|terminat|clean(?:ing)? ?up|stopping|closing|killing|kill(?:ed)? |"
    r"set the environment variable|for debugging consider|see (?:the )?(?:stack trace|root cause|above|below)|"
    r"waiting for|destroy|traceback|^\s*(?:file |during handling|the above exception)|exit(?:ed)? |"
    r"error_file|exitcode|root cause|^[-=*_#~ ]+$|^\[[a-z_]+\]:?$|^(?:time|host|rank|local_rank|traceback)\s*:|"
    r"core dumped|^\^+$|~~~|^\s*\^|note:|hint:|warning|warn\b|flight ?recorder|resource_tracker|leaked|"
    r"[│╭╰─┃┏┗━]|^frame #\d+|exception raised from|^\*\*\*|stacktrace|stack trace|"
    r"^(?:ray::|c10::|at::|torch::|std::|__libc|0x[0-9a-f]+)"
)
_ESC_LITERAL = re.compile(r"(?:ESC|\^\[|\\x1b|\\033|\\u001b)?\[[0-9][0-9;]*m")  # colour codes pasted as text
# Prefixes the writer-prefix splitter does not take (they carry no writer's name worth keeping): a CI viewer's
# `  | ` gutter, SGLang's `[2025-03-22 01:05:30 TP0] ` (its logging format, with the rank in it).
_EXTRA_PREFIX = re.compile(r"^\s*\| |^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z]+\d+)*\] ")
_HEADER = "Traceback (most recent call last)"
_CONTINUED = "continued"  # a line inside an error record (a frame of a logged traceback): evidence, never a headline
_CUT = "cut"  # a traceback header with no exception line after it: the headline only when nothing else says more


def _body(raw: str) -> tuple[str, bool]:
    """A line's message, and whether a record prefix taken off it said ERROR or worse."""
    text = clean_line(strip_ansi(raw))
    if "[" in text and "m" in text:
        text = _ESC_LITERAL.sub("", text)
    error = False
    for _ in range(4):  # a prefix inside a prefix: `  | [rank0]: (EngineCore pid=1) ERROR …`
        if m := _EXTRA_PREFIX.match(text):
            text = text[m.end() :]
            continue
        tag, body = split_prefix(text)
        if not tag and len(body) == len(text):
            break
        error = error or RECORD_LEVEL.search(text[: len(text) - len(body)]) is not None
        text = body
    return text.strip("\r"), error


def ending_of(
    path: str, lines: Sequence[str], first_lineno: int | None, now: float, mtime: float | None
) -> LogEnding | None:
    """The ending of ``path`` from its newest ``lines`` (numbered from ``first_lineno``, None when the numbers are
    not known). None when the lines hold nothing meaningful."""
    parsed = [_body(line) for line in lines]
    bodies = [b for b, _ in parsed]
    last_meaningful = next((i for i in range(len(bodies) - 1, -1, -1) if bodies[i].strip()), None)
    if last_meaningful is None:
        return None

    def where(i: int) -> int | None:
        return None if first_lineno is None else first_lineno + i

    last_progress = next((i for i in range(len(bodies) - 1, -1, -1) if is_progress(bodies[i])), None)
    start = 0 if last_progress is None else last_progress + 1
    failures: list[tuple[int, Shape]] = []
    header: int | None = None
    for i in range(start, len(bodies)):
        body = bodies[i]
        if not body or body[0] in " \t":
            # Frames and continuation lines are part of what a failure line says, not one of their own; but a
            # launcher's exit report may come indented (rich's log tables) and says what no exception does.
            indented = shape_of(body) if body.strip() else None
            if indented is not None and indented.kind in (SIGNAL, EXIT, KERNEL):
                failures.append((i, indented))
            elif parsed[i][1] and body.strip() and not failures_at(failures, i - 1):
                failures.append((i, Shape(ERROR, body.strip(), detail=_CONTINUED)))  # an error record's next line
            continue
        found = shape_of(body)
        if found is None and parsed[i][1]:
            found = Shape(ERROR, body, detail=_CONTINUED if body.startswith(("File ", "return ")) else None)
        if found is None and _HEADER in body:
            header = i
        if found is not None:
            failures.append((i, found))
    if header is not None and not any(i > header and s.kind == EXCEPTION for i, s in failures):
        # A traceback whose exception line never came: the process died (or the paste ended) while printing it.
        cut = Shape(EXCEPTION, "a crash: a traceback whose exception line is not in the log", "Traceback", detail=_CUT)
        failures.append((header, cut))
        failures.sort(key=lambda f: f[0])
    ended_in = None
    if failures:
        last_i = failures[-1][0]
        after = [b for b in bodies[last_i + 1 :] if b.strip() and b[0] not in " \t" and not _WIND_DOWN.search(b)]
        if len(after) <= _WIND_DOWN_LINES:
            ended_in = failures
    last = bodies[last_meaningful].strip()
    base = dict(
        path=path,
        last_line=last[:300],
        last_lineno=where(last_meaningful),
        last_at=parse_time(last, now),
        mtime=mtime,
        progress_lineno=None if last_progress is None else where(last_progress),
        progress_line=None if last_progress is None else bodies[last_progress].strip()[:300],
    )
    if ended_in is None:
        return LogEnding(failed=False, **base)  # type: ignore[arg-type]
    head_i, head = _headline(ended_in)
    first_i, first = ended_in[0]
    signal = next((s.signal for _, s in reversed(ended_in) if s.signal), None)
    code = next((s.code for _, s in reversed(ended_in) if s.code is not None), None)
    pid = next((s.pid for _, s in reversed(ended_in) if s.pid is not None), head.pid)
    detail = next((s.detail for _, s in reversed(ended_in) if s.detail and s.detail not in (_CONTINUED, _CUT)), None)
    chosen = {head_i, first_i}
    for i, s in reversed(ended_in):
        if len(chosen) >= _EVIDENCE:
            break
        if s.kind in (SIGNAL, KERNEL) or (s.detail and s.detail not in (_CONTINUED, _CUT)) or s.code is not None:
            chosen.add(i)
    evidence = tuple((where(i), bodies[i].strip()[:300]) for i in sorted(chosen))
    when = next((t for i in (head_i, first_i) if (t := parse_time(bodies[i], now)) is not None), None)
    return LogEnding(
        failed=True,
        title=head.text[:300],
        kind=head.kind,
        exc_type=head.exc_type,
        lineno=where(head_i),
        first=None if first_i == head_i else first.text[:300],
        first_lineno=None if first_i == head_i else where(first_i),
        at=when,
        signal=signal,
        code=code,
        pid=pid,
        detail=detail,
        evidence=evidence,
        count=len(ended_in),
        from_outside=_stopped_from_outside(ended_in),
        **base,  # type: ignore[arg-type]
    )


_OUTSIDE_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
_OUTSIDE_TYPES = ("KeyboardInterrupt", "SignalException")  # Ctrl-C; torch elastic's signal-to-exception


def _stopped_from_outside(ended_in: list[tuple[int, Shape]]) -> bool:
    """Whether every line the log ended in says the process was stopped from outside. A traceback cut before its
    exception line says nothing either way (a stop prints one on its way out, and so does a crash whose last line
    never reached the log): beside a stop it is the stop's; alone it is a crash whose exception line is missing."""
    said = [s for _, s in ended_in if s.detail != _CUT]
    return bool(said) and all(_from_outside(s) for s in said)


def _from_outside(s: Shape) -> bool:
    """A line of a process being stopped from outside (a person, a scheduler), not of one failing by itself."""
    if s.kind == SIGNAL and s.signal in _OUTSIDE_SIGNALS:
        return True
    return s.exc_type is not None and s.exc_type.endswith(_OUTSIDE_TYPES)


def failures_at(failures: list[tuple[int, Shape]], i: int) -> bool:
    return bool(failures) and failures[-1][0] == i


def _headline(failures: list[tuple[int, Shape]]) -> tuple[int, Shape]:
    """The line a person names: the last exception (Python prints the outermost of a chain last; Ray's wrapping
    ActorDiedError says which actor), else the last kernel report, signal or exit, else the first error record of
    its own (the first is the cause, those after it its echo; a record's continuation lines name nothing)."""
    for kinds in ((EXCEPTION,), (KERNEL,), (SIGNAL,), (EXIT,)):
        for i, s in reversed(failures):
            if s.kind in kinds and s.detail not in (_CONTINUED, _CUT):
                return i, s
    return next(((i, s) for i, s in failures if s.detail not in (_CONTINUED, _CUT)), failures[-1])


def read_ending(path: str, now: float, read_to: tuple[int, int] | None = None) -> LogEnding | None:
    """The ending of the file at ``path`` from its newest :data:`TAIL_BYTES`; None when it cannot be read or
    holds nothing. ``read_to`` is (offset, number of the next line) where the counter has read the file to: when it
    is the file's end, the tail's lines get their numbers."""
    try:
        with open_read(path) as fh:
            st = os.fstat(fh.fileno())
            start = max(0, st.st_size - TAIL_BYTES)
            fh.seek(start)
            data = fh.read(TAIL_BYTES)
    except OSError:
        return None
    if start > 0:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    first = None
    if start == 0:
        first = 1
    elif read_to is not None and read_to[0] == st.st_size and data.endswith(b"\n") and "\r" not in text:
        first = read_to[1] - len(lines)
    return ending_of(path, lines, first, now, st.st_mtime)
