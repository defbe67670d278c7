"""A progress bar redrawn line after line (issue 35): the counter passes over a run of redraws in bulk, counts every
line of it, and hands subscribers the run's first and last lines, so the step, the total, the speed and the time
of the last redraw still reach the training tracker, and a line of any other kind between redraws is counted as
ever. Both paths (compiled and Python) do the same; tests/logs/test_native_equivalence.py compares them."""

from __future__ import annotations

import math
import random

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LogLine, TrainingState
from rlwatch.config.models import EventsConfig
from rlwatch.logs import events as events_module
from rlwatch.logs.events import EventCounter, Tag, build_kinds
from rlwatch.logs.progress_shape import redraw_key
from rlwatch.logs.tailer import Chunk
from rlwatch.logs.training import TrainingTracker
from tests.logs.chunking import whole_line_chunks

NOW = 1_767_600_000.0
PATH = "/run/logs/trainer.log"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
PATHS = [pytest.param(False, id="python")]
if events_module.NATIVE:
    PATHS.insert(0, pytest.param(True, id="compiled"))


def verl_bar(step: int, total: int = 200, rate: str = "1.17s/it") -> str:
    """verl's fit() bar (ray_trainer.py), as tqdm draws it."""
    pct = step * 100 // total
    cells = ("\u2588" * (pct // 10)).ljust(10)
    return f"Training Progress: {pct:3d}%|{cells}| {step}/{total} [00:{step % 60:02d}<01:00,  {rate}]"


def redraws(count: int, total: int = 200, every: int = 7, seed: int = 1) -> list[str]:
    """``count`` redraws, the step moving on every ``every`` of them, the speed changing on each."""
    rng = random.Random(seed)
    return [verl_bar(i // every, total, f"1.{rng.randrange(100):02d}s/it") for i in range(count)]


class Wired:
    """A counter with the training tracker subscribed as the engine subscribes it, and every hand-over recorded."""

    def __init__(self, native: bool, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock(NOW)
        self.counter = EventCounter(build_kinds(EventsConfig()), self.clock, native=native)
        assert self.counter.native is native
        self.training = TrainingTracker(self.clock, stall_s=600.0, weight_update_timeout_s=120.0)
        self.handed: list[tuple[str, LogLine]] = []
        for kind in ("_progress", "_steplike", "cuda_oom"):
            self.counter.subscribe(kind, lambda line, k=kind: self.handed.append((k, line)))
        for kind in ("step", "_reward", "weight_update", "_finished", "_progress", "_steplike"):
            self.counter.subscribe(kind, self.training.on_step)
        self.tags: list[Tag] = []
        self.counter.tag_into(self.tags, 50)

    def feed(self, lines: list[str], sep: str = "\n", block: int = 1 << 20, by: float | None = NOW) -> None:
        self.feed_lines = lines
        data = "".join(line + sep for line in lines).encode()
        for chunk in whole_line_chunks(data, PATH, block, backlog_mtime=by):
            self.counter.feed(chunk)
            self.training.on_any_line(self.clock.time())

    def linenos(self, kind: str) -> list[int]:
        return [line.lineno for k, line in self.handed if k == kind]


def every_line(lines: list[str]) -> TrainingState:
    """What the training tracker says having read each line of a backlog (no time), one by one."""
    tracker = TrainingTracker(FakeClock(NOW), stall_s=600.0, weight_update_timeout_s=120.0)
    for n, text in enumerate(lines, 1):
        tracker.on_step(LogLine(PATH, n, text, math.nan))
    tracker.on_any_line(NOW)  # as Wired.feed tells it a chunk was read, at the clock's time
    return tracker.state()


def test_a_redraw_key_names_one_bar_through_its_redraws() -> None:
    def key(text: str) -> bytes | None:
        data = text.encode()
        found = redraw_key(data, 0, len(data))
        return None if found is None else found[0]

    first = key(verl_bar(5, 200, "1.17s/it"))
    assert first is not None
    assert key(verl_bar(150, 200, "9.99s/it")) == first  # the percentage, cells, counter, times and speed move
    assert key(verl_bar(5, 300)) != first  # another total: another bar (an evaluation bar beside training's)
    assert key(verl_bar(5, 200, "3.10it/s")) != first  # tqdm changed its unit
    assert key(verl_bar(5).replace("Training", "Validation")) != first
    assert key("Training Progress: no bar here") is None
    assert key("%| starts the line") is None
    assert key("x" * 2000 + verl_bar(5)) is None  # over REDRAW_MAX_BYTES: never a redraw
    data = verl_bar(42).encode()
    assert redraw_key(data, 0, len(data)) == (first, 42)  # and the counter, which a run never sees go back


@pytest.mark.parametrize("native", PATHS)
@pytest.mark.parametrize("sep", ["\n", "\r", "\r\n"])
def test_a_run_of_redraws_is_counted_whole_and_handed_on_by_its_ends(native: bool, sep: str) -> None:
    wired = Wired(native)
    lines = redraws(3000, total=1000)
    wired.feed(lines, sep, block=64 << 10)
    summary_count = wired.counter.streaks("_progress")[PATH]
    assert summary_count == 3000  # every redraw counted (no progress kind ended the streak)
    handed = wired.linenos("_progress")
    assert handed[0] == 1 and handed[-1] == 3000  # the run's first and last lines
    assert len(handed) < 50  # a few per chunk, not one per redraw
    assert wired.linenos("_progress") == wired.linenos("_steplike")
    state = wired.training.state()
    assert state == every_line(lines)  # what the tracker says is what it says having read every redraw
    assert (state.last_step, state.total_steps) == (2999 // 7, 1000)  # the last redraw's counter and total
    last_speed = float(lines[-1].rsplit("  ", 1)[1].removesuffix("s/it]"))
    assert state.steps_per_hour == pytest.approx(3600.0 / last_speed)  # the last redraw's own speed
    # the log view still gets a tag for each of the newest lines of a chunk, redraws passed over included (a run
    # of them as one range)
    assert any(isinstance(n, range) for _, n, _ in wired.tags)
    tagged = {m for _, n, k in wired.tags if k == "_progress" for m in (n if isinstance(n, range) else [n])}
    assert set(range(2951, 3001)) <= tagged


def test_the_log_view_marks_each_line_of_a_run_tagged_as_one() -> None:
    from rlwatch.engine.recent_lines import RecentLines

    recent = RecentLines()
    data = "".join(line + "\n" for line in redraws(10)).encode()
    recent.add(Chunk(PATH, data, 1, 10), [(PATH, 1, "_progress"), (PATH, range(2, 10), "_progress"), (PATH, 10, "x")])
    kinds = {line.lineno: line.kinds for line in recent.after(0)}
    assert kinds == {n: frozenset({"_progress"}) for n in range(1, 10)} | {10: frozenset({"x"})}


@pytest.mark.parametrize("native", PATHS)
def test_a_failure_between_redraws_is_counted_and_the_redraws_around_it_handed_on(native: bool) -> None:
    wired = Wired(native)
    lines = [*redraws(400), OOM, *redraws(400, seed=2)[200:]]
    wired.feed(lines)
    assert wired.counter.summaries()["cuda_oom"].count == 1
    assert wired.linenos("cuda_oom") == [401]
    handed = wired.linenos("_progress")
    assert {1, 400, 402, 601} <= set(handed)  # the last redraw before the failure, the first after it
    assert wired.counter.streaks("_progress")[PATH] == 600
    assert wired.training.state().last_step == 399 // 7


@pytest.mark.parametrize("native", PATHS)
def test_an_evaluation_bar_between_training_redraws_is_a_run_of_its_own(native: bool) -> None:
    wired = Wired(native)
    train = [verl_bar(i, 200) for i in range(0, 40)]
    evaluation = [verl_bar(i, 10) for i in range(1, 11)]
    wired.feed(train + evaluation + [verl_bar(40, 200)])
    handed = wired.linenos("_progress")
    assert {40, 41, 50, 51} <= set(handed)  # the training bar's last redraw before the evaluation bar is not lost


@pytest.mark.parametrize("native", PATHS)
def test_a_bar_drawn_again_and_again_is_not_one_run(native: bool) -> None:
    """vLLM's generation bar, or an evaluation bar, starting over with the same total: each drawing is a run of its
    own, so the training tracker still sees it start over (and never takes it for the run's steps)."""
    wired = Wired(native)
    wired.feed([f"{n * 12}%|█   | {n}/8 [00:0{n}<00:01,  6.00it/s]" for _ in range(3) for n in range(1, 9)])
    assert set(wired.linenos("_steplike")) == {1, 8, 9, 16, 17, 24}
    assert wired.counter.streaks("_steplike")[PATH] == 24
    assert wired.training.state() == every_line(wired.feed_lines)  # as if the tracker had read every drawing


@pytest.mark.parametrize("native", PATHS)
def test_the_time_of_the_last_redraw_reaches_the_tracker(native: bool) -> None:
    """Live: the redraws carry a logger's timestamp; the tracker's last step and line are the last redraw's."""
    clock = FakeClock(NOW)
    wired = Wired(native, clock)
    stamps = [f"2026-01-05T08:00:{i // 100:02d}.{i % 100:02d}0Z INFO " for i in range(1000)]
    lines = [stamp + bar for stamp, bar in zip(stamps, redraws(1000, total=1000, every=1), strict=True)]
    data = "".join(line + "\n" for line in lines).encode()
    clock.advance(3600.0)
    wired.counter.feed(Chunk(PATH, data, 1, 1000))
    wired.training.on_any_line(clock.time())
    last = [line for k, line in wired.handed if k == "_progress"][-1]
    assert last.lineno == 1000 and last.text.startswith("2026-01-05T08:00:09.990Z")
    state = wired.training.state()
    assert state.last_step == 999
    assert state.last_step_at == last.time == NOW + 9.99  # 2026-01-05T08:00:00Z is NOW
    assert state.steps_per_hour == pytest.approx(999 * 3600.0 / 9.99)  # from the first redraw to the last
