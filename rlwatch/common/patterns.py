"""A user's regular expression, run so that its author cannot make it take for ever.

Python's ``re`` backtracks: ``^(a+)+$`` over a line of forty ``a`` and a ``!`` takes longer than any run lasts, one
core busy, and rlwatch reads no further line. A person's own configuration may use all of Python's syntax; a file
rlwatch does not trust (another user could have written it, :mod:`rlwatch.common.trust`) may not stop root's
``report`` or ``watch`` that way. Its expressions are compiled by RE2 (the ``google-re2`` package), whose time is
linear in the line's length whatever the expression. RE2 has no backreferences and no lookaround: such an expression
cannot be bounded, and is refused with RE2's reason (:func:`bounded_problem`), never run by ``re`` instead.

The two agree on what matches for the syntax they share, except where RE2 is the narrower: its ``\\d``, ``\\w``,
``\\s`` and ``\\b`` are ASCII. The literal prefilters worked out from an expression (``rlwatch.logs.matcher``) are
Python's reading, which RE2's matches always satisfy, so a line is never skipped that RE2 would have matched.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Protocol

__all__ = ["BoundedPattern", "Pattern", "bounded_problem", "compile_pattern"]

_FLAGS = re.IGNORECASE  # the only flag a configuration can ask for (ignore_case); the rest are written inline


class Pattern(Protocol):
    """What rlwatch asks of a compiled expression: ``re.Pattern[str]`` and :class:`BoundedPattern` both are one."""

    @property
    def pattern(self) -> str: ...

    @property
    def flags(self) -> int: ...

    def search(self, string: str, /) -> object | None: ...


@functools.cache
def _re2() -> Any:
    """The RE2 module, imported when a first untrusted expression needs it (a trusted run never pays for it); None
    where it is missing (a declared dependency: then an untrusted file's expressions are refused, never run by re)."""
    try:
        import re2  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover
        return None
    return re2


def _options(flags: int) -> Any:
    options = _re2().Options()
    options.log_errors = False  # RE2 would print each refused expression to stderr; the caller says why, once
    options.case_sensitive = not flags & re.IGNORECASE
    return options


def _reason(exc: Exception) -> str:
    text = exc.args[0] if exc.args else exc
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text) or type(exc).__name__


class BoundedPattern:
    """An expression RE2 runs: :meth:`search` takes time linear in the line, whatever the expression says.

    ``pattern`` and ``flags`` read as ``re.Pattern``'s do. ``flags`` holds ``re.ASCII``, which is what RE2's classes
    are, and which keeps the matcher and the compiled event path from deciding the expression by Python's reading of
    it (a plain alternation of literals, ``rlwatch/logs/_eventpath.pyx``'s literal programs): both paths ask
    :meth:`search`, so both count the same lines.
    """

    __slots__ = ("_search", "flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        why = bounded_problem(pattern, flags)
        if why is not None:
            raise ValueError(why)
        self.pattern = pattern
        self.flags = (flags & _FLAGS) | re.ASCII
        self._search = _re2().compile(pattern, options=_options(flags)).search

    def search(self, string: str, /) -> object | None:
        return self._search(string)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"BoundedPattern({self.pattern!r})"


def bounded_problem(pattern: str, flags: int = 0) -> str | None:
    """Why RE2 cannot run ``pattern`` (a backreference, a lookaround, a repetition too large), or None when it can."""
    if flags & ~_FLAGS:
        return "only ignore_case can be asked of a bounded expression"
    if _re2() is None:
        return "RE2 (the google-re2 package) is not installed, and only RE2 runs an untrusted file's expressions"
    try:
        _re2().compile(pattern, options=_options(flags))
    except Exception as exc:  # RE2's error type, or TypeError/ValueError on odd input: all one refusal
        return f"RE2 cannot run it ({_reason(exc)})"
    return None


def compile_pattern(pattern: str, flags: int = 0, *, bounded: bool) -> Pattern:
    """``pattern`` compiled by RE2 when ``bounded`` (an untrusted file's), else by ``re`` (all of Python's syntax).

    A bounded expression RE2 cannot run raises ``ValueError`` with the reason: where configurations are loaded such
    an expression is dropped, with that reason, before anything compiles it (rlwatch.discover.load).
    """
    if bounded:
        return BoundedPattern(pattern, flags)
    return re.compile(pattern, flags)
