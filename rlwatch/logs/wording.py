"""What other programs print that the per-line rules look for: one table, read by the Python rules and by the
compiled event path (``_eventpath.pyx`` imports it when it loads), so a framework that rewords a message is
followed in one place and the two paths cannot disagree about its text.

Each entry names the program that prints it. Only text is here; how a line is read around it (digits, spaces,
the order of the tests) stays with each rule.
"""

from __future__ import annotations

__all__ = [
    "AREAL_DISK_UPDATE",
    "AREAL_DONE",
    "AREAL_STEP_DONE",
    "AREAL_TRAIN_STEP",
    "AREAL_UPDATE_WEIGHTS_KEY",
    "CHAIN_CAUSE",
    "CHAIN_CONTEXT",
    "CHILD_FAILED",
    "CODE_KEYWORDS",
    "EXCEPTION_NAME_ENDINGS",
    "EXCEPTION_WORD",
    "FINISHED",
    "FRAME_FILE",
    "FRAME_LINE",
    "LEARNING_ORDINAL_POSTFIX",
    "LOG_LEVELS",
    "METRIC_DICT",
    "ORLHF_GLOBAL_STEP",
    "OTHER_FORMATS",
    "RANK_PREFIX",
    "RAY_AUTOSCALER",
    "RAY_RAYLET",
    "REWARD_BEST",
    "REWARD_KEY_WORD",
    "REWARD_ROLLOUT",
    "REWARD_ROLLOUT_ENDINGS",
    "STREAM_TAGS",
    "TORCHRUN_FAILED",
    "TORCHRUN_FAILURES",
    "TORCHRUN_NO_OTHER_FAILURES",
    "TORCHRUN_ROOT_CAUSE",
    "TRACEBACK",
    "TRACEBACK_HEADER",
    "VERL_BAR",
    "VERL_STEP",
    "VERL_TOTAL",
]

# Python's traceback module (Lib/traceback.py): a traceback's header, its frames' lines, the messages between the
# links of a chained exception.
TRACEBACK = "Traceback"
TRACEBACK_HEADER = "Traceback (most recent call last):"
FRAME_FILE = 'File "'
FRAME_LINE = '", line '
CHAIN_CONTEXT = "During handling of the above exception, another exception occurred:"
CHAIN_CAUSE = "The above exception was the direct cause of the following exception:"
# A block of indented lines is a traceback's frames only where this word is somewhere in it (the chain messages).
EXCEPTION_WORD = "exception"
# An exception line's last dotted name ends in one of these when it does not start with a capital (``socket.timeout``,
# ``sys.exit``-style names).
EXCEPTION_NAME_ENDINGS = ("error", "exception", "timeout", "exit")
# Python's keywords that start a line of code quoted in a traceback (or a log printing source): such a line names
# an error kind without being one.
CODE_KEYWORDS = ("raise", "except", "if", "elif", "assert", "return", "def", "class", "await", "yield", "lambda")

# Python's logging levels as vLLM's record prefix prints them (vllm/logger.py _FORMAT).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# docker/containerd's CRI log lines: ``<time> stdout F <message>`` (the stream, then F(ull) or P(artial)).
STREAM_TAGS = ("stdout ", "stderr ")
# torch's prefix on every line a worker writes after init_process_group: ``[rank3]: ``.
RANK_PREFIX = "[rank"
# Ray's prefixes on the driver's output (ray/_private/worker.py print_worker_logs): ``(raylet) ``,
# ``(autoscaler +1m2s) ``.
RAY_RAYLET = "(raylet)"
RAY_AUTOSCALER = "(autoscaler"

# torchrun (torch/distributed/elastic/multiprocessing/errors/__init__.py): the exception its launcher raises, and
# its report's title ending (``<name> FAILED``) and section lines.
CHILD_FAILED = "ChildFailedError"
TORCHRUN_FAILED = " FAILED"
TORCHRUN_FAILURES = "Failures:"
TORCHRUN_ROOT_CAUSE = "Root Cause (first observed failure)"
TORCHRUN_NO_OTHER_FAILURES = "<NO_OTHER_FAILURES>"

# AReaL (areal/trainer, areal/utils/stats_logger.py, the SGLang weight loader it drives).
AREAL_TRAIN_STEP = "Train step "  # ``Train step 3/100 done.``
AREAL_STEP_DONE = " done"
AREAL_DONE = "Training completes!"  # its last line
AREAL_UPDATE_WEIGHTS_KEY = "timeperf/update_weights"  # the stats row's weight-update timing
AREAL_DISK_UPDATE = "Loading weights from disk done in "  # ``… done in 10.48s.``
# The reward of a stats table: AReaL's task reward first, else a rollout reward (verl, OpenRLHF keys).
REWARD_BEST = "task_reward/avg"
REWARD_ROLLOUT = "rollout/reward"
REWARD_ROLLOUT_ENDINGS = ("/rollout/reward", "rollout/reward/avg")
REWARD_KEY_WORD = "reward"  # a stats row's key that holds it is read; the others are not

# The end of a run in other frameworks: verl's last pprint (``Final validation metrics: {…}``), ``ray job submit``'s
# ``Job '…' succeeded``.
FINISHED = ("Final validation metrics", "' succeeded")
# What the other frameworks' step lines hold (verl's ``step:N - …``, OpenRLHF's ``Global step N: {``, verl's bar
# ``Training Progress:  33%|…``, its ``Total training steps: N``); a line holding none is not read for them.
VERL_STEP = "step:"
ORLHF_GLOBAL_STEP = "Global step "
VERL_BAR = "Training Progress:"
VERL_TOTAL = "Total training steps: "
METRIC_DICT = "{"  # TRL's and OpenRLHF's metric dicts
OTHER_FORMATS = (METRIC_DICT, VERL_STEP, ORLHF_GLOBAL_STEP, VERL_BAR, VERL_TOTAL)
# OpenRLHF's tqdm postfix (``act_loss=…, reward=…``): learning numbers without a step number.
LEARNING_ORDINAL_POSTFIX = "act_loss="
