"""Property tests: the run-file and training parsers never raise, and read back what a writer would write."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import LogLine
from rlwatch.discover.knobs import load_knobs
from rlwatch.logs.areal_lines import parse_areal_step, parse_stats_row, parse_weight_update
from rlwatch.logs.prefixes import split_prefix
from rlwatch.logs.training import TrainingTracker, parse_metrics
from rlwatch.sources.checkpoints import parse_areal_name, parse_hf_name, parse_trainer_state
from rlwatch.sources.recover import StepInfo, next_step, parse_step_info, read_recover

counts = st.integers(min_value=0, max_value=10**9)
any_float = st.floats(allow_nan=True, allow_infinity=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | any_float | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
    max_leaves=20,
)
keys = st.sampled_from(["loss", "reward", "grad_norm", "epoch", "train_runtime", "reward_std", "x"]) | st.text(
    max_size=10
)


@given(st.text())
def test_name_parsers_never_raise(text: str) -> None:
    areal = parse_areal_name(text)
    assert areal is None or all(isinstance(n, int) and n >= 0 for n in areal)
    hf = parse_hf_name(text)
    assert hf is None or hf >= 0


@given(counts, counts, counts)
def test_areal_name_round_trip(e: int, s: int, g: int) -> None:
    assert parse_areal_name(f"epoch{e}epochstep{s}globalstep{g}") == (e, s, g)
    assert parse_hf_name(f"checkpoint-{g}") == g


@given(st.text())
def test_trainer_state_never_raises_on_text(text: str) -> None:
    summary = parse_trainer_state(text)
    assert summary is None or set(summary) >= {"global_step", "max_steps", "reward", "loss"}


@given(st.dictionaries(st.sampled_from(["global_step", "max_steps", "epoch", "log_history"]), json_values))
def test_trainer_state_values_are_clean(data: dict[str, object]) -> None:
    summary = parse_trainer_state(json.dumps(data))
    assert summary is not None
    for count in (summary["global_step"], summary["max_steps"]):
        assert count is None or (type(count) is int and count >= 0)
    for number in (summary["epoch"], summary["reward"], summary["loss"]):
        assert number is None or math.isfinite(number)


@given(st.text())
def test_step_info_never_raises_on_text(text: str) -> None:
    info = parse_step_info(text)
    assert info is None or info.epoch_step < info.steps_per_epoch


@given(st.dictionaries(st.sampled_from(["epoch", "epoch_step", "global_step", "steps_per_epoch"]), json_values))
def test_step_info_never_raises_on_json(data: dict[str, object]) -> None:
    info = parse_step_info(json.dumps(data))
    if info is not None:
        nxt = next_step(info)
        assert nxt.global_step == info.global_step + 1
        assert 0 <= nxt.epoch_step < nxt.steps_per_epoch
        assert nxt.epoch in (info.epoch, info.epoch + 1)


@given(counts, st.integers(min_value=1, max_value=10**6), counts, st.data())
def test_step_info_round_trip(epoch: int, spe: int, global_step: int, data: st.DataObject) -> None:
    epoch_step = data.draw(st.integers(min_value=0, max_value=spe - 1))
    written = {"epoch": epoch, "epoch_step": epoch_step, "global_step": global_step, "steps_per_epoch": spe}
    info = parse_step_info(json.dumps(written, indent=4))
    assert info == StepInfo(epoch, epoch_step, global_step, spe)


@settings(max_examples=50)
@given(st.binary(max_size=2000))
def test_file_readers_never_raise_on_bytes(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step_info.json"
        path.write_bytes(content)
        state, error = read_recover(path)
        assert (state is None) != (error is None)
        knobs, kerror = load_knobs(path)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in knobs.items())
        assert kerror is None or "\n" not in kerror


@given(st.text())
def test_line_parsers_never_raise(text: str) -> None:
    step = parse_areal_step(text)
    assert step is None or min(step) >= 0
    metrics = parse_metrics(text)
    assert metrics is None or all(isinstance(v, float) for v in metrics.values())
    assert all(isinstance(v, float) for v in parse_stats_row(text).values())
    duration = parse_weight_update(text)
    assert duration is None or duration >= 0


@given(st.dictionaries(keys, any_float | st.integers(-(10**6), 10**6) | st.text(max_size=8), max_size=8))
def test_metric_dicts_read_back(data: dict[str, object]) -> None:
    """What ``str(logs)`` prints, nan and inf included, parses back to its numeric entries."""
    parsed = parse_metrics(" 40%|████      | 4/10 [00:08<00:12]" + str(data))
    assert parsed is not None
    for key, value in data.items():
        if isinstance(value, int | float):
            assert key in parsed
            same = parsed[key] == value or (math.isnan(parsed[key]) and math.isnan(float(value)))
            assert same, (key, value, parsed[key])


@given(st.lists(st.tuples(keys, any_float), min_size=1, max_size=4))
def test_stats_rows_read_back(pairs: list[tuple[str, float]]) -> None:
    table = {k.replace("│", "").strip() or "k": v for k, v in pairs}  # keys are unique in a stats table
    cells = [c for k, v in table.items() for c in (k, f"{v:.4e}")]
    row = parse_stats_row("│ " + " │ ".join(cells) + " │")
    for key, value in zip(cells[0::2], cells[1::2], strict=True):
        parsed = row[key]
        assert parsed == float(value) or math.isnan(parsed)


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(
            st.text() | st.builds(str, st.dictionaries(keys, any_float, max_size=4)),
            any_float,
            st.sampled_from(["step", "reward", "weight_update"]),
        ),
        max_size=20,
    ),
    any_float,
)
def test_tracker_survives_anything(lines: list[tuple[str, float, str]], now: float) -> None:
    tracker = TrainingTracker(FakeClock(), stall_s=600.0, weight_update_timeout_s=120.0, history=5)
    for lineno, (text, t, handler) in enumerate(lines):
        tracker.on_any_line(t)
        getattr(tracker, f"on_{handler}")(LogLine("/x.log", lineno, text, t))
    state = tracker.state(now)
    assert len(state.rewards) <= 5
    assert all(math.isfinite(r) for r in state.rewards)
    assert state.steps_per_hour is None or state.steps_per_hour > 0
    assert state.last_step is None or state.last_step >= 0


@given(st.text())
def test_split_prefix_never_raises_and_keeps_the_end(text: str) -> None:
    tag, body = split_prefix(text)
    assert text.endswith(body)
    assert len(tag) <= len(text) - len(body)


_writers = st.sampled_from(
    [
        "",
        "[rank3]: ",
        "[rollout] ",
        "(EngineCore_DP0 pid=456) ",
        "(WorkerDict pid=616, ip=192.168.149.159) ",
        "(VllmWorker TP1 pid=675229) ",
    ]
)
_records = st.sampled_from(["", "ERROR 11-24 05:09:01 [v1/engine/core.py:700] ", "INFO 05-06 20:59:57 client.py:250] "])
_stamps = st.builds(
    lambda nanos, zone, cri: f"2026-11-24T05:09:01.{nanos}{zone} " + ("stdout F " if cri else ""),
    st.integers(min_value=0, max_value=999_999_999).map(str),
    st.sampled_from(["Z", "+01:00", "-0530"]),
    st.booleans(),
)
# What follows every prefix: a message that does not itself start like one (a frame, an exception, a dict).
_messages = st.sampled_from(
    ['  File "x.py", line 3, in f', "RuntimeError: boom", "{'loss': 0.1}", "Traceback (most recent call last):", ""]
)


@given(
    st.sampled_from(["", "sglang-1  | ", "trainer_1 | "]),
    st.one_of(st.just(""), _stamps),
    _writers,
    _records,
    _messages,
)
def test_split_prefix_finds_the_message_behind_any_stack_of_prefixes(
    service: str, stamp: str, writer: str, record: str, message: str
) -> None:
    tag, body = split_prefix(service + stamp + writer + record + message)
    assert body == message
    assert "2026" not in tag  # a time is never part of the writer's name
    assert tag.startswith(service.split(" ", maxsplit=1)[0] + "|" if service else "")
