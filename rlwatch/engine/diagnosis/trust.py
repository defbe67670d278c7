"""Whether rlwatch may act here: a configuration file another user could have written turns every action off."""

from __future__ import annotations

from collections.abc import Iterator

from rlwatch.common.state import Finding, Snapshot
from rlwatch.engine.diagnosis.base import WARN, Context


def actions_off(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    if ctx.actions_off is None:
        return
    yield Finding(
        WARN,
        "actions_off",
        f"Actions are off: {ctx.actions_off.removesuffix('; actions are off (monitoring goes on)')}. Monitoring goes "
        "on. A file that says what rlwatch runs must belong to you (or root) and be writable by nobody else, nor "
        "sit in a directory others can write: fix its owner or mode (chown, chmod go-w), or pass --config FILE "
        "from a place of your own.",
        None,
    )
