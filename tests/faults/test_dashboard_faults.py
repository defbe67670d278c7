"""What a person sees on the dashboard while sources are broken: the live app over a real engine under fault."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Static

from rlwatch.common.clock import FakeClock
from rlwatch.engine.engine import Engine
from rlwatch.live import LiveFeed
from rlwatch.sources.nvml import NvmlBackend
from rlwatch.tui.app import RlwatchApp
from rlwatch.widgets.findings import FindingsBanner
from tests.faults.conftest import FaultRow, make_engine
from tests.sources.test_gpu_source import FakeNvml, board

pytestmark = pytest.mark.faults

REFUSED = "HTTPUtils WARNING: ConnectionRefusedError(111, \"Connect call failed ('10.0.0.1', 30000)\")\n"


async def until(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.02)


async def test_dashboard_shows_what_is_broken(
    tmp_path: Path, engines: list[Engine], fault_row: Callable[[str, str], FaultRow]
) -> None:
    row = fault_row(
        "dashboard: a hung GPU driver and a log turned into a directory at once",
        "the GPU panel keeps the last values marked stale, the sources line names the log; events stay live",
    )
    (tmp_path / "trainer.log").write_text(REFUSED)
    (tmp_path / "server.log").write_text("")
    fake = FakeNvml([board(0)])
    nvml = NvmlBackend(nvml=fake, clock=FakeClock(), query_timeout_s=0.2)
    engine = make_engine(
        tmp_path, {"training": {"logs": ["trainer.log", "server.log"]}, "gpu": {"backend": "nvml"}}, gpu_backend=nvml
    )
    engines.append(engine)
    engine.collect_once()
    engine.start()
    app = RlwatchApp(LiveFeed(engine), refresh_s=0.05)
    fake.block = threading.Event()
    try:
        async with app.run_test(size=(140, 45)) as pilot:
            gpu = app.main.query_one("#gpu-lines", Static)
            banner = app.main.query_one(FindingsBanner)
            await until(lambda: "stale" in str(gpu.render()))
            (tmp_path / "trainer.log").unlink()
            (tmp_path / "trainer.log").mkdir()
            with (tmp_path / "server.log").open("a") as f:
                f.write(REFUSED)
            await until(lambda: "trainer.log: is a directory" in str(banner.render()))
            await until(lambda: engine.snapshot().events["connection_refused"].count == 2)
            await pilot.pause()
            gpu_text = str(gpu.render())
            device_line = gpu_text.splitlines()[1]
            assert "40" in device_line  # GPU 0's last utilisation, still shown
            row.saw(
                "GPU line: '" + next(line for line in gpu_text.splitlines() if "stale" in line).strip()[:90] + "…'; "
                "banner: 'sources: logs: …/trainer.log: is a directory'; server.log's event counted (2)"
            )
    finally:
        fake.block.set()
