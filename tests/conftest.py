"""Shared fixtures."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.simhost import Sim, with_id
from tests.unprivileged import runtime, separated  # noqa: F401 - fixtures: rlwatch as a second user runs it

# The suite's logs are written by the tests, never by a process of a run: a one-shot report need not watch them grow
# for a writer it cannot see (two seconds each). The tests of that watch set it on their engine.
os.environ.setdefault("RLWATCH_UNSEEN_WRITER_WAIT_S", "0")


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


_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> Any:
    """Tests talk to servers they start on this machine, never to another host (fixture logs name such hosts)."""
    if self.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0]
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise ConnectionRefusedError(111, f"tests may only connect to loopback, not {host}")
    return _real_connect(self, address)


@pytest.fixture(autouse=True, scope="session")
def _no_network_beyond_loopback() -> Iterator[None]:
    socket.socket.connect = _loopback_only  # type: ignore[method-assign, assignment]
    yield
    socket.socket.connect = _real_connect  # type: ignore[method-assign]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test started, each in a session of its own: their whole groups are killed at its end (only what
    the test started is ever signalled). A module that needs another kind of list defines its own."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)
