"""fp16 loss scaling gone wrong, known from its repetition (the ``loss_scale_overflow`` kind, rlwatch/logs/kinds.py).

Dynamic loss scaling halves the scale and skips the step on every overflow: a handful of those at the start of every
fp16 run is how it finds its scale, and says nothing. Two things do: the scale collapsing (halved step after step
down to nothing, or the framework saying it reached its minimum), after which the run learns nothing; and an
overflow storm, skipped steps outnumbering the steps the run took.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from rlwatch.common.state import Finding, Snapshot
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import CRIT, WARN, Context
from rlwatch.engine.diagnosis.wording import exact_first, last_text

__all__ = ["loss_scale"]

# The scale an overflow line set, in each framework's words (see the kind): `setting loss scale to: 16384.0`,
# `reducing loss scale to 4096.0`, `Attempted loss scale: 65536, reducing to 32768`.
_SCALE = re.compile(r"(?:setting loss scale to:?|reducing loss scale to|, reducing to) ?([0-9.]+(?:e[-+]?\d+)?)")
_AT_MINIMUM = ("Minimum loss scale reached", "loss scale already at minimum")
COLLAPSED = 1.0  # from 2**16 (or 2**32), a scale of 1 or less took sixteen halvings with no recovery
START_OVERFLOWS = 20  # more than the start of any fp16 run needs to find its scale


def _scale(text: str) -> float | None:
    m = _SCALE.search(text)
    if m is None:
        return None
    try:
        return float(m.group(1))
    except ValueError:
        return None


def loss_scale(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    ev = s.events.get("loss_scale_overflow")
    if ev is None or not ev.count or not ev.recent:
        return
    last = ev.recent[-1].text.strip()
    scale = _scale(last)
    said = f"{plural(ev.count, 'overflow')}, last {last_text(ev, s.time)}: {last[:200]}"
    if any(m in last for m in _AT_MINIMUM) or (scale is not None and scale <= COLLAPSED):
        yield Finding(
            CRIT,
            "loss_scale_collapse",
            f"fp16 loss scale collapsed ({said}): the scale was halved overflow after overflow down to nothing, "
            "so every step is skipped and the run learns nothing. Lower the learning rate, clip gradients, or train "
            "in bf16.",
            exact_first(ev),
        )
        return
    tr = s.training
    taken = tr.last_step if tr is not None and tr.last_step is not None else 0
    if ev.count >= START_OVERFLOWS and ev.count > taken:
        yield Finding(
            WARN,
            "loss_scale_overflow_storm",
            f"fp16 overflow storm ({said}): more steps skipped than taken ({taken} seen); the loss scale keeps "
            "being halved. Watch for a collapse; lower the learning rate or clip gradients.",
            exact_first(ev),
        )
