"""The matcher that finds event kinds in bulk log bytes, and the literals it looks for.

A backlog of gigabytes cannot be split into Python strings line by line, so the matcher first looks for the
literals in the raw bytes of a whole chunk in one pass (a compiled alternation, or Hyperscan for big spans when it
is installed), and only the few lines around a hit are decoded, stripped of colour codes and of rank/role prefixes,
and tried against the expressions of the kinds the literals found point to. The literal search sees raw bytes, so a
literal broken in two by a colour code inside it is missed; loggers colour whole lines, which keeps this
theoretical. The literals of a user's expression (strings of which one occurs in every match) are worked out by
:mod:`rlwatch.logs.literals`.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from typing import Any, cast

from rlwatch.logs.kinds import EventKind

__all__ = ["Matcher"]


# ---------------------------------------------------------------------------------------------------- matcher
def _case_variants(literal: str) -> tuple[str, ...]:
    """lower, UPPER and Capitalised spellings of a case-insensitive literal."""
    return tuple(dict.fromkeys((literal.lower(), literal.upper(), literal[:1].upper() + literal[1:].lower())))


def _case_needles(literal: str) -> tuple[str, ...]:
    """Needles that find a case-insensitive literal in raw bytes in its usual spellings.

    An alternation with an inline (?i:...) group is an order of magnitude slower in `re`, so the bulk scan looks
    for the tail of the literal's longest word in lower and upper case: that finds the word written lower case,
    Capitalised or in CAPITALS ("emergency", "Emergency", "EMERGENCY" all contain "mergency" or "MERGENCY").
    Only freak spellings such as "eMeRgEnCy" are found solely when another kind's literal is on the same line.
    """
    words = sorted(re.findall(r"[^\W\d_]{4,}", literal), key=len, reverse=True)
    if not words:
        return _case_variants(literal)
    word = words[0]
    tail = word[1:] if len(word) > 4 else word
    return tuple(dict.fromkeys((tail.lower(), tail.upper())))


# How common a byte is in training logs, measured on AReaL logs (stats tables: spaces, digits, lowercase keys) and
# TRL's metric dicts (quotes). The bulk scan stops at every byte that can start a needle, so needles should start
# with rare bytes; anything not listed (capitals, most punctuation) counts as rare.
_COMMON = {" ": 100, **{d: 70 for d in "0123456789"}}
_COMMON.update(
    zip(
        "eaoptr/_mnc.id-s[gl:;'",
        (75, 74, 72, 72, 71, 68, 66, 64, 60, 60, 58, 58, 58, 55, 55, 55, 50, 50, 48, 48, 45, 45),
        strict=True,
    )
)
_COMMON.update(dict.fromkeys("kuv,]fxhw", 40) | dict.fromkeys('()="|', 32) | dict.fromkeys("qby", 25))
_MIN_NEEDLE = 6  # shorter tails are no longer specific ("ward" is in every reward key)


def _needle(literal: bytes) -> bytes:
    """The tail of ``literal`` (at least six bytes long) that starts at its rarest byte."""
    if len(literal) <= _MIN_NEEDLE:
        return literal
    best = min(range(len(literal) - _MIN_NEEDLE + 1), key=lambda i: (_COMMON.get(chr(literal[i]), 20), i))
    return literal[best:]


def _alternation(needles: Sequence[bytes]) -> bytes:
    """One expression for all needles, grouped by first byte: `re` then tries one branch per distinct first
    byte at each position where the scan stops, instead of one per needle."""
    groups: dict[bytes, list[bytes]] = {}
    for needle in sorted(needles):
        groups.setdefault(needle[:1], []).append(needle[1:])
    return b"|".join(
        re.escape(first) + (b"(?:" + b"|".join(re.escape(rest) for rest in rests) + b")" if rests != [b""] else b"")
        for first, rests in groups.items()
    )


# Below this many bytes `re` is as quick as Hyperscan's call overhead, and live tailing never pays for compiling.
_NATIVE_MIN_BYTES = 256 << 10
_DATABASES: dict[tuple[bytes, ...], Any] = {}  # compiled Hyperscan databases by needle set (read-only once built)
_DATABASES_LOCK = threading.Lock()


# Hyperscan is given at most this many first bytes of each needle: compiling a set that holds longer literals is
# slow (the built-in set took 36 ms with its 28-byte "***** Running training *****", 0.6 ms with every needle cut
# short). It still reports the whole needle. A line that holds the start of a needle and not the rest
# becomes a candidate that the needle's kinds do not match, which changes nothing: every kind is decided by its own
# literals and expression, and a line that matches no kind is counted as nothing (a traceback header holds the
# start of its own needle, so incidents see the same headers).
_NATIVE_NEEDLE_BYTES = 16


class _Hyperscan:
    """The needle search done by Hyperscan (Vectorscan): several GB/s where `re`'s alternation does ~0.4.

    Compiling a database takes a millisecond or more, so one is built per needle set and shared; each matcher has
    its own scratch space, which serves one scan at a time, hence the lock (a matcher is normally fed by one
    thread, so it is never contended).
    """

    def __init__(self, needles: Sequence[bytes]) -> None:
        import hyperscan  # type: ignore[import-not-found,unused-ignore]  # optional: rlwatch[fast]

        self._needles = list(needles)
        heads = [n[:_NATIVE_NEEDLE_BYTES] for n in self._needles]
        self._lengths = [len(h) for h in heads]
        key = tuple(self._needles)
        with _DATABASES_LOCK:
            db = _DATABASES.get(key)
            if db is None:
                db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                db.compile(
                    expressions=heads,
                    ids=list(range(len(heads))),
                    elements=len(heads),
                    flags=0,
                    literal=True,
                )
                while len(_DATABASES) >= 16:
                    _DATABASES.pop(next(iter(_DATABASES)))
                _DATABASES[key] = db
        self._db = db
        self._scratch = hyperscan.Scratch(db)
        self._lock = threading.Lock()

    def hits(self, data: bytes, pos: int, endpos: int) -> list[tuple[int, bytes]]:
        found: list[tuple[int, bytes]] = []
        add = found.append
        needles = self._needles
        start = [pos - n for n in self._lengths]  # Hyperscan reports where a match ends, relative to the view

        def on_match(i: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            add((to + start[i], needles[i]))

        view = data if pos == 0 and endpos >= len(data) else memoryview(data)[pos:endpos]
        with self._lock:
            # The extension takes any buffer; its stubs say str or bytes only.
            self._db.scan(cast(bytes, view), match_event_handler=on_match, scratch=self._scratch)
        found.sort()
        return found


def _native_scanner(needles: Sequence[bytes]) -> _Hyperscan | None:
    """Hyperscan when it is installed, works on this CPU and is not switched off (``RLWATCH_SCANNER=re``)."""
    if os.environ.get("RLWATCH_SCANNER", "").strip().lower() == "re":
        return None
    try:
        return _Hyperscan(needles)
    except Exception:  # not installed, an unsupported CPU, a needle it refuses: `re` does the same job slower
        return None


def _overlaps(needles: Sequence[bytes]) -> dict[bytes, list[tuple[int, bytes]]]:
    """needle a -> [(offset, needle b)] where b may begin inside a at that offset and run past a's end (a proper
    suffix of a is a proper prefix of b), ordered by b's place in ``needles``, then by offset from a's end.

    Found through a table of the needles' proper prefixes, not by comparing every cut of every pair: that was
    90 thousand slices for the built-in kinds, a thirtieth of a second of every start."""
    order = {b: i for i, b in enumerate(needles)}
    starting: dict[bytes, list[bytes]] = {}
    for b in needles:
        for cut in range(1, len(b)):
            starting.setdefault(b[:cut], []).append(b)
    out: dict[bytes, list[tuple[int, bytes]]] = {}
    for a in needles:
        found = [(order[b], cut, b) for cut in range(1, len(a)) for b in starting.get(a[len(a) - cut :], ())]
        if found:
            out[a] = [(len(a) - cut, b) for _, cut, b in sorted(found)]
    return out


class Matcher:
    """Finds candidate lines in a chunk by literal, then decides which kinds a line really is."""

    def __init__(self, kinds: Sequence[EventKind]) -> None:
        self.kinds: tuple[EventKind, ...] = tuple(kinds)
        self._checks: list[tuple[EventKind, tuple[str, ...], bool]] = [
            (k, tuple(s.lower() for s in k.literals) if k.ignore_case else k.literals, _literals_decide(k))
            for k in self.kinds
        ]
        self._unfiltered = tuple(i for i, k in enumerate(self.kinds) if not k.literals)
        self.every_line = bool(self._unfiltered)
        spellings: dict[int, set[bytes]] = {}
        needles: set[bytes] = set()
        for i, k in enumerate(self.kinds):
            for lit in k.literals:
                for variant in _case_variants(lit) if k.ignore_case else (lit,):
                    spellings.setdefault(i, set()).add(variant.encode("utf-8", "surrogatepass"))
                for needle in _case_needles(lit) if k.ignore_case else (lit,):
                    needles.add(_needle(needle.encode("utf-8", "surrogatepass")))
        # A needle that contains another one is redundant: any line with it also has the shorter one.
        minimal = sorted(n for n in needles if not any(o != n and o in n for o in needles))
        self._prefilter: re.Pattern[bytes] | None = re.compile(_alternation(minimal)) if minimal else None
        self._needles = minimal
        self._native: _Hyperscan | None = None
        self._native_tried = not minimal or self.every_line  # built on the first big span, never for live lines
        # Which kinds a needle found in a line can belong to: those with a literal containing that needle.
        self._by_needle: dict[bytes, tuple[int, ...]] = {
            n: tuple(i for i, group in sorted(spellings.items()) if any(n in lit for lit in group)) for n in minimal
        }
        # Kinds to try on a line, by the set of needles found in it (most lines hold one needle).
        self._tries: dict[bytes | frozenset[bytes], tuple[int, ...]] = {n: ks for n, ks in self._by_needle.items()}
        # needle -> (offset, other needle) where the other may begin inside it and run past its end
        self._overlaps = _overlaps(minimal)

    @property
    def scanner(self) -> str:
        """Which engine finds the needles in a backlog: "hyperscan" or "re" (small spans always use `re`)."""
        return "hyperscan" if self._big_scanner() is not None else "re"

    def _big_scanner(self) -> _Hyperscan | None:
        if not self._native_tried:
            self._native_tried = True
            self._native = _native_scanner(self._needles)
        return self._native

    def needle_kinds(self) -> list[tuple[bytes, tuple[int, ...]]] | None:
        """Every needle with the indices of the kinds it points to (None: kinds without literals, every line is
        tried): what the compiled event path searches for."""
        if self.every_line:
            return None
        return [(n, self._by_needle[n]) for n in self._needles]

    def hits(self, data: bytes, pos: int, endpos: int) -> list[tuple[int, bytes]]:
        """Needles in ``data[pos:endpos]`` as (offset, needle), ordered by offset: one pass over a whole chunk.

        No needle holds a line terminator, so every needle a search of one line alone would find is among those
        inside that line's bounds. Every occurrence is reported, those that overlap another too ("Train step:"
        holds "Train step" and "step:"): the expression's search skips past what it found, so a needle that begins
        inside another is looked for there (``_overlaps``), and a kind is never left untried on a line that holds
        its needle.
        """
        if self._prefilter is None or self.every_line:
            return []
        if endpos - pos >= _NATIVE_MIN_BYTES:
            native = self._big_scanner()
            if native is not None:
                return native.hits(data, pos, endpos)
        found = [(m.start(), m.group()) for m in self._prefilter.finditer(data, pos, endpos)]
        overlaps = self._overlaps
        extra: list[tuple[int, bytes]] = []
        for at, needle in found:
            inside = overlaps.get(needle)
            if inside is not None:
                for offset, other in inside:
                    start = at + offset
                    if data.startswith(other, start) and start + len(other) <= endpos:
                        extra.append((start, other))
        if extra:
            found = sorted({*found, *extra})
        return found

    def needle_mask(self, hits: Sequence[tuple[int, bytes]]) -> int:
        """The kinds the needles ``hits`` point to, one bit per kind index: what the compiled path's needle scan
        says of a line (``Needles.mask``)."""
        mask = 0
        for _, needle in hits:
            for i in self._by_needle.get(needle, ()):
                mask |= 1 << i
        return mask

    def match_hits(self, body: str, hits: Sequence[tuple[int, bytes]]) -> list[EventKind]:
        """Like :meth:`match`, trying only the kinds that ``hits`` (the needles found in the line) point to."""
        if not hits:
            return []
        if len(hits) == 1:
            key: bytes | frozenset[bytes] = hits[0][1]
        else:
            key = frozenset(h[1] for h in hits)
            if len(key) == 1:
                key = hits[0][1]
        tries = self._tries.get(key)
        if tries is None:
            assert isinstance(key, frozenset)
            tries = tuple(sorted({i for n in key for i in self._by_needle.get(n, ())}))
            if len(self._tries) < 4096:
                self._tries[key] = tries
        return self._match(body, tries)

    def match_raw(self, raw: bytes, body: str) -> list[EventKind]:
        """Like :meth:`match`, trying only the kinds whose literals occur in the raw line."""
        if self._prefilter is None:
            return self._match(body, self._unfiltered)
        hits = set(self._prefilter.findall(raw))
        if not hits and not self._unfiltered:
            return []
        indices: set[int] = set(self._unfiltered)
        for needle in hits:
            indices.update(self._by_needle.get(needle, ()))
        return self._match(body, sorted(indices))

    def match(self, body: str) -> list[EventKind]:
        """The kinds one line (ANSI-stripped, prefix removed) is an occurrence of."""
        return self._match(body, range(len(self._checks)))

    def _match(self, body: str, indices: Sequence[int]) -> list[EventKind]:
        found: list[EventKind] = []
        lowered: str | None = None
        for i in indices:
            kind, literals, decided = self._checks[i]
            if literals:
                if kind.ignore_case:
                    if lowered is None:
                        lowered = body.lower()
                    hay = lowered
                else:
                    hay = body
                for lit in literals:
                    if lit in hay:
                        break
                else:
                    continue
            if not decided and kind.regex.search(body) is None:
                continue
            if kind.exclude is not None and kind.exclude.search(body) is not None:
                continue
            found.append(kind)
        return found


def _literals_decide(kind: EventKind) -> bool:
    """True when the expression is just its literals, alternated (``_reward``): finding one of them is a match,
    and the expression need not be run over the (often long) line."""
    return (
        bool(kind.literals)
        and not kind.ignore_case
        and kind.regex.flags == re.UNICODE
        and kind.regex.pattern == "|".join(re.escape(lit) for lit in kind.literals)
    )
