"""The event counter: per-line counting across chunks, times, rates, streaks, evidence, subscriptions, robustness."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LogLine, Severity
from rlwatch.common.textsafe import clean_line, strip_ansi
from rlwatch.config.models import CustomEvent, EventsConfig
from rlwatch.logs.events import DISPLAY_CHARS, EventCounter, build_kinds
from rlwatch.logs.newlines import count_lines
from rlwatch.logs.tailer import Chunk, Tailer

TRAINER = "/run/logs/trainer.log"
SERVER = "/run/logs/llm_server.log"
REFUSED = "HTTPUtils WARNING: HTTP request to 10.0.0.1:1/generate failed with ClientConnectorError: Cannot connect"
REFUSED += " to host 10.0.0.1:1 ssl:default [Connect call failed ('10.0.0.1', 1)] (attempt 1/3)"


def areal(ts: str, msg: str) -> str:
    return f"\x1b[92m\x1b[1;38;2;180;140;80m(AReaL)\x1b[0m \x1b[92m{ts} StatsLogger INFO: {msg}\x1b[0m"


def step(n: int, ts: str = "20251121-09:15:30.652") -> str:
    return areal(ts, f"Epoch 1/5 Step {n}/935 Train step {n}/4675 done.")


def make(cfg: EventsConfig | None = None, clock: FakeClock | None = None, **kw: float) -> EventCounter:
    return EventCounter(build_kinds(cfg or EventsConfig()), clock or FakeClock(), **kw)  # type: ignore[arg-type]


def feed_lines(counter: EventCounter, path: str, lines: list[str], first: int = 1, sep: str = "\n") -> int:
    data = "".join(line + sep for line in lines).encode()
    counter.feed(Chunk(path, data, first, count_lines(data)))
    return first + len(lines)


def collect(counter: EventCounter, kind: str) -> list[LogLine]:
    got: list[LogLine] = []
    counter.subscribe(kind, got.append)
    return got


def test_counts_line_numbers_and_files() -> None:
    counter = make()
    got = collect(counter, "connection_refused")
    nxt = feed_lines(counter, TRAINER, ["noise", REFUSED, "noise", REFUSED])
    feed_lines(counter, TRAINER, ["noise", "noise", REFUSED], first=nxt)
    feed_lines(counter, SERVER, [REFUSED])
    summary = counter.summaries()["connection_refused"]
    assert summary.count == 4
    assert summary.files == {TRAINER: 3, SERVER: 1}
    assert [(g.path, g.lineno) for g in got] == [(TRAINER, 2), (TRAINER, 4), (TRAINER, 7), (SERVER, 1)]
    assert summary.severity is Severity.WARNING


def test_universal_newlines_number_lines_like_python() -> None:
    counter = make()
    got = collect(counter, "step")
    text = f"tqdm 1%\rtqdm 2%\r{step(1)}\r\nx\n\n{step(2)}\rtail {step(3)}"
    data = text.encode()
    counter.feed(Chunk(TRAINER, data, 10, count_lines(data) + 1))
    expected = [10 + i for i, line in enumerate(text.splitlines()) if "Train step" in line]
    assert [g.lineno for g in got] == expected == [12, 15, 16]


def test_summaries_include_zero_counts_and_hide_internal_kinds() -> None:
    counter = make()
    summaries = counter.summaries()
    builtin = {k.name for k in build_kinds(EventsConfig()) if not k.name.startswith("_")}
    assert set(summaries) == builtin
    assert all(s.count == 0 and s.first is None and s.rate_per_min == 0 for s in summaries.values())


def test_times_come_from_the_line_else_from_the_clock() -> None:
    clock = FakeClock(datetime(2025, 11, 21, 12, 0, 0).timestamp())
    counter = make(clock=clock)
    feed_lines(counter, TRAINER, [step(1, "20251121-09:15:30.500"), step(2, "20251121-09:16:30.000")])
    clock.advance(5)
    feed_lines(counter, TRAINER, ["{'loss': 0.1, 'reward': 0.2}"], first=3)
    s = counter.summaries()["step"]
    assert s.first == pytest.approx(datetime(2025, 11, 21, 9, 15, 30, 500000).timestamp())
    assert s.last == pytest.approx(clock.time())
    assert [r.time for r in s.recent][-1] == pytest.approx(clock.time())


def test_a_line_without_a_timestamp_takes_the_one_above_it_in_the_same_chunk() -> None:
    clock = FakeClock(datetime(2025, 11, 21, 12, 0, 0).timestamp())
    counter = make(clock=clock)
    got = collect(counter, "connection_refused")
    lines = [
        areal("20251121-09:15:30.000", "Workflow execution failed: RuntimeError"),
        "Traceback (most recent call last):",
        '  File "http.py", line 3, in f',
        "    raise RuntimeError(msg)",
        "ConnectionRefusedError: [Errno 111] Connection refused",
    ]
    feed_lines(counter, TRAINER, lines)
    expected = datetime(2025, 11, 21, 9, 15, 30).timestamp()
    assert [g.time for g in got] == [expected]
    (incident,) = counter.incidents()
    assert incident.first == incident.last == expected
    feed_lines(counter, TRAINER, lines[1:], first=6)  # a new chunk with no timestamp at all: the clock
    assert got[-1].time == clock.time()


def test_rate_per_minute_over_the_window() -> None:
    clock = FakeClock()
    counter = make(clock=clock, rate_window_s=60.0)
    for i in range(30):  # 30 refused lines within 60 s
        feed_lines(counter, TRAINER, [REFUSED], first=i + 1)
        clock.advance(2)
    assert counter.summaries()["connection_refused"].rate_per_min == pytest.approx(30.0, abs=1.0)
    clock.advance(120)
    s = counter.summaries()["connection_refused"]
    assert s.rate_per_min == 0
    assert s.count == 30


def test_streaks_reset_by_progress_in_the_same_file_only() -> None:
    counter = make()
    brake = "worker: emergency brake engaged, free 1.0 GiB"
    nxt = feed_lines(counter, TRAINER, [brake] * 4)
    feed_lines(counter, SERVER, [brake] * 7)
    assert counter.summaries()["emergency_brake"].streak == 7
    assert counter.streaks("emergency_brake") == {TRAINER: 4, SERVER: 7}
    nxt = feed_lines(counter, TRAINER, [step(1)], first=nxt)
    feed_lines(counter, SERVER, ["[2025-03-14 02:15:58] The server is fired up and ready to roll!"], first=8)
    assert counter.streaks("emergency_brake") == {}
    feed_lines(counter, TRAINER, [brake, brake], first=nxt)
    s = counter.summaries()
    assert s["emergency_brake"].streak == 2
    assert s["emergency_brake"].count == 13
    assert s["step"].streak == 0  # progress kinds have no streak


def test_custom_progress_kind_resets_streaks() -> None:
    cfg = EventsConfig(
        custom=[CustomEvent(name="trial_done", pattern=r"trial \d+ done", severity="info", progress=True)]
    )
    counter = make(cfg)
    feed_lines(counter, TRAINER, ["TimeoutError: Timeout waiting for key 'k'"] * 3 + ["trial 4 done"])
    assert counter.summaries()["timeout"].streak == 0
    assert counter.summaries()["trial_done"].severity is Severity.INFO


def test_recent_lines_are_capped_clean_and_located() -> None:
    counter = make(recent_lines=3)
    lines = [areal("20251121-09:15:30.652", f"Loading weights from disk done in {i}.0s.") for i in range(5)]
    feed_lines(counter, TRAINER, lines, first=100)
    recent = counter.summaries()["weight_update"].recent
    assert [r.lineno for r in recent] == [102, 103, 104]
    assert all("\x1b" not in r.text and r.text.startswith("(AReaL) 20251121") for r in recent)


def test_evidence_text_of_a_huge_line_is_capped() -> None:
    counter = make()
    got = collect(counter, "timeout")
    feed_lines(counter, TRAINER, ["TimeoutError: " + "x" * 50_000 + " Timeout waiting for y"])
    assert len(got) == 1
    assert len(got[0].text) == DISPLAY_CHARS


def test_repeated_start_banner_is_a_restart() -> None:
    counter = make()
    restarts = collect(counter, "restart")
    banners = collect(counter, "_banner")
    container = "/run/logs/container.log"
    lines = ["rlwatch-sim start pid=1", "Cloning into 'repo'...", "fatal: destination path 'repo' already exists"]
    nxt = feed_lines(counter, container, lines)
    nxt = feed_lines(counter, container, lines, first=nxt)
    feed_lines(counter, container, lines, first=nxt)
    feed_lines(counter, TRAINER, ["rlwatch-sim start pid=9"])  # another file: its first start
    assert len(banners) == 4
    assert [(r.path, r.lineno) for r in restarts] == [(container, 4), (container, 7)]
    assert counter.summaries()["restart"].count == 2


def test_subscribe_unknown_kind_is_an_error() -> None:
    with pytest.raises(KeyError):
        make().subscribe("no_such_kind", lambda _line: None)


def test_a_failing_subscriber_does_not_stop_counting() -> None:
    counter = make()

    def boom(_line: LogLine) -> None:
        raise ValueError("subscriber bug")

    counter.subscribe("step", boom)
    good = collect(counter, "step")
    feed_lines(counter, TRAINER, [step(1), step(2)])
    assert len(good) == 2
    assert counter.summaries()["step"].count == 2
    assert "subscriber bug" in counter.errors[-1]


def test_chunks_with_pieces_of_one_long_line_count_once() -> None:
    counter = make()
    got = collect(counter, "cuda_oom")
    text = "CUDA out of memory. " + "y" * 100 + " CUDA out of memory again"
    data = text.encode()
    pieces = [data[i : i + 9] for i in range(0, len(data), 9)]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        counter.feed(
            Chunk(
                TRAINER, piece + (b"\n" if last else b""), 5, 1 if last else 0, continues_line=i > 0, continued=not last
            )
        )
    assert [(g.lineno, g.text[:18]) for g in got] == [(5, "CUDA out of memory")]


@pytest.mark.slow
def test_very_long_line_with_the_pattern_at_its_end_is_matched_once(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    long_line = b"x" * (5 * 1024 * 1024) + b" torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3 GiB"
    log.write_bytes(b"first\n" + long_line + b"\n" + step(1).encode() + b"\n")
    tailer = Tailer([str(tmp_path / "*.log")], max_line_bytes=64 * 1024, block_bytes=256 * 1024)
    counter = make()
    oom = collect(counter, "cuda_oom")
    steps = collect(counter, "step")
    biggest = 0
    while chunks := tailer.poll():
        for chunk in chunks:
            biggest = max(biggest, len(chunk.data))
            counter.feed(chunk)
    tailer.close()
    assert [g.lineno for g in oom] == [2]
    assert [g.lineno for g in steps] == [3]
    assert biggest <= 256 * 1024 + 64 * 1024  # never the whole line at once


@pytest.mark.parametrize("split", [1, 2, 3, 50])
def test_counts_do_not_depend_on_chunking(split: int) -> None:
    """The same bytes fed whole or cut into complete-line chunks give the same counts and line numbers."""
    lines = [REFUSED, step(1), "Traceback (most recent call last):", '  File "a.py", line 3, in f', "KeyError: 'x'"]
    lines = lines * 10
    whole = make()
    feed_lines(whole, TRAINER, lines)
    cut = make()
    got = collect(cut, "step")
    first = 1
    for i in range(0, len(lines), split):
        first = feed_lines(cut, TRAINER, lines[i : i + split], first=first)
    a, b = whole.summaries(), cut.summaries()
    assert {k: v.count for k, v in a.items()} == {k: v.count for k, v in b.items()}
    assert [g.lineno for g in got] == [2 + 5 * i for i in range(10)]
    assert [(i.lineno, i.title) for i in whole.incidents()] == [(i.lineno, i.title) for i in cut.incidents()]


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=2000),
    first=st.integers(min_value=-5, max_value=10**9),
    nlines=st.integers(min_value=-5, max_value=500),
    flags=st.tuples(st.booleans(), st.booleans()),
)
def test_feed_never_raises(data: bytes, first: int, nlines: int, flags: tuple[bool, bool]) -> None:
    counter = make()
    counter.feed(Chunk(TRAINER, data, first, nlines, continues_line=flags[0], continued=flags[1]))
    counter.feed(Chunk(TRAINER, data + b"\nTraceback (most recent call last):\n" + data, first, nlines))
    assert all(s.count >= 0 for s in counter.summaries().values())
    counter.incidents()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([REFUSED, step(1), "noise", "\x00\xff", "TimeoutError: x", ""]), max_size=40))
def test_count_equals_matching_lines(lines: list[str]) -> None:
    counter = make()
    feed_lines(counter, TRAINER, lines, sep="\r\n")
    s = counter.summaries()
    assert s["connection_refused"].count == lines.count(REFUSED)
    assert s["step"].count == lines.count(step(1))
    assert s["timeout"].count == lines.count("TimeoutError: x")


def test_from_config() -> None:
    counter = EventCounter(build_kinds(EventsConfig()), FakeClock(), recent_lines=2)
    feed_lines(counter, TRAINER, [step(i) for i in range(1, 6)])
    assert len(counter.summaries()["step"].recent) == 2


# --------------------------------------------------------------------------------------------------- textsafe
@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b[1;31mred\x1b[0m text", "red text"),
        ("title\x1b]0;owned\x07 after", "title after"),
        ("link \x1b]8;;http://x\x1b\\label\x1b]8;;\x1b\\", "link label"),
        ("clip \x1b]52;c;ZXZpbA==\x07done", "clip done"),
        ("move\x1b[2J\x1b[H home", "move home"),
        ("tab\tkept, bell\x07 and nul\x00 dropped", "tab\tkept, bell and nul dropped"),
        ("c1 \x9b31m csi and \x85 nel", "c1  csi and  nel"),
        ("keypad \x1b= and charset \x1b(B end", "keypad  and charset  end"),
        ("unicode ✓ │ 中文 stays", "unicode ✓ │ 中文 stays"),
        ("\r\nline\r", "line"),
    ],
)
def test_clean_line(raw: str, clean: str) -> None:
    assert clean_line(raw) == clean


@given(st.text())
def test_clean_line_leaves_no_control_characters(text: str) -> None:
    out = clean_line(text)
    assert not any((ord(c) < 32 and c != "\t") or 0x7F <= ord(c) <= 0x9F for c in out)


def test_strip_ansi_only_removes_colours() -> None:
    assert strip_ansi("\x1b[92mok\x1b[0m \x1b]0;t\x07") == "ok \x1b]0;t\x07"
