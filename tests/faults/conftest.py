"""Fixtures of the fault suite: each test fills one row (fault, expected behaviour, what it observed).

The rows travel on the test item's ``user_properties``, so ``tests/faults/table.py`` can print them after the run
together with each test's outcome, without any shared state between the tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlwatch.common.state import Snapshot, SourceStatus
from rlwatch.config.models import Config
from rlwatch.engine.engine import Engine
from tests.unprivileged import CAN_DROP_PRIVILEGES, NOBODY, as_nobody

ROW_KEY = "fault_row"
PYTHON = sys.executable


@dataclass
class FaultRow:
    """One line of the fault table; ``observed`` is written by the test as it checks what a user would see."""

    fault: str
    expected: str
    observed: str = ""

    def saw(self, text: str) -> None:
        self.observed = f"{self.observed}; {text}" if self.observed else text


@pytest.fixture
def fault_row(request: pytest.FixtureRequest) -> Callable[[str, str], FaultRow]:
    def make(fault: str, expected: str) -> FaultRow:
        row = FaultRow(fault, expected)
        request.node.user_properties.append((ROW_KEY, row))
        return row

    return make


# ------------------------------------------------------------------------------------------------------ helpers
def source(snap: Snapshot, name: str) -> SourceStatus | None:
    return next((s for s in snap.sources if s.name == name), None)


def source_error(snap: Snapshot, name: str) -> str | None:
    status = source(snap, name)
    return None if status is None or status.ok else status.error


def make_engine(run_dir: Path, data: dict[str, Any] | None = None, **kwargs: Any) -> Engine:
    """An engine over ``run_dir`` with a configuration given as the YAML file would hold it."""
    cfg = Config.model_validate({"gpu": {"backend": "none"}, "interval_s": 0.05, **(data or {})})
    return Engine(cfg, run_dir, **kwargs)


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    """Engines a test started; stopped even when an assertion fails."""
    started: list[Engine] = []
    yield started
    for engine in started:
        engine.stop()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test started (each in its own session); killed with their group when the test ends."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def rlwatch_cmd(*args: str) -> list[str]:
    """The real command line, run by this interpreter (the dashboard ones through the console script's module)."""
    return [PYTHON, "-c", "import sys; from rlwatch.tui.launch import main; sys.exit(main())", *args]


def run_cli(*args: str, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        rlwatch_cmd(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )


__all__ = ["CAN_DROP_PRIVILEGES", "NOBODY", "as_nobody"]
