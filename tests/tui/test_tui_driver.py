"""The dashboard's terminal driver in a real pseudo-terminal: its input thread sleeps until there is input (Textual's
own woke ten times a second, 0.17 % of a core on an idle dashboard), and keys, a lone Escape and quitting work as
before."""

from __future__ import annotations

import platform
import time
from pathlib import Path

import pytest

from tests.faults.test_self_faults import Terminal, run_dir
from tests.simhost import wait_until

pytestmark = pytest.mark.slow

# The system calls a thread waiting in select() shows in /proc/PID/task/TID/syscall: only the input thread does
# (the engine's loops wait on futexes, the file watcher sleeps).
SELECT_CALLS = {"x86_64": {"23", "270"}, "aarch64": {"72"}}.get(platform.machine())


def _input_thread(pid: int) -> str | None:
    """The task of ``pid`` waiting in select(): the driver's input thread."""
    assert SELECT_CALLS is not None
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "syscall").read_text().split()[0] in SELECT_CALLS:
                return task.name
        except (OSError, IndexError):
            continue
    return None


def _wakeups(pid: int, tid: str) -> int:
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


@pytest.mark.skipif(SELECT_CALLS is None, reason="select()'s system call number is known for x86_64 and aarch64")
def test_the_input_thread_sleeps_until_a_key_and_keys_still_work(tmp_path: Path) -> None:
    term = Terminal(str(run_dir(tmp_path)))
    try:
        term.wait_for(b"connection_refused")
        found: list[str] = []
        assert wait_until(lambda: bool(found.append(_input_thread(term.proc.pid) or "") or found[-1]), 10)
        tid = found[-1]
        before = _wakeups(term.proc.pid, tid)
        time.sleep(2.0)  # a window to count wake-ups in, not a wait for something to happen
        woke = _wakeups(term.proc.pid, tid) - before
        assert woke <= 3, f"the input thread woke {woke} times in 2 s with no key pressed (Textual's: about 20)"

        mark = len(term.output)
        term.write(b"?")
        term.wait_for(b"rlwatch keys", timeout=10, after=mark)
        assert b"rlwatch keys" in term.output[mark:]
        mark = len(term.output)
        term.write(b"\x1b")  # a lone Escape: told from a sequence by the parser's timeout, then it closes the help
        term.wait_for(b"3 events", timeout=10, after=mark)
        assert b"3 events" in term.output[mark:]  # the panels drawn again where the help was

        term.write(b"q")  # the input thread, asleep in select() with no timeout, is woken to stop: a prompt exit
        started = time.monotonic()
        assert term.exited(timeout=10) == 0
        assert time.monotonic() - started < 5
    finally:
        term.close()


@pytest.mark.parametrize("size", [(40, 120), (24, 80)])
def test_escape_and_q_arriving_together_close_the_findings_and_quit(tmp_path: Path, size: tuple[int, int]) -> None:
    """tmux's ``send-keys Escape q`` over the findings list: one read holding both, which Textual's parser alone
    took for ``alt+q`` (bound to nothing), so the list stayed and the dashboard did not quit."""
    rows, cols = size
    term = Terminal(str(run_dir(tmp_path)), rows=rows, cols=cols)
    try:
        term.wait_for(b"connection_refused")
        mark = len(term.output)
        term.write(b"d")
        term.wait_for(b"Findings (", timeout=10, after=mark)
        term.write(b"\x1bq")
        assert term.exited(timeout=10) == 0
    finally:
        term.close()
