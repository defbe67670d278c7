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
from itertools import pairwise
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
    records = [json.loads(line) for line in proc.stdout.read().decode().splitlines()]
    # no complete record: the backlog was not read whole (what its newest part shows may have come, marked partial)
    assert [r["type"] for r in records if not r.get("partial")] == ["watchdog"]


def _watch_records(run: Path, out: Path, *flags: str) -> list[dict[str, Any]]:
    """`watch --json RUN` with stdout to a file, until its first complete state record (or its end): its records.

    Read as the file grows, whole lines only: the test must not stop the stream before the backlog is read."""

    def records() -> list[dict[str, Any]]:
        whole = out.read_text().rpartition("\n")[0]
        return [json.loads(line) for line in whole.splitlines() if line]

    def complete() -> bool:
        return any(r["type"] == "state" and not r.get("partial") for r in records())

    with out.open("w") as fh:
        proc = subprocess.Popen(
            rlwatch_cmd("watch", "--json", *flags, str(run)),
            stdout=fh,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: complete() or proc.poll() is not None, 120)
            assert proc.poll() is None, proc.communicate()[1]
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=15)
            assert proc.returncode == 0, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert b"Traceback" not in err, err
    return [r for r in records() if r["type"] != "watchdog"]  # the watchdog's own word comes first, as ever


def test_watch_json_says_first_what_the_newest_part_shows_then_the_whole(tmp_path: Path) -> None:
    """Over a big backlog the stream does not stay silent until everything is read: a partial state record (and its
    findings) says at once what the newest part shows, the crash at its end included; the complete records follow
    once the backlog is read, with the full counts and no `partial` key."""
    run = _run_dir(tmp_path)
    records = _watch_records(run, tmp_path / "watch.jsonl")
    first = records[0]
    assert first["type"] == "state" and first["partial"] is True, records[:3]
    assert 0 <= first["read"] < 1
    full = next(i for i, r in enumerate(records) if r["type"] == "state" and not r.get("partial"))
    # The crash at the end is said by a partial record, before the whole backlog is read (on a loaded machine the
    # very first may come before the newest part's ending is read: it then says "unknown", never "healthy").
    said = next(r for r in records[:full] if r["type"] == "state" and "run_crashed" in r["findings"])
    assert said["run_state"]["state"] == "crashed" and first["run_state"]["state"] in ("crashed", "unknown")
    early, late = records[:full], records[full:]
    assert all(r["partial"] is True and 0 <= r["read"] <= 1 for r in early)
    assert {r["type"] for r in early} <= {"state", "finding", "finding_cleared", "backlog"}  # no partial counts
    crash = [r for r in early if r["type"] == "finding" and r["code"] == "run_crashed"]
    assert crash and "RuntimeError: weight update to the server failed" in crash[0]["message"]
    reads = [r["read"] for r in early]
    assert reads == sorted(reads)  # how far reading is never goes back
    states = [(r["status"], r["run_state"], sorted(r["findings"])) for r in early if r["type"] == "state"]
    assert all(a != b for a, b in pairwise(states))  # an unchanged partial state is not repeated
    assert not any("partial" in r or "read" in r for r in late)
    assert late[0]["events"]["step"] == 2_000  # the complete state: the whole backlog counted
    assert "run_crashed" in late[0]["findings"]
    assert {r["code"] for r in late if r["type"] == "finding"} >= {"run_crashed"}


def test_watch_json_complete_only_gives_no_partial_record(tmp_path: Path) -> None:
    """`--complete-only`: a consumer that wants only totals gets the stream as it was, complete records alone."""
    run = _run_dir(tmp_path)
    records = _watch_records(run, tmp_path / "watch.jsonl", "--complete-only")
    assert not any("partial" in r or "read" in r for r in records), records[:3]
    assert records[0]["type"] == "state" and records[0]["events"]["step"] == 2_000
