"""Issue 7, part 1: counting a backlog, rlwatch against ``grep -cE`` (and ripgrep), with counts that must agree."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from bench import peers
from bench.common import PYTHON, ROOT, fmt, median
from bench.datagen import REPORTED_KINDS, Dataset


@dataclass(slots=True)
class Contender:
    name: str
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median_s(self) -> float:
        return median(self.times)


@dataclass(slots=True)
class BacklogResult:
    dataset: Dataset
    contenders: list[Contender]
    counts: dict[str, dict[str, int]]  # source -> kind -> lines
    union_lines: dict[str, int]
    missing: list[str]
    rlwatch_rss_mb: float | None = None

    def rate(self, name: str) -> float:
        c = next((c for c in self.contenders if c.name == name), None)
        return float("nan") if c is None or not c.times else self.dataset.size / c.median_s / 1e6

    def ratio(self, name: str, peer: str = "grep -cE") -> float:
        a = next((c for c in self.contenders if c.name == name), None)
        b = next((c for c in self.contenders if c.name == peer), None)
        if a is None or b is None or not a.times or not b.times:
            return float("nan")
        return a.median_s / b.median_s

    @property
    def agree(self) -> bool:
        expected = self.counts["expected"]
        return all(c == expected for c in self.counts.values())


ENGINE_NOTE = "the engine's log path (tailer, counter, training tracker, log view), one process"
COUNTER_ONLY = "rlwatch counter alone"


def _warm(path: os.PathLike[str]) -> None:
    """Read the file once so every contender reads it from the page cache."""
    with open(path, "rb") as fh:
        while fh.read(8 << 20):
            pass


def _rlwatch_count(path: str, scanner: str, *, counter_only: bool = False) -> dict[str, object]:
    env = {**os.environ, "RLWATCH_SCANNER": scanner}
    argv = [PYTHON, "-m", "bench.count", path] + (["--counter-only"] if counter_only else [])
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def _midpoint(path: str) -> int:
    """The start of the first line at or after the middle of the file."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.seek(size // 2)
        fh.readline()
        return fh.tell()


def _rlwatch_halves(path: str, scanner: str) -> tuple[float, float, dict[str, int]]:
    """Two counting processes at once, each on one half: (wall of the slower, CPU of both, summed counts)."""
    env = {**os.environ, "RLWATCH_SCANNER": scanner}
    mid, size = _midpoint(path), os.path.getsize(path)
    procs = [
        subprocess.Popen(
            [PYTHON, "-m", "bench.count", path, "--span", span], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env
        )
        for span in (f"0:{mid}", f"{mid}:{size}")
    ]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    counts: dict[str, int] = {}
    for o in outs:
        for k, v in o["counts"].items():
            counts[k] = counts.get(k, 0) + int(v)
    return max(float(o["wall_s"]) for o in outs), sum(float(o["cpu_s"]) for o in outs), counts


def _has_hyperscan() -> bool:
    out = subprocess.run(
        [
            PYTHON,
            "-c",
            "from rlwatch.logs.kinds import builtin_kinds; from rlwatch.logs.matcher import Matcher; "
            "print(Matcher(builtin_kinds()).scanner)",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    return out.stdout.strip() == "hyperscan"


def run(ds: Dataset, runs: int, log: Callable[[str], None] = print) -> BacklogResult:
    path = str(ds.path)
    _warm(ds.path)
    grep, rg = peers.grep_peer(), peers.rg_peer()
    missing = [f"{p.name}: not installed" for p in (grep, rg) if not p.available]
    contenders: dict[str, Contender] = {}
    scanners = ["re"] + (["auto"] if _has_hyperscan() else [])
    if len(scanners) == 1:
        missing.append("hyperscan (optional fast path): not installed — pip install 'rlwatch[fast]'")
    union_lines: dict[str, int] = {}
    last: dict[str, dict[str, object]] = {}
    for i in range(runs):
        if grep.available:
            t, n = peers.grep_union(ds.path)
            contenders.setdefault(
                "grep -cE", Contender("grep -cE", note="LC_ALL=C, one pass, every kind")
            ).times.append(t)
            union_lines["grep -cE"] = n
        if rg.available:
            t, n = peers.rg_union(ds.path)
            contenders.setdefault("ripgrep -c", Contender("ripgrep -c", note="--no-unicode, one pass")).times.append(t)
            union_lines["ripgrep -c"] = n
        for scanner in scanners:
            res = _rlwatch_count(path, scanner)
            name = "rlwatch (re)" if scanner == "re" else f"rlwatch ({res['scanner']})"
            c = contenders.setdefault(name, Contender(name, note=ENGINE_NOTE))
            c.times.append(float(res["wall_s"]))  # type: ignore[arg-type]
            c.cpu.append(float(res["cpu_s"]))  # type: ignore[arg-type]
            last[name] = res
        scanner = scanners[-1]
        res = _rlwatch_count(path, scanner, counter_only=True)
        name = f"{COUNTER_ONLY} ({res['scanner']})"
        c = contenders.setdefault(name, Contender(name, note="tailer + event counter: no tracker, no log view"))
        c.times.append(float(res["wall_s"]))  # type: ignore[arg-type]
        c.cpu.append(float(res["cpu_s"]))  # type: ignore[arg-type]
        last[name] = res
        wall, cpu, halves = _rlwatch_halves(path, scanner)
        name = f"rlwatch ({'hyperscan' if scanner == 'auto' else 're'}), 2 processes on halves"
        c = contenders.setdefault(
            name, Contender(name, note="what a parallel backlog scan could at best reach here (bound)")
        )
        c.times.append(wall)
        c.cpu.append(cpu)
        last[name] = {"counts": halves}
        log(f"  backlog run {i + 1}/{runs}: " + ", ".join(f"{c.name} {c.times[-1]:.2f}s" for c in contenders.values()))
    counts: dict[str, dict[str, int]] = {"expected": dict(ds.expected)}
    for name, res in last.items():
        got = res["counts"]
        assert isinstance(got, dict)
        counts[name] = {k: int(got.get(k, -1)) for k in REPORTED_KINDS}
    if grep.available:
        counts["grep"] = peers.per_kind_counts("grep", ds.path, REPORTED_KINDS)
    if rg.available:
        counts["ripgrep"] = peers.per_kind_counts("rg", ds.path, REPORTED_KINDS)
    rss = max((float(r["max_rss_mb"]) for r in last.values() if "max_rss_mb" in r), default=None)  # type: ignore[arg-type]
    return BacklogResult(ds, list(contenders.values()), counts, union_lines, missing, rss)


def markdown(r: BacklogResult) -> list[str]:
    ds = r.dataset
    out = [
        f"Dataset: `{ds.path.name}`, {ds.size / 2**30:.2f} GiB ({ds.size:,} bytes), {ds.lines:,} lines, "
        f"{ds.steps:,} training steps, AReaL v0.5 format with colour codes (see `bench/datagen.py`). "
        f"Medians of {len(r.contenders[0].times) if r.contenders else 0} runs, file in the page cache, "
        "MB = 10^6 bytes.",
        "",
        "| contender | median time | throughput | time ÷ grep's | CPU time (median) | how |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for c in r.contenders:
        cpu = fmt(median(c.cpu), 2, " s") if c.cpu else "—"
        out.append(
            f"| {c.name} | {c.median_s:.2f} s | {fmt(r.rate(c.name), 0, ' MB/s')} | "
            f"{fmt(r.ratio(c.name), 1, '×')} | {cpu} | {c.note} |"
        )
    out += ["", "Lines counted per kind (they must agree):", ""]
    sources = list(r.counts)
    out.append("| kind | " + " | ".join(sources) + " |")
    out.append("| --- | " + " | ".join("---:" for _ in sources) + " |")
    for kind in REPORTED_KINDS:
        row = [r.counts[s].get(kind, -1) for s in sources]
        mark = "" if len(set(row)) == 1 else " **≠**"
        out.append(f"| {kind}{mark} | " + " | ".join(f"{v:,}" for v in row) + " |")
    out.append("")
    out.append("All sources agree." if r.agree else "**The counts do not agree.**")
    if r.union_lines:
        out.append(
            "Lines matching any kind (internal kinds included): "
            + ", ".join(f"{k} {v:,}" for k, v in r.union_lines.items())
            + "."
        )
    if r.rlwatch_rss_mb is not None:
        out.append(f"Peak RSS of the counting process: {r.rlwatch_rss_mb:.0f} MB.")
    out += [f"- {m}" for m in r.missing]
    return out


# ------------------------------------------------------------------------------ `report` beside the peers (issue 35)
# `python -m bench.backlog` (issue 35, "the backlog at lnav's speed"): `rlwatch report --json` over a trial holding
# the dense log, then the calm one, beside grep, ripgrep and lnav in the same rounds, their order turned each round;
# CPU time (user + system of the process and its children) is the figure to compare on a loaded machine. `--before
# DIR` adds the report of another checkout of rlwatch (its compiled modules built in place) to every round.

REPORT_TARGET = {"dense": ("lnav", 1.0), "calm": ("grep -cE", 2.0)}


@dataclass(slots=True)
class Timing:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def _cpu_run(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[float, float, bytes]:
    """(wall, CPU of the process and its children, stdout) of one command run to its end."""
    import resource
    import time

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, env=env, cwd=cwd or ROOT, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode not in (0, 1, 3):  # report's verdicts: 0 healthy, 1 problems, 3 unknown (Nagios's UNKNOWN)
        raise RuntimeError(f"{argv[:4]} failed ({out.returncode}): {out.stderr.decode(errors='replace')[-400:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, out.stdout


def _report_argv(trial_root: str) -> list[str]:
    return [
        PYTHON,
        "-c",
        "import sys; from rlwatch.tui.launch import main; sys.exit(main())",
        "report",
        "--json",
        trial_root,
    ]


def report_round_robin(
    label: str, ds: Dataset, runs: int, before: str | None, log: Callable[[str], None] = print
) -> dict[str, object]:
    """One log's rounds: every contender once per round, the order turned by one each round."""
    import shutil
    import tempfile
    from pathlib import Path

    from bench.rundirs import backlog_run

    _warm(ds.path)
    trial = backlog_run(ROOT / "bench" / "data" / f"report-{label}-run", ds)
    root = str(trial.parents[3])
    empty_log = ROOT / "bench" / "data" / "report-empty-run" / trial.relative_to(trial.parents[3])
    empty_log.parent.mkdir(parents=True, exist_ok=True)
    empty_log.write_bytes(b"")
    empty = str(empty_log.parents[3])
    union = peers.union()
    rg = ["rg", "--no-config", "--no-unicode", "-c", "-a", "--no-filename"]
    for ere, _ in peers.KIND_ERE.values():
        rg += ["-e", ere]
    home = tempfile.mkdtemp(prefix="bench-lnav-")
    c_env = {**os.environ, "LC_ALL": "C"}
    contenders: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "grep -cE": (["grep", "-cE", union, str(ds.path)], c_env),
        "ripgrep -c": ([*rg, str(ds.path)], c_env),
        "lnav": (["lnav", "-n", "-c", ";SELECT lines FROM lnav_file", str(ds.path)], {**os.environ, "HOME": home}),
        "rlwatch report": (_report_argv(root), None),
        # The floor: the start alone (the interpreter, the imports, a sampling round, over a trial whose log is
        # empty), and the engine's count of the log in a process of its own, imports and set-up excluded.
        "report, empty log (the start)": (_report_argv(empty), None),
    }
    if before:
        # run from that checkout: the interpreter puts the working directory first on the path
        contenders["rlwatch report (before)"] = (_report_argv(root), {**os.environ, "PYTHONPATH": before})
    contenders = {k: v for k, v in contenders.items() if shutil.which(v[0][0])}
    scan = "the engine's count alone (bench.count: no start, no report)"
    contenders[scan] = ([], None)
    timings = {name: Timing() for name in contenders}
    outputs: dict[str, bytes] = {}
    names = list(contenders)
    for i in range(runs):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            argv, env = contenders[name]
            if name == scan:
                res = _rlwatch_count(str(ds.path), "auto")
                wall, cpu, out = float(res["wall_s"]), float(res["cpu_s"]), b""  # type: ignore[arg-type]
            else:
                wall, cpu, out = _cpu_run(argv, env, before if name.endswith("(before)") else None)
            timings[name].wall.append(wall)
            timings[name].cpu.append(cpu)
            outputs[name] = out
        log(f"  {label} round {i + 1}/{runs}: " + ", ".join(f"{n} {timings[n].cpu[-1]:.2f}s" for n in names))
    shutil.rmtree(home, ignore_errors=True)
    counts: dict[str, dict[str, int]] = {"expected": dict(ds.expected)}
    for name in ("rlwatch report", "rlwatch report (before)"):
        if name in outputs:
            events = json.loads(outputs[name])["events"]
            counts[name] = {k: int(events.get(k, {}).get("count", 0)) for k in REPORTED_KINDS}
    counts["grep"] = peers.per_kind_counts("grep", ds.path, REPORTED_KINDS)
    if shutil.which("rg"):
        counts["ripgrep"] = peers.per_kind_counts("rg", ds.path, REPORTED_KINDS)
    return {
        "label": label,
        "file": Path(ds.path).name,
        "size": ds.size,
        "timings": timings,
        "counts": counts,
        "agree": all(c == counts["expected"] for c in counts.values()),
    }


def report_markdown(results: list[dict[str, object]]) -> list[str]:
    out = [
        "| log | contender | CPU (median) | runs (CPU) | wall (median) | CPU ÷ the target's peer |",
        "| --- | --- | ---: | --- | ---: | ---: |",
    ]
    for r in results:
        timings = r["timings"]
        assert isinstance(timings, dict)
        peer, _ = REPORT_TARGET.get(str(r["label"]), ("grep -cE", 1.0))
        base = median(timings[peer].cpu) if peer in timings else float("nan")
        for name, t in timings.items():
            cpu = median(t.cpu)
            out.append(
                f"| {r['label']} ({int(r['size']) / 1e6:,.0f} MB) | {name} | {cpu:.2f} s | "  # type: ignore[call-overload]
                f"{', '.join(f'{c:.2f}' for c in t.cpu)} | {median(t.wall):.2f} s | {fmt(cpu / base, 2, '×')} |"
            )
        verdict = "agree" if r["agree"] else "**differ**"
        out.append(f"| {r['label']} | counts (expected, report, grep, ripgrep) | {verdict} | | | |")
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    from bench.common import DATA, compile_bytecode
    from bench.datagen import ensure_dataset

    p = argparse.ArgumentParser(
        prog="python -m bench.backlog", description="`rlwatch report` beside grep, ripgrep, lnav"
    )
    p.add_argument("--size-mib", type=int, default=100)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--only", default="dense,calm")
    p.add_argument("--before", default=None, help="another checkout of rlwatch, timed in the same rounds")
    args = p.parse_args(argv)
    compile_bytecode(*([args.before] if args.before else []))
    DATA.mkdir(parents=True, exist_ok=True)
    results = []
    for label in args.only.split(","):
        dense = label == "dense"
        name = f"trainer-dense-{args.size_mib}MiB.log" if dense else f"trainer-{args.size_mib}MiB.log"
        ds = ensure_dataset(DATA / name, args.size_mib << 20, dense=dense)
        result = report_round_robin(label, ds, args.runs, args.before, log=lambda m: print(m, file=sys.stderr))
        results.append(result)
        counts = result["counts"]
        assert isinstance(counts, dict)
        for k, v in counts.items():
            print(f"  {k}: {v}", file=sys.stderr)
    print("\n".join(report_markdown(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
