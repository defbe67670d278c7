"""Real kernel logs, driver reports, ECC errors, NaN runs and shared-memory failures people posted (tests/real/host/,
each with its thread in sources.yaml), judged by the real `rlwatch report --json` in another process.

A kernel log is saved as ``dmesg.log`` beside an otherwise empty run (how a person hands one to rlwatch when the
container may not read the kernel's ring), a training log as its ``train.log``. The run's ``rlwatch.yaml`` reads saved
kernel logs only, so this machine's own kernel ring cannot change the answer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).parent / "real" / "host"
SOURCES: dict[str, dict[str, Any]] = yaml.safe_load((HERE / "sources.yaml").read_text(encoding="utf-8"))
RANK = {"critical": 0, "warning": 1, "info": 2}

CONFIG = {
    "profile": "generic",
    "training": {"logs": ["train.log"]},
    "gpu": {"backend": "none"},
    "host": {"kernel_log": "files"},
}


def run_dir(tmp_path: Path, name: str) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rlwatch.yaml").write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    shutil.copy(HERE / name, run / ("dmesg.log" if name.startswith("kernel/") else "train.log"))
    return run


def report(run: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "rlwatch", "report", str(run), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode in (0, 1, 3), out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def test_every_file_has_its_thread_and_every_entry_its_file() -> None:
    on_disk = {str(p.relative_to(HERE)) for p in HERE.rglob("*.log")}
    assert on_disk == set(SOURCES)
    for name, entry in SOURCES.items():
        assert entry["source"].startswith("https://github.com/"), name
        assert entry["what"] and "expect" in entry, name
        assert (HERE / name).read_text(encoding="utf-8").strip(), name


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_real_text_is_judged_as_a_person_would(name: str, tmp_path: Path) -> None:
    expect = SOURCES[name]["expect"]
    rep = report(run_dir(tmp_path, name))
    worst: dict[str, int] = {}
    for f in rep["findings"]:
        worst[f["code"]] = min(worst.get(f["code"], 9), RANK[f["severity"]])
    for code, severity in expect.get("codes", {}).items():
        assert code in worst, (code, [(f["code"], f["message"]) for f in rep["findings"]])
        assert worst[code] == RANK[severity], (code, severity, rep["findings"])
    for code in expect.get("absent", []):
        assert code not in worst, (code, rep["findings"])
    events = rep["kernel"]["events"] if rep["kernel"] else []
    if "oom_kills" in expect:
        assert len([e for e in events if e["kind"] == "oom_kill"]) == expect["oom_kills"]
    if "rss_bytes" in expect:
        assert [e["rss_bytes"] for e in events if e["kind"] == "oom_kill"] == [expect["rss_bytes"]]
    if "nan_at_step" in expect:
        loss = rep["learning"]["series"]["loss"]
        assert loss == [{"step": expect["nan_at_step"], "value": "nan", "time": None}]
        assert rep["learning"]["keys"]["loss"] == "actor/pg_loss"
    if name.startswith("kernel/"):
        assert rep["kernel"]["source"] == "files" and rep["kernel"]["available"] is True
        # a saved kernel log is the machine's: never counted as a log of the run's
        assert not any(p.endswith("dmesg.log") for e in rep["events"].values() for p in e["files"])
