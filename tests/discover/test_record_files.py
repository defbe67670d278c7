"""Issue 41, the run's own files whatever their names: a text file of the run directory whose lines are recurring
records (`metrics.csv`, `progress.txt`, a JSON-lines `stdout`) is one of its logs; a dataset's rows, prose, a single
number, a binary are not. Live, what the run's processes hold open for writing (their stdout) is followed, wherever it
lies and whatever its name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlwatch.discover.discovery import RECORD_PROBE_BYTES, discover, record_log
from tests.looks import look_once, written_an_hour_ago
from tests.simhost import wait_until


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


@pytest.fixture
def no_procs(tmp_path: Path) -> str:
    root = tmp_path.parent / f"{tmp_path.name}-proc"
    root.mkdir()
    return str(root)


def _run(run: Path) -> None:
    _write(run / "metrics.csv", "step,loss,lr\n" + "".join(f"{s},{1 - s / 100:.3f},0.0003\n" for s in range(1, 41)))
    _write(run / "progress.txt", "".join(f"it {s:5d} | loss {1 - s / 100:.4f} | 0.14s/it\n" for s in range(1, 30)))
    _write(run / "stdout", "".join(json.dumps({"upd": s, "reward": s / 10}) + "\n" for s in range(1, 20)))
    # not logs: a dataset's rows (under data/), prose, a single number, a binary, a checkpoint
    _write(run / "data" / "train.csv", "id,text,label\n" + "".join(f"{i},sample {i},{i % 2}\n" for i in range(500)))
    _write(run / "README.txt", "This run fine-tunes a model.\nSee the config for its settings.\n")
    _write(run / "latest_checkpointed_iteration.txt", "40\n")
    _write(run / "weights", bytes(range(256)) * 64)
    _write(run / "global_step_40" / "model.pt", b"\x80\x02" + b"\0" * 100)


def test_record_files_of_the_run_are_its_logs(tmp_path: Path, no_procs: str) -> None:
    run = tmp_path / "run"
    _run(run)
    logs = set(discover(run, proc_root=no_procs).training.logs)
    assert {"metrics.csv", "progress.txt", "stdout"} <= logs, logs
    assert not logs & {"data/train.csv", "README.txt", "latest_checkpointed_iteration.txt", "weights"}, logs


def test_a_csv_of_the_run_gives_its_step_after_the_fact(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "metrics.csv", "step,loss,lr\n" + "".join(f"{s},{1 - s / 100:.3f},0.0003\n" for s in range(1, 41)))
    written_an_hour_ago(run / "metrics.csv")
    snap = look_once(run)
    assert snap.training is not None and snap.training.last_step == 40, snap.training


_WRITER = """
import sys, time
for step in range(1, 100000):
    print(f"round {step:5d} | loss {1 / step:.4f}", flush=True)
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_the_stdout_a_live_process_writes_is_followed_wherever_it_lies(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "elsewhere" / "job_output"
    target.parent.mkdir()
    with target.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", _WRITER], stdout=out, cwd=run)
    try:
        wait_until(lambda: target.read_text().count("\n") >= 5, timeout=30.0)
        logs = discover(run).training.logs
        assert str(target) in logs, logs
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _records(n: int) -> str:
    return "".join(f"it {s:5d} | loss {1 - s / 100:.4f}\n" for s in range(1, n + 1))


def test_a_file_without_records_is_not_read_again_until_it_changes(tmp_path: Path) -> None:
    """The engine asks at every look which files the run writes; a text file judged to hold no records is read again
    only once it changed (its bytes replaced under the same size and time are not seen: it was not read)."""
    path = tmp_path / "notes"
    path.write_text("This run fine-tunes a model.\n" * 4)
    assert not record_log(path)
    stat = path.stat()
    path.write_text(_records(4)[: stat.st_size].ljust(stat.st_size, "\n"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert not record_log(path), "read again although its size and time are those judged"
    with path.open("a") as fh:
        fh.write(_records(20))
    assert record_log(path), "not read again once it changed"


def test_a_binary_file_is_not_read_again_while_it_grows_but_a_new_file_at_its_inode_is(tmp_path: Path) -> None:
    path = tmp_path / "weights"
    path.write_bytes(b"\x80\x02" + b"\0" * 4096)
    assert not record_log(path)
    with path.open("ab") as fh:  # a checkpoint being written grows: judged once, not read at each look
        fh.write(_records(40).encode())
    assert not record_log(path)
    with path.open("w") as fh:  # truncated and written again, smaller: a new file for all that can be told
        fh.write(_records(20))
    assert record_log(path)


def test_a_log_past_a_hole_of_nuls_is_read_again_once_a_probe_of_text_follows_it(tmp_path: Path) -> None:
    """copytruncate under a writer without O_APPEND (``python train.py > train.log``): the writer goes on at its old
    offset, the file's start a hole of NULs. Judged binary while the hole is what its end shows, it is read again once
    a whole probe of records was written after the hole, and holds records."""
    path = tmp_path / "train.log"
    with path.open("wb") as fh:
        fh.truncate(64 * 1024)  # the hole up to the writer's offset
        fh.seek(0, os.SEEK_END)
        fh.write(_records(1).encode())
    assert not record_log(path)
    with path.open("ab") as fh:
        fh.write(_records(2000).encode())
    assert path.stat().st_size - 64 * 1024 > RECORD_PROBE_BYTES
    assert record_log(path), "a log past a hole of NULs judged binary for ever"
