"""configs/alerts.yml: valid rules over series the exporter really serves, unit-tested by Prometheus's promtool.

promtool comes with Debian's ``prometheus`` package, which ``.ci/run`` installs; where it is missing the promtool
tests skip and say so, and the series-name check still runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "configs" / "alerts.yml"
TESTS = ROOT / "tests" / "alerts_test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not found (Debian's prometheus package ships it; .ci/run installs it)"
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)


@needs_promtool
def test_the_rules_are_valid() -> None:
    out = _promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 9 rules found" in out.stdout


@needs_promtool
def test_the_rules_unit_tests_pass() -> None:
    out = _promtool("test", "rules", str(TESTS))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_is_unit_tested_and_every_series_is_one_the_exporter_serves() -> None:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    tested = {case["alertname"] for t in tests for case in t["alert_rule_test"] if case.get("exp_alerts")}
    assert tested == {r["alert"] for r in rules}
    exporter = (ROOT / "rlwatch" / "export" / "exporter.py").read_text()
    for rule in rules:
        for name in re.findall(r"\brlwatch_([a-z_]+)", rule["expr"]):
            base = name.removesuffix("_total") if name.endswith("_total") else name
            assert f'"{base}"' in exporter, (rule["alert"], name)
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
