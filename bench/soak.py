"""Issue 7, part 4: memory over a long run with steady log growth — the slope is what would grow over days.

``rlwatch watch`` and the dashboard run side by side at a 1 s interval on eight growing logs; RSS is sampled every
few seconds. The first ``warmup`` seconds (imports, backlog, caches filling) are left out of the fit.
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import PYTHON, PtyProcess, Usage, fmt, measure, rlwatch_argv, slope, started, wait_until
from bench.rundirs import live_run


@dataclass(slots=True)
class SoakResult:
    usage: dict[str, Usage]
    seconds: float
    warmup: float
    grown_mb: float  # how much the logs grew
    notes: list[str] = field(default_factory=list)

    def fit(self, name: str, since: float | None = None) -> tuple[float, float, float, float]:
        """(MB per hour, RSS at ``since``, RSS at the end, RSS max) of one process, from ``since`` seconds on
        (default: the end of the warm-up)."""
        start = self.warmup if since is None else since
        samples = [(t, mb) for t, mb in self.usage[name].samples if t >= start]
        if not samples:
            nan = float("nan")
            return nan, nan, nan, nan
        per_hour = slope([(t / 3600.0, mb) for t, mb in samples])
        return per_hour, samples[0][1], samples[-1][1], max(mb for _, mb in samples)

    def steady(self, name: str) -> float:
        """MB per hour over the second half of the run, when bounded buffers (recent lines, histories) are full."""
        return self.fit(name, self.seconds / 2)[0]


def run(data_dir: Path, seconds: float, warmup: float = 30.0) -> SoakResult:
    root = data_dir / "soak-run"
    paths = live_run(root, logs=8, backlog_steps=50)
    before = sum(p.stat().st_size for p in paths)
    notes: list[str] = []
    watch_path = data_dir / "soak-watch.out"
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(watch_path.open("wb"))
        stack.enter_context(started([PYTHON, "-m", "bench.writer", *map(str, paths), "--period", "1", "--lines", "4"]))
        watch = stack.enter_context(
            started(rlwatch_argv("watch", str(root), "--interval", "1"), stdout=out, stderr=subprocess.STDOUT)
        )
        dash = PtyProcess(rlwatch_argv(str(root), "--interval", "1", "--readonly"))
        stack.callback(dash.stop)
        wait_until(lambda: watch_path.stat().st_size > 0, 60, step=0.1)
        usage = measure({"rlwatch watch": watch.pid, "rlwatch dashboard": dash.pid}, seconds, every=5.0)
        if dash.proc.poll() is not None:
            notes.append(f"the dashboard exited early: {dash.tail()[-300:]!r}")
    grown = (sum(p.stat().st_size for p in paths) - before) / 1e6
    return SoakResult(usage, seconds, min(warmup, seconds / 4), grown, notes)


def markdown(r: SoakResult) -> list[str]:
    out = [
        f"{r.seconds / 60:.0f} minutes, 8 logs growing steadily ({r.grown_mb:.1f} MB written in all), RSS sampled "
        f"every 5 s. Slopes are least-squares fits: from the end of a {r.warmup:.0f} s warm-up, and over the second "
        "half only (by then the bounded buffers — recent lines, graph histories — are full, so what still grows "
        "would grow for ever).",
        "",
        "| process | RSS after warm-up | RSS at end | RSS max | slope after warm-up | slope, second half |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in r.usage:
        per_hour, first, last, peak = r.fit(name)
        out.append(
            f"| {name} | {fmt(first, 1, ' MB')} | {fmt(last, 1, ' MB')} | {fmt(peak, 1, ' MB')} | "
            f"{fmt(per_hour, 2, ' MB/h')} | {fmt(r.steady(name), 2, ' MB/h')} |"
        )
    out += [f"- {n}" for n in r.notes]
    return out
