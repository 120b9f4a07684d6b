"""The import circle between the log context rules and the matcher is gone (issue 33, item
6): context.py imports no scanning module, not even for type checking (import-linter's
contract ``log-context-below-matcher`` skips TYPE_CHECKING imports, this test does not)."""

from __future__ import annotations

import ast
from pathlib import Path

import blackwell_doctor.collect.logs.context as context
import blackwell_doctor.ruledata.records as records

SCANNING = {
    "blackwell_doctor.collect.logs.matcher",
    "blackwell_doctor.collect.logs.scan",
    "blackwell_doctor.collect.logs.sources",
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_context_imports_no_scanning_module_at_all() -> None:
    assert not _imports(Path(context.__file__)) & SCANNING


def test_the_grammar_table_imports_no_collector() -> None:
    assert not any(
        m.startswith("blackwell_doctor.collect") for m in _imports(Path(records.__file__))
    )
