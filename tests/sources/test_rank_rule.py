"""One rank rule: the stack targets' labels and the sampled processes read a process's rank by the same function,
so one process has one rank in every view (a process with LOCAL_RANK alone was "rank 1" to the sampler and
unlabelled to the stack targets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlwatch.sources.stacks import rank_label, rank_of


def _proc(root: Path, pid: int, env: dict[str, str], argv: tuple[str, ...] = ("python", "train.py")) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))


@pytest.mark.parametrize(
    ("env", "argv", "rank"),
    [
        ({"RANK": "3", "LOCAL_RANK": "1"}, ("python", "train.py"), 3),  # the global rank first
        ({"LOCAL_RANK": "1"}, ("python", "train.py"), 1),
        ({}, ("python", "train.py", "--local_rank=2"), 2),  # DeepSpeed's launcher before it set the environment
        ({}, ("python", "train.py", "--local-rank", "5"), 5),
        ({"RANK": "x"}, ("python", "train.py"), None),
    ],
)
def test_one_rank_for_one_process_in_every_reader(
    tmp_path: Path, env: dict[str, str], argv: tuple[str, ...], rank: int | None
) -> None:
    _proc(tmp_path, 42, env, argv)
    assert rank_of(42, str(tmp_path)) == rank
    assert rank_label(42, "trainer", str(tmp_path)) == ("trainer" if rank is None else f"rank {rank}")


def test_a_process_gone_or_unreadable_has_no_rank(tmp_path: Path) -> None:
    assert rank_of(99, str(tmp_path)) is None
    assert rank_label(99, "python", str(tmp_path)) == "python"
