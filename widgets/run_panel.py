"""The run panel: training progress above checkpoints and the resume point, one box, one focus stop."""

from __future__ import annotations

from textual.app import ComposeResult

from rlwatch.common.state import Snapshot
from rlwatch.widgets.checkpoint_panel import CheckpointSection
from rlwatch.widgets.panel import Panel
from rlwatch.widgets.training_panel import TrainingSection


class RunPanel(Panel):
    def compose(self) -> ComposeResult:
        yield TrainingSection(id="training", classes="body")
        yield CheckpointSection(id="checkpoint", classes="body")

    def data_key(self, snap: Snapshot) -> object:
        return (snap.training, snap.checkpoint, snap.recover, snap.disk, snap.timeline)

    def show(self, snap: Snapshot) -> None:
        self.query_one(TrainingSection).show(snap)
        self.query_one(CheckpointSection).show(snap)
