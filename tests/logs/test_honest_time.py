"""Honest time: a line without a timestamp read from a backlog never gets the time it was read.

It is bounded by the latest timestamp before it in its file and by the file's modification time, and placed by
position ("train.log:12, after step 7"); lines appended while the file is followed may use the time they were read
(within one poll). The report, its JSON, the diagnosis and the dashboard show bounds or position, never a made-up
time, and never NaN or infinity.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
from pathlib import Path

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import EventsConfig
from rlwatch.discover.load import resolve_config
from rlwatch.engine.diagnosis import when_text
from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json, to_text
from rlwatch.logs.events import EventCounter, build_kinds
from rlwatch.logs.newlines import count_lines
from rlwatch.logs.tailer import Chunk, Tailer
from rlwatch.sources.gpu import NoGpuBackend
from rlwatch.widgets.events_panel import detail_text, last_age

# What TRL's vLLM client prints, undated, when the server it talks to is gone (requests over urllib3).
REFUSED_TRACEBACK = """\
Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/urllib3/connection.py", line 198, in _new_conn
    sock = connection.create_connection(
ConnectionRefusedError: [Errno 111] Connection refused

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/opt/trl/trl/extras/vllm_client.py", line 142, in check_server
    response = requests.get(url)
requests.exceptions.ConnectionError: HTTPConnectionPool(host='0.0.0.0', port=8000): Max retries exceeded \
(Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] Connection refused'))
"""
METRICS = "{'loss': 0.0123, 'grad_norm': 0.5, 'learning_rate': 1e-06, 'reward': 0.25, 'epoch': 0.12}\n"

# Yesterday's crash, read a day and a half later.
MTIME = dt.datetime(2026, 1, 10, 9, 0, 0).timestamp()
NOW = MTIME + 36 * 3600


def counter(clock: FakeClock) -> EventCounter:
    return EventCounter(build_kinds(EventsConfig()), clock)


def backlog(c: EventCounter, path: str, text: str, mtime: float, first: int = 1) -> None:
    data = text.encode()
    c.feed(Chunk(path, data, first, count_lines(data), backlog_mtime=mtime))


def test_undated_backlog_lines_are_bounded_by_the_file_mtime_not_read_time() -> None:
    c = counter(FakeClock(NOW))
    backlog(c, "/run/train.log", METRICS * 3 + REFUSED_TRACEBACK * 4, MTIME)
    ev = c.summaries()["connection_refused"]
    assert ev.count > 0
    assert ev.approximate
    assert ev.first is None and ev.last is None  # nothing before them in the file carries a time
    assert ev.first_by == MTIME and ev.last_by == MTIME
    assert ev.position is not None and ev.position.startswith("train.log:")
    assert "after progress line 3" in ev.position
    assert all(math.isnan(line.time) for line in ev.recent)  # a LogLine's time is its own or NaN
    (tb, *_) = [i for i in c.incidents() if i.kind == "traceback"]
    assert tb.approximate and tb.by == MTIME and not math.isfinite(tb.first)
    assert tb.position is not None and tb.position.startswith("train.log:")


def test_a_timestamp_before_the_lines_is_their_lower_bound() -> None:
    c = counter(FakeClock(NOW))
    stamped = "2026-01-10 08:30:00 INFO Train step 7/100 done.\n"
    backlog(c, "/run/train.log", stamped + "noise\n" * 5 + REFUSED_TRACEBACK, MTIME)
    ev = c.summaries()["connection_refused"]
    lower = dt.datetime(2026, 1, 10, 8, 30, 0).timestamp()
    assert (ev.first, ev.first_by, ev.last, ev.last_by) == (lower, MTIME, lower, MTIME)
    assert ev.position == "train.log:17, after step 7"
    text = when_text(ev.last, ev.last_by, ev.approximate, NOW, ev.position)
    assert text == "between 2026-01-10 08:30:00 and 2026-01-10 09:00:00 (train.log:17, after step 7)"


def test_the_position_names_the_run_s_step_not_the_epoch_s() -> None:
    """AReaL says both; the training panel shows the run's step, and a position must agree with it."""
    c = counter(FakeClock(NOW))
    stamped = "20260110-08:30:00.000 StatsLogger INFO: Epoch 32/166 Step 918/935 Train step 29903/155052 done.\n"
    backlog(c, "/run/train.log", stamped + "noise\n" * 5 + REFUSED_TRACEBACK, MTIME)
    ev = c.summaries()["connection_refused"]
    assert ev.position is not None and ev.position.endswith(", after step 29903")


def test_a_timestamp_after_undated_lines_ends_them_and_an_mtime_before_a_timestamp_is_not_trusted() -> None:
    c = counter(FakeClock(NOW))
    later = "2026-01-10 08:45:00 ERROR [Errno 111] Connection refused by 10.0.0.1\n"
    backlog(c, "/run/train.log", REFUSED_TRACEBACK + later, MTIME)
    ev = c.summaries()["connection_refused"]
    t = dt.datetime(2026, 1, 10, 8, 45, 0).timestamp()
    assert (ev.last, ev.last_by, ev.position) == (t, t, None)  # the last line has a time of its own
    assert ev.first is None and ev.first_by == t  # the undated ones came before it
    # A file whose modification time is earlier than a timestamp in it (copied, touched): no upper bound from it.
    c = counter(FakeClock(NOW))
    backlog(c, "/run/b.log", later + REFUSED_TRACEBACK, t - 3600)
    ev = c.summaries()["connection_refused"]
    assert ev.last == t and ev.last_by is None and ev.approximate


def test_live_lines_still_take_the_time_they_were_read() -> None:
    c = counter(FakeClock(NOW))
    data = REFUSED_TRACEBACK.encode()
    c.feed(Chunk("/run/train.log", data, 1, count_lines(data)))  # appended while followed
    ev = c.summaries()["connection_refused"]
    assert (ev.first, ev.last, ev.approximate, ev.first_by) == (NOW, NOW, False, None)


def test_tailer_tells_backlog_from_appended_bytes(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("old line\n")
    os.utime(log, (MTIME, MTIME))
    tailer = Tailer([str(log)], rescan_s=0.0)
    try:
        (old,) = tailer.poll()
        assert old.backlog_mtime == MTIME
        with log.open("a") as fh:
            fh.write("new line\n")
        (new,) = tailer.poll()
        assert new.data == b"new line\n" and new.backlog_mtime is None
    finally:
        tailer.close()


def _times_in(text: str) -> list[float]:
    """Every wall-clock time a report prints, with or without a date (a clock alone is on the report's own day)."""
    out = []
    for m in re.finditer(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)", text):
        out.append(dt.datetime.fromisoformat(f"{m.group(1)} {m.group(2)}").timestamp())
    return out


def test_report_on_yesterdays_crash_says_no_time_later_than_the_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text(METRICS * 5 + REFUSED_TRACEBACK * 6 + "torch.cuda.OutOfMemoryError: CUDA out of memory.\n")
    os.utime(log, (MTIME, MTIME))
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run, clock=FakeClock(NOW), gpu_backend=NoGpuBackend())
    try:
        snap = engine.collect_once()
    finally:
        engine.stop()
    ev = snap.events["connection_refused"]
    assert ev.count >= 6 and ev.approximate and ev.last_by == MTIME

    text = to_text(snap)
    body = text.split("\n", 1)[1]  # the first line is the report's own time
    assert "nan" not in body.lower().split() and "inf" not in body.lower().split()
    assert "until" not in body
    assert "before 2026-01-10 09:00:00" in body
    assert "(train.log:" in body
    # No time in the report's body is later than the file's modification time.
    assert all(t <= MTIME for t in _times_in(body)), text

    data = json.loads(to_json(snap))
    refused = data["events"]["connection_refused"]
    assert refused["approximate"] is True
    assert refused["first"] is None and refused["last"] is None
    assert dt.datetime.fromisoformat(refused["last_by"]).timestamp() == MTIME
    for part in ("events", "incidents", "timeline", "findings"):
        dumped = json.dumps(data[part])
        assert all(t <= MTIME for t in _times_in(dumped)), part
        assert "NaN" not in dumped and "Infinity" not in dumped
    assert any(i["approximate"] and i["position"] for i in data["incidents"])

    # The dashboard's event table and detail say the same.
    assert last_age(ev, NOW) == "≥1d12h ago"
    detail = detail_text(ev, snap.incidents, NOW).plain
    assert "before 2026-01-10 09:00:00" in detail and "nan" not in detail
