"""Globs with ``**`` that no directory tree can exhaust.

Python's ``glob(recursive=True)`` (before 3.12 ``os.walk`` too) descends a tree by recursion: a directory 1500
levels deep — anyone who can write under the run directory can make one in a second — ends ``report`` and ``watch``
in a ``RecursionError``. Here ``**`` is walked with a stack of its own, as glob means it (zero or more directories,
hidden ones skipped), never through a symbolic link to a directory (a loop would never end). The rest of the
pattern is matched by ``glob`` itself, one level at a time.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

__all__ = ["glob_paths", "iglob"]


def _subdirs(directory: str) -> list[str]:
    try:
        with os.scandir(directory) as it:
            return [e.path for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def iglob(pattern: str) -> Iterator[str]:
    """The paths ``pattern`` matches, ``**`` standing for any number of directories (as ``recursive=True``)."""
    parts = pattern.split(os.sep)
    if "**" not in parts:
        yield from glob.iglob(pattern)
        return
    i = parts.index("**")
    head = os.sep.join(parts[:i]) or (os.sep if pattern.startswith(os.sep) else os.curdir)
    rest = os.sep.join(parts[i + 1 :])
    bases = glob.glob(head) if glob.has_magic(head) else [head]
    for base in bases:
        if not os.path.isdir(base):
            continue
        stack = [base]
        while stack:
            directory = stack.pop()
            if rest:
                below = os.path.join(glob.escape(directory), rest)
                yield from (p.removeprefix(os.curdir + os.sep) if i == 0 else p for p in iglob(below))
            else:
                yield directory if directory == base else directory + os.sep
            stack.extend(sorted(_subdirs(directory), reverse=True))


def glob_paths(pattern: str) -> list[str]:
    """:func:`iglob` as a list, each path once."""
    return list(dict.fromkeys(iglob(pattern)))
