"""Real failure text users posted in public threads (tests/real/threads), read after the fact as a person would.

Each excerpt is put alone in a run directory, its time set an hour back (a person looks after the run died), and
the real report is built from it. Judged against the label a person wrote for it (corpus.yaml):

- a run that crashed, hung or stopped is never called healthy (status ok, or a healthy run state);
- the report names what a person reading the excerpt names: one of the label's ``names`` in a finding;
- a healthy excerpt raises nothing critical, unless its label says it should (NaN metrics on a live run).

The table of results is printed (``-s``) for the record.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json_dict

THREADS = Path(__file__).resolve().parent / "real" / "threads"
ENTRIES: list[dict[str, Any]] = yaml.safe_load((THREADS / "corpus.yaml").read_text())
BROKEN = ("crashed", "hung", "stopped")


def _report(tmp_path: Path, entry: dict[str, Any]) -> dict[str, Any]:
    run = tmp_path / "run"
    run.mkdir()
    # Kernel logs are saved beside a run as people do (`dmesg > dmesg.log`); the rest keep their names.
    name = "dmesg.log" if entry["framework"] == "kernel" else entry["file"]
    target = run / name
    shutil.copyfile(THREADS / entry["file"], target)
    an_hour_ago = time.time() - 3600
    os.utime(target, (an_hour_ago, an_hour_ago))
    cfg, _ = resolve_config(run, None, "auto")
    engine = Engine(cfg, run)
    try:
        snap = engine.collect_once()
    finally:
        engine.stop()
    return to_json_dict(snap)


def test_the_corpus_is_labelled_whole() -> None:
    files = {p.name for p in THREADS.glob("*.log")}
    assert files == {e["file"] for e in ENTRIES}
    for e in ENTRIES:
        assert e["run_state"] in ("crashed", "hung", "stopped", "finished", "progressing", "unknown")
        assert e["source"].startswith("https://github.com/"), e["file"]
        for rx in e["names"]:
            re.compile(rx)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"][:40] for e in ENTRIES])
def test_real_failure_text_is_named_and_never_called_healthy(tmp_path: Path, entry: dict[str, Any]) -> None:
    report = _report(tmp_path, entry)
    findings = report["findings"]
    messages = [f["message"] for f in findings]
    state = report["run_state"]["state"]
    label = entry["run_state"]
    if label in BROKEN or entry["severity"] == "critical":
        assert report["status"] not in ("ok",), (state, messages)
        assert state not in ("progressing", "finished"), (state, messages)
    if entry["names"]:
        named = [m for m in messages if any(re.search(rx, m, re.IGNORECASE) for rx in entry["names"])]
        assert named, f"{entry['file']}: none of {entry['names']} in {messages}"
    if entry["severity"] == "none":
        assert not [f for f in findings if f["severity"] == "critical"], messages
