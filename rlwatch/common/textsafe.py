"""Make log text safe to show literally.

Log lines are data written by other programs. Shown as they are, their escape sequences would recolour, move the
cursor, retitle or clear the terminal the person is looking at (and OSC 52 can even write the clipboard). Every
string that comes from a log therefore passes through :func:`clean_line` before anything displays it.
"""

from __future__ import annotations

import re

__all__ = ["clean_line", "strip_ansi"]

# Only SGR colour codes: what loggers such as colorlog wrap every line in. Matching strips these and nothing else,
# so that a pattern sees the text a person would read.
_SGR = re.compile(r"\x1b\[[0-9;]*m")

_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement, erase
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: title, hyperlinks, clipboard (BEL or ST terminated)
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # other escape sequences (charset selection, keypad modes, RIS)
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c)?"  # 8-bit string controls (DCS, SOS, OSC, PM, APC)
    r"|[\x00-\x08\x0a-\x1f\x7f-\x9f]"  # any remaining C0 control except tab, DEL, any remaining C1 control
    # Bidirectional controls (LRE…RLO, LRI…PDI, LRM, RLM): U+202E turns "exe.txt" into what reads "txt.exe", and
    # reorders a line, a notification or a label so that it says something other than its bytes.
    r"|[\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def strip_ansi(text: str) -> str:
    """Remove SGR colour codes only (``ESC [ ... m``), leaving all other text as it was."""
    if "\x1b" not in text:
        return text
    return _SGR.sub("", text)


def clean_line(text: str) -> str:
    """Remove every terminal control sequence and control character except tab.

    Whole sequences are removed, not just their ESC byte, so no parameter residue such as ``[1;31m`` is left.
    Markup escaping for a particular UI toolkit is not done here.
    """
    return _CONTROL.sub("", text)


URL_SCHEME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9+.-]*)://")


def redact(url: str) -> str:
    """How a URL that may hold a token is shown: its scheme only (``tgram://***``). Notification targets are such
    URLs, and config errors, the dashboard and ``rlwatch notify`` show them."""
    m = URL_SCHEME.match(url)
    return f"{m.group(1).lower()}://***" if m else "***"
