"""A count printed to a person agrees with its noun: "1 timeout error", "2 stray processes hold", never
"1 timeout errors" or "process(es)". The findings and the incident titles say every count through
rlwatch.common.words.plural."""

from __future__ import annotations

import ast
from pathlib import Path

from rlwatch.common.state import EventSummary, GpuHolder, Severity, Snapshot
from rlwatch.engine.diagnosis import Context
from rlwatch.engine.diagnosis.crashes import catalogued_failures
from rlwatch.engine.diagnosis.gpu import gpu
from rlwatch.logs.incidents import IncidentTracker

NOW = 1_763_700_000.0
ROOT = Path(__file__).resolve().parents[2]


def snap(**fields: object) -> Snapshot:
    return Snapshot(host="h", time=NOW, profile="areal", run_dir="/run", **fields)  # type: ignore[arg-type]


def events(kind: str, n: int) -> dict[str, EventSummary]:
    return {kind: EventSummary(kind, Severity.WARNING, n, NOW - 60, NOW - 30, 1.0, n, {"/run/launcher.log": n})}


def test_one_timeout_is_one_timeout_error() -> None:
    (one,) = [f for f in catalogued_failures(snap(events=events("timeout", 1)), Context()) if f.code == "timeout"]
    assert one.message.startswith("1 timeout error (launcher.log 1)"), one.message
    (two,) = [f for f in catalogued_failures(snap(events=events("timeout", 2)), Context()) if f.code == "timeout"]
    assert two.message.startswith("2 timeout errors (launcher.log 2)"), two.message


def test_one_retry_waiting_for_the_server_and_one_nccl_error() -> None:
    (retry,) = catalogued_failures(snap(events=events("server_wait", 1)), Context())
    assert retry.message.startswith("1 retry waiting for the vLLM server"), retry.message
    (retries,) = catalogued_failures(snap(events=events("server_wait", 3)), Context())
    assert retries.message.startswith("3 retries waiting for the vLLM server"), retries.message
    (nccl,) = catalogued_failures(snap(events=events("nccl_error", 1)), Context())
    assert nccl.message.startswith("1 NCCL error ("), nccl.message


def test_one_stray_process_holds_the_gpu() -> None:
    stray = GpuHolder(4242, NOW - 100, "me", ("python3",), ("/dev/nvidia0",), 1 << 30, False, "its run is gone")
    found = {f.code: f for f in gpu(snap(holders=(stray,)), Context())}
    assert found["gpu_strays"].message.startswith("1 stray process holds the GPU (pid 4242)")


def test_a_storm_of_one_is_one_error() -> None:
    """connection_storm may be 1 (the configuration allows it): the storm's title agrees with its count."""
    tracker = IncidentTracker(storm_threshold=1)
    tracker.event("connection_refused", "/run/trainer.log", 7, (NOW, NOW), "ConnectionRefusedError")
    (storm,) = [i for i in tracker.incidents() if i.kind == "retry_storm"]
    assert storm.title == "1 connection-refused error (trainer.log)"


def _literals(path: Path) -> list[str]:
    """Every string the module can print: its literals, less its docstrings."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_no_finding_or_incident_says_a_count_with_a_parenthesised_plural() -> None:
    """ "process(es)", "error(s)", "device(s)": the words a person reads, never a template's hedge."""
    files = [*sorted((ROOT / "rlwatch/engine/diagnosis").glob("*.py")), ROOT / "rlwatch/logs/incidents.py"]
    hedged = [
        f"{p.relative_to(ROOT)}: {text!r}"
        for p in files
        for text in _literals(p)
        if any(h in text for h in ("(s) ", "(s),", "(s)'", "(s).", "(es)"))
    ]
    assert not hedged, hedged
