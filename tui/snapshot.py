"""Headless rendering of the dashboard to SVG, for ``rlwatch snapshot`` and the README screenshots."""

from __future__ import annotations

import asyncio

from rlwatch.common.clock import Clock, FakeClock
from rlwatch.engine.feed import Feed
from rlwatch.tui.app import RlwatchApp


async def render_svg_async(feed: Feed, *, size: tuple[int, int] = (120, 40), clock: Clock | None = None) -> str:
    """Render the main screen without a terminal and return the SVG text (for callers already in an event loop)."""
    app = RlwatchApp(feed, clock=clock or FakeClock(feed.snapshot().time), live=False)
    async with app.run_test(headless=True, size=size) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        return app.export_screenshot(title="rlwatch")


def render_svg(feed: Feed, *, size: tuple[int, int] = (120, 40), clock: Clock | None = None) -> str:
    """Render the main screen without a terminal and return the SVG text.

    The app runs with no timers, so the picture depends only on the feed's data (ages are measured from the
    snapshot's own time). Must be called from outside any running event loop.
    """
    return asyncio.run(render_svg_async(feed, size=size, clock=clock))
