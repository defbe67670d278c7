"""The live :class:`~rlwatch.engine.feed.Feed`: a running engine plus the actions API, as the dashboard sees them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlwatch.common.state import ActionPlan, ActionResult, Snapshot, StackReport, TaggedLine
from rlwatch.engine.engine import Engine
from rlwatch.remedy.actions.api import Actions


class LiveFeed:
    def __init__(self, engine: Engine, actions: Actions | None = None) -> None:
        self.engine = engine
        self.actions = actions or Actions(engine)
        self.readonly = engine.readonly

    def snapshot(self) -> Snapshot:
        return self.engine.snapshot()

    def lines_after(self, seq: int, limit: int = 2000) -> Sequence[TaggedLine]:
        return self.engine.lines_after(seq, limit)

    def plan(self, action: str) -> ActionPlan:
        return self.actions.plan(action)

    def on_change(self, callback: Callable[[], None]) -> None:
        self.engine.on_snapshot(lambda _snapshot: callback())

    def execute(self, plan: ActionPlan) -> ActionResult:
        return self.actions.execute(plan)

    def stacks(self) -> StackReport | None:
        return self.engine.capture_stacks("asked from the dashboard")
