"""Textual's terminal driver, with an input thread that sleeps until there is input.

Textual's Linux driver (macOS uses it too) reads keys in a thread that waits on stdin with a 0.1 s timeout: ten
wake-ups a second, so that it notices when it is told to stop and can time out a lone Escape. On an idle dashboard
that thread was 0.17 % of a core, a third of nvitop's whole 0.5 % (issue 35). This driver's thread waits on stdin
and on a pipe that stopping writes to, with a timeout only while the parser holds a sequence that may still turn out
to be a lone key. Everything else is Textual's.

It also tells a lone Escape from the key typed after it. Textual's parser reads ``Esc`` then ``q`` arriving
together (tmux's ``send-keys Escape q``, or a quick hand: both within its 100 ms) as one ``alt+q`` that nothing is
bound to, so the Escape that should have closed a dialog and the ``q`` that should have quit were both lost. A
terminal's own sequences go on from their Escape with ``[`` ``O`` ``]`` ``P`` ``\\`` ``_`` or another Escape; any
other character after an Escape is a key of its own, so the driver hands the parser the Escape alone first and lets
it time out at once. The dashboard binds no Alt key, so nothing is lost.

The thread's loop follows Textual 8.2.8's own ``LinuxDriver.run_input_thread`` (the version is pinned); where the
parser's pending-timeout attribute is missing (another Textual), it is Textual's loop as it is.
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder

from textual._loop import loop_last
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message

__all__ = ["KeyReader", "QuietLinuxDriver", "split_lone_escapes"]

_PARSER_TICK_S = 0.1  # Textual's own select timeout: how soon a pending lone Escape is told apart
ESC = "\x1b"
# What follows the Escape of a sequence a terminal sends: CSI, SS3, OSC, DCS, ST, APC, and Escape itself (an Alt-
# modified sequence). After any other character the Escape was a key pressed on its own.
SEQUENCE_STARTS = frozenset("[O]P\\_" + ESC)


def split_lone_escapes(data: str, escape_pending: bool) -> list[str]:
    """``data`` cut before each character that follows a lone Escape (``escape_pending``: the text before ``data``
    ended with one). Between two pieces the parser is made to give up waiting and report the Escape as a key."""
    cuts = [
        i for i, ch in enumerate(data) if (data[i - 1] == ESC if i else escape_pending) and ch not in SEQUENCE_STARTS
    ]
    pieces: list[str] = []
    start = 0
    for cut in cuts:
        pieces.append(data[start:cut])
        start = cut
    pieces.append(data[start:])
    return pieces


class KeyReader:
    """Textual's parser, fed so that an Escape followed by a key is two keys (see the module's docstring)."""

    def __init__(self, parser: XTermParser) -> None:
        self.parser = parser
        self._escape_pending = False  # the last text fed ended with an Escape that may still be a lone key

    def feed(self, data: str) -> list[Message]:
        parser = self.parser
        out: list[Message] = []
        for n, piece in enumerate(split_lone_escapes(data, self._escape_pending)):
            if n and parser._timeout_time is not None:
                parser._timeout_time = 0.0  # the Escape before this piece was a key: report it now
                out.extend(parser.tick())
            if piece:
                out.extend(parser.feed(piece))
        self._escape_pending = data.endswith(ESC)
        return out

    def tick(self) -> list[Message]:
        """What the parser gives up waiting for (a lone Escape at the end of the input)."""
        out = list(self.parser.tick())
        if out:
            self._escape_pending = False
        return out


class QuietLinuxDriver(LinuxDriver):
    """A :class:`LinuxDriver` whose input thread wakes for input, for a pending key's timeout and to stop."""

    _wake_fds: tuple[int, int] | None = None

    def start_application_mode(self) -> None:
        self._close_wake()
        self._wake_fds = os.pipe()
        os.set_blocking(self._wake_fds[1], False)
        super().start_application_mode()  # type: ignore[no-untyped-call]

    def disable_input(self) -> None:
        # Textual sets its exit event and joins the thread: the pipe wakes the thread to see it.
        if self._wake_fds is not None and not self.exit_event.is_set():
            try:
                os.write(self._wake_fds[1], b"x")
            except OSError:  # pragma: no cover - a full pipe already wakes it
                pass
        super().disable_input()

    def stop_application_mode(self) -> None:
        super().stop_application_mode()
        self._close_wake()

    def _close_wake(self) -> None:
        fds, self._wake_fds = self._wake_fds, None
        for fd in fds or ():
            try:
                os.close(fd)
            except OSError:  # pragma: no cover - closed already
                pass

    def run_input_thread(self) -> None:
        parser = XTermParser(self._debug)
        wake = self._wake_fds
        if wake is None or not hasattr(parser, "_timeout_time"):
            super().run_input_thread()
            return
        selector = selectors.SelectSelector()  # as Textual's: macOS's kqueue and poll do not wait on a terminal
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(wake[0], selectors.EVENT_READ)
        fileno = self.fileno
        decode = getincrementaldecoder("utf-8")().decode
        reader = KeyReader(parser)

        def timeout() -> float | None:
            """None (wait for input) unless the parser waits to tell a lone key from a sequence."""
            due: float | None = parser._timeout_time
            return None if due is None else max(0.0, min(_PARSER_TICK_S, due - get_time()))

        def process(ready: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            keys = [(key, mask) for key, mask in ready if key.fd == fileno]
            for last, (_key, mask) in loop_last(keys):
                if mask & selectors.EVENT_READ:
                    data = decode(os.read(fileno, 1024 * 4), final=final and last)
                    if not data:
                        break  # stdin piped, at its end
                    for event in reader.feed(data):
                        self.process_message(event)
            for event in reader.tick():
                self.process_message(event)

        try:
            while not self.exit_event.is_set():
                process(selector.select(timeout()))
            selector.unregister(fileno)
            selector.unregister(wake[0])
            selector.register(fileno, selectors.EVENT_READ)
            process(selector.select(_PARSER_TICK_S), final=True)
        finally:
            selector.close()
            try:
                for _event in parser.feed(""):
                    pass
            except (EOFError, ParseError):  # the end of input, as in Textual's loop
                pass
