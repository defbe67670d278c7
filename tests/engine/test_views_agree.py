"""One verdict at every moment: what a live view reads and what a one-shot report reads of the same files agree.

Issue 42's "views that still disagree": each test drives the real rule or the real engine over a real log and checks
the one thing that two views said differently.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import (
    CheckpointInfo,
    CheckpointState,
    EventSummary,
    Finding,
    Incident,
    LiveRun,
    LogEnding,
    ProcessInfo,
    RecoverState,
    RunState,
    ServerState,
    Severity,
    Snapshot,
    TrainingState,
)
from rlwatch.config.models import Config
from rlwatch.engine.diagnosis import Context, decide, decide_run_state, diagnose, hhmm, timeline
from rlwatch.engine.engine import Engine
from rlwatch.export.report import to_json_dict as to_json
from rlwatch.export.report import to_text
from rlwatch.sim.formats import torch_pylog, torchrun_child_failed
from rlwatch.widgets.findings import compact_text
from tests.engine.test_last_words import _proc, _root


def test_a_step_read_live_with_torchruns_failure_report_does_not_make_the_crash_history(tmp_path: Path) -> None:
    """kernel-oom watched live: the ranks' last step lines and torchrun's stamped ChildFailedError report came in
    one read. The steps, dated when read, were "later" than the report's own stamp: the crash was taken for history,
    the run called "stopped … its logs end without an error" and torchrun's root cause an INFO "progressed since",
    while a report over the same files said crashed."""
    run = tmp_path / "run"
    run.mkdir()
    root = _root(tmp_path / "proc")
    _proc(root, 4242, b"torchrun\0--nproc-per-node\0002\0train.py\0", run)
    log = run / "train.log"
    log.write_text("".join(f"step {n}/100 loss 0.{n:02d}\n" for n in range(1, 4)))
    (root / "4242" / "fd" / "1").symlink_to(log)  # torchrun writes the log (its stdout, opened O_WRONLY|O_APPEND)
    (root / "4242" / "fdinfo").mkdir()
    (root / "4242" / "fdinfo" / "1").write_text("pos:\t0\nflags:\t02002001\nmnt_id:\t1\n")
    clock = FakeClock(time.time())
    cfg = Config.model_validate(
        {
            "gpu": {"backend": "none"},
            "interval_s": 1.0,
            "training": {"logs": ["train.log"]},
            "processes": [{"role": "trainer", "cmdline_regex": "torchrun"}],
        }
    )
    engine = Engine(cfg, run, clock=clock, proc_root=str(root))
    engine.poll_logs()
    engine.sample()
    snap = engine.build()
    assert snap.live_run is not None and [pid for pid, _ in snap.live_run.members] == [4242]

    t = clock.time() + 1.0  # the rank is killed, torchrun stamps its report; rlwatch reads both a second later
    clock.advance(2.0)
    report = torchrun_child_failed(4242, "train.py", "host", "/usr/bin/python3", (1, -9, 4300), [(0, -15, 4299)], t)
    with log.open("a") as fh:
        fh.write("step 4/100 loss 0.04\n")
        fh.write(torch_pylog("W", 4242, "torch/distributed/elastic/multiprocessing/api.py:908", "Sending", t) + "\n")
        fh.write(report + "\n")
    shutil.rmtree(root / "4242")
    engine.poll_logs()
    engine.sample()
    snap = engine.build()
    assert snap.training is not None and snap.training.last_step == 4
    rs = snap.run_state
    assert rs is not None and rs.state == "crashed", rs
    assert "SIGKILL" in rs.why
    torchrun = next(f for f in snap.findings if f.code == "torchrun_failed")
    assert torchrun.severity.name == "CRITICAL" and "progressed since" not in torchrun.message
    engine.stop()


def test_with_no_process_of_the_run_seen_the_logs_last_words_are_read_at_once(tmp_path: Path) -> None:
    """A run none of whose processes rlwatch sees as the run's: a growing log's ending is kept a few seconds between
    reads, and it was kept past torchrun's report (written as the run died): "stopped … without an error"."""
    run = tmp_path / "run"
    run.mkdir()
    root = _root(tmp_path / "proc")
    log = run / "train.log"
    log.write_text("".join(f"step {n}/100 loss 0.{n:02d}\n" for n in range(1, 4)))
    clock = FakeClock(time.time())
    cfg = Config.model_validate({"gpu": {"backend": "none"}, "interval_s": 1.0, "training": {"logs": ["train.log"]}})
    engine = Engine(cfg, run, clock=clock, proc_root=str(root))
    engine.poll_logs()
    engine.sample()
    engine.build()
    clock.advance(0.5)
    with log.open("a") as fh:
        fh.write("step 4/100 loss 0.04\n")
    engine.sample()  # read again: it grew
    clock.advance(0.5)
    t = clock.time()
    report = torchrun_child_failed(4242, "train.py", "host", "/usr/bin/python3", (1, -9, 4300), [(0, -15, 4299)], t)
    with log.open("a") as fh:
        fh.write(report + "\n")
    clock.advance(0.5)
    engine.poll_logs()
    engine.sample()  # a second later: the ending kept from a moment ago must not stand for the log's last words
    rs = engine.build().run_state
    assert rs is not None and rs.state == "crashed", rs
    engine.stop()


NOW = 1_763_700_000.0
URL = "http://127.0.0.1:30000"
DOWN = Finding(
    Severity.CRITICAL, "server_down", f"Inference server down since 05:09 (connection refused) at {URL}.", None
)
LOOP = Finding(Severity.CRITICAL, "restart_loop", "Restart loop: the container started 3 times, every ~17s.", NOW - 5)
CRASHED = Finding(Severity.CRITICAL, "run_crashed", "The run crashed: RuntimeError: git clone failed.", NOW - 40)


def _after_the_crash(*findings: Finding, **fields: object) -> Snapshot:
    """restart-loop after its crash at step 57: the trainer gone, the server down, a recover point to resume from."""
    base = Snapshot(
        host="h",
        time=NOW,
        profile="areal",
        run_dir="/run",
        findings=(replace(DOWN, since=NOW - 40), *findings),
        server=ServerState("sglang", URL, False, NOW - 40, None, error="connection refused"),
        processes=(
            ProcessInfo(
                11, NOW - 900, "trainer", "trainer", 1, None, NOW - 900, 0, ("python3",), "/run", "root", False
            ),
        ),
        recover=RecoverState("/run/step_info.json", 0, 56, 56, 125, 0, 57, 57),
        run_state=RunState("crashed", "RuntimeError: git clone failed", NOW - 40),
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def _decided(s: Snapshot, ctx: Context) -> Snapshot:
    verdict, findings = decide(s, ctx)
    return replace(s, verdict=verdict, findings=findings)


def _resumes(s: Snapshot) -> list[str]:
    """Every place a view could offer a resume: a finding's key, the verdict's, its next steps, the report's text."""
    assert s.verdict is not None
    out = [f"finding {f.code}" for f in s.findings if f.action == "resume"]
    out += ["verdict"] if s.verdict.action == "resume" else []
    out += [f"step {code}" for code, words in s.verdict.steps if "act resume" in words]
    next_steps = to_text(s).partition("Next steps:")[2]
    out += ["report"] if "act resume" in next_steps else []
    out += ["json"] if to_json(s)["verdict"]["action"] == "resume" else []
    return out


def test_while_the_container_restarts_by_itself_no_finding_offers_a_resume() -> None:
    """restart-loop, the 30-40 s between the crash and the loop's third start: the banner and report offered only
    `r resume` ("The trainer is gone: resume the run"), into the loop."""
    ctx = Context(trainer_alive=False, starts={"container": (NOW - 900, NOW - 12)})
    s = _decided(_after_the_crash(CRASHED), ctx)
    assert _resumes(s) == [], _resumes(s)
    assert s.verdict is not None and "started again by itself" in (s.verdict.next_step or "")


def test_while_the_container_restarts_by_itself_the_headline_still_says_what_to_do() -> None:
    """The same 30 s: with the resume held, the server_down headline showed no remedy at all in the banner."""
    ctx = Context(trainer_alive=False, starts={"container": (NOW - 900, NOW - 12)})
    s = _decided(_after_the_crash(CRASHED), ctx)
    assert s.verdict is not None and s.verdict.fix == "wait: it restarts by itself", s.verdict
    assert "→ wait: it restarts by itself" in compact_text(s.findings, (), 117).plain
    # Its start banner read as a step (a one-shot report): a line at the start's own moment is no progress after it.
    tr = TrainingState(57, None, None, 1800.0, False, NOW - 12, NOW - 12)
    banner = _decided(_after_the_crash(CRASHED, training=tr), ctx)
    assert _resumes(banner) == [], _resumes(banner)
    # The same snapshot with no restart since the crash: the resume is the remedy, as before.
    plain = _decided(_after_the_crash(CRASHED), Context(trainer_alive=False, starts={"container": (NOW - 900,)}))
    assert plain.verdict is not None and plain.verdict.action == "resume"


def test_a_named_restart_loop_leaves_no_resume_in_any_finding() -> None:
    """restart-loop after 2.5 min: `d` listed server_down with `r resume` and the report's next steps said "The
    trainer is gone: resume the run" beside "a resume would start into it again"."""
    ctx = Context(trainer_alive=False, starts={"container": (NOW - 900, NOW - 40, NOW - 5)})
    s = _decided(_after_the_crash(LOOP, CRASHED), ctx)
    assert s.verdict is not None and s.verdict.finding == "restart_loop"
    assert _resumes(s) == [], _resumes(s)
    assert "a resume would start into it again" in to_text(s)


def test_a_progressing_run_is_never_told_its_trainer_is_gone() -> None:
    """One record said "state": "progressing" beside "The trainer is gone: resume the run" (no process carried the
    trainer role while the run's members stepped on)."""
    s = _decided(
        _after_the_crash(run_state=RunState("progressing", "step 58 at 05:10, about every 2s", NOW - 2), processes=()),
        Context(),
    )
    assert s.verdict is not None and s.verdict.state == "progressing"
    assert s.verdict.action != "resume" and "trainer is gone" not in (s.verdict.next_step or "")


def _refused(first: float, first_by: float | None, count: int = 6) -> EventSummary:
    """connection_refused as counted: exact (``first_by`` None) or an undated backlog line bounded by ``first_by``."""
    approximate = first_by is not None
    return EventSummary(
        "connection_refused",
        Severity.WARNING,
        count,
        first,
        NOW - 2,
        0.0,
        count,
        {"/run/trainer.log": count},
        approximate=approximate,
        first_by=first_by,
        last_by=NOW - 1 if approximate else None,
    )


def _down(**fields: object) -> Snapshot:
    """The server down as a one-shot report's probe finds it: its "down since" is the probe's own time."""
    base = Snapshot(
        host="h",
        time=NOW,
        profile="areal",
        run_dir="/run",
        server=ServerState("sglang", URL, False, NOW - 0.5, None, error="connection refused"),
        processes=(),
        run_state=RunState("stopped", "no process of the run is alive here", NOW - 60),
    )
    s = replace(base, **fields)  # type: ignore[arg-type]
    ctx = Context(trainer_alive=False)
    s = replace(s, findings=diagnose(s, ctx))
    s = replace(s, timeline=timeline(s))
    return _decided(s, ctx)


def test_a_one_shot_report_dates_the_outage_from_evidence_never_from_its_own_probe() -> None:
    """restart-loop, gpu-zombie: "[CRITICAL] Inference server down since 20:03:46" and the timeline's "20:03:46
    inference server down", the moment the report ran; a report a minute later moved it again."""
    bounded = _down(events={"connection_refused": _refused(float("-inf"), NOW - 70)})
    down = next(f for f in bounded.findings if f.code == "server_down")
    assert f"down since {hhmm(NOW - 70, NOW)} at the latest" in down.message and down.since == NOW - 70
    assert to_json(bounded)["server"]["down_since"] == to_json(replace(bounded, time=NOW + 60))["server"]["down_since"]
    assert [e.time for e in bounded.timeline if "inference server down" in e.text] == [NOW - 70]
    assert f"DOWN since {hhmm(NOW - 70, NOW)} at the latest" in to_text(bounded)
    # Nothing in the logs dates it: the report says it saw it now, not that it went down now.
    unseen = _down()
    down = next(f for f in unseen.findings if f.code == "server_down")
    assert "down (first seen now)" in down.message, down.message
    assert to_json(unseen)["server"]["down_since"] is None and to_json(unseen)["server"]["down_first_seen"]
    assert "inference server down (first seen)" in [e.text.partition(" (conn")[0] for e in unseen.timeline]
    # A dashboard started after it went dates it from its own first look, and says so; one that saw it healthy
    # saw it go.
    srv = ServerState("sglang", URL, False, NOW - 60, None, error="connection refused")
    late = next(f for f in _down(server=srv).findings if f.code == "server_down")
    assert f"down (first seen {hhmm(NOW - 60, NOW)})" in late.message, late.message
    saw = next(f for f in _down(server=replace(srv, seen_up=True)).findings if f.code == "server_down")
    assert f"down since {hhmm(NOW - 60, NOW)} (" in saw.message, saw.message


def test_a_server_that_missed_one_check_is_not_down_in_the_same_report() -> None:
    """startup-crash: "Inference server: URL DOWN" beside the INFO "… a busy server can miss a check, so one miss
    is not yet a failure"."""
    server = ProcessInfo(21, NOW - 1200, "server", "server", 1, None, NOW - 1200, 0, ("python3",), "/run", "root")
    s = _down(
        processes=(server,),
        server=ServerState("sglang", URL, False, NOW - 0.5, 21, error="timeout after 2s", process_alive=True),
    )
    assert [f.code for f in s.findings if f.code.startswith("server")] == ["server_unhealthy"]
    line = next(x for x in to_text(s).splitlines() if x.startswith("Inference server:"))
    assert "DOWN" not in line and "one miss is not yet a failure" in line, line


def test_when_one_process_of_the_run_dies_its_logs_last_words_are_read_at_once(tmp_path: Path) -> None:
    """startup-crash watched live: the trainer died of its traceback while the launcher lived on; the dashboard
    kept the ending it had read a moment before (a growing log is read again only every few seconds) and said
    WARNING for 5 s while report, reading afresh, said crashed."""
    run = tmp_path / "run"
    run.mkdir()
    root = _root(tmp_path / "proc")
    log = run / "train.log"
    log.write_text("".join(f"step {n}/100 loss 0.{n:02d}\n" for n in range(1, 4)))
    for pid, argv in ((4242, b"launcher.sh\0"), (4300, b"python3\0train.py\0")):
        _proc(root, pid, argv, run)
        (root / str(pid) / "fd" / "1").symlink_to(log)
        (root / str(pid) / "fdinfo").mkdir()
        (root / str(pid) / "fdinfo" / "1").write_text("pos:\t0\nflags:\t02002001\nmnt_id:\t1\n")
    clock = FakeClock(time.time())
    cfg = Config.model_validate({"gpu": {"backend": "none"}, "interval_s": 1.0, "training": {"logs": ["train.log"]}})
    engine = Engine(cfg, run, clock=clock, proc_root=str(root))
    engine.poll_logs()
    engine.sample()
    snap = engine.build()
    assert snap.live_run is not None and sorted(pid for pid, _ in snap.live_run.members) == [4242, 4300]
    clock.advance(0.5)
    with log.open("a") as fh:
        fh.write("step 4/100 loss 0.04\n")
    engine.poll_logs()
    engine.sample()  # read again: it grew; from now on kept a few seconds while it grows
    clock.advance(0.5)
    with log.open("a") as fh:
        fh.write(
            "Traceback (most recent call last):\n"
            '  File "train.py", line 12, in <module>\n'
            "    model_id = args.model_id\n"
            "AttributeError: 'Namespace' object has no attribute 'model_id'\n"
        )
    shutil.rmtree(root / "4300")  # the trainer is gone; its launcher lives on
    engine.poll_logs()
    engine.sample()
    snap = engine.build()
    rs = snap.run_state
    assert rs is not None and rs.state == "crashed", rs
    assert snap.verdict is not None and snap.verdict.status == "CRITICAL"
    engine.stop()


PAYLOAD = "RuntimeError: Failed after 3 retries each. Payload: {'input_ids': [" + ", ".join(["151644"] * 40) + "]}"


def _member(pid: int, started: float) -> ProcessInfo:
    return ProcessInfo(pid, started, "trainer", "trainer", 1, None, started, 0, ("python3",), "/run", "root")


def _retrying(gone: tuple[tuple[int, str], ...] = (), started: float = NOW - 300) -> Snapshot:
    """server-crash: the trainer's log ends in the failure it logs at every retry; step 24 came at NOW - 40."""
    ending = LogEnding(
        path="/run/logs/output.log",
        failed=True,
        last_line=PAYLOAD,
        last_lineno=202,
        mtime=NOW - 1,
        progress_lineno=150,
        progress_line="Train step 24/100 done.",
        title=PAYLOAD,
        kind="exception",
        exc_type="RuntimeError",
        lineno=202,
        at=NOW - 1,
        evidence=((202, PAYLOAD),),
        count=6,
    )
    alive = () if gone else ((15644, "writes logs/trainer.log"), (15529, "writes logs/launcher.log"))
    run = LiveRun(True, None, NOW - 300, members=alive or ((15529, "writes logs/launcher.log"),), gone=gone)
    tr = TrainingState(24, 100, None, 1800.0, False, NOW - 40, NOW - 1)
    procs = tuple(_member(pid, started) for pid, _ in run.members)
    return Snapshot(
        host="h",
        time=NOW,
        profile="areal",
        run_dir="/run",
        endings=(ending,),
        live_run=run,
        training=tr,
        processes=procs,
    )


def test_a_trainer_that_logs_a_failure_and_retries_has_not_crashed_and_its_since_stays() -> None:
    """server-crash: "run crashed" while the trainer still ran and retried, its "since" and trainer.log:N moving
    with every retry; once a process of the run is gone, it crashed."""
    rs = decide_run_state(_retrying(), Context())
    assert rs.state != "crashed" and rs.since == NOW - 40, rs
    later = decide_run_state(replace(_retrying(), time=NOW + 8), Context())
    assert later.since == rs.since
    gone = decide_run_state(_retrying(gone=((15644, "writes logs/trainer.log"),)), Context())
    assert gone.state == "crashed", gone
    # A process of the run started after the failure is a new attempt: the failure's writer is gone.
    retried = decide_run_state(_retrying(started=NOW - 0.5), Context())
    assert retried.state == "crashed", retried


def test_no_findings_words_carry_a_request_payload() -> None:
    s = _retrying(gone=((15644, "writes logs/trainer.log"),))
    s = replace(s, run_state=decide_run_state(s, Context()))
    s = _decided(replace(s, findings=diagnose(s, Context())), Context())
    crashed = next(f for f in s.findings if f.code == "run_crashed")
    assert "151644" not in crashed.message and "Failed after 3 retries each" in crashed.message
    assert "151644" not in compact_text(s.findings, (), 80).plain


def _crash(n: int, t: float) -> Incident:
    title = "AttributeError: 'Namespace' object has no attribute 'model_id'"
    return Incident("traceback", "/run/train.log", 10 * n, t, t, 5, title, "train.py:12", signature="abc123")


def test_a_crash_loops_retry_that_logs_a_step_is_still_the_loop() -> None:
    """startup-crash: at each retry of the crash loop both views said OK / progressing for 2 s (the retry's step 1
    and 2 came after the last crash), and one record said "step": 2 beside "step 1 at …"."""
    crashes = tuple(_crash(n, NOW - 30 + 10 * n) for n in range(3))  # every 10 s; the last at NOW - 10
    step = EventSummary("step", Severity.INFO, 9, NOW - 60, NOW - 2, 0.0, 0, {"/run/train.log": 9})
    tb = EventSummary("traceback", Severity.WARNING, 3, NOW - 30, NOW - 10, 0.0, 0, {"/run/train.log": 3})
    tr = TrainingState(1, None, None, 1800.0, False, NOW - 2, NOW - 2)
    run = LiveRun(True, None, NOW - 5, members=((4300, "writes train.log"),), gone=((4200, "writes train.log"),))
    s = Snapshot(
        host="h",
        time=NOW,
        profile="generic",
        run_dir="/run",
        incidents=crashes,
        events={"step": step, "traceback": tb},
        training=tr,
        live_run=run,
        checkpoint=CheckpointState(CheckpointInfo("/run/ckpt/step_2", 2, None, None, NOW - 100, 1), 1, (2,)),
    )
    rs = decide_run_state(s, Context())
    assert rs.state == "crashed", rs
    s = replace(s, run_state=rs)
    s = _decided(replace(s, findings=diagnose(s, Context())), Context())
    assert s.verdict is not None and s.verdict.status == "CRITICAL"
    # Long after its last crash, still stepping: the loop is over.
    outlived = replace(s, time=NOW + 60, run_state=None, findings=(), verdict=None)
    assert decide_run_state(outlived, Context()).state != "crashed"
    # The record's step is the one its state names while it progresses, never an older attempt's checkpoint's.
    moving = replace(s, run_state=RunState("progressing", "step 1 at 05:09", NOW - 2))
    assert _decided(moving, Context()).verdict.step == 1  # type: ignore[union-attr]


def test_a_failure_a_live_process_logs_is_read_at_the_next_round(tmp_path: Path) -> None:
    """server-crash watched live: the dashboard kept the ending it read a moment before the trainer logged its
    failure (a growing log's ending is read again only every few seconds) and said OK while report said the run's
    processes log a failure they keep retrying."""
    run = tmp_path / "run"
    run.mkdir()
    root = _root(tmp_path / "proc")
    log = run / "train.log"
    log.write_text("".join(f"step {n}/100 loss 0.{n:02d}\n" for n in range(1, 4)))
    _proc(root, 4242, b"python3\0train.py\0", run)
    (root / "4242" / "fd" / "1").symlink_to(log)
    (root / "4242" / "fdinfo").mkdir()
    (root / "4242" / "fdinfo" / "1").write_text("pos:\t0\nflags:\t02002001\nmnt_id:\t1\n")
    clock = FakeClock(time.time())
    cfg = Config.model_validate({"gpu": {"backend": "none"}, "interval_s": 1.0, "training": {"logs": ["train.log"]}})
    engine = Engine(cfg, run, clock=clock, proc_root=str(root))
    engine.poll_logs()
    engine.sample()
    engine.build()
    clock.advance(0.5)
    with log.open("a") as fh:
        fh.write("step 4/100 loss 0.04\n")
    engine.poll_logs()
    engine.sample()  # read again: it grew; from now on kept a few seconds while it grows
    clock.advance(0.5)
    with log.open("a") as fh:
        fh.write(
            "Traceback (most recent call last):\n"
            '  File "trainer.py", line 88, in rollout\n'
            "    raise RuntimeError(f'Failed after 3 retries each. Payload: {payload}')\n"
            "RuntimeError: Failed after 3 retries each. Payload: {'input_ids': [1, 2, 3]}\n"
        )
    engine.poll_logs()
    engine.sample()
    snap = engine.build()
    assert [e.failed for e in snap.endings] == [True]
    engine.stop()
