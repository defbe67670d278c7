"""``bench/RESULTS.md``: the machine, the targets against what was measured, then each section.

The prose of ``bench/findings.md`` (what was tried, what stands in the way) is appended as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench import backlog, incidents, latency, overhead, soak, startup, storm
from bench.common import fmt, median
from bench.datagen import Dataset
from bench.incidents import FirstDiagnosis  # by name: the field `incidents` hides the module in the class body

FINDINGS = Path(__file__).resolve().parent / "findings.md"
# The overhead section as measured on a host with an NVIDIA GPU, beside nvitop: a run of its own (this machine may
# have no GPU), kept beside RESULTS.md and included in it.
GPU_RESULTS = Path(__file__).resolve().parent / "RESULTS-gpu.md"
NO_GROWTH_MB_PER_H = 1.0  # what "no growth" is taken to mean over a soak


@dataclass(slots=True)
class Results:
    machine: dict[str, str]
    quick: bool
    dataset: Dataset | None = None
    backlog: backlog.BacklogResult | None = None
    latency: list[latency.LatencyResult] | None = None
    overhead: overhead.OverheadResult | None = None
    soak: soak.SoakResult | None = None
    startup: startup.StartupResult | None = None
    incidents: list[incidents.LogResult] | None = None
    first_diagnosis: FirstDiagnosis | None = None
    storm: storm.StormResult | None = None
    elapsed_s: float = 0.0
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    # section -> "date, rlwatch" of the run that measured it; sections of an earlier run are kept when a later run
    # measures only some (a one-hour soak is a run of its own)
    measured: dict[str, str] = field(default_factory=dict)

    def merge_from(self, old: Results, sections: list[str]) -> None:
        """Keep ``old``'s figures for every section this run did not measure."""
        for name in ("backlog", "latency", "overhead", "soak", "startup", "incidents", "first_diagnosis", "storm"):
            if name in sections or getattr(old, name, None) is None:
                continue
            setattr(self, name, getattr(old, name))
            self.measured[name] = getattr(old, "measured", {}).get(name) or _when(old.machine)
            if name in ("backlog", "startup") and self.dataset is None:
                self.dataset = old.dataset


def _when(machine: dict[str, str]) -> str:
    return f"{machine.get('date', '?')}, {machine.get('rlwatch', '?')}"


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**not met**")


def _targets(r: Results) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    gib = f"{r.dataset.size / 2**30:.2f} GiB" if r.dataset else "?"
    if r.backlog:
        # The two-process figure is a bound measured for the findings, not something rlwatch does.
        # and the counter alone leaves out work that every real count does (the tracker, the log view).
        names = [
            c.name
            for c in r.backlog.contenders
            if c.name.startswith("rlwatch") and "halves" not in c.name and not c.name.startswith(backlog.COUNTER_ONLY)
        ]
        best = max(names, key=r.backlog.rate, default=None)
        if best:
            rate = r.backlog.rate(best)
            ratio = r.backlog.ratio(best)
            rows.append(("backlog scan ≥ 1 GB/s", f"{fmt(rate, 0, ' MB/s')} ({best}, {gib})", _verdict(rate >= 1000)))
            rows.append(
                ("backlog scan within 2× of `grep -cE`", f"{fmt(ratio, 1, '×')} grep's time", _verdict(ratio <= 2))
            )
        rows.append(
            (
                "backlog counts agree with grep (and ripgrep)",
                "yes" if r.backlog.agree else "no",
                _verdict(r.backlog.agree),
            )
        )
    if r.latency:
        for lat in r.latency:
            p99 = lat.p(99)
            target = getattr(lat, "target_ms", 100.0)
            until = getattr(lat, "until", "counted")
            ok = p99 <= target and lat.lost == 0
            rows.append((f"line → {until} ≤ {target:.0f} ms p99 ({lat.mode})", fmt(p99, 1, " ms"), _verdict(ok)))
    if r.overhead:
        w = r.overhead.growing.get("rlwatch watch")
        if w:
            rows.append(
                ("headless watch, 1 s, 8 logs ≤ 1 % of a core", fmt(w.cpu_pct, 2, " %"), _verdict(w.cpu_pct <= 1))
            )
        d = r.overhead.idle.get("rlwatch dashboard")
        if d:
            rows.append(("dashboard idle ≤ 3 % of a core", fmt(d.cpu_pct, 2, " %"), _verdict(d.cpu_pct <= 3)))
    if r.startup:
        rss = r.startup.watch_rss_mb
        rows.append(
            (
                f"≤ 60 MB RSS headless after a {gib} backlog",
                fmt(rss, 0, " MB"),
                _verdict(None if rss is None else rss <= 60),
            )
        )
    if r.soak:
        per_hour = r.soak.steady("rlwatch watch")
        rows.append(
            (
                f"no RSS growth, headless ({r.soak.seconds / 60:.0f} min soak, second half; 1 h asked)",
                fmt(per_hour, 2, " MB/h"),
                _verdict(per_hour <= NO_GROWTH_MB_PER_H),
            )
        )
    if r.startup:
        ff = median(r.startup.first_frame)
        rows.append(("dashboard first frame ≤ 1 s", fmt(ff, 2, " s"), _verdict(ff <= 1)))
        if r.startup.report:
            rep = median([t.seconds for t in r.startup.report])
            rows.append((f"`rlwatch report` over {gib} ≤ 1.5 s", fmt(rep, 2, " s"), _verdict(rep <= 1.5)))
    if getattr(r, "storm", None):
        assert r.storm is not None
        rows += [(a, b, _verdict(c)) for a, b, c in storm.targets(r.storm)]
    return rows


def _embedded(path: Path) -> list[str]:
    """Another results file inside this one: from its first section on, headings one level down."""
    lines = path.read_text().strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    return ["#" + line if line.startswith("## ") else line for line in lines[start:]]


def render(r: Results, *, embed_gpu: bool = True) -> str:
    out = ["# rlwatch benchmarks", ""]
    if r.quick:
        out += [
            "**Quick run** (`python -m bench --quick`): small sizes and short windows, a smoke test: "
            "not figures to quote.",
            "",
        ]
    out += [
        "Written by `python -m bench` (`make bench`) from a real run; do not edit by hand. What the figures mean and "
        "what was tried to reach the targets is at the end.",
        "",
        "## Machine",
        "",
        "| | |",
        "| --- | --- |",
    ]
    out += [f"| {k} | {v} |" for k, v in r.machine.items()]
    out += [f"| run took | {r.elapsed_s / 60:.1f} min |"]
    earlier = {name: when for name, when in r.measured.items() if when != _when(r.machine)}
    out += [f"| section {name} measured in an earlier run | {when} |" for name, when in sorted(earlier.items())]
    out += ["", "## Targets", ""]
    out += ["| target | measured | |", "| --- | --- | --- |"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in _targets(r)]
    if r.backlog:
        out += ["", "## 1. Backlog scan", "", *backlog.markdown(r.backlog)]
    if r.latency:
        title = "## 2. Latency: line appended → counted by the engine, and on screen"
        out += ["", title, "", *latency.markdown(r.latency)]
    if r.overhead:
        out += ["", "## 3. Overhead beside the peers", "", *overhead.markdown(r.overhead)]
    if embed_gpu and GPU_RESULTS.exists():
        title = "## 3b. On a GPU host (separate runs): overhead beside nvitop, first diagnosis"
        out += ["", title, "", *_embedded(GPU_RESULTS)]
    if r.soak:
        out += ["", "## 4. Soak", "", *soak.markdown(r.soak)]
    if r.startup and r.dataset:
        out += ["", "## 5. Start-up", "", *startup.markdown(r.startup, r.dataset)]
    if getattr(r, "incidents", None):  # runs saved before this section existed have no such field
        assert r.incidents is not None
        out += ["", "## 6. Where incidents happen: a calm and an incident-dense log, side by side", ""]
        out += ["| target (issue 13) | measured | |", "| --- | --- | --- |"]
        out += [f"| {a} | {b} | {_verdict(c)} |" for a, b, c in incidents.targets(r.incidents)]
        out += ["", *incidents.markdown(r.incidents)]
    if getattr(r, "first_diagnosis", None):
        assert r.first_diagnosis is not None
        fd = r.first_diagnosis
        out += ["", "## 7. First diagnosis over a big incident-dense backlog", ""]
        out += ["| target | measured | |", "| --- | --- | --- |"]
        out += [f"| {a} | {b} | {_verdict(c)} |" for a, b, c in incidents.first_diagnosis_targets(fd)]
        out += ["", *incidents.first_diagnosis_markdown(fd)]
    if getattr(r, "storm", None):
        assert r.storm is not None
        out += ["", "## 8. A storm on many workers", "", *storm.markdown(r.storm)]
    if FINDINGS.exists() and embed_gpu:
        out += ["", FINDINGS.read_text().strip()]
    return "\n".join(out) + "\n"
