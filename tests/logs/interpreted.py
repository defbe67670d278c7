"""A rule module compiled from its own text (setup.py's ``COMPILED``), run by the interpreter instead: the
equivalence tests compare what it answers with what the import, the compiled extension, answers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_LOGS = Path(__file__).resolve().parents[2] / "rlwatch" / "logs"


def interpreted(name: str) -> ModuleType:
    """The rule module ``rlwatch.logs.<name>`` run by the interpreter from its .py text, beside the module an import
    gives, which is that same text compiled where the event path is built."""
    spec = importlib.util.spec_from_file_location(f"rlwatch.logs._interpreted_{name}", _LOGS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module
