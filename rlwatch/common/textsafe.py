"""Make log text safe to show literally.

Log lines are data written by other programs. Shown as they are, their escape sequences would recolour, move the
cursor, retitle or clear the terminal the person is looking at (and OSC 52 can even write the clipboard). Every
string that comes from a log therefore passes through :func:`clean_line` before anything displays it.
"""

from __future__ import annotations

import re

__all__ = ["INVISIBLE", "clean_line", "strip_ansi"]

# Only SGR colour codes: what loggers such as colorlog wrap every line in. Matching strips these and nothing else,
# so that a pattern sees the text a person would read.
_SGR = re.compile(r"\x1b\[[0-9;]*m")

# Unicode's format characters (category Cf) and its line and paragraph separators (Zl, Zp), every one but the
# two joiners (U+200C, U+200D) that Persian, the Indic scripts and emoji sequences need. Bidirectional controls
# (LRE…RLO, LRI…PDI, LRM, RLM, ALM U+061C): U+202E turns "exe.txt" into what reads "txt.exe", and reorders a
# line, a notification or a label so that it says something other than its bytes. U+2028 and U+2029 break a
# line in JSON-based chat renderers. The invisible others (zero-width space, word joiner, soft hyphen, BOM,
# interlinear annotations, tag characters) hide text from the eye and from a search ("pass\u00adword").
# The ranges are Unicode 15's; tests/common/test_textsafe.py checks them against the interpreter's tables.
INVISIBLE = (
    r"[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200e\u200f\u2028-\u202e"
    r"\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    r"\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)

_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement, erase
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: title, hyperlinks, clipboard (BEL or ST terminated)
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # other escape sequences (charset selection, keypad modes, RIS)
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c)?"  # 8-bit string controls (DCS, SOS, OSC, PM, APC)
    r"|[\x00-\x08\x0a-\x1f\x7f-\x9f]"  # any remaining C0 control except tab, DEL, any remaining C1 control
    r"|" + INVISIBLE
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


def redact_url(url: str) -> str:
    """How a URL that may hold a token is shown: its scheme only (``tgram://***``). Notification targets are such
    URLs, and config errors, the dashboard and ``rlwatch notify`` show them."""
    m = URL_SCHEME.match(url)
    return f"{m.group(1).lower()}://***" if m else "***"
