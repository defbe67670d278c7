"""The bounded ``str`` searches the rule modules make, each one name for both paths.

The rule modules (setup.py's ``COMPILED``) are compiled by Cython from their own .py text. Cython turns
``text.find(sub, start, end)`` and ``text.startswith(prefix, start)`` into CPython's own search, but often hands it
a C integer bound only after making it a Python int and reading it back (a ``PyLong_FromSsize_t`` and an index
conversion per bound, per call; perf shows it on every stamped line). So the rules call these names instead, as
``textscan.find_char(text, ":", a, b)``: the .py imports this module and its .pxd cimports it under the same name
(as ``numpy`` is imported and cimported), so interpreted the call is ``str``'s own method, nothing in between, and
compiled it is an inline C function from ``textscan.pxd`` over the same CPython search with the bounds passed as C
integers. This module itself is never compiled: the .pxd is read where a rule module cimports it. Each answers
exactly what the method it names answers.
"""

from __future__ import annotations

__all__ = ["cut", "find", "find_char", "isdecimal", "isprintable", "rfind_char", "startswith"]

# str.find(sub, start, end): where sub first begins in text[start:end], or -1.
find = str.find
# str.find for a one-character sub.
find_char = str.find
# str.rfind for a one-character sub.
rfind_char = str.rfind
# str.startswith(prefix, start) for one prefix: whether text[start:] begins with it.
startswith = str.startswith
# str.isdecimal of one character (re's \d).
isdecimal = str.isdecimal
# str.isprintable of a whole text (an evidence line's test before its control sequences are removed).
isprintable = str.isprintable


def cut(text: str, start: int, end: int) -> str:
    """``text[start:end]`` for ``0 <= start``: the part of a line a rule hands on (a frame's file, a message). A call
    here (the one name that is not a str method: a slice has none), compiled CPython's own substring."""
    return text[start:end]
