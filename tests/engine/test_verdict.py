"""One verdict per snapshot (engine/diagnosis/verdict): the run's state, its headline finding and the one remedy,
decided from what is alive, and rendered the same by every view (header, banner, report, report --json, watch
--json, the exporter)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import (
    CheckpointInfo,
    CheckpointState,
    Finding,
    GpuHolder,
    LiveRun,
    ProcessInfo,
    ProcessStack,
    RecoverState,
    RunState,
    ServerState,
    Severity,
    Snapshot,
    SourceStatus,
    StackReport,
)
from rlwatch.engine.diagnosis import Context, decide
from rlwatch.engine.diagnosis.verdict import loop_state
from rlwatch.export.exporter import SnapshotCollector
from rlwatch.export.report import exit_code, to_text
from rlwatch.export.report import to_json_dict as to_json
from rlwatch.export.stream import changes
from rlwatch.sources.stacks import summarize
from rlwatch.widgets.findings import compact_text
from rlwatch.widgets.header import header_text

NOW = 1_763_700_000.0
REAL = Path(__file__).resolve().parents[1] / "real"
CRIT, WARN = Severity.CRITICAL, Severity.WARNING
URL = "http://127.0.0.1:30000"
LOOP = Finding(CRIT, "restart_loop", "Restart loop: the container started 5 times, every ~17s.", NOW - 100)
DOWN = Finding(CRIT, "server_down", f"Inference server down since 05:09 (connection refused) at {URL}.", NOW - 300)


def proc(pid: int, role: str, *, alive: bool = True) -> ProcessInfo:
    return ProcessInfo(pid, NOW - 60, role, role, 1, None, NOW - 60, 0, ("python3", role), "/run", "root", alive=alive)


def snap(*findings: Finding, **fields: object) -> Snapshot:
    base = Snapshot(host="h", time=NOW, profile="areal", run_dir="/run", findings=findings)
    return replace(base, **fields)  # type: ignore[arg-type]


def decided(s: Snapshot, ctx: Context | None = None) -> Snapshot:
    verdict, findings = decide(s, ctx or Context())
    return replace(s, verdict=verdict, findings=findings)


def test_a_restart_loop_leads_with_its_words_and_offers_no_key() -> None:
    s = decided(snap(replace(DOWN, action="restart-server"), LOOP, run_state=RunState("unknown", "no progress")))
    v = s.verdict
    assert v is not None and v.finding == "restart_loop" and s.findings[0].code == "restart_loop"
    assert v.action is None and v.fix == "fix the start command"
    assert "no key fixes a restart loop" in (v.next_step or "")
    # The 80x24 banner's one line is the loop, with what fixes it, not the server's key.
    line = compact_text(s.findings, (), 80).plain
    assert line.startswith("● CRITICAL Restart loop") and "fix the start command" in line, line


def test_a_crash_loop_is_crashed_never_hung() -> None:
    hung = RunState("hung", "no progress since 05:00 while its processes are alive (pid 12)", NOW - 200)
    rs = loop_state(hung, Finding(CRIT, "crash_repeating", "The same crash happened 3 times: AttributeError.", NOW))
    assert rs.state == "crashed" and "same crash happened 3 times" in rs.why
    progressing_after = RunState("progressing", "step 60", NOW - 5)
    assert loop_state(progressing_after, LOOP).state == "progressing"  # it stepped after the loop: over
    progressing_before = RunState("progressing", "step 57", NOW - 150)
    assert loop_state(progressing_before, LOOP).state == "crashed"  # the loop began after its last step


def test_a_dead_server_with_the_trainer_gone_is_resumed_everywhere() -> None:
    """Dashboard, report, report --json, watch --json and the exporter say one remedy, from what is alive."""
    recover = RecoverState("/run/step_info.json", 0, 54, 54, 125, 0, 55, 55)
    s = decided(
        snap(
            replace(DOWN, action="restart-server"),
            server=ServerState("sglang", URL, False, NOW - 300, None, error="connection refused"),
            processes=(proc(11, "trainer", alive=False),),
            recover=recover,
            run_state=RunState("stopped", "no process of the run is alive here"),
            sources=(SourceStatus("logs", True, NOW), SourceStatus("processes", True, NOW)),
        ),
        Context(trainer_alive=False),
    )
    v = s.verdict
    assert v is not None and v.action == "resume" and s.findings[0].action == "resume"
    assert v.next_step is not None and v.next_step.startswith("The trainer is gone: resume the run")
    assert " r " in compact_text(s.findings, (), 120).plain
    rep = to_json(s)
    assert rep["verdict"]["action"] == "resume" and rep["verdict"]["state"] == "stopped"
    assert rep["status"] == "critical" and rep["findings"][0]["action"] == "resume"  # the stable keys stay
    text = to_text(s)
    assert "The trainer is gone: resume the run" in text and "If the trainer still runs" not in text
    first = next(changes(None, s))
    assert first["verdict"]["action"] == "resume" and first["run_state"]["state"] == "stopped"
    metrics = {m.name: m for m in SnapshotCollector(lambda: s, clock=FakeClock(NOW)).families(s)}
    sample = metrics["rlwatch_verdict_info"].samples[0]
    assert sample.labels["action"] == "resume" and sample.labels["finding"] == "server_down"
    # With the trainer alive, the same finding is a server restart, in every view.
    alive = decided(replace(s, verdict=None, processes=(proc(11, "trainer"),)), Context(trainer_alive=True))
    assert alive.verdict is not None and alive.verdict.action == "restart-server"
    assert to_json(alive)["verdict"]["action"] == "restart-server"


def test_the_header_says_the_verdicts_state() -> None:
    hung = RunState("hung", "no progress", NOW - 200)
    s = decided(snap(LOOP, run_state=hung))
    assert s.verdict is not None and s.verdict.state == "hung"  # loop_state is the engine's, before diagnosis
    s = replace(s, verdict=replace(s.verdict, state="crashed"))
    assert "run crashed" in header_text(s, 120).plain and "run hung" not in header_text(s, 120).plain


def test_a_hang_says_where_to_look_next() -> None:
    hung = Finding(CRIT, "hung", "The run is hung: no progress since 05:00.", NOW - 100)
    live = LiveRun(True, None, NOW - 600, members=((4242, "writes train.log"),))
    s = decided(snap(hung, live_run=live, processes=(proc(4242, "trainer"),)))
    assert s.verdict is not None and s.verdict.command == "py-spy dump --pid 4242"
    assert "py-spy dump --pid 4242" in compact_text(s.findings, (), 120).plain


def test_hardware_and_shm_findings_keep_their_fix_in_the_banner() -> None:
    xid = Finding(CRIT, "xid_79", "GPU 0 fell off the bus (Xid 79) at 05:12; " + "x" * 200, NOW - 50)
    s = decided(snap(xid))
    assert "drain the node" in compact_text(s.findings, (), 80).plain
    shm = Finding(WARN, "shm_small", "/dev/shm is 64 MiB; " + "y" * 200, None)
    s = decided(snap(shm))
    assert "/dev/shm" in compact_text(s.findings, (), 80).plain.split("→")[-1]


def test_a_request_payload_is_never_the_run_line() -> None:
    payload = ", ".join(str(151643 + i) for i in range(40))
    rs = RunState("stopped", f"no progress since 05:00; its last line: server.log:9: {{'input_ids': [{payload}", NOW)
    s = decided(snap(DOWN, run_state=rs))
    assert s.verdict is not None and "151643" not in s.verdict.why
    run_line = next(line for line in to_text(s).splitlines() if line.startswith("run: stopped"))
    assert "151643" not in run_line and run_line.startswith("run: stopped — no progress since 05:00")
    assert "cause: Inference server down" in to_text(s)


def test_processes_running_before_the_stream_are_seen_not_started() -> None:
    first = snap(sources=(SourceStatus("logs", True, NOW),))  # the host's processes not looked at yet
    trainer = replace(proc(77, "trainer"), started_at=NOW - 60)
    second = replace(first, time=NOW + 1, processes=(trainer,), sources=(SourceStatus("processes", True, NOW + 1),))
    kinds = [r["type"] for r in changes(first, second) if r["type"].startswith("process")]
    assert kinds == ["process_seen"]
    young = replace(proc(78, "trainer"), started_at=NOW + 1.5, create_time=NOW + 1.5)
    third = replace(second, time=NOW + 2, processes=(trainer, young))
    records = [r for r in changes(second, third) if r["type"].startswith("process")]
    assert [(r["type"], r["pid"]) for r in records] == [("process_started", 78)]


def test_right_after_a_resume_the_server_is_starting_not_down() -> None:
    """The resumed launcher brings its own server: the banner must not ask for `s` while it comes up."""
    from rlwatch.common.state import EventSummary
    from rlwatch.engine.diagnosis.server import server_down

    steps = EventSummary("step", Severity.INFO, 30, NOW - 900, NOW - 100, 1.0, 0, {})
    launcher = replace(proc(90, "launcher"), started_at=NOW - 5, create_time=NOW - 5)
    srv = ServerState("sglang", URL, False, NOW - 120, None, error="connection refused")
    found = {f.code: f for f in server_down(snap(events={"step": steps}, processes=(launcher,), server=srv), Context())}
    assert set(found) == {"server_starting"} and found["server_starting"].severity is Severity.INFO
    before = replace(launcher, started_at=NOW - 1000, create_time=NOW - 1000)  # it stepped since it started
    found = {f.code for f in server_down(snap(events={"step": steps}, processes=(before,), server=srv), Context())}
    assert found == {"server_down"}


def test_a_quoted_payload_is_left_out_of_the_run_line_and_its_evidence() -> None:
    ids = "[151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13]"
    why = (
        "ChildFailedError:; exit code 1; it began with: RuntimeError: Failed after 3 retries each. Payload: "
        f"{{'input_ids': {ids}, 'sampling_params': {{'top_p': 1.0, ' (trainer.log:294, 13:44:11); 4 of its processes "
        "still alive"
    )
    evidence = (f"trainer.log:163: RuntimeError: Failed after 3 retries each. Payload: {{'input_ids': {ids}}}. Ad",)
    s = decided(snap(DOWN, run_state=RunState("crashed", why, NOW, evidence)))
    assert s.verdict is not None and "151644" not in s.verdict.why
    assert s.verdict.why.endswith(
        "Failed after 3 retries each (its request's payload left out) (trainer.log:294, "
        "13:44:11); 4 of its processes still alive"
    )
    text = to_text(s)
    assert "151644" not in text.split("Findings:")[0]


def test_the_same_crash_on_every_start_is_crashed_even_beside_a_progress_line() -> None:
    """Read live, a progress line of the same chunk as the crash may look newer than it: the crash loop still wins."""
    from rlwatch.common.state import EventSummary, Incident
    from rlwatch.config.models import Thresholds
    from rlwatch.engine.diagnosis import decide_run_state

    title = "AttributeError: 'Namespace' object has no attribute 'model_id'"
    crashes = tuple(
        Incident(
            "traceback", "/run/train.log", 9 + 28 * i, NOW - 80 + 20 * i, NOW - 80 + 20 * i, 3, title, "t.py:22", "sig"
        )
        for i in range(3)
    )
    tb = EventSummary("traceback", Severity.WARNING, 3, NOW - 80, NOW - 40, 1.0, 1, {})
    step = EventSummary("step", Severity.INFO, 6, NOW - 90, NOW - 39, 1.0, 0, {})
    live = LiveRun(True, None, NOW - 100, members=((5, "writes train.log"),))
    s = snap(incidents=crashes, events={"traceback": tb, "step": step}, live_run=live, processes=(proc(5, "trainer"),))
    rs = decide_run_state(s, Context(thresholds=Thresholds()))
    assert rs.state == "crashed" and "same crash happened 3 times" in rs.why, rs


def test_the_old_attempts_refusals_do_not_make_the_new_server_failing() -> None:
    """After a confirmed `r` the resumed launcher starts a new server; the 88 refusals of the old attempt came before
    it started, so the banner says it is starting, never `s restart server`."""
    from rlwatch.common.state import EventSummary
    from rlwatch.engine.diagnosis.server import server_down

    old = EventSummary("connection_refused", Severity.CRITICAL, 88, NOW - 200, NOW - 60, 0.0, 0, {})
    server = replace(proc(91, "server"), started_at=NOW - 3, create_time=NOW - 3)
    launcher = replace(proc(90, "launcher"), started_at=NOW - 4, create_time=NOW - 4)
    srv = ServerState("sglang", URL, False, NOW - 3, 91, error="connection refused", process_alive=True)
    s = snap(events={"connection_refused": old}, processes=(launcher, server), server=srv)
    assert {f.code: f.severity for f in server_down(s, Context())} == {"server_starting": Severity.INFO}
    fresh = replace(old, last=NOW - 1)  # refused after the new server started: it is failing, not starting
    s = snap(events={"connection_refused": fresh}, processes=(launcher, server), server=srv)
    assert {f.code for f in server_down(s, Context())} != {"server_starting"}


def test_a_new_server_that_said_ready_gets_its_grace_from_its_own_start() -> None:
    """The probe's "down since" is the old server's: the new process, ready 1 s after its start, is checked again
    before anyone is asked for `s`."""
    from rlwatch.common.state import EventSummary
    from rlwatch.engine.diagnosis.server import server_down

    ready = EventSummary("server_ready", Severity.INFO, 2, NOW - 900, NOW - 2, 0.0, 0, {})
    server = replace(proc(91, "server"), started_at=NOW - 3, create_time=NOW - 3)
    srv = ServerState("sglang", URL, False, NOW - 60, 91, error="connection refused", process_alive=True)
    found = list(server_down(snap(events={"server_ready": ready}, processes=(server,), server=srv), Context()))
    assert [(f.code, f.severity, f.action) for f in found] == [("server_unhealthy", Severity.INFO, None)]
    later = snap(events={"server_ready": ready}, processes=(server,), server=srv, time=NOW + 30)
    assert [(f.code, f.severity) for f in server_down(later, Context())] == [("server_unhealthy", Severity.CRITICAL)]


def test_the_reports_next_steps_follow_each_findings_decided_remedy_and_skip_information() -> None:
    """The text report said "if the trainer still runs … if it is gone" after the trainer was known gone, and "restart
    it" under a server finding that only said it missed one check."""
    missed = Finding(Severity.INFO, "server_unhealthy", "Inference server process 9 did not answer … just now.", NOW)
    text = to_text(snap(replace(DOWN, action="resume"), missed))
    steps = text.split("Next steps:")[1]
    assert "resume the run (rlwatch act resume)" in steps and "If the trainer still runs" not in steps
    assert "restart-server" not in steps
    alive = to_text(snap(replace(DOWN, action="restart-server"))).split("Next steps:")[1]
    assert "The trainer still runs: restart the inference server" in alive and "act resume" not in alive


def test_a_hang_points_at_a_rank_not_at_torchruns_agent() -> None:
    """torchrun's agent only waits for its children: its stack says nothing of where the collective hangs."""
    hung = Finding(CRIT, "nccl_timeout", "1 NCCL collective timeout: rank 0 ALLREDUCE SeqNum=13.", NOW - 100)
    agent = replace(proc(10, "trainer"), cmdline=("/usr/bin/python3", "/usr/local/bin/torchrun", "train.py"))
    ranks = (proc(11, "trainer"), proc(12, "trainer"))
    live = LiveRun(True, None, NOW - 600, members=((10, "writes torchrun.log"), (11, "child"), (12, "child")))
    s = decided(snap(hung, live_run=live, processes=(agent, *ranks)))
    # Nothing says which rank the other waits for: every rank's stack is read, never one guessed.
    assert s.verdict is not None and s.verdict.command == "py-spy dump --pid 11; py-spy dump --pid 12"
    holder = GpuHolder(12, NOW - 600, "root", ("python3", "train.py"), ("/dev/nvidia1",), 2**30, True, None)
    s = decided(snap(hung, live_run=live, processes=(agent, *ranks), holders=(holder,)))
    assert s.verdict is not None and s.verdict.command == "py-spy dump --pid 12"


def test_with_nothing_of_the_run_alive_a_configured_launch_makes_the_remedy_a_resume() -> None:
    """rlwatch started after the launcher died (or before it saw it): nothing of the run alive, the server down.
    Restarting the server alone trains nothing; with a launch command configured the one remedy is the resume."""
    srv = ServerState("sglang", URL, False, NOW - 30, None, error="connection refused")
    s = snap(replace(DOWN, action="restart-server"), server=srv)
    configured = decided(s, Context(resume_known=True))
    assert configured.verdict is not None and configured.verdict.action == "resume"
    unknown = decided(s, Context())  # no way to start the run known: the server is what can be restarted
    assert unknown.verdict is not None and unknown.verdict.action == "restart-server"


def _stack(pid: int, label: str, *frames: str) -> ProcessStack:
    return ProcessStack(pid, label, frames, frames[0], 1)


def test_a_hang_sends_the_reader_to_the_rank_the_others_wait_for_or_to_every_rank() -> None:
    """The hang demo sent the person to `py-spy dump` on rank 0, which waited in the all-reduce, because its pid came
    first. The rank whose frames stand in a known collective waits; the one in its own code is the one to read. Where
    no frame is a known collective, rlwatch does not know, and the remedy reads every rank."""
    hung = Finding(CRIT, "hung", "The run is hung: no progress since 05:00.", NOW - 100)
    live = LiveRun(True, None, NOW - 600, members=((21, "child"), (22, "child")))
    waiting = _stack(21, "rank 0", "all_reduce (distributed_c10d.py:50)", "train_step (ddp.py:120)")
    away = _stack(22, "rank 1", "never_reaches_collective (ddp.py:114)", "hang (ddp.py:126)")
    report = StackReport(NOW - 50, "hang declared", (waiting, away), (), "", None)
    s = decided(snap(hung, live_run=live, processes=(proc(21, "trainer"), proc(22, "trainer")), stacks=report))
    assert s.verdict is not None and s.verdict.command == "py-spy dump --pid 22"
    assert "py-spy dump --pid 22)" in (s.verdict.next_step or ""), s.verdict.next_step  # the text report's words too
    # The old simulator's frames: neither rank in a known collective. Not known, so both.
    old_waiting = _stack(21, "rank 0", "wait_in_collective (ddp.py:118)", "hang (ddp.py:126)")
    report = replace(report, processes=(old_waiting, away))
    s = decided(snap(hung, live_run=live, processes=(proc(21, "trainer"), proc(22, "trainer")), stacks=report))
    assert s.verdict is not None and s.verdict.command == "py-spy dump --pid 21; py-spy dump --pid 22"
    _, summary = summarize((old_waiting, away))
    assert "waits for it" not in summary and "the frames do not tell" in summary, summary
    _, summary = summarize((waiting, away))
    assert summary.startswith(
        "rank 1 in never_reaches_collective (ddp.py:114), not in a collective; rank 0 waits for it"
    )


def test_an_nccl_timeout_with_no_rank_left_offers_no_stack_key_and_json_says_the_texts_next_steps() -> None:
    """After the abort nothing of the run is alive: `t` answers "no Python process of the run to read", so neither it
    nor a py-spy command is offered; the JSON verdict carries the same next steps as the text report."""
    failed = Finding(CRIT, "torchrun_failed", "torchrun's root cause (first observed failure): rank 0 (SIGABRT).", NOW)
    nccl = Finding(CRIT, "nccl_timeout", "1 NCCL collective timeout: rank 0 ALLREDUCE SeqNum=13.", NOW - 30)
    live = LiveRun(True, None, NOW - 600, members=((11, "child"),))
    s = decided(snap(failed, nccl, live_run=live, processes=(proc(11, "trainer", alive=False),)))
    timeout = next(f for f in s.findings if f.code == "nccl_timeout")
    assert timeout.command is None and "(t)" not in (timeout.fix or ""), timeout
    steps = to_json(s)["verdict"]["next_steps"]
    text = to_text(s).split("Next steps:")[1]
    assert steps and all(words in text for words in steps), (steps, text)
    assert to_json(s)["verdict"]["next_step"] == steps[0] and "no rank is left to read" in steps[0]
    assert "key t" not in " ".join(steps)


def test_after_the_nccl_abort_torchruns_headline_carries_the_timeouts_remedy_in_every_view() -> None:
    """The nccl-timeout demo after SIGABRT: torchrun's report leads (same time as the timeout, listed first); its
    banner had no remedy and report --json's verdict said null for action, command, fix and next_step."""
    failed = Finding(CRIT, "torchrun_failed", "torchrun's root cause (first observed failure): rank 0 (SIGABRT).", NOW)
    nccl = Finding(CRIT, "nccl_timeout", "1 NCCL collective timeout: rank 0 ALLREDUCE SeqNum=13.", NOW)
    live = LiveRun(True, None, NOW - 600, members=((11, "child"),))
    s = decided(snap(failed, nccl, live_run=live, processes=(proc(11, "trainer", alive=False),)))
    v = s.verdict
    assert v is not None and v.finding == "torchrun_failed"
    assert v.fix == "read each rank's log, then resume", v
    assert v.next_step is not None and "read the first error before the timeout" in v.next_step
    head = to_json(s)["verdict"]
    assert head["fix"] == v.fix and head["next_step"] == v.next_step and head["next_steps"]
    assert "→ read each rank's log, then resume" in compact_text(s.findings, (), 117).plain


def test_an_oom_kill_headline_has_next_steps_in_json_and_torchruns_report_takes_its_fix() -> None:
    """kernel-oom: report --json's next_steps was empty for kernel_oom_kill; torchrun's report beside it said
    nothing of what fixes the run."""
    oom = Finding(CRIT, "kernel_oom_kill", "Rank 1 (pid 9724) was killed by the kernel OOM killer.", NOW - 5, fix=None)
    failed = Finding(CRIT, "torchrun_failed", "torchrun's root cause (first observed failure): rank 1.", NOW)
    s = decided(snap(oom, failed, processes=(proc(11, "trainer", alive=False),)))
    steps = to_json(s)["verdict"]["next_steps"]
    assert steps and "memory limit" in steps[0], steps
    torchrun = next(f for f in s.findings if f.code == "torchrun_failed")
    assert torchrun.fix == "a higher memory limit, or a run that holds less", torchrun
    assert "Next steps:" in to_text(s) and steps[0] in to_text(s)


def test_torchruns_report_alone_says_what_to_do() -> None:
    failed = Finding(CRIT, "torchrun_failed", "torchrun's root cause (first observed failure): rank 0 (exit 1).", NOW)
    s = decided(snap(failed, processes=(proc(11, "trainer", alive=False),)))
    assert s.verdict is not None and s.verdict.fix == "fix the root cause, then resume"
    # No checkpoint: start it again, never "resume from the last checkpoint" (kernel-oom's finding said "start the run
    # again (no checkpoint to resume from was found)" beside a next step to resume).
    assert s.verdict.next_step is not None and "start the run again (no checkpoint" in s.verdict.next_step
    assert "act resume" not in s.verdict.next_step
    ckpt = CheckpointState(CheckpointInfo("/run/out/checkpoint-5", 5, None, None, None, None), 1, (5,))
    s = decided(snap(failed, processes=(proc(11, "trainer", alive=False),), checkpoint=ckpt))
    assert s.verdict is not None and s.verdict.next_step is not None
    assert s.verdict.next_step.endswith("then resume from checkpoint-5 (step 5) (rlwatch act resume)."), s.verdict


@pytest.mark.parametrize(
    "code",
    ["run_crashed", "checkpoint_wont_fit", "loss_scale_collapse", "watchdog_not_responding", "device_busy",
     "kernel_oom_kill", "torchrun_failed", "crash_repeating", "restart_loop", "gpu_lost"],
)  # fmt: skip
def test_every_critical_headline_carries_a_remedy_the_banner_shows_and_a_next_step(code: str) -> None:
    """A critical headline with no key, no command and no fix words left the banner's remedy empty (the nccl-timeout
    abort, the server restart's 'The run crashed: …')."""
    s = decided(snap(Finding(CRIT, code, "Something critical happened.", NOW), processes=(proc(11, "trainer"),)))
    v = s.verdict
    assert v is not None and v.finding == code
    assert v.action or v.command or v.fix, v
    assert "→" in compact_text(s.findings, (), 117).plain
    assert to_json(s)["verdict"]["next_steps"], code


def test_unknown_exits_3_never_0() -> None:
    """README: exit 0 healthy, 1 problems, 2 usage; a run whose progress the evidence does not show is 3 (Nagios's
    UNKNOWN), so a script never reads "all is well" from it."""
    unknown = decided(snap(run_state=RunState("unknown", "its step 12 came by 05:00 at the latest")))
    assert unknown.verdict is not None and unknown.verdict.status == "UNKNOWN"
    assert exit_code(unknown) == 3
    assert exit_code(decided(snap(run_state=RunState("progressing", "step 12 at 05:00")))) == 0
    assert exit_code(decided(snap(DOWN, run_state=RunState("unknown", "no progress seen yet")))) == 1


def test_the_real_two_gpu_hangs_frames_do_not_say_who_waits_so_every_rank_is_read() -> None:
    """tests/real/torchrun-hang-2gpu: rank 0 waits in NCCL under `.cpu()` (no Python frame of a collective: its stack
    ends in train_step), rank 1 loops in never_reaches_collective. The frames do not decide it, so rlwatch says so and
    reads both ranks, never the agent and never one guessed."""
    data = json.loads((REAL / "torchrun-hang-2gpu" / "hang-2gpu-stacks.json").read_text())
    stacks = tuple(
        ProcessStack(p["pid"], p["label"], tuple(p["frames"]), p["where"], p["threads"]) for p in data["processes"]
    )
    _, summary = summarize(stacks)
    assert summary.startswith("which rank waits for which the frames do not tell"), summary
    agent = replace(proc(914, "trainer"), cmdline=("/usr/bin/python3", "/usr/local/bin/torchrun", "hang_2gpu.py"))
    live = LiveRun(True, None, NOW - 600, members=((914, "writes train.log"), (956, "child"), (957, "child")))
    hung = Finding(CRIT, "hung", "The run is hung: no progress since 13:50:12.", NOW - 100)
    report = StackReport(NOW - 50, "hang declared", stacks, (), summary, None)
    s = decided(snap(hung, live_run=live, processes=(agent, proc(956, "trainer"), proc(957, "trainer")), stacks=report))
    assert s.verdict is not None and s.verdict.command == "py-spy dump --pid 956; py-spy dump --pid 957"
