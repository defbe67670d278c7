"""Class and top-level function names are unique across the package, its dashboard included: a name says which thing it is, so a
reader (or a grep) never lands on another module's ``Verdict`` or ``assess_run``."""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from pathlib import Path

import rlwatch

PACKAGE = Path(rlwatch.__file__).parent
# Each runnable module's entry point (``python -m rlwatch.sim.worker``, the console script): the convention is the name.
ALLOWED = {"main"}


def public_definitions() -> dict[str, list[str]]:
    """Each public class and top-level function name, with the modules that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    # os.walk follows the links rlwatch/tui and rlwatch/widgets (the dashboard, kept at the top of the repository)
    paths = [Path(folder) / name for folder, _, names in os.walk(PACKAGE, followlinks=True) for name in names]
    for path in sorted(p for p in paths if p.suffix == ".py"):
        relative = path.relative_to(PACKAGE)
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith(
                "_"
            ):
                found[node.name].append(str(relative))
    return found


def test_no_public_name_is_defined_twice() -> None:
    found = public_definitions()
    assert len(found) > 500  # the scan saw the package
    twice = {name: where for name, where in found.items() if len(where) > 1 and name not in ALLOWED}
    assert twice == {}, f"defined in more than one module (give each a name that says what it is): {twice}"
