"""Whether the compiled event path (``rlwatch.logs._eventpath``) is used, and the module when it is.

It is built at install where a C compiler and Cython are found (``setup.py``); ``RLWATCH_NATIVE=0`` runs the Python
counter (``events``) instead, which is the reference: ``tests/logs/test_native_equivalence.py`` compares both. The
rule modules compiled from their own text (setup.py's ``COMPILED``: ``prefixes``, ``timestamps``, ``signatures``,
``incidents``, ``areal_lines``, ``torchrun_report``, ``counting``) run compiled on both paths where they were
built, and as their .py where not.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from types import ModuleType

__all__ = ["event_path", "which"]


@cache
def event_path() -> ModuleType | None:
    """The compiled event path, or None (not built, or switched off by ``RLWATCH_NATIVE=0``)."""
    if os.environ.get("RLWATCH_NATIVE", "1") == "0":
        return None
    try:
        from rlwatch.logs import _eventpath
    except ImportError:  # not built: no compiler or no Cython at install
        return None
    except AttributeError:
        # built, but a rule module it cimports was not (an optional extension that failed to compile: Cython's
        # import asks the .py for its C functions and finds none): the Python path runs, as where nothing was built
        return None
    return _eventpath


def which() -> str:
    """Which event path and line counter run, in words (``rlwatch --version`` says it): so a person can tell whether
    the wheel or the build gave them the compiled ones, and why not."""
    from rlwatch.logs.newlines import NATIVE as COUNTER

    counter = "line counter: " + ("compiled" if COUNTER else "Python")
    if os.environ.get("RLWATCH_NATIVE", "1") == "0":
        return f"event path: Python (RLWATCH_NATIVE=0); {counter}"
    if event_path() is None:
        if importlib.util.find_spec("rlwatch.logs._eventpath") is not None:
            return f"event path: Python (built, but a rule module it needs was not compiled); {counter}"
        return f"event path: Python (not built: no C compiler at install and no wheel for this platform); {counter}"
    return f"event path: compiled; {counter}"
