"""Log files under fault, tailed by a running engine: nothing lost, nothing counted twice, the trouble shown."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json_dict, to_text
from tests.faults.conftest import FaultRow, make_engine, source_error
from tests.simhost import wait_until

pytestmark = pytest.mark.faults

REFUSED = "HTTPUtils WARNING: ConnectionRefusedError(111, \"Connect call failed ('10.0.0.1', 30000)\")\n"
FILLER = "20251121-09:15:30.652 StatsLogger INFO: rollout batch done, nothing to see here\n"


def refused(engine: Engine) -> int:
    return engine.snapshot().events["connection_refused"].count


def started(engines: list[Engine], tmp_path: Path, logs: list[str], **kwargs: object) -> Engine:
    engine = make_engine(tmp_path, {"training": {"logs": logs}}, **kwargs)
    engines.append(engine)
    engine.drain_logs()
    engine.sample()
    engine.build()
    engine.start()
    return engine


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def test_polling_without_inotify(
    tmp_path: Path, engines: list[Engine], fault_row: Callable[[str, str], FaultRow], monkeypatch: pytest.MonkeyPatch
) -> None:
    row = fault_row(
        "files: logs on a filesystem without inotify",
        "polled every 0.25 s instead: new lines still counted within about a second",
    )
    monkeypatch.setenv("WATCHFILES_FORCE_POLLING", "1")  # what a person sets for NFS or overlay mounts
    log = tmp_path / "trainer.log"
    log.write_text(REFUSED)
    engine = started(engines, tmp_path, ["*.log"])
    assert engine.waker.mode == "polling"
    wait_until(lambda: refused(engine) == 1, 5)
    t0 = time.monotonic()
    append(log, REFUSED * 3)
    wait_until(lambda: refused(engine) == 4, 5)
    latency = time.monotonic() - t0
    assert latency < 2.0
    row.saw(f"waker mode 'polling'; 3 appended lines counted after {latency:.2f}s, total exactly 4")


@pytest.mark.parametrize("replacement", ["directory", "FIFO"])
def test_log_replaced_by_something_else(
    tmp_path: Path, engines: list[Engine], fault_row: Callable[[str, str], FaultRow], replacement: str
) -> None:
    row = fault_row(
        f"files: a log replaced by a {replacement}",
        "lines written before it are all counted, the log source says what the path is now, a new file is read "
        "from its start: nothing lost or counted twice",
    )
    log = tmp_path / "trainer.log"
    other = tmp_path / "other.log"
    log.write_text(REFUSED * 3)
    other.write_text("")
    engine = started(engines, tmp_path, ["trainer.log", "other.log"])
    wait_until(lambda: refused(engine) == 3, 5)
    append(log, REFUSED * 2)  # written just before the swap: must still be read from the open descriptor
    log.unlink()
    if replacement == "directory":
        log.mkdir()
    else:
        os.mkfifo(log)
    wait_until(lambda: source_error(engine.snapshot(), "logs") is not None, 5)
    error = source_error(engine.snapshot(), "logs")
    assert error is not None and str(log) in error
    assert ("is a directory" if replacement == "directory" else "FIFO") in error
    wait_until(lambda: refused(engine) == 5, 5)
    append(other, REFUSED)  # the other log stays live meanwhile
    wait_until(lambda: refused(engine) == 6, 5)
    report = to_json_dict(engine.snapshot())
    assert any(s["name"] == "logs" and not s["ok"] for s in report["sources"])
    row.saw(f"5 counted before the swap; source logs: {error!r}; other log still counted")
    if replacement == "directory":
        log.rmdir()
    else:
        log.unlink()
    log.write_text(REFUSED * 4)
    wait_until(lambda: refused(engine) == 10, 5)
    wait_until(lambda: source_error(engine.snapshot(), "logs") is None, 5)
    assert engine.snapshot().events["connection_refused"].files[str(log)] == 9
    row.saw("new regular file: its 4 lines counted once (total 10), logs source healthy again")


def test_log_grows_by_100_mb_per_second(
    tmp_path: Path, engines: list[Engine], fault_row: Callable[[str, str], FaultRow]
) -> None:
    row = fault_row(
        "files: a log that grows by 100 MB/s",
        "memory bounded, the other loops keep sampling, the backlog is caught up and counted exactly",
    )
    log = tmp_path / "trainer.log"
    log.write_text("")
    engine = started(engines, tmp_path, ["*.log"])
    block = (FILLER * 999 + REFUSED).encode()  # one event per 1000 lines
    per_10ms = max(1, (1_000_000 // len(block)))  # ~1 MB every 10 ms
    rss_before = psutil.Process().memory_info().rss
    written = 0
    nbytes = 0
    stop_at = time.monotonic() + 1.0

    def writer() -> None:
        nonlocal written, nbytes
        with log.open("ab") as f:
            tick = time.monotonic()
            while tick < stop_at:
                for _ in range(per_10ms):
                    f.write(block)
                    written += 1
                    nbytes += len(block)
                f.flush()
                tick += 0.01
                time.sleep(max(0.0, tick - time.monotonic()))  # pacing the writer, not synchronising the test

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    rate = nbytes / 1e6
    peak = psutil.Process().memory_info().rss
    sampled_during: list[float] = []

    def caught_up() -> bool:
        snap = engine.snapshot()
        mem = next((s for s in snap.sources if s.name == "memory"), None)
        if mem is not None and mem.last_sample is not None and mem.last_sample not in sampled_during:
            sampled_during.append(mem.last_sample)
        nonlocal peak
        peak = max(peak, psutil.Process().memory_info().rss)
        return refused(engine) >= written

    t0 = time.monotonic()
    wait_until(caught_up, 60)
    behind = time.monotonic() - t0
    assert refused(engine) == written
    growth = (peak - rss_before) / 1e6
    assert growth < 300, f"RSS grew by {growth:.0f} MB"
    assert len(sampled_during) >= 2 or behind < 0.5  # the sample loop went on while the log loop caught up
    row.saw(
        f"{rate:.0f} MB written in 1 s; caught up {behind:.1f}s later, exactly {written} events; RSS +{growth:.0f} MB; "
        f"memory sampled {len(sampled_during)}x while catching up"
    )


@pytest.mark.slow
def test_two_hundred_logs(tmp_path: Path, engines: list[Engine], fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row("files: 200 log files at once", "all tailed, every event counted once per file, live appends seen")
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(200):
        (logs / f"worker-{i:03d}.log").write_text(REFUSED * 3)
    engine = started(engines, tmp_path, ["logs/*.log"])
    wait_until(lambda: refused(engine) == 600, 20)
    for i in range(200):
        append(logs / f"worker-{i:03d}.log", REFUSED)
    wait_until(lambda: refused(engine) == 800, 20)
    snap = engine.snapshot()
    assert len(snap.logs) == 200
    assert set(snap.events["connection_refused"].files.values()) == {4}
    assert source_error(snap, "logs") is None
    row.saw("200 files followed; 600 backlog + 200 live events, 4 per file, no source error")


def test_unreadable_log_is_reported(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "files: a log path that cannot be read (a directory where a file was configured)",
        "one line in the report's 'Not available' section; the other logs counted",
    )
    (tmp_path / "trainer.log").mkdir()
    (tmp_path / "server.log").write_text(REFUSED)
    engine = make_engine(tmp_path, {"training": {"logs": ["trainer.log", "server.log"]}})
    snap = engine.collect_once()
    engine.stop()
    text = to_text(snap)
    assert "Not available" in text and "trainer.log: is a directory" in text
    assert snap.events["connection_refused"].count == 1
    row.saw("report: 'logs: …/trainer.log: is a directory'; server.log's event counted")
