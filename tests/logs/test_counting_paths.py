"""The fast paths of counting give the answers of the plain ones.

- The needles of a whole chunk, found in one pass, are those a search of each line alone finds.
- The optional native scanner (Hyperscan) counts exactly what the `re` scanner counts.
- A traceback block left open by a writer that fell silent closes, so the counter stops walking every line.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LogLine
from rlwatch.config.models import CustomEvent, EventsConfig
from rlwatch.logs import matcher as matcher_module
from rlwatch.logs.events import EventCounter, build_kinds
from rlwatch.logs.incidents import IncidentTracker
from rlwatch.logs.kinds import builtin_kinds
from rlwatch.logs.matcher import Matcher
from rlwatch.logs.newlines import count_lines
from rlwatch.logs.tailer import Chunk
from tests.logs.chunking import whole_line_chunks

TRAINER = "/run/logs/trainer.log"
AREAL = "\x1b[92m\x1b[1;38;2;180;140;80m(AReaL)\x1b[0m \x1b[92m20251121-09:15:{s:02d}.652 {logger} INFO: {msg}\x1b[0m"

LINES = [
    AREAL.format(s=1, logger="StatsLogger", msg="Epoch 1/2 Step 3/4 Train step 5/6 done."),
    AREAL.format(s=2, logger="[RemoteInfEngine Rank 0]", msg="Loading weights from disk done in 9.1s."),
    "│ ppo_actor/task_reward/avg │ 1.0e+00 │ rollout/reward │ 2.0 │ timeperf/update_weights │ 3 │",
    "HTTPUtils WARNING: failed with ClientConnectorError: [Connect call failed ('10.0.0.1', 1)] (attempt 1/3)",
    "Traceback (most recent call last):",
    '  File "/x/y.py", line 3, in f',
    "    raise TimeoutError('late')",
    "TimeoutError: Timeout waiting for key 'k'",
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/x/z.py", line 9, in g',
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.15 GiB.",
    "{'loss': 0.1, 'grad_norm': 0.2, 'reward': 0.5, 'epoch': 0.01}",
    "worker WARNING EMERGENCY brake engaged; Emergency-Brake again",
    "Killed process 4242 (python3) total-vm:1kB",
    "ConnectionRefusedErrorTimeoutError NCCL error CUDA EngineCore",
    "plain noise without anything",
    "",
    "fatal: PANIC",
]
TERMINATORS = ["\n", "\n", "\n", "\r\n", "\r"]


def _feed_all(counter: EventCounter, data: bytes, block: int) -> None:
    for chunk in whole_line_chunks(data, TRAINER, block):
        counter.feed(chunk)


def _outcome(counter: EventCounter, calls: list[tuple[str, int, str, float]]) -> object:
    summaries = {k: (s.count, s.first, s.last, s.streak, s.recent) for k, s in counter.summaries().items()}
    return summaries, counter.incidents(), calls


def _run(data: bytes, cfg: EventsConfig, scanner: str, monkeypatch: pytest.MonkeyPatch, block: int) -> object:
    monkeypatch.setenv("RLWATCH_SCANNER", scanner)
    counter = EventCounter(build_kinds(cfg), FakeClock(), native=False)  # the Python path's own mechanisms
    calls: list[tuple[str, int, str, float]] = []
    for kind in counter.kinds:
        counter.subscribe(kind.name, lambda line, k=kind.name: calls.append((k, line.lineno, line.text, line.time)))
    _feed_all(counter, data, block)
    return _outcome(counter, calls)


def _text(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    return "".join(rng.choice(LINES) + rng.choice(TERMINATORS) for _ in range(n)).encode()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=40), st.lists(st.sampled_from(TERMINATORS), min_size=1))
def test_chunk_hits_hold_every_needle_each_line_has(lines: list[str], terms: list[str]) -> None:
    matcher = Matcher(builtin_kinds())
    assert matcher._prefilter is not None
    data = "".join(line + terms[i % len(terms)] for i, line in enumerate(lines)).encode()
    hits = matcher.hits(data, 0, len(data))
    assert [h[0] for h in hits] == sorted(h[0] for h in hits)
    pos = 0
    for i, line in enumerate(lines):
        raw = line.encode()
        end = pos + len(raw)
        inside = {needle for at, needle in hits if pos <= at < end}
        assert set(matcher._prefilter.findall(raw)) <= inside
        assert all(data[at : at + len(needle)] == needle for at, needle in hits if pos <= at < end)
        pos = end + len(terms[i % len(terms)])


def test_native_scanner_counts_what_re_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hyperscan")
    monkeypatch.setattr(matcher_module, "_NATIVE_MIN_BYTES", 0)  # every span, however small, goes through Hyperscan
    monkeypatch.setenv("RLWATCH_SCANNER", "auto")
    assert Matcher(builtin_kinds()).scanner == "hyperscan"
    cfg = EventsConfig(custom=[CustomEvent(name="fatal", pattern=r"(?i)fatal|panic")])
    for seed, block in ((1, 4096), (2, 777), (3, 1 << 20)):
        data = _text(seed, 3000)
        assert _run(data, cfg, "auto", monkeypatch, block) == _run(data, cfg, "re", monkeypatch, block)


def test_scanner_can_be_forced_to_re(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLWATCH_SCANNER", "re")
    assert Matcher(builtin_kinds()).scanner == "re"


def test_chunk_sizes_do_not_change_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Times may differ (a line without a time looks for one within its chunk only); the counts may not."""
    data = _text(7, 2000)
    counts = []
    for block in (1 << 20, 4096, 333):
        summaries = _run(data, EventsConfig(), "re", monkeypatch, block)[0]  # type: ignore[index]
        counts.append({k: v[0] for k, v in summaries.items()})
    assert counts[0] == counts[1] == counts[2]
    assert counts[0]["step"] > 0 and counts[0]["traceback"] > 0 and counts[0]["cuda_oom"] > 0


def test_a_silent_writers_block_closes() -> None:
    """rank 0 prints a traceback and dies; the unprefixed lines after it must not keep its block open for ever."""
    tracker = IncidentTracker()
    tracker.line(TRAINER, "[rank0]:", "Traceback (most recent call last):", 1, lambda: 0.0)
    tracker.line(TRAINER, "[rank0]:", '  File "/x.py", line 1, in f', 2, lambda: 0.0)
    tracker.line(TRAINER, "[rank0]:", "RuntimeError: boom", 3, lambda: 1.0)
    assert tracker.wants_every_line(TRAINER)
    for n in range(4, 400):
        tracker.line(TRAINER, "", "torchrun says goodbye", n, lambda: 2.0)
    assert not tracker.wants_every_line(TRAINER)
    assert [i.title for i in tracker.incidents()] == ["RuntimeError: boom"]


def test_a_writer_that_keeps_writing_keeps_its_block() -> None:
    """Interleaved writers: rank 1 quiet for a while (but less than the limit) still finishes its traceback."""
    tracker = IncidentTracker()
    tracker.line(TRAINER, "[rank1]:", "Traceback (most recent call last):", 1, lambda: 0.0)
    for n in range(2, 150):
        tracker.line(TRAINER, "[rank0]:", f"progress {n}", n, lambda: 0.0)
    tracker.line(TRAINER, "[rank1]:", '  File "/x.py", line 1, in f', 150, lambda: 0.0)
    tracker.line(TRAINER, "[rank1]:", "ValueError: late", 151, lambda: 1.0)
    assert [i.title for i in tracker.incidents()] == ["ValueError: late"]


def test_counting_stops_walking_after_a_silent_writers_traceback() -> None:
    counter = EventCounter(build_kinds(EventsConfig()), FakeClock())
    got: list[LogLine] = []
    counter.subscribe("step", got.append)
    lines = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/x.py", line 1, in f',
        "[rank0]: RuntimeError: boom",
        *["noise"] * 300,
        AREAL.format(s=5, logger="StatsLogger", msg="Epoch 1/1 Step 1/1 Train step 1/1 done."),
    ]
    data = "".join(line + "\n" for line in lines).encode()
    counter.feed(Chunk(TRAINER, data, 1, count_lines(data)))
    assert TRAINER not in counter.open_files()
    assert [g.lineno for g in got] == [len(lines)]


# ------------------------------------------------------------------ a traceback's frames read in bulk
_FRAME_PIECES = [
    "Traceback (most recent call last):",
    '  File "/srv/app/a.py", line 12, in f',
    "    return g(x)",
    "           ^^^^",
    '\tFile "/srv/app/tab.py", line 3, in t',
    '    File "/srv/app/deep.py", line 7, in d',
    "    x = a + b  # a plus in the source",
    "  | nested = 1",
    "  + Exception Group Traceback (most recent call last):",
    '  |   File "/srv/app/g.py", line 4, in h',
    "  | ValueError: inside a group",
    "    print('File \"/not/a/frame.py\", line 1')",
    '  File "/srv/app/bad\xe9\udcff.py", line 9, in u',
    '  File "no line number"',
    "  \x1b[31mcoloured\x1b[0m source",
    "  Traceback (most recent call last):",
    "    raise ConnectionRefusedError(111, 'Connect call failed')",
    "  \x0bvertical tab",
    "",
    "   ",
    "RuntimeError: Failed after 3 retries",
    "ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 1)",
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/srv/app/r.py", line 5, in r',
    "[rank1]: ValueError: rank one",
    "ERROR: Workflow execution failed: RuntimeError: boom",
    "plain noise",
]


def _frames_text(rng: random.Random, n: int) -> bytes:
    out: list[bytes] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.05:  # a long run of indented lines without a frame: the block stalls inside it
            out += [b"    more source"] * rng.randint(70, 95)
        elif r < 0.1:  # a deep stack: many frames in one run
            for d in range(rng.randint(30, 120)):
                out += [f'  File "/srv/app/m{d}.py", line {d}, in f{d}'.encode(), b"    call()"]
        else:
            out.append(rng.choice(_FRAME_PIECES).encode("utf-8", "surrogateescape"))
    return b"\n".join(out) + b"\n"


def _counted(data: bytes, bulk: bool, block: int, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setattr(IncidentTracker, "bulk_frames", bulk)
    return _run(data, EventsConfig(), "re", monkeypatch, block)


@pytest.mark.parametrize("seed", range(12))
def test_frames_read_in_bulk_count_what_line_by_line_counts(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    data = _frames_text(rng, 600)
    block = rng.choice([97, 1000, 1 << 20])
    assert _counted(data, True, block, monkeypatch) == _counted(data, False, block, monkeypatch)


def test_frames_read_in_bulk_on_the_dense_benchmark_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from bench.datagen import generate

    ds = generate(tmp_path / "dense.log", 1 << 20, dense=True)
    data = ds.path.read_bytes()
    bulk = _counted(data, True, 1 << 16, monkeypatch)
    plain = _counted(data, False, 1 << 16, monkeypatch)
    assert bulk == plain
    summaries = bulk[0]  # type: ignore[index]
    assert {k: summaries[k][0] for k in ds.expected if k in summaries} == {  # type: ignore[index]
        k: v
        for k, v in ds.expected.items()
        if k in summaries  # type: ignore[operator]
    }


def test_the_bulk_path_is_taken_and_its_incident_names_the_last_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = IncidentTracker.line

    def spy(self: IncidentTracker, path: str, tag: str, body: str, lineno: int, when: object) -> None:
        calls.append(lineno)
        real(self, path, tag, body, lineno, when)  # type: ignore[arg-type]

    monkeypatch.setattr(IncidentTracker, "line", spy)
    frames = "".join(f'  File "/srv/app/m{d}.py", line {d}, in f{d}\n    call()\n' for d in range(50))
    text = "Traceback (most recent call last):\n" + frames + "ValueError: deep\n"
    counter = EventCounter(build_kinds(EventsConfig()), FakeClock(), native=False)
    counter.feed(Chunk(TRAINER, text.encode(), 1, 102))
    assert calls == [1, 102]  # the header and the exception line; the hundred frame lines went in bulk
    (incident,) = counter.incidents()
    assert incident.title == "ValueError: deep"
    assert incident.location == "m49.py:49"
