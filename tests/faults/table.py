"""The fault table: a pytest plugin that prints one row per fault after the run, and a printer for saved rows.

``make faults`` runs ``pytest -m faults -p tests.faults.table``: each fault test fills a row through the
``fault_row`` fixture (``tests/faults/conftest.py``), this plugin joins it with the test's outcome and prints
``fault | expected behaviour | observed | result``. With ``RLWATCH_FAULTS_JSON=FILE`` the rows are also written
there, and ``python -m tests.faults.table FILE`` prints them again.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

ROW_KEY = "fault_row"
WIDTHS = (34, 44, 52, 6)
HEADER = ("fault", "expected behaviour", "observed", "result")


@dataclass
class Row:
    fault: str
    expected: str
    observed: str
    result: str  # "pass" | "FAIL" | "skip"


def _cells(row: Row) -> tuple[str, str, str, str]:
    return (row.fault, row.expected, row.observed, row.result)


def render(rows: Sequence[Row], widths: Sequence[int] = WIDTHS) -> list[str]:
    """A plain-text table with wrapped cells, so it reads in a terminal and in a CI log alike."""

    def line(cells: Iterable[str]) -> list[str]:
        wrapped = [textwrap.wrap(c, w) or [""] for c, w in zip(cells, widths, strict=True)]
        height = max(len(w) for w in wrapped)
        return [
            "| "
            + " | ".join((w[i] if i < len(w) else "").ljust(width) for w, width in zip(wrapped, widths, strict=True))
            + " |"
            for i in range(height)
        ]

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    out = [*line(HEADER), rule]
    for row in rows:
        out.extend(line(_cells(row)))
        out.append(rule)
    passed = sum(r.result == "pass" for r in rows)
    failed = sum(r.result == "FAIL" for r in rows)
    skipped = sum(r.result == "skip" for r in rows)
    out.append(f"{len(rows)} faults: {passed} pass, {failed} FAIL, {skipped} skipped")
    return out


class FaultTable:
    """Collects the rows of every fault test with its outcome (a failure in any phase fails the row)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[Any]] = {}
        self.outcome: dict[str, str] = {}
        self.reason: dict[str, str] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        rows = [value for key, value in report.user_properties if key == ROW_KEY]
        if rows:
            self.rows[report.nodeid] = rows
        previous = self.outcome.get(report.nodeid)
        if report.failed:
            self.outcome[report.nodeid] = "FAIL"
            message = report.longreprtext.strip().splitlines()
            errors = [m for m in message if m.startswith("E ")]
            self.reason.setdefault(report.nodeid, (errors or message or ["failed"])[0].removeprefix("E").strip())
        elif report.skipped and previous is None:
            self.outcome[report.nodeid] = "skip"
            longrepr = report.longrepr
            if isinstance(longrepr, tuple) and len(longrepr) == 3:
                self.reason[report.nodeid] = str(longrepr[2]).removeprefix("Skipped: ")
        elif report.when == "call" and previous is None:
            self.outcome[report.nodeid] = "pass"

    def collected(self) -> list[Row]:
        out = []
        for nodeid, rows in self.rows.items():
            result = self.outcome.get(nodeid, "FAIL")
            for row in rows:
                observed = row.observed or "(nothing recorded)"
                if result != "pass" and nodeid in self.reason:
                    observed = f"{observed} [{self.reason[nodeid][:200]}]"
                out.append(Row(row.fault, row.expected, observed, result))
        return out

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        rows = self.collected()
        if not rows:
            return
        terminalreporter.section("faults")
        for text in render(rows):
            terminalreporter.write_line(text)
        target = os.environ.get("RLWATCH_FAULTS_JSON")
        if target:
            with open(target, "w", encoding="utf-8") as out:
                json.dump([r.__dict__ for r in rows], out, indent=1)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FaultTable(), "rlwatch-fault-table")


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.faults.table ROWS.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        rows = [Row(**item) for item in json.load(f)]
    print("\n".join(render(rows)))
    return 0 if all(r.result != "FAIL" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
