"""Line numbers far into a big file, counted on other cores.

Diagnosis first (``rlwatch.engine.preview``) counts the newest part of a big backlog before the rest; the line
numbers it shows must be exact, so it needs the number of lines before that part. Reading a 2 GiB prefix takes
a core a quarter of a second with the compiled counter (``rlwatch.logs.newlines``; about a second without it),
which the log loop and the dashboard's start must not wait for; so the prefix is cut into one range per core and
each is counted by a child process (this module's ``main``, in ``python -I``). ``wc -l`` counts only ``\\n``, and
rlwatch numbers lines as universal newlines do (a bare ``\\r`` ends a line: tqdm's progress bars).

Only the standard library and ``newlines`` are imported: the child starts in tens of milliseconds.
"""

from __future__ import annotations

import itertools
import mmap
import os
import subprocess
import sys
import time
from collections.abc import Sequence

from rlwatch.logs.newlines import NATIVE, RangeCount, count_file_range

__all__ = ["PrefixCount", "RangeCount", "count_mapped"]


# The child imports this module from the folder the parent imported rlwatch from: installed or a checkout on
# PYTHONPATH alike. ``-I`` keeps the environment, the user's site and the working directory (which others may be
# able to write) out of its import path.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); from rlwatch.logs.linecount import main; sys.exit(main(sys.argv[2:]))"
)


class PrefixCount:
    """The lines in ``[0, end)`` of a file, counted in the background by child processes, one range each.

    ``result()`` answers None until every child has answered, then the count; a child that fails (the file went
    away, no interpreter to start) makes the count unknown for good (``error`` says why), never a guess.
    """

    def __init__(self, path: str, identity: tuple[int, int], end: int, *, workers: int | None = None) -> None:
        self.path = path
        self.end = end
        self.error: str | None = None
        self._answer: int | None = None
        n = max(1, min(workers or os.cpu_count() or 1, 8, end // (64 << 20) + 1))
        cuts = [end * i // n for i in range(n + 1)]
        self._children: list[subprocess.Popen[bytes]] = []
        try:
            for a, b in itertools.pairwise(cuts):
                self._children.append(
                    subprocess.Popen(
                        [sys.executable, "-I", "-c", _CHILD, _ROOT, path, *map(str, (*identity, a, b))],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        close_fds=True,
                    )
                )
        except OSError as exc:
            self.error = f"could not start a line count: {exc.strerror or exc}"
            self.close()

    def result(self) -> int | None:
        """The count once every child answered; None while they count or when it cannot be known."""
        if self._answer is not None or self.error is not None:
            return self._answer
        if any(c.poll() is None for c in self._children):
            return None
        parts: list[RangeCount] = []
        for child in self._children:
            out = child.stdout.read() if child.stdout else b""
            fields = out.split()
            if child.returncode != 0 or len(fields) != 3:
                why = "the file was replaced" if child.returncode == 3 else f"exit status {child.returncode}"
                self.error = f"the line count of {self.path} failed: {why}"
                self.close()
                return None
            parts.append(RangeCount(*(int(f) for f in fields)))
        self.close()
        self._answer = _join(parts)
        return self._answer

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the count (the children's exit, not a poll): ``result()`` then."""
        deadline = time.monotonic() + timeout
        for child in self._children:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return None
        return self.result()

    def close(self) -> None:
        """Stop children still counting (they are ours: started by this object) and release their pipes."""
        for child in self._children:
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.stdout:
                child.stdout.close()
        self._children = []


def _join(parts: Sequence[RangeCount]) -> int:
    total = 0
    for i, part in enumerate(parts):
        total += part.lines
        if i and parts[i - 1].last == 0x0D and part.first == 0x0A:
            total -= 1
    return total


def count_mapped(fd: int, start: int, end: int) -> RangeCount:
    """:func:`count_file_range` over a memory map of the range: the pages are counted where they lie in the page
    cache instead of being copied out block by block (about twice as fast here). Only in the child process: a file
    truncated under a map raises SIGBUS, which ends the child (its count then unknown), never rlwatch."""
    from rlwatch.logs._newlines import count_lines  # the Python rules cannot count a map; main() knows

    if end <= start:
        return RangeCount(0, -1, -1)
    base = start - start % mmap.ALLOCATIONGRANULARITY
    with mmap.mmap(fd, end - base, prot=mmap.PROT_READ, offset=base) as mapped:
        mapped.madvise(mmap.MADV_SEQUENTIAL)
        return RangeCount(count_lines(mapped, start - base, end - base), mapped[start - base], mapped[end - base - 1])


def main(argv: Sequence[str]) -> int:
    """``python -m rlwatch.logs.linecount PATH DEV INO START END``: prints ``lines first last`` of that range.

    Exits 3 without counting when PATH is no longer the file (device, inode) that was asked about (rotated).
    """
    path = argv[0]
    dev, ino, start, end = (int(a) for a in argv[1:5])
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (dev, ino):
            return 3
        c = count_mapped(fd, start, min(end, st.st_size)) if NATIVE else count_file_range(fd, start, end)
    finally:
        os.close(fd)
    sys.stdout.write(f"{c.lines} {c.first} {c.last}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
