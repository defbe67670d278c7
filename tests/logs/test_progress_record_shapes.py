"""Shapes of step records that the progress reader (rlwatch/logs/progress_shape.py) must read as a person does: a
counter whose thousands are grouped and which a comma separates from the next field, a source file's location that
is never a counter, a record whose first print lacks the tail its later prints carry, and an accumulated iteration
beside a batch counted within its epoch. Every line here is written for the test in the shape named; none is a
framework's verbatim output."""

from __future__ import annotations

from rlwatch.logs.progress_shape import ShapeSteps, read


def _read(lines: list[str]) -> ShapeSteps:
    steps = ShapeSteps()
    for line in lines:
        steps.feed(line)
    return steps


# -- a counter with its thousands grouped, then a comma and the next field ------------------------------------------


def test_a_grouped_counter_ends_at_a_comma_that_no_digit_follows() -> None:
    """`iteration: 12,400, lr: …`: the comma after the last group separates the next field, it does not end the
    number at its first group (12)."""
    for line, value in (
        ("[train] ep 4, iteration: 12,400, lr: 1.0e-04, loss 0.52", 12400),
        ("step 1,024,000, tokens/s 5120", 1024000),
        ("{ep: 2, step: 3,100,} loss=0.4", 3100),
        ("step 7,500> loss 0.9", 7500),
    ):
        r = read(line)
        assert r is not None and r.value == value, (line, r)


def test_digits_and_commas_that_are_no_grouped_number_are_read_as_before() -> None:
    """A comma followed by fewer or more than three digits groups nothing: `step 12,34` is step 12."""
    for line, value in (("step 12,34 loss 0.5", 12), ("step 5,1234 loss 0.5", 5), ("iteration 3, loss 0.5", 3)):
        r = read(line)
        assert r is not None and r.value == value, (line, r)


def test_a_grouped_iteration_beside_an_epoch_is_the_global_iteration() -> None:
    """The iteration runs on across the epoch's advance (12,400 → 12,600 as epoch 4 → 5): it is the run's own count,
    not a counter that starts over each epoch (its first group, 12, would look like one)."""
    lines = [
        f"<ep: {e}, iteration: {i:,}, lr: 1.0e-04> loss: 0.{i % 97:02d}"
        for e, i in ((4, 12000), (4, 12200), (4, 12400), (5, 12600), (5, 12800))
    ]
    steps = _read(lines)
    assert (steps.step(), steps.source()) == (12800, "iter")


# -- a place in a source file is never a counter --------------------------------------------------------------------


def _glog(line_no: int, message: str) -> str:
    return f"I0312 10:01:{line_no % 60:02d}.123456  4411 bfc_allocator.cc:{line_no}] {message}"


def test_the_line_number_of_a_source_location_is_no_counter() -> None:
    """glog's `file.cc:LINE]` and Python logging's `[file.py:LINE]` name the line of the code that logged: it moves
    from one message to the next (up, as the code runs on), and is never the run's step."""
    lines = [_glog(n, "Allocating a chunk of memory") for n in (120, 245, 388, 1003)]
    lines += [
        f"[2024-03-12 10:02:0{i},5][trainer.py:{n}] starting the data loader" for i, n in enumerate((40, 88, 131))
    ]
    steps = _read(lines)
    assert steps.step() is None, steps.source()


def test_a_counter_beside_a_source_location_is_still_read() -> None:
    """The location's line number is no field; the record's own counter beside it is."""
    lines = [f"[2024-03-12 10:02:{r:02d},5][worker.py:{88 + 3 * (r % 2)}] round {r} loss 0.{r}5" for r in range(1, 6)]
    steps = _read(lines)
    assert (steps.step(), steps.source()) == (5, "round")


# -- a record whose first print lacks the tail its later prints carry ----------------------------------------------


def test_a_record_whose_later_prints_add_the_time_since_the_one_before_is_one_record() -> None:
    """A logging hook prints `step = N` every N steps and, from its second print on, the time since the print before
    (the first has none before it to time): the first print's template begins the later ones'; they are one record,
    and the step moves from the first print to the second."""
    lines = ["INFO:hook:step = 0, loss = 2.31"] + [
        f"INFO:hook:step = {n}, loss = {2.31 - n / 1000:.2f} (elapsed 3.{n % 7} sec)" for n in (50, 100)
    ]
    steps = _read(lines[:2])
    assert (steps.step(), steps.source()) == (50, "step")
    assert _read(lines).step() == 100


def test_a_record_cut_short_is_still_its_record() -> None:
    """The other way round: the last line of a pasted log, cut before its tail, is the known record it begins."""
    lines = [f"INFO:hook:step = {n}, loss = 1.{n % 9} (elapsed 3.{n % 7} sec)" for n in (50, 100)]
    lines.append("INFO:hook:step = 150, loss = 1.1")
    assert _read(lines).step() == 150


# -- an accumulated iteration beside a batch counted within its epoch ----------------------------------------------


def _timm_style(epoch: int, batch: int, per_epoch: int = 200, epochs: int = 10) -> str:
    """A record in the shape of a timm-style train loop's: the epoch of all, the batch (from 0) of the epoch's, each
    with its percentage, and the iterations accumulated over the epochs (from 1)."""
    done = (epoch - 1) * per_epoch + batch + 1
    return (
        f"2024-05-01 10:{batch % 60:02d}:00,100   INFO  Train: {epoch:>4d}/{epochs} ({100 * epoch // epochs:>3d}%) "
        f"[{batch:>4d}/{per_epoch} ({100 * batch // per_epoch:>3d}%)]  Loss: 1.{batch % 10} (1.5)  LR: 1.0e-04  "
        f"Acc_iter {done:<10d} Data time: 0.01(0.02)"
    )


def test_an_accumulated_iteration_is_the_step_beside_the_batch_within_its_epoch() -> None:
    """`Acc_iter N` counts the run's iterations (from 1) across its epochs; the bracketed `[ i/N]` beside it is the
    batch within the epoch (from 0). The accumulated count is the step, as a global step is, and not the bar."""
    steps = _read([_timm_style(1, b) for b in (0, 49, 99, 149)])
    assert (steps.step(), steps.source()) == (150, "Acc_iter")
    steps = _read([_timm_style(e, b) for e in (2, 3) for b in (0, 100, 199)])
    assert steps.step() == 3 * 200


def test_an_accumulated_iteration_outranks_an_iteration_within_the_epoch() -> None:
    lines = [f"epoch {e} iter {i}/50 accumulated_iter: {(e - 1) * 50 + i} loss 0.{i}" for e in (1, 2) for i in (10, 40)]
    assert _read(lines).step() == 90


def test_a_setting_named_for_accumulation_is_no_accumulated_iteration() -> None:
    """`grad_accum_iter=4` (micro-batches per optimizer step) is a setting, not the tail of a count: the record's own
    step is read."""
    r = read("step 120 loss 0.31 grad_accum_iter=4")
    assert r is not None and (r.name, r.value) == ("step", 120)


# -- records that need a second print before any counter is seen moving -------------------------------------------


def _updates(n: int) -> list[str]:
    """An update loop's record: the updates, the environment steps they took (a rollout of 2048 per update), a speed,
    then a line of episode statistics."""
    return [
        f"Updates {n}, num timesteps {(n + 1) * 2048}, FPS {830 + n % 9}",
        f" Last 10 training episodes: mean/median reward {400 + n}.6/{410 + n}.7, min/max reward 396.3/426.4",
    ]


def _result_block(n: int, status: bool) -> list[str]:
    """A YAML result block per training iteration, its counters among many keys, optionally followed by a status
    table whose trial row repeats the iteration and the environment steps (`7 iter, 7000 ts`)."""
    block = [
        "Result for PPO_CartPole_0:",
        f"  episode_reward_mean: {-900 + n}.5",
        f"  timesteps_this_iter: 1000\n  timesteps_total: {1000 * n}",
        f"  training_iteration: {n}",
        "",
    ]
    if status:
        block += [
            "== Status ==",
            "RUNNING trials:",
            f" - PPO_CartPole_0:\tRUNNING [pid=31], {40 * n} s, {n} iter, {1000 * n} ts",
        ]
    return [line for text in block for line in text.split("\n")]


def test_an_update_counter_beside_its_environment_steps_is_the_step_once_it_moved() -> None:
    """`Updates N, num timesteps M`: the updates, not the environment steps they are made of. One record shows no
    counter moving: no step is read from it (nor any progress claimed) until the next."""
    assert _read(_updates(48)).step() is None
    steps = _read([line for n in (48, 49, 50) for line in _updates(n)])
    assert (steps.step(), steps.source()) == (50, "update")


def test_a_yaml_result_block_per_iteration_is_read_by_its_training_iteration() -> None:
    """A result block per iteration: `training_iteration` is the step (a step's name), over `timesteps_total`; with
    the status table after each block, its `N iter` is the same count. One block alone moves nothing."""
    for status in (False, True):
        assert _read(_result_block(7, status)).step() is None
        steps = _read([line for n in (5, 6, 7) for line in _result_block(n, status)])
        assert steps.step() == 7, (status, steps.source())
        assert steps.source() in ("training_iteration", "iter"), steps.source()


def test_the_exponent_of_a_negative_number_in_scientific_notation_is_no_field() -> None:
    from rlwatch.logs.progress_shape import fields

    # ``-1.07e+03``: the mantissa is a negative decimal and the exponent belongs to it; neither is a whole number.
    assert fields("update 12, rew -1.07e+03, len 200") == [("update", 12, None), ("len", 200, None)]
    # a positive one is a whole number, as a frame counter printed ``1.2e+06`` is
    assert fields("step 7 frames 1.5e+03") == [("step", 7, None), ("frames", 1500, None)]
