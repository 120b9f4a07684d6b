"""The examples shipped with the package: ``checks/examples.toml`` (names, titles, where each
came from, their files) and the files themselves under the top-level ``examples/`` folder
(``blackwell_doctor/_data/examples`` in a wheel)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import msgspec

from blackwell_doctor.ruledata.checkdata import CatalogueError, load_shipped
from blackwell_doctor.ruledata.resources import data_dir


class Example(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One example: its parts are file names relative to ``examples/``."""

    name: str
    title: str
    origin: str
    commands: list[str]
    facts: str | None = None
    logs: list[str] = []
    bench: str | None = None
    model: str | None = None
    compare: list[str] | None = None
    soak: str | None = None
    # A fleet of host examples, by name: each node is judged as `check --example NAME`
    # judges it (its facts with its logs, bench run and model), so that one host gets one
    # verdict whichever command shows it (issue 40).
    nodes: list[str] = []
    trace: str | None = None  # a request trace, for bench --url URL --example NAME

    def files(self) -> list[str]:
        """Every file or directory the example names, in its parts' order (a fleet's nodes
        are other examples: their files are theirs)."""
        named = [self.facts, *self.logs, self.bench, self.model, self.soak, self.trace]
        return [f for f in named if f is not None] + [*(self.compare or [])]


class ExampleWords(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    heading: str
    origin: str
    commands: str
    files: str
    nodes: str
    unknown: str
    missing_part: str
    conflicts: str
    apply_plan_only: str
    no_gpu: str
    stands_for: str


class ExampleCatalogue(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    words: ExampleWords
    example: list[Example]

    def named(self, name: str) -> Example | None:
        return next((e for e in self.example if e.name == name), None)


@cache
def load_examples() -> ExampleCatalogue:
    """``checks/examples.toml``, validated: unique names, two runs per compare, a fleet's
    nodes host examples, paths inside ``examples/``."""
    catalogue = load_shipped("examples.toml", ExampleCatalogue)
    names = [e.name for e in catalogue.example]
    if len(set(names)) != len(names):
        raise CatalogueError("checks/examples.toml: an example name appears twice")
    hosts = {e.name for e in catalogue.example if e.facts is not None}
    for e in catalogue.example:
        if e.compare is not None and len(e.compare) != 2:
            raise CatalogueError(f"checks/examples.toml: {e.name}: compare needs two runs")
        for node in e.nodes:
            if node not in hosts:
                raise CatalogueError(
                    f"checks/examples.toml: {e.name}: node {node!r} is no host example"
                )
        for f in e.files():
            if f.startswith("/") or ".." in Path(f).parts:
                raise CatalogueError(f"checks/examples.toml: {e.name}: {f!r} leaves examples/")
    return catalogue


def example_path(name: str) -> Path:
    """The shipped file or directory ``examples/<name>`` on disk."""
    return Path(str(data_dir("examples"))) / name
