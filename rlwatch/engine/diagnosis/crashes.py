"""Crashes: the last exception and its root cause, torchrun's failure report, NCCL collective timeouts."""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence

from rlwatch.common.state import (
    ChildFailure,
    EventSummary,
    Finding,
    Incident,
    IncidentTally,
    Snapshot,
    line_ref,
)
from rlwatch.common.vocab import FindingCode
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import (
    CRIT,
    INFO,
    WARN,
    Context,
    count_of,
    only_history,
    per_file,
    progress_before,
    progressed_since,
    stepped_after,
)
from rlwatch.engine.diagnosis.wording import (
    exact_first,
    exact_time,
    incident_text,
    last_text,
)
from rlwatch.logs.kinds import builtin_kinds

_CUDA_BUSY = next(k.regex for k in builtin_kinds() if k.name == "cuda_busy")  # the kind's own words, in a title


_CONNECTION_WORDS = re.compile(
    r"ConnectionRefused|Connect call failed|Connection refused|ClientConnectorError|can.t be reached"
    r"|Failed after \d+ retries",
    re.IGNORECASE,
)


def occurrences(incidents: Sequence[Incident], dropped: Sequence[IncidentTally], kind: str, signature: str) -> int:
    """How many incidents of ``kind`` have ``signature``: the kept ones and the older ones tallied apart."""
    kept = sum(1 for i in incidents if i.kind == kind and i.signature == signature)
    return kept + sum(t.count for t in dropped if t.kind == kind and t.signature == signature)


def _short(title: str, limit: int = 160) -> str:
    title = title.split(". Payload:", maxsplit=1)[0]
    return title if len(title) <= limit else title[: limit - 1] + "…"


def crashes(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    # Failed requests to a dead server are its consequence, reported with it, not crashes of their own; so is a
    # process that could not take a device another process held (device_busy says it, with the strays whose killing
    # is the fix while they hold it): no exception of the run's code to fix, before or after the strays are gone.
    server_gone = count_of(s, "connection_refused") > 0
    strays_busy = count_of(s, "cuda_busy") > 0
    blocks = [
        i
        for i in s.incidents
        if i.kind in ("traceback", "crash")
        and not (server_gone and _CONNECTION_WORDS.search(i.title))
        and not (strays_busy and _CUDA_BUSY.search(i.title))
    ]
    if not blocks:
        return
    failed = torchrun_failure(s)
    if failed is not None:
        yield _torchrun_finding(s, failed)
        # What torchrun stopped after the root cause (a victim's SIGTERM traceback) is not the last exception.
        victims = {v.rank for v in failed.victims if v.rank is not None}
        blocks = [i for i in blocks if i.rank is None or i.rank not in victims]
        blocks = [i for i in blocks if i is not failed and i.kind != "crash" and i is not failed.cause]
        if not blocks:
            return
    by_sig = Counter(i.signature for i in blocks if i.kind == "traceback")
    # The kept incidents are the newest only: the older ones of the same signature are tallied apart.
    older = {t.signature: t for t in s.dropped_incidents if t.kind == "traceback" and t.signature in by_sig}
    for sig_, tally in older.items():
        by_sig[sig_] += tally.count
    last = max(blocks, key=_latest)
    where = f" at {last.location}" if last.location else ""
    repeated = [sig for sig, n in by_sig.items() if n >= 2]
    if repeated:
        sig = max(repeated, key=lambda k: by_sig[k])
        inc = max((i for i in blocks if i.signature == sig), key=_latest)
        loc = f" at {inc.location}" if inc.location else ""
        same = [i for i in blocks if i.signature == sig]
        first = min(same, key=lambda i: (i.first, i.lineno))
        over = only_history(s, "traceback") and _outlived(same, s.time)
        yield Finding(
            INFO if over else CRIT,
            "crash_repeating",
            f"The same crash happened {by_sig[sig]} times: {_short(inc.title)}{loc} [{sig}].",
            older[sig].first if sig in older else exact_time(first),
        )
    elif (
        failed is None
        and ctx.trainer_alive is not True
        and last.kind == "traceback"
        and not only_history(s, "traceback")
    ):
        yield Finding(
            WARN,
            "crashed",
            f"Last exception: {_short(last.title)}{where} "
            f"({_file(last)}, {incident_text(last, s.time, said=_file(last))}).",
            exact_time(last),
        )


def _outlived(same: list[Incident], now: float) -> bool:
    """The run has lived past its crash loop: longer since the latest of these crashes than half again the longest
    time between two of them. A retry that logs a step or two before it dies again is still the loop
    (startup-crash: OK and "progressing" for 2 s at every retry of a crash loop)."""
    times = sorted(t for i in same if math.isfinite(t := i.first))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return not gaps or now - times[-1] > 1.5 * max(gaps)


def _latest(i: Incident) -> tuple[float, float, int]:
    """Order incidents by when they happened; an undated one by the latest it can be, then by line."""
    by = i.by if i.by is not None else i.last
    return (i.last, by, i.lineno)


def torchrun_failure(s: Snapshot) -> Incident | None:
    """torchrun's latest ChildFailedError report that names a root cause, if any."""
    found = [i for i in s.incidents if i.root_cause is not None]
    return max(found, key=_latest) if found else None


def failure_text(f: ChildFailure) -> str:
    """ "rank 0 (exit code -6, SIGABRT, host pod-0)": how one worker ended, as torchrun reported it."""
    parts = [
        f"exit code {f.exitcode}" if f.exitcode is not None else "",
        f.signal or "",
        f"host {f.host}" if f.host else "",
    ]
    detail = ", ".join(p for p in parts if p)
    return f"rank {f.rank if f.rank is not None else '?'}" + (f" ({detail})" if detail else "")


def _torchrun_finding(s: Snapshot, failed: Incident) -> Finding:
    root = failed.root_cause
    assert root is not None
    cause = failed.cause
    if cause is not None:
        why = f", after {_short(cause.title)}" + (f" at {cause.location}" if cause.location else "")
        why += f" ({_file(cause)}, {incident_text(cause, s.time, said=_file(cause))})"
    elif root.error and not root.error.startswith(("Signal ", "To enable traceback")):
        why = f": {_short(root.error)}"
    else:
        why = "; what it printed before is not in the logs read"
    victims = ""
    if failed.victims:
        names = ", ".join(failure_text(v) for v in failed.victims[:8])
        more = f" and {len(failed.victims) - 8} more" if len(failed.victims) > 8 else ""
        victims = f" Stopped after it: {names}{more}."
    # A relaunch that got past it makes it history: told, but not what is wrong now.
    t = failed.by if failed.approximate else failed.last
    after = (progressed_since(s, t) and not progress_before(s, failed.path, failed.lineno, t)) or stepped_after(
        s, failed
    )
    return Finding(
        INFO if after else CRIT,
        "torchrun_failed",
        f"torchrun's root cause (first observed failure): {failure_text(root)}{why}.{victims} ({_file(failed)})"
        + ("; the run has progressed since." if after else ""),
        exact_time(cause) if cause is not None else exact_time(failed),
    )


def _file(i: Incident) -> str:
    return line_ref(i.path, i.lineno)


def catalogued_failures(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    # Each kind's noun for one (plural() makes the many) and the words after it: "1 NCCL error", "2 NCCL errors".
    words: dict[FindingCode, tuple[str, str]] = {
        "cuda_oom": ("CUDA out-of-memory error", ""),
        "nccl_timeout": ("NCCL watchdog timeout", ""),
        "nccl_error": ("NCCL error", ""),
        "child_failed": ("torchrun child failure", ""),
        "engine_dead": ("inference-engine death", ""),
        "oom_kill": ("kernel OOM kill", " in the logs"),
        "slurm_cancelled": ("Slurm cancellation", " (a time limit, a preemption, a requeue or scancel)"),
        "node_failure": ("node failure", " Slurm reported"),
        "server_wait": ("retry", " waiting for the vLLM server to come up"),
        "timeout": ("timeout error", ""),
    }
    # torchrun's report read whole (torchrun_failed) says what its ChildFailedError lines say, and more.
    read_whole = any(i.root_cause is not None for i in s.incidents)
    for kind, (noun, tail) in words.items():
        n = count_of(s, kind)
        if not n or (kind == "child_failed" and read_whole):
            continue
        ev = s.events[kind]
        if kind == "nccl_timeout":
            msg = _nccl_text(s, ev)
        else:
            said = f": {_short(ev.recent[-1].text.strip(), 200)}" if ev.recent else ""
            many = "retries" if noun == "retry" else None
            msg = f"{plural(n, noun, many)}{tail}{per_file(s, kind)}, last {last_text(ev, s.time)}{said}"
        if only_history(s, kind):
            yield Finding(INFO, kind, msg + "; there has been progress since.", exact_first(ev))
        elif kind == "engine_dead" and s.training is not None and s.training.finished:
            # vLLM's offline engine (TRL's colocated generation) prints "Engine core proc … died unexpectedly" when
            # the interpreter exits at the end of a healthy run: after the last step it is a shutdown, not a crash.
            yield Finding(INFO, kind, msg + "; the training had finished (an engine stopping at exit).", None)
        else:
            yield Finding(WARN if kind in ("timeout", "server_wait") else CRIT, kind, msg + ".", exact_first(ev))


def _nccl_text(s: Snapshot, ev: EventSummary) -> str:
    """Timed-out collectives, each once however many times torch printed it: "1 NCCL collective timeout (printed
    3 times): rank 0 ALLREDUCE SeqNum=5, timeout 10000 ms"."""
    timeouts = [i for i in s.incidents if i.kind == "nccl_timeout"]
    if not timeouts:
        lines = plural(ev.count, "NCCL watchdog timeout line")
        return f"{lines}{per_file(s, 'nccl_timeout')}, last {last_text(ev, s.time)}"
    older = [t for t in s.dropped_incidents if t.kind == "nccl_timeout"]  # before the kept ones
    n = len(timeouts) + sum(t.count for t in older)
    printed = sum(i.count for i in timeouts) + sum(t.lines for t in older)
    head = plural(n, "NCCL collective timeout")
    if printed > n:
        head += f" (printed {printed} times)" if n == 1 else f" (printed {printed} times in all)"
    shown = []
    for i in timeouts[-3:]:
        c = i.collective
        if c is None:
            continue
        limit = f", timeout {c.timeout_ms} ms" if c.timeout_ms is not None else ""
        rank = f"rank {c.rank} " if c.rank is not None else ""
        shown.append(f"{rank}{c.op} SeqNum={c.seq}{limit} ({_file(i)}, {incident_text(i, s.time, said=_file(i))})")
    more = f" and {n - 3} more" if n > 3 else ""
    return f"{head}: " + "; ".join(shown) + more if shown else head
