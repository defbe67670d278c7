# cython: boundscheck=False, wraparound=False, annotation_typing=False
"""AReaL's lines as the training and learning trackers read them: its step line, its stats table's rows, its weight
update read from disk, and the tracker rules those lines drive (a line seen at a time, a step marked, a reward kept,
a learning metric recorded), which the trackers' other formats (TRL's dicts, verl's and OpenRLHF's lines) call too.

This text is the one rule for both paths: setup.py compiles it with Cython (pure-Python mode, its C types in
``areal_lines.pxd`` beside it) where a C compiler is found, and the same .py runs as it is elsewhere. The backlog
delivers these lines by the thousand (a stats table every step), so the parsers are written by hand over ``str``
indices rather than as regular expressions: compiled, each character read is a C comparison. No negative index is
used here (wraparound is off); every index read is checked against the text's length first (boundscheck is off).

``t`` is the tracker the function reads and changes (:class:`rlwatch.logs.training.TrainingTracker` or
:class:`rlwatch.logs.learning.LearningTracker`): its parsing state is public for this module.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict, deque
from typing import Any

from rlwatch.common.state import LogLine, MetricPoint, line_ref
from rlwatch.logs import textscan, wording

__all__ = [
    "AREAL_SUFFIXES",
    "LINE_PREFIX",
    "LearningFeed",
    "Recent",
    "learning_record",
    "learning_row",
    "mark_step",
    "parse_areal_step",
    "parse_stats_row",
    "parse_weight_update",
    "record_reward",
    "reward_rank",
    "touch",
    "training_apply",
]

# canonical name -> the ends of AReaL's scoped stats keys (``ppo_actor/update/actor_loss/avg``), best first
AREAL_SUFFIXES: dict[str, tuple[str, ...]] = {
    "loss": ("update/actor_loss/avg",),
    "grad_norm": ("update/grad_norm",),
    "reward": ("task_reward/avg", "rollout/reward"),
    "kl": ("update/approx_kl/avg",),
    "entropy": ("update/entropy/avg",),
    "clip_ratio": ("no_eos_ratios/avg",),
}
_SUFFIXES = tuple(s for suffixes in AREAL_SUFFIXES.values() for s in suffixes)
# merged.log's "[actor]   ", torch's "[rank0]: ": cut from a weight-update line before it is remembered
LINE_PREFIX = re.compile(r"^(?:\s*\[[^\]]{0,40}\]:?)+\s*")
_TRAIN_STEP = wording.AREAL_TRAIN_STEP
_STEP_DONE = wording.AREAL_STEP_DONE
_AREAL_DONE = wording.AREAL_DONE
_FINISHED = tuple(wording.FINISHED)  # verl's last pprint; `ray job submit`: Job '…' succeeded
_OTHER_FORMATS = tuple(wording.OTHER_FORMATS)  # the fixed texts of the step lines the training tracker reads itself
_DISK_UPDATE = wording.AREAL_DISK_UPDATE
_UPDATE_WEIGHTS = wording.AREAL_UPDATE_WEIGHTS_KEY
_REWARD = wording.REWARD_KEY_WORD
_REWARD_BEST = wording.REWARD_BEST
_REWARD_ROLLOUT = wording.REWARD_ROLLOUT
_REWARD_ROLLOUT_ENDINGS = tuple(wording.REWARD_ROLLOUT_ENDINGS)
_VERL_STEP = wording.VERL_STEP
_METRIC_DICT = wording.METRIC_DICT
_ORDINAL_POSTFIX = wording.LEARNING_ORDINAL_POSTFIX


# Where each fixed text is looked for, one of its characters is looked for first: the rarest kind in the lines the
# trackers get (not a lowercase letter, a digit, a space, "/", "_" or "."). A stats row holds none of them, and a
# search for one character is a scan for its code unit (memchr), where a search for the text in a row (its bars
# are not Latin-1: two bytes a character) widens the text into a new buffer and tests it at each place.
def _gate(text: str) -> str:
    """The first character of ``text`` a stats row does not hold, else "" (found in any text)."""
    for c in text:
        if not (c.islower() or c.isdigit() or c in " /_."):
            return c
    return ""


_G_TRAIN_STEP = _gate(_TRAIN_STEP)
_G_AREAL_DONE = _gate(_AREAL_DONE)
_G_FINISHED = tuple(_gate(f) for f in _FINISHED)
_G_OTHER_FORMATS = tuple(_gate(f) for f in _OTHER_FORMATS)
_G_DISK_UPDATE = _gate(_DISK_UPDATE)
_G_VERL_STEP = _gate(_VERL_STEP)
_G_METRIC_DICT = _gate(_METRIC_DICT)
_G_ORDINAL_POSTFIX = _gate(_ORDINAL_POSTFIX)
# A MetricPoint is made as its dataclass's __init__ makes it, without the call: each of its three slots written by
# the slot's own descriptor (a frozen dataclass forbids only setattr). A stats table gives a point per metric per
# step, and the __init__ of a frozen dataclass is Python code, slower than the rest of the row's reading.
_new_point = object.__new__
_set_step = MetricPoint.__dict__["step"].__set__
_set_value = MetricPoint.__dict__["value"].__set__
_set_time = MetricPoint.__dict__["time"].__set__
_LIGHT = "\u2502"  # │ fancy_grid
_HEAVY = "\u2503"  # ┃ heavy grids
_PLAIN = "|"


class Recent:
    """A bounded set of recently seen keys, for deduplication that cannot grow without limit (the same output tailed
    twice). ``refresh``: a key seen again becomes the newest (the training tracker's), else it keeps its place."""

    def __init__(self, size: int = 512, *, refresh: bool = False) -> None:
        # An OrderedDict drops its oldest key in constant time; a dict's first key is found by walking past the
        # slots of the keys dropped before it.
        self.keys: OrderedDict[object, None] = OrderedDict()
        self.size = size
        self.refresh = refresh

    def add(self, key: object) -> bool:
        """True when the key is new."""
        keys = self.keys
        if key in keys:
            if self.refresh:
                keys.move_to_end(key)
            return False
        keys[key] = None
        if len(keys) > self.size:
            keys.popitem(last=False)
        return True


# ---------------------------------------------------------------------------------------------------- the lines


def _digits(text: str, i: int, n: int) -> int:
    """Where the run of ASCII digits at text[i:] ends (``[0-9]`` as ``re`` reads it: no other script's digits)."""
    while i < n:
        c = text[i]
        if c < "0" or c > "9":
            break
        i += 1
    return i


def parse_areal_step(text: str) -> tuple[int, int] | None:
    """``Epoch 2/5 Step 935/935 Train step 1870/4675 done.`` → ``(1870, 4675)``, 1-based as printed: the first
    ``Train step ([0-9]{1,12})/([0-9]{1,12}) done`` in the text."""
    n = len(text)
    k = text.find(_TRAIN_STEP)
    while k >= 0:
        a = k + len(_TRAIN_STEP)
        i = _digits(text, a, n)
        if 1 <= i - a <= 12 and i < n and text[i] == "/":
            b = i + 1
            i = _digits(text, b, n)
            if 1 <= i - b <= 12 and text.startswith(_STEP_DONE, i):
                return int(text[a : b - 1]), int(text[b:i])
        k = textscan.find(text, _TRAIN_STEP, k + 1, n)
    return None


def parse_weight_update(text: str) -> float | None:
    """``Loading weights from disk done in 10.48s.`` → ``10.48``: the first ``([0-9]{1,9}(?:\\.[0-9]{0,9})?)s``
    after the fixed text."""
    n = len(text)
    k = text.find(_DISK_UPDATE)
    while k >= 0:
        a = k + len(_DISK_UPDATE)
        i = _digits(text, a, n)
        if 1 <= i - a <= 9 and i < n:
            c = text[i]
            if c == "s":
                return float(text[a:i])
            if c == ".":
                f = _digits(text, i + 1, n)
                if f - i - 1 <= 9 and f < n and text[f] == "s":
                    return float(text[a:f])
        k = textscan.find(text, _DISK_UPDATE, k + 1, n)
    return None


def reward_rank(key: str) -> int:
    """How good a stats key is as *the* reward: 2 for the actor's task reward, 1 for the rollout reward, else 0."""
    if key.endswith(_REWARD_BEST):
        return 2
    if key == _REWARD_ROLLOUT or key.endswith(_REWARD_ROLLOUT_ENDINGS):
        return 1
    return 0


def _table_bar(text: str, light: int) -> str | None:
    """The bar that splits a stats row (``│ key │ value │ …``): the first of fancy_grid's, a heavy grid's and a
    plain pipe found three times, else None (``light``: how many of fancy_grid's the text holds)."""
    if light >= 3:
        return _LIGHT
    if text.count(_HEAVY) >= 3:
        return _HEAVY
    if text.count(_PLAIN) >= 3:
        return _PLAIN
    return None


def _has(needle: str, gate: str, text: str) -> bool:
    """``needle in text``, its gate (one of its characters, :func:`_gate`) looked for first."""
    return gate in text and needle in text


def _any_in(needles: tuple[str, ...], gates: tuple[str, ...], text: str) -> bool:
    for i in range(len(needles)):  # noqa: SIM110 (compiled, any() of a generator makes one on every call)
        if _has(needles[i], gates[i], text):
            return True
    return False


def _suffixed(text: str, a: int, b: int) -> bool:
    """Whether text[a:b] is one of AReaL's learning keys: a suffix of AREAL_SUFFIXES, alone or after a "/" (read in
    place: most keys of a row are none of them, and never become strings)."""
    last = text[b - 1]  # b > a: a key is never empty here
    for suffix in _SUFFIXES:
        m = len(suffix)
        if (
            b - a >= m
            and last == suffix[m - 1]
            and text.endswith(suffix, a, b)
            and (b - a == m or text[b - m - 1] == "/")
        ):
            return True
    return False


def _lstrip(text: str, a: int, b: int) -> int:
    """Where text[a:b].strip() begins."""
    while a < b:
        c = text[a]
        if not c.isspace():
            break
        a += 1
    return a


def _rstrip(text: str, a: int, b: int) -> int:
    """Where text[a:b].strip() ends."""
    while b > a:
        c = text[b - 1]
        if not c.isspace():
            break
        b -= 1
    return b


def parse_stats_row(text: str) -> dict[str, float]:
    """One row of AReaL's stats table (``│ key │ value │ key │ value │ …``) → the numeric pairs in it: the cells are
    ``text.split(bar)[1:-1]``, stripped, read in pairs; a key seen twice keeps its first place and its last value."""
    bar = _table_bar(text, text.count(_LIGHT))
    out: dict[str, float] = {}
    if bar is None:
        return out
    n = len(text)
    bar_c = bar  # the bar's one character (a C character compiled, converted once per row)
    a = text.find(bar)
    b = textscan.find_char(text, bar_c, a + 1, n)
    while b >= 0:
        c = textscan.find_char(text, bar_c, b + 1, n)
        if c < 0:
            break
        key = text[a + 1 : b].strip()
        if key:
            try:
                out[key] = float(text[b + 1 : c].strip())
            except ValueError:
                pass
        a = c
        b = textscan.find_char(text, bar_c, a + 1, n)
    return out


# ---------------------------------------------------------------------------------------- the training tracker


def _finite(x: float) -> bool:
    return x - x == 0.0  # NaN and ±inf give NaN


def touch(t: Any, time: float, offset: float) -> None:
    """A line seen at ``time`` (``offset``: the wall-monotonic offset when it was read)."""
    if not _finite(time):
        return
    m = time - offset
    last = t.last_line_m
    if last is None or m > last:
        t.last_line_at = time
        t.last_line_m = m


def mark_step(t: Any, time: float, counter: int, offset: float) -> None:
    """A step done at ``time``: the latest step's time, and a point of the speed (undated lines give neither)."""
    if _finite(time):
        m = time - offset
        last = t.last_step_m
        if last is None or m >= last:
            t.last_step_at = time
            t.last_step_m = m
        t.rate_points.append((time, counter))


def record_reward(t: Any, slot: int, rank: int, value: float) -> None:
    """Keep one reward per step: the best-ranked key of that step's table wins; non-finite values are skipped."""
    if not _finite(value):
        return
    if slot == t.reward_slot:
        if rank <= t.reward_slot_rank:
            return
        if t.rewards:
            t.rewards.pop()
    t.rewards.append(value)
    t.reward_slot = slot
    t.reward_slot_rank = rank


def training_apply(t: Any, offset: float) -> None:
    """Every queued line of the training tracker parsed, in order (its ``_apply_pending``, the lock held)."""
    queue = t.queue
    while queue:
        line = queue.popleft()
        try:
            _training_line(t, line, offset)
        except Exception as exc:  # a parser's bug must not stop the tracking (nor lose the rest of the queue)
            t.errors.append(f"{line_ref(line.path, line.lineno)}: {type(exc).__name__}: {exc}")


def _training_line(t: Any, line: LogLine, offset: float) -> None:
    """Every parser over one line. Each is tried only on lines holding its fixed text (a stats row holds none of
    them); other frameworks' step lines and progress known by its shape are the tracker's own methods."""
    text = line.text
    delivered: Recent = t.delivered
    if not delivered.add((line.path, line.lineno, text)):
        return
    time = line.time
    touch(t, time, offset)
    light = text.count(_LIGHT)
    if _has(_AREAL_DONE, _G_AREAL_DONE, text) or _any_in(_FINISHED, _G_FINISHED, text):
        t.finished = True  # AReaL's last line; verl's last pprint; `ray job submit`'s Job '...' succeeded
    step = parse_areal_step(text) if _has(_TRAIN_STEP, _G_TRAIN_STEP, text) else None
    if step is not None:
        _areal_step(t, line, step[0], step[1], offset)
    else:
        if _any_in(_OTHER_FORMATS, _G_OTHER_FORMATS, text):
            t.parse_other_formats(line, text, offset)  # verl, OpenRLHF, verl's bar, TRL's dicts
        if light < 3:  # not one of AReaL's stats rows
            t.parse_shape(line, text, offset)  # progress known by its shape (logs/progress_shape.py)
    bar = _table_bar(text, light)
    if bar is not None:
        timing = _UPDATE_WEIGHTS in text
        if timing or _REWARD in text:  # else the row holds no cell the tracker reads
            _tracked_stats(t, text, bar, timing)
    if _has(_DISK_UPDATE, _G_DISK_UPDATE, text):
        duration = parse_weight_update(text)
        contents: Recent = t.contents
        if duration is not None and contents.add(("update", LINE_PREFIX.sub("", text).strip())):
            t.disk_updates = True
            t.updates.append(duration)


def _areal_step(t: Any, line: LogLine, step: int, total: int, offset: float) -> None:
    last = t.areal_step
    if last is not None and step <= last:
        if line.path != t.areal_path:
            return  # a copy of the same output in another file, lagging behind
        t.rate_points.clear()  # the run restarted and appends to the same log
    t.areal_step = step
    t.areal_total = total if total > 0 else None
    t.areal_path = line.path
    t.finished = False
    mark_step(t, line.time, step, offset)


def _tracked_stats(t: Any, text: str, bar: str, timing: bool) -> None:
    """A stats row's cells the training tracker uses: reward keys (every key that :func:`reward_rank` ranks holds
    "reward") and the update-weights timing. Only those cells become strings: a row holds a dozen values and the
    tracker wants one or two of them. ``timing``: whether the row holds the update-weights key."""
    row: dict[str, float] = {}
    n = len(text)
    bar_c = bar  # the bar's one character (a C character compiled, converted once per row)
    a = text.find(bar)
    b = textscan.find_char(text, bar_c, a + 1, n)
    while b >= 0:
        c = textscan.find_char(text, bar_c, b + 1, n)
        if c < 0:
            break
        if text.find(_REWARD, a + 1, b) >= 0 or (timing and text.find(_UPDATE_WEIGHTS, a + 1, b) >= 0):
            try:
                row[text[a + 1 : b].strip()] = float(text[b + 1 : c].strip())
            except ValueError:
                pass
        a = c
        b = textscan.find_char(text, bar_c, a + 1, n)
    if not row:
        return
    slot = t.areal_step if t.areal_step is not None else t.dicts
    for key, value in row.items():
        rank = reward_rank(key)
        if rank:
            record_reward(t, slot, rank, value)
        elif key == _UPDATE_WEIGHTS and not t.disk_updates and _finite(value) and value >= 0:
            contents: Recent = t.contents
            if contents.add(("timeperf", slot)):
                t.updates.append(value)  # xccl mode logs no per-update line: the step's timing stat is the one


# ---------------------------------------------------------------------------------------- the learning tracker


class LearningFeed:
    """The learning tracker's handler of every line the counter delivers (``LearningTracker.on_line``)."""

    def __init__(self, tracker: Any) -> None:
        self.t = tracker
        self.lock = tracker.lock

    def __call__(self, line: LogLine) -> None:
        t = self.t
        with self.lock:
            delivered: Recent = t.delivered
            if not delivered.add((line.path, line.lineno, line.text)):
                return
            _learning_line(t, line)


def _learning_line(t: Any, line: LogLine) -> None:
    """AReaL's step line and stats rows here; a line holding another format's fixed text goes to the tracker's
    ``parse_other_formats`` (which ends in :func:`learning_row` where none of them is read from it)."""
    text = line.text
    if _has(_TRAIN_STEP, _G_TRAIN_STEP, text):
        areal = parse_areal_step(text)
        if areal is not None:
            t.areal_step = areal[0]
        return
    if (
        _has(_VERL_STEP, _G_VERL_STEP, text)
        or _has(_METRIC_DICT, _G_METRIC_DICT, text)
        or _has(_ORDINAL_POSTFIX, _G_ORDINAL_POSTFIX, text)
    ):
        t.parse_other_formats(line)
        return
    learning_row(t, line, text)


def learning_row(t: Any, line: LogLine, text: str) -> None:
    """A stats row's learning metrics (``canonical_suffix`` of the row): only keys some suffix names are read."""
    bar = _table_bar(text, text.count(_LIGHT))
    if bar is None:
        return
    values: dict[str, float] = {}
    n = len(text)
    bar_c = bar  # the bar's one character (a C character compiled, converted once per row)
    a = text.find(bar)
    b = textscan.find_char(text, bar_c, a + 1, n)
    while b >= 0:
        c = textscan.find_char(text, bar_c, b + 1, n)
        if c < 0:
            break
        ka = _lstrip(text, a + 1, b)
        kb = _rstrip(text, ka, b)
        if ka < kb and _suffixed(text, ka, kb):
            va = _lstrip(text, b + 1, c)
            try:
                number = float(text[va : _rstrip(text, va, c)])
            except ValueError:
                pass
            else:
                key = text[ka:kb]
                values[key] = number
        a = c
        b = textscan.find_char(text, bar_c, a + 1, n)
    if not values:
        return
    found: dict[str, tuple[str, float]] = {}
    for name, suffixes in AREAL_SUFFIXES.items():
        chosen = _first_key(values, suffixes)
        if chosen is not None:
            found[name] = (chosen, values[chosen])
    if not found:
        return
    step = t.areal_step if t.areal_step is not None else t.ordinal
    contents: Recent = t.contents
    if contents.add(("areal", step, tuple(sorted(found)))):
        learning_record(t, step, found, line.time)


def _first_key(values: dict[str, float], suffixes: tuple[str, ...]) -> str | None:
    """The first key of the row that the first suffix naming one ends (``k == suffix`` or ``…/suffix``)."""
    for suffix in suffixes:
        m = len(suffix)
        for key in values:
            n = len(key)
            if key.endswith(suffix) and (n == m or key[n - m - 1] == "/"):
                return key
    return None


def learning_record(t: Any, step: int, found: dict[str, tuple[str, float]], time: float) -> None:
    """Each metric's value at ``step``: the same step told again (a table row, a copy) replaces the point."""
    series_of = t.series
    when = time if _finite(time) else math.nan
    for name, pair in found.items():
        key, value = pair
        series = series_of.get(name)
        if series is None:
            series = series_of[name] = deque(maxlen=t.history)
        if series and series[len(series) - 1].step == step:
            series.pop()
        point = _new_point(MetricPoint)
        _set_step(point, step)
        _set_value(point, value)
        _set_time(point, when)
        series.append(point)
        t.keys[name] = key
    t.version += 1
