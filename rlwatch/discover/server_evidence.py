"""Whether a run has an inference server, and where: only from evidence, each piece said in words.

A TRL GRPO run generates its completions inside the trainer unless it is told to use a server: ``use_vllm`` is
false by default (transformers' ``generate``), and with ``use_vllm`` true ``vllm_mode`` picks ``"colocate"`` (vLLM
inside the trainer) or ``"server"`` (``trl vllm-serve`` at ``vllm_server_base_url`` or ``vllm_server_host``:
``vllm_server_port``, default ``0.0.0.0:8000``). ``vllm_mode``'s default was ``"server"`` from TRL 0.18 to 0.29 and
is ``"colocate"`` from 1.0 (in 0.16 and 0.17 ``use_vllm`` alone meant a server), so ``use_vllm`` without a mode says
nothing unless the TRL version is known. Probing a default port for a run that never had a server reported a
healthy, finished colocated run as "server down"; so a server is expected only where something says so:

- a server process of the run (SGLang, vLLM, ``trl vllm-serve``), handled by discovery;
- the trainer's command line, its training YAML or its script (``vllm_mode``, ``use_vllm``, ``vllm_server_*``);
- the logs: TRL's client failing to reach its server ("The vLLM server can't be reached at URL after N seconds"),
  requests failing on TRL's routes, a server's own start-up line, AReaL's logged server addresses.

Every reader here is pure (text in, :class:`Clue` out), so each is tested on the frameworks' real strings.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

DEFAULT_PORT = {"sglang": 30000, "trl": 8000, "vllm": 8000}
HEALTH_PATH = {"sglang": "/health", "trl": "/health/", "vllm": "/health"}
TRL_COLOCATE_DEFAULT_FROM = (1, 0)  # vllm_mode's default became "colocate" in TRL 1.0 (trl/trainer/grpo_config.py)

TRL_KEYS = ("use_vllm", "vllm_mode", "vllm_server_base_url", "vllm_server_host", "vllm_server_port")
_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})

# TRL's client (trl/generation/vllm_client.py, earlier trl/extras/vllm_client.py) after its connection timeout.
TRL_UNREACHABLE = re.compile(r"The vLLM server can't be reached at (https?://[^\s'\"]+?)\.? after ")
# requests failing on one of trl vllm-serve's routes (they all end in a slash).
TRL_ROUTE_FAILED = re.compile(
    r"HTTPConnectionPool\(host='([^']+)', port=(\d+)\): Max retries exceeded with url: "
    r"/(health|generate|chat|get_world_size|init_communicator|update_named_param|reset_prefix_cache"
    r"|close_communicator)/"
)
# A server's own start-up lines: vLLM's OpenAI server, uvicorn under trl vllm-serve.
VLLM_STARTING = re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on (https?://[^\s'\"]+)")
UVICORN_RUNNING = re.compile(r"Uvicorn running on (https?://[^\s'\"]+)")
# AReaL (areal/infra/launcher/sglang_server.py, vllm_server.py, utils/launcher.py, local.py).
AREAL_SGLANG = re.compile(r"SGLang server launched at: (https?://[^\s'\"]+)")
AREAL_VLLM = re.compile(r"vllm server launched at: (https?://[^\s'\"]+)", re.IGNORECASE)
AREAL_ADDRS = re.compile(r"AREAL_LLM_SERVER_ADDRS=([0-9A-Za-z.\-\[\]:]+:\d+)")
AREAL_ROLLOUT = re.compile(
    r"Found \d+ rollout servers: ([0-9A-Za-z.\-\[\]:]+:\d+)|HTTP request to ([0-9A-Za-z.\-\[\]:]+:\d+)/generate failed"
)
TRL_VERSION = re.compile(r"^- TRL: (\d+)\.(\d+)", re.MULTILINE)  # TRL's model card (trl/templates/*_model_card.md)


@dataclass(frozen=True)
class Clue:
    """One piece of evidence: a server expected (at ``url``, when known) or not, and why, in a person's words."""

    expected: bool
    why: str
    kind: str | None = None  # sglang | vllm | trl
    url: str | None = None

    @property
    def health_path(self) -> str | None:
        return HEALTH_PATH.get(self.kind or "")


def url_host(host: str | None) -> str:
    """The host to reach a listener on: a wildcard address is reached on loopback, IPv6 goes in brackets."""
    if not host or host in ("0.0.0.0", "*"):  # noqa: S104 - a wildcard listener is reached on loopback
        return "127.0.0.1"
    bare = host.strip("[]")
    try:
        addr = ipaddress.ip_address(bare)
    except ValueError:
        return host  # a host name
    if addr.is_unspecified:
        return "[::1]" if addr.version == 6 else "127.0.0.1"
    return f"[{bare}]" if addr.version == 6 else bare


def reachable(url: str) -> str:
    """``url`` with a wildcard host replaced by loopback (TRL's default host is 0.0.0.0)."""
    m = re.match(r"^(https?://)(\[[^\]]*\]|[^/:]*)(.*)$", url)
    if m is None:
        return url
    return f"{m.group(1)}{url_host(m.group(2))}{m.group(3)}".rstrip("/.,")


def _as_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return True if text in _TRUE else False if text in _FALSE else None


# ---------------------------------------------------------------------------------------------------------------
# TRL's settings, wherever they are written


def settings_from_argv(argv: Sequence[str]) -> dict[str, object]:
    """TRL's server settings on a command line (``--use_vllm``, ``--vllm_mode server``, ``--vllm-server-port=8001``).

    HfArgumentParser accepts both spellings, a bare boolean flag meaning true, and the last occurrence wins.
    """
    out: dict[str, object] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        key = name.replace("-", "_")
        if key not in TRL_KEYS:
            continue
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if key == "use_vllm":
            if eq:
                out[key] = _as_bool(value)
            elif nxt is not None and _as_bool(nxt) is not None:
                out[key] = _as_bool(nxt)
            else:
                out[key] = True
        elif eq:
            out[key] = value
        elif nxt is not None and not nxt.startswith("--"):
            out[key] = nxt
    return {k: v for k, v in out.items() if v is not None}


def settings_from_mapping(doc: Mapping[object, object]) -> dict[str, object]:
    """TRL's server settings in a training YAML (flat, as ``trl grpo --config`` and HfArgumentParser read it)."""
    out: dict[str, object] = {}
    for key in TRL_KEYS:
        if key in doc and doc[key] is not None:
            out[key] = _as_bool(doc[key]) if key == "use_vllm" else doc[key]
    return {k: v for k, v in out.items() if v is not None}


_SCRIPT_SETTING = re.compile(
    r"\b(use_vllm|vllm_mode|vllm_server_base_url|vllm_server_host|vllm_server_port)\s*=\s*"
    r"(True|False|\"[^\"\n]*\"|'[^'\n]*'|\d+)"
)


def settings_from_script(text: str) -> dict[str, object]:
    """Literal keyword arguments in a training script (``GRPOConfig(..., use_vllm=True, vllm_mode="server")``).

    Only literals are read, the first of each: a script that computes them says nothing here.
    """
    out: dict[str, object] = {}
    for m in _SCRIPT_SETTING.finditer(text):
        key, raw = m.group(1), m.group(2)
        if key in out:
            continue
        value: object = raw.strip("\"'")
        if raw in ("True", "False"):
            value = raw == "True"
        out[key] = value
    return out


def trl_version(text: str) -> tuple[int, int] | None:
    """The TRL version a model card names (``- TRL: 0.19.1``), as (major, minor)."""
    m = TRL_VERSION.search(text)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def _settings_text(settings: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={settings[k]}" for k in TRL_KEYS if k in settings)


def from_trl_settings(settings: Mapping[str, object], where: str, version: tuple[int, int] | None) -> Clue | None:
    """What TRL's own settings say about a server (see the module docstring); None when they do not say."""
    if not settings:
        return None
    said = f"{where}: {_settings_text(settings)}"
    use_vllm = settings.get("use_vllm")
    mode = str(settings["vllm_mode"]).lower() if "vllm_mode" in settings else None
    if use_vllm is False:
        return Clue(False, f"{said}: completions are generated in the trainer (transformers generate), no server")
    base = settings.get("vllm_server_base_url")
    host = settings.get("vllm_server_host")
    port = settings.get("vllm_server_port", DEFAULT_PORT["trl"])
    url = reachable(str(base)) if base else f"http://{url_host(str(host) if host else None)}:{port}"
    if mode == "colocate":
        return Clue(False, f"{said}: vLLM runs inside the trainer, no server")
    if mode == "server":
        return Clue(True, f"{said}: generation goes to a vLLM server", "trl", url)
    if mode is not None:
        return None  # a mode TRL does not know: it refuses to start, nothing to expect
    if base or host or "vllm_server_port" in settings:
        return Clue(True, f"{said}: a vLLM server address is given", "trl", url)
    if use_vllm is True and version is not None:
        if version >= TRL_COLOCATE_DEFAULT_FROM:
            return Clue(False, f"{said}, TRL {version[0]}.{version[1]}: vllm_mode defaults to colocate, no server")
        return Clue(True, f"{said}, TRL {version[0]}.{version[1]}: vllm_mode defaults to server", "trl", url)
    if use_vllm is True:
        return Clue(
            False,
            f"{said} without vllm_mode: a server in TRL < 1.0, colocated from 1.0, and the TRL version is not "
            "known; set server.url if there is one",
        )
    return None


# ---------------------------------------------------------------------------------------------------------------
# Logs


def from_log(text: str, name: str) -> Clue | None:
    """The last server address a log names, with what named it; None when it names none.

    ``name`` is how the log is shown (a path relative to the run directory).
    """
    hits: list[tuple[int, Clue]] = []

    def address(m: re.Match[str]) -> str:
        return "http://" + str(m.group(m.lastindex or 0)).rstrip("/.,")

    def host_port(m: re.Match[str]) -> str:
        return f"http://{url_host(m.group(1))}:{m.group(2)}"

    def as_url(m: re.Match[str]) -> str:
        return reachable(m.group(1))

    trl_routes = "/update_named_param/" in text or "/generate/" in text
    readers: tuple[tuple[re.Pattern[str], str, str, Callable[[re.Match[str]], str]], ...] = (
        (TRL_UNREACHABLE, "trl", "TRL's vLLM client tried to reach its server at", as_url),
        (TRL_ROUTE_FAILED, "trl", "requests to a trl vllm-serve route failed at", host_port),
        (VLLM_STARTING, "vllm", "a vLLM server started at", as_url),
        (UVICORN_RUNNING, "trl" if trl_routes else "vllm", "a server ran at", as_url),
        (AREAL_SGLANG, "sglang", "AReaL launched an SGLang server at", as_url),
        (AREAL_VLLM, "vllm", "AReaL launched a vLLM server at", as_url),
        (AREAL_ADDRS, "sglang", "AReaL's launcher names its server", address),
        (AREAL_ROLLOUT, "sglang", "AReaL's trainer talks to its rollout server at", address),
    )
    for pattern, kind, what, url_of in readers:
        for m in pattern.finditer(text):
            url = url_of(m)
            hits.append((m.start(), Clue(True, f"{name}: {what} {url}", kind, url)))
    if not hits:
        return None
    return max(hits, key=lambda h: h[0])[1]
