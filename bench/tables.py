"""What the dashboard's screen spends on a snapshot where one age changed: the process table with 20 rows, one of
them started a minute ago (its age moves every second, the others' once a minute), its panel maximised at 120x40,
headless, in-process.

``python bench/tables.py [--snapshots N]`` (run as a file, so that ``PYTHONPATH`` picks the checkout measured:
``PYTHONPATH=OTHER_CHECKOUT python -P bench/tables.py`` measures another). Per snapshot: the process CPU time of the
screen's refresh and paint (``refresh_data`` then one pause of the pilot, which paints), and within it the process
panel's ``show`` and the process table's ``render_lines``; medians over N snapshots, each one second after the last.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

from rlwatch.common.clock import FakeClock
from rlwatch.engine.feed import StaticFeed
from rlwatch.tui.app import RlwatchApp
from tests import snapshot_data as data

ROWS = 20


def _snapshot() -> Any:
    base = data.server_crash()
    template = base.processes[0]
    procs = tuple(
        dataclasses.replace(
            template,
            pid=5000 + i,
            name=f"worker-{i}",
            role="worker",
            started_at=base.time - (60 if i == 0 else 7200 + 600 * i),
            attempt=None,
        )
        for i in range(ROWS)
    )
    return dataclasses.replace(base, processes=procs)


def _timed(obj: object, name: str, into: list[float]) -> None:
    """Wrap ``obj.name`` so that its process CPU time is added to ``into[-1]``."""
    real: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kw: Any) -> Any:
        t = time.process_time()
        try:
            return real(*args, **kw)
        finally:
            into[-1] += time.process_time() - t

    setattr(obj, name, wrapper)


async def measure(snapshots: int) -> dict[str, float]:
    base = _snapshot()
    feed = StaticFeed(base, data.server_crash_lines())
    app = RlwatchApp(feed, clock=FakeClock(base.time), live=False, refresh_s=1e6)
    screen_ms: list[float] = []
    show: list[float] = [0.0]
    render: list[float] = [0.0]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5", "m")  # the processes panel maximised: all 20 rows on screen
        await pilot.pause(0.5)
        panel = app.main.query_one("#p5")
        table = app.main.query_one("#process-table")
        assert table.region.height > ROWS // 2, "the process table is not on screen"
        _timed(panel, "show", show)
        _timed(table, "render_lines", render)
        for i in range(snapshots):
            feed._snapshot = dataclasses.replace(base, time=base.time + i + 1)
            show.append(0.0)
            render.append(0.0)
            t = time.process_time()
            app.main.refresh_data()
            await pilot.pause()
            screen_ms.append((time.process_time() - t) * 1000)
    return {
        "screen": statistics.median(screen_ms),
        "show": statistics.median(show[1:]) * 1000,
        "render": statistics.median(render[1:]) * 1000,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="bench/tables.py")
    p.add_argument("--snapshots", type=int, default=300)
    args = p.parse_args()
    with data.utc_timezone():
        r = asyncio.run(measure(args.snapshots))
    print(
        f"median over {args.snapshots} snapshots: the screen {r['screen']:.2f} ms, the process panel's show "
        f"{r['show']:.2f} ms, the process table's render_lines {r['render']:.2f} ms (process CPU)"
    )


if __name__ == "__main__":
    main()
