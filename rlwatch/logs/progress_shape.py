"""Training progress known by its shape, in whatever framework prints it.

The catalogue (``rlwatch.logs.training``) reads the step lines of the frameworks it was taught; every other loop
still prints *something* once per step: a record that recurs with one template and carries a counter that advances
(``iter 100: loss 4.2``, `` iteration  100/ 1000 | …``, ``Epoch(train) [1][ 50/500] …``, ``{"step": 100, …}``,
a tqdm or Keras bar). This module reads one such line (:func:`read`) and follows the counters over the lines
(:class:`ShapeSteps`), so that the step a person names comes out:

- a counter *named* like a step (global_step, iteration, iter, step, update, batch: best first) wins over a bare
  fraction or a bar; an epoch's own number or fraction is never the step;
- a counter that starts over while the epoch advances is a batch index within the epoch: the steps of the epochs
  before are added (``(e - e0) * N + i`` where the line shows N), so the step is the global one. Which a named
  ``i/N`` beside a bare epoch number is, the lines decide, not its name: one that starts over when the epoch advances
  (``epoch 2 batch 19/20``) counts within the epoch, one that never does (PaddleSeg's ``epoch: 1, iter: 20/500``)
  stays global;
- several ranks printing the same step are one step (an equal counter is a copy, a slightly smaller one a rank or a
  copied log lagging behind);
- a template is progress only once it recurred with its counter advancing; a template whose counter starts over
  again and again without an epoch advancing (an evaluation bar, a generation bar) is not the run's steps;
- lines that count something else are not read at all: retries and attempts, downloads and loading bars (checkpoint
  shards, a dataset's map or tokenising), a heartbeat's counter, a warning's repeat count, evaluation loops (the
  run's activity, not its training steps).

Only lines that the ``_steplike`` kind (``rlwatch.logs.kinds``) lets through reach this: lines holding one of a few
literals, found by the counter's bulk scan of a chunk, with no expression run over each line on the way.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache

__all__ = [
    "CANDIDATE",
    "CANDIDATE_LITERALS",
    "REDRAW_MAX_BYTES",
    "Reading",
    "ShapeSteps",
    "holds_records",
    "read",
    "redraw_key",
    "speed",
    "states_sizes",
]

# The lines the ``_steplike`` kind hands the training tracker: those holding one of these literals, found by the
# counter's bulk literal scan with no expression run over the line (the kind's expression is their alternation, see
# kinds.py). Chosen to be rare in other lines: every literal costs the bulk scan a little, and every line holding
# one is read by :func:`read` (an AReaL stats row holds `update/` and `microbatch` by the dozen: those words are left
# out; the tracker passes over the stats rows and AReaL's own step lines before reading). A literal starting with a
# space slows the bulk scan of `re` most. Each names the formats it is there for.
CANDIDATE_LITERALS = (
    "step", "Step", "STEP",  # step N, step: N, global_step=N, "step": N, current_steps, ms/step (Keras), Step N |
    "iter", "Iter", "ITER",  # iter N:, iter: N, iteration N/M, Iter N:, Acc_iter
    "num_updates",  # fairseq
    "Batch",  # MXNet's Epoch[e] Batch [i]
    "%|",  # tqdm bars: HF Trainer, Lightning, torchtune
    "Epoch",  # [e][i/N] pairs (mmcv, mmengine, torchvision), Keras's epoch lines, Epoch e | Iter i
    "epoch ",  # a hand-written loop's `epoch 2 batch 19/20 loss …`: every record, so that its batch index is seen
    # starting over as the epoch advances (read from a chunk's last lines only, it never is after the fact)
    "| loss", "loss, ",  # a counter leading its record: llama2.c, tinygrad
    # an RL loop's `Episode: N`, `episode 12`, `308 episodes`, `"episode": 3`, a federated loop's `Round N` (read by
    # their shape); never `episode` inside a name (`arun_episode`, `episode_reward`): a retried rollout's traceback
    # names its frame thousands of times
    "pisode:", "pisode ", "pisodes", "pisode=", 'pisode"', "Round", "round",
    "| ",  # a table: a header and its rows, a key/value table printed every iteration (stable-baselines)
)  # fmt: skip
CANDIDATE = "|".join(re.escape(lit) for lit in CANDIDATE_LITERALS)

# Lines that count something other than training steps (matched anywhere in the line, whatever its case).
_NOT_STEPS = re.compile(
    r"\b(?:retry|retries|retrying|attempts?|download\w*|fetching|uploading|loading|load(?:ed)? checkpoint"
    r"|checkpoint shards|shards?|map|tokeni[sz]\w*|heartbeat|repeated|occurrences?|times|filter|resolving"
    r"|extracting|generating|processed prompts|adding requests|capturing|compiling|sanity checking"
    r"|val|valid|validation|validating|eval|evaluation|evaluating|test|testing|predict(?:ing|ions?)?|inference"
    r"|running tokenizer|converting"
    # a launcher's or container's count of its own starts (`container boot 3`, `restart 2/3`): never training steps
    r"|boot\w*|reboot\w*|restart\w*|relaunch\w*|respawn\w*)\b"
)
# The words of an evaluation among _NOT_STEPS: a line holding one is still a training record where it also names what
# was trained (CatBoost's `N: learn: … test: …`, XGBoost's `[N] train-logloss:… eval-logloss:…`, LitGPT's `loss train
# (curr): …, val (prev val iter): …`): the evaluation's metric is printed beside the training one on every record.
_EVAL_WORDS = frozenset(("val", "valid", "eval", "test"))
# ... but not where it names an evaluation's own loss (nanoGPT's `step 250: train loss 4.2, val loss 4.3`, its
# estimate over both splits every eval_interval steps, between the iter lines that are the run's records)
_EVAL_LOSS = re.compile(r"(?<![a-z])(?:val|valid|eval|test) loss\b")
_TRAINED = re.compile(r"(?<![a-z])(?:train(?:ing)?|learn)(?![a-z])")
# An evaluation's metric with a value (`"eval_loss": null` is none): the line is an evaluation's record unless it
# also holds a training metric (pgx's `{"steps": …, "train_R": …, "eval_R": …}` is a training record).
_EVAL_METRIC = re.compile(r"\beval_\w*[\"']?\s*[:=]\s*-?\d")
_TRAIN_METRIC = re.compile(
    r"(?<![\w])(?:loss|train\w*|reward|rew)\b"
)  # searched in the line made lower-case: quicker than a case-insensitive expression
# The total a line states beside its counter: LLaMA-Factory's `"total_steps": 82`, `max_steps=1000`.
# ... or on a line of its own: HF Trainer's `Total optimization steps = 460`, `max_steps: 1000`, `Total training
# steps: 2290` (not `num_updates`: fairseq's counter)
_STATED_TOTAL = re.compile(
    r"(?i)(?<![\w])(?:total|max(?:imum)?|number of|num_train(?:ing)?|num_total)[_ ](?:[a-z]+[_ ]){0,2}?"
    r"(?:steps|iters|iterations|updates)\b[\"']?\s*[:=]?\s*(\d{1,12})(?![\d.])"
)
# The length of an epoch a run states: `steps per epoch: 569`, `steps_per_epoch=569`, or a plural count on a line
# naming the epoch (`Epoch: 36, Steps: 569 | Train Loss: …`, each epoch's summary), which is the epoch's length only
# where two epochs state the same count (a count that grows is the run's own, not an epoch's)
_EPOCH_LENGTH = re.compile(
    r"(?i)(?<![\w])(?:steps|iters|iterations|batches)(?P<per>[ _]per[ _]epoch)?[\"']?\s*[:=]\s*(?P<n>\d{1,9})(?![\d.])"
)
# ... or, before the first record, a plural step name with its count (`iters: 3000`, `steps=500`)
_PLURAL_STATED = re.compile(r"(?i)(?<![\w])(?:iters|iterations|steps|updates)[\"']?\s*[:=]\s*(\d{1,12})(?![\d.])")
_DIGITS_RUN = re.compile(r"\d+")
_TOTAL_KEY = re.compile(r"(?i)\b(?:total|max|num)_?(?:steps|iters|iterations)[\"']?\s*[:=]\s*(\d{1,12})")
# A counter named like a step: the name (not the tail of another word: `total_steps`, `warmup_steps`, `ms/step`),
# an optional quote and separator, an optional bracket, the number (not a percentage: `steps:  95%|█| 1900/2000`
# is at step 1900; its thousands grouped or not: `Step 10,850`, a comma after its last group separating the next
# field: `iter: 12,400, lr: …` is 12400), an optional `/ total` or ` of total`.
_NAMED = re.compile(
    r"(?<![\w/.-])(?P<name>global[_ ]?steps?|current_steps|num_updates|iterations?|iters?|steps?|updates?"
    r"|batch(?:_idx|es)?|it)(?![\w/])[\"']?\s*(?:[:=#]\s*)?\[?\s*(?P<n>\d{1,3}(?:,\d{3})+(?!\d|,\d)|\d{1,12})"
    r"(?!\d|\.\d|\s*%)(?:\s*(?:/|of)\s*(?P<total>\d{1,3}(?:,\d{3})+(?!\d|,\d)|\d{1,12})(?!\d))?",
    re.IGNORECASE,
)
_RANK = {"global": 0, "current_steps": 1, "num_updates": 1, "iter": 2, "it": 2, "step": 3, "update": 4, "batch": 5}
# An epoch's own number: `Epoch 3/10`, `Epoch 3 of 10`, `epoch 001:`, `Epoch: [0]`, `Epoch(train) [1]`, `"epoch": 2`
# (not a float).
_EPOCH = re.compile(
    r"(?i)(?<![\w])epoch(?:\(\w+\))?[\"']?\s*[:=]?\s*\[?\s*(?P<e>\d{1,6})(?![\d.])"
    r"(?:(?:\s*\]?\s*/\s*|\s+of\s+)(?P<of>\d{1,6}))?"
)
_AFTER_EPOCH = re.compile(r"[\s,;:]{1,8}(?P<n>\d{1,12})\s*/\s*(?P<total>\d{1,12})(?!\d|\.\d)")
# A bare fraction in a bar or in brackets: tqdm's `| 45/100 [`, Keras's `45/100 [====`, `[ 50/500]`, `[50/1251 (`.
_FRACTION = re.compile(
    r"(?:\|\s*|^\s*|\[\s*)(?P<n>\d{1,12})\s*/\s*(?P<total>\d{1,12})(?=\s*(?:\[|\]|\(|$)|\s+-\s)", re.MULTILINE
)
# A tqdm bar's own `i/N` (after `%|…|`): it, not a bracketed fraction in the bar's text (OpenRLHF's
# `Episode [1/1]:  12%|█▏ | 7/56 [`), is what the bar counts.
_BAR_FRACTION = re.compile(r"%\|[^|\n]{0,200}\|\s*(?P<n>\d{1,12})\s*/\s*(?P<total>\d{1,12})")
# ... and where its state ends: the bracket of its times and rate (`[01:11<01:58,  3.37it/s]`)
_BAR_END = re.compile(r"%\|[^|\n]{0,200}\|\s*\d{1,12}\s*/\s*\d{1,12}\s*\[[^\]\n]{0,80}\]")
# `[e][i/N]`: the epoch, then the batch within it. mmcv's `Epoch [1][50/500]` and mmengine's `Epoch(train) [1][50/500]`
# (brackets side by side) count epochs from 1; torchvision's reference scripts' `Epoch: [0]  [ 50/500]` from 0.
_PAIR = re.compile(r"\[\s*(?P<e>\d{1,6})\s*\]\s*\[\s*(?P<n>\d{1,12})\s*/\s*(?P<total>\d{1,12})\s*\]")
# The header of a record spread over a block of lines: a line holding nothing but a step counter of its total, a
# word or two before it, a parenthesised aside after it and a rule's characters around it (`Learning iteration 1/10`
# centred above its `name: value` rows, `  Iteration 1/40  (global 35)` between two `====` rules). Each block is one
# record, printed once per iteration: the first header is already the run's step, where a record on one line must
# recur before it is (the block's own lines carry the metrics, not a counter).
_BLOCK_HEADER = re.compile(
    r"(?i)[\s=#*~-]*(?:[a-z]+\s+){0,2}(?:iterations?|iters?|steps?|updates?)\s*[:#]?\s*(?P<n>\d{1,12})\s*/\s*"
    r"(?P<total>\d{1,12})\s*(?:\([^()\n]{0,80}\))?[\s=#*~-]*"
)
# llama2.c's `100 | loss 4.2 | lr …`, tinygrad's `  12 4.36 s run, 11.87 loss, …`: the counter leads the record.
_LEADING = re.compile(r"^\s*(?P<n>\d{1,12})\s+(?:\|\s*)?[^\n]*?\b[Ll]oss\b")
_WORDS = re.compile(r"[A-Za-z_]{2,}")
_DIGIT = re.compile(r"\d")
# The speed a bar measured itself: tqdm's `1.36it/s` or `2.08s/it` (its `rate_fmt`), Keras's `3ms/step`. The only
# speed a log whose lines carry no time has, and the bar's `[elapsed<remaining` follows from it.
_SPEED = re.compile(r"(?<![\w.])(\d{1,9}(?:\.\d{1,9})?)(it/s|s/it|ms/step|s/step)(?![\w/])")
_PER_HOUR = {"it/s": 3600.0, "s/it": -3600.0, "ms/step": -3_600_000.0, "s/step": -3600.0}  # < 0: time per step
# A bar redrawn a million times (tqdm at a terminal, captured; a bar piped through tee) is a million lines that only
# matter by their first and last: the counter passes over the lines between in bulk (see redraw_key).
REDRAW_MAX_BYTES = 1024
_REDRAW_DROP = b"0123456789 "
_TEMPLATE_WORDS = 16


def redraw_key(data: bytes, start: int, end: int) -> tuple[bytes, int] | None:
    """:func:`redraw_layout`'s key and counter."""
    layout = redraw_layout(data, start, end)
    return None if layout is None else (layout[0], layout[1])


def redraw_layout(data: bytes, start: int, end: int) -> tuple[bytes, int, int, int, int, int] | None:
    """What stays the same while a tqdm-style bar on ``data[start:end]`` is redrawn, its counter (-1: none shown),
    and where the counter's digits and "/TOTAL" lie in the line (from its start); None: no such bar.

    A bar is ``HEAD PCT%|BAR| N/TOTAL REST`` (``Training Progress:  33%|███▎      | 4/12 [00:04<00:09,  1.17s/it]``).
    The key is the line without its digits and spaces and without the bar's cells, but with ``/TOTAL`` as written:
    consecutive lines with one key, their counter never going back, are redraws of one bar (the percentage, the
    counter, the times and the speed move; the text, the units and the total do not). A bar with another total (an
    evaluation bar beside the training bar) or another text is another bar, and a counter that starts over starts
    another run (a generation bar drawn again and again is not one bar moving on). Lines over ``REDRAW_MAX_BYTES``,
    or with a counter of more than 18 digits, are never redraws. The compiled event path (``_eventpath.pyx``
    ``redraw_key``) reads the same key and counter byte for byte.
    """
    if end - start > REDRAW_MAX_BYTES:
        return None
    pct = data.find(b"%|", start, end)
    if pct <= start or not 48 <= data[pct - 1] <= 57:
        return None
    close = data.find(b"|", pct + 2, end)
    if close < 0:
        return None
    i = close + 1
    while i < end and data[i] == 32:
        i += 1
    digits = i
    while i < end and 48 <= data[i] <= 57:
        i += 1
    if i - digits > 18:
        return None
    counter = int(data[digits:i]) if i > digits else -1
    j = i
    if i < end and data[i] == 47:  # "/TOTAL"
        j = i + 1
        while j < end and 48 <= data[j] <= 57:
            j += 1
    drop = _REDRAW_DROP
    key = data[start:pct].translate(None, drop) + b"%||" + data[i:j] + data[j:end].translate(None, drop)
    return key, counter, digits - start, i - start, i - start, j - start


@dataclass(frozen=True, slots=True)
class Reading:
    """What one line says of its counter. ``epoch``: the epoch the line names (None: none named), counted from
    ``base`` (1, as a person counts epochs, but for torchvision's ``Epoch: [e]  [i/N]``, from 0; the run's own
    first epoch, where its lines show it, overrides either); ``epochs``: how many there are, where shown;
    ``template``: the line's words, which the same record repeats."""

    template: str
    name: str  # the counter's name (global, iter, step, update, batch, num_updates, fraction, pair, leading)
    value: int
    total: int | None
    epoch: int | None
    epochs: int | None
    base: int = 0
    speed: float | None = None  # steps per hour, as the line's own bar measured it (tqdm's it/s or s/it)
    label: str = ""  # an i/N's own name where the line names it (`iter: 1040/1849`), for the report to say
    header: bool = False  # a block's header line (_BLOCK_HEADER): the run's step from its first line
    slash: int | None = None  # a named counter's number after its slash, a total or not (`Batch 78/10`'s 10)
    within: bool = False  # the inner counter of an `e/i` pair, ``epoch`` its outer one (ShapeSteps._pair_of)


def speed(text: str) -> float | None:
    """Steps per hour from the speed a bar prints (``1.36it/s`` → 4896, ``2.08s/it`` → 1731); None: none shown."""
    m = _SPEED.search(text)
    if m is None:
        return None
    value = float(m.group(1))
    scale = _PER_HOUR[m.group(2)]
    if value <= 0:
        return None
    return scale * value if scale > 0 else -scale / value


def _template(text: str, name: str, total: int | None) -> str:
    words = _WORDS.findall(text)[:_TEMPLATE_WORDS]
    return f"{name}|{total or ''}|{' '.join(words)}"


def _epoch(text: str) -> tuple[re.Match[str] | None, int | None, int | None, int]:
    em = _EPOCH.search(text)
    if em is None:
        return None, None, None, 0
    epochs = int(em.group("of")) if em.group("of") else None
    raw = em.group("e")
    # epochs count from 1, as a person counts them (`Epoch 12` is the twelfth, eleven done before it), where the run's
    # own lines never show an epoch 0 (ShapeSteps._global: the first epoch the log shows, 0 or 1, says which)
    return em, int(raw), epochs, 1


def read(text: str) -> Reading | None:
    """The counter a step-like line carries, or None (not step-like, or a line counting something else)."""
    text = _bar_alone(text)
    return None if _counts_else(text) else _with_speed(text, _read(text))


def _bar_alone(text: str) -> str:
    """A bar's state with another writer's line run onto it, its line break lost (PaddleNLP's `200/600 [01:11<01:58,
    3.37it/s][2022-03-25 …] [INFO] - ***** Running Evaluation *****`): the bar alone, since what was run onto it
    neither makes it an evaluation nor lends it a counter. Any other line as it is."""
    if "%|" not in text:
        return text
    end = -1
    for bar in _BAR_END.finditer(text):  # several states of one bar on a line: after the last
        end = bar.end()
    return text[:end] if 0 <= end < len(text.rstrip()) else text


def _with_speed(text: str, r: Reading | None) -> Reading | None:
    if r is None or "/" not in text:
        return r
    rate = speed(text)
    return r if rate is None else replace(r, speed=rate)


def _counts_else(text: str) -> bool:
    """Whether the line counts something other than training steps (see ``_NOT_STEPS``, ``_EVAL_METRIC``), or is a
    Python traceback's frame (``  File "…/rlvr.py", line 93, in arun_episode``: a place in the code, whose line
    number moves from one traceback to the next; a retried failure prints thousands)."""
    if text.lstrip().startswith('File "'):
        return True
    low = text.lower()
    if (first := _NOT_STEPS.search(low)) is not None:
        if first.group(0) not in _EVAL_WORDS:
            return True  # what most such lines hold (a weight update's `Loading weights …`): no set of words made
        words = {m.group(0) for m in _NOT_STEPS.finditer(low)}
        if not words <= _EVAL_WORDS or _TRAINED.search(low) is None or _EVAL_LOSS.search(low) is not None:
            return True
    return _EVAL_METRIC.search(low) is not None and _TRAIN_METRIC.search(low) is None


# A counter's qualifier, the word before its name (acme's `Actor Steps = 6360 | … | Learner Steps = 9`): the
# learner's steps are the updates a person names; an actor's, an evaluator's or an environment's count what the
# updates are made of, ranked after any unqualified name.
_QUALIFIER = re.compile(r"([A-Za-z]+)[ _]$")
_PART_QUALIFIERS = frozenset(("actor", "actors", "env", "environment", "evaluator", "eval", "explorer", "sampler"))
_UPDATE_QUALIFIERS = frozenset(("learner", "trainer", "optimizer", "train", "training", "gradient"))


def _qualifier_rank(text: str, at: int) -> int:
    """What the word before a named counter at ``at`` adds to its rank: 0 unqualified, -1 the learner's (ahead of
    the same name unqualified), +10 an actor's, evaluator's or environment's (after every unqualified name)."""
    q = _QUALIFIER.search(text, max(0, at - 16), at)
    if q is None:
        return 0
    word = q.group(1).lower()
    return -1 if word in _UPDATE_QUALIFIERS else 10 if word in _PART_QUALIFIERS else 0


def _grouped(digits: str) -> int:
    """A named counter's number, its thousands grouped by commas or not (``10,850`` is 10850)."""
    return int(digits.replace(",", "")) if "," in digits else int(digits)


# The run's own count of iterations accumulated over its epochs, named by a qualifier joined to the name (`Acc_iter
# 150`, `accumulated_iter: 150`; not the tail of a setting's name: `grad_accum_iter`): the step where a record also
# shows the batch within its epoch (`[ 149/323 ( 46%)]`, from 0), as a global step is.
_ACCUMULATED = re.compile(
    r"(?i)(?<![\w/.-])(?P<name>acc(?:umulated)?_iter(?:ation)?s?)(?![\w/])[\"']?\s*[:=]?\s*(?P<n>\d{1,12})(?![\d.])"
)


def _accumulated(text: str, best: tuple[int, str, int, int | None] | None) -> tuple[int, str, int, int | None] | None:
    """The counter a record's step is read from, ``best`` as :func:`_read` ranked its named counters: an accumulated
    iteration (``_ACCUMULATED``) where the line shows one, ranked as a global step (before an iteration, a step or a
    batch within the epoch), else ``best``."""
    if "cc" not in text and "CC" not in text:
        return best
    m = _ACCUMULATED.search(text)
    if m is None or (best is not None and best[0] <= _RANK["global"]):
        return best
    return _RANK["global"], m.group("name"), int(m.group("n")), None


def _read(text: str) -> Reading | None:
    """:func:`read` of a line :func:`_counts_else` let through, without its bar's speed."""
    em, epoch, epochs, base = _epoch(text)
    pair = _PAIR.search(text)
    if pair is not None:
        per_epoch = int(pair.group("total"))
        base = 1 if "][" in pair.group(0) else 0
        return Reading(
            _template(text, "pair", per_epoch),
            "pair",
            int(pair.group("n")),
            per_epoch,
            int(pair.group("e")),
            epochs,
            base,
        )
    best: tuple[int, str, int, int | None] | None = None
    best_slash: int | None = None
    totals: dict[int, int] = {}  # each named counter's value -> the total shown beside it
    for m in _NAMED.finditer(text):
        if em is not None and em.start() <= m.start() < em.end():
            continue
        raw = m.group("name").lower().replace(" ", "_")
        name = "global" if raw.startswith("global") else raw.rstrip("s") if raw != "num_updates" else raw
        name = "iter" if name.startswith("iter") else "batch" if name.startswith("batch") else name
        if name == "it" and not m.group("total") and ":" not in m.group(0) and "=" not in m.group(0):
            continue  # `it` only as `it: 12` / `it=12` / `it 12/100`, not the word
        rank = _RANK.get(name, 6) + _qualifier_rank(text, m.start())
        shown = _grouped(m.group("total")) if m.group("total") else None
        if shown is not None and _grouped(m.group("n")) > shown:
            shown = None
        if shown is not None:
            totals.setdefault(_grouped(m.group("n")), shown)
        if best is None or rank < best[0] or (name == "step" and best[1] == "iter"):
            # LitGPT's `iter 8 | step 2`: where a line names both, the iter counts micro-batches and the step the
            # optimizer's steps, the one a person names
            best = (rank, name, _grouped(m.group("n")), shown)
            best_slash = _grouped(m.group("total")) if m.group("total") else None
    named, best = best, _accumulated(text, best)
    if best is not None:
        _, name, value, of = best
        slash = best_slash if best is named else None  # the number after the named counter's slash, a total or not
        if of is None and best is named:  # an accumulated count is never another name of a count within the epoch
            # NeMo's `iteration 125/149 | … | global_step: 125`: two names of one counter on one record (the same
            # value), the total shown beside the other one is this one's too
            of = totals.get(value)
        if of is not None and epochs is not None and name in ("iter", "step", "batch", "it"):
            # YOLOX's `epoch: 36/300, iter: 1040/1849`: beside an epoch shown with its total, an i/N counts within
            # the epoch (an i/N beside a bare epoch number is read as the run's own, PaddleSeg's `epoch: 1, iter:
            # 20/500`, until its lines show it starting over as the epoch advances: ShapeSteps._advance)
            return Reading(_template(text, "fraction", of), "fraction", value, of, epoch, epochs, 1, label=name)
        if of is None and (tm := _TOTAL_KEY.search(text)) is not None and int(tm.group(1)) >= value:
            of = int(tm.group(1))
        header = of is not None and _BLOCK_HEADER.fullmatch(text) is not None
        return Reading(_template(text, name, of), name, value, of, epoch, epochs, base, header=header, slash=slash)
    if em is not None and (after := _AFTER_EPOCH.match(text, em.end())) is not None:
        # fairseq's `| epoch 010  2000 / 8223 loss=…`: the fraction right after the epoch's number is the batch
        # within that epoch
        value, total = int(after.group("n")), int(after.group("total"))
        if 0 <= value <= total:
            return Reading(_template(text, "fraction", total), "fraction", value, total, epoch, epochs, base)
    bar: re.Match[str] | None = None
    if "%|" in text:
        # several states of one bar on one line (its redraws where the terminal's CR was lost, joined by a launcher
        # or a logger): the last with the first's total is where it stands (another total is another bar, an inner
        # one drawn beside it)
        for m in _BAR_FRACTION.finditer(text):
            if bar is None or m.group("total") == bar.group("total"):
                bar = m
    for m in [bar] if bar is not None else _FRACTION.finditer(text):
        if em is not None and em.start() <= m.start() < em.end():
            continue
        value, total = int(m.group("n")), int(m.group("total"))
        if 0 <= value <= total and total > 0:
            return Reading(_template(text, "fraction", total), "fraction", value, total, epoch, epochs, base)
    lead = _LEADING.match(text)
    if lead is not None:
        return Reading(_template(text, "leading", None), "leading", int(lead.group("n")), None, epoch, epochs, base)
    return None


# -- records learned from the run's own lines ---------------------------------------------------------------------
#
# A line none of the readers above knows is still a record when its template recurs: the line with its numbers taken
# out (Drain's template where a record's variable parts are numbers, which Drain masks first; a template tree is not
# needed to find one template that recurs, and a dict lookup keeps the read of a candidate line cheap). Each whole
# number of the line is a field, named by the word before it (``Episode: 59`` → episode, ``it 517`` → it, a bare
# ``===> 003`` → no name) or by its column under a header line (``epoch | train_loss | …``, ``step,loss``); a field
# whose value advances from one record of its template to the next is a counter. Never a counter: a percentage, a
# decimal (a loss, a time, a rate), a time of day or duration (``00:21``, ``02h 06m``), a field named for a time, a
# rate, a size or a rank. Which counter is the step (``_field_class``), best first: one named like a step (step,
# iter, iteration, it, update, upd, round, …), then any other name or none, then a count of episodes, environment
# steps, samples, tokens or frames (what a step is made of, not the steps), and an epoch's own number last (the only
# counter a once-per-epoch record has). Among counters of one class, the one that advanced on more records, then the
# one first in its record.
# A field is a number (``_NUMBER``, found first: its digit is what a scan for it can look for) and the name before it
# (``_name_before``): a word then at most a quote, a ``:``/``=``/``#``, a bracket and spaces (``Episode: 59``,
# ``"step": 3``, ``it 517``, ``step2``), the word's last 41 characters at most; without a word, the number stands
# alone (not after ``-``, ``+``, ``.``, ``:`` or ``/``: a negative, an exponent, a decimal's tail, a clock, a
# fraction's total). One expression over the name and the number both tried every word of a line at every letter:
# 0.4 ms for one row of AReaL's stats table, where every chunk's last lines are read.
_NUMBER = re.compile(
    r"\d(?<![\d.\-+]\d)(?:\d{0,14}|(?:\.\d+)?e\+?\d{1,2})"
    r"(?![\w.%]|:\d|\.\d|\s*%|\s*(?:ms|s|h|m|min|sec|GiB|MiB|GB|MB)\b)",
    re.IGNORECASE,
)
_SEPARATORS = re.compile(r"[\"']?\s*[:=#]?\s*\[?\s*")
_SEPARATOR_CHARS = frozenset("\"' \t\n\r\f\v:=#[")
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_MAX = 41
_ALONE_AFTER = frozenset(".:/-")  # and a word's letters and digits (_name_before)
# a field's total: `mb 100/300`, `Epoch 3 of 500` (a number over its total is no fraction: a date's `2021/01`)
_OF_TOTAL = re.compile(r"(?:\s*/\s*|\s+of\s+)(\d{1,12})(?![\d.])")
# a row of a key/value table printed every iteration (stable-baselines' logger: `|    iterations      | 3     |`)
_KV_ROW = re.compile(r"\s*\|\s*([A-Za-z_][\w./-]{0,40})\s*\|\s*(\d[\d.e+]{0,20})\s*\|\s*")
# ... a noun after a number names it (`0021028 updates`), not a key followed by its own value (`100 loss 0.52`)
_NAME_AFTER = re.compile(r"[ \t]{1,4}([A-Za-z_]{3,24})(?![\w/(:=])(?![ \t]{1,4}[+-]?\.?\d)")
# a time of day with its fraction (logging's `13:17:40,982`: the milliseconds advance too), a date
_CLOCK = re.compile(r"\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?|\d{4}-\d{2}-\d{2}|\d{8}-")
# a place in a source file (glog's `gpu_device.cc:1003]`, Python logging's `trainer.py:88`): a line number, which
# moves from one message to the next as the code that logs does, never a counter
_LOCATION = re.compile(
    r"(?<=[\w-])\.(?:py|pyx|cc|cpp|cxx|c|h|hpp|hh|cu|cuh|rs|go|java|scala|kt|js|ts|lua|jl|rb|swift):\d{1,7}(?!\d)"
)
_HEADER_SEPS = ("|", "\t", ",")
_STEP_NAMES = frozenset(
    (
        "step", "steps", "global_step", "globalstep", "iter", "iters", "iteration", "iterations", "it", "update",
        "updates", "upd", "n_updates", "nupdates", "num_updates", "round", "rounds", "training_iteration",
        "current_steps", "train_step",
    )
)  # fmt: skip
_PART_NAMES = ("episode", "timestep", "env_step", "envstep", "frame", "sample", "token", "image", "consumed", "action")
_NOT_COUNTERS = (
    "time", "elapsed", "sec", "fps", "speed", "throughput", "mem", "loss", "rank", "seed", "len", "size", "mean",
    "year", "hour", "port", "version", "v_num", "cuda", "count", "num_", "batch_size", "world", "node", "device",
    "worker", "thread", "part",
)  # fmt: skip
# ... and these only as a whole part of the name (`lr`, `max_len`, `gpu0`), never inside a word: `minibatch` is a
# counter, `min` is not
_NOT_COUNTER_PARTS = frozenset(("eta", "lr", "pid", "gpu", "max", "min", "avg", "std", "day", "dp", "tp", "pp", "sp"))
_NAME_PARTS = re.compile(r"[a-z]+")
_MAX_FIELDS = 8


@lru_cache(maxsize=4096)  # a run's records name the same few fields on every line
def _field_class(name: str) -> int | None:
    """How good a field named ``name`` is as the step: 1 (a step's name) … 4 (an epoch); None: never a counter."""
    low = name.lower().strip("_")
    if low in _STEP_NAMES:
        return 1
    if any(p in low for p in _PART_NAMES):
        return 3
    if low in {"epoch", "epochs"}:
        return 4
    if any(w in low for w in _NOT_COUNTERS) or not _NOT_COUNTER_PARTS.isdisjoint(_NAME_PARTS.findall(low)):
        return None
    return 2


def _name_before(text: str, at: int, floor: int) -> str | None:
    """The name of the number at ``at`` (no name before ``floor``): the word before it and its separators; "" where
    it stands alone; None where it is neither (``-5``, ``a-5``, ``12:30``'s minutes)."""
    j = at
    while j > floor and text[j - 1] in _SEPARATOR_CHARS:
        j -= 1
    k = j
    while k > floor and (text[k - 1].isalnum() or text[k - 1] in "_/"):
        k -= 1
    if k < j and _SEPARATORS.fullmatch(text, j, at) is not None:
        start = max(k, j - _NAME_MAX)
        while start < j and text[start] not in _NAME_START:
            start += 1
        if start < j:
            return text[start:j]
    if at == 0:
        return ""
    before = text[at - 1]
    return None if before.isalnum() or before == "_" or before in _ALONE_AFTER else ""


def fields(text: str, header: list[str] | None = None) -> list[tuple[str, int, int | None]]:
    """The whole numbers of a record line that could be counters, each with its name ("" where none) and the total
    the line shows beside it (``100/300``, ``3 of 500``; None where none): at most ``_MAX_FIELDS``, in the order of
    the line. ``header``: the names of the columns of a table or CSV row. A key/value table's row names its one
    number by its key."""
    if text.count("|") == 3 and (kv := _KV_ROW.fullmatch(text)) is not None:
        value = _whole(kv.group(2))
        return [] if value is None else [(kv.group(1), value, None)]
    clocks = [(m.start(), m.end()) for m in _CLOCK.finditer(text)] + _locations(text)
    out: list[tuple[str, int, int | None]] = []
    col_of: list[int] | None = None
    if header is not None:
        sep = next(c for c in _HEADER_SEPS if text.count(c) >= len(header) - 1)
        col_of = []
        for i, ch in enumerate(text):
            if ch == sep:
                col_of.append(i)
    floor = 0  # where the field before ended: a name is never read across it
    for m in _NUMBER.finditer(text):
        at = m.start()
        if at < floor:
            continue  # the total of the field before (`3 of 500`'s 500)
        found = _name_before(text, at, floor)
        if found is None:
            continue
        floor = m.end()
        if any(a <= at < b for a, b in clocks):
            continue
        value = _whole(m.group())
        if value is None:
            continue
        total = None
        if (of := _OF_TOTAL.match(text, floor)) is not None:
            total = int(of.group(1))
            floor = of.end()
            if value > total:
                continue  # no fraction (a date's 2021/01/15)
        name = found
        if not name and (after := _NAME_AFTER.match(text, m.end())) is not None:
            name = after.group(1)  # fairseq-lua's `0021028 updates`, keras-rl's `308 episodes`: the noun after it
        if col_of is not None and header is not None:
            col = sum(1 for c in col_of if c < at)
            name = header[col] if col < len(header) else ""
        out.append((name, value, total))
        if len(out) >= _MAX_FIELDS:
            break
    return out


def _locations(text: str) -> list[tuple[int, int]]:
    """Where ``text`` names a place in a source file (``_LOCATION``): spans whose numbers are no fields."""
    if ":" not in text or "." not in text:
        return []
    return [(m.start(), m.end()) for m in _LOCATION.finditer(text)]


def _field_keys(template: str, found: list[tuple[str, int, int | None]]) -> list[str]:
    """The series key of each field of a record: its name (and which of that name it is) where it has one, its place
    where not. A named field stays its series whatever fields before it a record shows or not (a score that is a
    whole number on one record and a decimal, so no field, on the next)."""
    keys: list[str] = []
    seen: dict[str, int] = {}
    for i, (name, _, _) in enumerate(found):
        if not name:
            keys.append(f"~{i}|{template}")
            continue
        low = name.lower()
        n = seen[low] = seen.get(low, -1) + 1
        keys.append(f"~{low}#{n}|{template}")
    return keys


def _whole(raw: str) -> int | None:
    """A field's number as a whole number (``1.2e+06`` is 1200000); None: a decimal, or no number."""
    try:
        value = int(raw) if raw.isdigit() else float(raw)
    except ValueError:
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    return value


def header_of(text: str) -> tuple[str, list[str]] | None:
    """A table's or a CSV's header line (names between separators, no digits): its separator and its names."""
    if _DIGIT.search(text) is not None:
        return None
    for sep in _HEADER_SEPS:
        if text.count(sep) >= 1:
            cells = [c.strip().strip("\"'") for c in text.split(sep)]
            named = [c for c in cells if c]
            if (
                len(named) >= 2
                and all(c[0].isalpha() or c[0] == "_" for c in named)
                and all(len(c) <= 40 for c in named)
            ):
                return sep, cells
    return None


def masked(text: str) -> str:
    """The line's template: its words, with every number and the spaces between them taken out."""
    return " ".join(_WORDS.findall(text)[:_TEMPLATE_WORDS])


class _Series:
    """One template's counter over the lines: ``last`` as printed, ``step`` the global step it stands for."""

    __slots__ = (
        "advances", "backs", "by_epoch", "epoch", "epochs", "header", "kind", "label", "last", "least", "low", "moves",
        "name", "offset", "order", "per_epoch", "resets", "since", "speed", "step", "total", "whole", "within",
    )  # fmt: skip

    def __init__(self, r: Reading, epoch: int | None, time: float, kind: int = 0, order: int = 0) -> None:
        self.kind = kind  # 0: a line one of the readers knows; 1-4: a field of a learned record (_field_class)
        self.order = order  # the field's place in its record
        self.name = r.name
        self.moves = 0  # records that moved it on
        self.last = self.low = r.value
        self.offset = 0  # the steps of the epochs before (a counter that starts over each epoch, no total shown)
        self.epoch = epoch
        self.epochs = r.epochs
        self.total = r.total
        self.step = r.value
        self.advances = 0
        self.least = 0  # the least it moved by on one record (0: it never moved)
        self.backs = 0  # went back without starting over (a rank lagging, or a field that is no counter: a thread id)
        self.resets = 0  # starts over with no epoch advancing: an evaluation or generation loop's bar
        # a named i/N that its lines showed starting over as the epoch advanced: it counts within the epoch
        self.per_epoch = False
        # an i/N placed by its epoch that went on when the epoch advanced instead of starting over: the run's own
        # count (`epoch 2/3 step 110/300`), read as it is
        self.whole = False
        # how often a counter with no total started over as the epoch advanced (ShapeSteps._by_epoch)
        self.by_epoch = 0
        self.label = r.label
        self.header = r.header  # a block's header: a step from its first line (_BLOCK_HEADER)
        self.within = r.within  # an `e/i` pair's inner counter: it counts within its epoch (ShapeSteps._pair_of)
        self.speed = r.speed  # the latest speed its lines printed (steps per hour)
        self.since = (time, r.value)  # (time, step) of its first line, or of its start over: where a rate begins


_MAX_SERIES = 64


def _name_rank(s: _Series) -> int:
    """Among fields of one class that moved alike, the one a person names: of step names (stable-baselines'
    `iterations` and `n_updates` rows), a global step over an iteration over a step over an update (an iteration's
    several gradient updates); of what steps are made of, the environment's steps (timesteps, frames, samples: the
    unit a run's length is set in) over its episodes, whose length varies."""
    low = s.name.lstrip("~").lower()
    if s.kind == 3:
        return 1 if "episode" in low else 0
    if s.kind != 1:
        return 0
    return 0 if "global" in low else 1 if low.startswith("it") else 2 if "step" in low else 3


_PER_EPOCH = ("pair", "fraction")  # a bar's or a bracket's i/N counts within the epoch

# The sizes of a rollout a run states among its settings (cleanRL's `args.num_envs=2048 args.batch_size=102400`,
# stable-baselines' `n_envs`/`n_steps`, a dict's `'num_envs': 8`): the environments, the steps of each, the batch.
_SIZE = re.compile(
    r"(?i)(?<![a-z_])(?P<key>num_envs|n_envs|num_env|envs|num_workers_envs|num_steps|n_steps|rollout_steps"
    r"|num_rollout_steps|horizon|batch_size)[\"']?\s*[:=]\s*(?P<n>\d{1,9})(?![\d.])"
)
# ... or in words: `488 updates of 2048 steps`, `2048 env steps per update`
_PER_UPDATE = re.compile(
    r"(?i)\bupdates?\s+of\s+(?P<a>\d{1,9})\s+(?:env(?:ironment)?\s+)?steps\b"
    r"|\b(?P<b>\d{1,9})\s+(?:env(?:ironment)?\s+)?steps\s+(?:per|each|every)\s+(?:update|iteration|rollout)\b"
)
_SIZE_WORDS = ("env", "batch", "steps", "horizon")
# An iteration's or update's counter beside a `step` (`upd 5/488 | step 10240`): what a step counter may be made of
# by iterations of (ShapeSteps._made_of).
_OUTER = re.compile(
    r"(?i)(?<![\w/.-])(?P<name>upd|updates?|iterations?|iters?|rounds?)(?![\w/])[\"']?\s*[:=#]?\s*\[?\s*"
    r"(?P<n>\d{1,9})(?![\d.,])(?:\s*/\s*(?P<of>\d{1,9})(?!\d))?"
)


def states_sizes(text: str) -> bool:
    """Whether a line states a rollout's size (``num_envs=2048``, ``488 updates of 2048 steps``): among a file's
    first lines, read even where no step-like literal brings it (the training tracker's head)."""
    return any(w in text for w in _SIZE_WORDS) and (
        _SIZE.search(text) is not None or _PER_UPDATE.search(text) is not None
    )


def _outer_counter(r: Reading, text: str) -> tuple[int, int | None, str] | None:
    """The counter a named counter's record is an iteration of (its value, total and name): a numbered epoch, or
    an update or iteration counter beside a ``step``; None: none."""
    if r.epoch is not None:
        em = _EPOCH.search(text)
        name = re.sub(r"\W", "", em.group(0).split("(")[0]).rstrip("0123456789") if em is not None else "epoch"
        return r.epoch, r.epochs, name
    if r.name not in ("step", "global"):
        return None
    m = _OUTER.search(text)
    if m is None:
        return None
    return int(m.group("n")), int(m.group("of")) if m.group("of") else None, m.group("name")


def _known_record(series: dict[str, _Series], template: str) -> _Series | None:
    """The series of a known template that a record of a template not seen before belongs to (None: none), by their
    words: a record cut short (the last line of a pasted or copied log) is the known record it begins; a record
    whose later prints carry a tail its first print lacks (a logging hook's ``(12.3 sec)``, the time since the record
    before, which the first has no record before to time) belongs to the known record that begins it. Templates of
    one word only are never matched (every record would begin with them)."""
    if template.count(" ") < 1:
        return None
    head = template + " "
    for t, o in series.items():
        if t.startswith(head) or (template.startswith(t) and template[len(t)] == " " and t.count(" ") >= 1):
            return o
    return None


class ShapeSteps:
    """Counters followed by template; ``feed`` says whether the line moved the run's step on (``step``, ``total``).

    Not thread-safe: the training tracker calls it under its lock.
    """

    def __init__(self) -> None:
        self._series: dict[str, _Series] = {}
        self._primary: _Series | None = None
        self._epoch: tuple[int, int, int | None] | None = None  # (epoch, base, epochs) named on a line of its own
        self._header: tuple[str, list[str]] | None = None  # the latest table or CSV header: separator, names
        self._first_epoch: int | None = None  # the first epoch any line named: 0 or 1 says how this run counts them
        self._version = 0  # bumped by every reading of a series: total() is kept until the next
        self._total: tuple[int, int | None] = (-1, None)
        # a learned record's fields that count within another of its fields (a batch within its epoch): by template,
        # the field's place → the outer field's place
        self._outer: dict[str, dict[int, int]] = {}
        self._stated: int | None = None  # the total steps a line of their own stated (`Total optimization steps = 460`)
        # the steps of one epoch as the run stated them (_note_epoch_length); by the template of a line with a plural
        # count beside its epoch, the epoch and count it first said (None: its count varied)
        self._epoch_length: int | None = None
        self._length_said: dict[str, tuple[int, int] | None] = {}
        # a named counter's latest number and number after its slash, by its record's words (_pair_of); the records
        # whose two numbers are an outer and an inner counter
        self._slashes: dict[str, tuple[int, int | None]] = {}
        self._pairs: set[str] = set()
        # bumped when the step's scale changes (an epoch's length learned: a step that was the epoch is now the
        # epochs before times their length): the points of a rate before it are not comparable with those after
        self.scale = 0
        # a named counter and the epoch on its line, by the line's template: (epoch, value, stride, records alike)
        # while they may move as iterations and what each is made of (_made_of); True once they did
        self._strides: dict[str, tuple[int, int, int, int] | bool] = {}
        # the sizes of a rollout the run stated (_note_sizes): environments, steps per environment, batches, the
        # steps of one update
        self._envs: set[int] = set()
        self._rollouts: set[int] = set()
        self._batches: set[int] = set()
        self._per_update: set[int] = set()
        # the names of counters shown to count the environment's steps (_made_of): never the step on any record
        self._parts: set[str] = set()
        # the latest record of each template that moved by one same stride while no stated size said why (_made_of)
        self._latest: dict[str, tuple[Reading, tuple[int, int | None, str], float]] = {}

    def _feed_fields(self, text: str, time: float) -> bool:
        """A line no reader knows: a header remembered, or each field of the record followed as a series of its own
        (keyed by the record's template and the field's place). A field that counts within another of its record
        (``_outer_of``) is placed by it, as a batch index is by its epoch."""
        head = header_of(text)
        if head is not None:
            self._header = head
            return False
        header = None
        if self._header is not None:
            sep, names = self._header
            if text.count(sep) == len(names) - 1:
                header = [n.strip() for n in names]
        template = masked(text)
        # only the fields that could be counters keep a place: a field that is a whole number on one record and a
        # decimal or none on the next (`loss: 0`, then `loss: 0.074`) must not move the counters after it to
        # another place, and so to another series (a DQN's `Frame: F` read as two fields that each moved less)
        found = [f for f in fields(text, header) if _field_class(f[0]) is not None]
        keys = _field_keys(template, found)
        outer = self._outer.get(template)
        if len(found) > 1 and len(self._outer) < _MAX_SERIES:
            # before any field of the record is read: which started over while a field before it advanced
            for j in range(1, len(found)):
                if (outer is None or j not in outer) and self._outer_of(template, found, keys, j) is not None:
                    outer = self._outer[template]
        moved = False
        for i, (name, value, total) in enumerate(found):
            kind = _field_class(name)
            assert kind is not None
            key = keys[i]
            o = outer.get(i) if outer is not None else None
            r = Reading(key, f"~{name}", value, total, None, None)
            if o is None:
                moved = self._advance(r, None, 0, None, time, kind, i) or moved
                continue
            _, epoch, epochs = found[o]
            base = 1  # an outer counter counts from 1 where its lines never show a 0 (as an epoch's: _epoch)
            new = key not in self._series
            moved = self._advance(r, epoch, base, epochs, time, kind, i) or moved
            s = self._series.get(key)
            if new and s is not None and total and epochs:
                # an i/N beside an outer counter shown with its own total (`[ep 1/10] mb 100/300`) counts within
                # it from its first record, as YOLOX's iter beside its `epoch: 36/300` does
                s.per_epoch = True
                s.step = self._global(replace(r, name="fraction"), epoch, base)
                s.since = (time, s.step)
        return moved

    def _outer_of(self, template: str, found: list[tuple[str, int, int | None]], keys: list[str], j: int) -> int | None:
        """The field of the record ``found`` that field ``j`` counts within, remembered for its template; None: none
        (yet). The nearest field before it that advanced on the record where ``j`` started over (``epoch,batch``
        rows: ``1,300`` then ``2,100``; a counter that went up and back to where it began, not a count per episode
        that goes up and down), or, shown with a total beside ``j``'s own, one named as an epoch or by
        nothing known (``[ep 1/10] mb 100/300``; never a step's name: a micro-batch within its step is not the
        step). Its value is then the epoch ``j`` is placed by."""
        _, value, total = found[j]
        s = self._series.get(keys[j])
        for i in range(j - 1, -1, -1):
            outer_name, outer_value, outer_total = found[i]
            kind = _field_class(outer_name)
            if kind is None:
                continue
            prior = self._series.get(keys[i])
            starts_over = (
                s is not None
                and prior is not None
                and outer_value > prior.last
                and value < s.last
                and value <= s.low + 1  # back to where it began: started over (not a count per episode going down)
                and s.moves >= 1  # and it counted up before, never back, and started over once at most
                and not s.backs
                and s.resets <= 1
            )
            if starts_over or (total and outer_total and kind in (2, 4) and s is None):
                self._outer.setdefault(template, {})[j] = i
                if s is not None and prior is not None:
                    s.epoch = prior.last  # the epoch its records so far were in
                return i
        return None

    def _global(self, r: Reading, epoch: int | None, base: int) -> int:
        """The step a person names: a bar's or a bracket's ``i/N`` within epoch ``e`` is ``(e - base) * N + i``."""
        if self._first_epoch is None and epoch is not None:
            self._first_epoch = epoch
        if self._first_epoch in (0, 1):
            base = self._first_epoch  # the run showed its first epoch: it counts them from that
        if r.name in _PER_EPOCH and r.total and epoch is not None and epoch >= base:
            return (epoch - base) * r.total + r.value
        return r.value

    def feed(self, text: str, time: float = math.nan) -> bool:
        """Read one line (``time``: its own, or NaN); True when it advanced the series whose counter is the run's
        step."""
        if _DIGIT.search(text) is None:
            # no number, no counter: only a table's or a CSV's header is kept (a rule of box-drawing characters, a
            # banner, a sentence cost nothing more)
            head = header_of(text)
            if head is not None and not _counts_else(text):
                self._header = head
            return False
        text = _bar_alone(text)
        late = False
        if ("env" in text or "steps" in text or "batch" in text or "horizon" in text) and states_sizes(text):
            primary = self._primary
            self._note_sizes(text)
            late = self._primary is not primary
        if "poch" in text and (length := _EPOCH_LENGTH.search(text)) is not None:
            # an epoch's stated length (on its summary line, which may name an evaluation's loss beside it): kept,
            # and taken out of the line so that its number is no counter
            said, placed = self._note_epoch_length(text, length)
            late = late or placed
            if said:
                text = text[: length.start()] + text[length.end() :]
        if _counts_else(text):
            return late
        if ("otal" in text or "ax" in text or "umber" in text or "num_" in text) and (
            stated := _STATED_TOTAL.search(text)
        ) is not None:
            # a statement of the total (`Total optimization steps = 460`, `max_steps: 1000`): kept for the counter
            # that has none of its own, and taken out of the line so that its number is no counter
            self._stated = int(stated.group(1))
            self._version += 1
            text = text[: stated.start()] + text[stated.end() :]
        elif (
            not self._series
            and self._stated is None
            and (stated := _PLURAL_STATED.search(text)) is not None
            and len(_DIGITS_RUN.findall(text)) == 1
        ):
            # before any record, a line stating one count of steps named in the plural (MLX-LM's `Starting
            # training..., iters: 3000`): how many there will be, as a total is stated, not a step the run stands at
            # (a record's field, `Actor Steps = 5230 | …`, stands among other numbers)
            self._stated = int(stated.group(1))
            self._version += 1
            text = text[: stated.start()] + text[stated.end() :]
        r = _with_speed(text, _read(text))
        if r is None:
            _, epoch, epochs, base = _epoch(text)
            if epoch is not None:
                self._epoch = (epoch, base, epochs)
                if self._first_epoch is None:
                    self._first_epoch = epoch
            s = self._primary
            named = s is not None and s.kind == 1
            before = self.step() if named else None
            moved = self._feed_fields(text, time)
            return late or moved or (named and self._primary is s and self.step() != before)
        if r.total is None and len(self._strides) < _MAX_SERIES and (outer := _outer_counter(r, text)) is not None:
            r = self._made_of(r, text, time, outer)
        if r.slash is not None and r.name in _RANK:
            r = self._pair_of(r)
        epoch, base, epochs = r.epoch, r.base, r.epochs
        if epoch is None and self._epoch is not None:
            epoch, base, epochs = self._epoch
        return self._advance(r, epoch, base, epochs, time, 0, 0) or late

    def _pair_of(self, r: Reading) -> Reading:
        """A named counter's ``a/b`` read as the pair it is where its lines show it (WeNet-style ``TRAIN Batch 78/0``,
        ``78/10``, … ``78/150``): no ``i/N``, since a total never moves while its counter stays, but an outer
        counter ``a`` (the epoch) and an inner one ``b`` counting within it. Remembered by the record's words (its
        template without the "total"), from the second record on."""
        key = f"{r.name}|{r.template.split('|', 2)[2]}"
        seen = self._slashes.get(key)
        if seen is not None or len(self._slashes) < _MAX_SERIES:
            self._slashes[key] = (r.value, r.slash)
        if key not in self._pairs:
            if seen is None or seen[0] != r.value or seen[1] == r.slash:
                return r
            self._pairs.add(key)
        assert r.slash is not None
        return Reading(f"{key}|within", r.name, r.slash, None, r.value, None, 1, r.speed, within=True)

    def _note_epoch_length(self, text: str, m: re.Match[str]) -> tuple[bool, bool]:
        """Whether the count ``m`` on ``text`` states the steps of one epoch (``steps per epoch: 569``; a plural
        count on a line naming the epoch, ``Epoch: 37, Steps: 569 | …``, where the lines of its template stated the
        same count in another epoch and never another count: a record's own ``iters: 300, epoch: 37`` moves), and
        whether the run's step moved by it (the length learned now, the step a counter that starts over each epoch
        with no total: placed by it from now on). The first such length is kept."""
        n = int(m.group("n"))
        if n < 2:
            return False, False
        if not m.group("per"):
            em = _EPOCH.search(text)
            if em is None:
                return False, False
            key = masked(text)
            epoch = int(em.group("e"))
            if key not in self._length_said:
                if len(self._length_said) < _MAX_SERIES:
                    self._length_said[key] = (epoch, n)
                return False, False
            said = self._length_said[key]
            if said is None or said[1] != n:
                self._length_said[key] = None  # its count varies: a record's counter, no epoch's length
                return False, False
            if said[0] == epoch:
                return self._epoch_length == n, False  # the same epoch's line again (a copy)
        if self._epoch_length is not None:
            return self._epoch_length == n, False
        self._epoch_length = n
        self._version += 1
        s = self._primary
        if s is None or not self._within_epochs(s):
            return True, False
        self.scale += 1
        s.since = (math.nan, s.step)  # no point of a rate in the new scale before this
        return True, True

    def _within_epochs(self, s: _Series) -> bool:
        """Whether ``s`` counts within each epoch of the run's stated length: a counter with no total that started
        over as the epoch advanced, placed as ``(e - base) * length + i`` (the epochs from 1 where the run shows no
        epoch 0)."""
        return self._epoch_length is not None and (s.by_epoch > 0 or s.within) and s.epoch is not None

    def _note_sizes(self, text: str) -> None:
        """Keep the sizes of a rollout a line states (``num_envs=2048``, ``batch_size=102400``, ``488 updates of
        2048 steps``): the strides by which a counter of environment steps moves once per iteration."""
        for m in _SIZE.finditer(text):
            key, value = m.group("key").lower(), int(m.group("n"))
            if value < 2:
                continue
            if "env" in key:
                self._envs.add(value)
            elif "batch" in key:
                self._batches.add(value)
            else:
                self._rollouts.add(value)
        for m in _PER_UPDATE.finditer(text):
            self._per_update.add(int(m.group("a") or m.group("b")))
        for key, (r, outer, time) in list(self._latest.items()):
            # records that moved by one same stride before the sizes were read (the settings line among the file's
            # first lines, read after its records): read by their outer counter now
            seen = self._strides.get(key)
            if isinstance(seen, tuple) and seen[3] >= 2 and self._env_steps(seen[2]):
                self._advance(self._iterations(key, r, outer, time), None, 0, None, time, 0, 0)

    def _env_steps(self, stride: int) -> bool:
        """Whether ``stride`` is the environment steps of one iteration as the run stated them: the steps each
        update is made of, a rollout's length times the environments, or a batch stated beside the environments
        (a batch of an RL run with environments is their steps)."""
        if stride in self._per_update:
            return True
        if not self._envs:
            return False
        return stride in self._batches or any(stride == e * n for e in self._envs for n in self._rollouts)

    def _made_of(self, r: Reading, text: str, time: float, outer: tuple[int, int | None, str]) -> Reading:
        """The reading of a record whose outer counter (its numbered "epoch", or an iteration or update counter
        beside a ``step``) is the run's iteration: where the named counter beside it moved by one same stride of 2
        or more on each of three records in a row while the outer one moved by exactly one, and that stride is the
        environment steps of one iteration as the run stated them (:meth:`_env_steps`: ManiSkill's and
        cleanRL-style PPO loops' ``Epoch: 26, global_step=2560000`` beside ``num_envs=2048 batch_size=102400``; a
        PPO loop's ``upd 5/488 | step 10240`` after ``488 updates of 2048 steps``), the counter counts what each
        iteration is made of, and the records' own outer counter is the step, as an update counter is over an
        environment-step counter. A counter named like a step is never demoted by its stride alone: ``Epoch 3
        finished, step 1500`` is at step 1500 whatever its epochs' lengths, where no rollout's size says its steps
        are the environment's. A batch counter within its epoch starts over (never one stride per epoch)."""
        key = r.template
        seen = self._strides.get(key)
        value_out = outer[0]
        if seen is True:
            return self._outer_reading(r, outer)
        if not isinstance(seen, tuple):
            self._strides[key] = (value_out, r.value, 0, 0)
            return r
        epoch, value, stride, alike = seen
        moved = r.value - value
        if value_out == epoch + 1 and moved >= 2:
            alike = alike + 1 if moved == stride else 1
            if alike < 2 or not self._env_steps(moved):
                self._strides[key] = (value_out, r.value, moved, alike)
                self._latest[key] = (r, outer, time)  # the sizes may be stated after (a settings line read late)
                return r
            return self._iterations(key, r, outer, time)
        if (value_out, r.value) != (epoch, value):  # not a copy of the record before (another rank's)
            self._strides[key] = (value_out, r.value, 0, 0)
        return r

    def _iterations(self, key: str, r: Reading, outer: tuple[int, int | None, str], time: float) -> Reading:
        """Record ``r`` of template ``key`` read by its outer counter from now on (:meth:`_made_of`)."""
        self._strides[key] = True
        self._latest.pop(key, None)
        self._parts.add(r.name)  # that name counts the environment's steps on every record that shows it
        if self._series.pop(key, None) is self._primary:  # its series so far: what the iterations were made of
            self._primary = self._choose()
        read = self._outer_reading(r, outer)
        self._advance(replace(read, value=outer[0] - 1), None, 0, None, time, 0, 0)  # from the record before
        return read

    def _outer_reading(self, r: Reading, outer: tuple[int, int | None, str]) -> Reading:
        """A record's outer counter read as its counter (see :meth:`_made_of`), named as the line writes it."""
        value, total, name = outer
        return Reading(f"{r.template}|outer", name, value, total, None, None, r.base, r.speed)

    def _advance(
        self, r: Reading, epoch: int | None, base: int, epochs: int | None, time: float, kind: int, order: int
    ) -> bool:
        """One reading of a series (made on its first): True when it moved the run's step on."""
        self._version += 1
        g = self._global(r, epoch, base)
        s = self._series.get(r.template)
        if s is None:
            s = _known_record(self._series, r.template)
        if s is None:
            if len(self._series) >= _MAX_SERIES:
                return False
            s = self._series[r.template] = _Series(r, epoch, time, kind, order)
            s.step = g
            s.since = (time, g)
            s.epochs = epochs
            if not s.header:
                return False
            self._primary = self._choose()
            return self._primary is s
        s.epochs = epochs or s.epochs
        if r.speed is not None:
            s.speed = r.speed
        # the epoch advanced since its last record, or an epoch was first shown since (a log that begins in an
        # epoch's tail, before the next one's `Epoch:  7` header)
        advanced_epoch = epoch is not None and (s.epoch is None or epoch > s.epoch)
        before = s.step
        if (
            epoch is not None
            and r.total
            and r.total == s.total
            and r.name not in _PER_EPOCH
            and (s.per_epoch or (advanced_epoch and r.value <= s.last))
        ):
            # a named i/N beside a bare epoch number that starts over when the epoch advances (`epoch 2 batch 19/20`):
            # a batch index within the epoch, whatever its name, placed by its epoch as a bar's i/N is
            s.per_epoch = True
            g = self._global(replace(r, name="fraction"), epoch, base)
            if g <= s.step:
                return False  # a copy, or a rank lagging behind
            s.step, s.last = g, r.value
        elif g != r.value and (s.whole or (advanced_epoch and r.value > s.last and s.last > s.low)):
            # an i/N beside the epoch that did not start over as the epoch advanced: it counts the run's steps
            if not s.whole:
                s.whole = True
                s.step = s.last
            if r.value <= s.step:
                return False  # a copy, or a rank lagging behind
            s.step, s.last = r.value, r.value
        elif g != r.value:  # a per-epoch counter placed by its epoch
            if g <= s.step:
                return False  # a copy, or a rank lagging behind
            s.step, s.last = g, r.value
        elif r.value > s.last:
            s.last = r.value
            s.step = s.offset + r.value
        elif r.value <= s.last and advanced_epoch:
            s.by_epoch += r.total is None
            s.offset = s.step  # the counter starts over each epoch: the epochs before are added
            s.last = r.value
            s.step = s.offset + r.value
        elif r.value < s.last and r.value <= s.low + 1:
            s.resets += 1  # it started over: a relaunch (once), or a loop that is not the training steps
            s.last = s.low = r.value
            s.offset = 0
            s.step = r.value
            s.since = (time, r.value)
            s.epoch = epoch
            return False
        else:
            if r.value < s.last:
                s.backs += 1
            return False  # a copy (another rank, another file with the same output) or one lagging behind
        # how far it moved, not how many of its lines moved it: a run of a bar's redraws reaches here by its first
        # and last lines only (the event counter passes over the ones between), and counts as far as all of them
        moved = max(1, s.step - before)
        s.advances += moved
        s.least = moved if not s.moves else min(s.least, moved)
        s.moves += 1
        s.epoch = epoch
        self._primary = self._choose()
        return self._primary is s

    def _choose(self) -> _Series | None:
        """The run's step: a series a reader knows before a learned field, then by the field's class; the one that
        moved furthest among those a reader knows (a run of redraws counts as far as it went), the one that moved
        on more records among learned fields, then by its name (``_name_rank``), then the first in its record.

        A record of two lines whose named counter moved by exactly one on every record (``Training Step: 12``) and
        whose other counter moved as often, never more, by two or more each time (``iter: 00768/55000``, the samples
        of the epoch's batches so far): the one counting by one is the step, and the other counts what each step is
        made of (samples, micro-batches, frames), as an update counter is over an environment-step counter. A counter
        moving by a stride alone is never demoted: only where a step counter moved by one beside it."""
        by_one = max(
            (o.moves for o in self._series.values() if _counts_by_one(o)),
            default=0,
        )
        best: _Series | None = None
        best_key: tuple[int, int, int, int] | None = None
        for s in self._series.values():
            if (not s.advances and not s.header) or s.resets >= 2 or (s.kind and s.backs > s.moves):
                continue  # a learned field that went back more often than on is no counter (a thread's id)
            kind = s.kind
            if self._parts and s.name.lstrip("~").lower() in self._parts:
                kind = 3  # a counter of the environment's steps (_made_of), on whichever record shows it
            elif by_one and s.kind == 0 and s.least >= 2 and s.moves <= by_one:
                kind = 3  # what the steps counted by one are made of
            key = (kind, -(s.advances if s.kind == 0 else s.moves), _name_rank(s), s.order)
            if best_key is None or key < best_key:
                best, best_key = s, key
        return best

    def source(self) -> str | None:
        """The field the run's step is read from (its name as the lines write it; "a bar", "a [e][i/N] pair", "a
        counter leading each record", "an unnamed counter", "a `batch` counted within each epoch"), for the report to
        say which it read."""
        s = self._primary
        if s is None:
            return None
        names = {"pair": "a [e][i/N] pair", "fraction": "a bar's i/N", "leading": "a counter leading each record"}
        name = s.name.lstrip("~")
        if s.label:
            return s.label if s.whole else f"a `{s.label}` counted within each epoch"
        if s.per_epoch:
            return f"a `{name}` counted within each epoch"  # its lines showed it starting over as the epoch advanced
        if self._within_epochs(s):
            return f"a `{name}` counted within each epoch of {self._epoch_length} steps, as the run stated them"
        if self._by_epoch(s):
            how = "counts within each epoch" if s.within else "starts over each epoch"
            return f"the epoch (its `{name}` {how}, the epochs before not in the log)"
        return names.get(name, name or "an unnamed counter")

    def restarted(self) -> bool:
        """Whether the run's series started over (a relaunch appending to the same log) and has not moved since."""
        return self._primary is not None and self._primary.resets > 0 and self._primary.advances == 0

    def step(self) -> int | None:
        s = self._primary
        if s is None:
            return None
        if self._within_epochs(s):
            assert s.epoch is not None and self._epoch_length is not None
            base = self._first_epoch if self._first_epoch in (0, 1) else 1
            return (s.epoch - base) * self._epoch_length + s.last
        if self._by_epoch(s):
            assert s.epoch is not None
            return s.epoch
        if s.kind == 1 and not s.resets:
            # a counter named like a step is one counter on every record that names it (fairseq-lua's `0025035
            # updates` on its training, checkpoint and state lines): the furthest any of them reached
            return max(o.step for o in self._series.values() if o.kind == 1 and o.name == s.name and not o.resets)
        return s.step

    def _by_epoch(self, s: _Series) -> bool:
        """Whether the epoch is the step of ``s``, a counter with no total that starts over as the epoch advances:
        where the lines began after the run's first epoch (a log read from its middle, an excerpt: fewer starts over
        seen than epochs before), the counts of the epochs before are not known, and the epoch is what a person
        names (`Epoch[102] Batch [350]` is at epoch 102); where every epoch before was seen starting over, their
        counts are added (`epoch,batch` rows from epoch 1)."""
        return (s.by_epoch > 0 or s.within) and s.epoch is not None and s.epoch - s.by_epoch not in (0, 1)

    def speed(self) -> float | None:
        """Steps per hour, as the run's bar last measured them (None: its lines print no speed)."""
        s = self._primary
        return None if s is None else s.speed

    def since(self) -> tuple[float, int] | None:
        """(time, step) of the first line of the run's series, or of its start over: the first point of a rate
        (the time NaN where the line had none)."""
        s = self._primary
        return None if s is None else s.since

    def total(self) -> int | None:
        """The total the lines show: a global counter's, or a per-epoch counter's times the epochs. The tracker asks
        after every line: worked out again only after a series was read."""
        if self._total[0] != self._version:
            self._total = (self._version, self._work_out_total())
        return self._total[1]

    def _work_out_total(self) -> int | None:
        s = self._primary
        if s is not None and self._within_epochs(s):
            return s.epochs * self._epoch_length if s.epochs and self._epoch_length else None
        if s is not None and self._by_epoch(s):
            return s.epochs  # the step is the epoch: the epochs' total, where shown
        if s is not None and s.total is None:
            # a counter with no total of its own (OpenRLHF's `Global step 7: {…}`) takes the total of a bar that
            # stands at the same step and never started over (its `Episode [1/1]: … 7/56`); a bar seen once only
            # where that step is _BORROW_ONCE_FROM or more, where standing at it is no coincidence (PaddleNLP's
            # `global_step: 200` dicts, then its bar drawn once at `200/600` before an evaluation)
            s = next(
                (
                    o
                    for o in self._series.values()
                    if o.total and not o.resets and (o.advances or s.step >= _BORROW_ONCE_FROM) and o.step == s.step
                ),
                s,
            )
        if s is not None and s.total is None and self._stated is not None and s.step <= self._stated:
            low = s.name.lstrip("~").lower()
            if low in _STEP_NAMES or f"{low}s" in _STEP_NAMES or low == "global":
                return self._stated  # a step counter, and the total its run stated on a line of its own
        if s is None or s.total is None:
            return None
        if s.epoch is not None and (s.name in _PER_EPOCH or s.per_epoch) and not s.whole:
            return s.total * s.epochs if s.epochs else None
        return s.total


def _counts_by_one(s: _Series) -> bool:
    """Whether ``s`` is a named step counter (a reader's, not a learned field) that moved by exactly one on each of
    two records or more, never starting over (ShapeSteps._choose)."""
    return s.kind == 0 and s.name in _RANK and s.moves >= 2 and s.advances == s.moves and not s.resets


_BORROW_ONCE_FROM = 10  # a bar's one state at a counter's step this high lends it its total (a start-up bar's 2/2 not)


def holds_records(text: str) -> bool:
    """Whether ``text`` (a file's newest lines) is made of records with a counter: a template that recurs with a field
    advancing, as the shape reader follows them (a CSV's rows, a JSON line per step, ``it 517 | …``). What decides
    that a file of the run whose name says nothing (``metrics.csv``, ``progress.txt``, ``stdout``) is one of its
    logs; prose, a config, a list of paths or a dataset's rows with no advancing field are not."""
    steps = ShapeSteps()
    lines = [line for line in text.splitlines() if line.strip()][-_PROBE_LINES:]
    moved = sum(1 for line in lines if steps.feed(line))
    return moved >= 2 and steps.step() is not None


_PROBE_LINES = 200
