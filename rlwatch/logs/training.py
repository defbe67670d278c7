"""Training progress from the trainer's own log lines: step, total, reward, speed, weight updates, stalls.

The log engine calls the ``on_*`` methods for lines of the ``step``, ``reward`` and ``weight_update`` kinds and
``on_any_line`` for every line. Every handler runs the same parsers over the line, so it does not matter which
subscription delivers a line, or whether one line is delivered to several of them.

The same output is often tailed twice (AReaL v1 writes ``<role>.log`` and ``merged.log``; wandb copies stdout to
``output.log``), so content that identifies itself is deduplicated: an AReaL step by its number, a TRL metric dict
by its text, a disk weight-update line by its (timestamped) text. A step number that does not advance in the *same*
file is a restarted run appending to its log, and starts the speed estimate afresh.
"""

from __future__ import annotations

import ast
import io
import math
import re
import threading
import tokenize
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

from rlwatch.common.clock import Clock
from rlwatch.common.state import EventSummary, LogLine, Severity, TrainingState, line_ref
from rlwatch.logs import wording
from rlwatch.logs.areal_lines import Recent, mark_step, record_reward, touch, training_apply
from rlwatch.logs.progress_shape import CANDIDATE, ShapeSteps, header_of, states_sizes
from rlwatch.logs.tailer import Chunk
from rlwatch.logs.timestamps import parse_time

_RECORD_GAPS = 3  # gaps between step records before their median is a cadence (one long gap is an outlier)
# verl's console logger: `step:12 - key:value - …` at the start of the message (after a Ray prefix
# `(TaskRunner pid=N) `), values as pformat or `{v:.3f}` (verl/utils/logger/aggregate_logger.py).
_VERL_STEP = re.compile(r"(?:^|\) )step:([0-9]{1,12}) - (.*)$")
_VERL_PAIR = re.compile(r"(?:^| - )([^\s:]+):([^\s]+)")
_VERL_REWARDS = ("critic/rewards/mean", "critic/score/mean")
# OpenRLHF: `✨ Global step 12: {…}` (openrlhf/trainer/ppo_trainer.py); its reward keys, best first.
_ORLHF_STEP = re.compile(re.escape(wording.ORLHF_GLOBAL_STEP) + r"([0-9]{1,12}): \{")
_ORLHF_REWARDS = ("rollout/reward_mean", "reward")
# verl's bar (ray_trainer.py fit()): `Training Progress:  33%|███▎      | 4/12 [00:04<00:09,  1.17s/it]`.
_VERL_BAR = re.compile(
    re.escape(wording.VERL_BAR) + r"\s+\d+%\|[^|]*\| *([0-9]{1,12})/([0-9]{1,12}) \[[^\]]*?([0-9.]+)(s/it|it/s)?\]"
)
_VERL_TOTAL = re.compile(re.escape(wording.VERL_TOTAL) + r"([0-9]{1,12})")
_BARE_FLOAT = re.compile(r"\b(?:nan|inf)\b")
MAX_DICT_CHARS = 64_000
MAX_NESTING = 64
_RECENT = 512


# Where the step was read from, in the words the report and the panel say it with (TrainingState.step_source).
_AREAL_SOURCE = "AReaL's `Train step N/M`"
_VERL_SOURCE = "verl's `step:N`"
_ORLHF_SOURCE = "OpenRLHF's `Global step N`"
_TAIL_LINES = 12
_CANDIDATE = re.compile(CANDIDATE)  # what the counter hands the tracker itself (the _steplike kind's literals)
_TAIL_MAX_BYTES = 4096


def _tail_lines(chunk: Chunk, now: float) -> list[LogLine]:
    """The last ``_TAIL_LINES`` complete lines of ``chunk`` (a line over ``_TAIL_MAX_BYTES`` ends the look back), in
    order, each with its own time, else ``now`` when the chunk was appended while followed, else NaN (a backlog's
    undated line)."""
    data = chunk.data
    end = len(data)
    if chunk.continued:
        end = data.rfind(b"\n") + 1
        if end <= 0:
            return []
    lineno = chunk.first_lineno + chunk.nlines - 1
    spans: list[tuple[int, int, int]] = []
    pos = end
    while len(spans) < _TAIL_LINES and pos > 0:
        stop = pos - 1 if data[pos - 1] == 10 else pos
        start = data.rfind(b"\n", 0, stop) + 1
        if (start == 0 and chunk.continues_line) or stop - start > _TAIL_MAX_BYTES:
            break
        spans.append((start, stop, lineno))
        lineno -= 1
        pos = start
    out: list[LogLine] = []
    for start, stop, number in reversed(spans):
        text = data[start:stop].decode("utf-8", "replace").rstrip("\r")
        if not text.strip():
            continue
        stamp = parse_time(text, now)
        when = stamp if stamp is not None else now if chunk.backlog_mtime is None else math.nan
        out.append(LogLine(chunk.path, number, text, when))
    return out


_HEAD_LINES = 16


def _head_headers(chunk: Chunk) -> list[LogLine]:
    """The header lines among a file's first ``_HEAD_LINES`` lines (a CSV's or TSV's column names, a table's head,
    a settings line stating a rollout's size: ``num_envs=2048 batch_size=102400``),
    where ``chunk`` begins the file: read after the fact, a file's last lines are its records, and their columns are
    named by a header far above them (``ep,frames,ret`` names the frames a count of environment steps). A header
    holding a step-like literal reaches the tracker through the counter instead."""
    if chunk.first_lineno != 1 or chunk.continues_line:
        return []
    data = chunk.data
    out: list[LogLine] = []
    start = 0
    for number in range(1, _HEAD_LINES + 1):
        stop = data.find(b"\n", start, start + _TAIL_MAX_BYTES)
        if stop < 0:
            break
        text = data[start:stop].decode("utf-8", "replace").rstrip("\r")
        if (header_of(text) is not None or states_sizes(text)) and _CANDIDATE.search(text) is None:
            out.append(LogLine(chunk.path, number, text, math.nan))
        start = stop + 1
    return out


def _to_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):
        return None


def _literal(body: str) -> object:
    try:
        return ast.literal_eval(body)
    except Exception:  # literal_eval raises many types (ValueError, SyntaxError, MemoryError, RecursionError, …)
        return None


def _quote_bare_floats(body: str) -> str:
    """``str()`` of a dict prints a diverged loss as a bare ``nan`` / ``inf``, which is no literal: quote those names.

    Done with the tokenizer so a ``nan`` inside a string value is left alone.
    """
    try:
        tokens: list[tuple[int, str]] = []
        for tok in tokenize.generate_tokens(io.StringIO(body).readline):
            if tok.type == tokenize.NAME and tok.string in ("nan", "inf"):
                sign = ""
                if tokens and tokens[-1] == (tokenize.OP, "-"):
                    tokens.pop()
                    sign = "-"
                tokens.append((tokenize.STRING, repr(sign + tok.string)))
            else:
                tokens.append((tok.type, tok.string))
        return tokenize.untokenize(tokens)
    except Exception:  # the tokenizer rejects garbage with several error types
        return body


def parse_metrics(text: str) -> dict[str, float] | None:
    """A transformers ``str(logs)`` dict on a line → its numeric entries; ``None`` when there is no such dict.

    Values may be numbers or strings (``'0.0123'`` in some transformers builds); entries that are not numbers are
    dropped. Non-finite values are kept: the caller decides what a ``nan`` loss means.
    """
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end <= start or end - start > MAX_DICT_CHARS:
        return None
    body = text[start : end + 1]
    if sum(body.count(c) for c in "([{") > MAX_NESTING:
        return None
    data = _literal(body)
    if data is None and _BARE_FLOAT.search(body):
        data = _literal(_quote_bare_floats(body))
    if not isinstance(data, dict):
        return None
    out: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(key, str):
            number = _to_float(value)
            if number is not None:
                out[key] = number
    return out


@dataclass(frozen=True, slots=True)
class _Hint:
    global_step: int  # the step of the dict numbered dicts_at_hint
    dicts_at_hint: int  # metric dicts counted up to that step: the checkpoint's own last log, or those counted
    # when the checkpoint was noticed (until its last log is seen among the dicts)
    checkpoint: int  # the checkpoint's global_step (the same one passed again changes nothing)
    anchored: bool = False


class TrainingTracker:
    """Accumulates training progress from matched log lines; ``state()`` turns it into a :class:`TrainingState`.

    Step numbers: AReaL lines give the 1-based step and the total directly. TRL's stdout has no step number, so
    each metric dict (one per ``logging_steps``) advances a counter; with a checkpoint hint
    (:meth:`set_checkpoint_hint`, from ``trainer_state.json``) the step is the hint's ``global_step`` plus
    ``logging_steps`` per dict logged since, otherwise the number of dicts logged.
    Thread-safe: the tailer feeds it while the engine reads it. Delivered lines are queued (the handlers are the
    queue's own ``append``: the event counter calls it directly, with no Python in between) and parsed in order
    before any read (:meth:`_apply_pending`), by :mod:`rlwatch.logs.areal_lines` (compiled where it is built);
    ``errors`` keeps the last few that a parser failed on.

    Its parsing state (``areal_step``, ``rewards``, ``contents``, ``delivered``, ``queue``, ``lock`` …) and the
    parsers ``parse_other_formats`` and ``parse_shape`` are public because ``areal_lines``, which reads every line
    delivered, reads and writes them; every other reader goes through :meth:`state`.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        stall_s: float,
        weight_update_timeout_s: float,
        total_steps: int | None = None,
        history: int = 50,
    ) -> None:
        self._clock = clock
        self._stall_s = stall_s
        self._timeout_s = weight_update_timeout_s
        self._configured_total = total_steps
        self.lock = threading.Lock()
        self.queue: deque[LogLine] = deque()  # delivered, not parsed yet (see _apply_pending)
        # The handlers of the ``step``, ``_reward``, ``weight_update`` and ``_finished`` kinds: any of them, since
        # all run the same parsers. A line is queued, and parsed with the rest before anything reads or changes the
        # tracker (:meth:`_apply_pending`).
        self.on_line: Callable[[LogLine], None] = self.queue.append
        self.on_step = self.on_reward = self.on_weight_update = self.on_line
        self.errors: deque[str] = deque(maxlen=20)  # lines a parser raised on (a bug): the rest are still parsed
        self.delivered = Recent(_RECENT, refresh=True)
        self.contents = Recent(_RECENT, refresh=True)
        self.last_line_at: float | None = None
        self.last_step_at: float | None = None
        # The same two times on the monotonic scale (wall time minus the wall-monotonic offset when they were seen),
        # so that a wall clock stepped by NTP or by hand can neither fake a stall nor hide one.
        self.last_line_m: float | None = None
        self.last_step_m: float | None = None
        self.areal_step: int | None = None
        self.areal_total: int | None = None
        self.areal_path: str | None = None
        self.dicts = 0
        self._hint: _Hint | None = None
        self._anchor: tuple[int, float, float | None] | None = None  # the checkpoint's last log, not seen yet
        self._dict_keys: OrderedDict[tuple[float, float | None], int] = OrderedDict()  # (epoch, loss) -> dicts
        self._hint_total: int | None = None
        self._logging_steps: int | None = None
        self.rate_points: deque[tuple[float, int]] = deque(maxlen=max(2, history))
        self.rewards: deque[float] = deque(maxlen=history)
        self.reward_slot: int | None = None
        self.reward_slot_rank = -1
        self.updates: deque[float] = deque(maxlen=history)
        self.disk_updates = False
        self.finished = False
        self._bar_rate: float | None = None  # steps per hour from a progress bar's own speed (verl's tqdm)
        # Progress known by its shape (rlwatch/logs/progress_shape.py): the step of any framework's recurring step
        # line, used where none of the frameworks above has said one; its own rate points, never mixed with theirs.
        self._shape = ShapeSteps()
        self._shape_step: int | None = None
        self._shape_scale = 0  # the shape reader's scale the rate points were read in (ShapeSteps.scale)
        self._shape_total: int | None = None
        self._shape_points: deque[tuple[float, int]] = deque(maxlen=max(2, history))
        self._shape_records: deque[float] = deque(maxlen=max(2, history))  # when each record that moved it came
        # The records read by their shape that moved the run's step on: the ``step`` events of a run whose steps no
        # framework of the catalogue prints (with_shape_steps), so that events.step counts what training.last_step
        # says. Their times where the lines carried one; the latest dated record.
        self._shape_steps = 0
        self._shape_files: dict[str, int] = {}
        self._shape_first: float | None = None
        self._shape_last: float | None = None
        self._shape_line: LogLine | None = None
        # the numbered step line of which framework said the step (AReaL's, which areal_lines reads, where it is
        # not this one's step)
        self._numbered_source: tuple[int, str] | None = None

    # -- feeding ---------------------------------------------------------------------------------------------

    def on_any_line(self, time: float) -> None:
        with self.lock:
            self._apply_pending()
            self._touch(time)

    def on_chunk(self, chunk: Chunk, time: float) -> None:
        """A chunk was counted (``time``: now): :meth:`on_any_line`, and the chunk's last few complete lines read by
        their shape.

        The counter hands the tracker only lines holding one of the step-like literals (progress_shape's
        CANDIDATE_LITERALS): a record with none (CatBoost's ``34:  learn: …``, a CSV or TSV row, a JSON line whose
        counter is ``epoch``) would never be seen. The newest lines of every chunk are what a run wrote last: read
        live, a chunk is what was appended since the last poll, so each record is among them as it is written; read
        after the fact, the file's last lines are its last records. Bounded: ``_TAIL_LINES`` lines of at most
        ``_TAIL_MAX_BYTES`` per chunk (a 1 MiB chunk), and only the shape reader runs over them (a line the counter
        delivered is not read twice).

        The lines of both paths are read in the file's order (:meth:`_apply_before`): the counter has already queued
        this chunk's step-like lines, and a record read after a line below it (an epoch's header) would look newer
        than it (its batch counter starting over with no epoch advancing)."""
        with self.lock:
            self._touch(time)
            offset = self._offset()
            own: dict[int, LogLine] = {}
            for line in _head_headers(chunk) + _tail_lines(chunk, time):
                if line.text.count("\u2502") >= 3:
                    continue  # one of AReaL's stats rows, which the shape reader never reads (see areal_lines)
                if _CANDIDATE.search(line.text) is not None:
                    # the counter delivers it, in its order: a bar's last redraw read here ahead of the redraws
                    # it still holds made the bar start over (149 of 150 at the end of a finished run)
                    continue
                own[line.lineno] = line  # a line among both the head and the tail: read once, with its time
            for lineno in sorted(own):
                line = own[lineno]
                self._apply_before(line, offset)
                try:
                    if self.delivered.add((line.path, line.lineno, line.text)):
                        self.parse_shape(line, line.text, offset)
                except Exception as exc:  # a parser's bug must not stop the tracking
                    self.errors.append(f"{line_ref(line.path, line.lineno)}: {type(exc).__name__}: {exc}")
            self._apply_pending()

    def _apply_before(self, line: LogLine, offset: float) -> None:
        """Parse the queued lines that come before ``line`` (the lock held); those of its file below it stay queued.
        The queue ends with the lines the counter delivered from ``line``'s chunk, in order: the ones below it are
        at its end."""
        queue = self.queue
        below: list[LogLine] = []
        while queue and queue[-1].path == line.path and queue[-1].lineno > line.lineno:
            below.append(queue.pop())
        if queue:
            training_apply(self, offset)
        queue.extend(reversed(below))

    def set_checkpoint_hint(
        self,
        global_step: int | None,
        max_steps: int | None,
        logging_steps: int | None = None,
        last_logged: tuple[int, float, float | None] | None = None,
    ) -> None:
        """The step, total and logging interval from the latest ``trainer_state.json`` (any may be unknown), and
        its last training log (step, epoch, loss), for logs whose dicts carry no step (the log's own counter, a
        bar, wins over all this: :meth:`_step_now`).

        The dict the Trainer printed for that last log is found among those counted (by its epoch and loss): its
        step is known, and the dicts after it count on from it. Until it is seen, the dicts counted when the
        checkpoint was noticed stand for its ``global_step`` (a checkpoint read a few dicts late would otherwise
        put the step behind the log). Calling again with the same checkpoint changes nothing, so the engine may pass
        the hint on every scan.
        """
        with self.lock:
            self._apply_pending()  # the hint counts the metric dicts logged before it
            self._hint_total = max_steps if max_steps is not None and max_steps > 0 else None
            if logging_steps is not None and logging_steps > 0:
                self._logging_steps = logging_steps
            if global_step is None or global_step < 0:
                return
            if self._hint is None or self._hint.checkpoint != global_step:
                self._hint = _Hint(global_step, self.dicts, global_step)
                self._anchor = None
                if last_logged is not None and 0 <= last_logged[0] <= global_step:
                    self._anchor = last_logged
                    self._anchor_to(self._dict_keys.get((last_logged[1], last_logged[2])))

    def _anchor_to(self, dicts: int | None) -> None:
        """The checkpoint's last log is the dict numbered ``dicts`` (None: not seen yet)."""
        if dicts is None or self._anchor is None or self._hint is None:
            return
        self._hint = _Hint(self._anchor[0], dicts, self._hint.checkpoint, anchored=True)
        self._anchor = None

    # -- parsing ---------------------------------------------------------------------------------------------

    def _offset(self) -> float:
        return self._clock.time() - self._clock.monotonic()

    def _touch(self, time: float, offset: float | None = None) -> None:
        """Note a line seen at ``time`` (``offset``: the wall-monotonic offset, read now if not given)."""
        touch(self, time, self._offset() if offset is None else offset)

    def _apply_pending(self) -> None:
        """Parse the queued lines in order (the lock held). A backlog delivers a line every few microseconds, and
        parsing a batch in one go is measurably quicker than parsing each line between two of the counter's; the
        clock offset is read once per batch. Every method that reads or changes the tracker calls this first, so
        nothing can tell a queued line from a parsed one. The engine calls it after every chunk, which bounds the
        queue by what one chunk delivers."""
        queue = self.queue
        if not queue:
            return
        training_apply(self, self._offset())  # every parser over each line (rlwatch/logs/areal_lines.py)

    def parse_other_formats(self, line: LogLine, text: str, offset: float) -> None:
        """The step and metric lines of every framework but AReaL's step line (verl, OpenRLHF, verl's bar, TRL's
        dicts), for lines holding one of their fixed texts (areal_lines reads every line and calls this): rarer than
        AReaL's rows."""
        if wording.VERL_STEP in text and (verl := _VERL_STEP.search(text)) is not None:
            self._on_verl_step(line, int(verl.group(1)), verl.group(2), offset)
        elif wording.ORLHF_GLOBAL_STEP in text and (orlhf := _ORLHF_STEP.search(text)) is not None:
            self._on_numbered_step(line, int(orlhf.group(1)), None, offset, source=_ORLHF_SOURCE)
            metrics = parse_metrics(text)
            reward = next((metrics[k] for k in _ORLHF_REWARDS if metrics and k in metrics), None)
            if reward is not None:
                record_reward(self, int(orlhf.group(1)), 3, reward)
        elif wording.VERL_BAR in text or wording.VERL_TOTAL in text:
            self._on_bar(text)
        elif wording.METRIC_DICT in text:
            metrics = parse_metrics(text)
            if metrics is not None:
                self._on_metrics(line, metrics, offset)

    def parse_shape(self, line: LogLine, text: str, offset: float) -> None:
        """A step known by its shape (any framework's recurring step line). It is the run's step only while no
        framework of the catalogue has said one: those know their step for sure. areal_lines calls this for a line
        that is no stats row."""
        time = line.time
        if not self._shape.feed(text, time):
            if self._shape_step is not None:
                self._shape_total = self._shape.total()  # a bar beside the step's counter may show the total
            return
        step = self._shape.step()
        if step is None:
            return
        rescaled = self._shape.scale != self._shape_scale  # the epochs' length learned: a step of another scale
        if rescaled or self._shape.restarted() or (self._shape_step is not None and step < self._shape_step):
            self._shape_points.clear()  # the run started over, appending to the same log
            self._shape_records.clear()
            self._shape_scale = self._shape.scale
        self._shape_step = step
        self._shape_total = self._shape.total()
        if self.areal_step is not None:
            return
        if not self.dicts:  # TRL's dicts say when the run finished (train_runtime); its bar's last redraw does not
            self.finished = False
        self._shape_steps += 1
        self._shape_files[line.path] = self._shape_files.get(line.path, 0) + 1
        if not math.isfinite(time):
            if self._shape_last is None:
                # No record has a time of its own (a backlog of `it 517 | loss …`): the latest read is the step's
                # line, so a log that ends in it is known to end in progress (diagnosis.health.last_progress)
                self._shape_line = line
            return
        self._shape_first = time if self._shape_first is None else min(self._shape_first, time)
        if self._shape_last is None or time >= self._shape_last:
            self._shape_last, self._shape_line = time, line
        m = time - offset
        if self.last_step_m is None or m >= self.last_step_m:
            self.last_step_at, self.last_step_m = time, m
        since = self._shape.since()
        if not self._shape_points and since is not None and since[0] < time and since[1] < step:
            self._shape_points.append(since)  # the rate begins at the series' first line (a run of redraws
            # reaches here by its first and last lines only)
        self._shape_points.append((time, step))
        self._shape_records.append(time)

    def _on_numbered_step(
        self, line: LogLine, step: int, total: int | None, offset: float, *, mark: bool = True, source: str
    ) -> None:
        """A step that carries its number (verl, OpenRLHF): counted like AReaL's (a copy of the same output in
        another file lags and is ignored; a number going back in the same file is a relaunch appending to it)."""
        last = self.areal_step
        if last is not None and step <= last:
            if line.path != self.areal_path:
                return
            self.rate_points.clear()
        self.areal_step = step
        if total:
            self.areal_total = total
        self.areal_path = line.path
        self._numbered_source = (step, source)
        self.finished = False
        if mark:
            mark_step(self, line.time, step, offset)

    def _on_verl_step(self, line: LogLine, step: int, rest: str, offset: float) -> None:
        """verl's metric line. One holding only validation metrics (``val-…`` keys) is the validation before
        training: it says which step the run starts from (0, or the step a resume loaded), not a step done now."""
        pairs = dict(_VERL_PAIR.findall(rest))
        validation = bool(pairs) and all(k.startswith("val-") for k in pairs)
        if validation:
            if step > 0:
                self._on_numbered_step(line, step, None, offset, mark=False, source=_VERL_SOURCE)
            return
        self._on_numbered_step(line, step, None, offset, source=_VERL_SOURCE)
        for key in _VERL_REWARDS:
            value = _to_float(pairs.get(key, "").replace("np.float64(", "").rstrip(")"))
            if value is not None:
                record_reward(self, step, 3, value)
                break

    def _on_bar(self, text: str) -> None:
        """verl's progress bar: the total steps, and the speed tqdm measured (the only speed an undated log has)."""
        bar = _VERL_BAR.search(text)
        if bar is not None:
            total = int(bar.group(2))
            if total > 0 and self._configured_total is None:
                self.areal_total = total
            speed = _to_float(bar.group(3))
            if speed and bar.group(4) and int(bar.group(1)) > 0:
                self._bar_rate = 3600.0 / speed if bar.group(4) == "s/it" else 3600.0 * speed
            return
        m = _VERL_TOTAL.search(text)
        if m is not None and int(m.group(1)) > 0:
            self.areal_total = int(m.group(1))

    def _on_metrics(self, line: LogLine, metrics: dict[str, float], offset: float) -> None:
        if "train_runtime" in metrics:
            self.finished = True
        if "loss" not in metrics and "reward" not in metrics:
            return
        if not self.contents.add(("metrics", line.text[line.text.find("{") :])):
            return
        self.dicts += 1
        self.finished = False
        epoch = metrics.get("epoch")
        if epoch is not None:
            key = (epoch, metrics.get("loss"))
            self._dict_keys[key] = self.dicts
            if len(self._dict_keys) > _RECENT:
                self._dict_keys.popitem(last=False)
            if self._anchor is not None and key == (self._anchor[1], self._anchor[2]):
                self._anchor_to(self.dicts)
        if self.areal_step is None:
            mark_step(self, line.time, self.dicts, offset)
        reward = metrics.get("reward")
        if reward is not None:
            record_reward(self, self.dicts, 3, reward)

    # -- reading ---------------------------------------------------------------------------------------------

    def _step_now(self) -> int | None:
        """One step, from the best evidence: a framework's own numbered step line; else the counter the log shows
        (a bar, a step-like line: TRL's dicts carry no number, the Trainer's own bar does); only where the log has
        no counter, the checkpoint's ``global_step`` and the dicts logged since; else the dicts counted."""
        if self.areal_step is not None:
            return self.areal_step
        if self._shape_step is not None:
            return self._shape_step
        hint = self._hint
        if hint is not None:
            return hint.global_step + (self.dicts - hint.dicts_at_hint) * (self._logging_steps or 1)
        return self.dicts or None

    def _source_now(self) -> str | None:
        """Which field :meth:`_step_now` read the step from (progress_shape's ShapeSteps.source for a step known by
        its shape: a field's name as the lines write it, else what kind of counter)."""
        if self.areal_step is not None:
            said = self._numbered_source
            return said[1] if said is not None and said[0] == self.areal_step else _AREAL_SOURCE
        if self._shape_step is not None:
            field = self._shape.source()
            if field is None:
                return None
            return field if field.startswith(("a ", "an ", "the ")) else f"`{field}`"
        if self._hint is not None:
            return "the checkpoint's global_step and the metric dicts logged since"
        return "the metric dicts logged" if self.dicts else None

    def with_shape_steps(self, events: dict[str, EventSummary]) -> dict[str, EventSummary]:
        """``events`` with the records read by their shape counted as ``step`` events, where the catalogue's step
        kind counted none: one step everywhere (events.step, training.last_step). Their times only where the lines
        carried one (approximate, no bound, otherwise); the latest dated record as the kind's recent line."""
        have = events.get("step")
        if have is not None and have.count:
            return events
        with self.lock:
            self._apply_pending()
            if not self._shape_steps or self.areal_step is not None or self._shape_step is None:
                return events
            first, last = self._shape_first, self._shape_last
            summary = EventSummary(
                kind="step",
                severity=have.severity if have is not None else Severity.INFO,
                count=self._shape_steps,
                first=first,
                last=last,
                rate_per_min=0.0,
                streak=0,
                files=dict(self._shape_files),
                recent=(self._shape_line,) if self._shape_line is not None else (),
                approximate=last is None,
            )
        return {**events, "step": summary}

    def _total_now(self) -> int | None:
        if self._configured_total is not None:
            return self._configured_total
        if self.areal_total is not None:
            return self.areal_total
        if self._hint_total is None and (self.areal_step is None or self.areal_step == self._shape_step):
            # a framework's numbered step line with no total of its own (OpenRLHF's `Global step 7`) takes the total
            # of the counter that stands at the same step (its episode bar's `7/56`): one step, one total
            return self._shape_total
        return self._hint_total

    def _steps_per_hour(self) -> tuple[float | None, str | None]:
        """Steps per hour and what they come from: ``lines`` (the times of the step lines: their own timestamps, or
        when each was read while the run wrote them), else ``bar`` (the speed the run's own bar printed, the only
        one a log whose lines carry no time has). The rate follows the evidence the step comes from."""
        if self.areal_step is None and self._shape_step is not None:
            if len(self._shape_points) >= 2:
                (t0, c0), (t1, c1) = self._shape_points[0], self._shape_points[-1]
                if t1 > t0 and c1 > c0:
                    return (c1 - c0) * 3600.0 / (t1 - t0), "lines"
            bar = self._shape.speed()
            if bar is not None:
                return bar, "bar"
        if len(self.rate_points) >= 2:
            (t0, c0), (t1, c1) = self.rate_points[0], self.rate_points[-1]
            if t1 > t0 and c1 > c0:
                scale = 1
                if self.areal_step is None and self._hint is not None:
                    scale = self._logging_steps or 1  # a TRL dict is logged every logging_steps steps
                return (c1 - c0) * scale * 3600.0 / (t1 - t0), "lines"
        return (self._bar_rate, "bar") if self._bar_rate is not None else (None, None)

    def _record_interval(self) -> float | None:
        """Seconds between the records the rate is read from (the same points as :meth:`_steps_per_hour`): the median
        gap, over _RECORD_GAPS or more, so that one long gap (a series' first line before a run of a bar's redraws,
        a pause to evaluate) does not stretch every hang allowance."""
        if self.areal_step is None and self._shape_step is not None:
            times = list(self._shape_records)  # every record that moved it, whatever step it shows (an epoch)
        else:
            points = [(0.0, -1), *self.rate_points]
            times = [b[0] for a, b in pairwise(points) if b[1] > a[1]]
        gaps = sorted(b - a for a, b in pairwise(times) if b > a)
        return gaps[len(gaps) // 2] if len(gaps) >= _RECORD_GAPS else None

    def state(self, now: float | None = None) -> TrainingState:
        now = self._clock.time() if now is None else now
        with self.lock:
            self._apply_pending()
            seen = [m for m in (self.last_step_m, self.last_line_m) if m is not None]
            stalled = bool(seen) and not self.finished and now - self._offset() - max(seen) >= self._stall_s
            step = self._step_now()
            total = self._total_now()
            if step is not None and total is not None and self.areal_step is None:
                step = min(step, total)
            rate, rate_from = self._steps_per_hour()
            return TrainingState(
                last_step=step,
                total_steps=total,
                reward=self.rewards[-1] if self.rewards else None,
                steps_per_hour=rate,
                stalled=stalled,
                last_step_at=self.last_step_at,
                last_line_at=self.last_line_at,
                rewards=tuple(self.rewards),
                weight_update_s=tuple(self.updates),
                weight_update_timeout_s=self._timeout_s,
                finished=self.finished,
                rate_from=rate_from,
                step_source=self._source_now() if step is not None else None,
                record_interval_s=self._record_interval(),
            )
