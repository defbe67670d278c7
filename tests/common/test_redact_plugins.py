"""detect-secrets' plugin patterns read from their source are the ones its imported plugins hold, and anything the
source does not say literally falls back to the import (redaction never gets weaker for being started faster)."""

from __future__ import annotations

import ast

from rlwatch.common import redact


def test_the_source_says_what_the_imported_plugins_hold() -> None:
    read = redact._read_plugin_patterns()
    assert read is not None  # the installed detect-secrets is read without importing it
    assert read == redact._import_plugin_patterns()
    assert any(p.startswith("(?:A3T[A-Z0-9]|") for p in read)  # AWS's access key id, a stand-alone one
    assert not any("aws.{0,20}" in p for p in read)  # its secret key reaches for a quote: the key-value rule's job


def _denylist(body: str) -> list[str] | None:
    return redact._literal_denylist(ast.parse(f"import re\nclass P:\n    denylist = {body}\n"), "P")


def test_a_literal_denylist_is_read_and_anything_else_is_left_to_the_import() -> None:
    assert _denylist("(re.compile(r'ab[0-9]{4}'), re.compile(r'x\\s+y', flags=re.I))") == ["ab[0-9]{4}"]
    # a template whose own text reaches for a quote is not a stand-alone pattern, whatever fills it
    assert _denylist("[re.compile(r'k.{{0,20}}?{w}[\\'\"]'.format(w='key'))]") == []
    # patterns built at run time: only the imported plugin can say what they are
    assert _denylist("[re.compile(PATTERN)]") is None
    assert _denylist("[re.compile(r'{x}_[a-z]{{9}}'.format(x=PREFIX))]") is None
    assert _denylist("[compile('abc')]") is None
    assert _denylist("make_denylist()") is None
    assert redact._literal_denylist(ast.parse("class Q:\n    denylist = []\n"), "P") is None
