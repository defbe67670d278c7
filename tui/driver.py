"""Textual's terminal driver, telling a lone Escape from the key typed after it.

Textual's parser reads ``Esc`` then ``q`` arriving together (tmux's ``send-keys Escape q``, or a quick hand: both
within its 100 ms) as one ``alt+q`` that nothing is bound to, so the Escape that should have closed a dialog and the
``q`` that should have quit were both lost. The dashboard binds no Alt key, so a key that arrives as Alt and a
printable character is handed on as the two keys it was typed as: Escape, then the character. Everything else,
the input thread included, is Textual's own ``LinuxDriver`` (macOS uses it too), through its public
``process_message``.

That input thread waits on the terminal with a 0.1 s timeout (ten wake-ups a second, to notice that it should stop
and to time out a lone Escape): about 0.17 % of a core on an idle dashboard (issue 35). The loop that slept until
there was input copied Textual's own with four of its private modules, which a Textual release could break without
an error; Textual offers no public way to change that timeout, so the wake-ups are its cost (bench/RESULTS.md §9).
"""

from __future__ import annotations

import unicodedata

from textual import events
from textual.drivers.linux_driver import LinuxDriver
from textual.keys import ASCII_KEY_NAMES, KEY_NAME_REPLACEMENTS
from textual.message import Message

__all__ = ["KeySplittingDriver", "split_alt_key"]

ESC = "\x1b"


def key_of(character: str) -> str:
    """The name Textual gives the key that types ``character`` (``q``, ``Q``, ``question_mark``, ``slash``)."""
    if character.isalnum():
        key = character
    else:
        try:
            key = unicodedata.name(character).lower().replace("-", "_").replace(" ", "_")
        except ValueError:
            key = ASCII_KEY_NAMES.get(character, character)
    return KEY_NAME_REPLACEMENTS.get(key, key)


def split_alt_key(key: events.Key) -> list[events.Key]:
    """``key`` as the keys it was typed as: an Alt-modified printable character is an Escape and that character."""
    char = key.character
    if key.key.startswith("alt+") and char is not None and len(char) == 1 and char.isprintable():
        return [events.Key("escape", ESC), events.Key(key_of(char), char)]
    return [key]


class KeySplittingDriver(LinuxDriver):
    """A :class:`LinuxDriver` that hands an Escape typed with the next key on as two keys."""

    def process_message(self, message: Message) -> None:
        if isinstance(message, events.Key):
            for key in split_alt_key(message):
                super().process_message(key)
            return
        super().process_message(message)
