"""Issue 34, steps that agree: a TRL run's log holds its Trainer bar and metric dicts; its latest checkpoint's
trainer_state.json says step 20 while the log is at 21. The training panel, the report (text and JSON), the events
and the stream say one step, the log's own (it said 20, the checkpoint's, on the panel beside 21 in the log view),
and a rate from the bar's own speed where the lines carry no time."""

from __future__ import annotations

import json
from pathlib import Path

from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json, to_text
from rlwatch.export.stream import changes
from rlwatch.widgets.training_panel import training_text

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
    assert "Training: step 21/150, 4896 steps/h (the bar's own speed)" in to_text(snap)
    data = json.loads(to_json(snap))
    assert data["training"]["last_step"] == 21 and data["training"]["rate_from"] == "bar"
    assert data["verdict"]["step"] == 21
    first = next(changes(None, snap))  # watch --json's first record
    assert first["verdict"]["step"] == 21 and first["events"]["step"] == 21
