"""Counts said in words a person reads: ``1 timeout error``, ``2 timeout errors``, never ``1 timeout errors`` or
``2 process(es)``. Every view that prints a count of things says it through :func:`plural`."""

from __future__ import annotations

__all__ = ["plural"]

# Nouns whose plural is not the noun and an s.
_IRREGULAR = {"process": "processes", "child": "children", "match": "matches", "address": "addresses"}


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and ``noun`` agreeing: ``plural(1, "target")`` is ``1 target``, ``plural(3, "target")`` ``3 targets``.
    The last word of ``noun`` takes the plural (``timeout error`` → ``timeout errors``); ``many`` spells it where
    the rule does not."""
    if n == 1:
        return f"{n} {noun}"
    if many is None:
        head, _, last = noun.rpartition(" ")
        many = (head + " " if head else "") + _IRREGULAR.get(last, last + "s")
    return f"{n} {many}"
