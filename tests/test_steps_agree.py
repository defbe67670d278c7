"""Issue 34, steps that agree: a TRL run's log holds its Trainer bar and metric dicts; its latest checkpoint's
trainer_state.json says step 20 while the log is at 21. The training panel, the report (text and JSON), the events
and the stream say one step, the log's own (it said 20, the checkpoint's, on the panel beside 21 in the log view),
and a rate from the bar's own speed where the lines carry no time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import Snapshot
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.export.exporter import SnapshotCollector
from rlwatch.export.report import to_json, to_text
from rlwatch.export.stream import changes
from rlwatch.widgets.training_panel import training_text
from tests.looks import look_once, written_an_hour_ago

BANNER = "***** Running training *****\n  Num examples = 600\n  Total optimization steps = 150\n"


def _bar(n: int) -> str:
    filled = n * 10 // 150
    return f"\r {n * 100 // 150:2d}%|{'█' * filled}{' ' * (10 - filled)}| {n}/150 [00:{n:02d}<01:36,  1.36it/s]"


def _run(root: Path) -> Path:
    """TRL's stdout as a captured log: the bar redrawn with CR, each dict written on a line of its own (tqdm.write),
    21 steps logged (logging_steps 1); the checkpoint of step 20 beside it."""
    text = BANNER
    for n in range(1, 22):
        text += _bar(n) + f"\n{{'loss': 0.01, 'grad_norm': 0.2, 'reward': 0.5, 'epoch': {n / 150:.2f}}}\n"
    (root / "train.log").write_text(text + _bar(21))
    ckpt = root / "checkpoint-20"
    ckpt.mkdir()
    history = [{"loss": 0.01, "reward": 0.5, "step": s, "epoch": s / 150} for s in range(1, 21)]
    state = {"global_step": 20, "max_steps": 150, "logging_steps": 1, "epoch": 0.13, "log_history": history}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    return root


def test_panel_report_events_and_stream_say_the_logs_step(tmp_path: Path) -> None:
    run = _run(tmp_path)
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run)
    engine.unseen_writer_wait_s = 0
    try:
        snap = engine.collect_once()
    finally:
        engine.tailer.close()
    assert snap.checkpoint is not None and snap.checkpoint.latest is not None
    assert snap.checkpoint.latest.global_step == 20
    tr = snap.training
    assert tr is not None and (tr.last_step, tr.total_steps) == (21, 150)
    assert snap.verdict is not None and (snap.verdict.step, snap.verdict.step_from) == (21, "log")
    assert snap.events["step"].count == 21
    panel = training_text(tr, snap.time, snap.run_state, snap.verdict).plain
    assert "step 21/150" in panel and "(checkpoint)" not in panel
    assert "Training: step 21/150 (read from a bar's i/N), 4896 steps/h (the bar's own speed)" in to_text(snap)
    data = json.loads(to_json(snap))
    assert data["training"]["last_step"] == 21 and data["training"]["rate_from"] == "bar"
    assert data["training"]["step_source"] == "a bar's i/N"
    assert data["verdict"]["step"] == 21
    first = next(changes(None, snap))  # watch --json's first record
    assert first["verdict"]["step"] == 21 and first["events"]["step"] == 21


CORPUS = Path(__file__).resolve().parent / "real" / "progress"
ENTRIES: list[dict[str, Any]] = yaml.safe_load((CORPUS / "sources.yaml").read_text())


def _exported_step(snap: Snapshot) -> float | None:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, clock=FakeClock(snap.time)))
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for sample in fam.samples:
            if sample.name == "rlwatch_training_step":
                return sample.value
    return None


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"].rsplit(".", 1)[0] for e in ENTRIES])
def test_one_step_everywhere_over_the_progress_corpus(tmp_path: Path, entry: dict[str, Any]) -> None:
    """Issue 41: on every run of the progress corpus (both halves: this asks that the views agree, not that the
    step is right), the events, the tracker, the verdict, the report (text and JSON), the exporter, watch --json's
    first record and the panel say one step, and the report and the panel the field it was read from."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    shutil.copyfile(CORPUS / entry["file"], log)
    written_an_hour_ago(log)
    snap = look_once(run)
    tr, v = snap.training, snap.verdict
    assert tr is not None and v is not None
    step = tr.last_step
    assert v.step == step, (entry["file"], v, tr)
    data = json.loads(to_json(snap))
    assert data["training"]["last_step"] == data["verdict"]["step"] == step
    counted = data["events"].get("step", {}).get("count", 0)
    assert (counted > 0) == (step is not None), (entry["file"], counted, step)
    first = next(changes(None, snap))
    assert first["verdict"]["step"] == step and (first["events"].get("step", 0) > 0) == (step is not None)
    assert _exported_step(snap) == step
    panel = training_text(tr, snap.time, snap.run_state, snap.verdict).plain
    text = to_text(snap)
    if step is None:
        assert "no step yet" in panel and tr.step_source is None
        return
    assert tr.step_source, entry["file"]
    assert data["training"]["step_source"] == tr.step_source
    assert f"step {step}" in panel and f"from {tr.step_source}" in panel, panel
    assert f"Training: step {step}" in text and f"(read from {tr.step_source})" in text, text
