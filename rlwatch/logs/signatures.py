"""What a failure is known by, read alike by the incident tracker and by torchrun's report: a traceback's header, its
final exception line (type and message), a frame's location, and a signature over them.

Each incident carries a signature that stays the same for the same failure in another file or on another host, so a
fleet view can say "the same crash everywhere": what differs between occurrences (addresses, paths, numbers) is
blanked out before the parts are hashed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re

from rlwatch.logs import wording

__all__ = ["HEADER", "TITLE_MSG_CHARS", "exception", "location", "signature"]

HEADER = re.compile(re.escape(wording.TRACEBACK_HEADER) + r"\s*$")
# `RuntimeError: msg`, `torch.distributed.elastic.multiprocessing.errors.ChildFailedError: `, `KeyboardInterrupt`.
_EXC = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::\s?(.*))?$")

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


def location(frame: re.Match[str]) -> str:
    """A frame's file (its base name) and line number."""
    return f"{os.path.basename(frame.group(1)) or frame.group(1)}:{frame.group(2)}"


def signature(*parts: str | None) -> str:
    """A short stable id over normalised parts."""
    joined = "\x1f".join(_normalise(p) if p else "" for p in parts)
    return hashlib.sha1(joined.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()[:12]


def exception(line: str) -> tuple[str, str] | None:
    """(type, message) when ``line`` is the final line of a traceback."""
    m = _EXC.match(line)
    if m is None:
        return None
    name = m.group(1)
    last = name.rsplit(".", 1)[-1]
    # Logger levels ("WARNING: ...") share the shape; Python exception names are never all capitals.
    if last.upper() == last:
        return None
    if not (last[0].isupper() or last.endswith(wording.EXCEPTION_NAME_ENDINGS)):
        return None
    return name, (m.group(2) or "").strip()
