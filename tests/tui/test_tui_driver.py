"""The dashboard's terminal driver: Textual's own, with an Escape typed together with the next key handed on as two
keys. In a real pseudo-terminal: keys, a lone Escape and quitting work; Escape and q arriving in one read close the
findings and quit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual import events

from rlwatch.tui.driver import split_alt_key
from tests.faults.test_self_faults import Terminal, run_dir


def test_an_alt_key_is_the_escape_and_the_key_it_was_typed_as() -> None:
    def keys(key: str, char: str | None) -> list[tuple[str, str | None]]:
        return [(k.key, k.character) for k in split_alt_key(events.Key(key, char))]

    assert keys("alt+q", "q") == [("escape", "\x1b"), ("q", "q")]
    assert keys("alt+shift+q", "Q") == [("escape", "\x1b"), ("Q", "Q")]
    assert keys("alt+question_mark", "?") == [("escape", "\x1b"), ("question_mark", "?")]
    assert keys("alt+ctrl+a", "\x01") == [("alt+ctrl+a", "\x01")]  # no printable key after it: as it came
    assert keys("escape", "\x1b") == [("escape", "\x1b")]
    assert keys("up", None) == [("up", None)]


@pytest.mark.slow
def test_keys_a_lone_escape_and_quitting_work_in_a_terminal(tmp_path: Path) -> None:
    term = Terminal(str(run_dir(tmp_path)))
    try:
        term.wait_for(b"connection_refused")
        mark = len(term.output)
        term.write(b"?")
        term.wait_for(b"rlwatch keys", timeout=10, after=mark)
        assert b"rlwatch keys" in term.output[mark:]
        mark = len(term.output)
        term.write(b"\x1b")  # a lone Escape: told from a sequence by the parser's timeout, then it closes the help
        term.wait_for(b"3 events", timeout=10, after=mark)
        assert b"3 events" in term.output[mark:]  # the panels drawn again where the help was

        term.write(b"q")
        started = time.monotonic()
        assert term.exited(timeout=10) == 0
        assert time.monotonic() - started < 5
    finally:
        term.close()


@pytest.mark.slow
@pytest.mark.parametrize("size", [(40, 120), (24, 80)])
def test_escape_and_q_arriving_together_close_the_findings_and_quit(tmp_path: Path, size: tuple[int, int]) -> None:
    """tmux's ``send-keys Escape q`` over the findings list: one read holding both, which Textual's parser alone
    took for ``alt+q`` (bound to nothing), so the list stayed and the dashboard did not quit."""
    rows, cols = size
    term = Terminal(str(run_dir(tmp_path)), rows=rows, cols=cols)
    try:
        term.wait_for(b"connection_refused")
        mark = len(term.output)
        term.write(b"d")
        term.wait_for(b"Findings (", timeout=10, after=mark)
        term.write(b"\x1bq")
        assert term.exited(timeout=10) == 0
    finally:
        term.close()
