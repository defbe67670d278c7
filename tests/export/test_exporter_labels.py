"""No pid in any label the exporter emits (the probe's finding N12: the straggler families' ``rank`` label fell back to
``"<script> (pid N)"``, and a member of the run no role rule names is listed as ``"train.py 7512"``): a pid label
starts a new series on every restart. Every scenario of the exporter's tests is scanned, each with the labels the
engine makes for a rank without RANK in its environment and a member without a role added."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rlwatch.common.state import ProcessInfo, RankTime, Snapshot
from rlwatch.export.exporter import stable_label
from tests import snapshot_data as data
from tests.export.test_exporter import exposition, snapshot

RANK_PID, MEMBER_PID = 7511, 7512
_WORD_PID = re.compile(r"\bpid\b", re.IGNORECASE)


def _with_pid_labels(snap: Snapshot) -> Snapshot:
    """The snapshot with what the engine labels by pid in its views: a sampled rank without RANK ("evil_frames.py
    (pid 7511)", engine.stack_targets' fallback), ranks with it, and a member row no role rule names."""
    member = ProcessInfo(
        MEMBER_PID, snap.time - 60, "run", f"train.py {MEMBER_PID}", 1 << 20, None, snap.time - 60, 0,
        ("python3", "train.py"), "/run", "root", evidence="writes train.log",
    )  # fmt: skip
    ranks = (
        RankTime(f"evil_frames.py (pid {RANK_PID})", 1.0, 6, False),
        RankTime("rank 0", 0.9, 6, False),
        RankTime("rank 1", 0.0, 6, True),
    )
    return replace(snap, processes=(*snap.processes, member), rank_times=ranks)


def _label_values(text: str) -> list[tuple[str, str, str]]:
    return [
        (s.name, key, value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        for key, value in s.labels.items()
    ]


def _pids(snap: Snapshot) -> set[int]:
    pids = {p.pid for p in snap.processes} | {h.pid for h in snap.holders} | {RANK_PID, MEMBER_PID}
    return {p for p in pids if p > 99}  # a two-digit pid would match a GPU index or a count


@pytest.mark.parametrize("scenario", list(data.SCENARIOS))
def test_no_label_of_any_scenario_carries_a_pid(scenario: str) -> None:
    snap = _with_pid_labels(snapshot(scenario))
    values = _label_values(exposition(snap))
    pids = {str(p) for p in _pids(snap)}
    for name, key, value in values:
        if key == "title":  # the last exception's title is the log's own words, whatever numbers they hold
            continue
        assert not _WORD_PID.search(value), f"{name}{{{key}={value!r}}}"
        assert not pids & set(re.findall(r"\d+", value)), f"{name}{{{key}={value!r}}} holds a pid"
    ranks = {value for name, key, value in values if name == "rlwatch_rank_straggler"}
    assert ranks == {"evil_frames.py", "rank 0", "rank 1"}
    assert ("rlwatch_process_up", "name", "train.py") in values


def test_the_stable_label_leaves_a_pid_out_and_nothing_else() -> None:
    assert stable_label("evil_frames.py (pid 7511)") == "evil_frames.py"
    assert stable_label("train.py 7512") == "train.py"
    assert stable_label("rank 12") == "rank 12"
    assert stable_label("worker-3") == "worker-3"
    assert stable_label("trainer") == "trainer"
    assert stable_label("train.py 7512\x00") == "train.py"  # cleaned first, as every label value is
