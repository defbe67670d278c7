"""Where each of the run's processes waits: their Python stacks, read with py-spy, grouped by where they stand.

A hung run prints no error; the first thing maintainers ask for in such threads is every rank's stack. py-spy
(``py-spy dump --pid PID --json``, a PyPI wheel rlwatch depends on) reads another process's Python stack from its
memory. It is run with ``--nonblocking``: the process is never paused, and nothing is signalled — a stack capture
only reads. It needs the permission to trace the process (root, ``CAP_SYS_PTRACE``, or the same user where
``kernel.yama.ptrace_scope`` allows it); where that is refused, the capture says so and what to change.

Each process's main thread is reduced to where it stands: its innermost Python function, and the innermost frame of
the run's own code that led there ("``all_reduce`` (train.py:30)"); processes standing at the same place are one
group ("ranks 0, 2, 3 in generate (rollout.py:88); rank 1 in all_reduce (train.py:30)"). Every dump is kept whole
in the run's ``.rlwatch/stacks/`` (private files: stacks can quote paths and arguments).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlwatch.common.redact import redacted
from rlwatch.common.state import ProcessStack, StackReport
from rlwatch.common.statefiles import StateDir, StateFileError
from rlwatch.sources import procfs

__all__ = ["StackTarget", "capture", "latest_kept", "parse_dump", "py_spy", "summarize", "waits_for"]

TIMEOUT_S = 15.0
MAX_FRAMES = 40
# What is read of py-spy's output for one process. A real rank's dump is tens of KiB (a vLLM server's hundred threads,
# sixty frames each: about 1 MiB); a process whose stack is made to be read (20 threads 2000 frames deep, with names
# of 4000 characters) writes half a GB of JSON, which kept whole and parsed cost a watcher GBs. Past this, py-spy is
# stopped and the process's stacks are "too large: not read".
MAX_DUMP_BYTES = 4 * 1024**2
_MAX_STDERR_BYTES = 64 * 1024
_MAX_FRAME_CHARS = 240  # a frame's function or file name beyond this is cut: a frame is kept in every sample
TOO_LARGE = "too large: not read"
_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")
_NO_PTRACE = (
    "ptrace is not permitted here: run rlwatch as root, or give it CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE; "
    "Kubernetes securityContext.capabilities.add: [SYS_PTRACE]), or allow tracing your own processes "
    "(sysctl kernel.yama.ptrace_scope=0)"
)


@dataclass(frozen=True, slots=True)
class StackTarget:
    pid: int
    label: str  # "rank 1", "trainer", …


def py_spy() -> str | None:
    """The py-spy rlwatch was installed with (beside its interpreter), else one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    try:  # a directory this user may not search (another user's virtualenv) is no py-spy, not a failure
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    except OSError:
        pass
    return shutil.which("py-spy")


def rank_of(pid: int, proc_root: str = procfs.PROC) -> int | None:
    """The process's rank: RANK (torchrun, accelerate and DeepSpeed set it), else LOCAL_RANK, from its environment,
    else ``--local-rank N`` / ``--local_rank=N`` in its argv (DeepSpeed's launcher before it set the environment).
    The one rule every reader of a rank uses (the stack targets' labels, the sampled processes), so that no two
    views give one process two ranks."""
    env = procfs.read_environ(pid, proc_root) or {}
    for key in ("RANK", "LOCAL_RANK"):
        value = env.get(key)
        if value is not None and value.isdigit():
            return int(value)
    argv: tuple[str, ...] = procfs.read_cmdline(pid, proc_root)
    for i, arg in enumerate(argv):
        for flag in ("--local-rank", "--local_rank"):
            if arg == flag and i + 1 < len(argv) and argv[i + 1].isdigit():
                return int(argv[i + 1])
            if arg.startswith(flag + "=") and arg.split("=", 1)[1].isdigit():
                return int(arg.split("=", 1)[1])
    return None


def rank_label(pid: int, fallback: str, proc_root: str = procfs.PROC) -> str:
    """ "rank N" by the one rank rule (:func:`rank_of`), else ``fallback``."""
    rank = rank_of(pid, proc_root)
    return fallback if rank is None else f"rank {rank}"


def cut_frame_part(value: object) -> str:
    """A frame's function, file or line as text, cut to a bound: each sample keeps its frames, and a process can give
    its functions names of any length."""
    text = str(value)
    return text if len(text) <= _MAX_FRAME_CHARS else text[: _MAX_FRAME_CHARS - 1] + "…"


def _frame_text(frame: dict[str, Any]) -> str:
    name = cut_frame_part(frame.get("name") or "?")
    where = cut_frame_part(frame.get("short_filename") or frame.get("filename") or "?")
    return f"{name} ({where}:{cut_frame_part(frame.get('line', '?'))})"


def _own(frame: dict[str, Any]) -> bool:
    filename = str(frame.get("filename") or "")
    return not any(part in filename for part in _LIBRARY_PARTS)


def parse_dump(pid: int, label: str, text: str) -> ProcessStack:
    """One process's ``py-spy dump --json`` output, reduced to its main thread and where it stands."""
    try:
        threads = json.loads(text)
    except ValueError as exc:
        return ProcessStack(pid, label, (), "", 0, f"py-spy's output is not JSON: {exc}")
    if not isinstance(threads, list) or not threads:
        return ProcessStack(pid, label, (), "", 0, "py-spy found no Python thread")
    main = next(
        (
            t
            for t in threads
            if isinstance(t, dict) and (t.get("thread_name") == "MainThread" or t.get("os_thread_id") == pid)
        ),
        threads[0],
    )
    frames: list[dict[str, Any]] = [f for f in main.get("frames") or [] if isinstance(f, dict)]
    texts = tuple(_frame_text(f) for f in frames[:MAX_FRAMES])
    if not frames:
        return ProcessStack(pid, label, texts, "outside Python code", len(threads), None)
    innermost = cut_frame_part(frames[0].get("name") or "?")
    own = next((f for f in frames if _own(f)), None)
    if own is None or own is frames[0]:
        where = _frame_text(frames[0])
    else:
        file = cut_frame_part(own.get("short_filename") or own.get("filename"))
        where = f"{innermost} ({file}:{cut_frame_part(own.get('line', '?'))})"
    return ProcessStack(pid, label, texts, where, len(threads), None)


def _who(labels: Sequence[str]) -> str:
    ranks = [label.removeprefix("rank ") for label in labels if label.startswith("rank ")]
    if len(ranks) == len(labels) and len(labels) > 1:
        return "ranks " + ", ".join(sorted(ranks, key=lambda r: int(r) if r.isdigit() else 0))
    return ", ".join(labels)


def waits_for(stacks: Sequence[ProcessStack]) -> tuple[list[ProcessStack], list[ProcessStack]] | None:
    """(the ranks the others wait for, the ranks waiting in a collective), from the ranks' frames: a rank whose
    innermost frames are a known collective (torch.distributed's ``all_reduce``, ``barrier``, ``synchronize`` …)
    waits; a rank in none (its own code, a fetch, a sleep) is what they wait for. None where the frames do not decide
    (no rank in a known collective, or all of them): a guess would send a person to the wrong process."""
    from rlwatch.sources.sampler import classify  # the sampler reads through this module: imported when called

    ranks = [st for st in stacks if st.error is None and st.label.startswith("rank ")]
    waiting = [st for st in ranks if classify(st.frames)[1]]
    others = [st for st in ranks if st not in waiting]
    return (others, waiting) if waiting and others else None


def summarize(stacks: Sequence[ProcessStack]) -> tuple[tuple[tuple[str, tuple[str, ...]], ...], str]:
    """Processes grouped by where they stand, the largest group first, and the line that says it: who waits for
    whom first where the ranks' frames say it (:func:`waits_for`), and that it is not known where they do not."""
    groups: dict[str, list[str]] = {}
    for st in stacks:
        if st.error is None:
            groups.setdefault(st.where, []).append(st.label)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    parts = []
    decided = waits_for(stacks)
    placed: set[str] = set()
    if decided is not None:
        odd, waiting = decided
        for st in odd:
            parts.append(f"{st.label} in {st.where}, not in a collective")
        places: dict[str, list[str]] = {}
        for st in waiting:
            places.setdefault(st.where, []).append(st.label)
        for where, labels in places.items():
            parts.append(f"{_who(labels)} {'waits' if len(labels) == 1 else 'wait'} for it in {where}")
        placed = {st.label for st in (*odd, *waiting)}
    elif sum(st.error is None and st.label.startswith("rank ") for st in stacks) > 1:
        parts.append("which rank waits for which the frames do not tell (no rank, or every rank, in a collective)")
    for where, labels in ordered:
        rest = [label for label in labels if label not in placed]
        if rest:
            parts.append(f"{_who(rest)} in {where}")
    failed = [st for st in stacks if st.error is not None]
    if failed:
        parts.append(f"{len(failed)} not read ({failed[0].error})")
    return tuple((w, tuple(ls)) for w, ls in ordered), "; ".join(parts)


PTRACE_REFUSED = "ptrace not permitted: "  # how a refused read's error begins (the sampler counts them)
NO_PTRACE_WORDS = ("ermission denied", "not permitted", "EPERM", "ptrace")  # py-spy's words for a refused ptrace


def read_bounded(proc: subprocess.Popen[bytes], limit: int, timeout: float) -> tuple[bytes, bytes, str | None]:
    """A child's stdout (at most ``limit`` bytes) and stderr (at most 64 KiB), read as they come until both close:
    (stdout, stderr, None), or what was read and why it stopped ("too large", "timeout"): the child is then killed.
    It is reaped either way. Nothing past ``limit`` is ever held."""
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    caps = {out_fd: limit, err_fd: _MAX_STDERR_BYTES}
    got: dict[int, bytearray] = {out_fd: bytearray(), err_fd: bytearray()}
    why: str | None = None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for fd in caps:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map() and why is None:
            left = deadline - time.monotonic()
            if left <= 0:
                why = "timeout"
                break
            for key, _ in sel.select(left):
                fd = int(key.fd)
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    continue
                room = caps[fd] - len(got[fd])
                got[fd] += chunk[:room]
                if len(chunk) > room:
                    if fd == out_fd:
                        why = "too large"
                        break
                    sel.unregister(fd)  # stderr past its cap: its last line is all that is said, and it is there
    if why is not None:
        proc.kill()
    proc.stdout.close()
    proc.stderr.close()
    proc.wait()
    return bytes(got[out_fd]), bytes(got[err_fd]), why


def dump_text(exe: str, pid: int, limit: int = MAX_DUMP_BYTES) -> tuple[str, str | None]:
    """``py-spy dump --nonblocking --json`` of one process: (its JSON, None), or ("", why it could not be read) —
    a refused ptrace's why begins with :data:`PTRACE_REFUSED`; output past ``limit`` bytes stops py-spy and is
    "stacks of pid N too large: not read". Shared by the one-off capture and the sampler."""
    try:
        proc = subprocess.Popen(
            [exe, "dump", "--pid", str(pid), "--json", "--nonblocking"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        return "", f"cannot run py-spy: {exc.strerror or exc}"
    out, err, why = read_bounded(proc, limit, TIMEOUT_S)
    if why == "too large":
        return "", f"stacks of pid {pid} {TOO_LARGE} (py-spy wrote more than {limit / 1024**2:g} MiB)"
    if why is not None:
        return "", f"py-spy did not answer within {TIMEOUT_S:g}s"
    if proc.returncode != 0:
        said = (err or out[-4096:]).decode("utf-8", "replace").strip().splitlines()
        line = said[-1] if said else f"exit {proc.returncode}"
        if any(w in line for w in NO_PTRACE_WORDS):
            line = PTRACE_REFUSED + line
        return "", line[:300]
    return out.decode("utf-8", "replace"), None


def _dump(exe: str, target: StackTarget) -> ProcessStack:
    text, error = dump_text(exe, target.pid)
    if error is not None:
        said = _NO_PTRACE if error.startswith(PTRACE_REFUSED) else error
        return ProcessStack(target.pid, target.label, (), "", 0, said)
    return parse_dump(target.pid, target.label, text)


def capture(targets: Sequence[StackTarget], why: str, run_dir: Path | None, now: float | None = None) -> StackReport:
    """Every target's stack, read side by side; kept whole in ``run_dir``'s ``.rlwatch/stacks/`` when given."""
    taken = time.time() if now is None else now
    exe = py_spy()
    if exe is None:
        return StackReport(taken, why, (), (), "", None, "py-spy is not installed (pip install py-spy)")
    if not targets:
        return StackReport(taken, why, (), (), "", None, "no Python process of the run to read")
    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
        stacks = tuple(pool.map(lambda t: _dump(exe, t), targets))
    groups, text = summarize(stacks)
    errors = {st.error for st in stacks if st.error}
    error = next(iter(errors)) if errors and len(errors) == 1 and all(st.error for st in stacks) else None
    path = None
    if run_dir is not None:
        path, problem = _keep(run_dir, taken, why, stacks)
        error = error or problem
    return StackReport(taken, why, stacks, groups, text, path, error)


def latest_kept(run_dir: Path, newer_than: float | None = None) -> StackReport | None:
    """The newest dump kept in ``run_dir``'s ``.rlwatch/stacks/`` (by any rlwatch: the watchdog, the dashboard),
    when newer than ``newer_than``; None when there is none or it cannot be read (never raises)."""
    folder = StateDir(run_dir).path / "stacks"
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith("."))
    except OSError:
        return None
    if not names:
        return None
    try:
        raw = StateDir(run_dir).read(f"stacks/{names[-1]}")
        if raw is None:
            return None
        data = json.loads(raw)
        taken = float(data["taken_at"])
        if newer_than is not None and taken <= newer_than:
            return None
        stacks = tuple(
            ProcessStack(
                int(p["pid"]),
                str(p["label"]),
                tuple(str(f) for f in p.get("frames") or ()),
                str(p.get("where") or ""),
                int(p.get("threads") or 0),
                None if p.get("error") is None else str(p["error"]),
            )
            for p in data["processes"]
        )
    except (StateFileError, ValueError, KeyError, TypeError):
        return None
    groups, text = summarize(stacks)
    return StackReport(taken, str(data.get("why") or "kept"), stacks, groups, text, str(folder / names[-1]), None)


def _keep(run_dir: Path, taken: float, why: str, stacks: Sequence[ProcessStack]) -> tuple[str | None, str | None]:
    name = time.strftime("%Y%m%dT%H%M%S", time.localtime(taken)) + f"-{int(taken * 1000) % 1000:03d}.json"
    record = {
        "taken_at": taken,
        "why": why,
        "processes": [
            {
                "pid": st.pid,
                "label": st.label,
                "where": st.where,
                "threads": st.threads,
                "error": st.error,
                "frames": list(st.frames),
            }
            for st in stacks
        ],
    }
    state = StateDir(run_dir)
    try:
        state.write(f"stacks/{name}", json.dumps(redacted(record), indent=1).encode())
    except StateFileError as exc:
        return None, f"stacks not kept: {exc}"
    return str(state.path / "stacks" / name), None
