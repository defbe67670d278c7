"""Line numbers not known yet are shown as such, never as a number (the preview of a big backlog)."""

from __future__ import annotations

from rlwatch.common.state import UNCOUNTED, line_number, line_ref


def test_a_known_line_is_shown_with_its_number() -> None:
    assert line_number(5123) == 5123
    assert line_ref("/runs/a/trainer.log", 5123) == "trainer.log:5123"


def test_a_line_not_counted_yet_is_a_question_mark_and_null() -> None:
    for n in (UNCOUNTED + 1, UNCOUNTED + 80_000):
        assert line_number(n) is None
        assert line_ref("/runs/a/trainer.log", n) == "trainer.log:?"
