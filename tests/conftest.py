"""Shared fixtures."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.simhost import Sim, with_id


@pytest.fixture
def sims() -> Iterator[list[Sim]]:
    started: list[Sim] = []
    yield started
    for sim in started:  # a failed assertion must not leave a simulation running
        if sim.proc.poll() is None:
            sim.proc.send_signal(signal.SIGINT)
            sim.proc.wait(timeout=30)
        for proc in with_id(sim.sim_id):
            proc.kill()
