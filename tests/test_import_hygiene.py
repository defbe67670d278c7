"""The core must run where Textual is absent or broken: prove at run time that it never loads it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CORE_MODULES = [
    "rlwatch",
    "rlwatch.cli",
    "rlwatch.engine",
    "rlwatch.report",
    "rlwatch.diagnosis",
    "rlwatch.events",
    "rlwatch.tailer",
    "rlwatch.config_load",
    "rlwatch.discovery",
    "rlwatch.sim",
]


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_does_not_load_textual(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'tui', 'widgets'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_report_path_does_not_load_textual(tmp_path: object) -> None:
    """Run the whole report command in a subprocess and check what it imported."""
    code = (
        "import json, sys\n"
        "from rlwatch.cli import main\n"
        f"rc = main(['report', {str(tmp_path)!r}, '--json'])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'tui', 'widgets'))\n"
        "print('LOADED=' + json.dumps(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode in (0, 1), out.stderr
    marker = [line for line in out.stdout.splitlines() if line.startswith("LOADED=")]
    assert marker and json.loads(marker[0][len("LOADED=") :]) == []
