# cython: boundscheck=False, wraparound=False, annotation_typing=False
# (for Cython: every index below is within its str and never negative; the C types are in the .pxd)
"""What a failure is known by, read alike by the incident tracker and by torchrun's report: a traceback's header, its
frames, the messages between the links of a chained exception, its final exception line (type and message), a
frame's location, and a signature over them.

Each incident carries a signature that stays the same for the same failure in another file or on another host, so a
fleet view can say "the same crash everywhere": what differs between occurrences (addresses, paths, numbers) is
blanked out before the parts are hashed.

The line rules here (``header``, ``frame``, ``chain``, ``exception``) are the one text of both paths: Cython compiles
this file (setup.py's ``COMPILED``; the C types are in ``signatures.pxd`` beside it) and the compiled event path
cimports them, and the same text runs interpreted where nothing is compiled. So they are written over ``str``
indices, one character at a time compared with one-character literals, which compiles to C comparisons; each says
the expression it reads as (``re``'s unicode classes: ``\\s`` is ``str.isspace``, ``\\d`` ``str.isdecimal``,
``\\w`` ``str.isalnum`` or ``_``), and ``tests/logs/test_native_equivalence.py`` holds them to those expressions.
"""

from __future__ import annotations

import functools
import hashlib
import re

from rlwatch.logs import textscan, wording

__all__ = ["TITLE_MSG_CHARS", "chain", "exception", "frame", "header", "location", "signature"]

_TB_HEADER = wording.TRACEBACK_HEADER
_FRAME_FILE = wording.FRAME_FILE
_FRAME_LINE = wording.FRAME_LINE
_CHAIN_CONTEXT = wording.CHAIN_CONTEXT
_CHAIN_CAUSE = wording.CHAIN_CAUSE
_EXCEPTION_ENDINGS = tuple(wording.EXCEPTION_NAME_ENDINGS)
# A character of each compared before the whole text is: most lines fail there, without a call.
_TB_END = _TB_HEADER[len(_TB_HEADER) - 1]
_FRAME_FIRST = _FRAME_FILE[0]
_CONTEXT_FIRST = _CHAIN_CONTEXT[0]
_CAUSE_FIRST = _CHAIN_CAUSE[0]
# Their lengths as C integers when compiled: asking a module global str for its length touches the object (a cache
# miss on its reference count on most lines of a dense log), where a C constant costs nothing.
_TB_HEADER_N = len(_TB_HEADER)
_FRAME_FILE_N = len(_FRAME_FILE)
_FRAME_LINE_N = len(_FRAME_LINE)
_CHAIN_CONTEXT_N = len(_CHAIN_CONTEXT)
_CHAIN_CAUSE_N = len(_CHAIN_CAUSE)

TITLE_MSG_CHARS = 200


@functools.lru_cache(maxsize=1024)
def _normalise(message: str) -> str:
    """The message with what differs between occurrences (addresses, paths, numbers) blanked out. Remembered: in an
    incident the same few messages come back tens of thousands of times, and four substitutions each cost more than
    the rest of their line's reading."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", message)
    text = re.sub(r"(?:[A-Za-z]:)?(?:[\w.~-]*/)+([\w.-]+)", r"\1", text)
    text = re.sub(r"\d+", "N", text)
    return re.sub(r"\s+", " ", text).strip()[:TITLE_MSG_CHARS]


def signature(*parts: str | None) -> str:
    """A short stable id over normalised parts."""
    joined = "\x1f".join(_normalise(p) if p else "" for p in parts)
    return hashlib.sha1(joined.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()[:12]


def _space_end(text: str, i: int) -> bool:
    """``\\s*$`` matches at ``i``: only spaces from there (``$`` may stand before a final newline, a space too)."""
    n = len(text)
    while i < n:
        if not text[i].isspace():
            return False
        i += 1
    return True


def _skip_space(text: str, i: int) -> int:
    """Where the spaces at ``i`` end (``\\s*``)."""
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    return i


def header(body: str) -> bool:
    """``Traceback \\(most recent call last\\):\\s*$`` found in ``body``. The header ends in ":", no space, so a
    match can only end where the spaces at the end of the line begin: it is looked for there, not searched."""
    e = len(body)
    while e > 0 and body[e - 1].isspace():
        e -= 1
    n = _TB_HEADER_N
    return e >= n and body[e - 1] == _TB_END and textscan.startswith(body, _TB_HEADER, e - n)


def chain(body: str) -> bool:
    """The message between two links of a chained exception, alone on its line:
    ``^\\s*(?:During handling … occurred:|The above exception … exception:)\\s*$``."""
    i = _skip_space(body, 0)
    if i == len(body):
        return False
    c = body[i]
    if c == _CONTEXT_FIRST and textscan.startswith(body, _CHAIN_CONTEXT, i):
        return _space_end(body, i + _CHAIN_CONTEXT_N)
    if c == _CAUSE_FIRST and textscan.startswith(body, _CHAIN_CAUSE, i):
        return _space_end(body, i + _CHAIN_CAUSE_N)
    return False


def frame(body: str) -> tuple[str, str] | None:
    """A traceback's frame line, its file and line number: ``^\\s*File "([^"]*)", line (\\d+)``."""
    n = len(body)
    i = _skip_space(body, 0)
    if i == n or body[i] != _FRAME_FIRST or not textscan.startswith(body, _FRAME_FILE, i):
        return None
    a = i + _FRAME_FILE_N
    b = textscan.find_char(body, '"', a, n)  # [^"]* ends at the first quote, where the line's part must begin
    if b < 0 or not textscan.startswith(body, _FRAME_LINE, b):
        return None
    c = b + _FRAME_LINE_N
    i = c
    while i < n and textscan.isdecimal(body[i]):
        i += 1
    if i == c:
        return None
    return textscan.cut(body, a, b), textscan.cut(body, c, i)


def location(file: str, line: str) -> str:
    """A frame's file (its base name) and line number."""
    n = len(file)
    base = textscan.cut(file, textscan.rfind_char(file, "/", 0, n) + 1, n)
    return f"{base or file}:{line}"


def _ident_start(c: str) -> bool:
    """``[A-Za-z_]``."""
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or c == "_"


def _word(c: str) -> bool:
    """``\\w``: ASCII letters, digits and ``_`` compared, any other character asked."""
    if c < "\x80":
        return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c == "_"
    return c.isalnum()


def exception(line: str) -> tuple[str, str] | None:
    """(type, message) when ``line`` is the final line of a traceback: ``RuntimeError: msg``,
    ``torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ``, ``KeyboardInterrupt``; read as
    ``^([A-Za-z_]\\w*(?:\\.[A-Za-z_]\\w*)*)(?::\\s?(.*))?$``, whose name part ends where it can (the next character
    is ":" or the end, or no match)."""
    n = len(line)
    if n == 0 or not _ident_start(line[0]):
        return None
    i = 1
    last_start = 0
    while True:
        while i < n and _word(line[i]):
            i += 1
        if i + 1 < n and line[i] == "." and _ident_start(line[i + 1]):
            last_start = i + 1
            i += 2
            continue
        break
    name_end = i
    if i == n or (i == n - 1 and line[i] == "\n"):  # `$`: the end, or before a final newline
        message = ""
    else:
        if line[i] != ":":
            return None
        i += 1
        if i < n and line[i].isspace():
            i += 1
        k = textscan.find_char(line, "\n", i, n)  # (.*)$: no newline but a final one
        if k >= 0 and k != n - 1:
            return None
        # the message stripped (str.strip: its own spaces, as str.isspace says) and cut once
        k = n if k < 0 else k
        while i < k and line[i].isspace():
            i += 1
        while k > i and line[k - 1].isspace():
            k -= 1
        message = textscan.cut(line, i, k)
    # Logger levels ("WARNING: ...") share the shape; Python exception names are never all capitals. A lowercase
    # ASCII letter settles it (str.upper changes it, whatever else the name holds); without one, an ASCII name is all
    # capitals and any other is asked. Read in place: the last part is cut only where a question needs it.
    for k in range(last_start, name_end):
        if "a" <= line[k] <= "z":
            break
    else:
        last = line[last_start:name_end]
        if last.isascii() or last.upper() == last:
            return None
    if not (("A" <= line[last_start] <= "Z") or line[last_start:name_end].endswith(_EXCEPTION_ENDINGS)):
        return None
    return textscan.cut(line, 0, name_end), message
