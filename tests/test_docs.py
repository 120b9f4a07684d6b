"""The README and the documentation site say what the tool does (issue 23): the README's
example output is what the command prints, its checks table is the catalogue's, every
command's options are on its page, every "REFERENCE §" citation resolves to the shipped
field reference, and the LICENSE is the one pyproject names. (`.ci/run` builds the site with
`mkdocs build --strict`: dead links, missing pages and anchors fail it.)"""

from __future__ import annotations

import importlib.util
import re
import shlex
import tomllib
from types import ModuleType

import pytest

from blackwell_doctor.cli.commands import COMMANDS
from tests.cli import run
from tests.conftest import REPO, as_documented

README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = REPO / "docs"


def _generated() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generated", REPO / "docs_hooks" / "generated.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_a_front_page() -> None:
    lines = README.splitlines()
    assert len(lines) <= 220, len(lines)
    install = "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/blackwell-doctor check"
    assert install in README
    assert "bash .ci/run" in README


def test_readme_example_is_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    m = re.search(
        r"<!-- example: blackwell-doctor (?P<argv>[^\n]*) -->\n```console\n\$ [^\n]*\n"
        r"(?P<out>.*?)```\n<!-- /example -->",
        README,
        re.DOTALL,
    )
    assert m is not None, "the README's example block"
    r = run(m.group("argv").split(), capsys)
    assert r.code == 1
    assert as_documented(r.out) == m.group("out")


def test_readme_checks_table_is_the_catalogue() -> None:
    m = re.search(r"<!-- generated:checks-table -->\n(.*?)\n<!-- /generated -->", README, re.DOTALL)
    assert m is not None
    assert m.group(1) == _generated().checks_table()


def test_readme_links_resolve() -> None:
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", README):
        assert (REPO / target).exists(), target


@pytest.mark.parametrize("name", [c.replace("_", "-") for c in COMMANDS])
def test_every_option_of_a_command_is_on_its_page(name: str) -> None:
    page = (DOCS / f"{name}.md").read_text(encoding="utf-8")
    missing = [
        o
        for o in _generated().command_options(name)
        if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", page)
    ]
    assert not missing, f"docs/{name}.md does not mention {missing}"


def _cited() -> set[tuple[str, str]]:
    """(file, section) of every "REFERENCE §N[.M]" (or REFERENCE.md §N, §N and §M) cited in
    the shipped code, catalogues, examples and documentation."""
    cite = re.compile(r"REFERENCE(?:\.md)?,? (§[0-9.]+(?:(?:,| and) §[0-9.]+)*)")
    found: set[tuple[str, str]] = set()
    roots = [REPO / "src", REPO / "checks", REPO / "docs", REPO / "README.md", REPO / "examples"]
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.suffix not in {".py", ".toml", ".md", ".json"} or path.name == "reference.md":
                continue
            text = path.read_text(encoding="utf-8")
            for m in cite.finditer(text):
                for section in re.findall(r"§([0-9]+(?:\.[0-9]+)?)", m.group(1)):
                    found.add((str(path.relative_to(REPO)), section.rstrip(".")))
    return found


def test_every_reference_citation_resolves() -> None:
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    sections = dict(
        re.findall(r"^## ([0-9]+)\. .*? \{#s\1\}\n(.*?)(?=^## |\Z)", reference, re.M | re.S)
    )
    cited = _cited()
    assert len(cited) > 20
    for where, section in sorted(cited):
        number, _, item = section.partition(".")
        assert number in sections, f"{where}: REFERENCE §{section}: no section {number}"
        if item:
            assert re.search(rf"^{item}\. ", sections[number], re.M), (
                f"{where}: REFERENCE §{section}: section {number} has no item {item}"
            )


def test_license_is_the_one_pyproject_names() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_docs_nav_starts_at_the_start_page_and_lists_every_page_once() -> None:
    """Issue 40: with no nav the site listed pages by file name (`apply --verify` first,
    no start page). The nav begins at index.md, then install and the examples, and names
    every page under docs/ exactly once (the strict build also fails on one left out)."""
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert "strict: true" in config
    nav = config.split("\nnav:\n", 1)[1].split("\nhooks:", 1)[0]
    listed = re.findall(r": ([\w-]+\.md)$", nav, re.MULTILINE)
    assert listed[:3] == ["index.md", "install.md", "examples.md"]
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md"))


def test_docs_pages_are_all_markdown_under_docs() -> None:
    """Every command has its page, and every page a README link names exists."""
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert "strict: true" in config
    pages = {p.stem for p in DOCS.glob("*.md")}
    assert {c.replace("_", "-") for c in COMMANDS} <= pages
    assert {"index", "checks", "reference", "exit-codes", "schemas", "fleets"} <= pages


def test_checks_reference_names_every_check() -> None:
    gen = _generated()
    text = gen.expand((DOCS / "checks.md").read_text(encoding="utf-8"))
    from blackwell_doctor.ruledata.rules import load_rule_data

    for spec in load_rule_data().checks.values():
        assert f"### `{spec.id}`" in text
        assert spec.title in text


def test_links_to_repository_files_outside_docs(caplog: pytest.LogCaptureFixture) -> None:
    """A page may link a repository file (`../checks/x.toml`, which works where the Markdown
    is read in the repository): on the site it is the path as code; a missing one warns,
    which fails `mkdocs build --strict`."""
    gen = _generated()
    text = "[the fit data](../checks/model_fit.toml) and [gone](../checks/nope.toml)"
    out = gen.outside_links(text, DOCS, DOCS)
    assert out.startswith("the fit data (`checks/model_fit.toml`) and [gone](")
    assert "no such file in the repository" in caplog.text


def _example_blocks() -> list[tuple[str, str, str]]:
    """Every ``<!-- example: blackwell-doctor ARGS -->`` console block of the documentation
    pages: (page, ARGS, the output shown)."""
    blocks = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(
            r"<!-- example: blackwell-doctor (?P<argv>[^\n]*) -->\n```console\n\$ [^\n]*\n"
            r"(?P<out>.*?)```\n<!-- /example -->",
            text,
            re.DOTALL,
        ):
            blocks.append((page.name, m.group("argv"), m.group("out")))
    return blocks


@pytest.mark.parametrize(("page", "argv", "shown"), _example_blocks())
def test_a_pages_example_is_what_the_command_prints(
    page: str, argv: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(argv.split(), capsys)
    shown_now = as_documented(r.out)
    assert shown_now == shown, f"docs/{page}: `blackwell-doctor {argv}` prints something else"


def test_the_bench_page_shows_a_real_a_a_and_a_b_compare() -> None:
    shown = {argv for page, argv, _ in _example_blocks() if page == "bench.md"}
    assert any("--example same-server" in a for a in shown), shown
    assert any("--example max-num-seqs-1" in a for a in shown), shown


def _readme_one_liners() -> list[str]:
    block = README.split("Each of these is one command", 1)[1].split("```sh\n", 1)[1]
    return [line for line in block.split("```", 1)[0].splitlines() if line.strip()]


@pytest.mark.parametrize("line", _readme_one_liners())
def test_readme_one_liners_run_pasted_after_the_install(
    line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40: the one-liners said `blackwell-doctor ...`, which fails pasted unless the
    venv is active. They call the install line's .venv/bin/ (no activation needed), and
    each runs (the bootstrap at its smallest for bench: layout, not intervals)."""
    command = shlex.split(line, comments=True)
    assert command[0] == ".venv/bin/blackwell-doctor"
    argv = command[1 : command.index(">")] if ">" in command else command[1:]
    if argv[0] == "bench" and "soak-60s" not in argv:
        argv += ["--resamples", "200"]
    assert run(argv, capsys).code in (0, 1)
