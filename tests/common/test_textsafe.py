"""Invisible characters in text that leaves rlwatch: every Unicode format character (Cf) and line or paragraph
separator (Zl, Zp) is dropped by each of the three cleaners (a log line, text that leaves rlwatch, a dashboard cell),
the two joiners that scripts and emoji need excepted. The probe's line (its finding N13): U+061C, the Arabic letter
mark, reorders text as U+200F does; U+2028 breaks the line in JSON-based chat renderers."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from rlwatch.common.redact import clean_text, redacted
from rlwatch.common.textsafe import clean_line
from rlwatch.widgets.format import row_text as cell_text

KEPT = {"\u200c", "\u200d"}  # ZWNJ, ZWJ: Persian and the Indic scripts spell with them; emoji sequences join by ZWJ
CLEANERS = [clean_line, clean_text, cell_text]


def _invisible() -> list[str]:
    return [
        chr(c)
        for c in range(sys.maxunicode + 1)
        if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp") and chr(c) not in KEPT
    ]


@pytest.mark.parametrize("clean", CLEANERS)
def test_the_probes_line_loses_its_letter_mark_and_separators(clean: object) -> None:
    assert callable(clean)
    line = "RuntimeError: bidi\u202egnp.exe\u202c and \u2066iso\u2069 alm\u061c ls\u2028sep\u2029par"
    assert clean(line) == "RuntimeError: bidignp.exe and iso alm lssep" + "par"


@pytest.mark.parametrize("clean", CLEANERS)
def test_every_format_character_and_separator_of_unicode_is_dropped(clean: object) -> None:
    assert callable(clean)
    chars = _invisible()
    assert len(chars) > 150  # the interpreter's tables are there: 161 in Unicode 14
    text = "".join(f"a{ch}" for ch in chars)
    assert clean(text) == "a" * len(chars)


@pytest.mark.parametrize("clean", CLEANERS)
def test_joiners_and_ordinary_text_stay(clean: object) -> None:
    assert callable(clean)
    for text in ("می\u200cخواهم", "👩\u200d💻", "क्\u200dष", "naïve café 日本語 ½ α→β"):
        assert clean(text) == text


def test_a_secret_split_by_a_soft_hyphen_is_whole_again_before_it_leaves() -> None:
    assert redacted({"t": "tab\tand\nnewline stay, pass\u00adword\u200b joins"}) == {
        "t": "tab\tand\nnewline stay, password joins"
    }
