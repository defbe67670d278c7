"""Line timestamps: every framework format, year inference for year-less formats, and no crash on any text."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlwatch.textsafe import strip_ansi
from rlwatch.timestamps import parse_time

NOW = datetime(2025, 11, 21, 12, 0, 0).timestamp()  # local time, like the formats


def local(year: int, month: int, day: int, hour: int, minute: int, second: int, micro: int = 0) -> float:
    return datetime(year, month, day, hour, minute, second, micro).timestamp()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # AReaL, with its colour codes removed first as the counter does.
        (
            "\x1b[92m\x1b[1;38;2;180;140;80m(AReaL)\x1b[0m \x1b[92m20251121-09:15:30.652 StatsLogger INFO: x\x1b[0m",
            local(2025, 11, 21, 9, 15, 30, micro=652000),
        ),
        ("20251121-09:15:30.652 Recover INFO: Saved recover checkpoint to /x", local(2025, 11, 21, 9, 15, 30) + 0.652),
        # SGLang, with and without a TP prefix.
        ("[2025-03-14 02:15:58] The server is fired up and ready to roll!", local(2025, 3, 14, 2, 15, 58)),
        ("[2025-03-14 02:15:58 TP0] Scheduler hit an exception: Traceback", local(2025, 3, 14, 2, 15, 58)),
        # Python logging's default asctime.
        ("2025-03-14 02:15:58,250 - trainer - INFO - hello", local(2025, 3, 14, 2, 15, 58) + 0.25),
        # vLLM (no year: the clock's year).
        (
            "INFO 05-06 20:59:57 [default_loader.py:384] Loading weights took 24.84 seconds",
            local(2025, 5, 6, 20, 59, 57),
        ),
        ("(EngineCore_0 pid=12) ERROR 11-21 08:00:01 [core.py:588] EngineCore failed", local(2025, 11, 21, 8, 0, 1)),
        # torch C++ (glog) lines, behind a rank prefix, and torchrun's.
        (
            "[rank0]:[E1121 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught",
            local(2025, 11, 21, 6, 24, 44) + 0.903881913,
        ),
        (
            "W1121 09:22:41.944000 40112 torch/distributed/elastic/multiprocessing/api.py:908] Sending",
            local(2025, 11, 21, 9, 22, 41) + 0.944,
        ),
    ],
)
def test_formats(line: str, expected: float) -> None:
    got = parse_time(strip_ansi(line), NOW)
    assert got == pytest.approx(expected, abs=1e-6)


def test_a_yearless_date_in_the_future_belongs_to_last_year() -> None:
    january = datetime(2026, 1, 2, 10, 0, 0).timestamp()
    got = parse_time("INFO 12-31 23:59:59 [x.py:1] last line of the year", january)
    assert got == pytest.approx(datetime(2025, 12, 31, 23, 59, 59).timestamp())
    # Within a day ahead (clock skew, time zones) the current year stands.
    got = parse_time("INFO 11-21 20:00:00 [x.py:1] later today", NOW)
    assert got == pytest.approx(datetime(2025, 11, 21, 20, 0, 0).timestamp())


@pytest.mark.parametrize(
    "line",
    [
        "no timestamp here",
        "Epoch 1/5 Step 2/935 Train step 2/4675 done.",
        "20251341-09:15:30.652 month 13",
        "[2025-02-30 02:15:58] February 30th",
        "INFO 13-01 10:00:00 [x.py:1] month 13",
        "[E0230 06:24:44.9 x] February 30th",
        "elapsed 12:34:56 but no date",
    ],
)
def test_no_or_impossible_timestamp(line: str) -> None:
    assert parse_time(line, NOW) is None


def test_only_the_start_of_a_line_is_searched() -> None:
    line = "x" * 300 + " 2025-03-14 02:15:58"
    assert parse_time(line, NOW) is None


@given(st.text(), st.floats(min_value=-1e12, max_value=1e12, allow_nan=False))
def test_never_raises(text: str, now: float) -> None:
    got = parse_time(text, now)
    assert got is None or isinstance(got, float)


@given(
    st.integers(min_value=1, max_value=9999),
    st.integers(1, 12),
    st.integers(1, 28),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
)
def test_areal_round_trip(year: int, month: int, day: int, hour: int, minute: int, second: int) -> None:
    line = f"{year:04d}{month:02d}{day:02d}-{hour:02d}:{minute:02d}:{second:02d}.250 StatsLogger INFO: x"
    got = parse_time(line, NOW)
    try:
        expected = datetime(year, month, day, hour, minute, second).timestamp() + 0.25
    except (OverflowError, OSError, ValueError):
        assert got is None
        return
    assert got == pytest.approx(expected)
