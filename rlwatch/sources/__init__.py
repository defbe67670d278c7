"""Host sources: memory and OOM kills, GPUs, processes, GPU device holders, inference-server health, disk.

Each source is a plain class or function that reads the host once per call and returns the immutable records of
:mod:`rlwatch.common.state`. A host in a bad way (files missing, permission denied, a process gone between listing and
reading, a GPU fallen off the bus) is exactly when rlwatch is needed, so no source lets such an error escape: the
affected fields become ``None`` and the source keeps a one-line reason in words.
"""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """An exception as the one line a source reports: its message's first line, or its type when it has none."""
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__
