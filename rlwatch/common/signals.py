"""A signal's name from its number, the one rule for every reader: a launcher's exit code (-9), a report's
``Signal 6 (…)``, what rlwatch itself sent, what the simulator writes."""

from __future__ import annotations

import signal

__all__ = ["signal_name", "signal_text"]


def signal_name(number: int) -> str | None:
    """``SIGKILL`` for 9; None for a number that names no signal on this system."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def signal_text(number: int) -> str:
    """The signal's name, or ``signal N`` where the number names none: for a sentence that needs words either way."""
    return signal_name(number) or f"signal {number}"
