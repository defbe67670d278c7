"""Incidents: traceback blocks (chained, prefixed, interleaved, split across chunks), retry storms, crashes."""

from __future__ import annotations

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import Incident
from rlwatch.config.models import EventsConfig
from rlwatch.logs.events import EventCounter, build_kinds
from rlwatch.logs.incidents import IncidentTracker
from rlwatch.logs.newlines import count_lines
from rlwatch.logs.signatures import signature
from rlwatch.logs.tailer import Chunk

TRAINER = "/run/a/logs/trainer.log"

CHAINED = """\
Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/urllib3/connection.py", line 198, in _new_conn
    sock = connection.create_connection(
  File "/usr/lib/python3.11/site-packages/urllib3/util/connection.py", line 85, in create_connection
    raise err
ConnectionRefusedError: [Errno 111] Connection refused

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/urllib3/connectionpool.py", line 787, in urlopen
    response = self._make_request(
urllib3.exceptions.NewConnectionError: <urllib3.connection.HTTPConnection object at 0x7f1c2d3e4f50>: Failed to \
establish a new connection: [Errno 111] Connection refused

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/opt/trl/trl/generation/vllm_client.py", line 142, in check_server
    response = requests.get(url)
  File "/usr/lib/python3.11/site-packages/requests/adapters.py", line 700, in send
    raise ConnectionError(e, request=request)
requests.exceptions.ConnectionError: HTTPConnectionPool(host='0.0.0.0', port=8000): Max retries exceeded
next unrelated line
"""

CHILD_FAILED = """\
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/usr/local/lib/python3.11/site-packages/torch/distributed/run.py", line 892, in main
    run(args)
  File "/usr/local/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 270, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n\
============================================================
areal/train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-11-21_09:22:41
  host      : pod-0
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 40113)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 40113
============================================================
"""

NAMESPACE = """\
Traceback (most recent call last):
  File "/workspace/{who}/train_grpo.py", line 211, in <module>
    main(args)
  File "/workspace/{who}/train_grpo.py", line 97, in main
    model_id = args.model_id
AttributeError: 'Namespace' object has no attribute 'model_id'
"""


def counter(clock: FakeClock | None = None, **kw: float) -> EventCounter:
    return EventCounter(build_kinds(EventsConfig()), clock or FakeClock(), **kw)  # type: ignore[arg-type]


def feed(c: EventCounter, path: str, text: str, first: int = 1) -> int:
    data = text.encode()
    n = count_lines(data)
    c.feed(Chunk(path, data, first, n))
    return first + n


def of_kind(c: EventCounter, kind: str) -> list[Incident]:
    return [i for i in c.incidents() if i.kind == kind]


def test_chained_traceback_is_one_incident_named_after_the_final_exception() -> None:
    c = counter()
    feed(c, TRAINER, "start\n" + CHAINED)
    (inc,) = of_kind(c, "traceback")
    assert inc.title.startswith("requests.exceptions.ConnectionError: HTTPConnectionPool(host='0.0.0.0'")
    assert inc.location == "adapters.py:700"
    assert inc.lineno == 2
    assert inc.count == CHAINED.splitlines().index("next unrelated line")
    assert c.summaries()["traceback"].count == 3  # each header still counts as a traceback line


def test_rank_prefixed_traceback() -> None:
    c = counter()
    text = "".join(f"[rank0]: {line}\n" for line in NAMESPACE.format(who="a").splitlines())
    feed(c, TRAINER, text)
    (inc,) = of_kind(c, "traceback")
    assert inc.title == "AttributeError: 'Namespace' object has no attribute 'model_id'"
    assert inc.location == "train_grpo.py:97"


def test_interleaved_ranks_are_told_apart() -> None:
    c = counter()
    a = NAMESPACE.format(who="a").splitlines()
    b = CHILD_FAILED.splitlines()[:8]
    lines = []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            lines.append(f"[rank0]: {a[i]}")
        if i < len(b):
            lines.append(f"[rank1]: {b[i]}")
    feed(c, TRAINER, "\n".join(lines) + "\n")
    titles = sorted(i.title for i in of_kind(c, "traceback"))
    assert titles == [
        "AttributeError: 'Namespace' object has no attribute 'model_id'",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
    ]


def test_merged_log_role_prefix() -> None:
    c = counter()
    text = "".join("[actor]".ljust(10) + line + "\n" for line in NAMESPACE.format(who="a").splitlines())
    feed(c, "/run/logs/merged.log", text)
    assert [i.location for i in of_kind(c, "traceback")] == ["train_grpo.py:97"]


def test_identical_tracebacks_in_two_files_share_a_signature() -> None:
    c = counter()
    feed(c, "/pod-a/logs/trainer.log", NAMESPACE.format(who="alice"))
    feed(c, "/pod-b/logs/trainer.log", "other\nlines\n" + NAMESPACE.format(who="bob"))
    feed(c, "/pod-b/logs/trainer.log", CHILD_FAILED, first=20)
    first, second, third = of_kind(c, "traceback")
    assert first.signature == second.signature
    assert first.path != second.path
    assert third.signature != first.signature


def test_signature_ignores_numbers_addresses_and_paths() -> None:
    a = signature("RuntimeError", "Failed at 0x7f00aa for /tmp/a/b.log after 3 tries", "x.py:1")
    b = signature("RuntimeError", "Failed at 0x7fffff for /var/z/b.log after 12 tries", "x.py:1")
    assert a == b
    assert a != signature("RuntimeError", "Failed at 0x7f00aa for /tmp/a/b.log after 3 tries", "y.py:1")
    assert a != signature("KeyError", "Failed at 0x7f00aa for /tmp/a/b.log after 3 tries", "x.py:1")


def test_child_failed_title_carries_exit_code_and_signal() -> None:
    c = counter()
    feed(c, TRAINER, CHILD_FAILED)
    (tb,) = of_kind(c, "traceback")
    assert tb.title == (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: areal/train.py FAILED, "
        "rank 0 exitcode -9 (SIGKILL) on pod-0"
    )
    assert tb.root_cause is not None
    assert (tb.root_cause.rank, tb.root_cause.exitcode, tb.root_cause.signal) == (0, -9, "SIGKILL")
    assert (tb.root_cause.pid, tb.root_cause.host, tb.root_cause.time) == (40113, "pod-0", "2025-11-21_09:22:41")
    assert tb.victims == ()
    assert tb.location == "api.py:270"
    (crash,) = of_kind(c, "crash")
    assert crash.title == "torchrun worker failed (ChildFailedError)"


def test_block_split_across_chunks() -> None:
    c = counter()
    lines = CHAINED.splitlines(keepends=True)
    nxt = 1
    for i in range(0, len(lines), 3):
        nxt = feed(c, TRAINER, "".join(lines[i : i + 3]), first=nxt)
    (inc,) = of_kind(c, "traceback")
    assert inc.title.startswith("requests.exceptions.ConnectionError")


def test_cut_off_traceback_does_not_hide_the_next_one() -> None:
    c = counter()
    text = 'Traceback (most recent call last):\n  File "a.py", line 1, in f\n' + "log line\n" * 100
    text += NAMESPACE.format(who="x")
    feed(c, TRAINER, text)
    assert [i.title for i in of_kind(c, "traceback")] == [
        "AttributeError: 'Namespace' object has no attribute 'model_id'"
    ]


def test_exception_group_gutter() -> None:
    c = counter()
    text = (
        "  + Exception Group Traceback (most recent call last):\n"
        '  |   File "/srv/rollout.py", line 88, in gather\n'
        "  |     async with asyncio.TaskGroup() as tg:\n"
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
        "  +-+---------------- 1 ----------------\n"
    )
    feed(c, TRAINER, text)
    (inc,) = of_kind(c, "traceback")
    assert inc.title == "ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)"
    assert inc.location == "rollout.py:88"


def test_logger_levels_are_not_exceptions() -> None:
    c = counter()
    feed(c, TRAINER, 'Traceback (most recent call last):\n  File "a.py", line 1, in f\nWARNING: later\nOSError: boom\n')
    assert [i.title for i in of_kind(c, "traceback")] == ["OSError: boom"]


def test_sglang_scheduler_crash() -> None:
    c = counter()
    text = (
        "[2025-03-14 02:15:58 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2380, in run_scheduler_process\n'
        "    scheduler.event_loop_overlap()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "[2025-03-14 02:15:59] Received sigquit from a child process. It usually means the child failed.\n"
        "SGLangWrapper INFO: SGLang server http://10.0.0.1:30000 exits, returncode=-9\n"
    )
    feed(c, "/run/logs/llm_server.log", text)
    (tb,) = of_kind(c, "traceback")
    assert tb.title == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert tb.location == "scheduler.py:2380"
    (crash,) = of_kind(c, "crash")  # three dying lines within a minute: one crash
    assert crash.title == "SGLang scheduler hit an exception"
    assert crash.count == 3


def test_server_exit_crash_title() -> None:
    c = counter()
    feed(c, "/run/logs/llm_server.log", "SGLang server http://10.0.0.1:30000 exits, returncode=-9\n")
    assert [i.title for i in of_kind(c, "crash")] == ["inference server exited (returncode=-9)"]


REFUSED = "[RemoteInfEngine Rank 0] WARNING: HTTP request failed [Connect call failed ('10.0.0.1', 1)] (attempt 1/3)\n"


def test_retry_storm_grows_while_it_lasts() -> None:
    clock = FakeClock()
    c = counter(clock, storm_threshold=5, storm_window_s=60.0)
    for i in range(64):
        feed(c, TRAINER, REFUSED, first=i + 1)
        clock.advance(1)
    (storm,) = of_kind(c, "retry_storm")
    assert storm.count == 64
    assert storm.title == "64 connection-refused errors (trainer.log)"
    assert storm.lineno == 1
    assert storm.last - storm.first == 63


def test_few_errors_are_no_storm_and_a_pause_ends_a_storm() -> None:
    clock = FakeClock()
    c = counter(clock, storm_threshold=5, storm_window_s=60.0)
    for i in range(4):
        feed(c, TRAINER, REFUSED, first=i + 1)
        clock.advance(20)  # 4 errors, never 5 within a minute
    assert of_kind(c, "retry_storm") == []
    clock.advance(100)
    for i in range(5):
        feed(c, TRAINER, REFUSED, first=10 + i)
    clock.advance(600)
    for i in range(6):
        feed(c, TRAINER, "TimeoutError: Timeout waiting for key 'k'\n", first=20 + i)
        feed(c, TRAINER, REFUSED, first=30 + i)
    titles = [i.title for i in of_kind(c, "retry_storm")]
    assert titles == [
        "5 connection-refused errors (trainer.log)",
        "6 timeout errors (trainer.log)",
        "6 connection-refused errors (trainer.log)",
    ]


def test_tracker_alone_never_wants_lines_without_a_block() -> None:
    tracker = IncidentTracker()
    assert not tracker.wants_every_line(TRAINER)
    tracker.line(TRAINER, "", "Traceback (most recent call last):", 1, lambda: (0.0, None))
    assert tracker.wants_every_line(TRAINER)
    tracker.line(TRAINER, "", "ValueError: x", 2, lambda: (1.0, None))
    for n in range(3, 60):
        tracker.line(TRAINER, "", "later", n, lambda: (2.0, None))
    assert not tracker.wants_every_line(TRAINER)
    assert [i.title for i in tracker.incidents()] == ["ValueError: x"]


def test_incidents_no_longer_kept_are_tallied_and_the_diagnosis_counts_them_all() -> None:
    """Only the newest MAX_INCIDENTS are kept. A night of one crash repeated must still say how often it happened and
    since when: 'the same crash happened 26 times' over 24 705 of them was a figure of the kept list, not of the log."""
    from rlwatch.common.state import Snapshot
    from rlwatch.engine.diagnosis import Context, diagnose, occurrences
    from rlwatch.logs.incidents import MAX_INCIDENTS

    c = counter(FakeClock(start=1_800_000_000.0))
    crashes = MAX_INCIDENTS + 120
    text = "".join(
        f"2026-11-21 10:{i // 60 % 60:02d}:{i % 60:02d},000 ERROR step failed\n" + NAMESPACE.format(who="team")
        for i in range(crashes)
    )
    feed(c, TRAINER, text)
    kept = of_kind(c, "traceback")
    assert len(kept) == MAX_INCIDENTS
    (tally,) = c.dropped_incidents()
    assert (tally.kind, tally.signature, tally.count) == ("traceback", kept[0].signature, 120)
    assert tally.lines == 120 * sum(1 for _ in NAMESPACE.splitlines())
    snap = Snapshot(
        host="h",
        time=1_800_000_000.0,
        profile="generic",
        run_dir="/r",
        events=c.summaries(),
        incidents=c.incidents(),
        dropped_incidents=c.dropped_incidents(),
    )
    assert occurrences(snap.incidents, snap.dropped_incidents, "traceback", tally.signature) == crashes
    (found,) = [f for f in diagnose(snap, Context()) if f.code == "crash_repeating"]
    assert f"happened {crashes} times" in found.message
    assert found.since == tally.first == kept[0].first - 120 * 1.0  # the first one's time, one second apart
    from rlwatch.export.report import to_json_dict

    (older,) = to_json_dict(snap)["incidents_older"]
    assert (older["kind"], older["count"], older["signature"]) == ("traceback", 120, tally.signature)
