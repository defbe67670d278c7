"""``python -m bench`` (``make bench``): every benchmark of issue 7, then ``bench/RESULTS.md``.

``--quick`` runs the same sections small (a 256 MiB backlog, a one-minute soak) in about four minutes; the full run
takes about twenty minutes, ten of it the soak. ``--only backlog,latency`` picks sections.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

from bench import backlog, incidents, latency, overhead, soak, startup, storm
from bench.common import DATA, ROOT, compile_bytecode, machine
from bench.datagen import ensure_dataset
from bench.results import GPU_RESULTS, Results, render

SECTIONS = ("backlog", "latency", "overhead", "soak", "startup", "incidents", "first_diagnosis", "storm")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small and short: a smoke run of every section")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections ({', '.join(SECTIONS)})")
    p.add_argument("--size-mib", type=int, default=None, help="backlog size (default 1024, quick 256)")
    p.add_argument("--soak-seconds", type=float, default=None, help="soak length (default 600, quick 60)")
    p.add_argument("--out", type=Path, default=None, help="results file (default bench/RESULTS.md)")
    p.add_argument(
        "--render-only",
        action="store_true",
        help="write the results file again from the last run's saved figures (after editing findings.md)",
    )
    p.add_argument(
        "--gpu-host",
        action="store_true",
        help="the run on a GPU host beside nvitop: write bench/RESULTS-gpu.md (default --only overhead)",
    )
    args = p.parse_args(argv)
    if args.gpu_host and args.only == ",".join(SECTIONS):
        args.only = "overhead"
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        p.error(f"unknown section(s): {', '.join(unknown)}")
    quick = args.quick
    size = (args.size_mib or (256 if quick else 1024)) << 20
    soak_s = args.soak_seconds or (60.0 if quick else 600.0)
    default_out = GPU_RESULTS if args.gpu_host else ROOT / "bench" / "RESULTS.md"
    out_path = args.out or (DATA / "RESULTS-quick.md" if quick else default_out)
    DATA.mkdir(parents=True, exist_ok=True)
    compile_bytecode()
    saved = DATA / f"results-{'gpu' if args.gpu_host else 'quick' if quick else 'full'}.pickle"
    if args.render_only:
        if not saved.exists():
            p.error(f"no saved figures at {saved}: run the benchmarks first")
        with saved.open("rb") as fh:
            old = pickle.load(fh)  # noqa: S301 - written by this program, in its own git-ignored data folder
        out_path.write_text(render(old, embed_gpu=not args.gpu_host))
        print(f"wrote {out_path}")
        return 0

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    res = Results(machine=machine(), quick=quick)
    res.measured = {name: f"{res.machine['date']}, {res.machine['rlwatch']}" for name in only}
    if set(only) != set(SECTIONS) and saved.exists():
        with saved.open("rb") as fh:
            res.merge_from(pickle.load(fh), only)  # noqa: S301 - as above
    t0 = time.monotonic()
    if {"backlog", "startup", "incidents"} & set(only):
        log(f"dataset: {size >> 20} MiB AReaL trainer.log under {DATA} (generated once, then reused)")
        ds = ensure_dataset(DATA / f"trainer-{size >> 20}MiB.log", size)
        res.dataset = ds
    if "backlog" in only:
        log("backlog: rlwatch against grep -cE and ripgrep")
        res.backlog = backlog.run(ds, runs=2 if quick else 3, log=log)
    if "latency" in only:
        log("latency: a line appended until it is counted, inotify and polling")
        res.latency = latency.run(DATA, samples=60 if quick else 150)
    if "overhead" in only:
        log("overhead: watch, dashboard and peers at a 1 s interval while 8 logs grow")
        res.overhead = overhead.run(DATA, seconds=20 if quick else 60, idle_seconds=10 if quick else 20)
    if "soak" in only:
        log(f"soak: {soak_s:.0f} s of steady log growth")
        res.soak = soak.run(DATA, seconds=soak_s)
    if "startup" in only:
        log("startup: first frame, report and watch over the backlog")
        res.startup = startup.run(DATA, ds, frames=3 if quick else 5, reports=1 if quick else 2, big=True)
    if "incidents" in only:
        log(f"incidents: a {size >> 20} MiB incident-dense log beside the calm one (generated once, then reused)")
        dense = ensure_dataset(DATA / f"trainer-dense-{size >> 20}MiB.log", size, dense=True)
        log("incidents: grep, ripgrep, lnav, toolong and rlwatch report over both")
        res.incidents = incidents.run([("calm", ds), ("dense", dense)], DATA, runs=1 if quick else 2, log=log)
    if "first_diagnosis" in only:
        log("first_diagnosis: the dashboard over a 2 GiB incident-dense backlog (generated once, then reused)")
        big = ensure_dataset(DATA / "trainer-dense-2048MiB.log", 2048 << 20, dense=True)
        res.first_diagnosis = incidents.first_diagnosis(big, DATA, runs=3 if quick else 5)
    if "storm" in only:
        log("storm: 100 logs x 1000 lines/s for 20 s under watch --prometheus, compiled and Python event paths")
        res.storm = storm.run(seconds=5.0 if quick else 20.0, quiet=20.0 if quick else 60.0)
    res.elapsed_s = time.monotonic() - t0
    with saved.open("wb") as out:
        pickle.dump(res, out)
    out_path.write_text(render(res, embed_gpu=not args.gpu_host))
    log(f"wrote {out_path} ({res.elapsed_s / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
