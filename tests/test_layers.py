"""The layers, enforced (nvitop-style) on grimp's import graph (see test_import_graph.py).

collect (host, GPU, clock) -> facts -> rules (pure checks) -> report -> render / recommend.
Checks judge facts files from any host, so nothing they reach may touch this host: no
collector, no probe, no child process, no Docker, no native library. Imports inside
functions count (a lazy import is still a dependency); ``if TYPE_CHECKING:`` ones do not.
"""

from __future__ import annotations

import grimp
import pytest

PACKAGE = "blackwell_doctor"

# The pure layers; everything they reach, transitively, must be pure too.
PURE = (
    *("rules", "render", "recommend", "ruledata.tiles", "ruledata.tileplan", "report", "facts"),
    "ruledata.checkdata",
)
# Never reachable from a pure layer: what touches the host, a child process or Docker.
IMPURE = (
    *("collect", "apply", "cli", "app"),
    "collect.inputfile",  # reads the files a user names: the app and collect layers call it
)
IMPURE_EXTERNAL = ("subprocess", "docker", "pynvml", "cuda", "ctypes", "socket", "signal")
# The one adapter per native library (ruff's banned-api names them as well).
ADAPTERS = {
    "cuda": {"collect.cuda_driver", "collect.probe.nvrtc"},  # the driver API; NVRTC
    "pynvml": {"collect.nvml"},
}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(
        PACKAGE, include_external_packages=True, exclude_type_checking_imports=True
    )


def _ours(module: str) -> str:
    return module.removeprefix(PACKAGE + ".")


def _is(module: str, prefixes: tuple[str, ...]) -> bool:
    name = _ours(module)
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _pure(graph: grimp.ImportGraph) -> list[str]:
    return sorted(m for m in graph.modules if m.startswith(PACKAGE) and _is(m, PURE))


def _chain(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    chain = graph.find_shortest_chain(importer=importer, imported=imported) or ()
    return " -> ".join(_ours(m) for m in chain)


def test_the_layer_lists_name_real_modules(graph: grimp.ImportGraph) -> None:
    ours = {_ours(m) for m in graph.modules if m.startswith(PACKAGE + ".")}
    for prefix in (*PURE, *IMPURE, *(m for ms in ADAPTERS.values() for m in ms)):
        assert any(m == prefix or m.startswith(prefix + ".") for m in ours), prefix
    assert len(_pure(graph)) > 20


def test_pure_layers_reach_no_collector_probe_docker_or_subprocess(
    graph: grimp.ImportGraph,
) -> None:
    bad = [
        _chain(graph, module, reached)
        for module in _pure(graph)
        for reached in sorted(graph.find_upstream_modules(module))
        if (reached.startswith(PACKAGE) and _is(reached, IMPURE)) or reached in IMPURE_EXTERNAL
    ]
    assert bad == []


def test_rules_reach_no_probe(graph: grimp.ImportGraph) -> None:
    rules = [m for m in graph.modules if _is(m, ("rules",))]
    bad = [
        _chain(graph, m, r)
        for m in rules
        for r in graph.find_upstream_modules(m)
        if r.startswith(PACKAGE) and _is(r, ("probe",))
    ]
    assert bad == []


@pytest.mark.parametrize("library", sorted(ADAPTERS))
def test_each_native_library_has_its_adapters_only(graph: grimp.ImportGraph, library: str) -> None:
    users = {_ours(m) for m in graph.find_modules_that_directly_import(library)}
    assert users == ADAPTERS[library]


def test_judging_imports_no_output_library(graph: grimp.ImportGraph) -> None:
    """Output libraries belong to the renderers and the CLI, not to the judging."""
    judging = [m for m in graph.modules if _is(m, ("rules", "report", "evaluate", "facts"))]
    bad = [
        _chain(graph, m, lib)
        for m in judging
        for lib in ("rich", "typer", "prometheus_client")
        if lib in graph.modules and graph.chain_exists(importer=m, imported=lib)
    ]
    assert bad == []
