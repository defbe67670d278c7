"""One host's row from its rlwatch series, whichever way they were read."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from rlwatch.common.redact import redacted
from rlwatch.common.state import Severity
from rlwatch.common.textsafe import clean_line
from rlwatch.export.fleet.model import (
    PREFIX,
    FleetCall,
    FleetEvidence,
    FleetException,
    FleetFinding,
    FleetGpu,
    FleetHost,
    FleetProcess,
    FleetRank,
    Labels,
    Sample,
)


class _Series:
    """The samples of one host, by metric name."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self._by_name: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
        for name, labels, value in samples:
            if name.startswith(PREFIX):
                self._by_name[name[len(PREFIX) :]].append((labels, value))

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def all(self, name: str) -> list[tuple[Labels, float]]:
        return [(labels, value) for labels, value in self._by_name.get(name, []) if math.isfinite(value)]

    def one(self, name: str) -> float | None:
        found = self.all(name)
        return found[0][1] if found else None

    def by(self, name: str, label: str) -> dict[str, float]:
        return {labels.get(label, ""): value for labels, value in self.all(name)}


def _int(value: float | None) -> int | None:
    return None if value is None else round(value)


def _bool(value: float | None) -> bool | None:
    return None if value is None else value != 0


def _severity(text: str) -> Severity | None:
    try:
        return Severity(text)
    except ValueError:
        return None


def _findings(series: _Series) -> tuple[FleetFinding, ...]:
    found = []
    for labels, value in series.all("findings"):
        sev = _severity(labels.get("severity", ""))
        if sev is not None and value > 0:
            found.append(FleetFinding(sev, clean_line(labels.get("code", "?")), max(1, round(value))))
    found.sort(key=lambda f: (f.severity.rank, f.code))
    return tuple(found)


def _exception(series: _Series) -> FleetException | None:
    info = series.all("last_exception_info")
    if not info:
        return None
    labels = info[0][0]
    sig = labels.get("signature")
    if not sig:
        return None
    return FleetException(
        signature=clean_line(sig),
        type=clean_line(labels.get("type", "")),
        title=clean_line(labels.get("title", "")) or clean_line(labels.get("type", "")),
        at=series.one("last_exception_timestamp_seconds"),
        occurrences=_int(series.one("last_exception_occurrences")),
    )


def _gpus(series: _Series) -> tuple[FleetGpu, ...]:
    util = series.by("gpu_utilization_ratio", "gpu")
    used = series.by("gpu_memory_used_bytes", "gpu")
    total = series.by("gpu_memory_total_bytes", "gpu")
    indexes = sorted(set(util) | set(used) | set(total), key=lambda i: (len(i), i))
    return tuple(FleetGpu(i, util.get(i), used.get(i), total.get(i)) for i in indexes)


def _processes(series: _Series) -> tuple[FleetProcess, ...]:
    def key(labels: Labels) -> tuple[str, str]:
        return (labels.get("role", ""), labels.get("name", ""))

    up = {key(lab): v for lab, v in series.all("process_up")}
    rss = {key(lab): v for lab, v in series.all("process_rss_bytes")}
    restarts = {key(lab): v for lab, v in series.all("process_restarts_total")}
    keys = sorted(set(up) | set(rss) | set(restarts))
    return tuple(
        FleetProcess(clean_line(r), clean_line(n), _bool(up.get((r, n))), rss.get((r, n)), restarts.get((r, n)))
        for r, n in keys
    )


def _opt_int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _ranks(series: _Series) -> tuple[FleetRank, ...]:
    still = series.by("rank_still_seconds", "rank")
    seq = series.by("rank_collective_seq", "rank")
    out = []
    for labels, _ in series.all("rank_standing_info"):
        rank = _opt_int(labels.get("rank"))
        if rank is None:
            continue
        key = labels.get("rank", "")
        out.append(
            FleetRank(
                rank,
                _opt_int(labels.get("local_rank")),
                clean_line(labels.get("state", "")),
                clean_line(labels.get("where", "")),
                clean_line(labels.get("wait", "")) or None,
                still.get(key),
                _int(seq.get(key)),
            )
        )
    return tuple(sorted(out, key=lambda r: r.rank))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip().isdigit())


def _evidence(series: _Series) -> tuple[FleetEvidence, ...]:
    out = []
    for labels, _ in series.all("job_collective_issue_info"):
        ranks = _ints(labels.get("ranks", ""))
        if ranks:
            out.append(
                FleetEvidence(
                    clean_line(labels.get("code", "")),
                    clean_line(labels.get("source", "")),
                    ranks,
                    clean_line(labels.get("op", "")) or None,
                    _opt_int(labels.get("seq")),
                )
            )
    return tuple(out)


def _calls(series: _Series) -> tuple[FleetCall, ...]:
    out = []
    for labels, _ in series.all("rank_last_collective_info"):
        rank, seq = _opt_int(labels.get("rank")), _opt_int(labels.get("seq"))
        if rank is not None and seq is not None:
            out.append(FleetCall(rank, seq, clean_line(labels.get("op", "")), _opt_int(labels.get("numel"))))
    return tuple(sorted(out, key=lambda c: c.rank))


def host_from_samples(
    key: str,
    samples: Iterable[Sample],
    *,
    data_age_s: float | None,
    stale_after_s: float,
    stale: bool = False,
    error: str | None = None,
    job: str | None = None,
) -> FleetHost:
    """One fleet row from the ``rlwatch_`` samples of one host.

    ``data_age_s`` is how long ago the samples were read; the exporter's own snapshot age is added to it, so a host
    whose exporter answers while its engine stands still turns stale too.
    """
    s = _Series(samples)
    info = s.all("info")
    if not info:
        return FleetHost(key=key, job=job, stale=True, age_s=data_age_s, error=error or "no rlwatch metrics")
    labels = info[0][0]
    snap_age = s.one("snapshot_age_seconds")
    age = None if data_age_s is None else data_age_s + (snap_age or 0.0)
    if age is not None and age > stale_after_s:
        stale = True
        error = error or f"no new data for {age:.0f}s"
    rate = s.one("training_steps_per_second")
    events = {clean_line(k): round(v) for k, v in s.by("events_total", "kind").items()}
    gave_up = tuple(sorted(clean_line(k) for k, v in s.by("budget_gave_up", "target").items() if v))
    job_info = [lab for lab, _ in s.all("job_info")]
    state = s.all("job_host_state_info")
    verdict = s.all("verdict_info")
    run_state = clean_line(state[0][0].get("state", "")) if state else None
    if not run_state and verdict:
        run_state = clean_line(verdict[0][0].get("state", ""))
    launched_rows = s.all("job_rank_launched")
    launched = {rank: round(v) for lab, v in launched_rows if (rank := _opt_int(lab.get("rank"))) is not None}
    # What another host's exporter said is shown to whoever runs the fleet view: redacted here as well, since a
    # host running an older rlwatch (or anything else that speaks these names) may not have redacted it.
    row = FleetHost(
        key=key,
        host=clean_line(labels.get("host", "")) or key,
        job=job,
        profile=clean_line(labels.get("profile", "")) or None,
        run_dir=clean_line(labels.get("run_dir", "")) or None,
        simulated=labels.get("simulated") == "true",
        stale=stale,
        age_s=age,
        error=error if stale else None,
        step=_int(s.one("training_step")),
        total_steps=_int(s.one("training_total_steps")),
        steps_per_hour=None if rate is None else rate * 3600.0,
        stalled=_bool(s.one("training_stalled")),
        finished=_bool(s.one("training_finished")),
        reward=s.one("training_reward"),
        server_up=_bool(s.one("server_up")),
        gpus=_gpus(s),
        mem_total_bytes=s.one("memory_total_bytes"),
        mem_available_bytes=s.one("memory_available_bytes"),
        events=events,
        findings=_findings(s),
        exception=_exception(s),
        checkpoint_step=_int(s.one("checkpoint_global_step")),
        checkpoint_age_s=s.one("checkpoint_age_seconds"),
        resume_step=_int(s.one("resume_global_step")),
        processes=_processes(s),
        budgets_gave_up=gave_up,
        # Prometheus keeps its own "job" label (the scrape job's) and renames the exporter's to "exported_job".
        run_job=(clean_line(job_info[0].get("exported_job", job_info[0].get("job", ""))) or None) if job_info else None,
        node_rank=_opt_int(job_info[0].get("node_rank")) if job_info else None,
        world_size=_int(s.one("job_world_size")),
        ranks=_ranks(s),
        run_state=run_state or None,
        state_s=s.one("job_host_state_seconds"),
        evidence=_evidence(s),
        launched=launched,
        launched_op=(clean_line(launched_rows[0][0].get("op", "")) or None) if launched_rows else None,
        calls=_calls(s),
    )
    return redacted(row)
