"""Line timestamps: every framework format, the stamps container runtimes put in front of lines, year inference for
year-less formats, and no crash on any text; each read by ``rlwatch.logs.timestamps`` as the import gives it (compiled
where the event path is built) and by the same text interpreted, and both read each line alike."""

from __future__ import annotations

import calendar
import os
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlwatch.common.clock import FakeClock
from rlwatch.common.textsafe import strip_ansi
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.logs import timestamps
from rlwatch.sources.gpu import NoGpuBackend
from tests.logs.interpreted import interpreted

Parse = Callable[[str, float], float | None]
_INTERPRETED = interpreted("timestamps")

NOW = datetime(2025, 11, 21, 12, 0, 0).timestamp()  # local time, like the formats


@pytest.fixture(scope="module", params=["import", "interpreted"])
def parse_time(request: pytest.FixtureRequest) -> Parse:
    """``parse_time`` as the import gives it (the extension where it is built) and its .py run by the interpreter."""
    module = timestamps if request.param == "import" else _INTERPRETED
    reader: Parse = module.parse_time
    return reader


def utc(year: int, month: int, day: int, hour: int, minute: int, second: int) -> float:
    return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))


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
def test_formats(line: str, expected: float, parse_time: Parse) -> None:
    got = parse_time(strip_ansi(line), NOW)
    assert got == pytest.approx(expected, abs=1e-6)


# mmengine's MMLogger (mmengine/logging/logger.py at open-mmlab/mmengine 2543429): its console handler is
# MMFormatter(color=True, datefmt='%m/%d %H:%M:%S'), its log file's MMFormatter(color=False,
# datefmt='%Y/%m/%d %H:%M:%S'), both '%(asctime)s - %(name)s - LEVEL - %(message)s'. detectron2's setup_logger
# (detectron2/utils/logger.py at facebookresearch/detectron2 02b5c4e): stdout colored("[%(asctime)s %(name)s]: ") +
# "%(message)s", its log.txt "[%(asctime)s] %(name)s %(levelname)s: %(message)s", both datefmt "%m/%d %H:%M:%S".
MMENGINE_CONSOLE = (  # tests/real/healthy/05-mmengine.log, from open-mmlab/mmengine#155
    "04/21 21:03:53 - mmengine - INFO - Epoch(train) [1][10/90]  lr: 1.000e-02  eta: 0:00:25  time: 0.010  "
    "data_time: 0.000  memory: 0  loss: 11.4723"
)
MMENGINE_FILE = (  # mmengine's docs/en/get_started/15_minutes.md, as its log file has it
    "2022/08/22 15:51:56 - mmengine - INFO - Epoch(train) [1][10/1563]  lr: 1.0000e-03  eta: 0:18:23  time: 0.1414  "
    "data_time: 0.0077  memory: 392  loss: 5.3465"
)
DETECTRON2_STDOUT = (  # tests/real/healthy/07-detectron2.log, from facebookresearch/detectron2#195
    "[11/01 11:27:04 d2.utils.events]: eta: 8:05:12  iter: 1259  total_loss: 1.012  loss_cls: 0.714  "
    "loss_box_reg: 0.291  time: 0.3322  data_time: 0.0334  lr: 0.010000  max_mem: 3961M"
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (MMENGINE_CONSOLE, local(2025, 4, 21, 21, 3, 53)),
        (MMENGINE_FILE, local(2022, 8, 22, 15, 51, 56)),
        (DETECTRON2_STDOUT, local(2025, 11, 1, 11, 27, 4)),
        # the same line as detectron2's terminal shows it, in colour (termcolor's green), as `| tee` keeps it
        ("\x1b[32m[11/01 11:27:04 d2.utils.events]: \x1b[0meta: 8:05:12  iter: 1259", local(2025, 11, 1, 11, 27, 4)),
        # detectron2's log.txt (its plain formatter; composed from the format string above)
        (
            "[11/01 11:27:04] d2.engine.hooks INFO: Overall training speed: 1377 iterations",
            local(2025, 11, 1, 11, 27, 4),
        ),
        ("[rank1]: 04/21 21:03:53 - mmengine - WARNING - x", local(2025, 4, 21, 21, 3, 53)),
    ],
)
def test_mmengine_and_detectron2(line: str, expected: float, parse_time: Parse) -> None:
    """Their console lines carry no year: the year of ``now`` (a backlog's file modification time, else the clock)."""
    assert parse_time(strip_ansi(line), NOW) == pytest.approx(expected, abs=1e-6)


def test_a_yearless_mmengine_line_read_in_january_is_last_december_s(parse_time: Parse) -> None:
    january = datetime(2026, 1, 2, 10, 0, 0).timestamp()
    line = "12/31 23:59:59 - mmengine - INFO - Epoch(train) [3][90/90]  loss: 0.1"
    assert parse_time(line, january) == pytest.approx(datetime(2025, 12, 31, 23, 59, 59).timestamp())


@pytest.mark.parametrize(
    "line",
    [
        "11/21/2025 10:00:00 a US date with its year after the day",
        "2025/11/21/10 10:00:00 no date at all",
        "13/01 10:00:00 - mmengine - INFO - month 13",
        "02/30 10:00:00 - mmengine - INFO - February 30th",
        "2022/02/30 10:00:00 - mmengine - INFO - February 30th",
        "batch 1/10 10:00:00 one digit",
    ],
)
def test_slashed_dates_that_are_not_mmengine_s(line: str, parse_time: Parse) -> None:
    assert parse_time(line, NOW) is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # docker logs --timestamps / kubectl logs --timestamps: RFC3339Nano in UTC, nanoseconds kept to the micro
        (
            "2026-11-24T05:09:01.123456789Z Traceback (most recent call last):",
            utc(2026, 11, 24, 5, 9, 1) + 0.123456789,
        ),
        # RFC3339Nano drops trailing zeros, and whole seconds lose the fraction
        ("2026-11-24T05:09:01.5Z x", utc(2026, 11, 24, 5, 9, 1) + 0.5),
        ("2026-11-24T05:09:01Z x", utc(2026, 11, 24, 5, 9, 1)),
        # CRI log files (containerd writes its host's offset), full and partial records
        (
            "2026-11-24T05:09:01.123456789Z stdout F INFO:     Application startup complete.",
            utc(2026, 11, 24, 5, 9, 1) + 0.123456789,
        ),
        ("2026-11-24T06:09:01.25+01:00 stderr P [rank3]: Traceback", utc(2026, 11, 24, 5, 9, 1) + 0.25),
        # docker compose logs --timestamps: after the service prefix, with the local offset
        ("sglang-1  | 2026-11-24T00:09:01.000000000-05:00 [2026-11-24 00:09:01] x", utc(2026, 11, 24, 5, 9, 1)),
        ("web  | 2026-11-24T10:39:01.1+0530 x", utc(2026, 11, 24, 5, 9, 1) + 0.1),
        # the runtime's stamp wins over the framework's own (zone, year, and when it was really written)
        (
            "2026-11-24T05:09:01.5Z (APIServer pid=1) ERROR 11-24 07:00:00 [core_client.py:564] Engine core proc",
            utc(2026, 11, 24, 5, 9, 1) + 0.5,
        ),
        # a CI viewer's bracketed stamp: sgl-project/sglang#12827
        ("[2025-11-06T02:10:00.703Z] [2025-11-06 02:10:00] Received sigquit", utc(2025, 11, 6, 2, 10, 0) + 0.703),
        # compose without timestamps: the framework's own (local) time behind the prefix
        ("sglang-1  | [2025-10-29 11:26:03] SIGQUIT received.", local(2025, 10, 29, 11, 26, 3)),
        # vLLM's newer record prefix with a path behind a process prefix
        (
            "(EngineCore_DP0 pid=456) ERROR 11-21 05:09:01 [v1/engine/core.py:700] EngineCore encountered a fatal error.",
            local(2025, 11, 21, 5, 9, 1),
        ),
    ],
)
def test_container_stamps(line: str, expected: float, parse_time: Parse) -> None:
    assert parse_time(strip_ansi(line), NOW) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    "line",
    ["2026-02-30T05:09:01Z February 30th", "2026-11-24T25:09:01Z hour 25", "2026-13-24T05:09:01.1+01:00 month 13"],
)
def test_impossible_container_stamps(line: str, parse_time: Parse) -> None:
    assert parse_time(line, NOW) is None


@given(
    st.datetimes(min_value=datetime(1971, 1, 2), max_value=datetime(9998, 12, 30)),
    st.integers(min_value=-14 * 60, max_value=14 * 60),
    st.integers(min_value=0, max_value=999_999_999),
)
def test_rfc3339_round_trip(parse_time: Parse, when: datetime, offset_min: int, nanos: int) -> None:
    zone = timezone(timedelta(minutes=offset_min))
    stamp = when.replace(microsecond=0, tzinfo=zone)
    sign = "-" if offset_min < 0 else "+"
    suffix = "Z" if offset_min == 0 else f"{sign}{abs(offset_min) // 60:02d}:{abs(offset_min) % 60:02d}"
    line = stamp.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}{suffix} stdout F msg"
    assert parse_time(line, NOW) == pytest.approx(stamp.timestamp() + nanos / 1e9, abs=1e-6)


def test_a_yearless_date_in_the_future_belongs_to_last_year(parse_time: Parse) -> None:
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
def test_no_or_impossible_timestamp(line: str, parse_time: Parse) -> None:
    assert parse_time(line, NOW) is None


def test_only_the_start_of_a_line_is_searched(parse_time: Parse) -> None:
    line = "x" * 300 + " 2025-03-14 02:15:58"
    assert parse_time(line, NOW) is None


@given(st.text(), st.floats(min_value=-1e12, max_value=1e12, allow_nan=False))
def test_never_raises(parse_time: Parse, text: str, now: float) -> None:
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
def test_areal_round_trip(
    parse_time: Parse, year: int, month: int, day: int, hour: int, minute: int, second: int
) -> None:
    line = f"{year:04d}{month:02d}{day:02d}-{hour:02d}:{minute:02d}:{second:02d}.250 StatsLogger INFO: x"
    got = parse_time(line, NOW)
    try:
        expected = datetime(year, month, day, hour, minute, second).timestamp() + 0.25
    except (OverflowError, OSError, ValueError):
        assert got is None
        return
    assert got == pytest.approx(expected)


# Lines where a hand-matched reader could part from the expressions it replaces, each format's verbatim line with
# what can go wrong at its edges: digits that are not ASCII, a stamp cut short or cut by the 200-character window,
# a line's end kept (CRLF, a bare CR), empty text, several clocks, text of every width (Latin-1, UCS-2, UCS-4).
_EDGES = [
    "",
    "\r\n",
    "12:34:56",
    "2025-03-14 02:15:58\r\n",
    "2025-03-14 02:15:58\r",
    "20251121-09:15:30.652\r\n",
    "2026-11-24T05:09:01.123456789Z\r\n",
    "INFO 05-06 20:59:57\r\n",
    "٢٠٢٥-03-14 02:15:58 Arabic-Indic digits in the year",
    "2025-03-14 0٢:15:58 one in the hour",
    "２０２５-03-14 02:15:58 full-width digits",
    "𝟚𝟘𝟚𝟝-03-14 02:15:58 mathematical digits",
    "2025-03-14 02:15:58 ü Latin-1",
    "2025-03-14 02:15:58 ∑ UCS-2",
    "2025-03-14 02:15:58 🙂 UCS-4",
    "🙂 [2025-03-14 02:15:58 TP0] behind an astral character",
    "2025-03-14 02:15:5",
    "025-03-14 02:15:58",
    "5-03-14 02:15:58",
    "-03-14 02:15:58",
    "03-14 02:15:58",
    "2025-03-14 02:15",
    "20251121-09:15:3",
    "0251121-09:15:30.652",
    "2026-11-24T05:09:01.Z",
    "2026-11-24T05:09:01.1234567890Z ten digits",
    "2026-11-24T05:09:01+05:3",
    "2026-11-24T05:09:01+0530 x",
    "2026-11-24T05:09:01-05:30 x",
    "2026-11-24T05:09:01Z: x",
    "2026-11-24T05:09:01Z1 x",
    "xT05:09:01 a T before a clock that is not RFC 3339",
    "INFO 05-06 20:59",
    "INFO 05-06 20:59:57.1234567 seven digits",
    "XINFO 05-06 20:59:57 no word boundary",
    "INFO05-06 20:59:57 no space",
    "WARNING\t\t05-06 20:59:57 tabs",
    "info 05-06 20:59:57 lower case",
    "[E1121 06:24:44.903881913 x",
    "[E1121 06:24:44.9038819134 ten digits",
    "x:E1121 06:24:44 behind a colon",
    "xE1121 06:24:44 behind a letter",
    "12:00:00 2025-03-14 02:15:58 a clock before the date",
    "2025-03-14 02:15:58 12:00:00",
    "elapsed 12:34:56 then INFO 05-06 20:59:57",
    "04/21 21:03:53 -",
    "/04/21 21:03:53 behind a slash",
    "104/21 21:03:53 behind a digit",
    "04/21 21:03:531 a digit after",
    "x" * 181 + "2025-03-14 02:15:58",
    "x" * 182 + "2025-03-14 02:15:58",
    "x" * 170 + "2026-11-24T05:09:01.123456789Z",
    "x" * 192 + "12:34:56",
    "x" * 193 + "12:34:56",
    "x" * 40 + "2025-03-14 02:15:58",
]


@pytest.mark.parametrize("line", _EDGES)
@pytest.mark.parametrize("now", [NOW, datetime(2026, 1, 2, 10, 0, 0).timestamp(), 1e300])
def test_compiled_and_interpreted_read_each_line_alike(line: str, now: float) -> None:
    """The import (the extension where it is built) and the .py interpreted: the same answer to the last digit."""
    assert repr(timestamps.parse_time(line, now)) == repr(_INTERPRETED.parse_time(line, now))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("٢٠٢٥-03-14 02:15:58 Arabic-Indic digits in the year", None),
        ("２０２５-03-14 02:15:58 full-width digits", None),
        ("2025-03-14 02:15:58\r\n", local(2025, 3, 14, 2, 15, 58)),
        ("🙂 [2025-03-14 02:15:58 TP0] behind an astral character", local(2025, 3, 14, 2, 15, 58)),
        ("x" * 181 + "2025-03-14 02:15:58", local(2025, 3, 14, 2, 15, 58)),
        ("x" * 182 + "2025-03-14 02:15:58", None),
        ("2026-11-24T05:09:01.1234567890Z ten digits", local(2026, 11, 24, 5, 9, 1)),
        ("INFO 05-06 20:59:57.1234567 seven digits", local(2025, 5, 6, 20, 59, 57)),
        ("XINFO 05-06 20:59:57 no word boundary", None),
        ("2025-03-14 02:15", None),
    ],
)
def test_the_edges_read_as_the_expressions_read_them(line: str, expected: float | None, parse_time: Parse) -> None:
    """Non-ASCII digits are no digits (re.ASCII), the window is the line's first 200 characters, a fraction too long
    is not taken (before a zone it is no RFC 3339 stamp, and the date and clock read as local time)."""
    got = parse_time(line, NOW)
    assert got == (None if expected is None else pytest.approx(expected, abs=1e-6))


def test_a_mmengine_log_read_after_the_fact_has_its_step_times_in_the_year_of_its_file(tmp_path: Path) -> None:
    """The real excerpt, its file last written in April 2022, read in 2026: steps at their own times, in 2022."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    shutil.copy(Path(__file__).parents[1] / "real" / "healthy" / "05-mmengine.log", log)
    written = local(2022, 4, 21, 21, 4, 10)
    os.utime(log, (written, written))
    cfg, _ = resolve_config(run, None)
    engine = Engine(cfg, run, clock=FakeClock(local(2026, 1, 5, 9, 0, 0)), gpu_backend=NoGpuBackend())
    try:
        snap = engine.collect_once()
    finally:
        engine.stop()
    assert snap.training is not None and snap.training.last_step == 80
    assert snap.training.last_step_at == pytest.approx(local(2022, 4, 21, 21, 3, 53))
