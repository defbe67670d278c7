"""Disk space on the run's volume, against the size of a checkpoint."""

from __future__ import annotations

from collections.abc import Iterator

from rlwatch.common.state import (
    Finding,
    Snapshot,
)
from rlwatch.engine.diagnosis.base import (
    CRIT,
    WARN,
    Context,
)
from rlwatch.engine.diagnosis.wording import (
    human_bytes,
)


def disk(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    d = s.disk
    if d and d.free_bytes is not None and d.free_bytes < ctx.thresholds.disk_free_bytes:
        size = ""
        if s.checkpoint and s.checkpoint.latest and s.checkpoint.latest.size_bytes:
            size = f"; a checkpoint takes {human_bytes(s.checkpoint.latest.size_bytes)}"
        yield Finding(
            CRIT if d.free_bytes < ctx.thresholds.disk_free_bytes / 4 else WARN,
            "disk_low",
            f"Only {human_bytes(d.free_bytes)} free on {d.path}{size}.",
            None,
        )
