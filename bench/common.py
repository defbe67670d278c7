"""What every benchmark needs: the machine's description, statistics, process sampling and a pseudo-terminal.

Timings on a shared machine wobble, so each figure is a median of several runs and, where a peer exists, is set
beside the peer measured in the same run.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import platform
import pty
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from rlwatch.logs import newlines

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
PYTHON = sys.executable


# -------------------------------------------------------------------------------------------------- statistics
def compile_bytecode(*checkouts: str | Path) -> None:
    """Compile rlwatch's sources (this checkout's, and ``checkouts``) to bytecode, as an install does: where
    PYTHONDONTWRITEBYTECODE is set (many containers set it) every process would otherwise compile them again, about
    0.35 s of CPU on this machine, and a start-up figure would be the compiler's."""
    import compileall

    for folder in [ROOT / "rlwatch", ROOT / "tui", ROOT / "widgets", *map(Path, checkouts)]:
        compileall.compile_dir(str(folder), quiet=1)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), nearest-rank: an observed value, never an interpolated one."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 when there is too little to fit)."""
    if len(points) < 2:
        return 0.0
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def wait_until(pred: Callable[[], bool], timeout: float, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


# ------------------------------------------------------------------------------------------------------ machine
def _run_text(argv: Sequence[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def tool_version(name: str, *args: str) -> str | None:
    """The first line of ``name --version`` (or of the given arguments), None when the tool is not installed."""
    if shutil.which(name) is None:
        return None
    return _run_text([name, *(args or ("--version",))])


def python_package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The commit measured. ``RLWATCH_BENCH_COMMIT`` names it where the tree is a copy whose ``.git`` may be stale
    (a GPU host the working tree is sent to)."""
    if named := os.environ.get("RLWATCH_BENCH_COMMIT"):
        return named
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def machine() -> dict[str, str]:
    vm = psutil.virtual_memory()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "host": platform.node(),
        "cpu": f"{cpu_model()}, {os.cpu_count()} logical CPUs (load average at start {os.getloadavg()[0]:.2f})",
        "memory": f"{vm.total / 2**30:.1f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "rlwatch": f"commit {commit} and the working tree"
        if (commit := git_commit())
        else "a copy of the working tree",
        "gpu": _run_text(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]) or "none",
        "textual": python_package_version("textual") or "not installed",
        "hyperscan (optional fast path)": python_package_version("hyperscan") or "not installed",
        "compiled line counter (rlwatch.logs._newlines)": "built" if newlines.NATIVE else "not built: Python rules",
    }


# -------------------------------------------------------------------------------------------- process sampling
@dataclass(slots=True)
class Usage:
    """CPU and memory of one process (and its children) over a window."""

    name: str
    cpu_pct: float = float("nan")  # of one core
    rss_mb: float = float("nan")  # at the end of the window
    rss_max_mb: float = float("nan")
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds into the window, RSS MB)
    error: str | None = None


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


def _cpu_seconds(procs: Sequence[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def _rss(procs: Sequence[psutil.Process]) -> float:
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 2**20


def measure(pids: dict[str, int], seconds: float, every: float = 1.0) -> dict[str, Usage]:
    """CPU (% of one core, children included) and RSS of each process over the next ``seconds``."""
    procs: dict[str, psutil.Process] = {}
    out: dict[str, Usage] = {}
    for name, pid in pids.items():
        out[name] = Usage(name)
        try:
            procs[name] = psutil.Process(pid)
        except psutil.Error as exc:
            out[name].error = f"{type(exc).__name__}"
    start_cpu = {n: _cpu_seconds(_tree(p)) for n, p in procs.items()}
    t0 = time.monotonic()
    while True:
        now = time.monotonic() - t0
        for name, p in procs.items():
            out[name].samples.append((now, _rss(_tree(p))))
        if now >= seconds:
            break
        time.sleep(min(every, max(0.0, seconds - now)))
    wall = time.monotonic() - t0
    for name, p in procs.items():
        u = out[name]
        if not p.is_running():
            u.error = "exited during the measurement"
            continue
        u.cpu_pct = 100.0 * (_cpu_seconds(_tree(p)) - start_cpu[name]) / wall
        u.rss_mb = u.samples[-1][1]
        u.rss_max_mb = max(s[1] for s in u.samples)
    return out


# ------------------------------------------------------------------------------------------- pseudo-terminals
class PtyProcess:
    """A terminal program run in a pseudo-terminal of a fixed size, its output drained (and searched) by a thread.

    Full-screen programs (the dashboard, glances, nvitop) behave as they do for a person only on a terminal; the
    output is read and thrown away as fast as it comes, as a terminal emulator would.
    """

    def __init__(self, argv: Sequence[str], *, cols: int = 160, rows: int = 48, env: dict[str, str] | None = None):
        self.argv = list(argv)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        full_env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows), **(env or {})}
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=full_env,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self._master = master
        self._tail = bytearray()
        self._lock = threading.Lock()
        self.bytes_out = 0
        self.first_output: float | None = None
        self._marks: dict[bytes, float] = {}
        self._watch: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def watch_for(self, *marks: bytes) -> None:
        """Record when each of ``marks`` first appears in the output."""
        with self._lock:
            self._watch.extend(marks)

    def seen(self, mark: bytes) -> float | None:
        """Seconds from start to the first appearance of ``mark``, None if not yet seen."""
        with self._lock:
            return self._marks.get(mark)

    def press(self, keys: bytes, *marks: bytes) -> float:
        """Type ``keys``, and record when each of ``marks`` appears in what is written *after* (earlier output no
        longer counts); returns when the keys were typed, in seconds from start, as :meth:`seen` counts."""
        with self._lock:
            del self._tail[:]
            for mark in marks:
                self._marks.pop(mark, None)
            self._watch.extend(marks)
        typed = time.monotonic() - self.started
        os.write(self._master, keys)
        return typed

    def tail(self) -> str:
        with self._lock:
            return bytes(self._tail[-4000:]).decode("utf-8", "replace")

    def _drain(self) -> None:
        while True:
            try:
                block = os.read(self._master, 65536)
            except OSError:
                return
            if not block:
                return
            now = time.monotonic() - self.started
            with self._lock:
                if self.first_output is None:
                    self.first_output = now
                self.bytes_out += len(block)
                self._tail += block
                if self._watch:
                    for mark in list(self._watch):
                        if mark in self._tail:
                            self._marks[mark] = now
                            self._watch.remove(mark)
                del self._tail[:-65536]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self._master)


@contextlib.contextmanager
def started(argv: Sequence[str], **kw: object) -> Iterator[subprocess.Popen[bytes]]:
    """A background process for the duration of a block, in its own session, stopped (and reaped) after."""
    proc = subprocess.Popen(list(argv), start_new_session=True, **kw)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def rlwatch_argv(*args: str) -> list[str]:
    """The installed console script (the dashboard included), run by this interpreter."""
    return [PYTHON, "-c", "import sys; from rlwatch.tui.launch import main; sys.exit(main())", *args]


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


@dataclass(slots=True)
class Timed:
    seconds: float
    max_rss_mb: float
    returncode: int
    output: bytes


def run_timed(argv: Sequence[str], *, timeout: float = 900.0, cwd: Path | None = None) -> Timed:
    """Run a command to its end: wall time, the peak RSS seen (sampled every 20 ms) and its output."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd)
    peak = 0.0
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read() if proc.stdout else b""), daemon=True)
    reader.start()
    try:
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                peak = max(peak, ps.memory_info().rss / 2**20)
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                break
            time.sleep(0.02)
    except psutil.Error:
        pass
    proc.wait()
    elapsed = time.perf_counter() - t0
    reader.join(timeout=10)
    return Timed(elapsed, peak, proc.returncode, b"".join(chunks))
