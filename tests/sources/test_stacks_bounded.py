"""A process whose stack is made to be read costs rlwatch a bounded amount (the probe's finding N9): 20 threads, 2000
frames deep, with function and file names of 4000 characters, make ``py-spy dump --json`` write half a GB, which
``dump_text`` kept whole and parsed (2.3 GB of RSS in root's watcher). Now at most :data:`MAX_DUMP_BYTES` is read,
py-spy is stopped past it, and the process's stacks are "too large: not read", a degraded state of the sampler.

The hostile process runs as ``nobody`` (the run directory's owner's process is what root's sampler reads), from a
script in a 0755 directory under /tmp; py-spy runs as root, as rlwatch's sampler does."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.common.clock import SystemClock
from rlwatch.sources.sampler import StackSampler, read_dump
from rlwatch.sources.stacks import MAX_DUMP_BYTES, MAX_FRAMES, StackTarget, dump_text, parse_dump, py_spy, read_bounded

pytestmark = pytest.mark.slow

HOSTILE = """
import sys, threading
BIG, DEPTH, THREADS = map(int, sys.argv[1:4])
sys.setrecursionlimit(DEPTH * 3 + 100)
bottom = threading.Barrier(THREADS + 1)

def deep(k, stop):
    if k:
        return deep(k - 1, stop)
    bottom.wait()  # every thread as deep as it goes: then the main thread says it is ready
    if threading.current_thread() is threading.main_thread():
        print("ready", flush=True)
    stop.wait()

name = "\\x1b]52;c;cGF5bG9hZA==\\x07\\u202e[bold]" + "N" * BIG
deep.__code__ = deep.__code__.replace(co_name=name, co_qualname=name, co_filename="F" * BIG)
stop = threading.Event()
for _ in range(THREADS):
    threading.Thread(target=deep, args=(DEPTH, stop), daemon=True).start()
deep(DEPTH, stop)
"""


def _high_water_kib() -> int:
    """This process's peak resident memory so far (VmHWM), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/self/status")


@pytest.fixture
def hostile() -> Iterator[int]:
    """The hostile process, as ``nobody`` where this runs as root, else as this user; its pid once it stands."""
    if py_spy() is None:
        pytest.skip("py-spy is not installed")
    folder = Path(tempfile.mkdtemp(prefix="rlwatch-hostile-", dir="/tmp"))
    os.chmod(folder, 0o755)
    script = folder / "evil_frames.py"
    script.write_text(HOSTILE)
    os.chmod(script, 0o644)
    as_nobody: dict[str, object] = {}
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        as_nobody = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    python = "/usr/bin/python3" if os.geteuid() == 0 and os.path.exists("/usr/bin/python3") else sys.executable
    proc = subprocess.Popen(
        [python, str(script), "4000", "2000", "20"],
        cwd=folder,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        **as_nobody,  # type: ignore[arg-type]
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_stack_made_to_be_read_is_not_read_and_costs_a_bounded_amount(hostile: int) -> None:
    exe = py_spy()
    assert exe is not None
    before = _high_water_kib()
    text, error = dump_text(exe, hostile)
    grown_mib = (_high_water_kib() - before) / 1024
    assert text == ""
    assert error is not None and error.startswith(f"stacks of pid {hostile} too large: not read"), error
    # What is held is the bounded read (and one copy of it), never py-spy's half a GB.
    assert grown_mib < 4 * MAX_DUMP_BYTES / 1024**2, f"{grown_mib:.0f} MiB"


def test_the_sampler_says_so_as_a_degraded_state(hostile: int) -> None:
    exe = py_spy()
    assert exe is not None
    sampler = StackSampler(
        lambda: [StackTarget(hostile, "evil_frames.py")], SystemClock(), interval_s=60, cpu_budget=1.0,
        run_owner=pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else None, reader=read_dump(exe),
    )  # fmt: skip
    sampler.round()
    state = sampler.state()
    assert not state.available and state.reason is not None
    assert state.reason.startswith(f"stacks of pid {hostile} too large: not read"), state.reason
    (proc,) = state.processes
    assert proc.samples == () and proc.error == state.reason


def test_the_bounded_read_stops_a_child_that_writes_on_and_reaps_it() -> None:
    proc = subprocess.Popen(["yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out, err, why = read_bounded(proc, 1 << 20, 30)
    assert (len(out), err, why) == (1 << 20, b"", "too large")
    assert proc.returncode == -signal.SIGKILL  # killed, and reaped: no zombie left
    quiet = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('x' * 1000); print('said', file=sys.stderr)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert read_bounded(quiet, 1 << 20, 30) == (b"x" * 1000 + b"\n", b"said\n", None)
    assert quiet.returncode == 0


def test_what_is_kept_of_a_dump_is_bounded_whatever_its_names() -> None:
    """Even under the byte bound, a dump's frames are kept in every sample: each name and file is cut, 40 frames."""
    frame = {"name": "n" * 4000, "filename": "/x/" + "f" * 4000, "short_filename": "f" * 4000, "line": 7}
    threads = [{"thread_name": "MainThread", "os_thread_id": 5, "frames": [frame] * 300}] * 3
    st = parse_dump(5, "rank 0", json.dumps(threads))
    assert st.error is None and st.threads == 3 and len(st.frames) == MAX_FRAMES
    assert max(len(f) for f in st.frames) < 600 and len(st.where) < 600
