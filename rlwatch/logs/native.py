"""Whether the compiled event path (``rlwatch.logs._eventpath``) is used, and the module when it is.

It is built at install where a C compiler and Cython are found (``setup.py``); ``RLWATCH_NATIVE=0`` runs the Python
modules instead (``events``, ``incidents``, ``prefixes``, ``timestamps``, ``training``, ``learning``), which are the
reference: ``tests/logs/test_native_equivalence.py`` compares both.
"""

from __future__ import annotations

import os
from functools import cache
from types import ModuleType

__all__ = ["event_path"]


@cache
def event_path() -> ModuleType | None:
    """The compiled event path, or None (not built, or switched off by ``RLWATCH_NATIVE=0``)."""
    if os.environ.get("RLWATCH_NATIVE", "1") == "0":
        return None
    try:
        from rlwatch.logs import _eventpath
    except ImportError:  # not built: no compiler or no Cython at install
        return None
    return _eventpath
