"""Root's side of privilege separation answers its three requests, and hands over only the kernel lines that matter.

The server runs here in a thread over a real socket pair, with a kernel reader on a regular file of /dev/kmsg records
(read the same way as the device); the requests are the ones a watcher that dropped its rights sends.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.sources import hostwide
from rlwatch.sources.kernel import KmsgReader, LiveUnavailable

RECORDS = [
    "6,100,1000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
    "6,101,1000100,-;audit: type=1400 user password=hunter2 ROOT_ONLY_NOISE",
    "3,102,1000200,-;Out of memory: Killed process 4243 (python) total-vm:100kB, anon-rss:50kB, file-rss:0kB",
    "6,103,1000300,-;eth0: link up ROOT_ONLY_NOISE",
]


@pytest.fixture
def helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[hostwide.HostWide]:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("\n".join(RECORDS) + "\n")
    monkeypatch.setattr(hostwide, "_kernel_readers", lambda timeout_s: [KmsgReader(str(kmsg))])
    ours, theirs = socket.socketpair()
    server = threading.Thread(target=hostwide.serve, args=(theirs,), daemon=True)
    server.start()
    client = hostwide.HostWide(ours, 1, "nobody")
    yield client
    client.close()
    server.join(timeout=10)
    assert not server.is_alive()  # the server ends when its peer closes the socket
    theirs.close()


def test_kernel_lines_are_only_those_rlwatch_reads(helper: hostwide.HostWide) -> None:
    reader = hostwide.HostWideReader(helper)
    reader.open()
    assert reader.name == "kmsg"
    lines = reader.read()
    assert lines == [RECORDS[0], RECORDS[2]]
    assert not any("ROOT_ONLY_NOISE" in line for line in lines)
    assert reader.read() == []  # read once: the reader goes on from where it was


def test_only_the_fixed_requests_are_answered(helper: hostwide.HostWide) -> None:
    with pytest.raises(ValueError):  # the client itself sends nothing else
        helper.ask("kernel-read /etc/shadow")
    assert isinstance(helper.holders(), dict)
    ours, theirs = socket.socketpair()  # a peer that writes what it likes gets nothing but a refusal
    server = threading.Thread(target=hostwide.serve, args=(theirs,), daemon=True)
    server.start()
    with ours, ours.makefile("rb") as answers:
        for request in (b"/etc/shadow\n", b"holders /root\n", b"kernel-read;holders\n"):
            ours.sendall(request)
            assert json.loads(answers.readline()) == {"error": "unknown request"}
    server.join(timeout=10)
    theirs.close()


def test_a_gone_helper_is_a_degraded_reading_not_a_crash(helper: hostwide.HostWide) -> None:
    helper.close()
    assert helper.holders() is None
    reader = hostwide.HostWideReader(helper)
    with pytest.raises(LiveUnavailable, match=r"did not answer|has ended"):
        reader.open()
