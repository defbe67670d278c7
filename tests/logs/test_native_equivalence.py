"""The compiled event path (``rlwatch.logs._eventpath``) gives the answers of the Python one, exactly.

Both counters are fed the same chunks, cut where the tailer cuts them and anywhere else (small blocks, a line
longer than a block arriving in pieces, backlog and live), and every answer is compared: each kind's summary (count,
first and last times and their bounds, position, rate, streak, files, recent lines), every file's streaks, the
incidents (titles, signatures, locations, ranks, causes, torchrun's report, NCCL collectives, bounds, positions),
those dropped, the files with a traceback open, the lines handed to subscribers and the log view's tags. Inputs:
every real log under ``tests/real`` (frameworks, torchrun, NCCL, Ray, the host's kernel logs), the dense and calm
benchmark logs, hostile random text (Hypothesis), and the lines each helper reads (prefixes, times, exceptions,
frames, chain messages, code lines, step numbers), compared one by one.

Floats are compared by ``repr`` (a NaN time equals a NaN time there, and every digit counts).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import math
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LogLine
from rlwatch.common.textsafe import strip_ansi
from rlwatch.config.models import CustomEvent, EventsConfig
from rlwatch.logs import areal_lines, signatures, wording
from rlwatch.logs import events as events_module
from rlwatch.logs.events import EventCounter, Tag, build_kinds
from rlwatch.logs.incidents import step_number
from rlwatch.logs.kinds import CODE_LINE, builtin_kinds
from rlwatch.logs.learning import LearningTracker
from rlwatch.logs.newlines import count_lines
from rlwatch.logs.prefixes import split_prefix
from rlwatch.logs.tailer import Chunk, Tailer
from rlwatch.logs.timestamps import parse_time
from rlwatch.logs.training import TrainingTracker
from tests.logs.chunking import whole_line_chunks
from tests.logs.interpreted import interpreted as _interpreted

native = pytest.importorskip("rlwatch.logs._eventpath", reason="the compiled event path is not built here")
if not events_module.NATIVE:  # RLWATCH_NATIVE=0
    pytest.skip("the compiled event path is switched off", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "real"
NOW = 1_767_600_000.0  # 2026-01-05, the benchmark logs' day


# ---------------------------------------------------------------------------------------------------- harness
class Pair:
    """The two counters, fed alike, with what each handed its subscribers and the log view."""

    def __init__(self, cfg: EventsConfig | None = None, **kw: object) -> None:
        kinds = build_kinds(cfg or EventsConfig())
        self.clocks = [FakeClock(NOW), FakeClock(NOW)]
        self.counters = [
            EventCounter(kinds, self.clocks[0], native=True, **kw),  # type: ignore[arg-type]
            EventCounter(kinds, self.clocks[1], native=False, **kw),  # type: ignore[arg-type]
        ]
        assert self.counters[0].native and not self.counters[1].native
        self.calls: list[list[tuple[str, str, int, str, float]]] = [[], []]
        self.tags: list[list[Tag]] = [[], []]
        for i, counter in enumerate(self.counters):
            for kind in counter.kinds:
                counter.subscribe(
                    kind.name,
                    lambda line, k=kind.name, i=i: self.calls[i].append(
                        (k, line.path, line.lineno, line.text, line.time)
                    ),
                )
            counter.tag_into(self.tags[i], 50)
        # the trackers, wired as the engine wires them (engine._counting), each fed by its own event path (the
        # trackers' own rules, areal_lines, are compared compiled with interpreted below)
        self.training = [TrainingTracker(self.clocks[i], stall_s=600.0, weight_update_timeout_s=300.0) for i in (0, 1)]
        self.learning = [LearningTracker(step_of=lambda t=t: t.state().last_step) for t in self.training]
        for i, counter in enumerate(self.counters):
            training, learning = self.training[i], self.learning[i]
            counter.subscribe("step", training.on_step)
            counter.subscribe("_reward", training.on_reward)
            counter.subscribe("weight_update", training.on_weight_update)
            counter.subscribe("_finished", training.on_step)
            for name in ("step", "_reward", "_learning"):
                counter.subscribe(name, learning.on_line)

    def feed(self, chunk: Chunk) -> None:
        for i, counter in enumerate(self.counters):
            counter.feed(chunk)
            if chunk.nlines:
                self.training[i].on_any_line(self.clocks[i].time())

    def outcome(self, i: int) -> str:
        counter = self.counters[i]
        summaries = counter.summaries()
        streaks = {kind.name: counter.streaks(kind.name) for kind in counter.kinds}
        return repr(
            (
                summaries,
                streaks,
                counter.incidents(),
                counter.dropped_incidents(),
                sorted((path, sorted(tags)) for path, tags in counter.open_files().items()),
                self.calls[i],
                self.tags[i],
                list(counter.errors),
                self.training[i].state(),
                list(self.training[i].errors),
                self.learning[i].state(),
            )
        )

    def check(self) -> None:
        a, b = self.outcome(0), self.outcome(1)
        if a != b:  # say where they part
            k = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
            raise AssertionError(
                f"compiled and Python differ at {k}:\n  C:  {a[k - 300 : k + 300]}\n  Py: {b[k - 300 : k + 300]}"
            )


def tailed(tmp: Path, name: str, data: bytes, rng: random.Random, *, live: bool) -> Iterator[Chunk]:
    """The chunks the real tailer makes of ``data`` in ``tmp/name``: a backlog read in random blocks, or the same
    bytes appended while followed, in random pieces (then every chunk is live)."""
    path = tmp / name
    block = rng.choice([64, 333, 4096, 1 << 16, 1 << 20])
    max_line = rng.choice([97, 1000, 1 << 20])
    if not live:
        path.write_bytes(data)
        tailer = Tailer([str(path)], block_bytes=block, max_line_bytes=max_line, max_poll_bytes=block * 3)
        while chunks := tailer.poll():
            yield from chunks
        tailer.close()
        return
    path.write_bytes(b"")
    tailer = Tailer([str(path)], block_bytes=block, max_line_bytes=max_line, max_poll_bytes=block * 3)
    tailer.poll()
    pos = 0
    with path.open("ab") as fh:
        while pos < len(data):
            step = rng.choice([1, 7, 100, 5000, 1 << 16])
            fh.write(data[pos : pos + step])
            fh.flush()
            pos += step
            yield from tailer.poll()
    while chunks := tailer.poll():
        yield from chunks
    tailer.close()


def both_on(pair: Pair, chunks: Iterator[Chunk], rng: random.Random | None = None) -> None:
    for chunk in chunks:
        pair.feed(chunk)
        if rng is not None and rng.random() < 0.05:
            step = rng.choice([0.5, 30.0, 400.0])
            for clock in pair.clocks:
                clock.advance(step)
    pair.check()


def fed_whole(data: bytes, path: str = "/run/logs/trainer.log", block: int = 1 << 20) -> Iterator[Chunk]:
    """Complete lines in chunks of about ``block`` bytes, as the bench's count feeds them."""
    return whole_line_chunks(data, path, block, backlog_mtime=NOW + 3600)


# ------------------------------------------------------------------------------------------------- real logs
def _real_logs() -> list[Path]:
    return sorted(p for p in REAL.rglob("*") if p.is_file() and p.suffix in {"", ".log", ".txt", ".out", ".err"})


@pytest.mark.parametrize("live", [False, True])
def test_every_real_log_counts_alike(tmp_path: Path, live: bool) -> None:
    """All of tests/real (tests/real/threads, ray, host included) through one pair of counters, file by file."""
    logs = _real_logs()
    assert len(logs) > 100
    pair = Pair()
    rng = random.Random(5 if live else 4)
    for n, log in enumerate(logs):
        for chunk in tailed(tmp_path, f"{n}.log", log.read_bytes(), rng, live=live):
            pair.feed(chunk)
    pair.check()


@pytest.mark.parametrize("seed", range(3))
def test_real_logs_in_random_cuts(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    logs = _real_logs()
    pair = Pair(EventsConfig(custom=[CustomEvent(name="fatal", pattern=r"(?i)fatal|panic")]), storm_threshold=3)
    for log in rng.sample(logs, 60):
        both_on(
            pair,
            tailed(tmp_path, rng.choice(["a.log", "b.log", "c.log"]), log.read_bytes(), rng, live=rng.random() < 0.5),
            rng,
        )


# -------------------------------------------------------------------------------------------- benchmark logs
@pytest.mark.parametrize("dense", [True, False])
def test_benchmark_logs_count_alike(tmp_path: Path, dense: bool) -> None:
    from bench.datagen import generate

    ds = generate(tmp_path / "bench.log", (2 << 20) if dense else (4 << 20), dense=dense)
    data = ds.path.read_bytes()
    pair = Pair()
    for chunk in fed_whole(data, block=rng_block(dense)):
        pair.feed(chunk)
    pair.check()
    counts = {k: s.count for k, s in pair.counters[0].summaries().items() if k in ds.expected}
    assert counts == {k: v for k, v in ds.expected.items() if k in counts}
    # and live, appended in pieces
    pair = Pair()
    both_on(pair, tailed(tmp_path, "live.log", data[: 1 << 20], random.Random(1), live=True))


def rng_block(dense: bool) -> int:
    return 1 << 16 if dense else 1 << 20


# ----------------------------------------------------------------------------------------------- hostile text
_PIECES = [
    "\x1b[92m\x1b[1;38;2;180;140;80m(AReaL)\x1b[0m \x1b[92m20251121-09:15:{s:02d}.652 StatsLogger INFO: Epoch 1/2 Step 3/4 Train step {n}/60 done.\x1b[0m",
    "\x1b[33m(AReaL)\x1b[0m 20260105-08:02:{s:02d}.881 HTTPUtils WARNING: failed with ClientConnectorError: Cannot connect to host 127.0.0.1:17331",
    "│ ppo_actor/task_reward/avg │ 1.0e+00 │ rollout/reward │ {n}.0 │ timeperf/update_weights │ 3 │",
    "HTTPUtils WARNING: failed with ClientConnectorError: [Connect call failed ('10.0.0.1', 1)] (attempt 1/3)",
    "Traceback (most recent call last):",
    '  File "/x/y.py", line {n}, in f',
    "    raise TimeoutError('late')",
    "    ^^^^^^^^^^^",
    "TimeoutError: Timeout waiting for key 'k'",
    "ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 17331)",
    "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 127.0.0.1:17331 ssl:default",
    "RuntimeError: Failed after 3 retries each.",
    "",
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/x/z.py", line 9, in g',
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.15 GiB.",
    "[rank1]:[E1121 06:24:{s:02d}.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=10000) ran for 10035 milliseconds before timing out.",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-11-21_06:24:{s:02d}",
    "  host      : node-a",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : -6 (pid: 4242)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 4242",
    "{'loss': 0.1, 'grad_norm': 0.2, 'reward': 0.{n}, 'epoch': 0.01}",
    "{'train_runtime': 12.5, 'train_loss': 0.3}",
    "worker WARNING EMERGENCY brake engaged; Emergency-Brake again",
    "Killed process {n} (python3) total-vm:1kB",
    "ConnectionRefusedErrorTimeoutError NCCL error CUDA EngineCore",
    "INFO 11-24 05:09:{s:02d} [api_server.py:1234] Starting vLLM API server 0 on http://0.0.0.0:8000",
    "(EngineCore_DP0 pid=456) ERROR 11-24 05:09:{s:02d} [core.py:700] EngineCore encountered a fatal error.",
    "(TaskRunner pid=123) step:{n} - actor/pg_loss:nan - critic/score/mean:0.5",
    "2026-01-05T08:00:{s:02d}.123456789Z stdout F Loading weights from disk done in 10.48s.",
    "svc_1  | Saved recover checkpoint to /ckpt/{n}",
    "rlwatch-sim start run_id={n}",
    "***** Running training *****",
    "LocalLauncher: starting trial run_id={n}",
    "Recovering from StepInfo(epoch=1, epoch_step=2, global_step={n})",
    "[2025-03-14 02:15:{s:02d} TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "sglang.launch_server exits, returncode=-9",
    "  + Exception Group Traceback (most recent call last):",
    '  |   File "/srv/app/g.py", line 4, in h',
    "  | ValueError: inside a group",
    "    except ConnectionRefusedError:",
    "    # Connection refused is retried",
    '\tFile "/tab.py", line 3, in t',
    "noise \udcff \x00 \x0b \x1c \x85 ü ſtep 7",
    "W1121 09:22:{s:02d}.944000 40112 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1 closing signal SIGTERM",
    "Train step:{n} - x",
    "x" * 3000 + " Connection refused " + "y" * 3000,
    "fatal: PANIC",
    "act_loss=0.5, reward={n}, gen_len=100, kl=0.01, grad_norm=1.0",
    "│ ppo_actor/update/actor_loss/avg │ 0.{n} │ ppo_actor/no_eos_ratios/avg │ 0.1 │",
]
_TERMS = ["\n", "\n", "\n", "\r\n", "\r"]


def _hostile(rng: random.Random, n: int) -> bytes:
    out = []
    for _ in range(n):
        if rng.random() < 0.02:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))))
        else:
            text = (
                rng.choice(_PIECES)
                .replace("{s:02d}", f"{rng.randrange(60):02d}")
                .replace("{n}", str(rng.randrange(100)))
            )
            if rng.random() < 0.03:
                cut = rng.randrange(len(text) + 1)
                text = text[:cut] + rng.choice(["\x1b[31m", "\x1b[0m", "[rank2]: ", "(pid=1) ", " | "]) + text[cut:]
            out.append(text.encode("utf-8", "surrogateescape"))
        out.append(rng.choice(_TERMS).encode())
    return b"".join(out)


def _edges(rng: random.Random, n: int) -> bytes:
    """Text at the tracker's edges: other writers' blocks silent for about _SILENT_LINES lines, blank runs of about
    _AFTER_LINES after an exception, indented runs of about _STALL_LINES, times just inside and outside the
    look-back's reach, deep stacks (tests/logs/test_counting_paths.py's frame pieces)."""
    from tests.logs.test_counting_paths import _frames_text

    out: list[bytes] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.15:  # rank 1 opens a block, then the unprefixed writer talks for about 200 lines
            out.append(b'[rank1]: Traceback (most recent call last):\n[rank1]:   File "/r.py", line 1, in r\n')
            out.append(b"noise\n" * rng.randint(195, 205))
            out.append(rng.choice([b"[rank1]: ValueError: late\n", b"Traceback (most recent call last):\n"]))
        elif r < 0.3:  # an exception line, then a run of blank lines around the limit, then a chain or a header
            out.append(b'Traceback (most recent call last):\n  File "/a.py", line 2, in a\nValueError: x\n')
            out.append(rng.choice([b"\n", b"  \n", b"\t\n"]) * rng.randint(36, 44))
            out.append(
                rng.choice(
                    [
                        b"During handling of the above exception, another exception occurred:\n\n",
                        b"Traceback (most recent call last):\n",
                        b"plain\n",
                    ]
                )
            )
        elif r < 0.4:  # indented lines without a frame, about as many as stall a block
            out.append(b'Traceback (most recent call last):\n  File "/b.py", line 3, in b\n')
            out.append(b"    source\n" * rng.randint(76, 84))
            out.append(b"KeyError: k\n")
        elif r < 0.55:  # a time the look-back finds or not: 3 lines up, 400 bytes (not characters) into a line
            pad = rng.choice([b" ", "│".encode()]) * rng.randint(125, 140)
            out.append(pad + b"2026-01-05 08:0%d:00,000 head\n" % rng.randrange(10))
            out.append(b"x\n" * rng.randint(0, 3))
            out.append(b"Connection refused\n")
        elif r < 0.6:  # a time of its own later than the next chunk's modification time: its bound is lower
            out.append(b"2026-01-05 1%d:00:00,000 Connection refused\n" % rng.randrange(10))
        elif r < 0.7:
            out.append(_frames_text(rng, rng.randint(5, 40)))
        else:
            out.append(_hostile(rng, rng.randint(1, 20)))
    return b"".join(out)


@pytest.mark.parametrize("seed", range(6))
def test_the_trackers_edges_count_alike(seed: int) -> None:
    """Chunks cut anywhere, each live or a backlog of its own modification time (earlier or later than its lines)."""
    rng = random.Random(seed)
    pair = Pair(storm_threshold=rng.choice([1, 3, 5]))
    lineno = {"/x/a.log": 1, "/x/b.log": 1}
    for _ in range(30):
        path = rng.choice(sorted(lineno))
        data = _edges(rng, rng.randint(1, 12))
        by = rng.choice([None, None, NOW - 10_000, NOW, NOW + 10_000])
        for chunk in fed_whole(data, path, rng.choice([200, 4096, 1 << 16])):
            pair.feed(Chunk(path, chunk.data, lineno[path] + chunk.first_lineno - 1, chunk.nlines, backlog_mtime=by))
        lineno[path] += count_lines(data) + (0 if data.endswith((b"\n", b"\r")) else 1)
        if rng.random() < 0.3:
            step = rng.choice([0.5, 30.0, 400.0])
            for clock in pair.clocks:
                clock.advance(step)
    pair.check()


@pytest.mark.parametrize("seed", range(8))
def test_hostile_text_counts_alike(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    pair = Pair(storm_threshold=rng.choice([1, 2, 5]), recent_lines=rng.choice([1, 3, 20]))
    for k in range(4):
        data = _hostile(rng, 800)
        both_on(pair, tailed(tmp_path, f"{k % 2}.log", data, rng, live=rng.random() < 0.5), rng)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.sampled_from(_PIECES), st.sampled_from(_TERMS), st.integers(0, 99)), max_size=60),
    st.integers(1, 400),
    st.booleans(),
)
def test_any_lines_cut_anywhere_count_alike(lines: list[tuple[str, str, int]], block: int, backlog: bool) -> None:
    data = "".join(text.replace("{s:02d}", f"{n % 60:02d}").replace("{n}", str(n)) + term for text, term, n in lines)
    raw = data.encode("utf-8", "surrogateescape")
    pair = Pair()
    for chunk in whole_line_chunks(raw, "/run/t.log", block, backlog_mtime=NOW if backlog else None):
        pair.feed(chunk)
    pair.check()


# ------------------------------------------------------------------------------------------ each helper alone
# fmt: off
_PARTS = [
    "[rank3]:", "[rank12]: ", "[actor]", "[actor]   ", "(TaskRunner pid=123) ", "(WorkerDict pid=616, ip=192.168.1.1) ",
    "(pid=12) ", "(raylet) ", "(autoscaler +1m2s) ", "(autoscaler) ", "(VllmWorker rank=0 pid=2120280) ",
    "2026-11-24T05:09:01.123456789Z ", "2026-11-24T05:09:01Z stdout F ", "[2026-01-31T04:40:19Z] ",
    "INFO 11-24 05:09:01 [api_server.py:1234] ", "WARNING 11-24 05:09:01.5 core.py:70] ", "svc_1  | ", "web | ",
    "a", "=", " ", "(", ")", "[", "]", ":", "rank", "0", "9", "-", ".", ",", "T", "Z", "+01:00", "\t", "x", "ü", "٣", "²",
    "\u3000", "20251121-09:15:30.652", "2025-03-14 02:15:58,123", "INFO 05-06 20:59:57", "[E1121 06:24:44.903881913",
    "W1121 09:22:41.944000 40112 ", "2026-11-24T05:09:01+0100 ", "12:34:56", "T12:00:00",
    "Traceback (most recent call last):", '  File "/x/y.py", line 3, in f',
    "During handling of the above exception, another exception occurred:", "ValueError: bad", "a.b.CError: m",
    "raise ", "except", "#", "step", "STEP", "ſtep", " 12", ": 7", "\x1b[31m", "\x1b[0m", "\x1b[1;38;2;180;140;80m",
    "\x1b[", "m", "|", "+", "\n", "\x1c", "\x85", "ﬀ", "İ", "ß", "Error", "error", "Exit", "timeout", "CUDA",
    "2026-13-40T25:61:61Z ", "2026-02-29T00:00:00Z ", "1999-12-31 23:59:60.999999", "0000-01-01T00:00:00Z ",
    "9999-12-31T23:59:59.123456789-23:59 ", "1234567", ".1234567", "-", "\r",
    "04/21 21:03:53 - mmengine - INFO - ", "[11/01 11:27:04 d2.utils.events]: ", "[11/01 11:27:04] ", "/",
    "2022/08/22 15:51:56 - mmengine - ", "12/31 23:59:59", "13/40 25:61:61", "2022/02/30 10:00:00", "11/21/2025 ",
    "２０２５", "𝟚𝟘", "1٣:00:00", "INFO\t", "XINFO ", "CRITICAL  ", "E", "I1121 ", "05:30", "-0530", "\r\n", "1",
]
# fmt: on


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return repr(a) == repr(b)


# The step a progress line reports (incidents.step_number, compiled and interpreted) as the expression it replaced
# read it.
_STEP_NUMBER = re.compile(r".*step\W{0,3}(\d+)", re.IGNORECASE | re.DOTALL)
_STEP_LINES = [
    "",
    "\r",
    "step",
    "step ",
    "step 1",
    "Step 12/40",
    "STEP: 7",
    "ſtep 3",
    "Ste",
    "st",
    "step ٣",
    "step 𝟙",
    "step ½",
    "step___3",
    "step_3",
    "step...3",
    "step ...3",
    "step - 3",
    "global_step=1869\r\n",
    "'step': 1869,",
    "Epoch 32/166 Step 918/935 Train step 29903/155052 done.",
    "step 3 then step x",
    "step x then step 4",
    "steps 5",
    "stepstep 6",
    "\u2003step\u20039",
    "stEp\t\t\t10",
    "step\t\t\t\t10",
]


@pytest.mark.parametrize("text", _STEP_LINES)
def test_step_number_compiled_reads_as_its_text_interpreted_and_the_expression(text: str) -> None:
    step = _STEP_NUMBER.match(text)
    assert step_number(text) == _INC_INTERPRETED.step_number(text) == (step and step.group(1))


# The time a line says: rlwatch.logs.timestamps compiled (the import, what the event path cimports) against its text
# interpreted.
_TS_INTERPRETED = _interpreted("timestamps")


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_PARTS), max_size=10), st.floats(1.6e9, 1.9e9))
def test_each_helper_reads_a_line_as_python_does(parts: list[str], now: float) -> None:
    text = "".join(parts)
    assert _same(split_prefix(text), _PREFIXES_INTERPRETED.split_prefix(text))
    assert _same(parse_time(text, now), _TS_INTERPRETED.parse_time(text, now))
    _signature_rules_agree(text)
    assert native.py_code_line(text) == (CODE_LINE.search(text) is not None)
    step = _STEP_NUMBER.match(text)
    assert step_number(text) == _INC_INTERPRETED.step_number(text) == (step and step.group(1))
    assert native.py_strip_ansi(text) == strip_ansi(text)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_each_helper_reads_any_text_as_python_does(text: str) -> None:
    assert _same(split_prefix(text), _PREFIXES_INTERPRETED.split_prefix(text))
    assert _same(parse_time(text, 1.8e9), _TS_INTERPRETED.parse_time(text, 1.8e9))
    _signature_rules_agree(text)
    assert native.py_code_line(text) == (CODE_LINE.search(text) is not None)


def test_kinds_that_are_alternatives_of_strings_are_decided_without_re() -> None:
    """Which built-in kinds the compiled path decides by their strings (with ``\\s*$`` or ``\\b`` around them), and
    that each decision is the expression's, on text made of their strings, word characters and spaces."""
    decided = {k.name: native.literal_program(k.regex) for k in builtin_kinds()}
    assert decided["connection_refused"] is not None
    assert decided["traceback"] == [("Traceback (most recent call last):", True, False, False)]
    assert decided["timeout"] is not None and ("timed out after", False, False, False) in decided["timeout"]
    assert decided["nccl_error"] is not None and ("NCCL error", False, True, True) in decided["nccl_error"]
    assert decided["step"] is None  # anchored and repeated: left to `re`
    rng = random.Random(3)
    vocabulary = [s for k in builtin_kinds() for s in k.literals]
    vocabulary += ["Timed out after", "timed out", "NCCL error", "ncclSystemError", " ", "\t", "x", "_", "é", "\u2028"]
    for kind in builtin_kinds():
        program = decided[kind.name]
        if program is None:
            continue
        for _ in range(600):
            text = "".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 5)))
            assert native.py_program_search(program, text) == (kind.regex.search(text) is not None), (kind.name, text)


def test_each_kind_decides_a_line_as_the_python_matcher_does() -> None:
    """Literals, then the expression (its plain branches in C, the others in `re` only when they may match), then
    the code-line exclusion: the compiled decision of every built-in kind and a few custom ones, on random text."""
    from rlwatch.logs.matcher import Matcher

    cfg = EventsConfig(
        custom=[
            CustomEvent(name="fatal", pattern=r"(?i)fatal|panic"),
            CustomEvent(name="oops", pattern=r"\boops\b \d+|^\s*OOPS|plain oops"),
        ]
    )
    kinds = build_kinds(cfg)
    matcher = Matcher(kinds)
    vocabulary = [s for k in kinds for s in k.literals] + [
        "Train step 3/9 done.", "{'loss': 1, 'x': 2}", "step:5 - ", ") step:7 - ", "  ", "\t", "x", "_", "é", "5",
        "raise ", "except ", "# ", "oops 12", "OOPS", "Watchdog caught collective operation timeout",
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds", " busy or unavailable", "CUDA error: out of memory",
        "Worker proc VllmWorker-0 died unexpectedly", "Killed process 12", '"POST /reset_prefix_cache/ HTTP/1.1" 200',
        "│", "ü", "\udcff", "NCCL errorx", "xNCCL error",
    ]  # fmt: skip
    rng = random.Random(11)
    for _ in range(4000):
        text = "".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 6)))
        want = {k.name for k in matcher.match(text)}
        got = {k.name for k in kinds if native.py_kind_matches(k, text)}
        assert got == want, text
        got = {k.name for k in kinds if native.py_kind_matches(k, text, bits=True)}
        assert got == want, text


def test_needles_are_found_where_the_python_matcher_finds_them() -> None:
    from rlwatch.logs.matcher import Matcher

    matcher = Matcher(builtin_kinds())
    pairs = matcher.needle_kinds()
    assert pairs is not None
    needles = native.Needles([n for n, _ in pairs], [sum(1 << i for i in ks) for _, ks in pairs])
    rng = random.Random(9)
    for _ in range(200):
        data = _hostile(rng, 30) + b"Train step:5 - Connection refusedConnect call failed"
        assert needles.hits(data, 0, len(data)) == matcher.hits(data, 0, len(data))


def test_the_vector_search_finds_what_the_byte_table_finds() -> None:
    """The needle search skips to the bytes anchors begin with, 32 or 16 at a time where the CPU can: at every start,
    end and alignment it finds what the plain byte loop finds (and what the Python matcher does)."""
    from rlwatch.logs.matcher import Matcher

    pairs = Matcher(builtin_kinds()).needle_kinds()
    assert pairs is not None
    needles, masks = [n for n, _ in pairs], [sum(1 << i for i in ks) for _, ks in pairs]
    searches = [native.Needles(needles, masks, simd=level) for level in (0, 1, 2)]
    rng = random.Random(21)
    for _ in range(300):
        data = _hostile(rng, rng.randint(1, 12))
        for _ in range(5):
            lo = rng.randrange(len(data) + 1)
            hi = rng.randint(lo, len(data))
            firsts = {s.first_of(data, lo, hi) for s in searches}
            masks_found = {s.mask_of(data, lo, hi) for s in searches}
            assert len(firsts) == 1 and len(masks_found) == 1, (data[lo:hi], firsts, masks_found)
            hits = searches[0].hits(data, lo, hi)
            assert firsts.pop() == (min(at for at, _ in hits) if hits else -1) or hits  # the earliest line, by anchor


def test_a_regex_word_in_a_custom_kind_goes_to_re() -> None:
    cfg = EventsConfig(custom=[CustomEvent(name="oops", pattern=r"\boops\b \d+")])
    pair = Pair(cfg)
    data = b"oops 1\nxoops 2\noops x\n  oops 3 \n"
    pair.feed(Chunk("/a.log", data, 1, 4))
    pair.check()
    assert pair.counters[0].summaries()["oops"].count == 2


def test_too_many_kinds_or_kinds_without_literals_run_in_python() -> None:
    many = EventsConfig(custom=[CustomEvent(name=f"k{i}", pattern=f"word{i}x") for i in range(60)])
    assert not EventCounter(build_kinds(many), FakeClock()).native
    bare = EventsConfig(custom=[CustomEvent(name="any", pattern=r".")])
    assert not EventCounter(build_kinds(bare), FakeClock()).native
    assert EventCounter(build_kinds(EventsConfig()), FakeClock()).native


def test_a_storm_keeps_a_handful_of_lines_not_its_window(tmp_path: Path) -> None:
    """Bounded storms: 20 000 refused lines in one second each way, and the incident is the same."""
    line = "2026-01-05 08:00:{s:02d},000 WARNING Connection refused\n"
    data = "".join(line.format(s=i * 60 // 20000) for i in range(20000)).encode()
    pair = Pair()
    for chunk in fed_whole(data, block=1 << 16):
        pair.feed(chunk)
    pair.check()
    (storm,) = [i for i in pair.counters[0].incidents() if i.kind == "retry_storm"]
    assert storm.count == 20000 and storm.title == "20000 connection-refused errors (trainer.log)"


# ------------------------------------------------------------------------------------------------- the trackers
_KEYS = [
    "ppo_actor/task_reward/avg", "task_reward/avg", "rollout/reward", "x/rollout/reward", "rollout/reward/avg",
    "ppo_actor/rollout/reward/avg", "timeperf/update_weights", "ppo_actor/update/actor_loss/avg", "update/grad_norm",
    "ppo_actor/update/grad_norm", "update/entropy/avg", "update/approx_kl/avg", "no_eos_ratios/avg", "reward",
    "rewardish", "a/task_reward/avg2", "", "  ",
]  # fmt: skip
_VALUES = ["1.0", "-2.5e-01", "nan", "inf", "-inf", "x", "", " 3 ", "1_000", "٣", "0", "7"]


def _row(rng: random.Random) -> str:
    bar = rng.choice(["│", "│", "┃", "|"])
    cells = []
    for _ in range(rng.randint(1, 4)):
        cells += [rng.choice(_KEYS), rng.choice(_VALUES)]
    if rng.random() < 0.2:
        cells.append(rng.choice(_KEYS))  # a key without its value
    return bar + bar.join(f" {c} " for c in cells) + bar


def _training_text(rng: random.Random, n: int) -> bytes:
    out = []
    step = rng.randint(1, 5)
    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            step += rng.choice([1, 1, 1, 0, -3])
            out.append(
                f"20260105-08:{rng.randrange(60):02d}:00.000 Epoch 1/2 Step 1/9 Train step {step}/{step + 9} done."
            )
        elif r < 0.6:
            out.append(_row(rng))
        elif r < 0.7:
            secs = rng.choice(["10.48", "3", "1234567890", "2.", "5.1234567891", "x"])
            out.append(f"[RemoteInfEngine Rank {rng.randrange(2)}] Loading weights from disk done in {secs}s.")
        elif r < 0.8:
            out.append(
                rng.choice(
                    [
                        "{'loss': 0.1, 'grad_norm': 0.2, 'reward': 0.5, 'epoch': 0.01}",
                        "{'loss': nan, 'reward': -inf}",
                        "{'train_runtime': 12.5, 'train_loss': 0.3}",
                        f"(TaskRunner pid=1) step:{step} - actor/pg_loss:0.5 - critic/score/mean:0.25",
                        f"Train epoch [1/1]: 1%| | 1/4 [00:01<00:03, act_loss=0.1, reward={step}, gen_len=9]",
                        "Training completes! Total time elapsed 10s",
                    ]
                )
            )
        else:
            out.append(rng.choice(["noise", "Train step 1234567890123/9 done.", "Train step 5/7 done."]))
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("seed", range(10))
def test_the_trackers_read_alike(seed: int) -> None:
    """AReaL's step lines and stats rows (rewards ranked, the update-weights timing, learning metrics by suffix),
    TRL's dicts, verl's and OpenRLHF's lines, weight updates, a restart and a copy of the output in a second file."""
    rng = random.Random(seed)
    pair = Pair()
    lineno = {"/r/trainer.log": 1, "/r/merged.log": 1}
    for _ in range(25):
        path = rng.choice(sorted(lineno))
        data = _training_text(rng, rng.randint(1, 40))
        by = rng.choice([None, NOW])
        for chunk in fed_whole(data, path, rng.choice([100, 1 << 16])):
            pair.feed(Chunk(path, chunk.data, lineno[path] + chunk.first_lineno - 1, chunk.nlines, backlog_mtime=by))
        lineno[path] += count_lines(data)
        step = rng.choice([0.0, 11.0])
        for clock in pair.clocks:
            clock.advance(step)
    pair.check()
    state = pair.training[0].state()
    assert state.last_step is not None and state.rewards


# ------------------------------------------------------------------------------------------- CR-only line ends
def test_a_bare_cr_becomes_a_newline_and_a_crlf_stays() -> None:
    import re

    rng = random.Random(35)
    for _ in range(200):
        data = bytes(rng.choice(b"ab\r\n\r") for _ in range(rng.randint(0, 40)))
        assert native.py_bare_cr_as_lf(data) == re.sub(rb"\r(?!\n)", b"\n", data)
    plain = b"no carriage return\n"
    assert native.py_bare_cr_as_lf(plain) is plain  # nothing to change: no copy
    assert native.py_bare_cr_as_lf(b"\r") == b"\n"
    assert bytes([13]) == b"\r"  # the interpreter's shared one-byte object was copied, not changed


def test_the_dense_log_with_cr_only_ends_counts_as_with_lf(tmp_path: Path) -> None:
    """Issue 35: CR-only line ends (each "\\n" of the dense log a "\\r") give the same counts, line numbers and
    incidents as the LF original, on both paths (the compiled one reads them as LF, in bulk)."""
    from bench.datagen import generate

    lf = generate(tmp_path / "dense.log", 1 << 20, dense=True).path.read_bytes()
    outcomes = []
    for data in (lf, lf.replace(b"\n", b"\r")):
        pair = Pair()
        for chunk in fed_whole(data, block=1 << 16):
            pair.feed(chunk)
        pair.check()
        counter = pair.counters[0]
        outcomes.append(repr((counter.summaries(), counter.incidents(), pair.calls[0])))
    assert outcomes[0] == outcomes[1]


# ------------------------------------------------------------------------------------- a bar redrawn in bulk
def _redraw_text(rng: random.Random, n: int) -> bytes:
    """Runs of bar redraws (verl's, the Trainer's, a generation bar starting over), their counters mostly moving on,
    sometimes going back, their totals, units, texts, stamps and tails changing now and then, with failures, frames
    and near-bars between them, and every kind of line end."""
    out: list[bytes] = []
    step, total, unit, head, tail, stamped = 0, 200, "s/it", "Training Progress: ", "", False
    for _ in range(n):
        r = rng.random()
        if r < 0.01:
            total = rng.choice([200, 10, 1000])
        elif r < 0.02:
            unit = rng.choice(["s/it", "it/s"])
        elif r < 0.03:
            head = rng.choice(
                ["Training Progress: ", "", "(TaskRunner pid=7) Training Progress: ", "Training  Progress: "]
            )
        elif r < 0.04:
            tail = rng.choice(["", ", loss=0.5", " | loss 2.0", ", Traceback", ", act_loss=0.1"])
        elif r < 0.05:
            stamped = not stamped
        elif r < 0.06:
            step = rng.randrange(0, 5)
        if r < 0.94:
            step += rng.choice([0, 0, 0, 0, 1, 1, 9, 995])
            pct = min(100, step * 100 // total)
            stamp = f"2026-01-05T08:00:0{rng.randrange(10)}.{rng.randrange(1000)}Z " if stamped else ""
            speed = f"{rng.choice(['1.'] * 20 + ['12.', ''])}{rng.randrange(100):02d}{unit}"
            text = f"{stamp}{head}{pct:3d}%|{'█' * (pct // 10):<10}| {step}/{total} [00:{step % 60:02d}<01:00,  {speed}{tail}]"
        else:
            text = rng.choice(
                [
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                    "Traceback (most recent call last):",
                    '  File "/x/train.py", line 3, in <module>',
                    "RuntimeError: boom",
                    "{'loss': 0.1, 'grad_norm': 0.2, 'reward': 0.5, 'epoch': 0.01}",
                    "Training Progress: 12%| no closing bar",
                    "7%|",
                    "",
                ]
            )
        out.append(text.encode() + rng.choice([b"\n"] * 6 + [b"\r"] * 3 + [b"\r\n"]))
    return b"".join(out)


@pytest.mark.parametrize("seed", range(6))
def test_a_bar_redrawn_in_bulk_counts_alike(tmp_path: Path, seed: int) -> None:
    """Issue 35: both paths pass over the same runs of redraws (progress_shape.redraw_key), count them alike and
    hand their subscribers the same first and last lines, whatever cuts the chunks and the line ends."""
    rng = random.Random(seed)
    pair = Pair()
    data = _redraw_text(rng, 3000)
    both_on(pair, tailed(tmp_path, "bar.log", data, rng, live=seed % 3 == 2), rng)
    handed = sum(1 for call in pair.calls[0] if call[0] == "_steplike")
    assert handed < data.count(b"%|")  # runs were passed over (their lines are not all handed on)


def test_lines_that_are_not_ascii_are_searched_in_their_own_bytes_alike() -> None:
    """A body that is not ASCII is searched for the kinds' strings in the line's bytes when they are its UTF-8: after
    a prefix, after colour codes (stripped: then the text is not the bytes), with bytes that are not UTF-8 (replaced:
    nor then), with a real U+FFFD, with a prefix that is not ASCII, and an AReaL stats row."""
    lines = [
        "│ ppo_actor/task_reward/avg │  1.7e+02 │ ppo_actor/update/actor_loss/max │ 5.0e-01 │",
        "[rank3]: ü RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "(WorkerDict pid=616, ip=192.168.1.1) ✓ ConnectionRefusedError: [Errno 111] Connection refused",
        "\x1b[31mü ConnectionRefusedError: [Errno 111] Connection refused\x1b[0m",
        "\ufffd ConnectionRefusedError: [Errno 111] Connection refused",
        "[ränk3]: ConnectionRefusedError: [Errno 111] Connection refused",
        "２０２６ NCCL watchdog thread terminated with exception: Watchdog caught collective operation timeout",
    ]
    raw = "\n".join(lines).encode() + b"\n\xff\xfe ConnectionRefusedError: [Errno 111] Connection refused \xc3\n"
    for block in (len(raw), 64):
        pair = Pair()
        for chunk in whole_line_chunks(raw * 3, "/run/t.log", block, backlog_mtime=NOW):
            pair.feed(chunk)
        pair.check()
        summaries = pair.counters[0].summaries()
        assert summaries["connection_refused"].count >= 15  # every refused line of the three copies, at least
        assert summaries["cuda_oom"].count == 3


# fmt: off
_REPORT_PARTS = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 12, "-" * 12, "*_-= ", "train.py",
    " FAILED", "FAILED", "Failures:", "<NO_OTHER_FAILURES>", "Root Cause (first observed failure):", "[0]:", "[12]:",
    "[", "]", ":", "٣", "  ", "    ", " ", "\t", "\u3000", "\x0b", "time", "host", "rank", "exitcode", "error_file",
    "traceback", "tracebacks", "      : ", " :", ": ", "2025-11-21_06:24:40", "node-a", "0 (local_rank: 0)", "-6",
    " (pid: 4242)", "<N/A>", "Signal 6 (SIGABRT) received by PID 4242", "Traceback (most recent call last):",
    '  File "/x/y.py", line 3, in f', "ValueError: bad", "RuntimeError", "x", "\n", "\r", "ü",
    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
]
# fmt: on


_REPORT_SPACES = ["", " ", "  ", "    ", "     ", "\t", "\u3000 ", " \n "]
_REPORT_NAMES = ["time", "host", "rank", "exitcode", "error_file", "traceback", "tracebacks", "Time", "[0]:"]
_REPORT_SEPS = [":", " :", "      : ", ":  ", ": \n", "\t:\u3000", "="]
_REPORT_LINE = st.one_of(
    st.lists(st.sampled_from(_REPORT_PARTS), max_size=6).map("".join),
    st.tuples(
        st.sampled_from(_REPORT_SPACES),
        st.sampled_from(_REPORT_NAMES),
        st.sampled_from(_REPORT_SEPS),
        st.lists(st.sampled_from(_REPORT_PARTS), max_size=3).map("".join),
        st.sampled_from(_REPORT_SPACES),
    ).map("".join),
    st.sampled_from(["Failures:", "Root Cause (first observed failure):", "[0]:", "[1]:", "=" * 20, "-" * 20, ""]),
)


@pytest.mark.parametrize(
    "name", ["torchrun_report", "signatures", "incidents", "areal_lines", "prefixes", "timestamps"]
)
def test_the_rule_modules_compiled_from_their_text_are_compiled(name: str) -> None:
    """Where the event path is built, a rule module it cimports was compiled too: the import gives the extension,
    not the .py (else the equivalence below would compare the .py with itself)."""
    module = importlib.import_module(f"rlwatch.logs.{name}")
    assert module.__file__ is not None
    assert module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), module.__file__


_TR_INTERPRETED = _interpreted("torchrun_report")
_SIG_INTERPRETED = _interpreted("signatures")

# What signatures' line rules read as: the expressions they were written with before they were hand-matched (so
# that one text could be compiled to C), kept here as the oracle of the interpreted text.
_HEADER_RE = re.compile(re.escape(wording.TRACEBACK_HEADER) + r"\s*$")
_FRAME_RE = re.compile(r"^\s*" + re.escape(wording.FRAME_FILE) + r'([^"]*)' + re.escape(wording.FRAME_LINE) + r"(\d+)")
_CHAIN_RE = re.compile(rf"^\s*(?:{re.escape(wording.CHAIN_CONTEXT)}|{re.escape(wording.CHAIN_CAUSE)})\s*$")
_EXC_RE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::\s?(.*))?$")


def _exception_re(line: str) -> tuple[str, str] | None:
    m = _EXC_RE.match(line)
    if m is None:
        return None
    name = m.group(1)
    last = name.rsplit(".", 1)[-1]
    if last.upper() == last:
        return None
    if not (last[0].isupper() or last.endswith(wording.EXCEPTION_NAME_ENDINGS)):
        return None
    return name, (m.group(2) or "").strip()


def _signature_rules_agree(text: str) -> None:
    """signatures' line rules compiled (what the event path cimports) and interpreted from the same .py give the same
    answers, and the interpreted ones the expressions' (a frame's location too)."""
    frame = _FRAME_RE.match(text)
    want = {
        "header": _HEADER_RE.search(text) is not None,
        "chain": _CHAIN_RE.match(text) is not None,
        "frame": frame and (frame.group(1), frame.group(2)),
        "exception": _exception_re(text),
    }
    for name, answer in want.items():
        compiled = getattr(signatures, name)(text)
        interpreted = getattr(_SIG_INTERPRETED, name)(text)
        assert _same(compiled, interpreted), (name, text)
        assert _same(interpreted, answer), (name, text)
        if name == "frame" and answer:
            assert signatures.location(*answer) == _SIG_INTERPRETED.location(*answer)


# Verbatim lines where a hand-matched rule could part from its expression: non-ASCII digits and letters, cut-off
# headers and frames, empty lines, CRLF and lone CR endings, a final newline, Unicode spaces, logger levels.
_SIGNATURE_LINES = [
    "",
    "\n",
    "\r\n",
    "Traceback (most recent call last):",
    "Traceback (most recent call last):\r\n",
    "Traceback (most recent call last):\r",
    "Traceback (most recent call last):\n",
    "Traceback (most recent call last):\u2028\x85\u3000",
    "[rank3]: Traceback (most recent call last):",
    "Traceback (most recent call last): x",
    "Traceback (most recent call",
    "raceback (most recent call last):",
    "(most recent call last):",
    '  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main',
    '  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main\r\n',
    '  File "train.py", line ٣٤, in main',
    '  File "train.py", line ²3, in main',
    '  File "train.py", line 3٣',
    '  File "train.py", lin',
    '  File "train.py", line ',
    '  File "train.py"',
    '  File "',
    '\u3000File "x.py", line 1',
    'File "C:\\x\\y.py", line 7',
    'File "", line 1',
    'File "/a/", line 1',
    'File "a"b.py", line 1',
    '  File "x\ny.py", line 2',
    "During handling of the above exception, another exception occurred:",
    "During handling of the above exception, another exception occurred:\r\n",
    "  The above exception was the direct cause of the following exception:  \r",
    "During handling of the above exception, another exception occurred: x",
    "During handling of the above exception",
    "ValueError: bad",
    "ValueError: bad\r\n",
    "ValueError: bad\r",
    "ValueError: bad\n",
    "ValueError:\n",
    "ValueError:\nx",
    "ValueError: a\nb",
    "ValueError",
    "ValueError\n",
    "ValueError\r\n",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "socket.timeout: timed out",
    "sys.exit",
    "WARNING: low memory",
    "CUDA: out of memory",
    "ÄError: x",
    "ÄRROR: x",
    "errör: x",
    "Errör٣: x",
    "a.1Error: x",
    "a..BError: x",
    "_Private: x",
    "KeyboardInterrupt",
]


@pytest.mark.parametrize("text", _SIGNATURE_LINES)
def test_signature_rules_compiled_read_verbatim_lines_as_their_text_interpreted(text: str) -> None:
    _signature_rules_agree(text)


_PREFIXES_INTERPRETED = _interpreted("prefixes")  # split_prefix above is the compiled one


@settings(max_examples=600, deadline=None)
@given(st.lists(_REPORT_LINE, max_size=16))
def test_torchrun_report_compiled_reads_as_its_text_interpreted(bodies: list[str]) -> None:
    """torchrun's failure report, read line by line by ``torchrun_report.report_line`` compiled (what the event
    path calls) and interpreted from the same .py: what each line answers, and the report after it, failures
    frozen."""
    from rlwatch.logs import torchrun_report as compiled

    reports = (compiled.Report(), _TR_INTERPRETED.Report())
    for body in bodies:
        seen = []
        for module, report in zip((compiled, _TR_INTERPRETED), reports, strict=True):
            took = module.report_line(report, body)
            failures = [(f.root, dict(f.fields), f.error, f.freeze()) for f in report.failures]
            seen.append((took, report.name, report.section, report.done, report.in_traceback, failures))
        assert _same(*seen), body


_REPORT_LOG = b"""Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train_%d.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-01-05_08:00:40
  host      : pod-%d
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4%d)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4%d
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-05_08:00:39
  host      : pod-%d
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 5%d)
  error_file: /tmp/err.json
  traceback : Traceback (most recent call last):
    File "/x/train.py", line 3, in f
  ValueError: bad batch %d
"""


def test_torchrun_report_records_are_read_alike_at_any_line() -> None:
    """A report line only stretches its record, the title and failures made when the report ends or the records
    are read: read after every line of real torchrun logs, and where reports end unclosed (the record settled
    when 64 wait, or when newer records push it out of those kept), the compiled path answers as Python's."""
    for name in ("torchrun-exception/torchrun.log", "threads/037-torch-elastic-childfailed-sigkill-open-r1-grpo.log"):
        pair = Pair()
        lineno = 1
        for line in (REAL / name).read_bytes().split(b"\n"):  # a chunk per line, each answer compared
            n = count_lines(line + b"\n")
            pair.feed(Chunk("/run/t.log", line + b"\n", lineno, n, backlog_mtime=NOW))
            lineno += n
            pair.check()
    filler = b"".join(b"step %d ok\n" % k for k in range(45))
    unclosed = b"".join(_REPORT_LOG % ((n,) * 7) + filler for n in range(70))
    # then more records than are kept (500): the reports' records pushed out, tallied as they stand
    plain = b"".join(
        b'Traceback (most recent call last):\n  File "/x/y.py", line 1, in f\nValueError: %d\n' % n for n in range(520)
    )
    pair = Pair()
    both_on(pair, whole_line_chunks(unclosed + plain, "/run/t.log", 1 << 16, backlog_mtime=NOW))
    assert pair.counters[0].dropped_incidents()


_INC_INTERPRETED = _interpreted("incidents")
_INC_LINES = [
    "Traceback (most recent call last):",
    "[rank1]: Traceback (most recent call last):",
    "Traceback (most recent call last):\r",
    '  File "/x/train.py", line 12, in main',
    '[rank1]:   File "/x/a.py", line 3, in f',
    '  File "/x/b.py", line ٣, in g',
    "    loss.backward()",
    "ValueError: bad",
    "[rank1]: RuntimeError: CUDA out of memory",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "During handling of the above exception, another exception occurred:",
    "[rank1]: The above exception was the direct cause of the following exception:",
    "",
    "  | ValueError: x",
    "  + Exception Group Traceback (most recent call last):",
    "WARNING: x",
    "train_0.py FAILED",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "Root Cause (first observed failure):",
    "[0]:",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : -9 (pid: 41)",
    "  error_file: <N/A>",
    "=" * 20,
    "-" * 20,
    "step 3 done",
    # where the rules compiled (Py_UCS4 comparisons, C indices) and interpreted could part: a gutter character just
    # past the twelve looked at, a full-width bar, other scripts' spaces and digits, cut headers and prefixes, CRLF
    # ends, a lone surrogate
    "            | ValueError: y",
    "           | ValueError: y",
    "  ｜ ValueError: y",
    '\u2003 File "/x/c.py", line 4, in h',
    "\u3000",
    "ValueError: bad\r",
    "ValueError: bad \udc80",
    "[rank١]: Traceback (most recent call last):",
    "[rank",
    "[rank1]:",
    "Traceback (most recent call",
    "Traceback (most recent call last):  ",
    "  | ",
    "  +",
    "+",
    "\r",
]
_INC_EVENTS = [
    ("connection_refused", "ConnectionRefusedError: [Errno 111] Connection refused"),
    ("timeout", "name_resolve timed out after 300 seconds"),
    ("child_failed", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"),
    ("engine_dead", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue"),
    ("_server_exit", "server exits, returncode=-9"),
    (
        "nccl_timeout",
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=10000) ran for 10035 milliseconds before timing out.",
    ),
    ("nccl_timeout", "[rank0]:[E ProcessGroupNCCL.cpp:1] WorkNCCL(SeqNum=7, OpType=BROADCAST, Timeout(ms)=600000)"),
]
# (line or event, which, the file, whether the line has a time of its own, seconds since the last)
_INC_STEP = st.tuples(
    st.booleans(),
    st.integers(0, len(_INC_LINES) - 1),
    st.sampled_from(["/r/trainer.log", "/r/worker.log"]),
    st.booleans(),
    st.sampled_from([0.0, 0.5, 30.0, 90.0]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_INC_STEP, max_size=60))
def test_incident_tracker_compiled_reads_as_its_text_interpreted(
    steps: list[tuple[bool, int, str, bool, float]],
) -> None:
    """The incident tracker (its records the compiled event path's too) compiled and interpreted from the same .py,
    fed the same lines and events: the same incidents and tallies, records dropped by the kept ones included."""
    from rlwatch.logs import incidents as compiled

    trackers = [m.IncidentTracker(storm_threshold=2, max_incidents=4) for m in (compiled, _INC_INTERPRETED)]
    t = NOW
    for lineno, (is_line, which, path, dated, dt) in enumerate(steps, 1):
        t += dt
        span = (t, None) if dated else (t - 1.0, t + 1.0)
        for tracker in trackers:
            if is_line:
                tag, body = split_prefix(_INC_LINES[which])
                tracker.line(path, tag, body, lineno, lambda span=span: span)
            else:
                kind, text = _INC_EVENTS[which % len(_INC_EVENTS)]
                tracker.event(kind, path, lineno, span, text)
    got, want = ((tr.incidents(), tr.dropped(), {p: set(s) for p, s in tr.open_paths.items()}) for tr in trackers)
    assert _same(got, want)


# ------------------------------------------------------------------------------- the counting (counting)
_COUNTING_INTERPRETED = _interpreted("counting")
_COUNT_TEXTS = [
    "step 12/100 done",
    "Epoch 3 | loss 0.1",
    "ConnectionRefusedError: [Errno 111]",
    "x",
    "步 ٣",
    "",
    "2026-01-05 10:00:07 step 3",
]
# (what: a line, a start banner or a piece of an over-long line; kind, file, whether the line has a time of its own,
# seconds since the last, a bulk run's length (0: one line), its text, a new chunk before it)
_COUNT_STEP = st.tuples(
    st.integers(0, 2),
    st.integers(0, 63),
    st.sampled_from(["/r/trainer.log", "/r/worker.log", "/r/x/trainer.log"]),
    st.booleans(),
    st.sampled_from([0.0, 0.5, 30.0, 400.0]),
    st.integers(0, 3),
    st.integers(0, len(_COUNT_TEXTS) - 1),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_COUNT_STEP, max_size=80), st.integers(1, 4), st.booleans())
def test_counting_compiled_counts_as_its_text_interpreted(
    steps: list[tuple[int, int, str, bool, float, int, int, bool]], recent: int, unsound: bool
) -> None:
    """The counting state and rules (what both event paths keep of each kind and file) compiled and interpreted from
    the same .py, fed the same occurrences, runs of redraws, start banners, over-long lines and chunks: the same
    summaries (bounds, positions, rate, streaks, files, recent lines), streaks, log-view tags, subscriber calls and
    errors, restarts, over-long lines' times, and incidents."""
    from rlwatch.logs import counting as compiled
    from rlwatch.logs.incidents import Grouper

    kinds = build_kinds(EventsConfig())
    outcomes = []
    for module in (compiled, _COUNTING_INTERPRETED):
        counts = module.Counts(kinds, Grouper(2, 60.0, 60.0, 4), recent_lines=recent, rate_window_s=60.0)
        calls: list[tuple[str, str, int, str, float]] = []
        tags: list[Tag] = []
        for kind in kinds:
            counts.subscribe(kind.name, lambda line, k=kind.name, calls=calls: calls.append((k, *_line_fields(line))))
        counts.subscribe("step", lambda line: 1 / 0)  # a subscriber's failure is told, not raised
        counts.tag_into(tags, 5)
        t = NOW
        lineno = 1
        seen: list[object] = []
        for what, which, path, dated, dt, run, text, new_chunk in steps:
            t += dt
            if new_chunk:
                counts.chunk(lineno, 7)
            i = which % counts.nk
            fs = counts.file(path)
            lo, by = (-math.inf, math.inf) if unsound else (t - 5.0, t + 1.0)
            if what == 1:  # a start banner, counted as a restart too when it is the file's second
                seen.append(counts.restarts(fs, run == 3))
            elif what == 2:  # a piece of an over-long line (a new one where the run says), its time by its head
                if fs.long is None or run == 0:
                    fs.long = module.long_line(lineno)
                    lineno += 1
                counts.long_time(fs, _COUNT_TEXTS[text], t, by, not dated)
                if counts.long_new(fs, i):
                    counts.count_long(i, fs, fs.long.span_t, fs.long.span_by, fs.long.span_has_by, "long", t)
                seen.append((fs.long.span_t, fs.long.span_by, fs.long.span_has_by, fs.stamp, fs.has_stamp))
            elif run and i in counts.redrawn:
                counts.bulk(i, fs, lineno, run)
                lineno += run
            elif dated:
                counts.count(i, fs, lineno, t, 0.0, False, _COUNT_TEXTS[text], t)
            else:  # no time of its own: bounded (by nothing sound, when unsound)
                counts.count(i, fs, lineno, lo, by, True, _COUNT_TEXTS[text], t)
            lineno += 1
        streaks = {kind.name: counts.streaks(kind.name) for kind in kinds}
        outcomes.append(
            repr((counts.summaries(t + 30.0), streaks, tags, calls, list(counts.errors), counts.g.incidents(), seen))
        )
    assert outcomes[0] == outcomes[1]


_TIMES = st.sampled_from([NOW, NOW - 1.0, NOW + 1.0, 0.0, -math.inf, math.inf])


@given(_TIMES, st.booleans(), st.booleans(), _TIMES, st.booleans(), _TIMES, _TIMES)
def test_a_lines_time_without_a_stamp_compiled_reads_as_its_text_interpreted(
    earlier: float, has_earlier: bool, backlog: bool, before: float, has_before: bool, now: float, by: float
) -> None:
    """The time of a line that says none, and the upper bound of a backlog one, compiled and interpreted."""
    from rlwatch.logs import counting as compiled

    got, want = (
        (m.undated_time(earlier, has_earlier, backlog, before, has_before, now), m.upper_bound(earlier, by))
        for m in (compiled, _COUNTING_INTERPRETED)
    )
    assert repr(got) == repr(want)


def _line_fields(line: LogLine) -> tuple[str, int, str, float]:
    return line.path, line.lineno, line.text, line.time


# ------------------------------------------------------------------------- the trackers' lines (areal_lines)
_AL_INTERPRETED = _interpreted("areal_lines")
# What the hand-matched readers of areal_lines stand for, as the expressions they replaced wrote it.
_AREAL_STEP_RE = re.compile(r"Train step ([0-9]{1,12})/([0-9]{1,12}) done")
_DISK_UPDATE_RE = re.compile(r"Loading weights from disk done in ([0-9]{1,9}(?:\.[0-9]{0,9})?)s")
# Lines where the compiled and the interpreted reading could part: other scripts' digits (str.isdigit and float
# take them, [0-9] does not), prefixes cut short, empty lines and bars alone, CRLF ends, underscores float accepts,
# a character outside the BMP, a lone surrogate, cells with no value.
_VERBATIM = [
    "", "\r", " ", "│", "││", "│ │ │", "|||", "┃┃┃", "Train step ", "Train step 3", "Train step 3/", "Train step 3/9",
    "Train step 3/9 don", "Train step 3/9 done", "Train step 3/9 done.\r", "Train step ٣/9 done.", "Train step 3/٩ done.",
    "Train step 𝟙/9 done.", "Train step 1234567890123/9 done.", "Train step 123456789012/123456789012 done.",
    "Train step x Train step 4/8 done.", "Train step Train step 5/6 done.", "Train step 07/010 done.\r",
    "Loading weights from disk done in ", "Loading weights from disk done in 1", "Loading weights from disk done in 1.",
    "Loading weights from disk done in 1.s", "Loading weights from disk done in 12.5s.\r",
    "Loading weights from disk done in ٣s.", "Loading weights from disk done in 1234567890s.",
    "Loading weights from disk done in 1.1234567891s", "Loading weights from disk done in x Loading weights from disk done in 4s",
    "[rank0]: [actor] Loading weights from disk done in 2.25s. Respond time: 1s.\r",
    "│ ppo_actor/task_reward/avg │ ٣ │ timeperf/update_weights │ 1_0 │\r",
    "│ ppo_actor/task_reward/avg │ 𝟙.5 │ ppo_actor/update/actor_loss/avg │ ۱ │",
    "│ ppo_actor/update/grad_norm │ \u00a01.5\u2003 │ update/entropy/avg │ 1e400 │ no_eos_ratios/avg │ -0 │",
    "┃ rollout/reward ┃ 2 ┃ task_reward/avg ┃ nan ┃\r", "| x/rollout/reward | 0.5 | reward | 3 | rollout/reward/avg |",
    "│ \ud800 │ 1 │ task_reward/avg │ 2 │", "│ task_reward/avg │ \ud800 │", "│ ppo_actor/task_reward/avg │",
    "{'loss': 0.1, 'reward': 0.5} │ update/grad_norm │ 1 │", "step:3 - actor/pg_loss:0.5 │ update/grad_norm │ 2 │",
    "Training completes!", "Job 'x' succeeded", "act_loss=0.1 │ task_reward/avg │ 4 │",
]  # fmt: skip


def _oracle_areal_step(text: str) -> tuple[int, int] | None:
    m = _AREAL_STEP_RE.search(text)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def _oracle_weight_update(text: str) -> float | None:
    m = _DISK_UPDATE_RE.search(text)
    return None if m is None else float(m.group(1))


@settings(max_examples=2000, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["Train step ", "Loading weights from disk done in ", "1", "12", "123456789", "123456789012", "1234567890123", "/", ".",
             " done", "s", " ", "x", "٣", "𝟙", "0", "\r", "│", "|", "reward", "task_reward/avg", "_"]
        ),
        max_size=8,
    )
)  # fmt: skip
def test_the_trackers_parsers_compiled_read_as_their_text_interpreted(parts: list[str]) -> None:
    """AReaL's step line and weight update, read by hand over the text's characters: compiled, interpreted and the
    expressions they stand for agree; a stats row's numeric pairs too."""
    text = "".join(parts)
    _parsers_agree(text)


def test_the_trackers_parsers_read_the_verbatim_lines_alike() -> None:
    for text in _VERBATIM:
        _parsers_agree(text)


def _parsers_agree(text: str) -> None:
    step = areal_lines.parse_areal_step(text)
    assert step == _AL_INTERPRETED.parse_areal_step(text) == _oracle_areal_step(text), repr(text)
    update = areal_lines.parse_weight_update(text)
    assert _same(update, _AL_INTERPRETED.parse_weight_update(text)), repr(text)
    assert _same(update, _oracle_weight_update(text)), repr(text)
    assert _same(areal_lines.parse_stats_row(text), _AL_INTERPRETED.parse_stats_row(text)), repr(text)


def _tracker_pair() -> tuple[list[TrainingTracker], list[LearningTracker], list[object]]:
    training = [TrainingTracker(FakeClock(NOW), stall_s=600.0, weight_update_timeout_s=300.0) for _ in (0, 1)]
    learning = [LearningTracker(step_of=lambda t=t: t.state().last_step) for t in training]
    feeds = [areal_lines.LearningFeed(learning[0]), _AL_INTERPRETED.LearningFeed(learning[1])]
    return training, learning, feeds


def _read_alike(texts: list[str], rng: random.Random) -> None:
    """Each line handed to both training trackers and both learning feeds, one pair through areal_lines compiled and
    one through its .py interpreted, in batches as the counter delivers them; what each says after every batch."""
    training, learning, feeds = _tracker_pair()
    applies = (areal_lines.training_apply, _AL_INTERPRETED.training_apply)
    lineno = {"/r/trainer.log": 0, "/r/merged.log": 0}
    pos = 0
    while pos < len(texts):
        batch = texts[pos : pos + rng.randint(1, 30)]
        pos += len(batch)
        path = rng.choice(sorted(lineno))
        for text in batch:
            lineno[path] += 1
            line = LogLine(path, lineno[path], text, rng.choice([math.nan, NOW + lineno[path]]))
            for i in (0, 1):
                training[i].queue.append(line)
                feeds[i](line)  # type: ignore[operator]
        for i in (0, 1):
            applies[i](training[i], 0.0)
        said = [repr((t.state(NOW + 60.0), list(t.errors), t.areal_step, t.reward_slot)) for t in training]
        assert said[0] == said[1], batch
        learned = [repr((t.state(), t.areal_step, t.ordinal)) for t in learning]
        assert learned[0] == learned[1], batch


@pytest.mark.parametrize("seed", range(10))
def test_the_trackers_lines_compiled_read_as_their_text_interpreted(seed: int) -> None:
    """AReaL's step lines and stats rows (rewards ranked, the update-weights timing, learning metrics by suffix),
    weight updates, TRL's, verl's and OpenRLHF's lines, a restart and a second file, and the verbatim lines."""
    rng = random.Random(seed)
    texts = _training_text(rng, 600).decode("utf-8").split("\n")[:-1]
    for _ in range(60):
        texts.insert(rng.randrange(len(texts) + 1), rng.choice(_VERBATIM))
    _read_alike(texts, rng)


def test_a_built_event_path_whose_rule_module_was_not_compiled_falls_back_to_python() -> None:
    """Each extension is optional: where the event path compiled but a rule module it cimports did not, its import
    fails with an AttributeError (Cython asks the .py for its C functions), and the Python path must run, saying why,
    as where nothing was built; it crashed every command before."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('rlwatch.logs.timestamps', {str(ROOT / 'rlwatch/logs/timestamps.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m; spec.loader.exec_module(m)\n"
        "from rlwatch.logs import native\n"
        "print(native.event_path() is None); print(native.which())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.splitlines()[0] == "True", out
    assert "event path: Python (built, but a rule module it needs was not compiled)" in out


@pytest.mark.parametrize(
    "text",
    [
        "",
        "step 3 loss 0.1",
        "\x1b[31mRuntimeError\x1b[0m: boom",
        "tab\there and a bell\x07",
        "del\x7f char",
        "│ ppo_actor/seq_len/avg │ 1.7e+02 │",
        "步 ٣ \u200b zero width",
        "x" * 5000,
        "\x1b[2K" + "y" * 4100,
        "a\x00b",
    ],
)
def test_an_evidence_text_compiled_reads_as_its_text_interpreted(text: str) -> None:
    from rlwatch.logs import counting as compiled

    got = compiled.shown(text)
    assert got == _COUNTING_INTERPRETED.shown(text)
    assert len(got) <= compiled.DISPLAY_CHARS and "\x1b" not in got and "\x07" not in got  # a tab stays
