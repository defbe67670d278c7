"""One verdict per snapshot: the run's state, its worst finding and the one remedy for it.

The rules say what is wrong, each in its own words; this module decides, once, which of those is the headline and
what fixes it, from what is alive. Every view (the dashboard's header, banner, panels and dialogs, ``report``,
``report --json``, ``watch --json``, the exporter, notifications) renders :class:`Verdict` instead of deriving its
own, so the dashboard cannot say "resume" while the report says "restart the server":

- a restart loop leads, with its words: restarting a process the platform keeps restarting fixes nothing;
- a crash loop (the same exception on every start) is crashed, never hung (:func:`loop_state`);
- with the trainer gone, what brings a dead server back is the resume (its launcher starts its own server);
- a hang and an NCCL timeout say where to look next (each rank's stack), since no key fixes either.
"""

from __future__ import annotations

import re
from dataclasses import replace

from rlwatch.common.state import Finding, RunState, Severity, Snapshot, Verdict
from rlwatch.common.vocab import FindingCode, StatusName
from rlwatch.engine.diagnosis.base import Context
from rlwatch.engine.diagnosis.host import resume_text
from rlwatch.engine.diagnosis.restarts import restarting
from rlwatch.engine.diagnosis.stacks import awaited
from rlwatch.sources.stacks import waits_for

__all__ = ["LOOPS", "decide", "loop_state", "order_key", "status_of", "without_payload"]

# Findings that mean the run cannot stay up, whatever is restarted: they lead, in this order.
LOOPS: tuple[FindingCode, ...] = ("restart_loop", "crash_repeating")
# A request's payload (token ids) as a log's last line: never the words a state is said in.
_PAYLOAD = re.compile(r"(?:-?\d+\s*,\s*){12,}")
_LAST_LINE = "; its last line: "

# What to do next, in words, where the headline's own action does not say all of it.
_NEXT: dict[FindingCode, str] = {
    "restart_loop": "The container (or its launcher) keeps restarting and never stays up: read the first lines "
    "after each start and fix the start command; no key fixes a restart loop, and a resume would start into it "
    "again.",
    "crash_repeating": "Fix the exception named above; restarting or resuming will hit it again.",
    "hung": "Read where each process waits (key t on the dashboard, or py-spy dump --pid PID): a collective one rank "
    "never reached hangs the others; once the cause is known, stop the run and resume it (rlwatch act resume).",
    "nccl_timeout": "A rank never joined a collective: read each rank's stack (key t, or py-spy dump --pid PID) and "
    "the first error before the timeout; once the stuck rank is gone, resume from the last checkpoint (rlwatch act "
    "resume).",
    "shm_small": "Give the container a bigger /dev/shm (docker run --shm-size=16g, or a memory-backed emptyDir at "
    "/dev/shm in Kubernetes) and start it again; no key can resize it from inside.",
    "shm_exhausted": "Give the container a bigger /dev/shm (docker run --shm-size=16g, or a memory-backed emptyDir "
    "at /dev/shm in Kubernetes) and start it again; no key can resize it from inside.",
    "run_crashed": "Read the failure above and the lines before it; fix what it names, then resume from the last "
    "checkpoint (rlwatch act resume).",
    "run_stopped": "If it was not stopped on purpose, resume it from the last checkpoint (rlwatch act resume).",
    "checkpoint_wont_fit": "Free space on the checkpoint volume or keep fewer checkpoints (save_total_limit) before "
    "the next save fails and takes the run down.",
    "loss_scale_collapse": "fp16 training has stopped learning: lower the learning rate, clip gradients or train in "
    "bf16, and resume from a checkpoint saved before the collapse.",
}
# Next steps that end in starting the run again, said from what there is to start from (a checkpoint, the recover
# info, or nothing: "start the run again", never a resume from a checkpoint that does not exist).
_NEXT_THEN: dict[FindingCode, str] = {
    "torchrun_failed": "Read the root cause above and what its rank printed before it; fix what it names",
    "kernel_oom_kill": "The kernel killed a process of the run for memory: raise the pod's or container's memory "
    "limit, or make the run hold less (smaller batches, fewer workers)",
    "oom_kill": "The kernel killed a process for memory: raise the memory limit, or make the run hold less",
}
# Where neither a key nor a command fixes a finding, what does, in the few words a one-line banner keeps whole.
_FIX: dict[FindingCode, str] = {
    "restart_loop": "fix the start command",
    "crash_repeating": "fix the exception",
    "gpu_lost": "drain the node, resume elsewhere",
    "gpu_fault": "drain the node, resume elsewhere",
    "gpu_memory_fault": "drain the node, resume elsewhere",
    "shm_small": "a bigger /dev/shm (--shm-size)",
    "shm_exhausted": "a bigger /dev/shm (--shm-size)",
    "kernel_oom_kill": "a higher memory limit, or a run that holds less",
    "oom_kill": "a higher memory limit, or a run that holds less",
    "hung": "read each rank's stack (t)",
    "nccl_timeout": "read each rank's stack (t)",
    "torchrun_failed": "fix the root cause, then resume",
    "run_crashed": "fix what it names, then resume",
    "checkpoint_wont_fit": "free space, or keep fewer checkpoints",
    "loss_scale_collapse": "lower the learning rate, or train in bf16",
    "watchdog_not_responding": "restart the watchdog",
    "device_busy": "stop what holds the GPU",
}
_WAIT_FIX = "wait: it restarts by itself"  # restarts.restarting's words, short
_XID = "The GPU failed in hardware: drain this node (do not restart the run on it) and resume on another."
SERVER_ALIVE = "The trainer still runs: restart the inference server (rlwatch act restart-server)."
SERVER_GONE = "The trainer is gone: resume the run (rlwatch act resume); its launcher brings its server back."


def status_of(s: Snapshot) -> StatusName:
    """CRITICAL or WARNING by the worst finding; otherwise OK only with evidence that the run progresses (or
    finished): a run whose state is unknown is UNKNOWN, never OK for the lack of a known failure."""
    if any(f.code == "no_run" for f in s.findings):
        return "NO RUN"
    worst = s.worst
    if worst is Severity.CRITICAL:
        return "CRITICAL"
    if worst is Severity.WARNING:
        return "WARNING"
    if s.run_state is not None and not s.run_state.healthy:
        return "UNKNOWN"
    return "OK"


def loop_state(rs: RunState, loop: Finding | None) -> RunState:
    """A run that keeps failing at its start is crashed, in the loop's words, never hung or unknown: its processes
    live only because something starts them again."""
    if loop is None or rs.state in ("crashed", "finished"):
        return rs
    # A crash loop still named critical has not been outlived (crashes._outlived): a retry's step is the loop's.
    if (
        rs.state == "progressing"
        and loop.code != "crash_repeating"
        and (loop.since is None or rs.since is None or rs.since > loop.since)
    ):
        return rs  # it stepped after the loop began: the loop is over (its finding says when it was)
    return RunState("crashed", loop.message.rstrip("."), loop.since, rs.evidence)


def _trainer_gone(s: Snapshot, ctx: Context) -> bool:
    """The trainer is gone (a launcher left behind does not train: the resume stops it and starts it again). Never
    while the run's state rests on a process of it alive (progressing, hung): one record said "progressing" beside
    "The trainer is gone: resume the run" when no process carried the trainer's role."""
    if s.run_state is not None and s.run_state.state in ("progressing", "hung"):
        return False
    if ctx.trainer_alive is not None:
        return not ctx.trainer_alive
    return not any(p.alive and p.role == "trainer" for p in s.processes)


def _resumable(s: Snapshot, ctx: Context) -> bool:
    return s.recover is not None or ctx.resume_known or any(p.role == "launcher" for p in s.processes)


def order_key(f: Finding) -> tuple[int, int, float]:
    """Most severe first; at one severity, a loop before everything (it is why the rest happen), then the oldest.
    The banner sorts by this key too, so its first line is the verdict's headline."""
    loop = LOOPS.index(f.code) if f.code in LOOPS else len(LOOPS)
    return (f.severity.rank, loop, f.since if f.since is not None else float("inf"))


def _order(findings: tuple[Finding, ...]) -> list[Finding]:
    return sorted(findings, key=order_key)


# A request's payload as a failure quotes it (AReaL's "Failed after 3 retries each. Payload: {'input_ids': […"), up to
# where the words go on (" (trainer.log:294, 13:44:11)") or the end.
_QUOTED_PAYLOAD = re.compile(r"\.? Payload: [\[{].*?(?=(?: \([^()]*:\d+, [^()]*\))|\Z)")


def without_payload(text: str) -> str:
    """``text`` without the request payload it quotes: token ids cut at "Ad" are never what a person reads first."""
    text = _QUOTED_PAYLOAD.sub(" (its request's payload left out)", text)
    head, sep, tail = text.partition(_LAST_LINE)
    if sep and _PAYLOAD.search(tail):
        return head
    return text


def _why(rs: RunState | None) -> str:
    """The state's words, without a request's payload (a list of token ids says nothing)."""
    if rs is None:
        return "not assessed yet"
    return without_payload(rs.why)


def _fix_words(code: FindingCode) -> str | None:
    if code.startswith("xid_"):
        return "drain the node, resume elsewhere"
    return _FIX.get(code)


# The words of every step that ends in a resume: none of them is said while a restart loop is suspected or named.
_RESUMES = "rlwatch act resume"


def _looping(s: Snapshot, ctx: Context) -> str | None:
    """Why a resume would start into a loop, or None: a restart loop or crash loop is named, or the run restarted by
    itself after its last progress (restarts.restarting) and has not been seen to stay up yet."""
    if any(f.code in LOOPS and f.severity is not Severity.INFO for f in s.findings):
        return ""  # the loop's own finding leads and says what to do
    return restarting(s, ctx)


def _remedy(f: Finding, s: Snapshot, ctx: Context, looping: str | None = None) -> tuple[Finding, str | None]:
    """The finding with the one remedy for it, from what is alive, and what to do next in words. ``looping``
    (:func:`_looping`): a restart loop is suspected or named, and no finding offers a resume."""
    action, command = f.action, f.command
    fix = f.fix or _fix_words(f.code)
    gone = _trainer_gone(s, ctx)
    hardware = f.code.startswith("xid_") or f.code in ("gpu_lost", "gpu_fault", "gpu_memory_fault")
    step = _NEXT.get(f.code) or (_XID if hardware and f.severity is Severity.CRITICAL else None)
    if f.code in _NEXT_THEN:
        again = resume_text(s)
        step = f"{_NEXT_THEN[f.code]}; then {again}" + (f" ({_RESUMES})." if again.startswith("resume") else ".")
    if f.code in LOOPS:
        action = None  # a restart into the same failure fixes nothing
    elif f.code in ("server_down", "connection_refused") and not (s.training and s.training.finished):
        if gone and _resumable(s, ctx):
            action, command, step = "resume", None, SERVER_GONE
        elif not gone:
            action, command, step = "restart-server", None, SERVER_ALIVE
    elif f.code in ("hung", "nccl_timeout") and action is None and command is None:
        command = _read_stacks(s)
        if command is None:  # no process of the run left to read: no key or command that reads one is offered
            fix = _GONE_FIX.get(f.code) if fix == _FIX.get(f.code) else fix
            step = _GONE_NEXT.get(f.code, step)
        elif step is not None:
            step = step.replace("py-spy dump --pid PID", command)  # the words name the pids the remedy reads
    if action == "resume" and not gone:
        action = None  # the trainer lives: a resume would be refused, and a key that fails is no remedy
    if looping is not None and f.code not in LOOPS:
        # One verdict while the run restarts by itself: no finding offers the resume the loop would swallow.
        if action == "resume":
            action = None
            if looping and not (command or fix):
                # What to do instead, in the banner too: restart-loop's server_down led with no remedy at all for
                # the 30 s between the first restart and the loop's name.
                fix = _WAIT_FIX
        if step is not None and _RESUMES in step:
            step = looping or None
    if (action, command, fix) != (f.action, f.command, f.fix):
        f = replace(f, action=action, command=command, fix=fix)
    return f, step


_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "deepspeed", "accelerate")
# What to do next once no process of the run is left whose stack could be read, in words and in the banner's few.
_GONE_NEXT = {
    "nccl_timeout": "A rank never joined a collective, and no rank is left to read: read the first error before the "
    "timeout (above) in each rank's log; then resume from the last checkpoint (rlwatch act resume).",
}
_GONE_FIX = {"nccl_timeout": "read each rank's log, then resume"}
# Failures whose cause another finding names: torchrun's report says which rank failed first, the NCCL timeout or
# the OOM kill beside it says why, and what fixes that is what fixes the run (after the nccl-timeout abort the
# headline was torchrun's report with no remedy at all, its cause's remedy only in the second line).
_CAUSED_BY_ANOTHER: tuple[FindingCode, ...] = ("torchrun_failed",)
# What can be such a cause: a finding about the run's own failure (never, say, the watchdog missing beside it).
_CAUSES: tuple[FindingCode, ...] = (
    "nccl_timeout",
    "kernel_oom_kill",
    "oom_kill",
    "cuda_oom",
    "shm_small",
    "shm_exhausted",
    "gpu_lost",
    "gpu_fault",
    "gpu_memory_fault",
    "server_down",
    "connection_refused",
    "collective_mismatch",
    "collective_missing_rank",
)


def _py_spy(pids: tuple[int, ...]) -> str:
    """One command that reads every pid's stack: one dump, two in a row, or a loop."""
    if len(pids) == 1:
        return f"py-spy dump --pid {pids[0]}"
    if len(pids) == 2:
        return f"py-spy dump --pid {pids[0]}; py-spy dump --pid {pids[1]}"
    return f"for p in {' '.join(str(p) for p in pids)}; do py-spy dump --pid $p; done"


def _read_stacks(s: Snapshot) -> str | None:
    """The command that reads the stacks to look at next. Where
    a rank's frames stand in a known collective and another's do not, the one waited for (the sampled stacks, else
    the stacks read once); where they do not decide, every rank's (never one guessed); None when no process of the
    run is alive to read."""
    ranks = _rank_pids(s)
    sampled = awaited(s)
    if sampled is not None and sampled[0]:
        return _py_spy(sampled[0])
    st = s.stacks
    if st is not None and st.processes:
        decided = waits_for(st.processes)
        alive = set(ranks)
        if decided is not None and decided[0] and all(p.pid in alive for p in decided[0]):
            return _py_spy(tuple(p.pid for p in decided[0]))
    return _py_spy(ranks) if ranks else None


def _rank_pids(s: Snapshot) -> tuple[int, ...]:
    """Every rank of the run alive: the sampled processes with a rank, else the members holding a GPU, else every
    member alive that is not a launcher (torchrun's agent only waits for its children)."""
    if s.live_run is None:
        return ()
    dead = {p.pid for p in s.processes if not p.alive} | set(s.live_run.weak) | {pid for pid, _ in s.live_run.gone}
    alive = [pid for pid, _ in s.live_run.members if pid not in dead]
    sampling = s.sampling
    if sampling is not None:
        ranked = sorted(p.pid for p in sampling.processes if p.alive and p.rank is not None and p.pid in alive)
        if ranked:
            return tuple(ranked)
    on_gpu = {h.pid for h in s.holders if h.in_run}
    if any(pid in on_gpu for pid in alive):
        return tuple(pid for pid in alive if pid in on_gpu)
    launchers = {
        p.pid
        for p in s.processes
        if p.role == "launcher" or any(word in part for part in p.cmdline[:3] for word in _LAUNCHERS)
    }
    return tuple(pid for pid in alive if pid not in launchers) or tuple(alive[:1])


def _step(s: Snapshot) -> tuple[int | None, str | None]:
    """One step number, from the best evidence: the log's own counter or bar, else the latest checkpoint's."""
    tr = s.training
    latest = s.checkpoint.latest if s.checkpoint else None
    ckpt = latest.global_step if latest is not None else None
    now = s.run_state is not None and s.run_state.state == "progressing"  # its state names the log's step
    if tr is not None and tr.last_step is not None and (ckpt is None or tr.last_step >= ckpt or now):
        return tr.last_step, "log"
    if ckpt is not None:
        return ckpt, "checkpoint"
    return (tr.last_step, "log") if tr is not None and tr.last_step is not None else (None, None)


def _by_its_cause(shown: list[Finding], steps: list[tuple[str, str | None]]) -> None:
    """A failure another finding explains (:data:`_CAUSED_BY_ANOTHER`) takes that finding's remedy and next step, in
    place: the first critical finding beside it with a remedy of its own (a key, a command or fix words) is its
    cause's. Without one it keeps its own general words."""
    words = dict(steps)
    cause = next(
        (
            f
            for f in shown
            if f.severity is Severity.CRITICAL
            and (f.code in _CAUSES or f.code.startswith("xid_"))
            and (f.action or f.command or f.fix)
        ),
        None,
    )
    if cause is None:
        return
    for i, f in enumerate(shown):
        if f.code in _CAUSED_BY_ANOTHER and f.severity is Severity.CRITICAL:
            shown[i] = replace(f, action=cause.action, command=cause.command, fix=cause.fix)
            at = next(j for j, (code, _) in enumerate(steps) if code == f.code)
            steps[at] = (f.code, words.get(cause.code) or steps[at][1])


def decide(s: Snapshot, ctx: Context) -> tuple[Verdict, tuple[Finding, ...]]:
    """The verdict, and the findings in the order every view shows them: the headline first, carrying the verdict's
    remedy (so a view that lists findings says the same key as one that shows the verdict)."""
    # No finding's words carry a request's payload (the banner showed "The run crashed: RuntimeError: Failed after 3
    # retries each. Payload: {'input_ids': [151644, …" while a server restart ran): every view reads these.
    shown = [f if (m := without_payload(f.message)) == f.message else replace(f, message=m) for f in _order(s.findings)]
    rs = s.run_state
    status = status_of(s)
    step, step_from = _step(s)
    state = rs.state if rs is not None else "unknown"
    if not shown or shown[0].severity is Severity.INFO:
        verdict = Verdict(status, state, _why(rs), rs.since if rs else None, step=step, step_from=step_from)
        return verdict, tuple(shown)
    steps: list[tuple[str, str | None]] = []
    looping = _looping(s, ctx)
    for i, f in enumerate(shown):
        if f.severity is not Severity.INFO:
            shown[i], step_words = _remedy(f, s, ctx, looping)
            steps.append((f.code, step_words))
    _by_its_cause(shown, steps)
    head = shown[0]
    verdict = Verdict(
        status,
        state,
        _why(rs),
        rs.since if rs is not None else head.since,
        finding=head.code,
        message=head.message,
        action=head.action,
        command=head.command,
        fix=head.fix,
        next_step=steps[0][1],
        steps=tuple((code, words) for code, words in steps if words),
        resume_held=looping is not None,
        step=step,
        step_from=step_from,
    )
    return verdict, tuple(shown)
