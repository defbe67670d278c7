"""Whether a change left ``rlwatch report --json`` as it was: each run directory reported by this checkout and by
another one (``--before``), the two JSON documents compared with the live readings left out (the time of now and
times that fall while the reports run, ages counted from now, process ids, the host's free memory and disk), every
other difference printed by its path.

    python -m bench.report_same --before OTHER_CHECKOUT RUN_DIR [RUN_DIR ...]

Exit status 0 when every report is the same, 1 otherwise. The two reports of a directory run one after the other,
so a reading that moves with the clock moves little; what is left out is listed in ``LIVE_KEYS``,
``LIVE_SECTIONS``, ``_AGO`` and ``_now_masked``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# keys whose values are readings of the moment, not of the logs
LIVE_KEYS = frozenset({"time", "pid", "pids", "looked_at", "last_sample", "uptime", "load"})
LIVE_SECTIONS = frozenset({"memory", "disk"})  # the host's free memory and disk, read now
_AGO = re.compile(r"\b\d+(?:\.\d+)?\s*(?:s|sec|seconds?|m|min|minutes?|h|hours?|d|days?)\s+ago\b")


_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?")
_CLOCK = re.compile(r"\b\d\d:\d\d:\d\d\b")


def _now_masked(text: str, lo: float, hi: float) -> str:
    """``text`` with the times that fall while the two reports ran (readings of now: a server seen down "since" the
    first look) replaced by ``<now>``, ISO times and local clock times alike."""

    def iso(m: re.Match[str]) -> str:
        try:
            t = datetime.fromisoformat(m.group(0).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return m.group(0)
        return "<now>" if lo - 1 <= t <= hi + 1 else m.group(0)

    def clock(m: re.Match[str]) -> str:
        for t in range(int(lo) - 1, int(hi) + 2):
            if time.strftime("%H:%M:%S", time.localtime(t)) == m.group(0):
                return "<now>"
        return m.group(0)

    return _CLOCK.sub(clock, _ISO.sub(iso, text))


_SEPARATE = re.compile(r"^\s+rlwatch (\S+)\s", re.M)


def report(run_dir: str, checkout: Path) -> object:
    """``rlwatch report --json run_dir`` run from ``checkout`` (its package first on the path); a list of the runs'
    directories where ``run_dir`` holds several (rlwatch names them and reports none)."""
    argv = [PYTHON, "-c", "import sys; from rlwatch.tui.launch import main; sys.exit(main())", "report", "--json"]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([*argv, run_dir], cwd=checkout, env=env, capture_output=True, check=False)
    if not out.stdout.strip():
        runs = _SEPARATE.findall(out.stderr.decode(errors="replace"))
        if runs:
            return runs
        raise SystemExit(f"no report of {run_dir} from {checkout}: {out.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(out.stdout)


def _live(key: str) -> bool:
    return key in LIVE_KEYS or key.endswith("_pid") or key.startswith("free_")


def differences(a: object, b: object, path: str = "", now: tuple[float, float] = (0.0, 0.0)) -> list[str]:
    """Paths at which ``a`` and ``b`` differ, live readings left out (``now``: when the reports ran)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            if _live(key) or (not path and key in LIVE_SECTIONS):
                continue
            if key not in a or key not in b:
                out.append(f"{path}.{key}: only in {'after' if key in b else 'before'}")
                continue
            out += differences(a[key], b[key], f"{path}.{key}", now)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items before, {len(b)} after"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]", now)]
    if isinstance(a, str) and isinstance(b, str):
        a, b = (_now_masked(_AGO.sub("<ago>", t), *now) for t in (a, b))
    return [] if a == b else [f"{path}: {a!r} before, {b!r} after"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report_same")
    p.add_argument("--before", required=True, help="the other checkout (built: its compiled path in place)")
    p.add_argument("run_dirs", nargs="+")
    args = p.parse_args(argv)
    before = Path(args.before).resolve()
    bad = 0
    todo = [os.path.abspath(d) for d in args.run_dirs if os.path.isdir(d)]
    while todo:
        run_dir = todo.pop(0)
        lo = time.time()
        was = report(run_dir, before)
        if isinstance(was, list):
            todo = [*was, *todo]
            continue
        now = report(run_dir, ROOT)
        diffs = differences(was, now, "", (lo, time.time()))
        print(f"{'same' if not diffs else 'DIFFERENT'}: {run_dir}")
        for d in diffs[:40]:
            print(f"  {d}")
        bad += bool(diffs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
