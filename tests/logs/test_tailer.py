"""The tailer on real files (rotation, truncation, deletion, odd bytes, huge lines, errors) and the waker."""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest

from rlwatch.logs.newlines import count_lines
from rlwatch.logs.tailer import Chunk, Tailer
from rlwatch.logs.waker import Waker, watch_roots
from tests.simhost import wait_until


def lines_of(chunks: list[Chunk]) -> list[tuple[str, int, bytes]]:
    """(path, lineno, line bytes) for every line delivered, pieces of a long line joined."""
    out: list[tuple[str, int, bytes]] = []
    for chunk in chunks:
        parts = chunk.data.splitlines(keepends=True)
        if chunk.continues_line:
            head = parts.pop(0) if parts else b""
            path, lineno, prev = out[-1]
            assert (path, lineno) == (chunk.path, chunk.first_lineno)
            out[-1] = (path, lineno, prev + head)
            first = chunk.first_lineno + 1
        else:
            first = chunk.first_lineno
        out.extend((chunk.path, first + i, part) for i, part in enumerate(parts))
    return out


def texts(chunks: list[Chunk]) -> list[bytes]:
    return [line for _, _, line in lines_of(chunks)]


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "logs" / "trainer.log"


def tailer_for(log: Path, **kw: int | float | bool) -> Tailer:
    log.parent.mkdir(parents=True, exist_ok=True)
    return Tailer([str(log.parent / "*.log")], rescan_s=0.0, **kw)  # type: ignore[arg-type]


def test_backlog_then_live(log: Path) -> None:
    tailer = tailer_for(log)
    log.write_bytes(b"one\ntwo\n")
    first = tailer.poll()
    assert lines_of(first) == [(str(log), 1, b"one\n"), (str(log), 2, b"two\n")]
    assert tailer.poll() == []
    append(log, b"three\n")
    assert lines_of(tailer.poll()) == [(str(log), 3, b"three\n")]
    assert tailer.files == (str(log),)
    tailer.close()
    assert not tailer.files


def test_partial_line_is_held_until_complete(log: Path) -> None:
    tailer = tailer_for(log)
    log.write_bytes(b"done\nhalf")
    assert texts(tailer.poll()) == [b"done\n"]
    append(log, b" more")
    assert tailer.poll() == []
    append(log, b" end\nnext\n")
    assert lines_of(tailer.poll()) == [(str(log), 2, b"half more end\n"), (str(log), 3, b"next\n")]


def test_crlf_split_across_writes_counts_once(log: Path) -> None:
    tailer = tailer_for(log)
    log.write_bytes(b"a\r")
    assert tailer.poll() == []  # a bare CR at the end may still become CRLF
    append(log, b"\nb\rc\r\n")
    chunks = tailer.poll()
    assert texts(chunks) == [b"a\r\n", b"b\r", b"c\r\n"]
    assert sum(c.nlines for c in chunks) == 3
    append(log, b"tqdm 10%\rtqdm 20%\r")
    assert texts(tailer.poll()) == [b"tqdm 10%\r"]
    append(log, b"x")
    assert texts(tailer.poll()) == [b"tqdm 20%\r"]


def test_a_bar_ending_the_file_on_a_bare_cr_is_delivered_once_the_file_stops(log: Path) -> None:
    """A tqdm bar's last redraw ends in a bare CR and nothing follows it when the file stops there: held while the
    next byte may make it CRLF, delivered by the first poll that finds the file grown no further. A LF written after
    all only ends that line: no empty line is counted, and the next line keeps its number."""
    tailer = tailer_for(log)
    log.write_bytes(b"head\nbar 1/9\rbar 2/9\r")
    assert lines_of(tailer.poll()) == [(str(log), 1, b"head\n"), (str(log), 2, b"bar 1/9\r")]
    chunks = tailer.poll()  # grown no further: the last redraw is not held back any longer
    assert lines_of(chunks) == [(str(log), 3, b"bar 2/9\r")] and sum(c.nlines for c in chunks) == 1
    assert tailer.poll() == []
    append(log, b"\nnext\n")
    chunks = tailer.poll()
    assert lines_of(chunks) == [(str(log), 4, b"next\n")] and sum(c.nlines for c in chunks) == 1
    data = log.read_bytes()
    assert all(data[c.offset : c.offset + len(c.data)] == c.data for c in chunks)
    append(log, b"bar 3/9\r")
    assert tailer.poll() == []  # held: read by this poll
    append(log, b"bar 4/9\r")  # grown since: the held line was a redraw like the others
    assert texts(tailer.poll()) == [b"bar 3/9\r"]
    assert texts(tailer.poll()) == [b"bar 4/9\r"]
    append(log, b"bar 5/9\r")  # no LF after the released line: read as it comes
    tailer.poll()
    assert texts(tailer.poll()) == [b"bar 5/9\r"]


def test_read_blocks_never_split_crlf(log: Path) -> None:
    tailer = tailer_for(log, block_bytes=3)
    data = b"ab\r\ncd\r\r\n\n\rx\r\ny\n"
    log.write_bytes(data)
    chunks = tailer.poll()
    assert texts(chunks) == data.splitlines(keepends=True)
    assert sum(c.nlines for c in chunks) == count_lines(data)


def test_invalid_utf8_and_nul_pass_through(log: Path) -> None:
    tailer = tailer_for(log)
    data = b"\xff\xfe bad \x00 nul \xc3\x28\n\x00\n\x1b[31mred\x1b[0m\n"
    log.write_bytes(data)
    assert b"".join(c.data for c in tailer.poll()) == data


def test_rename_rotation_drains_old_then_reads_new(log: Path) -> None:
    tailer = tailer_for(log)
    log.write_bytes(b"old 1\n")
    tailer.poll()
    append(log, b"old 2\nold partial")
    log.rename(log.with_name("trainer.log.1"))
    log.write_bytes(b"new 1\n")
    got = lines_of(tailer.poll())
    assert got == [
        (str(log), 2, b"old 2\n"),
        (str(log), 3, b"old partial"),  # can never be completed now: delivered as a line
        (str(log), 1, b"new 1\n"),
    ]
    append(log, b"new 2\n")
    assert lines_of(tailer.poll()) == [(str(log), 2, b"new 2\n")]


def test_rotated_name_matched_by_the_glob_is_not_read_again(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    tailer = Tailer([str(tmp_path / "trainer.log*")], rescan_s=0.0)
    log.write_bytes(b"a\nb\n")
    assert texts(tailer.poll()) == [b"a\n", b"b\n"]
    log.rename(tmp_path / "trainer.log.1")
    log.write_bytes(b"c\n")
    assert texts(tailer.poll()) == [b"c\n"]
    append(tmp_path / "trainer.log.1", b"late write to the rotated file\n")
    got = lines_of(tailer.poll())
    assert got == [(str(tmp_path / "trainer.log.1"), 3, b"late write to the rotated file\n")]


def test_copytruncate_after_reading_restarts_at_zero(log: Path) -> None:
    tailer = tailer_for(log)
    log.write_bytes(b"1\n2\n")
    tailer.poll()
    shutil.copyfile(log, log.with_name("trainer.log.1"))
    with log.open("r+b") as f:
        f.truncate(0)
    assert tailer.poll() == []
    append(log, b"after\n")
    assert lines_of(tailer.poll()) == [(str(log), 1, b"after\n")]


def test_truncate_and_regrow_between_polls_is_noticed_by_the_head(log: Path) -> None:
    tailer = tailer_for(log)
    log.write_bytes(b"first run line\n")
    tailer.poll()
    log.write_bytes(b"second run, a longer first line\n")  # truncated and rewritten: larger than before
    assert lines_of(tailer.poll()) == [(str(log), 1, b"second run, a longer first line\n")]


def test_delete_and_recreate(log: Path) -> None:
    tailer = tailer_for(log)
    log.write_bytes(b"a\nunfinished")
    tailer.poll()
    log.unlink()
    assert texts(tailer.poll()) == [b"unfinished"]
    assert tailer.poll() == []
    log.write_bytes(b"fresh\n")
    assert lines_of(tailer.poll()) == [(str(log), 1, b"fresh\n")]


def test_new_files_matching_a_recursive_glob(tmp_path: Path) -> None:
    tailer = Tailer([str(tmp_path / "logs" / "**" / "*.log")], rescan_s=0.0)
    assert tailer.poll() == []
    deep = tmp_path / "logs" / "root" / "exp" / "trial0"
    deep.mkdir(parents=True)
    (deep / "trainer.log").write_bytes(b"x\n")
    (deep / "notes.txt").write_bytes(b"ignored\n")
    (tmp_path / "logs" / "top.log").write_bytes(b"y\n")
    got = {(Path(p).name, line) for p, _, line in lines_of(tailer.poll())}
    assert got == {("trainer.log", b"x\n"), ("top.log", b"y\n")}


def test_rescan_is_rate_limited(tmp_path: Path) -> None:
    now = [0.0]
    tailer = Tailer([str(tmp_path / "*.log")], rescan_s=1.0, monotonic=lambda: now[0])
    tailer.poll()
    (tmp_path / "a.log").write_bytes(b"x\n")
    assert tailer.poll() == []
    now[0] = 1.5
    assert texts(tailer.poll()) == [b"x\n"]


def test_long_line_in_pieces_with_one_number(log: Path) -> None:
    tailer = tailer_for(log, max_line_bytes=10, block_bytes=4)
    log.write_bytes(b"short\n" + b"L" * 35 + b"\nafter\n")
    chunks = tailer.poll()
    assert all(len(c.data) <= 10 + 4 for c in chunks)
    pieces = [c for c in chunks if c.continued]
    assert pieces and all(c.first_lineno == 2 and c.nlines == 0 for c in pieces)
    assert lines_of(chunks) == [(str(log), 1, b"short\n"), (str(log), 2, b"L" * 35 + b"\n"), (str(log), 3, b"after\n")]


def test_every_chunk_says_where_its_bytes_lie_in_the_file(log: Path) -> None:
    """``Chunk.offset`` lets the preview find the line its part starts on from the main count's chunks: the bytes at
    that offset must be the chunk's, for whole lines, pieces of over-long lines, "\\r\\n" across blocks and an
    unfinished last line flushed when the file goes."""
    rng = random.Random(7)
    tailer = tailer_for(log, max_line_bytes=12, block_bytes=64, max_poll_bytes=128)
    written = b""
    seen: list[Chunk] = []
    for _ in range(300):
        line = bytes(rng.choice(b"ab:\t") for _ in range(rng.choice((0, 3, 30, 90))))
        data = line + rng.choice((b"\n", b"\r\n", b"\r", b""))
        append(log, data)
        written += data
        if rng.random() < 0.3:
            seen += tailer.poll()
    while chunks := tailer.poll():
        seen += chunks
    log.unlink()  # the unfinished last line is flushed
    seen += tailer.poll()
    for c in seen:
        assert written[c.offset : c.offset + len(c.data)] == c.data, c
    # every byte delivered once, in order; none left out but the LF of a CRLF whose CR ended a line delivered when the
    # file stopped growing there (it only ends that line)
    at = 0
    for c in seen:
        gap = written[at : c.offset]
        assert gap in (b"", b"\n") and (not gap or written[at - 1 : at] == b"\r"), (at, c)
        at = c.offset + len(c.data)
    assert at == len(written)


def test_backlog_is_read_in_bounded_polls(log: Path) -> None:
    tailer = tailer_for(log, block_bytes=1000, max_poll_bytes=5000)
    line = b"x" * 99 + b"\n"
    log.write_bytes(line * 200)  # 20 000 bytes
    polls = []
    while chunks := tailer.poll():
        polls.append(sum(len(c.data) for c in chunks))
    assert len(polls) == 4
    assert max(polls) <= 5000
    assert sum(polls) == 20_000


def test_errors_do_not_stop_the_others(tmp_path: Path) -> None:
    good = tmp_path / "good.log"
    good.write_bytes(b"ok\n")
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    a_dir = tmp_path / "dir.log"
    a_dir.mkdir()
    tailer = Tailer([str(tmp_path / "*.log"), str(a_dir)], rescan_s=0.0)
    assert texts(tailer.poll()) == [b"ok\n"]
    assert tailer.errors == {str(fifo): "is a FIFO: not tailed", str(a_dir): "is a directory"}
    assert tailer.files == (str(good),)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_recovers(tmp_path: Path) -> None:
    log = tmp_path / "secret.log"
    log.write_bytes(b"hidden\n")
    log.chmod(0)
    tailer = Tailer([str(tmp_path / "*.log")], rescan_s=0.0)
    assert tailer.poll() == []
    assert tailer.errors == {str(log): "permission denied"}
    log.chmod(0o644)
    assert texts(tailer.poll()) == [b"hidden\n"]
    assert tailer.errors == {}


def test_a_file_replaced_by_a_fifo_is_drained_and_reported(log: Path) -> None:
    tailer = tailer_for(log)
    log.write_bytes(b"a\n")
    tailer.poll()
    append(log, b"b\n")
    log.unlink()
    os.mkfifo(log)
    assert texts(tailer.poll()) == [b"b\n"]
    assert tailer.errors == {str(log): "is a FIFO: not tailed"}


def test_bad_pattern_is_an_error_not_a_crash(tmp_path: Path) -> None:
    nul = str(tmp_path / "nul\x00.log")
    tailer = Tailer([str(tmp_path / "[unclosed" / "*.log"), str(tmp_path / "missing.log"), nul], rescan_s=0.0)
    assert tailer.poll() == []
    assert tailer.files == ()
    assert tailer.errors == {nul: "unusable path: embedded null byte"}


# ------------------------------------------------------------------------------------------------------ waker
def test_watch_roots() -> None:
    assert watch_roots(["/run/a/logs/**/*.log", "/run/a/logs/x/trainer.log", "/run/b/server.log"]) == [
        "/run/a/logs",
        "/run/b",
    ]
    assert watch_roots(["/run/a/logs/*.log", "/run/c*/x.log"]) == ["/run"]


def test_watch_roots_keep_separate_trees() -> None:
    assert watch_roots(["/srv/a/logs/*.log", "/data/b/trainer.log"]) == ["/data/b", "/srv/a/logs"]


def test_a_pattern_over_the_whole_filesystem_is_polled() -> None:
    waker = Waker(["/**/*.log", "/srv/logs/*.log"], poll_interval_s=0.05)
    waker.start()
    assert waker.mode == "polling"
    started = time.monotonic()
    assert waker.wait(5.0) is False
    assert time.monotonic() - started < 1.0
    waker.stop()


def test_a_file_moved_between_followed_names_is_not_read_twice(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    tailer = Tailer([str(tmp_path / "*.log")], rescan_s=0.0)
    a.write_bytes(b"a1\n")
    b.write_bytes(b"b1\n")
    assert sorted(texts(tailer.poll())) == [b"a1\n", b"b1\n"]
    b.replace(a)  # b.log becomes a.log; the old a.log is gone
    append(a, b"b2\n")
    got = lines_of(tailer.poll()) + lines_of(tailer.poll())
    assert [line for _, _, line in got] == [b"b2\n"]
    assert got[0][1] == 2  # it goes on numbering b's lines


def test_a_write_wakes_the_waiter_quickly(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    waker = Waker([str(logs / "*.log")])
    waker.start()
    try:
        assert wait_until(lambda: waker.mode == "inotify")
        woke_fast = False
        deadline = time.monotonic() + 5
        while not woke_fast and time.monotonic() < deadline:
            append(logs / "trainer.log", b"line\n")
            started = time.monotonic()
            woke_fast = waker.wait(2.0) and time.monotonic() - started < 1.0
        assert woke_fast
    finally:
        waker.stop()
    assert waker.mode == "polling"


def test_nothing_changed_times_out(tmp_path: Path) -> None:
    waker = Waker([str(tmp_path / "*.log")])
    waker.start()
    try:
        assert wait_until(lambda: waker.mode == "inotify")
        waker.wait(0.3)  # settle
        started = time.monotonic()
        assert waker.wait(0.2) is False
        assert time.monotonic() - started >= 0.15
    finally:
        waker.stop()


def test_forced_polling_waits_one_interval(tmp_path: Path) -> None:
    waker = Waker([str(tmp_path / "*.log")], force_polling=True, poll_interval_s=0.05)
    waker.start()
    assert waker.mode == "polling"
    started = time.monotonic()
    assert waker.wait(10.0) is False
    assert time.monotonic() - started < 1.0
    waker.stop()


def test_env_forces_polling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHFILES_FORCE_POLLING", "1")
    waker = Waker([str(tmp_path / "*.log")])
    waker.start()
    assert waker.mode == "polling"
    waker.stop()


def test_missing_directory_polls_until_it_appears(tmp_path: Path) -> None:
    logs = tmp_path / "later" / "logs"
    waker = Waker([str(logs / "*.log")], poll_interval_s=0.05)
    waker.start()
    try:
        started = time.monotonic()
        assert waker.wait(5.0) is False
        assert time.monotonic() - started < 1.0
        assert waker.mode == "polling"
        logs.mkdir(parents=True)
        assert wait_until(lambda: waker.mode == "inotify")
    finally:
        waker.stop()


def test_stop_is_prompt(tmp_path: Path) -> None:
    waker = Waker([str(tmp_path / "*.log")])
    waker.start()
    assert wait_until(lambda: waker.mode == "inotify")
    started = time.monotonic()
    waker.stop()
    assert time.monotonic() - started < 1.0
    assert waker.wait(1.0) is False


def _drain(tailer: Tailer) -> list[Chunk]:
    out: list[Chunk] = []
    while chunks := tailer.poll():
        out.extend(chunks)
    return out


def test_a_hole_of_a_sparse_file_is_stepped_over_unread(tmp_path: Path) -> None:
    """Issue 35: a gigabyte of NUL was counted as one endless line, piece by piece (32 s). A hole is skipped with
    ``SEEK_DATA``: nothing of it is delivered, the line numbers are those of the text around it."""
    path = tmp_path / "sparse.log"
    with path.open("wb") as fh:
        fh.write(b"first\n")
        fh.seek(64 << 20)
        fh.write(b"Connection refused\nlast\n")
    tailer = Tailer([str(path)], block_bytes=1 << 20)
    chunks = _drain(tailer)
    lines = lines_of(chunks)
    assert [(n, t.strip(b"\0")) for _, n, t in lines] == [(1, b"first\n"), (2, b"Connection refused\n"), (3, b"last\n")]
    assert sum(len(c.data) for c in chunks) < 2 << 20  # the hole was not read into chunks
    assert tailer.nul_skipped[str(path)] >= 62 << 20


def test_blocks_of_written_nul_bytes_are_passed_over(tmp_path: Path) -> None:
    """A zero-filled file (written NULs, no hole): a block NUL from end to end is not delivered; text in a block
    beside NULs is, and a line around skipped NULs keeps its number."""
    path = tmp_path / "zeros.log"
    path.write_bytes(b"a\n" + b"\0" * (5 << 16) + b"b\nc\n")
    tailer = Tailer([str(path)], block_bytes=1 << 16)
    lines = lines_of(_drain(tailer))
    assert [(n, t.strip(b"\0")) for _, n, t in lines] == [(1, b"a\n"), (2, b"b\n"), (3, b"c\n")]
    assert tailer.nul_skipped[str(path)] == 4 << 16  # four whole blocks; the NULs beside text were read
