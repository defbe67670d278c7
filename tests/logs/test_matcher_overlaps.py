"""Where one needle may begin inside another (the matcher's ``_overlaps``): the table built from the needles'
prefixes says what comparing every cut of every pair says, in the same order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rlwatch.config.models import EventsConfig
from rlwatch.logs.kinds import build_kinds
from rlwatch.logs.matcher import Matcher, _overlaps


def _every_cut(needles: list[bytes]) -> dict[bytes, list[tuple[int, bytes]]]:
    out: dict[bytes, list[tuple[int, bytes]]] = {}
    for a in needles:
        for b in needles:
            for cut in range(1, min(len(a), len(b))):
                if a[len(a) - cut :] == b[:cut]:
                    out.setdefault(a, []).append((len(a) - cut, b))
    return out


def test_the_builtin_kinds_needles() -> None:
    needles = Matcher(build_kinds(EventsConfig()))._needles
    expected = _every_cut(needles)
    assert expected  # "Train step" and "step:" and the like: there are overlaps to find
    assert _overlaps(needles) == expected
    assert list(_overlaps(needles)) == list(expected)


@given(st.lists(st.text(alphabet="ab:", min_size=1, max_size=8).map(str.encode), unique=True, max_size=12))
def test_any_needles(needles: list[bytes]) -> None:
    needles = sorted(needles)
    assert _overlaps(needles) == _every_cut(needles)
