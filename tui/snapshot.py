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
        return preserve_spaces(app.export_screenshot(title="rlwatch"))


def preserve_spaces(svg: str) -> str:
    """The SVG with ``xml:space="preserve"`` on its root: a renderer that follows XML's default collapses runs of
    spaces, and the dashboard's columns would fall apart in it (browsers keep them either way)."""
    if "xml:space=" in svg[:500]:
        return svg
    return svg.replace("<svg ", '<svg xml:space="preserve" ', 1)


def render_svg(feed: Feed, *, size: tuple[int, int] = (120, 40), clock: Clock | None = None) -> str:
    """Render the main screen without a terminal and return the SVG text.

    The app runs with no timers, so the picture depends only on the feed's data (ages are measured from the
    snapshot's own time). Must be called from outside any running event loop.
    """
    return asyncio.run(render_svg_async(feed, size=size, clock=clock))
