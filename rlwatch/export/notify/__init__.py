"""Telling a person: notifications from the watchdog, and its dead man's switch.

In incident 1 a server crash burned thirteen hours of GPU time because nobody was looking; in incident 3 the
watchdog itself had died and nobody knew. rlwatch saw both. This package is how `rlwatch watch` tells someone, one
module per concern:

- **What is sent** (:mod:`~rlwatch.export.notify.message`). A finding that appears, worsens or clears, and each
  action the watchdog takes or gives up on, through Apprise to each target (:mod:`~rlwatch.export.notify.targets`:
  one URL per target: Slack, Discord, Telegram, ntfy, mailto, a JSON webhook, …). Each message says the host, the
  run, what happened in one line, since when, what was done, and the command to look.
- **A storm is one message** (:mod:`~rlwatch.export.notify.tracker`). :class:`FindingTracker` keeps one record per
  finding (951 brake events are one finding): it is told when it appears, at once when it gets worse than anything
  told before, again at most every ``update_every_s`` while it persists and changes, and once when it has been gone
  ``clear_after_s``. Everything that changed in one round of the watchdog is one message, listing at most
  :data:`~rlwatch.export.notify.message.MAX_ITEMS` findings.
- **Never blocking** (:mod:`~rlwatch.export.notify.delivery`). Each target has a bounded queue drained by a thread
  of its own (:class:`Channel`): delivery has a timeout and retries with a doubling backoff; when the queue is full
  the oldest message is dropped and counted. The watchdog only appends to the queue, so a target that hangs,
  refuses or answers 500 costs it nothing; the failure is shown as the degraded source ``notify``.
- **No secrets, no raw logs** (:mod:`~rlwatch.export.notify.text`). Target URLs usually hold a token: they are
  shown only as ``tgram://***`` (or the target's configured name), and every outgoing text is scrubbed of them, of
  credentials in URLs and of ``token=…``-style values. Log lines are sent only with ``include_lines: true``; every
  text that comes from a log (finding messages quote exception titles) is cleaned of control characters, kept to
  one line, trimmed, and its ``@mentions`` defused.
- **Dead man's switch** (:mod:`~rlwatch.export.notify.heartbeat`). :class:`Heartbeat` GETs a URL (healthchecks.io
  style) every ``heartbeat_every_s``. The decision loop asks for each ping and a thread of its own sends it, so a
  hung loop stops the pings — which is the point: the service on the other end notices that the watchdog is gone.

:class:`Notifications` (:mod:`~rlwatch.export.notify.notifications`) puts them together for the watchdog, and
:func:`send_test` is `rlwatch notify --test`. Apprise is imported only when something is sent, so the core stays
quick to start without notifications.
"""

from __future__ import annotations

from rlwatch.common.textsafe import redact_url
from rlwatch.export.notify.delivery import Channel, apprise_send, check_target
from rlwatch.export.notify.heartbeat import Heartbeat, http_get
from rlwatch.export.notify.message import Item, Notice
from rlwatch.export.notify.notifications import Notifications, send_test
from rlwatch.export.notify.targets import ENV, Target, split_urls, targets_from
from rlwatch.export.notify.text import scrub, secrets_of, sendable_line
from rlwatch.export.notify.tracker import FindingTracker

__all__ = [
    "ENV",
    "Channel",
    "FindingTracker",
    "Heartbeat",
    "Item",
    "Notice",
    "Notifications",
    "Target",
    "apprise_send",
    "check_target",
    "http_get",
    "redact_url",
    "scrub",
    "secrets_of",
    "send_test",
    "sendable_line",
    "split_urls",
    "targets_from",
]
