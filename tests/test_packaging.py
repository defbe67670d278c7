"""The wheel holds every package of the source tree: pyproject.toml lists them by hand (the dashboard's folders are
links), so a new package left off the list would install a rlwatch that fails to import it."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_listed_for_the_wheel() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for here, dirs, files in os.walk(ROOT / "rlwatch", followlinks=True):  # rlwatch/tui and rlwatch/widgets are links
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        if "__init__.py" in files:
            found.add(".".join(Path(here).relative_to(ROOT).parts))
    assert found - listed == set(), "packages missing from [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "listed packages that do not exist"
