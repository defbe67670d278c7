"""A storm on many workers: ``rlwatch watch --prometheus`` while many logs each take a flood of event lines.

Each of ``logs`` files takes ``rate`` connection-refused lines a second for ``seconds`` (the retry storm of incident
1, on every rollout worker at once); then ``quiet`` seconds of nothing. Sampled every half second: the watchdog's
RSS, and through its exporter (the way a fleet sees it) the count of the storm's kind and the snapshot's age. Asked:
is every line counted, how long after the writing stopped the count caught up, the RSS at its peak and after a
minute of quiet, the oldest snapshot the exporter served. The compiled event path and the Python one
(``RLWATCH_NATIVE=0``) run the same storm in the same run, one after the other.

``python -m bench.storm`` runs it alone and prints the table; ``python -m bench --only storm`` puts it in RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

import psutil

from bench.common import DATA, PYTHON, compile_bytecode, fmt, wait_until

LINE = (
    "2026-11-26 10:{m:02d}:{s:02d},{ms:03d} WARNING areal.rollout worker {w}: request {i} failed: "
    "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 127.0.0.1:30000 ssl:default "
    "[ConnectionRefusedError: [Errno 111] Connection refused]\n"
)
KIND = "connection_refused"
WRITER = r"""
import sys, time
from pathlib import Path
line, logs, rate, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
files = [open(Path(sys.argv[5]) / f"worker-{w}.log", "a") for w in range(logs)]
tick = 0.05
per_tick = max(1, round(rate * tick))
t0 = time.monotonic()
n = 0
while time.monotonic() - t0 < seconds:
    for w, fh in enumerate(files):
        m, s = divmod(int(time.monotonic() - t0) % 3600, 60)
        fh.write("".join(line.format(m=m, s=s, ms=i % 1000, w=w, i=n + i) for i in range(per_tick)))
        fh.flush()
    n += per_tick
    nxt = t0 + (n / per_tick) * tick
    time.sleep(max(0.0, nxt - time.monotonic()))
print(n * logs)
"""


@dataclass(slots=True)
class StormRun:
    label: str
    written: int = 0
    counted: int = 0
    writing_s: float = 0.0
    caught_up_s: float | None = None  # after the writing stopped; None: never within the quiet
    peak_rss_mb: float = 0.0
    rss_after_quiet_mb: float = 0.0
    quiet_s: float = 0.0
    oldest_snapshot_s: float = 0.0
    interval_s: float = 1.0
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (t, rss MB, counted)


@dataclass(slots=True)
class StormResult:
    logs: int
    rate: int
    seconds: float
    runs: list[StormRun]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(url: str) -> tuple[int | None, float | None]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - our own exporter on loopback
            text = resp.read().decode()
    except OSError:
        return None, None
    count = re.search(r'^rlwatch_events_total\{kind="' + KIND + r'"[^}]*\} (\S+)$', text, re.M)
    age = re.search(r"^rlwatch_snapshot_age_seconds(?:\{[^}]*\})? (\S+)$", text, re.M)
    return (int(float(count.group(1))) if count else 0), (float(age.group(1)) if age else None)


def _one(label: str, env: dict[str, str], logs: int, rate: int, seconds: float, quiet: float) -> StormRun:
    run = DATA / "storm-run"
    shutil.rmtree(run, ignore_errors=True)
    (run / "logs").mkdir(parents=True)
    for w in range(logs):
        (run / "logs" / f"worker-{w}.log").touch()
    interval = 1.0
    (run / "rlwatch.yaml").write_text(
        f"profile: generic\ninterval_s: {interval}\ngpu: {{backend: none}}\ntraining: {{logs: ['logs/*.log']}}\n"
    )
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    out = StormRun(label, interval_s=interval, quiet_s=quiet)
    watch = subprocess.Popen(
        [PYTHON, "-m", "rlwatch", "watch", str(run), "--json", "--prometheus", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
        start_new_session=True,
    )
    try:
        ps = psutil.Process(watch.pid)
        if not wait_until(lambda: _scrape(url)[0] is not None, 60):
            raise RuntimeError(f"{label}: the exporter did not answer at {url}")
        t0 = time.monotonic()
        writer = subprocess.Popen(
            [PYTHON, "-c", WRITER, LINE, str(logs), str(rate), str(seconds), str(run / "logs")],
            stdout=subprocess.PIPE,
            text=True,
        )
        stopped: float | None = None
        while True:
            now = time.monotonic()
            if stopped is None and writer.poll() is not None:
                stopped = now
                out.writing_s = now - t0
                out.written = int((writer.stdout.read() if writer.stdout else "0").strip() or 0)
            if stopped is not None and now - stopped > quiet:
                break
            with contextlib.suppress(psutil.Error):
                rss = ps.memory_info().rss / 2**20
            count, age = _scrape(url)
            out.samples.append((now - t0, rss, count or 0))
            out.peak_rss_mb = max(out.peak_rss_mb, rss)
            if age is not None:
                out.oldest_snapshot_s = max(out.oldest_snapshot_s, age)
            if count is not None:
                out.counted = count
                if stopped is not None and out.caught_up_s is None and count >= out.written:
                    out.caught_up_s = now - stopped
            time.sleep(0.5)
        out.rss_after_quiet_mb = out.samples[-1][1]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(watch.pid, 15)
        watch.wait(timeout=30)
    return out


def run(logs: int = 100, rate: int = 1000, seconds: float = 20.0, quiet: float = 60.0) -> StormResult:
    runs = [
        _one("compiled event path", {"RLWATCH_NATIVE": "1"}, logs, rate, seconds, quiet),
        _one("Python event path (RLWATCH_NATIVE=0)", {"RLWATCH_NATIVE": "0"}, logs, rate, seconds, quiet),
    ]
    return StormResult(logs, rate, seconds, runs)


# Issue 26's targets for the storm.
PEAK_RSS_MB = 150.0
QUIET_RSS_MB = 100.0
CATCH_UP_S = 20.0


def targets(r: StormResult) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for the compiled path: the one rlwatch runs where it is built."""
    x = next((run for run in r.runs if run.label.startswith("compiled")), None)
    if x is None:
        return []
    every = x.counted == x.written
    caught = x.caught_up_s is not None and x.caught_up_s <= CATCH_UP_S
    return [
        ("storm: every line counted", f"{x.counted:,} of {x.written:,}", every),
        (
            f"storm: caught up within {CATCH_UP_S:.0f} s of the writing stopping",
            fmt(x.caught_up_s, 1, " s") if x.caught_up_s is not None else f"not within {x.quiet_s:.0f} s",
            caught,
        ),
        (f"storm: peak RSS ≤ {PEAK_RSS_MB:.0f} MB", fmt(x.peak_rss_mb, 0, " MB"), x.peak_rss_mb <= PEAK_RSS_MB),
        (
            f"storm: RSS < {QUIET_RSS_MB:.0f} MB within a minute of quiet",
            fmt(x.rss_after_quiet_mb, 0, " MB"),
            x.rss_after_quiet_mb < QUIET_RSS_MB and x.quiet_s <= 60,
        ),
        (
            "storm: the exporter's snapshot never older than 2 intervals",
            fmt(x.oldest_snapshot_s, 1, " s"),
            x.oldest_snapshot_s <= 2 * x.interval_s,
        ),
    ]


def markdown(r: StormResult) -> list[str]:
    lines = [
        f"{r.logs} logs, each taking {r.rate} `{KIND}` lines a second for {r.seconds:.0f} s, under "
        "`rlwatch watch --json --prometheus` (interval 1 s); sampled every 0.5 s through the exporter.",
        "",
        "| event path | lines written (in) | counted | caught up after the writing stopped | peak RSS | RSS after "
        "the quiet | oldest snapshot served |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for x in r.runs:
        caught = fmt(x.caught_up_s, 1, " s") if x.caught_up_s is not None else f"not within {x.quiet_s:.0f} s"
        lines.append(
            f"| {x.label} | {x.written:,} ({x.writing_s:.0f} s) | {x.counted:,} | {caught} | "
            f"{fmt(x.peak_rss_mb, 0, ' MB')} | "
            f"{fmt(x.rss_after_quiet_mb, 0, ' MB')} ({x.quiet_s:.0f} s) | {fmt(x.oldest_snapshot_s, 1, ' s')} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.storm", description=__doc__)
    p.add_argument("--logs", type=int, default=100)
    p.add_argument("--rate", type=int, default=1000, help="lines a second per log")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--quiet", type=float, default=60.0)
    p.add_argument("--only", choices=("compiled", "python"), default=None)
    args = p.parse_args(argv)
    compile_bytecode()
    DATA.mkdir(parents=True, exist_ok=True)
    if args.only:
        env = {"RLWATCH_NATIVE": "1" if args.only == "compiled" else "0"}
        one = _one(args.only, env, args.logs, args.rate, args.seconds, args.quiet)
        res = StormResult(args.logs, args.rate, args.seconds, [one])
    else:
        res = run(args.logs, args.rate, args.seconds, args.quiet)
    print("\n".join(markdown(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
