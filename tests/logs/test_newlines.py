"""The compiled line counter gives exactly the answers of the Python rules, and both those of universal newlines.

The compiled core (``rlwatch/logs/_newlines.c``) is the fast path of every line number rlwatch shows; the Python
rules are its fallback. Both are checked against an oracle that shares no code with them: Python's own universal
newline reader.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlwatch.logs import newlines
from rlwatch.logs.newlines import RangeCount, py_count_file_range, py_count_lines

try:
    from rlwatch.logs import _newlines as native
except ImportError:  # pragma: no cover - depends on the install
    native = None  # type: ignore[assignment]


def _compiled() -> Any:
    """The compiled module; a test of it skips only where no C compiler could have built it."""
    if native is None:
        if not shutil.which(os.environ.get("CC", "cc")):
            pytest.skip("the compiled line counter is not built here (no C compiler)")
        if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
            pytest.skip("the compiled line counter is not built here (no Python headers)")
        pytest.fail(
            "a C compiler and Python's headers are here but rlwatch.logs._newlines was not built (pip install -e .)"
        )
    return native


# Bytes that matter to line ends, plus a little of everything else (NULs, invalid UTF-8, letters).
_BYTES = st.lists(st.sampled_from([b"\n", b"\r", b"\r\n", b"a", b"\x00", b"\xff", b"bc"]), max_size=400).map(b"".join)


def _oracle(data: bytes) -> int:
    """Terminators by Python's universal-newline reader: lines, less one when the last has no terminator."""
    lines = io.StringIO(data.decode("latin-1"), newline=None).readlines()
    return len(lines) - (1 if lines and not lines[-1].endswith("\n") else 0)


def test_the_compiled_counter_is_used_where_built() -> None:
    _compiled()
    assert newlines.NATIVE or os.environ.get("RLWATCH_NATIVE") == "0"


@settings(max_examples=400, deadline=None)
@given(_BYTES, st.integers(-5, 420), st.one_of(st.none(), st.integers(-5, 420)))
def test_counts_agree_with_universal_newlines(data: bytes, start: int, end: int | None) -> None:
    assert py_count_lines(data) == _oracle(data)
    want = py_count_lines(data, start, end)
    assert want == data.count(b"\n", start, end) + data.count(b"\r", start, end) - data.count(b"\r\n", start, end)
    native = _compiled()
    assert native.count_lines(data) == _oracle(data)
    assert native.count_lines(data, start, end) == want
    assert native.count_lines(bytearray(data), start, end) == want
    assert native.count_lines(memoryview(data)) == _oracle(data)


def test_long_buffers_take_the_word_path_and_its_lane_limits() -> None:
    """Over 255 words a lane of the accumulator would overflow; lengths around 8 and 2040 bytes try the edges."""
    native = _compiled()
    for size in (7, 8, 9, 2039, 2040, 2041, 2048, 4096 + 3, 1 << 17):
        for fill in (b"\n", b"x\n", b"\r", b"\r\n", b"x", b"\n\r"):
            data = (fill * (size // len(fill) + 1))[:size]
            assert native.count_lines(data) == py_count_lines(data) == _oracle(data), (size, fill)
            assert native.count_lines(data, 3, size - 5) == py_count_lines(data, 3, size - 5)


@pytest.mark.parametrize("seam", [256 * 1024, 1 << 20])
def test_file_ranges_join_a_crlf_cut_between_blocks(tmp_path: Path, seam: int) -> None:
    """The compiled reader's blocks are 256 KiB, the Python one's 1 MiB: a "\\r\\n" on either seam counts once."""
    data = bytearray(b"line of text\n" * (seam // 13 + 2))
    data[seam - 1 : seam + 1] = b"\r\n"
    data[seam + 7] = 0x0D  # and a bare "\r" just after
    path = tmp_path / "log"
    path.write_bytes(bytes(data))
    fd = os.open(path, os.O_RDONLY)
    try:
        for start, end in [(0, len(data)), (0, seam), (seam, len(data)), (5, seam + 9), (0, len(data) + 100)]:
            want = RangeCount(py_count_lines(bytes(data[start:end])), data[start], data[min(end, len(data)) - 1])
            assert py_count_file_range(fd, start, end) == want
            assert newlines.count_file_range(fd, start, end) == want
        assert newlines.count_file_range(fd, len(data), len(data) + 10) == RangeCount(0, -1, -1)
    finally:
        os.close(fd)


@settings(max_examples=60, deadline=None)
@given(_BYTES, st.integers(0, 400), st.integers(0, 400))
def test_file_ranges_agree(tmp_path_factory: pytest.TempPathFactory, data: bytes, a: int, b: int) -> None:
    path = tmp_path_factory.mktemp("ranges") / "log"
    path.write_bytes(data)
    start, end = min(a, b), max(a, b)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert newlines.count_file_range(fd, start, end) == py_count_file_range(fd, start, end)
    finally:
        os.close(fd)


def test_a_read_error_is_an_oserror_not_a_crash() -> None:
    r, w = os.pipe()  # pread on a pipe fails (ESPIPE)
    try:
        with pytest.raises(OSError):
            newlines.count_file_range(r, 0, 10)
        with pytest.raises(OSError):
            py_count_file_range(r, 0, 10)
    finally:
        os.close(r)
        os.close(w)


def test_the_fallback_is_used_when_asked() -> None:
    """``RLWATCH_NATIVE=0`` makes every count the Python rules' (how the benchmarks and the fault tests compare)."""
    code = "from rlwatch.logs import newlines as n; print(n.NATIVE, n.count_lines is n.py_count_lines)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "RLWATCH_NATIVE": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["False", "True"]
