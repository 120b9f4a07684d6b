"""The layers. The contracts live in pyproject.toml ([tool.importlinter]) and CI runs them
(`lint-imports` in .ci/run); this file runs them too, proves that a planted import breaks
them, and keeps the checks an import contract cannot express:

- a call, not an import: the pure layers read no clock through ``datetime.now`` (the clock
  contract can forbid the module ``time`` but not one method of ``datetime``), open no URL
  through ``urllib.request`` (a contract names only ``urllib`` as a whole, and the pure
  layers need ``urllib.parse``), and, rule data aside, read no file (``open``,
  ``Path.read_text``: no import to forbid);
- a cycle between a package's ``__init__`` and one of its own modules (``acyclic_siblings``
  compares siblings only);
- the CLI skeleton imports no command module: the commands are whatever the registry
  (``cli.commands.COMMANDS``) names, which a static contract cannot follow.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import blackwell_doctor
from tests.conftest import REPO, skip_without

try:
    import grimp
except ModuleNotFoundError as exc:
    skip_without(exc)

PACKAGE = "blackwell_doctor"
CLI = f"{PACKAGE}.cli"
CONFIG = REPO / "pyproject.toml"
# The package under test: src/ here, the installed wheel in CI.
PACKAGE_DIR = Path(blackwell_doctor.__file__).resolve().parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

PURE = ("rules", "recommend", "render", "report", "facts", "ruledata")
# Calls the import contracts cannot see, each: (what, why it is banned).
CLOCK_CALLS = frozenset({"now", "utcnow", "today"})  # datetime.now(), date.today(), ...
FILE_CALLS = frozenset({"read_text", "read_bytes", "write_text", "write_bytes"})
# Known breaches, each with who removes it. Empty is the goal.
ALLOWED: set[tuple[str, str]] = set()


def _lint(pythonpath: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    contract_args = [arg for c in contracts for arg in ("--contract", c)]
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", *contract_args, str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=pythonpath,
        env={**os.environ, "PYTHONPATH": str(pythonpath)},
    )


def test_the_contracts_hold() -> None:
    proc = _lint(PACKAGE_DIR.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract", "name"),
    [
        (
            "rules.engine",
            "import socket",
            "pure-no-network",
            "Pure layers and rule data open no connection",
        ),
        (
            "rules.engine",
            "from blackwell_doctor.cli import app",
            "layers",
            "One house: each layer imports only the layers below it",
        ),
        (  # a renderer judging a P2P pair again, as render/details.py once did
            "render.text",
            "from blackwell_doctor.rules.p2p import pair_verdict",
            "render-no-verdict",
            "Renderers re-run no verdict and load no rule data",
        ),
        (
            "render.markdown",
            "from blackwell_doctor.ruledata.logs import load_catalogue",
            "render-no-verdict",
            "Renderers re-run no verdict and load no rule data",
        ),
    ],
)
def test_a_planted_import_breaks_its_contract(
    tmp_path: Path, module: str, planted: str, contract: str, name: str
) -> None:
    copy = tmp_path / PACKAGE
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "_data"))
    target = copy.joinpath(*module.split(".")).with_suffix(".py")
    target.write_text(target.read_text(encoding="utf-8") + f"\n{planted}\n", encoding="utf-8")
    proc = _lint(tmp_path, contract)
    assert proc.returncode != 0, proc.stdout
    assert f"{name} BROKEN" in proc.stdout
    assert f"{PACKAGE}.{module}" in proc.stdout


def _pure_sources() -> list[tuple[str, ast.Module]]:
    out = []
    for layer in PURE:
        for path in sorted((PACKAGE_DIR / layer).rglob("*.py")):
            rel = path.relative_to(PACKAGE_DIR).as_posix()
            out.append((rel, ast.parse(path.read_text(encoding="utf-8"), rel)))
    return out


def _breaches(rel: str, tree: ast.Module) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(rel, a.name) for a in node.names if a.name.startswith("urllib.request")]
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").startswith("urllib.request") or (
                node.module == "urllib" and any(a.name == "request" for a in node.names)
            ):
                found.append((rel, "urllib.request"))
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in CLOCK_CALLS:
                found.append((rel, func.attr))
            elif not rel.startswith("ruledata/") and (
                (isinstance(func, ast.Name) and func.id == "open")
                or (isinstance(func, ast.Attribute) and func.attr in FILE_CALLS)
            ):
                found.append((rel, func.id if isinstance(func, ast.Name) else func.attr))
    return found


def test_pure_layers_call_no_clock_url_opener_or_file() -> None:
    sources = _pure_sources()
    assert len(sources) > 40  # the scan sees the package
    found = {b for rel, tree in sources for b in _breaches(rel, tree)}
    assert found - ALLOWED == set()
    assert ALLOWED - found == set(), "a known breach is gone: drop it from ALLOWED"


def test_the_call_scan_sees_a_planted_clock_read() -> None:
    tree = ast.parse("import datetime as dt\nstamp = dt.datetime.now(dt.UTC)\n")
    assert _breaches("render/x.py", tree) == [("render/x.py", "now")]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, exclude_type_checking_imports=True, cache_dir=None)


def test_no_import_cycles(graph: grimp.ImportGraph) -> None:
    assert {f"{CLI}.check", f"{PACKAGE}.rules.engine"} <= graph.modules
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycles.append(" -> ".join((module, *back)))
    assert cycles == []


def test_the_cli_skeleton_imports_no_command(graph: grimp.ImportGraph) -> None:
    """The app, the shared options, the output and the error boundary are what every command
    builds on; a command module is reached only through the registry."""
    from blackwell_doctor.cli.commands import COMMANDS

    commands = {f"{CLI}.{name}" for name in COMMANDS}
    assert commands <= graph.modules
    for base in ("root", "options", "output", "boundary"):
        reached = graph.find_upstream_modules(f"{CLI}.{base}")
        assert not reached & commands, base
