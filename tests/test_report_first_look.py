"""`rlwatch report` (and `watch`) at a terminal, over a big backlog: the diagnosis of its newest part first, on stderr,
then how far the rest is read; stdout holds the report (the stream) alone, the same as when nobody watches."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.faults.conftest import rlwatch_cmd
from tests.simhost import wait_until

STEP = "2026-11-21 10:{m:02d}:{s:02d},000 INFO Train step {i}/900000 done.\n"
QUIET = "2026-11-21 10:{m:02d}:{s:02d},100 INFO DataLoader prefetched batch {i} of 64 prompts into pinned memory\n"
LAST = (
    "Traceback (most recent call last):\n"
    '  File "/opt/areal/trainer.py", line 812, in update_weights\n'
    "    raise RuntimeError(msg)\n"
    "RuntimeError: weight update to the server failed for the last time\n"
)


def _run_dir(tmp_path: Path) -> Path:
    """A log over the size that earns a preview (16 MiB) ending with a crash; mostly lines no kind looks at, so that
    it is read fast."""
    run = tmp_path / "run"
    run.mkdir()
    with (run / "trainer.log").open("w") as fh:
        for i in range(2_000):
            m, s = divmod(i % 3600, 60)
            fh.write(STEP.format(m=m, s=s, i=i) + "".join(QUIET.format(m=m, s=s, i=i * 100 + j) for j in range(100)))
        fh.write(LAST)
    assert (run / "trainer.log").stat().st_size > 16 << 20
    (run / "rlwatch.yaml").write_text("training:\n  logs: ['*.log']\ngpu:\n  backend: none\n")
    return run


@contextmanager
def _terminal() -> Iterator[tuple[int, bytearray]]:
    """A pseudo-terminal to write to (its fd) and what has been written to it so far, read as it comes: a terminal
    reads what is written, or the writer blocks."""
    master, slave = pty.openpty()
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                block = os.read(master, 1 << 16)
            except OSError:
                return
            if not block:
                return
            seen.extend(block)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield slave, seen
    finally:
        os.close(slave)
        reader.join(10)
        os.close(master)


def _report(run: Path, *, terminal: bool) -> tuple[int, dict[str, Any], str]:
    """`report --json` with stdout a pipe and stderr a pseudo-terminal (or a pipe): (exit code, JSON, stderr)."""
    if not terminal:
        done = subprocess.run(rlwatch_cmd("report", "--json", str(run)), capture_output=True, text=True, timeout=120)
        return done.returncode, json.loads(done.stdout), done.stderr
    with _terminal() as (slave, seen):
        proc = subprocess.run(
            rlwatch_cmd("report", "--json", str(run)), stdout=subprocess.PIPE, stderr=slave, timeout=120, check=False
        )
    return proc.returncode, json.loads(proc.stdout), seen.decode("utf-8", "replace")


def test_report_at_a_terminal_says_what_is_wrong_now_first(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    rc, answer, stderr = _report(run, terminal=True)
    assert rc == 1  # the crash is a finding
    first, _, rest = stderr.partition("status now:")
    assert "a big backlog of" in first and "its newest part first" in first
    assert "RuntimeError: weight update to the server failed for the last time" in rest  # the crash at the end
    assert "reading backlog:" in rest  # then how far the rest is
    assert stderr.endswith("\r\x1b[K")  # and the progress line is cleared before the report
    steps = answer["events"]["step"]["count"]
    assert steps == 2_000  # stdout: the full report, parsed as JSON (nothing else on it)

    rc_plain, plain, quiet = _report(run, terminal=False)
    assert rc_plain == rc and quiet == ""  # nobody watching: nothing on stderr
    assert {k: v["count"] for k, v in plain["events"].items()} == {k: v["count"] for k, v in answer["events"].items()}
    assert [f["code"] for f in plain["findings"]] == [f["code"] for f in answer["findings"]]


def test_report_with_stderr_closed_still_answers(tmp_path: Path) -> None:
    """`2>&-` leaves Python no stderr at all: whether a person is watching is then "no", not a crash."""
    run = _run_dir(tmp_path)
    done = subprocess.run(
        rlwatch_cmd("report", "--json", str(run)),
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: os.close(2),
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert json.loads(done.stdout)["events"]["step"]["count"] == 2_000


def test_watch_at_a_terminal_says_what_is_wrong_now_and_stops_on_ctrl_c_while_reading(tmp_path: Path) -> None:
    """`watch` prints its stream once the backlog is read (counts are then totals); at a terminal it says first what
    the newest part shows and how far the rest is, and Ctrl-C stops it then, not minutes later."""
    from bench.datagen import generate

    run = tmp_path / "run"
    generate(run / "trainer.log", 64 << 20, dense=True)  # seconds to read: a backlog of incidents
    (run / "rlwatch.yaml").write_text("training:\n  logs: ['*.log']\ngpu:\n  backend: none\n")
    with _terminal() as (slave, seen):
        proc = subprocess.Popen(
            rlwatch_cmd("watch", "--json", str(run)), stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL
        )
        try:
            wait_until(lambda: b"reading backlog:" in seen or proc.poll() is not None, 60)
            assert proc.poll() is None, bytes(seen)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    stderr = seen.decode("utf-8", "replace")
    assert "rlwatch watch: a big backlog of" in stderr and "status now:" in stderr
    assert "Traceback (most recent" not in stderr  # findings, no crash of its own
    assert stderr.endswith("\r\x1b[K")  # the progress line cleared
    assert proc.stdout is not None
    types = [json.loads(line)["type"] for line in proc.stdout.read().decode().splitlines()]
    assert types == ["watchdog"]  # no counts: the backlog was not read whole
