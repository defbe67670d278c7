"""The literals of an expression: strings of which one occurs in every line it matches.

The matcher (:mod:`rlwatch.logs.matcher`) looks for a kind's literals in raw bytes before it runs the kind's
expression; the built-in kinds name theirs, and a user's expression has them worked out here, by
``required_literals``. Apart from the matcher so that the kinds (:mod:`rlwatch.logs.kinds`), which the matcher
reads, can use it without the two importing each other.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants
    import sre_parse

__all__ = ["required_literals", "sequence_literals"]

_MIN_LITERAL = 2
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT}
_REPEATS.update(getattr(sre_constants, name) for name in ("POSSESSIVE_REPEAT",) if hasattr(sre_constants, name))


def _better(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Prefer the alternative set whose shortest member is longest (fewer spurious hits), then fewer members."""
    if a is None:
        return b
    if b is None:
        return a
    ka = (min(map(len, a)), -len(a))
    kb = (min(map(len, b)), -len(b))
    return b if kb > ka else a


def sequence_literals(items: list[tuple[Any, Any]], state: list[bool]) -> tuple[str, ...] | None:
    """Strings of which one must occur in any match of the parsed sequence ``items`` (the compiled event path asks
    it of a kind's expression too)."""
    best: tuple[str, ...] | None = None
    run: list[str] = []
    for op, av in [*items, (None, None)]:
        if op is sre_constants.LITERAL:
            run.append(chr(av))
            continue
        if run:
            best = _better(best, ("".join(run),))
            run = []
        if op is sre_constants.SUBPATTERN:
            if av[1] & re.IGNORECASE:
                state[0] = True
            best = _better(best, sequence_literals(list(av[3]), state))
        elif op is sre_constants.BRANCH:
            alternatives = [sequence_literals(list(branch), state) for branch in av[1]]
            if all(alt is not None for alt in alternatives):
                merged = tuple(dict.fromkeys(s for alt in alternatives if alt is not None for s in alt))
                best = _better(best, merged)
        elif op in _REPEATS and av[0] >= 1:
            best = _better(best, sequence_literals(list(av[2]), state))
    return best


def required_literals(pattern: str, flags: int = 0) -> tuple[tuple[str, ...], bool]:
    """(literals, ignore_case) for a user's expression: strings of which one occurs in every match.

    Returns no literals when none can be proven (the kind is then tried on every line, which is slow but right).
    """
    try:
        parsed = sre_parse.parse(pattern, flags)
    except (re.error, ValueError, TypeError, OverflowError, RecursionError):
        return (), bool(flags & re.IGNORECASE)
    state = [bool(parsed.state.flags & re.IGNORECASE)]
    try:
        found = sequence_literals(list(parsed.data), state)
    except RecursionError:
        found = None
    if found is None or min(map(len, found)) < _MIN_LITERAL:
        return (), state[0]
    return found, state[0]
