"""The exporter: the snapshot's values as Prometheus metrics, the naming rules, label safety, and serving.

Expected values are read from the fixed snapshots (tests/snapshot_data.py) the exposition was made from, so each
check compares two independent paths through the data. Expositions are linted with `promtool check metrics`, the
linter Prometheus ships, where it is installed.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import Finding, Incident, ProcessInfo, Severity, Snapshot
from rlwatch.export.exporter import (
    BudgetState,
    ExporterError,
    ExporterExtras,
    SnapshotCollector,
    last_exception,
    parse_listen,
    start_exporter,
)
from tests import snapshot_data as data

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def snapshot(name: str) -> Snapshot:
    return data.SCENARIOS[name][0]()


def exposition(snap: Snapshot, extras: ExporterExtras | None = None, *, now: float | None = None) -> str:
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    clock = FakeClock(snap.time if now is None else now)
    reg.register(SnapshotCollector(lambda: snap, extra=(lambda: extras) if extras else None, clock=clock))
    return generate_latest(reg).decode()


def samples(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def get(found: Samples, metric: str, **labels: str) -> float | None:
    return found.get((metric, frozenset(labels.items())))


def names(found: Samples) -> set[str]:
    return {name for name, _ in found}


def promtool(text: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool (Debian's prometheus) is not installed")
    return subprocess.run([binary, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)


# ---------------------------------------------------------------------------------------------- values


@pytest.mark.parametrize("scenario", list(data.SCENARIOS))
def test_every_scenario_passes_promtool(scenario: str) -> None:
    extras = ExporterExtras({("restart-server", "server", "ok"): 2}, (BudgetState("server", gave_up=False),))
    result = promtool(exposition(snapshot(scenario), extras))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == ""  # not even a lint warning


@pytest.mark.parametrize("scenario", list(data.SCENARIOS))
def test_values_are_the_snapshot_s_in_base_units(scenario: str) -> None:
    snap = snapshot(scenario)
    now = snap.time + 3.0
    found = samples(exposition(snap, now=now))

    info = get(found, "rlwatch_info", host=snap.host, profile=snap.profile, run_dir=snap.run_dir, simulated="false")
    assert info == 1
    assert get(found, "rlwatch_snapshot_timestamp_seconds") == snap.time
    assert get(found, "rlwatch_snapshot_age_seconds") == pytest.approx(3.0)
    for kind, ev in snap.events.items():
        assert get(found, "rlwatch_events_total", kind=kind) == ev.count
    for g in snap.gpus:
        util = get(found, "rlwatch_gpu_utilization_ratio", gpu=str(g.index))
        assert util == (None if g.util is None else pytest.approx(g.util / 100))
        assert get(found, "rlwatch_gpu_memory_used_bytes", gpu=str(g.index)) == g.mem_used_bytes
    assert snap.memory is not None
    assert get(found, "rlwatch_memory_available_bytes") == snap.memory.available_bytes
    tr = snap.training
    if tr is None:
        assert "rlwatch_training_step" not in names(found)
    else:
        assert get(found, "rlwatch_training_step") == tr.last_step
        if tr.steps_per_hour is not None:
            assert get(found, "rlwatch_training_steps_per_second") == pytest.approx(tr.steps_per_hour / 3600)
    if snap.checkpoint and snap.checkpoint.latest:
        latest = snap.checkpoint.latest
        assert get(found, "rlwatch_checkpoint_global_step") == latest.global_step
        assert latest.saved_at is not None
        assert get(found, "rlwatch_checkpoint_age_seconds") == pytest.approx(now - latest.saved_at)
    if snap.recover:
        assert get(found, "rlwatch_resume_global_step") == snap.recover.resume_global_step
    if snap.server and snap.server.up is not None:
        assert get(found, "rlwatch_server_up") == float(snap.server.up)
    for p in snap.processes:
        if p.alive and p.rss_bytes is not None:
            assert get(found, "rlwatch_process_rss_bytes", role=p.role, name=p.name) == p.rss_bytes
    for f in snap.findings:
        assert (get(found, "rlwatch_findings", severity=f.severity.value, code=f.code) or 0) >= 1
    assert sum(v for (n, _), v in found.items() if n == "rlwatch_findings") == len(snap.findings)
    for src in snap.sources:
        assert get(found, "rlwatch_source_up", source=src.name) == float(src.ok)
        age = get(found, "rlwatch_source_age_seconds", source=src.name)
        assert age == (None if src.last_sample is None else pytest.approx(now - src.last_sample))


def test_the_last_exception_carries_its_signature_type_and_title() -> None:
    snap = snapshot("startup-crash")
    inc = last_exception(snap)
    assert inc is not None
    found = samples(exposition(snap))
    info = [labels for (name, labels), _ in found.items() if name == "rlwatch_last_exception_info"]
    assert len(info) == 1
    labels = dict(info[0])
    assert labels["signature"] == inc.signature
    assert labels["type"] == inc.title.split(":")[0]
    assert labels["title"] == inc.title
    same = sum(1 for i in snap.incidents if i.kind == "traceback" and i.signature == inc.signature)
    assert get(found, "rlwatch_last_exception_occurrences") == same


def test_naming_rules_hold_for_every_series() -> None:
    extras = ExporterExtras({("kill-zombies", "gpu", "refused"): 1}, (BudgetState("workers", gave_up=True),))
    for scenario in data.SCENARIOS:
        text = exposition(snapshot(scenario), extras)
        for fam in text_string_to_metric_families(text):
            assert fam.name.startswith("rlwatch_"), fam.name
            for s in fam.samples:
                assert "pid" not in s.labels, s  # a pid label starts a new series on every restart
                if fam.type == "counter":
                    assert s.name.endswith("_total"), s.name
                assert not any(s.name.endswith(u) for u in ("_ms", "_milliseconds", "_mb", "_percent")), s.name
                assert math.isfinite(s.value), s


def test_absent_data_is_an_absent_series_not_a_zero() -> None:
    snap = Snapshot(host="bare", time=data.DAY, profile="auto", run_dir="/run")
    found = samples(exposition(snap))
    assert get(found, "rlwatch_info", host="bare", profile="auto", run_dir="/run", simulated="false") == 1
    present = names(found)
    for absent in ("rlwatch_training_step", "rlwatch_server_up", "rlwatch_memory_available_bytes"):
        assert absent not in present
    assert not any(n.startswith("rlwatch_gpu_") for n in present)


def test_extras_give_remediation_counters_and_budget_state() -> None:
    extras = ExporterExtras(
        remediations={("restart-workers", "worker", "ok"): 3, ("restart-workers", "worker", "failed"): 1},
        budgets=(
            BudgetState("worker", gave_up=True, restarts_in_window=4, delay_s=300.0),
            BudgetState("server", False),
        ),
    )
    found = samples(exposition(snapshot("memory-leak"), extras))
    lab = {"action": "restart-workers", "target": "worker"}
    assert get(found, "rlwatch_remediations_total", **lab, result="ok") == 3
    assert get(found, "rlwatch_remediations_total", **lab, result="failed") == 1
    assert get(found, "rlwatch_budget_gave_up", target="worker") == 1
    assert get(found, "rlwatch_budget_gave_up", target="server") == 0
    assert get(found, "rlwatch_budget_delay_seconds", target="worker") == 300
    assert "rlwatch_remediations_total" not in names(samples(exposition(snapshot("memory-leak"))))


def test_hostile_text_stays_one_clean_label_value() -> None:
    title = 'ValueError: bad "quote" \\ back\x1b[31m red\x1b[0m\nsecond line\r\x07' + "x" * 500
    hostile = Incident("traceback", "/l", 1, data.DAY, data.DAY, 3, title, None, "0123456789ab")
    snap = replace(snapshot("healthy"), incidents=(hostile,), run_dir="/run/\x1b]0;pwned\x07dir")
    text = exposition(snap)
    result = promtool(text)
    assert result.returncode == 0, result.stdout + result.stderr
    found = samples(text)
    (labels,) = [dict(lab) for (name, lab), _ in found.items() if name == "rlwatch_last_exception_info"]
    assert labels["type"] == "ValueError"
    assert labels["title"].startswith('ValueError: bad "quote" \\ back red')
    assert not any(ord(c) < 32 for c in labels["title"]) and len(labels["title"]) <= 160
    (info,) = [dict(lab) for (name, lab), _ in found.items() if name == "rlwatch_info"]
    assert info["run_dir"] == "/run/dir"


def test_one_series_per_process_name_prefers_the_live_one() -> None:
    base = snapshot("healthy")
    worker = next(p for p in base.processes if p.alive)
    dead = replace(worker, pid=1, alive=False, rss_bytes=5, started_at=worker.started_at - 100)
    newer_dead = replace(worker, pid=2, alive=False, rss_bytes=7, started_at=worker.started_at + 100)
    snap = replace(base, processes=(dead, worker, newer_dead))
    found = samples(exposition(snap))
    lab = {"role": worker.role, "name": worker.name}
    assert get(found, "rlwatch_process_rss_bytes", **lab) == worker.rss_bytes
    assert get(found, "rlwatch_process_up", **lab) == 1


def test_a_dead_process_keeps_its_up_series_but_no_rss() -> None:
    gone = ProcessInfo(9, 1.0, "worker", "worker-7", 123, None, 1.0, 2, ("w",), None, None, alive=False)
    found = samples(exposition(replace(snapshot("healthy"), processes=(gone,))))
    assert get(found, "rlwatch_process_up", role="worker", name="worker-7") == 0
    assert get(found, "rlwatch_process_restarts_total", role="worker", name="worker-7") == 2
    assert get(found, "rlwatch_process_rss_bytes", role="worker", name="worker-7") is None


# ------------------------------------------------------------------------------------------------ serving


@pytest.fixture
def served() -> Iterator[list[object]]:
    started: list[object] = []
    yield started
    for ex in started:
        ex.close()  # type: ignore[attr-defined]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


def test_serves_on_loopback_by_default_and_frees_the_port(served: list[object]) -> None:
    snap = snapshot("healthy")
    ex = start_exporter(lambda: snap)
    served.append(ex)
    assert ex.host == "127.0.0.1" and ex.port > 0
    assert ex.url == f"http://127.0.0.1:{ex.port}/metrics"
    found = samples(fetch(ex.url))
    assert get(found, "rlwatch_training_step") == snap.training.last_step  # type: ignore[union-attr]
    ex.close()
    ex.close()  # twice is fine
    with pytest.raises(OSError):
        urllib.request.urlopen(ex.url, timeout=2)
    again = start_exporter(lambda: snap, "127.0.0.1", ex.port)  # the port is free again
    served.append(again)
    assert again.port == ex.port


def test_each_scrape_reads_the_newest_snapshot(served: list[object]) -> None:
    current = [snapshot("server-crash")]
    ex = start_exporter(lambda: current[0])
    served.append(ex)
    assert get(samples(fetch(ex.url)), "rlwatch_server_up") == 0
    current[0] = snapshot("healthy")
    assert get(samples(fetch(ex.url)), "rlwatch_server_up") == 1


def test_a_taken_port_is_one_clear_error(served: list[object]) -> None:
    ex = start_exporter(lambda: snapshot("healthy"), "127.0.0.1", 0)
    served.append(ex)
    with pytest.raises(ExporterError) as err:
        start_exporter(lambda: snapshot("healthy"), "127.0.0.1", ex.port)
    assert str(err.value) == f"127.0.0.1:{ex.port}: address already in use"


def test_refuses_to_start_in_multiprocess_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/tmp/sglang-prom")
    with pytest.raises(ExporterError) as err:
        start_exporter(lambda: snapshot("healthy"), "127.0.0.1", 0)
    message = str(err.value)
    assert "PROMETHEUS_MULTIPROC_DIR" in message and "\n" not in message


def test_unresolvable_host_is_one_clear_error() -> None:
    with pytest.raises(ExporterError) as err:
        start_exporter(lambda: snapshot("healthy"), "no-such-host.invalid", 0)
    assert str(err.value).startswith("no-such-host.invalid:0: cannot resolve host")


def test_a_failing_source_exposes_no_data_only_the_error_count(served: list[object]) -> None:
    calls = [0]

    def broken() -> Snapshot:
        calls[0] += 1
        raise RuntimeError("engine gone")

    ex = start_exporter(broken)
    served.append(ex)
    first = samples(fetch(ex.url))
    second = samples(fetch(ex.url))
    assert names(second) == {"rlwatch_collect_errors_total"}
    assert get(first, "rlwatch_collect_errors_total") == 1
    assert get(second, "rlwatch_collect_errors_total") == 2
    assert calls[0] == 2  # the source is read per scrape, never at registration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9400", ("127.0.0.1", 9400)),
        ("0.0.0.0:9400", ("0.0.0.0", 9400)),
        (":9400", ("127.0.0.1", 9400)),
        ("9400", ("127.0.0.1", 9400)),
        ("[::1]:9400", ("::1", 9400)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["host:port", "1.2.3.4:70000", "::1:9400", ""])
def test_parse_listen_rejects(text: str) -> None:
    with pytest.raises(ExporterError):
        parse_listen(text)


@given(
    host=st.text(max_size=40),
    role=st.text(max_size=20),
    name=st.text(max_size=20),
    code=st.text(max_size=20),
    title=st.text(max_size=300),
)
def test_any_text_in_labels_round_trips_as_one_clean_line(
    host: str, role: str, name: str, code: str, title: str
) -> None:
    base = snapshot("healthy")
    proc = replace(base.processes[0], role=role, name=name, alive=True)
    twin = replace(proc, name=name + "\x00")  # a different name that cleans to the same label value
    finding = Finding(Severity.WARNING, code, "m", None)
    inc = Incident("traceback", "/l", 1, data.DAY, data.DAY, 3, title, None, "0123456789ab")
    snap = replace(base, host=host, processes=(proc, twin), findings=(finding,), incidents=(inc,))
    found = samples(exposition(snap))  # parses back, with no duplicate series
    for name_, labels in found:
        for value in dict(labels).values():
            assert value == value.strip() and len(value) <= 160
            assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in value), (name_, value)
    assert sum(v for (n, _), v in found.items() if n == "rlwatch_findings") == 1
    assert sum(1 for n, _ in found if n == "rlwatch_process_rss_bytes") == 1
