"""Issue 13: speed where incidents happen. Over the calm log and the incident-dense one (``datagen --dense``), side
by side in one run: ``grep -cE`` and ripgrep over the same patterns, the time lnav and toolong take to index the
file, and ``rlwatch report --json`` over a trial holding it (wall time, peak RSS, the count of every kind, which
must equal the generator's, grep's and ripgrep's). And the dashboard over a 2 GiB incident-dense backlog: how soon
it shows a diagnosis of now."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import peers
from bench.common import PtyProcess, fmt, median, rlwatch_argv, run_timed, wait_until
from bench.datagen import REPORTED_KINDS, Dataset
from bench.rundirs import backlog_run

# Issue 13's targets: `rlwatch report` within these multiples of grep's time.
TARGET_RATIO = {"calm": 3.0, "dense": 5.0}
TARGET_RSS_MB = 100.0


@dataclass(slots=True)
class Row:
    name: str
    times: list[float] = field(default_factory=list)
    rss_mb: float | None = None
    lines: int | None = None  # lines it matched (grep, ripgrep) or indexed (lnav, toolong)
    note: str = ""

    @property
    def median_s(self) -> float:
        return median(self.times)


@dataclass(slots=True)
class LogResult:
    label: str  # calm | dense
    dataset: Dataset
    rows: list[Row]
    counts: dict[str, dict[str, int]]  # source -> kind -> lines
    notes: list[str]

    def row(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.name == name and r.times), None)

    def ratio(self, name: str) -> float:
        a, b = self.row(name), self.row("grep -cE")
        return float("nan") if a is None or b is None else a.median_s / b.median_s

    @property
    def agree(self) -> bool:
        return all(c == self.counts["expected"] for c in self.counts.values())


REPORT = "rlwatch report --json"


def _report_counts(output: bytes) -> dict[str, int]:
    events = json.loads(output)["events"]
    return {k: int(events.get(k, {}).get("count", -1)) for k in REPORTED_KINDS}


def run_one(label: str, ds: Dataset, data_dir: Path, runs: int, log: Callable[[str], None]) -> LogResult:
    path = ds.path
    with path.open("rb") as fh:  # into the page cache, for every contender alike
        while fh.read(8 << 20):
            pass
    rows: dict[str, Row] = {}
    notes: list[str] = []
    grep, rg, lnav = peers.grep_peer(), peers.rg_peer(), peers.lnav_peer()
    tl_python = peers.toolong_python(data_dir)
    notes += [f"{p.name}: not installed" for p in (grep, rg, lnav) if not p.available]
    if tl_python is None:
        notes.append("toolong: could not be installed (pip install toolong, in a virtual environment of its own)")
    trial = backlog_run(data_dir / f"incidents-{label}-run", ds)
    counts: dict[str, dict[str, int]] = {"expected": dict(ds.expected)}
    for i in range(runs):
        if grep.available:
            t, n = peers.grep_union(path)
            rows.setdefault("grep -cE", Row("grep -cE", note="LC_ALL=C, every kind in one pass")).times.append(t)
            rows["grep -cE"].lines = n
        if rg.available:
            t, n = peers.rg_union(path)
            rows.setdefault("ripgrep -c", Row("ripgrep -c", note="--no-unicode, one pass")).times.append(t)
            rows["ripgrep -c"].lines = n
        if lnav.available:
            ix = peers.lnav_index(path)
            r = rows.setdefault("lnav (index)", Row("lnav (index)", note="`-n`, until `lnav_file.lines` answers"))
            r.times.append(ix.seconds)
            r.rss_mb, r.lines = ix.max_rss_mb, ix.lines
        if tl_python is not None:
            ix = peers.toolong_index(tl_python, path)
            r = rows.setdefault(
                "toolong (index)", Row("toolong (index)", note="`LogFile.scan_line_breaks`, its scan, no screen")
            )
            r.times.append(ix.seconds)
            r.rss_mb, r.lines = ix.max_rss_mb, ix.lines
        timed = run_timed(rlwatch_argv("report", "--json", str(trial.parents[3])))
        r = rows.setdefault(
            REPORT, Row(REPORT, note="a trial holding the log: the backlog, a sampling round, diagnosis")
        )
        r.times.append(timed.seconds)
        r.rss_mb = max(r.rss_mb or 0.0, timed.max_rss_mb)
        if timed.returncode in (0, 1):
            counts["rlwatch report"] = _report_counts(timed.output)
        else:
            notes.append(f"rlwatch report failed ({timed.returncode}): {timed.output[-300:]!r}")
        log(f"  {label} run {i + 1}/{runs}: " + ", ".join(f"{r.name} {r.times[-1]:.2f}s" for r in rows.values()))
    if grep.available:
        counts["grep"] = peers.per_kind_counts("grep", path, REPORTED_KINDS)
    if rg.available:
        counts["ripgrep"] = peers.per_kind_counts("rg", path, REPORTED_KINDS)
    return LogResult(label, ds, list(rows.values()), counts, notes)


def run(
    datasets: list[tuple[str, Dataset]], data_dir: Path, runs: int, log: Callable[[str], None] = print
) -> list[LogResult]:
    return [run_one(label, ds, data_dir, runs, log) for label, ds in datasets]


def targets(results: list[LogResult]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) rows of issue 13."""
    rows: list[tuple[str, str, bool | None]] = []
    for r in results:
        ratio = r.ratio(REPORT)
        limit = TARGET_RATIO.get(r.label, 3.0)
        gib = r.dataset.size / 2**30
        rows.append(
            (
                f"{r.label} {gib:.2f} GiB: `rlwatch report` within {limit:g}× of `grep -cE`",
                f"{fmt(ratio, 1, '×')}",
                None if math.isnan(ratio) else ratio <= limit,
            )
        )
        rep = r.row(REPORT)
        if rep is not None and rep.rss_mb is not None:
            rows.append(
                (
                    f"{r.label}: peak RSS ≤ {TARGET_RSS_MB:.0f} MB",
                    fmt(rep.rss_mb, 0, " MB"),
                    rep.rss_mb <= TARGET_RSS_MB,
                )
            )
        rows.append(
            (f"{r.label}: counts agree (generator, rlwatch, grep, ripgrep)", "yes" if r.agree else "no", r.agree)
        )
    return rows


def markdown(results: list[LogResult]) -> list[str]:
    out: list[str] = []
    for r in results:
        ds = r.dataset
        share = ds.any_kind / max(ds.lines, 1)
        runs = max((len(x.times) for x in r.rows), default=0)
        out += [
            f"### {r.label.capitalize()} log",
            "",
            f"`{ds.path.name}`: {ds.size / 2**30:.2f} GiB, {ds.lines:,} lines, {share:.1%} of them a reported kind "
            f"({sum(ds.expected.values()):,} events). Medians of {runs} run(s), file in the page cache.",
            "",
            "| contender | median time | throughput | time ÷ grep's | peak RSS | lines | how |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for row in r.rows:
            rate = ds.size / row.median_s / 1e6 if row.times else float("nan")
            lines = "—" if row.lines is None else f"{row.lines:,}"
            out.append(
                f"| {row.name} | {row.median_s:.2f} s | {fmt(rate, 0, ' MB/s')} | {fmt(r.ratio(row.name), 1, '×')} "
                f"| {fmt(row.rss_mb, 0, ' MB')} | {lines} | {row.note} |"
            )
        out += ["", "Lines counted per kind (they must agree):", ""]
        sources = list(r.counts)
        out.append("| kind | " + " | ".join(sources) + " |")
        out.append("| --- | " + " | ".join("---:" for _ in sources) + " |")
        for kind in REPORTED_KINDS:
            vals = [r.counts[s].get(kind, -1) for s in sources]
            mark = "" if len(set(vals)) == 1 else " **≠**"
            out.append(f"| {kind}{mark} | " + " | ".join(f"{v:,}" for v in vals) + " |")
        out += ["", "All sources agree." if r.agree else "**The counts do not agree.**"]
        out += [f"- {n}" for n in r.notes]
        out.append("")
    out.append(
        "lnav and toolong index a file for viewing; they do not count event kinds, so their row is the time to a "
        "full index and the lines they indexed (toolong counts one more: it compares the last byte with a str, so "
        "it always adds an end-of-file break)."
    )
    return out


@dataclass(slots=True)
class FirstDiagnosis:
    """The dashboard over a big incident-dense backlog: its first frame, and its first diagnosis of *now*."""

    size: int  # bytes of backlog
    frame_s: list[float]
    diagnosis_s: list[float]
    notes: list[str] = field(default_factory=list)
    cold_s: float | None = None  # starts after the whole page cache was dropped (None: not allowed here)
    log_cold_s: float | None = None  # starts after the log's own pages were evicted (rlwatch's files cached)
    key_s: list[float] = field(default_factory=list)  # a key typed while the backlog is read, until it shows
    report_s: list[float] = field(default_factory=list)  # `rlwatch report` at a terminal, until its first look
    watch_json_s: list[float] = field(default_factory=list)  # `rlwatch watch --json`, until its first state record


COLD_RUNS = 3  # starts from a cold page cache


def _evict(path: Path, *, whole: bool) -> bool:
    """Put ``path`` out of the page cache: with ``whole``, everything (drop_caches; False where not allowed), else
    only its own pages (posix_fadvise DONTNEED)."""
    os.sync()
    if whole:
        try:
            Path("/proc/sys/vm/drop_caches").write_text("1\n")
        except OSError:
            return False
        return True
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


KEY_PRESSES = 30  # the dashboard's pause key, typed this many times while the rest of the backlog is read


DIAGNOSIS_MARK = b"diagnosis from the end first"  # the header, once the newest part of the logs is diagnosed


def first_diagnosis(ds: Dataset, data_dir: Path, runs: int) -> FirstDiagnosis:
    """From starting ``rlwatch RUN_DIR`` in a pseudo-terminal until the header says the diagnosis of the logs'
    newest part is on screen (the preview: last exception, root cause, streaks, step), over ``ds`` as backlog."""
    trial = backlog_run(data_dir / "first-diagnosis-run", ds)
    result = FirstDiagnosis(ds.size, [], [])
    # From a cold page cache (a log written long ago, or evicted on a pod short of memory): the whole cache dropped
    # where this machine allows it (the interpreter and rlwatch read from disk too), and the log's own pages evicted,
    # which any reader of the file may ask for.
    for whole in (True, False):
        cold: list[float] = []
        for _ in range(COLD_RUNS):
            if not _evict(ds.path, whole=whole):
                result.notes.append("the whole page cache was not dropped: that needs root")
                break
            _, seen = _diagnosis_once(trial)
            if seen is not None:
                cold.append(seen)
        if cold and whole:
            result.cold_s = median(cold)
        elif cold:
            result.log_cold_s = median(cold)
    with ds.path.open("rb") as fh:  # the page cache, as for every contender
        while fh.read(8 << 20):
            pass
    for _ in range(runs):
        frame, diag = _diagnosis_once(trial)
        if frame is not None:
            result.frame_s.append(frame)
        if diag is None:
            result.notes.append("the dashboard showed no diagnosis of the newest part within 60 s")
        else:
            result.diagnosis_s.append(diag)
    result.key_s = _key_response(trial, KEY_PRESSES)
    for _ in range(3):
        seen = _report_first_look_once(trial)
        if seen is not None:
            result.report_s.append(seen)
    for _ in range(3):
        seen = _watch_json_first_once(trial)
        if seen is not None:
            result.watch_json_s.append(seen)
    return result


def _watch_json_first_once(trial: Path) -> float | None:
    """Seconds from starting `rlwatch watch --json` (stdout a pipe, as a consumer reads it) until it writes its
    first `state` record: the newest part's diagnosis, marked partial, while the rest of the backlog is read."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        rlwatch_argv("watch", str(trial.parents[3]), "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    seen: float | None = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded: the watch is stopped below whatever it writes
            if b'"type": "state"' in line:
                seen = time.perf_counter() - t0
                break
            if time.perf_counter() - t0 > 60:
                break
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    return seen


REPORT_MARK = b"status now:"  # `report` at a terminal, once it has diagnosed the newest part (stderr)


def _report_first_look_once(trial: Path) -> float | None:
    """Seconds from starting `rlwatch report` on a terminal until it says what the newest part shows; then it is
    stopped (reading the whole backlog is section 6's measure)."""
    return _first_seen(rlwatch_argv("report", str(trial.parents[3])), REPORT_MARK)[0]


def _key_response(trial: Path, presses: int) -> list[float]:
    """Seconds from typing the pause key until the log bar shows it, ``presses`` times, while the dashboard reads
    the rest of the backlog after its diagnosis of now: a screen that waits for the counting shows it here."""
    p = PtyProcess(rlwatch_argv(str(trial.parents[3]), "--readonly"))
    p.watch_for(DIAGNOSIS_MARK)
    out: list[float] = []
    try:
        if not wait_until(lambda: p.seen(DIAGNOSIS_MARK) is not None or p.proc.poll() is not None, 60, step=0.005):
            return out
        for i in range(presses):
            mark = b" PAUSED " if i % 2 == 0 else b" FOLLOW "  # the log bar's state, toggled by each press
            typed = p.press(b"p", mark)
            if not wait_until(lambda m=mark: p.seen(m) is not None, 20, step=0.002):  # type: ignore[misc]
                break
            shown = p.seen(mark)
            assert shown is not None  # just waited for
            out.append(shown - typed)
            time.sleep(0.2)  # a person's pace between presses
    finally:
        p.stop()
    return out


def _diagnosis_once(trial: Path) -> tuple[float | None, float | None]:
    """One start of the dashboard: seconds until its first frame and until its diagnosis of now (None: not seen)."""
    frame, diagnosis = _first_seen(rlwatch_argv(str(trial.parents[3]), "--readonly"), b"trainer.log", DIAGNOSIS_MARK)
    return frame, diagnosis


def _first_seen(argv: list[str], *marks: bytes) -> list[float | None]:
    """Start ``argv`` in a pseudo-terminal and stop it once the last of ``marks`` shows (60 s at most) or it exits:
    the seconds until each mark showed, None for one that did not."""
    p = PtyProcess(argv)
    p.watch_for(*marks)
    try:
        wait_until(lambda: p.seen(marks[-1]) is not None or p.proc.poll() is not None, 60, step=0.005)
        return [p.seen(mark) for mark in marks]
    finally:
        p.stop()


def first_diagnosis_targets(r: FirstDiagnosis) -> list[tuple[str, str, bool | None]]:
    d = median(r.diagnosis_s) if r.diagnosis_s else float("nan")
    rows: list[tuple[str, str, bool | None]] = [
        (
            f"first diagnosis on the dashboard ≤ 1 s over a {r.size / 2**30:.2f} GiB incident-dense backlog",
            fmt(d, 2, " s"),
            None if math.isnan(d) else d <= 1.0,
        )
    ]
    firsts = getattr(r, "watch_json_s", [])  # results saved before this row existed have no such field
    if firsts:
        w = median(firsts)
        rows.append((f"`watch --json`'s first record ≤ 1.5 s over {r.size / 2**30:.2f} GiB", fmt(w, 2, " s"), w <= 1.5))
    keys = getattr(r, "key_s", [])  # results saved before this row existed have no such field
    if keys:
        worst = max(keys)
        rows.append(
            (
                "the screen never freezes while that backlog is read: slowest key → screen ≤ 0.25 s (the live "
                "path's on-screen budget)",
                f"{worst * 1000:.0f} ms",
                worst <= 0.25,
            )
        )
    return rows


def first_diagnosis_markdown(r: FirstDiagnosis) -> list[str]:
    out = [
        f"### First diagnosis over a {r.size / 2**30:.2f} GiB incident-dense backlog",
        "",
        "From starting the dashboard in a pseudo-terminal (160×48) until its header says the diagnosis of the logs' "
        "newest part is on screen (`engine/preview`: the newest 2 MiB counted first, numbered by a prefix count in "
        "child processes if it answers within 0.3 s, else shown with '?' for line numbers until it does), and until "
        "its first frame. Medians of "
        f"{len(r.diagnosis_s)} run(s).",
        "",
        "| until | median | runs |",
        "| --- | ---: | --- |",
        f"| first frame | {fmt(median(r.frame_s) if r.frame_s else None, 2, ' s')} | "
        + ", ".join(f"{x:.2f}" for x in r.frame_s)
        + " |",
        f"| diagnosis of now on screen | {fmt(median(r.diagnosis_s) if r.diagnosis_s else None, 2, ' s')} | "
        + ", ".join(f"{x:.2f}" for x in r.diagnosis_s)
        + " |",
    ]
    if getattr(r, "cold_s", None) is not None:  # results saved before this row existed have no such field
        out.append(
            f"| diagnosis of now, the whole page cache dropped first (`drop_caches`: rlwatch's own files read from "
            f"disk too; {COLD_RUNS} starts) | {fmt(r.cold_s, 2, ' s')} | median |"
        )
    if getattr(r, "log_cold_s", None) is not None:
        out.append(
            f"| diagnosis of now, the log's pages evicted first (`posix_fadvise`: a log written long ago, or evicted "
            f"on a pod short of memory; {COLD_RUNS} starts) | {fmt(r.log_cold_s, 2, ' s')} | median |"
        )
    reports = getattr(r, "report_s", [])
    if reports:
        out.append(
            f"| `rlwatch report` at a terminal, until it says on stderr what the newest part shows | "
            f"{fmt(median(reports), 2, ' s')} | " + ", ".join(f"{x:.2f}" for x in reports) + " |"
        )
    firsts = getattr(r, "watch_json_s", [])
    if firsts:
        out.append(
            f"| `rlwatch watch --json`, until its first `state` record (partial: the newest part) | "
            f"{fmt(median(firsts), 2, ' s')} | " + ", ".join(f"{x:.2f}" for x in firsts) + " |"
        )
    keys = getattr(r, "key_s", [])
    if keys:
        out.append(
            f"| the pause key typed while the rest is read, until the log bar shows it ({len(keys)} presses, "
            f"0.2 s apart; the slowest {max(keys) * 1000:.0f} ms) | {median(keys) * 1000:.0f} ms | "
            + ", ".join(f"{x * 1000:.0f}" for x in keys)
            + " ms |"
        )
    out += [f"- {n}" for n in r.notes]
    out += [
        "",
        "Without the preview the same diagnosis comes once the whole backlog is read: section 6's time per GiB of "
        "the dense log, times the backlog's size.",
    ]
    return [*out, ""]
