"""Numbers read from files and libraries we do not control: a finite value, or None; never an exception.

JSON allows integers of any size, and ``float(10**400)`` raises OverflowError: a reader that promises never to raise
must not call it unguarded.
"""

from __future__ import annotations

import math


def finite_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        result = float(value)
    except OverflowError:
        return None
    return result if math.isfinite(result) else None


def finite_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    result = finite_float(value)
    return None if result is None else int(result)
