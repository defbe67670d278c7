"""The vocabularies rlwatch decides in (rlwatch.common.vocab): each listed once, every finding code a rule emits is
in the registry and every registered code is emitted by some rule, and a word from outside a list read back from
another process's file is no state."""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path
from typing import get_args

import psutil

import rlwatch
from rlwatch.common.vocab import (
    FINDING_CODES,
    JOB_STATES,
    RUN_STATES,
    STATUSES,
    FindingCode,
    finding_meaning,
    is_run_state,
    xid_code,
)
from rlwatch.sources.watchdog_state import status_from

PACKAGE = Path(rlwatch.__file__).parent
DIAGNOSIS = PACKAGE / "engine" / "diagnosis"
# Tables whose entries are the codes a rule emits through a variable: (module, table, the side that holds codes).
EMITTING_TABLES = {("crashes.py", "words"): "keys", ("ray.py", "_CODES"): "values", ("host.py", "_CODE"): "values"}
# Records whose code a rule passes on to its Finding (collectives.py: CollectiveIssue(code, ...)).
CODE_CARRIERS = {"Finding": 1, "CollectiveIssue": 0}


def _callee(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _code_arg(node: ast.Call, position: int) -> ast.expr | None:
    if len(node.args) > position:
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg == "code"), None)


def _emitted() -> tuple[set[str], list[str]]:
    """Every code written as a literal where a finding (or the record that becomes one) is made, and every code in
    the tables rules emit from; with the places that build a code from pieces (which no registry can check)."""
    codes: set[str] = set()
    built: list[str] = []
    tables_seen: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (name := _callee(node)) in CODE_CARRIERS:
                arg = _code_arg(node, CODE_CARRIERS[name])
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    codes.add(arg.value)
                elif isinstance(arg, ast.JoinedStr):
                    built.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and path.parent == DIAGNOSIS:
                side = EMITTING_TABLES.get((path.name, node.target.id))
                if side is not None and isinstance(node.value, ast.Dict):
                    tables_seen.add((path.name, node.target.id))
                    for k, v in zip(node.value.keys, node.value.values, strict=True):
                        entry = k if side == "keys" else v
                        assert isinstance(entry, ast.Constant) and isinstance(entry.value, str)
                        codes.add(entry.value)
    assert tables_seen == set(EMITTING_TABLES), "an emitting table moved: update EMITTING_TABLES"
    return codes, built


def test_run_states_are_the_designs_six() -> None:
    assert set(RUN_STATES) == {"progressing", "finished", "crashed", "hung", "stopped", "unknown"}
    assert set(STATUSES) == {"CRITICAL", "WARNING", "OK", "UNKNOWN", "NO RUN"}
    assert JOB_STATES[0] == "hung" and JOB_STATES[-1] == "progressing"  # the fleet lists the worst job first


def test_is_run_state() -> None:
    assert all(is_run_state(s) for s in RUN_STATES)
    assert not any(is_run_state(s) for s in ("hang", "HUNG", "", None, 3, "OK"))


def test_a_watchdog_state_file_with_a_misspelt_state_says_no_state() -> None:
    """The watchdog's state file is read by other processes: a state that is not one of the list is dropped, never
    passed on as if it were one."""
    me = psutil.Process()
    base = {"pid": os.getpid(), "create_time": me.create_time(), "heartbeat": time.time()}
    good = status_from({**base, "run_state": {"state": "hung", "why": "no step", "since": 5.0}}, time.time())
    assert good.run_state == ("hung", "no step", 5.0)
    bad = status_from({**base, "run_state": {"state": "hang", "why": "no step"}}, time.time())
    assert bad.run_state is None


def test_the_registry_lists_the_literal_type_and_says_what_each_means() -> None:
    assert list(FINDING_CODES) == list(get_args(FindingCode))
    for code, meaning in FINDING_CODES.items():
        assert meaning and "\n" not in meaning and len(meaning) < 120, code


def test_every_code_emitted_is_registered_and_every_registered_code_is_emitted() -> None:
    emitted, built = _emitted()
    assert not built, f"a finding's code built from pieces (use a registered code or vocab.xid_code): {built}"
    assert sorted(emitted - set(FINDING_CODES)) == [], "emitted but not in vocab.FINDING_CODES"
    assert sorted(set(FINDING_CODES) - emitted) == [], "in vocab.FINDING_CODES but no rule emits it"


def test_xid_codes_are_one_family() -> None:
    assert xid_code(79) == "xid_79"
    assert finding_meaning("xid_79") is not None
    assert finding_meaning("memory_leak") == FINDING_CODES["memory_leak"]
    assert finding_meaning("xid_") is None and finding_meaning("memory_leek") is None
