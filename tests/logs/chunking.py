"""Feeding a counter as the tailer does: complete lines, in chunks of about a given size, numbered."""

from __future__ import annotations

from collections.abc import Iterator

from rlwatch.logs.newlines import count_lines
from rlwatch.logs.tailer import Chunk


def whole_line_chunks(data: bytes, path: str, block: int, backlog_mtime: float | None = None) -> Iterator[Chunk]:
    """``data`` as chunks of complete lines of about ``block`` bytes (the last may end mid-line), each with the
    number of its first line; ``backlog_mtime`` marks them as read from a backlog of that modification time."""
    lineno, pos = 1, 0
    while pos < len(data):
        piece = data[pos : pos + block]
        cut = max(piece.rfind(b"\n"), piece.rfind(b"\r")) + 1
        if cut == 0 or pos + block >= len(data):
            cut = len(piece)
        chunk = piece[:cut]
        n = count_lines(chunk) + (0 if chunk.endswith((b"\n", b"\r")) else 1)
        yield Chunk(path, chunk, lineno, n, backlog_mtime=backlog_mtime)
        lineno += n
        pos += cut
