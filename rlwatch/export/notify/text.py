"""Making what a notification carries safe to send: no secrets, and no raw log text.

Target URLs usually hold a token, and finding messages quote log lines (exception titles, paths), so every text that
leaves through a notification passes through here: :func:`scrub` cuts the targets' own secrets
(:func:`secrets_of`), the credentials and queries of URLs, ``token=…``-style values and bearer tokens;
:func:`sendable_line` cleans text that may come from a log of control characters, keeps it to one line, trims it and
defuses its ``@mentions``. One place for these rules, so a message, a delivery error and the heartbeat's error are
all cleaned the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rlwatch.common.redact import redact
from rlwatch.common.textsafe import clean_line

LINE_MAX = 300  # one line of a message

_ANY_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s'\"<>]+)")
_MENTION = re.compile(r"@(?=[A-Za-z0-9_])")
_SPACE = re.compile(r"\s+")
_HOSTNAME = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")  # a host name or address names a place, not a secret


def _url_shown(m: re.Match[str]) -> str:
    """A URL found in text: without credentials and query (``http://***@host/path?***``)."""
    scheme, rest = m.group(1), m.group(2)
    auth, at, hostpath = rest.rpartition("@")
    if at and "/" not in auth:
        rest = "***@" + hostpath
    path, q, _ = rest.partition("?")
    return f"{scheme}://{path}" + ("?***" if q else "")


def secrets_of(url: str) -> list[str]:
    """The parts of a target URL that may be secret, longest first, to be cut from any text that leaves."""
    url = url.strip()
    rest = url.split("://", 1)[-1]
    parts = [p for p in re.split(r"[/:@?&=#]+", rest) if len(p) >= 8 and not _HOSTNAME.fullmatch(p)]
    return sorted({url, rest, *parts}, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove secrets: the given strings (the targets' own), credentials and queries of URLs, and everything the one
    redaction (:func:`rlwatch.common.redact.redact`) cuts from whatever leaves rlwatch."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return redact(_ANY_URL.sub(_url_shown, text))


def sendable_line(text: str, limit: int = LINE_MAX) -> str:
    """Text that may come from a log, made safe to send: no control characters, one line, trimmed, and no
    ``@everyone``/``<!channel>`` that a chat service would turn into a ping (a zero-width space defuses it)."""
    out = _SPACE.sub(" ", clean_line(text.replace("\n", " ").replace("\r", " "))).strip()
    out = _MENTION.sub("@\u200b", out).replace("<!", "<\u200b!")
    return out if len(out) <= limit else out[: limit - 1] + "…"
