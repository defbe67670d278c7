"""The `watch` stream over a big backlog: what its newest part shows comes first, in records marked partial, and
no more of them than a person or a consumer can use (one burst a second at most, none for what was already said)."""

from __future__ import annotations

from dataclasses import replace

from rlwatch.common.state import EventSummary, Finding, RunState, Severity, Snapshot
from rlwatch.export.stream import Partial, changes, plain, read_share

T0 = 1_795_000_000.0
CRASH = Finding(Severity.CRITICAL, "run_crashed", "The run crashed: RuntimeError: boom.", T0)
SLOW = Finding(Severity.WARNING, "server_slow", "The server answers slowly.", T0)


def _preview(*findings: Finding, read: int = 100, total: int = 1000, state: str = "crashed") -> Snapshot:
    """A snapshot while a 1000-byte backlog is read, its newest part counted first (the preview)."""
    steps = EventSummary("step", Severity.INFO, 7, T0, T0, rate_per_min=0.0, streak=0, files={"trainer.log": 7})
    return Snapshot(
        host="h",
        time=T0,
        run_dir="/run",
        profile="auto",
        findings=findings,
        events={"step": steps},
        run_state=RunState(state, "RuntimeError: boom"),
        backlog=(read, total),
        preview="newest 2 MiB of trainer.log",
    )


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_preview_gives_a_state_and_its_findings_marked_partial_without_event_records() -> None:
    clock = Clock()
    partial = Partial(monotonic=clock)
    assert partial.records(replace(_preview(CRASH), preview=None)) == []  # no preview (yet): nothing to say early
    records = partial.records(_preview(CRASH, SLOW, read=123, total=1000))
    assert [r["type"] for r in records] == ["state", "finding", "finding"]
    assert all(r["partial"] is True and r["read"] == 0.123 for r in records)
    # the same shapes as the complete stream's first records, plus the two keys
    full = {r["type"] + r.get("code", ""): r for r in changes(None, _preview(CRASH, SLOW))}
    for r in records:
        bare = {k: v for k, v in r.items() if k not in ("partial", "read")}
        assert bare == full[r["type"] + r.get("code", "")]
    assert records[0]["findings"] == ["run_crashed", "server_slow"]
    assert "event" in {r["type"] for r in changes(None, _preview(CRASH))}  # the complete stream's, not these


def test_an_unchanged_preview_is_not_said_again_and_progress_comes_every_few_seconds() -> None:
    clock = Clock()
    partial = Partial(every_s=1.0, progress_every_s=5.0, monotonic=clock)
    assert len(partial.records(_preview(CRASH, read=100))) == 2
    for dt in (0.5, 1.5, 4.0):
        clock.now = 100.0 + dt
        assert partial.records(_preview(CRASH, read=200)) == []  # the same state: nothing, however late
    clock.now = 105.0
    assert partial.records(_preview(CRASH, read=500)) == [
        {"type": "backlog", "time": "2026-11-18T11:06:40+00:00", "partial": True, "read": 0.5}
    ]
    clock.now = 106.0
    assert partial.records(_preview(CRASH, read=600)) == []  # the next one five seconds later


def test_a_change_is_said_at_most_once_a_second_against_the_last_partial_state_written() -> None:
    clock = Clock()
    partial = Partial(every_s=1.0, monotonic=clock)
    partial.records(_preview(CRASH))
    clock.now = 100.4
    assert partial.records(_preview(CRASH, SLOW)) == []  # too soon after the first burst
    clock.now = 100.6
    assert partial.records(_preview(CRASH)) == []  # (it flickered back: nothing to say even then)
    clock.now = 101.2
    records = partial.records(_preview(SLOW, read=400, state="unknown"))
    assert [(r["type"], r.get("code")) for r in records] == [
        ("state", None),
        ("finding", "server_slow"),
        ("finding_cleared", "run_crashed"),
    ]
    assert records[0]["findings"] == ["server_slow"] and records[0]["run_state"]["state"] == "unknown"
    assert all(r["partial"] is True and r["read"] == 0.4 for r in records)
    clock.now = 103.0
    assert partial.records(_preview(SLOW, read=500, state="unknown")) == []  # said once


def test_read_share_is_three_decimals_of_the_backlog_and_whole_once_read() -> None:
    assert read_share(_preview(read=1, total=3)) == 0.333
    assert read_share(replace(_preview(), backlog=None)) == 1.0  # read; the preview goes with the next snapshot
    assert read_share(_preview(read=0, total=0)) == 1.0


def test_partial_lines_for_a_person_say_they_are_of_the_newest_part() -> None:
    partial = Partial(monotonic=Clock())
    state, finding = partial.records(_preview(CRASH, read=120))
    assert plain(state) == "(newest part, 12% read) 11:06:40 watching /run (auto): 1 findings"
    assert plain(finding) == "(newest part, 12% read) 11:06:40 [CRITICAL] The run crashed: RuntimeError: boom."
    assert plain({"type": "backlog", "time": "2026-11-18T11:06:45+00:00", "partial": True, "read": 0.5}) == (
        "11:06:45 reading the backlog: 50% read"
    )
    complete = next(changes(None, _preview(CRASH)))
    assert plain(complete) == "11:06:40 watching /run (auto): 1 findings"  # a complete line as before
