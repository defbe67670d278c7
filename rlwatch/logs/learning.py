"""The run's learning metrics as its own log lines print them: loss, grad norm, reward, KL, entropy, response length.

A run can be alive, stepping and checkpointing while it has stopped learning: a loss of ``nan`` for hours, a reward
collapsed to its floor, an entropy of zero, every response cut at the length limit. Nothing crashes, so only the
numbers say so. This tracker keeps a bounded series of each, per logged step; :mod:`rlwatch.engine.diagnosis.learning`
judges them.

Formats read (the keys each framework prints, mapped to rlwatch's canonical names, first match wins):

- TRL / transformers: the ``str(logs)`` dict each ``logging_steps`` (``trl/trainer/grpo_trainer.py`` ``_metrics``):
  ``loss``, ``grad_norm``, ``reward``, ``kl``, ``entropy``, ``completions/mean_length`` (``completion_length`` before
  TRL 0.17), ``completions/clipped_ratio``. It prints no step number: the step is the training tracker's (the
  checkpoint's ``global_step`` plus ``logging_steps`` per dict), else the ordinal of the dict.
- verl: ``step:N - key:value - …`` (``verl/utils/logger/aggregate_logger.py`` ``concat_dict_to_str``; NaN prints
  ``nan``), with ``actor/pg_loss``, ``actor/grad_norm``, ``critic/score/mean``, ``actor/kl_loss`` (``critic/kl`` when
  the KL is in the reward, else ``actor/ppo_kl``), ``actor/entropy`` (``actor/entropy_loss`` before v0.4),
  ``response_length/mean``, ``response_length/clip_ratio``.
- AReaL: the stats table after ``Train step N/M done.`` (``areal/utils/stats_logger.py``), keys ending in
  ``update/actor_loss/avg``, ``update/grad_norm``, ``task_reward/avg`` (else ``rollout/reward``),
  ``update/approx_kl/avg``, ``update/entropy/avg``, ``no_eos_ratios/avg`` (responses that hit the length limit).
- OpenRLHF: the actor's progress-bar postfix (``openrlhf/trainer/ray/ppo_actor.py`` ``short_status``):
  ``act_loss=…, reward=…, gen_len=…, kl=…, grad_norm=…``; no step number (ordinals).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable

from rlwatch.common.state import LearningState, LogLine, MetricPoint
from rlwatch.logs import wording
from rlwatch.logs.areal_lines import LearningFeed, Recent, learning_record, learning_row
from rlwatch.logs.training import parse_metrics

HISTORY = 256

# canonical name -> candidate keys per format, in order of preference
TRL_KEYS: dict[str, tuple[str, ...]] = {
    "loss": ("loss",),
    "grad_norm": ("grad_norm",),
    "reward": ("reward",),
    "kl": ("kl",),
    "entropy": ("entropy",),
    "response_length": ("completions/mean_length", "completion_length"),
    "clip_ratio": ("completions/clipped_ratio",),
}
VERL_KEYS: dict[str, tuple[str, ...]] = {
    "loss": ("actor/pg_loss",),
    "grad_norm": ("actor/grad_norm",),
    "reward": ("critic/score/mean", "critic/rewards/mean"),
    "kl": ("actor/kl_loss", "critic/kl", "actor/ppo_kl"),
    "entropy": ("actor/entropy", "actor/entropy_loss"),
    "response_length": ("response_length/mean",),
    "clip_ratio": ("response_length/clip_ratio",),
}
# AReaL's scoped stats keys are matched by their end: areal_lines.AREAL_SUFFIXES, beside the reader of its rows.
OPENRLHF_KEYS: dict[str, tuple[str, ...]] = {
    "loss": ("act_loss",),
    "grad_norm": ("grad_norm",),
    "reward": ("reward",),
    "kl": ("kl",),
    "response_length": ("gen_len",),
}

_VERL_STEP = re.compile(r"(?:^|[\s)])step:(\d+) - ")
_VERL_PAIR = re.compile(r"(?:^| - )([A-Za-z_][\w/@.\-]*):\s*([-+]?(?:nan|inf|[0-9.]+(?:[eE][-+]?\d+)?))(?= - |\s*$)")
_POSTFIX_PAIR = re.compile(r"([A-Za-z_]\w*)=([-+]?(?:nan|inf|[0-9.]+(?:[eE][-+]?\d+)?))(?=[,\]\s]|$)")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_verl(text: str) -> tuple[int, dict[str, float]] | None:
    """``step:59 - actor/pg_loss:nan - …`` → (59, {key: value}); None for any other line."""
    m = _VERL_STEP.search(text)
    if m is None:
        return None
    body = text[m.end() - len(" - ") :]
    values = {k: v for k, raw in _VERL_PAIR.findall(body) if (v := _number(raw)) is not None}
    return int(m.group(1)), values


def parse_postfix(text: str) -> dict[str, float]:
    """The ``key=value`` pairs of a tqdm postfix (OpenRLHF's actor bar)."""
    return {k: v for k, raw in _POSTFIX_PAIR.findall(text) if (v := _number(raw)) is not None}


def canonical(values: dict[str, float], table: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, float]]:
    """canonical name -> (the key the log printed, its value), by exact keys."""
    out: dict[str, tuple[str, float]] = {}
    for name, keys in table.items():
        for key in keys:
            if key in values:
                out[name] = (key, values[key])
                break
    return out


class LearningTracker:
    """Keeps each learning metric's recent values with the step they were logged at. Thread-safe; every handler
    runs every parser, so it does not matter which event kind delivers a line.

    Its parsing state (``series``, ``version``, ``contents``, ``delivered``, ``lock`` …) and
    ``parse_other_formats`` are public because :mod:`rlwatch.logs.areal_lines`, which reads every line delivered,
    reads and writes them; every other reader goes through :meth:`state`."""

    def __init__(self, step_of: Callable[[], int | None] | None = None, history: int = HISTORY) -> None:
        self._step_of = step_of  # the training tracker's step, for formats that print none (TRL)
        self.history = history
        self.lock = threading.Lock()
        self.series: dict[str, deque[MetricPoint]] = {}
        self.keys: dict[str, str] = {}
        self.delivered = Recent()
        self.contents = Recent()
        self.ordinal = 0  # metric lines without a step number seen
        self.areal_step: int | None = None
        self._steps_exact = True
        self.version = 0  # bumped by every recorded value: state() is rebuilt only after one
        self._state: tuple[int, LearningState | None] = (0, None)
        # The handler of every kind that delivers lines (step, _reward, _learning): areal_lines.LearningFeed reads
        # AReaL's step lines and stats rows, and hands a line of any other format to parse_other_formats. Lines are
        # read as they come: a TRL dict takes the training tracker's step at that moment.
        self.on_line: Callable[[LogLine], None] = LearningFeed(self)
        self.on_step = self.on_reward = self.on_learning = self.on_line

    def parse_other_formats(self, line: LogLine) -> None:
        """A line holding verl's, TRL's or OpenRLHF's fixed text (areal_lines calls this, the lock held); one none
        of them reads may still be a stats row."""
        text = line.text
        verl = parse_verl(text) if wording.VERL_STEP in text else None
        if verl is not None:
            step, values = verl
            found = canonical(values, VERL_KEYS)
            if found and self.contents.add(("verl", step, text[text.find(wording.VERL_STEP) :])):
                self._record(step, found, line.time)
            return
        if wording.METRIC_DICT in text:
            metrics = parse_metrics(text)
            if metrics is not None and "train_runtime" not in metrics and ("loss" in metrics or "reward" in metrics):
                if self.contents.add(("trl", text[text.find("{") :])):
                    self.ordinal += 1
                    told = self._step_of() if self._step_of is not None else None
                    if told is None:
                        told, self._steps_exact = self.ordinal, False
                    self._record(told, canonical(metrics, TRL_KEYS), line.time)
                return
        if wording.LEARNING_ORDINAL_POSTFIX in text:
            postfix = text[text.rfind(wording.LEARNING_ORDINAL_POSTFIX) :]
            found = canonical(parse_postfix(postfix), OPENRLHF_KEYS)
            if found and self.contents.add(("openrlhf", postfix)):  # a bar drawn again is the same point
                self.ordinal += 1
                self._steps_exact = False
                self._record(self.ordinal, found, line.time)
            return
        learning_row(self, line, text)

    def _record(self, step: int, found: dict[str, tuple[str, float]], time: float) -> None:
        learning_record(self, step, found, time)

    def state(self) -> LearningState | None:
        """The series as one immutable record; the same object until a value is recorded (snapshots are built far
        more often than metrics are logged)."""
        with self.lock:
            version, state = self._state
            if version == self.version:
                return state
            state = LearningState(
                series={name: tuple(points) for name, points in self.series.items()},
                keys=dict(self.keys),
                steps_exact=self._steps_exact,
            )
            self._state = (self.version, state)
            return state
