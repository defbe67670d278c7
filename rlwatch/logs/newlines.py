"""How rlwatch numbers lines: universal newlines, counted by the compiled core when it is built.

A line ends at ``\\n``, ``\\r\\n`` (once) or a bare ``\\r`` (tqdm's progress bars), as Python's universal newlines
have it. Every byte of a backlog passes through a line count (the tailer numbers its chunks; diagnosis first
numbers the newest part of a big file by counting everything before it), so the count is done by a small C
extension, ``rlwatch.logs._newlines``, at several GB/s without the GIL. It is optional: where it was not built (no
compiler when installed) or under ``RLWATCH_NATIVE=0``, the same rules run here in Python, and
``tests/logs/test_newlines.py`` proves both give the same answers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = [
    "NATIVE",
    "RangeCount",
    "complete_end",
    "count_file_range",
    "count_lines",
    "py_count_file_range",
    "py_count_lines",
]

_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class RangeCount:
    """Terminators in one byte range of a file, and what a neighbouring range must know to join it."""

    lines: int
    first: int  # first byte of the range (-1: empty)
    last: int  # last byte of the range (-1: empty)


def py_count_lines(data: bytes, start: int = 0, end: int | None = None) -> int:
    """Terminators in ``data[start:end]`` (``\\r\\n`` counts once; a final ``\\r`` counts)."""
    n = data.count(b"\n", start, end)
    if data.find(b"\r", start, end) >= 0:
        n += data.count(b"\r", start, end) - data.count(b"\r\n", start, end)
    return n


def py_count_file_range(fd: int, start: int, end: int) -> RangeCount:
    """Terminators in bytes ``[start, end)`` of an open file (fewer when the file is shorter)."""
    lines = 0
    first = last = -1
    pos = start
    while pos < end:
        block = os.pread(fd, min(_BLOCK, end - pos), pos)
        if not block:
            break
        if first < 0:
            first = block[0]
        lines += py_count_lines(block)
        if last == 0x0D and block[0] == 0x0A:
            lines -= 1  # the "\r\n" cut between two blocks was counted twice
        last = block[-1]
        pos += len(block)
    return RangeCount(lines, first, last)


def _load() -> ModuleType | None:
    if os.environ.get("RLWATCH_NATIVE", "1") == "0":
        return None
    try:
        from rlwatch.logs import _newlines
    except ImportError:
        return None
    return _newlines


_native = _load()
NATIVE = _native is not None  # whether the compiled core counts (the benchmarks say which one ran)
count_lines = py_count_lines
count_file_range = py_count_file_range
if _native is not None and not TYPE_CHECKING:  # the same signatures (see _newlines.pyi)
    count_lines = _native.count_lines

    def count_file_range(fd: int, start: int, end: int) -> RangeCount:
        return RangeCount(*_native.count_file_range(fd, start, end))


def complete_end(data: bytes) -> int:
    """Length of the prefix of ``data`` made of complete lines.

    A bare ``\\r`` as the very last byte does not end a line yet: a ``\\n`` may follow in the next read.
    """
    nl = data.rfind(b"\n")
    cr = data.rfind(b"\r")
    if cr <= nl:
        return nl + 1
    if cr < len(data) - 1:
        return cr + 1
    return max(data.rfind(b"\n", 0, cr), data.rfind(b"\r", 0, cr)) + 1
