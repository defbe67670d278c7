"""The peers rlwatch is measured against, and the patterns that make grep and ripgrep count what rlwatch counts.

Each built-in kind is written out by hand in POSIX extended syntax (GNU grep's ``\\b`` included), the same
alternatives as in ``rlwatch.logs.kinds``; ripgrep takes the same text. A kind whose lines are not counted when they
are quoted source code (a traceback frame's ``raise TimeoutError(...)``) is checked through a second grep that
drops such lines, which is what rlwatch does. The timed peer run is one ``grep -cE`` over the alternation of every
kind rlwatch counts, internal ones included: the same matching work in one pass. Both tools run byte-wise
(``LC_ALL=C``, ripgrep ``--no-unicode``): the patterns are ASCII, and ripgrep's Unicode word boundaries over a log
full of box-drawing characters are a hundred times slower.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# kind -> (ERE pattern, code lines excluded)
KIND_ERE: dict[str, tuple[str, bool]] = {
    "connection_refused": (
        "Connection refused|ConnectionRefusedError|Connect call failed|server can't be reached at",
        True,
    ),
    "traceback": (r"Traceback \(most recent call last\):[[:space:]]*$", False),
    "cuda_oom": ("CUDA out of memory|CUDA error: out of memory", True),
    "cuda_busy": ("CUDA.{0,200}busy or unavailable", True),
    "nccl_timeout": ("Watchdog caught collective operation timeout", False),
    "nccl_error": (
        r"\bNCCL error\b|\bnccl(UnhandledCuda|System|Internal|InvalidArgument|InvalidUsage|Remote)Error\b",
        True,
    ),
    "timeout": ("Timeout waiting for|[Tt]imed out after|TimeoutError|Read timed out", True),
    "child_failed": ("ChildFailedError", True),
    "engine_dead": (
        "EngineDeadError|EngineCore encountered a fatal error|EngineCore failed to start"
        "|Scheduler hit an exception|Received sigquit from a child process",
        True,
    ),
    "emergency_brake": ("[Ee][Mm][Ee][Rr][Gg][Ee][Nn][Cc][Yy][ _-]?[Bb][Rr][Aa][Kk][Ee]", True),
    "oom_kill": ("Killed process [0-9]+", False),
    "weight_update": (
        r'Loading weights from disk done in|Update weights end\.|"POST /reset_prefix_cache/ HTTP/[0-9.]+" 2[0-9][0-9]',
        False,
    ),
    "checkpoint_saved": ("Saved recover checkpoint to|Saving model checkpoint to", False),
    "step": (
        r"Train step [0-9]+/[0-9]+ done\.|^[[:space:]]*\{'(.*, ')?(loss|reward)': .*\}[[:space:]]*$",
        False,
    ),
    "server_ready": (
        r"The server is fired up and ready to roll|Servers are all ready!|SGLang server launched at"
        r"|Starting vLLM (API )?server|Application startup complete\.",
        False,
    ),
    "restart": (
        r"Recovering from StepInfo\(|LocalLauncher: .*\brun_id=0*[1-9][0-9]*|Continuing training from checkpoint",
        False,
    ),
    # Internal kinds: rlwatch looks for them in the same pass, so the timed peer does too.
    "_reward": ("task_reward/avg|rollout/reward|timeperf/update_weights", False),
    "_finished": (r"Training completes! Total time elapsed|\{'train_runtime':", False),
    "_banner": (r"rlwatch-sim start|\*{5} Running training \*{5}|LocalLauncher: .*\brun_id=[0-9]+", False),
    "_server_exit": (r"\bexits, returncode=-?[0-9]+", False),
}

# A quoted source line of a traceback frame, behind an optional torch rank prefix.
CODE_LINE_ERE = (
    r"^(\[rank[0-9]+\]:[[:space:]]?)?[[:space:]]*"
    r"(#|(raise|except|if|elif|assert|return|def|class|await|yield|lambda)\b)"
)

C_LOCALE = {**os.environ, "LC_ALL": "C"}


def union() -> str:
    return "|".join(f"({ere})" for ere, _ in KIND_ERE.values())


@dataclass(frozen=True, slots=True)
class Peer:
    name: str
    available: bool
    version: str | None


def grep_peer() -> Peer:
    from bench.common import tool_version

    version = tool_version("grep")
    return Peer("grep", version is not None, version)


def rg_peer() -> Peer:
    from bench.common import tool_version

    version = tool_version("rg")
    return Peer("ripgrep", version is not None, version)


def _timed(argv: Sequence[str], stdin: bytes | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(list(argv), input=stdin, capture_output=True, env=C_LOCALE, check=False)
    elapsed = time.perf_counter() - t0
    if out.returncode not in (0, 1):
        raise RuntimeError(f"{argv[0]} failed ({out.returncode}): {out.stderr.decode(errors='replace').strip()}")
    return elapsed, out.stdout.decode().strip()


def grep_union(path: Path) -> tuple[float, int]:
    """(seconds, matching lines) of one ``grep -cE`` over every kind."""
    elapsed, out = _timed(["grep", "-cE", union(), str(path)])
    return elapsed, int(out or 0)


def rg_union(path: Path) -> tuple[float, int]:
    argv = ["rg", "--no-config", "--no-unicode", "-c", "-a", "--no-filename"]
    for ere, _ in KIND_ERE.values():
        argv += ["-e", ere]
    elapsed, out = _timed([*argv, str(path)])
    return elapsed, int(out or 0)


def _count_kind(tool: str, path: Path, kind: str) -> int:
    ere, exclude_code = KIND_ERE[kind]
    if tool == "grep":
        find = ["grep", "-E", ere, str(path)]
        drop = ["grep", "-cvE", CODE_LINE_ERE]
        count = ["grep", "-cE", ere, str(path)]
    else:
        find = ["rg", "--no-config", "--no-unicode", "-a", "--no-filename", "-e", ere, str(path)]
        drop = ["rg", "--no-config", "--no-unicode", "-a", "-c", "-v", "-e", CODE_LINE_ERE]
        count = ["rg", "--no-config", "--no-unicode", "-a", "-c", "--no-filename", "-e", ere, str(path)]
    if not exclude_code:
        out = subprocess.run(count, capture_output=True, env=C_LOCALE, check=False)
        return int(out.stdout.decode().strip() or 0)
    first = subprocess.run(find, capture_output=True, env=C_LOCALE, check=False)
    if not first.stdout:
        return 0
    second = subprocess.run(drop, input=first.stdout, capture_output=True, env=C_LOCALE, check=False)
    return int(second.stdout.decode().strip() or 0)


def per_kind_counts(tool: str, path: Path, kinds: Sequence[str]) -> dict[str, int]:
    """Lines of each kind by ``tool`` ("grep" or "rg"), code lines dropped where rlwatch drops them."""
    return {k: _count_kind(tool, path, k) for k in kinds}


def glances_argv(interval_s: float) -> list[str] | None:
    exe = shutil.which("glances")
    return None if exe is None else [exe, "-t", f"{interval_s:g}"]


def nvitop_argv(interval_s: float) -> list[str] | None:
    exe = shutil.which("nvitop")
    return None if exe is None else [exe, "--interval", f"{interval_s:g}"]


# ------------------------------------------------------------------------------------------------ log viewers
@dataclass(frozen=True, slots=True)
class Indexed:
    """A log viewer's pass over a whole file: how long until it had indexed it, its peak RSS, the lines it saw."""

    seconds: float
    max_rss_mb: float
    lines: int


def timed_rss(argv: Sequence[str], cwd: Path | None = None) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS in MB, exit status, stdout) of one command. The RSS is the kernel's own account of
    the process, through GNU time: ``wait4`` straight from this process would report this interpreter's size, which
    a child inherits as its peak when it is forked."""
    gnu_time = "/usr/bin/time"
    if not os.path.exists(gnu_time):
        from bench.common import run_timed

        t = run_timed(argv, cwd=cwd)
        return t.seconds, t.max_rss_mb, t.returncode, t.output.decode(errors="replace")
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as rss:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [gnu_time, "-f", "%M", "-o", rss.name, *argv], stdout=out, stderr=subprocess.DEVNULL, cwd=cwd, check=False
        )
        elapsed = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
        kib = [int(w) for w in rss.read().split() if w.isdigit()]
    return elapsed, (kib[-1] / 1024 if kib else float("nan")), proc.returncode, text


def lnav_peer() -> Peer:
    exe = shutil.which("lnav")
    if exe is None:
        return Peer("lnav", False, None)
    out = subprocess.run([exe, "-V"], capture_output=True, text=True, check=False)
    return Peer("lnav", True, out.stdout.strip() or None)


def lnav_index(path: Path) -> Indexed:
    """lnav, headless (``-n``), asked for the line count of the file it opened: its SQL answers only once the
    file is indexed to its end, so the time is the time to a full index."""
    with tempfile.TemporaryDirectory() as home:  # its own configuration and history, not the user's
        argv = ["lnav", "-n", "-c", ";SELECT lines FROM lnav_file", str(path)]
        elapsed, rss, code, text = timed_rss(["env", f"HOME={home}", *argv])
    if code != 0:
        raise RuntimeError(f"lnav failed ({code}): {text.strip()[-300:]}")
    numbers = [int(w) for w in text.split() if w.isdigit()]
    return Indexed(elapsed, rss, numbers[-1] if numbers else -1)


# toolong is a Textual app pinned to an older Textual than rlwatch's, so it lives in a virtual environment of its
# own under the benchmark's data folder, made (pip install toolong) on first use.
_TOOLONG_SCRIPT = """
import resource, sys, threading, time
t0 = time.perf_counter()
from toolong.log_file import LogFile
lf = LogFile(sys.argv[1])
lf.open(threading.Event())
n = sum(len(breaks) for _, breaks in lf.scan_line_breaks())
print(time.perf_counter() - t0, n)
"""


def toolong_python(data_dir: Path) -> str | None:
    """The interpreter of the virtual environment holding toolong, made when missing; None when it cannot be."""
    venv = data_dir / "toolong-venv"
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import toolong.log_file"]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return str(python)
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, check=False)
    if made.returncode != 0:
        return None
    pip = [str(python), "-m", "pip", "install", "-q", "toolong"]
    if subprocess.run(pip, capture_output=True, check=False).returncode != 0:
        return None
    return str(python) if subprocess.run(probe, capture_output=True, check=False).returncode == 0 else None


def toolong_version(python: str) -> str | None:
    out = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('toolong'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or None


def toolong_index(python: str, path: Path) -> Indexed:
    """toolong's own index of a file, run headlessly: ``LogFile.scan_line_breaks``, what its ``LogLines`` widget
    runs in a worker when a file is opened (toolong has no headless mode; the screen is left out). The time is that
    of the scan and its imports, not of the interpreter's start."""
    _, rss, code, text = timed_rss([python, "-c", _TOOLONG_SCRIPT, str(path)])
    if code != 0:
        raise RuntimeError(f"toolong failed ({code}): {text.strip()[-300:]}")
    seconds, lines = text.split()
    return Indexed(float(seconds), rss, int(lines))
