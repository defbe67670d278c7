"""The core must run where Textual is absent or broken: prove at run time that it never loads it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

CORE_MODULES = [
    "rlwatch",
    "rlwatch.cli",
    "rlwatch.engine.engine",
    "rlwatch.export.report",
    "rlwatch.engine.diagnosis",
    "rlwatch.logs.events",
    "rlwatch.logs.tailer",
    "rlwatch.discover.load",
    "rlwatch.discover.discovery",
    "rlwatch.sim",
]


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_does_not_load_textual(module: str) -> None:
    code = f"import json, sys, {module}; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'textual' or m.startswith(('rlwatch.tui', 'rlwatch.widgets')))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_report_path_does_not_load_textual(tmp_path: object) -> None:
    """Run the whole report command in a subprocess and check what it imported."""
    code = (
        "import json, sys\n"
        "from rlwatch.cli import main\n"
        f"rc = main(['report', {str(tmp_path)!r}, '--json'])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'textual' or m.startswith(('rlwatch.tui', 'rlwatch.widgets')))\n"
        "print('LOADED=' + json.dumps(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode in (0, 1), out.stderr
    marker = [line for line in out.stdout.splitlines() if line.startswith("LOADED=")]
    assert marker and json.loads(marker[0][len("LOADED=") :]) == []


def test_python_m_rlwatch_does_what_the_command_does(tmp_path: Path) -> None:
    """`python -m rlwatch` reaches the dashboard commands too (here a headless snapshot of a simulated incident)."""
    out = tmp_path / "shot.svg"
    done = subprocess.run(
        [sys.executable, "-m", "rlwatch", "snapshot", "--demo", "--scenario", "healthy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("<svg")


def test_nothing_is_installed_outside_the_rlwatch_package() -> None:
    """The dashboard's folders are installed as rlwatch.tui and rlwatch.widgets: no top-level `tui` or `widgets`
    lands in site-packages, where another project's would collide with them."""
    config = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    packages = config["tool"]["setuptools"]["packages"]
    assert {p.split(".")[0] for p in packages} == {"rlwatch"}
    assert {"rlwatch.tui", "rlwatch.widgets"} <= set(packages)
    assert config["project"]["scripts"]["rlwatch"] == "rlwatch.tui.launch:main"


def test_every_package_is_installed() -> None:
    """The package list is written out (the dashboard's folders are links, which discovery would not follow the
    same way everywhere): a package added to the tree and not to the list would be missing from the wheel."""
    root = Path(__file__).resolve().parent.parent
    config = tomllib.loads((root / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(Path(folder).relative_to(root).parts)
        for folder, _, files in os.walk(root / "rlwatch", followlinks=True)  # rlwatch/tui, rlwatch/widgets
        if "__init__.py" in files
    }
    assert found == listed


def test_report_redacts_without_requests_and_reads_without_watchfiles(tmp_path: Path) -> None:
    """What the start of `report` leaves out (bench/startup.py measures it): detect-secrets' formats are read from
    its plugins' source, so redacting imports neither detect-secrets' scanner nor requests and its network stack;
    watchfiles is imported only by a waker's thread, which a report never starts; http.client, urllib.request and
    ssl only by a probe of a server or of Ray's dashboard, which a run without either never makes; PyYAML only to
    read a file, and this run has no rlwatch.yaml and no training config; the simulator only for `demo --help`'s
    list of scenarios or a simulated run."""
    (tmp_path / "trainer.log").write_text("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123 ghp_" + "a" * 36 + "\n")
    code = (
        "import json, sys\n"
        "from rlwatch.cli import main\n"
        f"rc = main(['report', {str(tmp_path)!r}, '--json'])\n"
        "from rlwatch.common import redact\n"
        "built = redact._formats.cache_info().currsize\n"
        "roots = ('requests', 'urllib3', 'charset_normalizer', 'detect_secrets', 'watchfiles', 'ssl', 'yaml')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in roots or m in ('http.client', 'urllib.request', 'rlwatch.sim'))\n"
        "print('LOADED=' + json.dumps([built, loaded]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode in (0, 1), out.stderr
    marker = [line for line in out.stdout.splitlines() if line.startswith("LOADED=")]
    assert marker and json.loads(marker[0][len("LOADED=") :]) == [1, []]  # the formats were built, and redacted
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in out.stdout


def test_nothing_imports_textual_private_modules() -> None:
    """Textual's modules named with a leading underscore are its internals: a release can change them with no error
    and no deprecation (issue 44). The dashboard uses only Textual's public modules."""
    root = Path(__file__).resolve().parent.parent
    found = []
    for folder, _, files in os.walk(root / "rlwatch", followlinks=True):  # rlwatch/tui, rlwatch/widgets are links
        for name in files:
            if not name.endswith(".py"):
                continue
            path = Path(folder) / name
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                else:
                    continue
                for module in modules:
                    parts = module.split(".")
                    if parts[0] == "textual" and any(p.startswith("_") for p in parts[1:]):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {module}")
    assert found == []


def test_no_dashboard_class_overrides_a_private_textual_method() -> None:
    """A method of Textual's named with a leading underscore (``_on_mouse_scroll_up``, ``_on_scroll_to``) is as
    internal as its private modules: the dashboard's widgets override none (they handle the public ``on_…`` message
    and stop the widget's own with ``prevent_default``)."""
    import importlib
    import inspect
    import pkgutil

    import rlwatch.tui
    import rlwatch.widgets

    found = []
    for package in (rlwatch.tui, rlwatch.widgets):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for cls in vars(module).values():
                if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                    continue
                textual_bases = [b for b in cls.__mro__[1:] if b.__module__.startswith("textual.")]
                for name, value in vars(cls).items():
                    if not name.startswith("_") or name.startswith("__") or not inspect.isfunction(value):
                        continue
                    if any(inspect.isfunction(vars(base).get(name)) for base in textual_bases):
                        found.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    assert found == []
