"""PyTorch's flight recorder dumps read safely (sources/flight): real dumps from two H200s, pickles that name a
global refused without running anything, files too large, links, and the debug pipe that asks a rank for a dump."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from rlwatch.sources import flight

REAL = Path(__file__).resolve().parents[1] / "real" / "collective-2gpu"


def test_a_real_dump_is_read_with_no_global_resolved() -> None:
    d = flight.read_flight_dump(str(REAL / "mismatch" / "nccl_trace_rank_0"), 0)
    assert d.error is None
    assert d.groups == {"0": "default_pg"}
    assert [(o.seq, o.numel_in, o.state) for o in d.ops[-2:]] == [(12, 4194304, "completed"), (13, 1, "scheduled")]
    assert d.ops[-1].frame == "main (collective_2gpu.py:58)" and d.ops[-1].where == "nccl_trace_rank_0 entry 12"
    (p,) = d.progress
    assert (p.pg, p.last_enqueued, p.last_completed, p.last_started) == ("0", 13, 12, -1)


class _Boom:
    def __reduce__(self) -> tuple[object, ...]:
        return (os.mkdir, (self.path,))

    def __init__(self, path: str) -> None:
        self.path = path


def test_a_pickle_that_names_a_global_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "nccl_trace_rank_0"
    evil.write_bytes(pickle.dumps({"entries": [_Boom(str(marker))]}))
    d = flight.read_flight_dump(str(evil), 0)
    assert d.error is not None and "refused global" in d.error and d.error.startswith("nccl_trace_rank_0: not read")
    assert not marker.exists()
    assert d.ops == () and d.progress == ()


def test_a_dump_too_large_a_link_or_garbage_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    big = tmp_path / "nccl_trace_rank_0"
    big.write_bytes(pickle.dumps({"entries": ["x" * 2000]}))
    assert "larger than a dump" in (flight.read_flight_dump(str(big), 0, max_bytes=1000).error or "")
    link = tmp_path / "nccl_trace_rank_1"
    link.symlink_to(REAL / "mismatch" / "nccl_trace_rank_1")
    assert flight.read_flight_dump(str(link), 1).error is not None
    junk = tmp_path / "nccl_trace_rank_2"
    junk.write_bytes(b"\x80\x02}q\x00(X\x01")
    assert "not read" in (flight.read_flight_dump(str(junk), 2).error or "")
    plain = tmp_path / "nccl_trace_rank_3"
    plain.write_bytes(pickle.dumps([1, 2, 3]))
    assert "not a flight recorder dump" in (flight.read_flight_dump(str(plain), 3).error or "")


def test_dumps_are_found_under_the_ranks_prefix_and_only_since_the_run_began(tmp_path: Path) -> None:
    for r in (0, 1):
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes((REAL / "stall" / f"nccl_trace_rank_{r}").read_bytes())
    (tmp_path / "nccl_trace_rank_x").write_bytes(b"not a rank")
    prefix = str(tmp_path / "nccl_trace_rank_")
    assert flight.dump_prefixes([{"TORCH_FR_DUMP_TEMP_FILE": prefix}, {}]) == (prefix, flight.DEFAULT_PREFIX)
    assert flight.dump_prefixes([{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}]) == (prefix,)
    found = flight.find_dumps([prefix])
    assert sorted(d.rank for d in found) == [0, 1] and all(d.error is None for d in found)
    mtime = os.stat(tmp_path / "nccl_trace_rank_0").st_mtime
    assert flight.find_dumps([prefix], since=mtime + 60) == ()


def test_the_debug_pipe_gets_one_byte_and_nothing_else_is_written(tmp_path: Path) -> None:
    prefix = str(tmp_path / "nccl_pipe_rank_")
    os.mkfifo(prefix + "0.pipe")
    reader = os.open(prefix + "0.pipe", os.O_RDONLY | os.O_NONBLOCK)  # as ProcessGroupNCCL opens it
    try:
        os.mkfifo(prefix + "1.pipe")  # nobody reads it: refused at once, never waited on
        (tmp_path / "nccl_pipe_rank_2.pipe").write_text("")  # a plain file: never opened for writing
        env = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": prefix}
        said = flight.request_dumps({0: env, 1: env, 2: env, 3: {}})
        assert said[0] == f"asked through {prefix}0.pipe"
        assert said[1].startswith(f"{prefix}1.pipe: ")
        assert said[2] == f"{prefix}2.pipe: not a pipe"
        assert 3 not in said
        assert os.read(reader, 16) == b"1"
        assert (tmp_path / "nccl_pipe_rank_2.pipe").read_text() == ""
    finally:
        os.close(reader)
