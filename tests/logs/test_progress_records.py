"""Records learned from the run's own lines (rlwatch/logs/progress_shape.py, issue 41): blocks, columns, documents,
counters under any name, a counter that starts over each epoch, totals stated beside a counter or on a line of their
own. Every text here is written for the test, in the shape the issue names; none is a framework's verbatim output."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LogLine
from rlwatch.logs.newlines import count_lines
from rlwatch.logs.progress_shape import ShapeSteps, fields, read
from rlwatch.logs.tailer import Chunk
from rlwatch.logs.training import TrainingTracker


def _read(lines: list[str]) -> ShapeSteps:
    steps = ShapeSteps()
    for line in lines:
        steps.feed(line)
    return steps


def _kv_table(n: int) -> list[str]:
    """A key/value table printed every iteration, as stable-baselines' logger prints one: a section row, indented
    keys, the iteration's row among rates, means and a count of environment steps; the updates row appears from the
    second table on."""
    rows = [
        "| stats/               |            |",
        f"|    reward_mean       | {-40 + n:<10d} |",
        f"|    steps_per_second  | {900 + 7 * n % 50:<10d} |",
        f"|    iterations        | {n:<10d} |",
        f"|    env_timesteps     | {4096 * n:<10d} |",
    ]
    if n > 1:
        rows.append(f"|    n_updates         | {10 * (n - 1):<10d} |")
    rule = "-" * len(rows[0])
    return [rule, *rows, rule]


def test_a_key_value_table_printed_every_iteration_is_one_record_per_table() -> None:
    steps = _read([line for n in range(1, 6) for line in _kv_table(n)])
    # the iteration row: a step's name over the environment steps, and an iteration over the updates that moved
    # alike from the third table on
    assert (steps.step(), steps.source()) == (5, "iterations")


def test_a_key_value_row_names_its_number_by_its_key() -> None:
    assert fields("|    iterations        | 12         |") == [("iterations", 12, None)]
    assert fields("|    reward_mean       | -3         |") == []
    assert fields("|    approx_kl         | 0.0071     |") == []


def test_a_counter_that_starts_over_each_epoch_counts_on_across_epochs() -> None:
    """`epoch,minibatch,loss`: the minibatch index starts over when the epoch advances, and no total is shown: the
    steps of the epochs before are added (what the epoch's last record reached)."""
    rows = ["epoch,minibatch,loss"] + [
        f"{e},{b},{1.0 - 0.01 * (e * 4 + b):.3f}" for e in (1, 2, 3) for b in range(1, 5)
    ]
    steps = _read(rows)
    assert steps.step() == 12
    assert steps.total() is None


def test_in_a_log_that_begins_after_the_first_epoch_a_restarting_counter_without_total_is_at_its_epoch() -> None:
    """The same shape read from the middle of a run (epoch 40 on): the counts of the 39 epochs before are not in the
    lines, so adding the ones seen would name neither the epoch nor the run's batch count; the epoch is the step, and
    the epochs' total where shown."""
    lines = [f"Epoch {e}/90 batch {b} loss {1.0 / b:.3f}" for e in (40, 41, 42) for b in (100, 200, 300)]
    steps = _read(lines)
    assert (steps.step(), steps.total()) == (42, 90)
    assert steps.source() == "the epoch (its `batch` starts over each epoch, the epochs before not in the log)"
    bare = _read([f"ep {e} | it {b} | loss 0.5" for e in (7, 8) for b in (50, 100, 150)])
    assert bare.step() == 8
    # a log that begins in an epoch's tail, before the next epoch's header
    tail = [f"batch {b} loss 0.5" for b in (400, 450, 500)]
    header = _read([*tail, "Epoch:  7", *[f"batch {b} loss 0.5" for b in (0, 50, 100)]])
    assert header.step() == 7


def test_a_plural_count_stated_before_the_first_record_is_the_total() -> None:
    """`Starting run, steps: 800` before any record states how many there will be; a record's field among other
    numbers (`Actor Steps = 5230 | Episodes = 6`) is no statement, nor is a plural count once records have begun."""
    steps = _read(["Starting run, steps: 800", *[f"Step {n}: loss 0.{n}" for n in (10, 20, 30)]])
    assert (steps.step(), steps.total()) == (30, 800)
    steps = _read([f"Actor Steps = {5000 + n} | Episodes = {n} | Step {n}" for n in (1, 2, 3)])
    assert steps.total() is None
    steps = _read([*[f"Step {n}: loss 0.{n}" for n in (10, 20, 30)], "checkpoint, steps: 800"])
    assert steps.total() is None


def test_an_inner_counter_beside_an_outer_one_with_totals_is_outer_times_inner() -> None:
    """`[stage 2/8] block 30/40`: both shown with totals, the inner one counts within the outer from its first record:
    (outer - 1) x inner total + inner, of outer total x inner total."""
    lines = [f"[stage {r}/8] block {p}/40 cost {3.0 / (r + p):.4f}" for r in (1, 2) for p in (10, 20, 30, 40)]
    steps = _read(lines[:3])
    assert (steps.step(), steps.total()) == (30, 320)
    steps = _read([*lines, "[stage 3/8] block 10/40 cost 0.2000"])
    assert (steps.step(), steps.total()) == (90, 320)
    assert steps.source() == "a `block` counted within each epoch"


def test_an_unnamed_outer_counter_that_advances_as_the_inner_one_starts_over() -> None:
    lines = [f"ph {p} | it {i} | cost {1.0 / (p * i):.4f}" for p in (1, 2) for i in (50, 100, 150)]
    assert _read(lines).step() == 300


def test_a_counter_shown_of_its_total() -> None:
    lines = [f"Generation {g} of 250 evaluated in 3.1s" for g in range(1, 5)]
    steps = _read(lines)
    assert (steps.step(), steps.total()) == (4, 250)


def test_a_total_stated_on_a_line_of_its_own() -> None:
    """A banner states the total steps once; the records after it carry the step alone."""
    lines = [
        "== run: 3 epochs, 120 batches each ==",
        "   Total optimization steps = 360",
        *(f"record: {{'loss': {0.9 - s / 1000:.4f}, 'step': {s}}}" for s in (10, 20, 30)),
    ]
    steps = _read(lines)
    assert (steps.step(), steps.total()) == (30, 360)


def test_a_stated_total_is_no_step_and_names_no_counter_of_another_kind() -> None:
    steps = _read(["max_steps: 5000", "max_steps: 5000", *(f"gen {g} | fitness {g * 1.5:.1f}" for g in (1, 2, 3))])
    # the statement repeated is not a counter; `gen` is no step's name, so the stated total is not its total
    assert (steps.step(), steps.total(), steps.source()) == (3, None, "gen")


_FORMATS: dict[str, tuple[Callable[[int], str], str, int, str]] = {
    # name: (the record for counter n, the lines before the first record, the step after n = 1..6, its source)
    "yaml documents": (
        lambda n: f"---\ncycle: {n}\nmean_return: {n * 1.5:.2f}\nenv_frames: {n * 25600}",
        "",
        6,
        "cycle",
    ),
    "header then fields": (
        lambda n: f"*** sweep {n} ***\n  actor_loss {1 / n:.4f}\n  critic_loss {2 / n:.4f}",
        "",
        6,
        "sweep",
    ),
    "tsv with a header": (lambda n: f"{n * 3.5:.1f}\t{n}\t{n * 512}\t{-n:.2f}", "clock\tpass\tframes\tret", 6, "pass"),
    "json with an unknown key": (
        lambda n: f'{{"mode": "learn", "n_pass": {n * 5}, "agent_steps": {n * 8192}, "pg": 0.{n}}}',
        "",
        30,
        "n_pass",
    ),
    "dict with an unknown key": (
        lambda n: f"{{'wave': {n}, 'episodes': {n * 40}, 'gain': {n / 7:.3f}}}",
        "",
        6,
        "wave",
    ),
    "a float counter": (lambda n: f"samples {n / 10:.1f}e+06 | gain {n * 0.3:.2f}", "", 600000, "samples"),
}


@pytest.mark.parametrize("name", list(_FORMATS))
def test_records_of_every_shape(name: str) -> None:
    record, head, step, source = _FORMATS[name]
    lines = [line for line in head.splitlines()]
    for n in range(1, 7):
        lines.extend(record(n).splitlines())
    steps = _read(lines)
    assert (steps.step(), steps.source()) == (step, source), name


def test_a_date_is_no_fraction_and_no_counter() -> None:
    assert fields("saved 2024/05/17 run") == []
    assert fields("mb 100/300 loss 0.5") == [("mb", 100, 300)]


def test_the_environment_steps_over_the_episodes() -> None:
    """Two counts of what steps are made of, both advancing on every row: the environment's steps (what a run's length
    is set in) are the step, not the episodes (their length varies)."""
    rows = ["episodes,pi_loss,frames seen,clock"] + [
        f"{4 * r + r % 3},-0.0{r},{r * 1024},{r * 0.9:.2f}" for r in range(1, 9)
    ]
    steps = _read(rows)
    assert (steps.step(), steps.source()) == (8192, "frames seen")


def test_a_count_per_episode_that_goes_up_and_down_is_not_counted_within_the_episode() -> None:
    """`Round: N, moves: M`: M is each round's own count (up, down, up), not an index that starts over each round:
    never summed into a step; the round is."""
    moves = [310, 290, 305, 280, 330, 300, 315, 270, 320]
    steps = _read([f"Round: {r}, moves: {m}, score: {m % 7 - 3}" for r, m in enumerate(moves, start=1)])
    assert (steps.step(), steps.source()) == (9, "Round")


def test_an_epoch_beside_a_counter_moving_one_stride_per_record_is_the_iteration() -> None:
    """`epoch N done | global_step M` where M moves by the same 8192 on every record while N moves by one, and the
    run stated 16 environments of 512 steps each: M counts what each iteration is made of, and the iteration,
    however named (an "epoch" here), is the step, from the third record on; its lines between (a rate, an
    evaluation) change nothing."""
    lines: list[str] = ["config: num_envs=16 rollout_steps=512 lr=0.0003"]
    for n in range(4, 12):
        lines += [f"epoch {n} done | global_step {(n - 4) * 8192} | kl 0.01{n}", f"rate: {700 + n} per second"]
    steps = ShapeSteps()
    seen = [(steps.feed(line), steps.step()) for line in lines]
    assert seen[5] == (True, 6)  # the third record: read as the iteration at once
    assert (steps.step(), steps.source(), steps.total()) == (11, "epoch", None)


def test_a_counter_of_its_own_beside_the_epoch_stays_the_step() -> None:
    """A step counter beside the epoch that moves by varying amounts (epochs of different lengths), or that starts
    over in each epoch, is the step as before: only one same stride on every record makes it a count of parts."""
    varying = [f"epoch {e} step {s} loss 0.{e}" for e, s in enumerate((120, 250, 370, 500, 640), start=1)]
    assert _read(varying).step() == 640
    within = [f"epoch {e} step {s} loss 0.{s}" for e in range(3) for s in (100, 200, 300)]
    assert _read(within).step() == 900  # the epochs before added: 2 x 300 + 300


def test_a_header_at_the_top_of_a_file_names_the_columns_of_its_last_rows() -> None:
    """Read after the fact, a TSV's last rows are its records and its header is far above them, with no step-like word
    in it: the header still names the columns (the first, seconds elapsed, is no counter; the updates are the step),
    and the report says which column it read."""
    text = "elapsed_s\tupd\tret\n" + "".join(f"{r * 7 + r % 3}\t{r * 4}\t0.{(r * 37) % 11}\n" for r in range(1, 200))
    data = text.encode()
    tracker = TrainingTracker(FakeClock(1.8e9), stall_s=600.0, weight_update_timeout_s=120.0)
    tracker.on_chunk(Chunk("/run/progress.tsv", data, 1, count_lines(data), backlog_mtime=1.8e9 - 3600), 1.8e9)
    state = tracker.state()
    assert (state.last_step, state.step_source) == (199 * 4, "`upd`")


def test_a_key_after_a_number_with_its_own_value_does_not_name_it() -> None:
    """`[E2]  300 loss 0.41`: `loss` names the 0.41 after it, not the 300 before it (a noun with no number of its own
    after it still does: `0021028 updates`); the unnamed counter starts over in each epoch and is counted within it."""
    assert fields("[E2]  300 loss 0.41") == [("E", 2, None), ("", 300, None)]
    assert fields("0021028 updates | lr 0.5") == [("updates", 21028, None)]
    steps = _read([f"[E{e}]  {i:4d} loss 0.{i}" for e in range(1, 4) for i in range(100, 1001, 100)])
    assert (steps.step(), steps.source()) == (3000, "an unnamed counter")


def test_a_percentage_is_never_the_step() -> None:
    """`steps:  95%|███| 1900/2000`: the name `steps` stands before the bar's percentage, not its counter; the bar's
    1900 of 2000 is the step."""
    steps = _read(
        [f"steps:  {p}%|{'#' * (p // 10)}| {20 * p}/2000 [00:{p:02d}<00:05,  3.10it/s]" for p in range(80, 96)]
    )
    assert (steps.step(), steps.total()) == (1900, 2000)


def test_an_i_of_n_beside_an_epoch_that_goes_on_as_the_epoch_advances_is_the_runs_count() -> None:
    """`epoch 2/4 step 130/400`: an i/N beside an epoch shown with its total is taken to count within the epoch
    (as a bar that starts over does), until the epoch advances and it does not start over: then it is the run's own
    count, read as it is, and its N the run's total."""
    lines = [f"epoch {e}/4 step {s}/400 lr 3e-4" for e in (1, 2, 3) for s in range(100 * e - 80, 100 * e + 1, 20)]
    steps = _read(lines)
    assert (steps.step(), steps.total(), steps.source()) == (300, 400, "step")
    within = _read([f"epoch {e}/4 step {s}/100 lr 3e-4" for e in (1, 2, 3) for s in range(20, 101, 20)])
    assert (within.step(), within.total(), within.source()) == (300, 400, "a `step` counted within each epoch")


def test_a_named_counter_with_its_thousands_grouped() -> None:
    """`Step 10,850 | …`: the step is 10850, not 10; a total grouped alike is read alike."""
    steps = _read([f"Step {n:,}/{120_000:,} | loss 0.{n % 97}" for n in range(9_800, 10_900, 50)])
    assert (steps.step(), steps.total()) == (10_850, 120_000)


def test_a_step_beside_an_epoch_is_never_demoted_by_its_stride_alone() -> None:
    """`Epoch 3 finished, step 1500`: a step counter moving by one same 500 per epoch (epochs of one length) is the
    step, where no size of a rollout stated says its steps are the environment's; and a stated size the stride is
    not (`num_envs=8`, no multiple of which per rollout was stated) changes nothing."""
    lines = [f"Epoch {e} finished, step {e * 500}, loss 0.{9 - e}" for e in range(1, 8)]
    steps = _read(lines)
    assert (steps.step(), steps.source()) == (3500, "step")
    steps = _read(["settings: num_envs=8 seed=3", *lines])
    assert (steps.step(), steps.source()) == (3500, "step")


def test_an_update_counter_beside_an_environment_step_counter_is_the_step() -> None:
    """A PPO loop stating `300 updates of 1024 steps`, printing a line per episode (`episode N | step S`, its step
    the environment's, moving by the episode's length) and a line per update (`update k/300 | step S`, S moving by
    1024): the update counter is the step, and the episodes' `step` is no longer it either, though it moved further
    on more lines."""
    lines = ["Training for 300 updates of 1024 steps"]
    env = 0
    for k in range(1, 7):
        for length in (190, 260, 330):
            env += length
            lines.append(f"episode {len(lines)} | step {min(env, k * 1024 - 1)} | return {length / 10:.1f}")
        lines.append(f"update {k}/300 | step {k * 1024} | value_loss 0.{k}1 | entropy 1.2")
    steps = _read(lines)
    assert (steps.step(), steps.total(), steps.source()) == (6, 300, "update")


def test_a_rollout_size_stated_after_the_records_is_applied_to_them() -> None:
    """A settings line read after the records (the file's first lines, read after the fact when the records came
    through first): the records' epoch-beside-global-step stride, 6400 = 32 environments x 200 steps, now shows
    environment steps, and the epoch is the step from that line on (it says so by moving the step)."""
    steps = _read([f"[Epoch {e}] global_step={(e - 1) * 6400} reward=0.{e}" for e in range(1, 6)])
    assert steps.step() == 25600
    assert steps.feed("run: num_envs=32 num_steps=200 gamma=0.99")
    assert (steps.step(), steps.source()) == (5, "Epoch")


def test_fields_keep_their_place_when_a_field_before_them_is_sometimes_whole() -> None:
    """`Episode N  avg score: 0  Frames: F` then `avg score: 0.65`: the score is a whole number on one record and a
    decimal on the others; the counters after it are the same series on every record (the frames, moving on as many
    records as the episodes, are the environment's steps and read over the episodes)."""
    lines = [f"Episode {r} avg score: {'0' if r == 0 else f'0.{r}5'} Frames: {r * 1000 + 37}" for r in range(0, 60, 6)]
    steps = _read(lines)
    assert (steps.step(), steps.source()) == (54037, "Frames")


def _bar(i: int, n: int) -> str:
    return f" {100 * i // n:3d}%|#         | {i}/{n} [00:{i:02d}<01:00,  1.50s/it]"


def test_several_states_of_one_bar_on_one_line_read_the_last() -> None:
    """A bar's redraws joined on one line (their CRs lost), a dict after them: the last state with the first's total
    is where it stands; a state of another bar (another total) drawn after it is not."""
    dict_line = "   {'loss': 0.52, 'lr': 1e-05}"
    lines = ["".join(_bar(i, 900) for i in range(a, a + 10)) + dict_line for a in (1, 11)]
    steps = _read(lines)
    assert (steps.step(), steps.total()) == (20, 900)
    r = read("".join(_bar(i, 900) for i in range(11, 21)) + _bar(3, 40))
    assert r is not None and (r.value, r.total) == (20, 900)


def _block(i: int, n: int) -> list[str]:
    """One iteration's record spread over a block: a rule, a centred header with the iteration of its total, then
    right-aligned `name: value` rows (a count of environment steps among them)."""
    return [
        "=" * 60,
        f"{'Training update ' + str(i) + '/' + str(n):^60}",
        "",
        f"{'Env frames:':>30} {4096 * (i + 1)}",
        f"{'Policy loss:':>30} -0.0{i + 3}",
        f"{'Mean return:':>30} {-12.5 + i:.2f}",
        f"{'Update time:':>30} 0.{i + 1}4s",
    ]


def test_a_block_header_is_the_step_from_its_first_block() -> None:
    """A record spread over a block of lines is printed once per iteration: the first block's header is already the
    run's step (a record on one line must recur first), and the next header moves it on."""
    steps = ShapeSteps()
    moved = [steps.feed(line) for line in _block(0, 25)]
    assert moved[1] and (steps.step(), steps.total()) == (0, 25)
    for line in _block(1, 25)[:3]:
        steps.feed(line)
    assert (steps.step(), steps.total()) == (1, 25)
    aside = ShapeSteps()
    assert aside.feed("   Iteration 3/40   (overall 57)")
    assert (aside.step(), aside.total()) == (3, 40)


@pytest.mark.parametrize(
    "line",
    [
        "step 1/3: building the image",  # a step of a procedure, its words after it
        "iteration 2/5 loss=0.41 lr=3e-4",  # a record on one line: it must recur first
        "Update 1/2 applied to the config",
    ],
)
def test_a_step_counter_with_words_or_fields_after_it_is_no_block_header(line: str) -> None:
    steps = ShapeSteps()
    assert not steps.feed(line)
    assert steps.step() is None


def test_a_counter_by_one_beside_one_moving_by_its_items_on_another_line_is_the_step() -> None:
    """A record of two lines: `Optimizer Step: N | …` moving by one, then `… -- seen: 00320/60000` (the samples of
    the epoch's batches so far) moving by the batch's 32 on the same records. The counter by one is the step; the
    other counts what each step is made of, even where a record's second line is skipped (an evaluation's)."""
    lines: list[str] = []
    for n in range(20, 27):
        lines.append(f"Optimizer Step: {n}  | total loss: 1.{90 - n} | time: 0.2{n % 10}s")
        if n != 23:
            lines.append(f"| SGD | epoch: 002 | loss: 1.{90 - n} -- iter: {32 * n:05d}/60000")
    steps = _read(lines)
    assert (steps.step(), steps.source()) == (26, "step")


def test_a_counter_moving_by_a_stride_alone_stays_the_step() -> None:
    """A step counter logged every 50 steps is the step with no counter by one beside it; beside a counter by one
    that moved less often (a target network's updates, every 200 steps), it still is."""
    assert _read([f"step {50 * n} | loss 0.{n}" for n in range(1, 9)]).step() == 400
    lines = []
    for n in range(1, 13):
        lines.append(f"step {50 * n} | loss 0.{n}")
        if n % 4 == 0:
            lines.append(f"target update {n // 4} done")
    assert _read(lines).step() == 600


def test_a_bare_epoch_from_the_middle_of_a_run_counts_from_one() -> None:
    """`Epoch 8, step/steps_in_epoch: 20/40 …` read from the middle of a run (its first epoch not in the log): a person
    counts epochs from 1, so epoch 8 has seven epochs of 40 before it; a run whose lines show an epoch 0 counts them
    from 0. Whether the counter is one a reader knows or a learned field, the same."""
    learned = [
        f"Epoch {e}, step/steps_in_epoch: {i}/40 {100 * i / 40:.2f}% Loss:1.{i:02d}"
        for e in (7, 8)
        for i in (10, 20, 30, 40)
    ]
    assert _read(learned[:-2]).step() == 7 * 40 + 20
    named = [f"Epoch {e} | iter {i}/40 | loss 0.{i}" for e in (7, 8) for i in (10, 20, 30, 40)]
    assert _read(named[:-2]).step() == 7 * 40 + 20
    from_zero = [f"Epoch {e}, step/steps_in_epoch: {i}/40 Loss:1.{i:02d}" for e in (0, 1) for i in (10, 20, 30, 40)]
    assert _read(from_zero[:-2]).step() == 40 + 20


def _epochs_stating_their_length(
    epochs: range, length: int, last: int, stated: Callable[[int], int] | None = None
) -> list[str]:
    """A loop whose records count batches within each epoch with no total, every 50, and whose summary line at each
    epoch's end states the epoch's length beside an evaluation's loss (``stated``: the count it states for epoch e
    instead); the last epoch in progress at ``last``."""
    lines: list[str] = []
    for e in epochs:
        stop = last if e == epochs[-1] else length
        lines += [f"  batches: {b}, epoch: {e} | loss: 0.{b:04d}" for b in range(50, stop + 1, 50)]
        if e != epochs[-1]:
            lines.append(f"Epoch: {e}, Batches: {stated(e) if stated else length} | Train Loss: 0.21 Eval Loss: 0.25")
    return lines


def test_an_epochs_stated_length_places_a_counter_that_starts_over_each_epoch() -> None:
    """The records' counter starts over each epoch and shows no total; each epoch's summary states its length (the
    same 230 in two epochs): the step is the epochs before (from 1) times 230 plus the counter, from a log that begins
    mid-run, and the report says so."""
    steps = _read(_epochs_stating_their_length(range(12, 15), 230, 150))
    assert steps.step() == 13 * 230 + 150
    assert steps.source() == "a `batch` counted within each epoch of 230 steps, as the run stated them"
    assert (
        _read(["steps per epoch: 230", *_epochs_stating_their_length(range(12, 14), 999, 150)]).step() == 12 * 230 + 150
    )


def test_a_count_beside_the_epoch_that_varies_is_no_epochs_length() -> None:
    """A count beside the epoch that grows (the run's own steps on each epoch's line) states no epoch's length: the
    step is read as before (the epoch, where the records' counter starts over with no total)."""
    grown = _epochs_stating_their_length(range(12, 15), 230, 150, stated=lambda e: 230 * e)
    assert _read(grown).step() == 14


def test_an_epochs_length_learned_late_starts_the_rate_afresh() -> None:
    """Until two epochs stated their length the step is the epoch; from then on it is the batches. The rate is read
    in one scale only: 50 batches every 10 s is 18,000 an hour, not the jump from epoch 13 to batch 3,040."""
    tracker = TrainingTracker(FakeClock(1.8e9), stall_s=600.0, weight_update_timeout_s=120.0)
    lines = _epochs_stating_their_length(range(12, 15), 230, 200)
    for n, text in enumerate(lines, start=1):
        tracker.on_line(LogLine("/run/train.log", n, text, 1.8e9 + 10.0 * n))
    state = tracker.state(1.8e9 + 10.0 * len(lines))
    assert state.last_step == 13 * 230 + 200
    assert state.steps_per_hour is not None and 0.8 * 18000 <= state.steps_per_hour <= 1.2 * 18000, state


def _pairs(epochs: range, last: int) -> list[str]:
    """A trainer's `TRAIN Iter e/i …` lines every 25 batches: the epoch before the slash, the batch within it after
    (not `i of N`: the number after the slash moves, the one before stays); the last epoch in progress at ``last``."""
    return [
        f"12:0{e % 10}:{i % 60:02d} DEBUG TRAIN Iter {e}/{i} ctc 3{i % 7}.25 att 2{i % 5}.5"
        for e in epochs
        for i in range(0, (last if e == epochs[-1] else 100) + 1, 25)
    ]


def test_an_e_slash_i_whose_first_number_stays_is_an_epoch_and_its_batch() -> None:
    """From the middle of a run (epoch 41, its first batch on), the pair's inner counter has no total and counts
    within the epoch: the epoch is the step; with every epoch from the first, the batches seen are added."""
    steps = _read(["12:00:00 INFO Epoch 41 TRAIN info lr 1e-05", *_pairs(range(41, 42), 150)])
    assert (steps.step(), steps.total()) == (41, None)
    assert steps.source() == "the epoch (its `iter` counts within each epoch, the epochs before not in the log)"
    assert _read(_pairs(range(1, 3), 50)).step() == 100 + 50


def test_an_i_of_n_whose_total_stays_is_no_pair() -> None:
    """`iter i/N` with N the same on every record (and a copy of one record) is the run's own count of its total."""
    lines = [f"iter {i}/500 loss 0.{i}" for i in range(10, 60, 10)]
    steps = _read([*lines, lines[-1]])
    assert (steps.step(), steps.total()) == (50, 500)
