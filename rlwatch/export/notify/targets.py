"""Where notifications go: the targets, from the configuration file, ``--notify`` and ``RLWATCH_NOTIFY``.

A target is an Apprise URL (one per destination: Slack, Discord, Telegram, ntfy, mailto, a JSON webhook, …), the
least severity sent there, and the name it is shown by. The URL usually holds a token, so a target is only ever
shown as its configured name or redacted (``tgram://***``). Kept apart from delivery: the commands list and check
targets without starting the queues and threads that send to them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rlwatch.common.state import Severity
from rlwatch.common.textsafe import redact_url
from rlwatch.config.models import NotifyConfig

ENV = "RLWATCH_NOTIFY"
RANK = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True, slots=True)
class Target:
    """One destination: the URL (kept secret), the least severity sent there, and how it is shown."""

    url: str
    min_severity: str = "warning"
    name: str | None = None

    @property
    def shown(self) -> str:
        return self.name or redact_url(self.url)

    def wants(self, severity: Severity) -> bool:
        return RANK[severity.value] <= RANK[self.min_severity]


def split_urls(text: str | None) -> list[str]:
    """``RLWATCH_NOTIFY``: URLs separated by whitespace or commas."""
    return [u for u in re.split(r"[\s,]+", text or "") if u]


def targets_from(cfg: NotifyConfig, cli: Sequence[str] = (), env: str | None = None) -> list[Target]:
    """Every target, from the file, ``--notify`` and ``RLWATCH_NOTIFY``, each URL once (the file's entry wins)."""
    out: dict[str, Target] = {}
    for t in cfg.targets:
        out.setdefault(t.url, Target(t.url, t.min_severity, t.name))
    for given in [*cli, *split_urls(env)]:
        url = given.strip()
        if url:
            out.setdefault(url, Target(url))
    return list(out.values())
