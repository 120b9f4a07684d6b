"""The import graph of blackwell_doctor, built by grimp (the graph library behind
import-linter) from the installed package's source: no module takes part in an import
cycle, and the CLI is a leaf: nothing outside ``blackwell_doctor.cli`` imports it.

Imports under ``if TYPE_CHECKING:`` are left out (they never run); imports inside functions
count: a lazy import that closes a circle is still a circle."""

from __future__ import annotations

import grimp
import pytest

PACKAGE = "blackwell_doctor"
CLI = f"{PACKAGE}.cli"
# `python -m blackwell_doctor` runs the CLI, as the [project.scripts] entry point does.
ENTRY_POINTS = frozenset({f"{PACKAGE}.__main__"})


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, exclude_type_checking_imports=True)


def _in_cli(module: str) -> bool:
    return module == CLI or module.startswith(f"{CLI}.")


def test_the_graph_sees_the_package(graph: grimp.ImportGraph) -> None:
    # Guards the tests below against passing on an empty or partial graph.
    assert {f"{CLI}.check", f"{PACKAGE}.app.obtain", f"{PACKAGE}.rules.engine"} <= graph.modules
    assert f"{PACKAGE}.app.obtain" in graph.find_modules_directly_imported_by(f"{CLI}.check")


def test_no_import_cycles(graph: grimp.ImportGraph) -> None:
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycles.append(" -> ".join((module, *back)))
    assert cycles == []


def test_nothing_outside_the_cli_imports_it(graph: grimp.ImportGraph) -> None:
    offenders = sorted(
        f"{importer} imports {imported}"
        for imported in graph.modules
        if _in_cli(imported)
        for importer in graph.find_modules_that_directly_import(imported)
        if not _in_cli(importer) and importer not in ENTRY_POINTS
    )
    assert offenders == []


def test_the_cli_skeleton_imports_no_command(graph: grimp.ImportGraph) -> None:
    """The app, the shared options, the output and the error boundary are what every command
    builds on; a command module is reached only through the registry."""
    from blackwell_doctor.cli.commands import COMMANDS

    commands = {f"{CLI}.{name}" for name in COMMANDS}
    for base in ("app", "options", "output", "boundary"):
        reached = graph.find_upstream_modules(f"{CLI}.{base}")
        assert not reached & commands, base
