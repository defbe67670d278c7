"""Diagnosis first over real frameworks' logs (tests/real/), cut at line after line: the newest part alone may know
less than the whole file (a traceback whose header is above the cut has no root cause), but it must never say more,
nor say it more loudly; holding the whole real log, it says the same. Each real log ends a backlog of neutral lines,
so the full count's findings are about the real log alone; then the preview is made to start at each of the real
log's lines in turn."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import Snapshot
from rlwatch.config.models import Config
from rlwatch.discover.load import resolve_config
from rlwatch.engine import preview as preview_module
from rlwatch.engine import reading  # where the preview's waits are read
from rlwatch.engine.engine import Engine
from rlwatch.logs.tailer import Tailer

REAL = Path(__file__).parents[1] / "real"
CASES = {
    "torchrun-exception": "torchrun.log",
    "torchrun-nccl-timeout-2gpu": "torchrun.log",
    "torchrun-nccl-timeout-default": "torchrun.log",
    "torchrun-relaunched": "train.log",
    "cuda-oom": "oom.log",
    "trl-grpo-colocated": "run/train.log",
}
FILLER = b"".join(
    b"2026-11-24 06:00:%02d,000 INFO loading shard %d of the dataset\n" % (i % 60, i) for i in range(3000)
)
# The full count's finding that the preview's may stand for when the torchrun report's header is above the cut.
STANDS_FOR = {"child_failed": "torchrun_failed"}


class _Uncounted:
    """The lines before the newest part not counted (what is checked here does not depend on line numbers)."""

    error: str | None = None

    def __init__(self, path: str, identity: tuple[int, int], end: int) -> None:
        pass

    def result(self) -> int | None:
        return None

    def wait(self, timeout: float) -> int | None:
        return None

    def close(self) -> None:
        pass


def _engine(root: Path, cfg: Config, sizes: tuple[int, int]) -> Engine:
    engine = Engine(cfg, root, clock=FakeClock(start=1_800_000_000.0))
    engine.tailer.close()
    engine.tailer = Tailer(engine.log_patterns)
    engine.preview_sizes = sizes
    return engine


def _title(title: str) -> str:
    """An incident's title without how often it was printed (the preview may have seen fewer prints)."""
    return re.sub(r" \(printed \d+ times\)$", "", title)


def _full(root: Path, cfg: Config) -> Snapshot:
    engine = _engine(root, cfg, (1 << 60, 0))
    try:
        engine.drain_logs()
        return engine.build()
    finally:
        engine.stop()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_newest_part_never_says_more_than_the_whole_file(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preview_module, "PrefixCount", _Uncounted)
    monkeypatch.setattr(reading, "PREVIEW_FIRST_WAIT_S", 0.0)
    real = (REAL / case / CASES[case]).read_bytes()
    root = tmp_path / "run"
    root.mkdir()
    (root / Path(CASES[case]).name).write_bytes(FILLER + real)
    cfg, _ = resolve_config(root, None)
    final = _full(root, cfg)
    severity = {f.code: f.severity for f in final.findings}
    titles = {(i.kind, _title(i.title)) for i in final.incidents}
    starts = [0, *(i + 1 for i, b in enumerate(real[:-1]) if b == 0x0A)]  # every line of the real log
    assert len(starts) > 10
    for start in starts:
        engine = _engine(root, cfg, (len(FILLER) // 2, len(real) - start + 1))
        try:
            assert engine.advance_preview()
            assert engine.preview is not None
            look = engine.build()
        finally:
            engine.stop()
        where = f"{case}, the newest part from {real[start : start + 60]!r}"
        for f in look.findings:
            if f.code == "run_state_unknown":
                continue  # "the evidence does not say" says less than the whole file, whatever that says
            known = severity.get(f.code) or severity.get(STANDS_FOR.get(f.code, ""))
            assert known is not None, f"{where}: {f.code} ({f.message})"
            assert f.severity.rank >= known.rank, f"{where}: {f.code} {f.severity} where the whole file says {known}"
        for i in look.incidents:
            assert (i.kind, _title(i.title)) in titles, f"{where}: {i.kind} {i.title}"
        if start == 0:  # the whole real log in the newest part: the same diagnosis as the whole file's
            assert {(f.code, f.severity) for f in look.findings} == {(f.code, f.severity) for f in final.findings}
            assert [(i.kind, i.title) for i in look.incidents] == [(i.kind, i.title) for i in final.incidents]
