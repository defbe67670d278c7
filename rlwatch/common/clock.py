"""The clock, injected wherever time matters, so tests never sleep and never flake."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock epoch seconds: for display and for comparing with file times."""
        ...

    def monotonic(self) -> float:
        """Seconds that never jump: for rates, windows, deadlines and budgets."""
        ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told: for tests and deterministic snapshots."""

    def __init__(self, start: float = 1_763_716_800.0) -> None:  # 2025-11-21 09:20:00 UTC
        self._wall = start
        self._mono = 1000.0

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._wall += seconds
        self._mono += seconds

    def jump_wall(self, seconds: float) -> None:
        """Move only the wall clock, as NTP or a user does; the monotonic clock is unaffected."""
        self._wall += seconds
