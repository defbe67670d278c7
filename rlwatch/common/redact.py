"""The one redaction: what leaves rlwatch for anyone but the person at its own dashboard carries no secret.

Logs and command lines hold secrets: a trainer started with ``--hf_token hf_…``, an exception message that quotes
``WANDB_API_KEY=…``, an ``Authorization: Bearer …`` header in a failed request, a presigned URL. rlwatch quotes
logs and command lines in its findings, and those leave the host: a fleet scrapes the exporter's labels,
notifications go to chat services, people paste ``report`` output and attach SVG snapshots to public issues. So
every exit — report text and JSON, the ``watch --json`` stream, exporter labels, notifications, snapshots, the audit
log and the watchdog's state, fleet views — passes its text through :func:`redact`, or its records through
:func:`redacted`, here and nowhere else.

What is cut, and why each way:

- token formats that say what they are wherever they stand, from detect-secrets' plugins (Yelp's detector: AWS
  access keys, GitHub, GitLab, Slack, Stripe, SendGrid, npm, PyPI, JWTs, private keys, Discord, Telegram, …) —
  their regular expressions are kept up to date by people who track those formats — and the formats those plugins
  do not know, which RL runs are full of: Hugging Face (``hf_…``), OpenAI project and service keys (``sk-proj-…``),
  Anthropic (``sk-ant-…``), Google (``AIza…``), GitHub's fine-grained ``github_pat_…``;
- ``Authorization:`` headers and ``Bearer``/``Basic`` credentials;
- credentials in URLs (``scheme://user:pass@``) and the values of secret-named query parameters;
- the value of every key whose name says secret (``token``, ``key``, ``secret``, ``password``, ``passwd``,
  ``api_key``, ``credential``, ``signature``, …) in the forms they are written in: ``K=V`` (environments),
  ``--k v`` and ``--k=v`` (command lines), ``"k": "v"`` and ``'k': 'v'`` (JSON, Python dicts as TRL prints them),
  ``k: v`` (YAML, logging records).

What is kept: everything else. An exception's type, its non-secret words, paths, hosts and numbers are what a
diagnosis is made of, and a token-shaped word is replaced by ``***`` (with the key's name, or the format's prefix,
left in place) rather than the whole line dropped.

Strings that leave as JSON are also stripped of control characters (:func:`clean_text`): a ``jq -r`` of a field
writes it to a terminal, where an escape sequence from a log would act.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rlwatch.common.textsafe import INVISIBLE

if TYPE_CHECKING:
    import ast

__all__ = ["MASK", "clean_text", "for_others", "redact", "redact_argv", "redact_lines", "redacted"]

MASK = "***"
T = TypeVar("T")

# detect-secrets' token-format plugins whose every match is the secret itself (no key name, no quote around it).
# Their keyword, entropy and IP plugins are left out: those flag code, hashes and addresses, which a diagnosis needs.
_DETECT_SECRETS_PLUGINS = (
    ("aws", "AWSKeyDetector"),
    ("azure_storage_key", "AzureStorageKeyDetector"),
    ("discord", "DiscordBotTokenDetector"),
    ("github_token", "GitHubTokenDetector"),
    ("gitlab_token", "GitLabTokenDetector"),
    ("jwt", "JwtTokenDetector"),
    ("mailchimp", "MailchimpDetector"),
    ("openai", "OpenAIDetector"),
    ("pypi_token", "PypiTokenDetector"),
    ("sendgrid", "SendGridDetector"),
    ("slack", "SlackDetector"),
    ("square_oauth", "SquareOAuthDetector"),
    ("stripe", "StripeDetector"),
    ("telegram_token", "TelegramBotTokenDetector"),
)

# Formats detect-secrets does not know, each a prefix that says what follows is a token.
_OWN_FORMATS = (
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*",  # JWT, signature included
    r"\bhf_[A-Za-z0-9]{20,}",  # Hugging Face user access token
    r"\bapi_org_[A-Za-z0-9]{20,}",  # Hugging Face organisation token
    r"\bsk-ant-[A-Za-z0-9_-]{16,}",  # Anthropic
    r"\bsk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{16,}",  # OpenAI project / service account / admin keys
    r"\bsk-[A-Za-z0-9]{32,}",  # OpenAI (and compatible servers') plain keys
    r"\bAIza[0-9A-Za-z_-]{35}",  # Google API key
    r"\bgithub_pat_[A-Za-z0-9_]{22,}",  # GitHub fine-grained personal access token
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",  # GitHub classic tokens of any length
    r"\bxox[abposr]-[A-Za-z0-9-]{8,}",  # Slack, whatever the digits' grouping
    r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",  # AWS access key id
    r"\bnpm_[A-Za-z0-9]{30,}",
    r"\bwandb_v1_[A-Za-z0-9_]{20,}",  # W&B's newer key format
)
_PRIVATE_KEY = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----.*?(?:-----END \1-----|\Z)", re.DOTALL
)

# A key whose name says its value is secret: the name may be prefixed (HF_TOKEN, wandb_api_key, x-api-key,
# AWS_SECRET_ACCESS_KEY) and must end in one of these words. Token *ids* and special tokens are not secrets.
_SENSITIVE_WORDS = (
    r"token|secret|password|passwd|passphrase|pwd|api[_-]?key|apikey|access[_-]?key|private[_-]?key|secret[_-]?key"
    r"|auth[_-]?key|client[_-]?secret|credentials?|signature|sig|x-amz-signature|x-amz-credential|key"
)
_NAME = rf"(?:[A-Za-z0-9]+[_.-])*(?:{_SENSITIVE_WORDS})"
_BENIGN_NAME = re.compile(
    r"(?i)(?:^|[_.-])(?:eos|bos|pad|unk|sep|cls|mask|special|start|end|im_start|im_end|max|num|total|prompt|"
    r"completion|new|output|input|sort|cache|primary|foreign|partition|hash|dict|group|sub|sharding)[_.-]?"
    r"(?:token|key)s?$"
)
_VALUE = r"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s,;&'\"}\])]+)"
# K=V, K: V, "K": "V", 'K': 'V' (the name quoted or not, the value quoted or not).
_KEY_VALUE = re.compile(rf"(?i)(?<![A-Za-z0-9])([\"']?)({_NAME})\1(\s*(?:=>|->|[=:])\s*)({_VALUE})")
# --k v, --k=v, -k v (command lines): the value is the next word.
_FLAG = re.compile(rf"(?i)(?<!\S)(--?)({_NAME})(=|\s+)(?!-)({_VALUE})")
_AUTH_HEADER = re.compile(
    r"(?i)\b(authorization|proxy-authorization)(\"?\s*[:=]\s*\"?)([^\s\"',}]+)(?:\s+([^\s\"',}]+))?"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=-]{8,})")
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)([^\s/@'\"<>]+)@")
# A secret written as prose, its name and its value apart by a space ("API key 3f2a… is invalid", "PASSWORD
# hunter3", "ray auth token 0c1d…", "the token is …"): the word after the name is masked when it looks like a
# credential, never when it is a word of the sentence ("API key must be 40 characters long").
_PROSE_NAME = (
    r"(?:api|auth|access|secret|private|session|refresh|client)[ _-]?(?:key|token|secret)|auth(?:entication)?\s+token"
    r"|token|secret|password|passwd|passphrase"
)
_PROSE = re.compile(rf"(?i)(?<![A-Za-z0-9_.-])({_PROSE_NAME})(\s+(?:(?:is|was|of)\s+)?)([^\s,;'\"()\[\]{{}}<>]+)")
_PASSWORDS = ("password", "passwd", "passphrase")


@functools.cache
def _formats() -> re.Pattern[str]:
    """detect-secrets' token formats and ours, as one alternation (built at first use: only once something leaves)."""
    patterns: list[str] = list(_OWN_FORMATS)
    for pattern in _plugin_patterns():
        if pattern not in patterns:
            patterns.append(_no_groups(pattern))
    return re.compile("|".join(f"(?:{p})" for p in patterns))


def _standalone(pattern: str) -> bool:
    """A format that stands alone: a pattern that reaches for a key name or a quote is the key-value rule's job, and
    its match would cut the name too."""
    return re.search(r"['\"]|\\s|\.\{0,", pattern) is None


def _plugin_patterns() -> list[str]:
    """The stand-alone patterns of detect-secrets' plugins, in their order: read from the plugins' source where it
    says them literally, else from the imported plugins.

    Importing one plugin costs a sixth of a second of every command's start: the package's ``__init__`` loads its
    whole scanner, and the plugins' base module imports requests (urllib3, charset_normalizer, ssl) to verify
    secrets, which rlwatch never does. Their ``denylist`` is a literal list of ``re.compile(r"...")`` in every
    plugin rlwatch uses, so the source says the same, and anything it does not say literally sends the whole
    list to the import (tests/common/test_redact_plugins.py checks both agree)."""
    read = _read_plugin_patterns()
    return read if read is not None else _import_plugin_patterns()


def _import_plugin_patterns() -> list[str]:
    import importlib

    out: list[str] = []
    for module, name in _DETECT_SECRETS_PLUGINS:
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)
        out += [rx.pattern for rx in plugin.denylist if _standalone(rx.pattern)]
    return out


def _read_plugin_patterns() -> list[str] | None:
    import ast
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("detect_secrets")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    base = next(iter(spec.submodule_search_locations))
    out: list[str] = []
    for module, name in _DETECT_SECRETS_PLUGINS:
        try:
            with open(os.path.join(base, "plugins", f"{module}.py"), encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            return None
        found = _literal_denylist(tree, name)
        if found is None:
            return None
        out += found
    return out


def _literal_denylist(tree: ast.Module, name: str) -> list[str] | None:
    """The stand-alone patterns of class ``name``'s ``denylist``, when its source says each of them; else None."""
    import ast

    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    if len(classes) != 1:
        return None
    values = [
        n.value
        for n in classes[0].body
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name)
        and n.targets[0].id == "denylist"
    ]
    if len(values) != 1 or not isinstance(values[0], (ast.Tuple, ast.List)):
        return None
    out: list[str] = []
    for item in values[0].elts:
        if not (
            isinstance(item, ast.Call)
            and ast.unparse(item.func) == "re.compile"
            and item.args
            and all(k.arg == "flags" for k in item.keywords)
        ):
            return None
        arg = item.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            if _standalone(arg.value):
                out.append(arg.value)
        elif not _not_standalone_template(arg):
            return None  # a pattern built at run time: only the import can say what it is
    return out


def _not_standalone_template(node: ast.expr) -> bool:
    """``"...".format(...)`` whose literal text already reaches for a quote or a key name: whatever is put in its
    fields, the pattern is not a stand-alone one (detect-secrets' AWS secret-key pattern)."""
    import ast
    import string

    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
    ):
        return False
    try:
        parts = [literal for literal, *_ in string.Formatter().parse(node.func.value.value)]
    except ValueError:
        return False
    return any(not _standalone(part) for part in parts)


def _no_groups(pattern: str) -> str:
    """The pattern with its capturing groups made non-capturing, so that the alternation's match is the token."""
    return re.sub(r"(?<!\\)\((?!\?)", "(?:", pattern)


def _mask_value(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{MASK}{value[0]}"
    return MASK


def _key_value(m: re.Match[str]) -> str:
    quote, name, sep, value = m.group(1), m.group(2), m.group(3), m.group(4)
    if _BENIGN_NAME.search(name) or value.strip("\"'") in ("", MASK) or value.startswith("<"):
        return m.group(0)
    in_query = m.start() > 0 and m.string[m.start() - 1] in "?&"  # a URL's ?sig=…&: a signature however short
    if name.lower() in ("key", "sig") and not _looks_secret(value) and not (in_query and sep == "="):
        return m.group(0)  # "key: actor/loss" is a name, not a secret; a bare "key" must look like one
    return f"{quote}{name}{quote}{sep}{_mask_value(value)}"


def _flag(m: re.Match[str]) -> str:
    dashes, name, sep, value = m.groups()
    if _BENIGN_NAME.search(name) or value.strip("\"'") in ("", MASK):
        return m.group(0)
    if name.lower() in ("key", "sig") and not _looks_secret(value):
        return m.group(0)
    return f"{dashes}{name}{sep}{_mask_value(value)}"


def _prose(m: re.Match[str]) -> str:
    name, sep, value = m.groups()
    word = value.rstrip(".:!?")
    tail = value[len(word) :]
    if not word or MASK in word or word.startswith(("-", "*")):
        return m.group(0)
    if name.lower() in _PASSWORDS:
        # A password is any word that is not one of the sentence: it holds a digit or a sign ("hunter3").
        secret = len(word) >= 4 and any(not c.isalpha() for c in word) and not word.isdigit()
    else:
        secret = (
            len(word) >= 8 and "/" not in word and any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
        )
    return f"{name}{sep}{MASK}{tail}" if secret else m.group(0)


def _looks_secret(value: str) -> bool:
    """A value that could be a credential: long, and mixing letters with digits (not a word, a path or a number)."""
    v = value.strip("\"'")
    return len(v) >= 16 and "/" not in v and any(c.isdigit() for c in v) and any(c.isalpha() for c in v)


def _auth_header(m: re.Match[str]) -> str:
    name, sep, first, second = m.groups()
    if second is not None and first.lower() in ("bearer", "basic", "token", "digest", "negotiate", "aws4-hmac-sha256"):
        return f"{name}{sep}{first} {MASK}"
    return f"{name}{sep}{MASK}"


def _format_match(m: re.Match[str]) -> str:
    token = m.group(0)
    for prefix in ("hf_", "api_org_", "sk-ant-", "sk-", "ghp_", "gho_", "ghs_", "ghu_", "ghr_", "github_pat_"):
        if token.startswith(prefix):
            return prefix + MASK
    return MASK


def _private_key(m: re.Match[str]) -> str:
    """The block with its body masked line for line: a block redacted among lines keeps their count."""
    lines = m.group(0).split("\n")
    body = [MASK] * max(len(lines) - 2, 0)
    if len(lines) == 1:
        return f"-----BEGIN {m.group(1)}----- {MASK}" + (
            f" -----END {m.group(1)}-----" if m.group(0).endswith("-----") else ""
        )
    end = lines[-1] if lines[-1].startswith("-----END") else MASK
    return "\n".join([f"-----BEGIN {m.group(1)}-----", *body, end])


def redact(text: str) -> str:
    """``text`` with every secret it holds replaced by ``***`` (the key's name or the token's prefix kept)."""
    if not text:
        return text
    text = _PRIVATE_KEY.sub(_private_key, text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _AUTH_HEADER.sub(_auth_header, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _formats().sub(_format_match, text)
    text = _FLAG.sub(_flag, text)
    text = _KEY_VALUE.sub(_key_value, text)
    return _PROSE.sub(_prose, text)


# Every control character but tab and newline, and whole escape sequences (not only their ESC byte).
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c)?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
    # Bidirectional controls, line separators and the other invisible format characters (common/textsafe).
    r"|" + INVISIBLE
)


def clean_text(text: str) -> str:
    """``text`` without terminal control sequences or control characters; tabs and newlines stay."""
    return _CONTROL.sub("", text) if text else text


def _for_others(text: str) -> str:
    return clean_text(redact(text))


def for_others(text: str) -> str:
    """Text that leaves rlwatch: redacted, and without control characters (tabs and newlines stay)."""
    return _for_others(text)


def redacted(value: T, text: Callable[[str], str] = _for_others) -> T:
    """A copy of ``value`` — a record (frozen dataclass), a mapping, a sequence, or a string — with every string in
    it passed through :func:`redact` and :func:`clean_text`. Enumerations and other ``str`` subclasses are names of
    rlwatch's own, not text from outside, and stay as they are; so do dictionary keys that are not plain strings.

    Each distinct string is redacted once per call: a report holds the same file names, titles, times and keys
    hundreds of times over (sixteen thousand strings, eight hundred distinct, over a dense backlog), and the
    redaction is a pure function of the string."""
    memo: dict[str, str] = {}

    def once(s: str) -> str:
        out = memo.get(s)
        if out is None:
            out = memo[s] = text(s)
        return out

    return _walk(value, once)  # type: ignore[no-any-return]


def _walk(value: Any, text: Callable[[str], str]) -> Any:
    kind = type(value)
    if kind is str:
        return text(value)
    if value is None or kind in (int, float, bool, bytes):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            old = getattr(value, f.name)
            new = _walk(old, text)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if kind is dict or isinstance(value, dict):
        return {(_walk(k, text) if type(k) is str else k): _walk(v, text) for k, v in value.items()}
    if kind is tuple or kind is list:
        if value and all(type(v) is str for v in value):
            words = _argv(value, text)  # a command line: a flag's value is the next word
            return tuple(words) if kind is tuple else words
        items = [_walk(v, text) for v in value]
        return tuple(items) if kind is tuple else items
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return kind(*(_walk(v, text) for v in value))
    if isinstance(value, (set, frozenset)):
        return kind(_walk(v, text) for v in value)
    return value


_FLAG_NAME = re.compile(rf"(?i)--?({_NAME})")


def redact_lines(lines: Sequence[str]) -> list[str]:
    """Consecutive lines of a log redacted together, so that a block spread over lines (a private key pasted into
    a log) is seen whole; as many lines come back, in order."""
    joined = redact("\n".join(lines)).split("\n")
    if len(joined) != len(lines):  # cannot happen with the rules above; never misalign lines if it ever does
        return [redact(line) for line in lines]
    return joined


def redact_argv(argv: Iterable[str]) -> list[str]:
    """An argument vector redacted word by word, and the word after a secret-named flag (``--hf_token``,
    ``--wandb-key``) masked whatever it looks like: in a vector the value is not in the flag's own string."""
    return _argv(argv, redact)


def _argv(argv: Iterable[str], text: Callable[[str], str]) -> list[str]:
    out: list[str] = []
    secret_next = False
    for word in argv:
        if secret_next and not word.startswith("-"):
            out.append(MASK)
        else:
            out.append(text(word))
        m = _FLAG_NAME.fullmatch(word)
        secret_next = m is not None and not _BENIGN_NAME.search(m.group(1)) and m.group(1).lower() not in ("key", "sig")
    return out
