"""What a front end reads: one interface implemented by the live engine and by fixed data for tests.

The dashboard never reaches into sources; it asks a :class:`Feed` for the latest immutable snapshot, for log
lines after a sequence number, and for action plans. Keeping this surface small is what lets snapshot tests render
the real screens from fixed data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from rlwatch.common.state import ActionPlan, ActionResult, Snapshot, StackReport, TaggedLine


class Feed(Protocol):
    readonly: bool

    def snapshot(self) -> Snapshot:
        """The latest snapshot; cheap (a reference), safe to call from the UI thread."""
        ...

    def lines_after(self, seq: int, limit: int = 2000) -> Sequence[TaggedLine]:
        """Log lines with ``seq`` greater than the given one, oldest first, at most ``limit`` of the newest."""
        ...

    def plan(self, action: str) -> ActionPlan:
        """What ``action`` would do now. Never signals anything."""
        ...

    def execute(self, plan: ActionPlan) -> ActionResult:
        """Carry out a confirmed plan (blocking: call from a worker thread)."""
        ...

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback``, from any thread, whenever there is something new to show (fixed data: never)."""
        ...

    def stacks(self) -> StackReport | None:
        """Where each process of the run stands now (its Python stack, read without pausing it); blocking."""
        ...


class StaticFeed:
    """Fixed data: for snapshot tests and for rendering a saved state."""

    def __init__(
        self,
        snapshot: Snapshot,
        lines: Sequence[TaggedLine] = (),
        plans: dict[str, ActionPlan] | None = None,
        *,
        readonly: bool = False,
    ) -> None:
        self._snapshot = snapshot
        self._lines = list(lines)
        self._plans = plans or {}
        self.readonly = readonly
        self.executed: list[ActionPlan] = []

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def lines_after(self, seq: int, limit: int = 2000) -> Sequence[TaggedLine]:
        return [line for line in self._lines if line.seq > seq][-limit:]

    def plan(self, action: str) -> ActionPlan:
        if action in self._plans:
            return self._plans[action]
        return ActionPlan(action=action, targets=(), steps=(), refused="nothing to do")

    def on_change(self, callback: Callable[[], None]) -> None:
        pass  # fixed data never changes

    def stacks(self) -> StackReport | None:
        return self._snapshot.stacks

    def execute(self, plan: ActionPlan) -> ActionResult:
        self.executed.append(plan)
        return ActionResult(action=plan.action, ok=True, message=f"{plan.action}: done (fixed data)")
