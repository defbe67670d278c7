"""The trainers' HTTP calls to the server stand-in, with failures sorted the way the real clients report them."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any


class CallError(Exception):
    """A request that did not get an answer. ``kind`` is "refused", "timeout" or "error"."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def call(url: str, payload: dict[str, Any] | None = None, timeout: float = 5.0) -> Any:
    """GET (no payload) or POST JSON; the decoded JSON answer, or None for an empty body."""
    data = None if payload is None else json.dumps(payload).encode()
    if not url.startswith("http://"):
        raise CallError("error", f"not an http URL: {url}")
    req = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")  # noqa: S310 (checked)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (http only, checked above)
            body = resp.read()
    except urllib.error.HTTPError as exc:
        raise CallError("error", f"HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ConnectionRefusedError):
            raise CallError("refused", str(reason)) from None
        if isinstance(reason, (TimeoutError, socket.timeout)):
            raise CallError("timeout", str(reason)) from None
        raise CallError("error", str(reason)) from None
    except ConnectionRefusedError as exc:
        raise CallError("refused", str(exc)) from None
    except TimeoutError as exc:
        raise CallError("timeout", str(exc)) from None
    except (OSError, http.client.HTTPException) as exc:
        raise CallError("error", str(exc)) from None
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None
