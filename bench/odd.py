"""Issue 35: no input is pathological. ``python -m bench.odd [--scale S] [--runs N]`` times ``rlwatch report --json``
over a trial holding each odd input beside its plain twin, in one run:

- the incident-dense log (tracebacks) with ``\\n`` line ends, and the same bytes with every ``\\n`` turned into ``\\r``
  (CR-only: old Macs, some serial consoles, a tool that writes bars);
- verl's ``Training Progress`` bar, redrawn once per line (``\\n``: a bar piped through ``tee``) and redrawn in place
  (``\\r``: tqdm at a terminal, captured by ``script`` or a pod's log);
- a sparse file of NUL bytes (a preallocated or zero-filled log), with ``watch --json``'s first record timed too;
- a run directory holding a subdirectory of many tiny files (a dataset, a cache, a checkpoint shard tree):
  ``report``'s wall time and peak RSS, and whether the report says the walk was cut.

The sizes follow the issue's (13 MB of tracebacks, 53 MB of bars, 1 GiB of NUL, a million files) times ``--scale``.
Data goes under ``bench/data/odd`` and is reused. Prints a Markdown table; RESULTS.md quotes it by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import DATA, compile_bytecode, fmt, rlwatch_argv, run_timed
from bench.datagen import ensure_dataset
from bench.rundirs import TRIAL

ODD = DATA / "odd"


def _progress_bytes(target: int, end: bytes, seed: int = 3) -> bytes:
    """verl's fit() bar over ``target`` bytes, one redraw per line, steps advancing now and then."""
    rng = random.Random(seed)
    total = 200_000
    out: list[bytes] = []
    size = step = 0
    while size < target:
        step = min(total, step + (1 if rng.random() < 0.02 else 0))
        pct = step * 100 // total
        filled = pct // 10
        bar = "\u2588" * filled + " " * (10 - filled)
        rate = f"1.{rng.randrange(100):02d}s/it"
        line = f"Training Progress: {pct:3d}%|{bar}| {step}/{total} [00:{step % 60:02d}<1:00:00,  {rate}]"
        raw = line.encode() + end
        out.append(raw)
        size += len(raw)
    return b"".join(out)


def _write(path: Path, data: bytes) -> Path:
    if not path.exists() or path.stat().st_size != len(data):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def _trial(name: str, log: Path) -> Path:
    """A trial whose trainer.log is ``log`` (hard link); returns the run root for ``report``."""
    root = ODD / "runs" / name
    shutil.rmtree(root, ignore_errors=True)
    path = root / TRIAL / "trainer.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    os.link(log, path)
    return root


def _many_files(count: int) -> Path:
    """A trial with a small trainer.log and ``count`` tiny files in one subdirectory of the run (``data/``)."""
    root = ODD / "runs" / f"many-{count}"
    marker = root / ".complete"
    trial = root / TRIAL
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        trial.mkdir(parents=True)
        (trial / "trainer.log").write_bytes(b"Train step 1/10 done.\n")
        data = root / "data"
        data.mkdir()
        for i in range(count):
            fd = os.open(data / f"sample-{i:07d}.json", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"{}\n")
            os.close(fd)
        marker.touch()
    return root


def _events(rep: dict[str, object]) -> dict[str, dict[str, object]]:
    """The per-kind events of a report's JSON, empty where there are none."""
    events = rep.get("events")
    return {k: v for k, v in events.items() if isinstance(v, dict)} if isinstance(events, dict) else {}


def _report(root: Path, runs: int) -> tuple[list[float], list[float], float, dict[str, object]]:
    times: list[float] = []
    cpu: list[float] = []
    rss = 0.0
    last: dict[str, object] = {}
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = run_timed(rlwatch_argv("report", "--json", str(root)), timeout=600)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        times.append(t.seconds)
        rss = max(rss, t.max_rss_mb)
        try:
            last = json.loads(t.output[t.output.find(b"{") :])
        except ValueError:
            last = {"error": t.output[-300:].decode(errors="replace")}
    return times, cpu, rss, last


def _first_record(root: Path) -> float | None:
    """Seconds from starting ``watch --json`` until its first state record."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        rlwatch_argv("watch", str(root), "--json"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if b'"state"' in raw or raw.startswith(b"{"):
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > 120:
                return None
        return None
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _cpu_of(argv: list[str]) -> tuple[float, float, bytes]:
    """(wall, CPU) of one command run to its end, and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False, timeout=600).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, out


def _progress_rows(lf: Path, cr: Path, runs: int) -> list[str]:
    """The bar read by ``report`` beside its peers, runs alternated: ``report`` of a one-line log (the start alone,
    which the bar's figure is taken net of), of the bar with LF and with CR line ends, and ``grep -c`` and ``wc -l``
    over the same files. The step and total the report says are checked against the file's last redraw."""
    small = _trial("small", _write(ODD / "small.log", b"Train step 1/10 done.\n"))
    cases: list[tuple[str, list[str], float]] = [
        ("`report`, a one-line log (the start alone)", rlwatch_argv("report", "--json", str(small)), 0.0),
        ("`report`, verl progress bar, LF", rlwatch_argv("report", "--json", str(_trial("bar-lf", lf))), 1.0),
        (
            "`report`, verl progress bar, CR (redrawn in place)",
            rlwatch_argv("report", "--json", str(_trial("bar-cr", cr))),
            1.0,
        ),
        ("`grep -c 'Training Progress'`, LF", ["grep", "-c", "Training Progress", str(lf)], 1.0),
        ("`grep -c 'Training Progress'`, CR", ["grep", "-c", "Training Progress", str(cr)], 1.0),
        ("`wc -l`, LF", ["wc", "-l", str(lf)], 1.0),
    ]
    walls: dict[str, list[float]] = {c[0]: [] for c in cases}
    cpus: dict[str, list[float]] = {c[0]: [] for c in cases}
    outs: dict[str, bytes] = {}
    for _ in range(runs):
        for name, argv, _size in cases:
            wall, cpu, printed = _cpu_of(argv)
            walls[name].append(wall)
            cpus[name].append(cpu)
            outs[name] = printed
    size = lf.stat().st_size
    start = statistics.median(cpus[cases[0][0]])
    tail = cr.read_bytes()[-200:].rsplit(b"\r", 2)[-2].decode()
    last = tail.split("| ")[-1].split(" [")[0]
    out: list[str] = []
    for name, _argv, weight in cases:
        cpu = statistics.median(cpus[name])
        net = cpu - start if name.startswith("`report`") and weight else cpu
        rate = f"{size * weight / 1e6 / net:,.0f} MB/s" if weight and net > 0 else ""
        note = ""
        if name.startswith("`report`") and weight:
            try:
                training = json.loads(outs[name][outs[name].find(b"{") :]).get("training") or {}
                note = f"says step {training.get('last_step')}/{training.get('total_steps')} (last redraw: {last})"
            except ValueError:
                note = "no JSON"
            note += f"; net of the start {net:.2f} s CPU"
        out.append(
            f"| {name} | {size * weight / 1e6:,.1f} MB | {fmt(statistics.median(walls[name]), 2, ' s')} | "
            f"{', '.join(f'{w:.2f}' for w in walls[name])} | {fmt(cpu, 2, ' s')} | {rate} | | {note} |"
        )
        print(out[-1], file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.odd", description=__doc__)
    p.add_argument("--scale", type=float, default=1.0, help="sizes times this (1: the issue's)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--only", default="cr,progress,sparse,many", help="comma-separated: cr, progress, sparse, many")
    args = p.parse_args(argv)
    compile_bytecode()
    only = set(args.only.split(","))
    ODD.mkdir(parents=True, exist_ok=True)
    rows: list[str] = []

    def row(what: str, root: Path, note: str = "") -> dict[str, object]:
        times, cpu, rss, rep = _report(root, args.runs)
        med = statistics.median(times)
        cmed = statistics.median(cpu)
        size = sum(f.stat().st_size for f in (root / TRIAL).glob("*.log"))
        rows.append(
            f"| {what} | {size / 1e6:,.1f} MB | {fmt(med, 2, ' s')} | {', '.join(f'{t:.2f}' for t in times)} | "
            f"{fmt(cmed, 2, ' s')} | {size / 1e6 / cmed:,.0f} MB/s | {rss:.0f} MB | {note} |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
        return rep

    if "cr" in only:
        mib = max(1, round(13 * args.scale))
        ds = ensure_dataset(ODD / f"dense-{mib}MiB.log", mib << 20, dense=True)
        lf = ds.path
        cr = _write(ODD / f"dense-{mib}MiB-cr.log", lf.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
        a = row("tracebacks, LF", _trial("tb-lf", lf))
        b = row("tracebacks, CR only", _trial("tb-cr", cr))
        for k in ("traceback", "connection_refused"):
            ea, eb = _events(a), _events(b)
            print(f"  {k}: LF {ea.get(k, {}).get('count')} CR {eb.get(k, {}).get('count')}", file=sys.stderr)
    if "progress" in only:
        target = int(53e6 * args.scale)
        lf = _write(ODD / f"progress-{target}.log", _progress_bytes(target, b"\n"))
        cr = _write(ODD / f"progress-{target}-cr.log", _progress_bytes(target, b"\r"))
        rows.extend(_progress_rows(lf, cr, args.runs))
    if "sparse" in only:
        size = int((1 << 30) * args.scale)
        path = ODD / f"sparse-{size}.log"
        if not path.exists() or path.stat().st_size != size:
            with path.open("wb") as fh:
                fh.truncate(size)
        root = _trial("sparse", path)
        row("all NUL (sparse)", root)
        first = [_first_record(root) for _ in range(args.runs)]
        small = _trial("small", _write(ODD / "small.log", b"Train step 1/10 done.\n"))
        plain = [_first_record(small) for _ in range(args.runs)]
        rows.append(
            f"| `watch --json` first record, a one-line log (the start alone, same run) | | "
            f"{fmt(statistics.median([f or 1e9 for f in plain]), 2, ' s')} | "
            + ", ".join(fmt(f, 2) for f in plain)
            + " | | | | |"
        )
        rows.append(
            f"| `watch --json` first record, all NUL | | {fmt(statistics.median([f or 1e9 for f in first]), 2, ' s')} "
            + "| "
            + ", ".join(fmt(f, 2) for f in first)
            + " | | | | |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
    if "many" in only:
        count = int(1_000_000 * args.scale)
        root = _many_files(count)
        rep = row(f"{count:,} tiny files in a subdirectory", root)
        notes = [n for n in json.dumps(rep).split('"') if "walk" in n.lower()]
        print("  walk notes:", notes[:3], file=sys.stderr)
    print("| input | size | wall (median) | runs | CPU (median) | MB per CPU second | peak RSS | note |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
