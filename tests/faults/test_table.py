"""The fault table itself: what `make faults` prints must say which fault failed, in cells that wrap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.table import Row, main, render

pytestmark = pytest.mark.faults


def test_table_wraps_cells_and_counts_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        Row("files: a log replaced by a FIFO", "counted once, source says FIFO", "5 counted; 'is a FIFO'", "pass"),
        Row("server: answers 503", "DOWN with 'HTTP 503'", "x " * 60, "FAIL"),
        Row("GPU (real): lost", "blank", "needs a GPU", "skip"),
    ]
    lines = render(rows, widths=(20, 20, 30, 6))
    assert lines[-1] == "3 faults: 1 pass, 1 FAIL, 1 skipped"
    assert len({len(line) for line in lines[:-1]}) == 1  # every table line equally wide, however long a cell
    assert sum(line.startswith("|") and "FAIL" in line for line in lines) == 1
    assert any(line.startswith("| server: answers 503") for line in lines)
    saved = tmp_path / "rows.json"
    saved.write_text(json.dumps([r.__dict__ for r in rows]))
    assert main([str(saved)]) == 1  # a failed fault fails the printer too, for scripts
    assert "FAIL" in capsys.readouterr().out
    saved.write_text(json.dumps([rows[0].__dict__]))
    assert main([str(saved)]) == 0
