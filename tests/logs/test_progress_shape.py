"""Progress known by its shape (rlwatch/logs/progress_shape.py): any framework's step line, the step a person names,
and the counters that are not training steps."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LiveRun
from rlwatch.discover.load import resolve_config
from rlwatch.engine.diagnosis.base import Context
from rlwatch.engine.diagnosis.health import assess_run
from rlwatch.engine.engine import Engine
from rlwatch.logs.progress_shape import ShapeSteps, read

STAMP = "2026-11-27 11:29:{s:02d},497"


def _bar(n: int, total: int = 1000) -> str:
    pct = n * 100 // total
    return f"{pct:3d}%|{'█' * (pct // 10):<10}| {n}/{total} [00:{n:02d}<00:10,  1.20it/s]"


# The ten common progress lines of issue 32, each as its framework or loop prints it.
TEN: dict[str, object] = {
    "step N/M": lambda n: f"step {n}/1000 loss 0.0320 tokens/s 51200",
    "logging prefix": lambda n: f"{STAMP.format(s=n)} INFO [rank0] step {n}/1000 loss 0.0320 tokens/s 51200",
    "torchrun rank prefix": lambda n: f"[rank0]: step {n}/1000 loss 0.0320",
    "logging default format": lambda n: f"INFO:train:step {n} loss=0.0320",
    "epoch | iter": lambda n: f"Epoch 0 | Iter {n} | loss 0.0320 | lr 1.0e-04",
    "megatron": lambda n: (
        f" iteration {n:8d}/    1000 | consumed samples: {n * 512:12d} | elapsed time per iteration (ms): 1201.3 |"
        f" learning rate: 1.000E-04 | global batch size:   512 | lm loss: 3.210000E+00 | loss scale: 1.0 |"
    ),
    "torchtitan": lambda n: (
        f"[titan] {STAMP.format(s=n)} - root - INFO - step: {n:2d}  loss:  6.1384  memory: 49.66GiB(52.28%)"
        f"  tps: 5,856  tflops: 339.16  mfu: 34.29%"
    ),
    "json lines": lambda n: json.dumps({"step": n, "loss": 0.032}),
    "bare tqdm bar": _bar,
    "global_step=": lambda n: f"global_step={n} loss=0.0320",
}


@pytest.mark.parametrize("name", list(TEN))
def test_each_common_line_counts_thirty_steps(name: str) -> None:
    steps = ShapeSteps()
    line = TEN[name]
    assert callable(line)
    for n in range(1, 31):
        steps.feed(line(n))
    assert steps.step() == 30, name


@pytest.mark.parametrize("name", list(TEN))
def test_each_common_line_is_progressing_when_live(tmp_path: Path, name: str) -> None:
    """30 lines of each appended to a followed train.log: 30 steps, and with a live writer the run progresses."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_bytes(b"")
    cfg, _ = resolve_config(run, None, "auto")
    now = time.mktime((2026, 11, 27, 11, 29, 35, 0, 0, -1))  # five seconds after the last dated line
    engine = Engine(cfg, run, clock=FakeClock(start=now))
    line = TEN[name]
    assert callable(line)
    try:
        engine.drain_logs()
        with log.open("a") as out:
            out.write("".join(f"{line(n)}\n" for n in range(1, 31)))
        engine.drain_logs()
        snap = engine.build()
    finally:
        engine.stop()
    assert snap.training is not None and snap.training.last_step == 30, (name, snap.training)
    writer = LiveRun(True, None, now - 600, members=((os.getpid(), "writes the run's log"),))
    state = assess_run(replace(snap, live_run=writer), Context(thresholds=cfg.thresholds))
    assert state.state == "progressing", (name, state)
    if "2026-11-27" in line(1):  # lines with their own time: the step's time is the line's, not when it was read
        assert snap.training.last_step_at == pytest.approx(now - 5 + 0.497)
    else:
        assert snap.training.last_step_at == now


def test_the_step_a_person_names_and_the_total() -> None:
    assert read("Epoch 2/10 | step 35/200 | loss 0.1") is not None
    r = read(" iteration      204/  250000 | consumed samples:       208896 | lm loss: 2.425973E+00 |")
    assert r is not None and (r.value, r.total) == (204, 250000)
    # fairseq: the update count, not the batch index of the epoch
    r = read("| epoch 001:    450 / 1891 loss=11.521, num_updates=445, lr=8.9e-05, gnorm=1.543")
    assert r is not None and r.value == 445
    # LLaMA-Factory's JSON lines: the total beside the counter, and `"eval_loss": null` is no evaluation
    r = read('{"current_steps": 43, "total_steps": 82, "loss": 0.66, "eval_loss": null, "predict_loss": null}')
    assert r is not None and (r.value, r.total) == (43, 82)


def test_two_names_of_one_counter_share_its_total() -> None:
    """A record naming its step twice (an iteration with its total, a global step without) has the total whichever
    name is read; a second counter of another value lends it nothing."""
    r = read("Train e 2, iteration 31/400 | lr: 1e-05 | global_step: 31 | loss: 0.52")
    assert r is not None and (r.value, r.total) == (31, 400)
    r = read("global_step=64 | iter 31/400 | loss 0.52")
    assert r is not None and (r.value, r.total) == (64, None)


def test_a_bar_with_a_line_run_onto_it_is_read_alone_and_lends_its_total() -> None:
    """A bar's state whose line break was lost before another writer's line (an evaluation's banner) is still the
    bar: the banner's words make it no evaluation. Drawn once, at the step a named counter stands at, its total is
    the counter's (not where the step is small, where a start-up bar could stand at it by chance)."""
    bar = (
        " 40%|####      | 120/300 [00:41<01:02,  2.9it/s][2026-01-02 10:00:00,000] [INFO] - *** Running Evaluation ***"
    )
    r = read(bar)
    assert r is not None and (r.value, r.total) == (120, 300)
    steps = ShapeSteps()
    for n in range(80, 130, 10):
        steps.feed(f"{{'loss': 0.5, 'global_step': {n}, 'epoch': 1.2}}")
    assert (steps.step(), steps.total()) == (120, None)
    steps.feed(bar)
    assert (steps.step(), steps.total()) == (120, 300)
    early = ShapeSteps()
    for n in range(1, 3):
        early.feed(f"{{'loss': 0.5, 'global_step': {n}}}")
    early.feed("100%|##########| 2/2 [00:01<00:00,  1.9it/s]")
    assert early.total() is None


def test_a_counter_qualified_by_who_counts_it() -> None:
    """Several counters of one name on a record, each qualified by its owner: the learner's are the updates, an
    actor's or evaluator's count environment steps, whichever comes first."""
    r = read("[Actor] Actor Steps = 8800 | Evaluator Steps = 700 | Learner Steps = 12 | Return = 3.0")
    assert r is not None and r.value == 12
    r = read("env steps: 51200 | steps: 25 | return 9.5")
    assert r is not None and r.value == 25
    r = read("Actor Steps = 4000 | Steps = 300 | reward 1.0")
    assert r is not None and r.value == 300


def test_a_batch_index_that_starts_over_each_epoch_is_placed_by_its_epoch() -> None:
    mm = ShapeSteps()  # mmcv / mmengine: epochs from 1
    for e in (1, 2):
        for i in (50, 100):
            mm.feed(f"Epoch(train) [{e}][{i}/100]  lr: 1.000e-02  eta: 0:00:25  loss: 0.5")
    assert mm.step() == 200
    tv = ShapeSteps()  # torchvision's references: epochs from 0
    for e in (0, 1):
        for i in (0, 10, 20):
            tv.feed(f"Epoch: [{e}]  [{i:2d}/31]  eta: 0:00:07  lr: 0.000755  loss: 0.0137 (0.0158)")
    assert tv.step() == 31 + 20
    mx = ShapeSteps()  # MXNet: no total shown, the epochs before count as far as they were seen
    for e in (0, 1):
        for i in (100, 200, 300):
            mx.feed(f"INFO:root:Epoch[{e}] Batch [{i}]  Speed: 14762.29 samples/sec     Train-accuracy=0.95")
    assert mx.step() == 600
    keras = ShapeSteps()  # Keras: the epoch on a line of its own
    for e in (1, 2, 3):
        keras.feed(f"Epoch {e}/10")
        keras.feed("1875/1875 [==============================] - 5s 3ms/step - loss: 0.3 - accuracy: 0.9")
    assert keras.step() == 3 * 1875 and keras.total() == 18750


def test_ranks_printing_the_same_step_are_one_step() -> None:
    steps = ShapeSteps()
    moved = []
    for n in range(1, 6):
        for rank in range(4):
            moved.append(steps.feed(f"[rank{rank}]: {STAMP.format(s=n)} INFO step {n}/100 loss 0.03"))
    assert steps.step() == 5 and sum(moved) == 4  # the first step is seen, then four advances


@pytest.mark.parametrize(
    "lines",
    [
        [f"Retry {n}/5: connection to 10.0.0.2:29500 failed" for n in range(1, 5)],
        [f"Attempt {n} of 10 to reach the store" for n in range(1, 5)],
        [f"Loading checkpoint shards:  {n * 25}%|██  | {n}/4 [00:0{n}<00:03,  1.0s/it]" for n in range(1, 5)],
        [f"Downloading shards: {n * 25}%|██  | {n}/4 [00:0{n}<00:03,  1.0s/it]" for n in range(1, 5)],
        [f"Map (num_proc=8):  {n}0%|██  | {n}000/10000 [00:0{n}<00:03, 1000 examples/s]" for n in range(1, 5)],
        [f"Running tokenizer on dataset: {n}0%|██ | {n}00/1000 [00:0{n}<00:10]" for n in range(1, 5)],
        [f"heartbeat {n}: rank 0 alive" for n in range(1, 5)],
        [f"[W] NCCL warning repeated {n} times: step {n}" for n in range(1, 5)],
        [f"Evaluating: {n * 25}%|██  | {n}/4 [00:0{n}<00:03,  1.0s/it]" for n in range(1, 5)],
        [f"Epoch(val) [1][{n}0/50]  eta: 0:00:05  time: 0.1" for n in range(1, 5)],
        [f"step {n * 250}: train loss 4.2, val loss 4.3" for n in range(1, 5)],
        [f"[2026-11-28T20:0{n}:51] rlwatch-sim start: container boot {n} (hostname vm)" for n in range(1, 5)],
        [f"[launcher] relaunching the trainer ({n}/5)" for n in range(1, 5)],
    ],
    ids=["retry", "attempt", "checkpoint-shards", "download", "dataset-map", "tokenise", "heartbeat", "repeated",
         "eval-bar", "mm-val", "nanogpt-eval", "container-boot", "relaunch"],
)  # fmt: skip
def test_counters_that_are_not_training_steps(lines: list[str]) -> None:
    steps = ShapeSteps()
    for line in lines:
        steps.feed(line)
    assert steps.step() is None, lines


def test_a_bar_that_starts_over_and_over_is_not_the_steps() -> None:
    """vLLM's generation bar or an unlabelled evaluation bar: it starts over with no epoch advancing."""
    steps = ShapeSteps()
    for _ in range(3):
        for n in range(1, 9):
            steps.feed(f"{n * 12}%|█   | {n}/8 [00:0{n}<00:01,  6.00it/s]")
    assert steps.step() is None


# A named i/N beside a bare epoch number: what the lines show decides whether it counts within the epoch.
def _per_epoch_batch(e: int, b: int) -> str:
    return f"epoch {e} batch {b}/20 loss {2 - (e * 20 + b) / 100:.3f}"


def _global_iter(e: int, b: int) -> str:  # PaddleSeg: the iter never starts over while the epoch advances
    return f"[TRAIN] epoch: {e + 1}, iter: {e * 20 + b + 1}/500, loss: 0.5, lr: 0.01"


_BESIDE_EPOCH = {"starts over each epoch": (_per_epoch_batch, 59, None), "never starts over": (_global_iter, 60, 500)}


@pytest.mark.parametrize("name", list(_BESIDE_EPOCH))
def test_an_i_of_n_beside_a_bare_epoch_is_read_by_what_its_lines_show(name: str) -> None:
    line, step, total = _BESIDE_EPOCH[name]
    steps = ShapeSteps()
    for e in range(3):
        for b in range(20):
            steps.feed(line(e, b))
    assert (steps.step(), steps.total()) == (step, total)
    # before the epoch advanced the lines cannot tell the two apart: the counter and its total as shown
    first = ShapeSteps()
    for b in range(20):
        first.feed(line(0, b))
    assert (first.step(), first.total()) == ((19, 20) if total is None else (20, 500))
    # the epochs' total shown: E x N
    shown = ShapeSteps()
    for e in range(3):
        for b in range(20):
            shown.feed(f"epoch {e + 1}/3 batch {b}/20 loss 0.5")
    assert (shown.step(), shown.total()) == (59, 60)


@pytest.mark.parametrize("name", list(_BESIDE_EPOCH))
def test_an_i_of_n_beside_a_bare_epoch_live_and_after_the_fact(tmp_path: Path, name: str) -> None:
    """3 epochs of 20 lines: followed live (appended a few lines at a time) and read after the fact (an hour old, as
    ``rlwatch report`` reads it), the same step; a batch index that starts over is counted within its epoch."""
    line, step, total = _BESIDE_EPOCH[name]
    lines = [f"{line(e, b)}\n" for e in range(3) for b in range(20)]
    live_run = tmp_path / "live"
    live_run.mkdir()
    log = live_run / "train.log"
    log.write_bytes(b"")
    cfg, _ = resolve_config(live_run, None, "auto")
    engine = Engine(cfg, live_run, clock=FakeClock(start=time.time()))
    try:
        engine.drain_logs()
        for at in range(0, len(lines), 3):
            with log.open("a") as out:
                out.write("".join(lines[at : at + 3]))
            engine.drain_logs()
        live = engine.build().training
    finally:
        engine.stop()
    after_run = tmp_path / "after"
    after_run.mkdir()
    (after_run / "train.log").write_text("".join(lines))
    an_hour_ago = time.time() - 3600
    os.utime(after_run / "train.log", (an_hour_ago, an_hour_ago))
    cfg, _ = resolve_config(after_run, None, "auto")
    engine = Engine(cfg, after_run)
    try:
        after = engine.collect_once().training
    finally:
        engine.stop()
    for tr in (live, after):
        assert tr is not None and (tr.last_step, tr.total_steps) == (step, total), (name, tr)
    if total is None:
        assert after is not None and after.step_source == "a `batch` counted within each epoch"


def test_a_run_logging_through_python_logging_is_hung_once_its_steps_stop(tmp_path: Path) -> None:
    """Issue 32's first run: two ranks log `step N/1000` through Python's logging every 1.2 s, then hang, rank 0
    printing a heartbeat every 10 s. The steps' own times give the cadence; the heartbeat is no step; with its
    processes alive the run is hung once the cadence's allowance has passed, and progressing before."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_bytes(b"")
    t0 = time.mktime((2026, 11, 27, 11, 29, 0, 0, 0, -1))

    def stamp(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t % 1 * 1000):03d}"

    lines = []
    for n in range(1, 25):
        t = t0 + n * 1.2
        lines += [f"{stamp(t)} INFO [rank{r}] step {n}/1000 loss 0.0320 tokens/s 51200" for r in (0, 1)]
    last_step = t0 + 24 * 1.2
    beats = [f"{stamp(last_step + 10 * k)} INFO [rank0] heartbeat {k}: waiting" for k in range(1, 37)]
    cfg, _ = resolve_config(run, None, "auto")
    clock = FakeClock(start=last_step + 2)
    engine = Engine(cfg, run, clock=clock)
    writer = LiveRun(True, None, t0 - 30, members=((os.getpid(), "rank 0"),))
    try:
        engine.drain_logs()
        log.write_text("".join(f"{line}\n" for line in lines))
        engine.drain_logs()
        snap = engine.build()
        moving = assess_run(replace(snap, live_run=writer), Context(thresholds=cfg.thresholds))
        clock.advance(360)
        with log.open("a") as out:
            out.write("".join(f"{line}\n" for line in beats))
        engine.drain_logs()
        snap = engine.build()
        stuck = assess_run(replace(snap, live_run=writer), Context(thresholds=cfg.thresholds))
    finally:
        engine.stop()
    assert moving.state == "progressing", moving
    assert snap.training is not None and snap.training.last_step == 24
    assert snap.training.last_step_at == pytest.approx(last_step, abs=0.01)
    assert snap.training.steps_per_hour == pytest.approx(3000, rel=0.01)  # every 1.2 s, from the lines' own times
    assert stuck.state == "hung", stuck


def test_the_cadence_is_the_time_between_records_where_a_record_shows_many_steps(tmp_path: Path) -> None:
    """A run printing one line every 200 iterations, seven minutes apart: 200 steps in 420 s is a step every 2.1 s,
    but the log shows one every 420 s, and that is the quiet the hang rules allow for (5 x 420 s), not the 60 s floor
    that called such a run hung a minute after each of its lines."""
    start = 1_800_000_000.0
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train.log"
    log.write_text(
        "".join(
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(start + 420 * k))} INFO iter {200 * (k + 1)}, "
            f"loss 0.{k}\n"
            for k in range(6)
        )
    )
    last = start + 420 * 5
    engine = Engine(resolve_config(run, None, "auto")[0], run, clock=FakeClock(start=last + 1))
    try:
        engine.drain_logs()
        snap = engine.build()
    finally:
        engine.stop()
    tr = snap.training
    assert tr is not None and tr.last_step == 1200
    assert tr.step_interval_s == pytest.approx(2.1) and tr.cadence_s == pytest.approx(420.0)
    writer = LiveRun(True, None, start - 60, members=((os.getpid(), "writes the run's log"),))
    ctx = Context(thresholds=engine.cfg.thresholds)
    assert assess_run(replace(snap, live_run=writer, time=last + 120), ctx).state == "progressing"
    assert assess_run(replace(snap, live_run=writer, time=last + 5 * 420 + 5), ctx).state == "hung"
