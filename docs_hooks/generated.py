"""The documentation that is generated, never written twice: the checks reference and the
README's checks table from checks/catalogue.toml, and each command's options from its
``--help`` (the click command typer builds).

MkDocs runs this file as a hook (mkdocs.yml ``hooks:``): a page's ``<!-- generated:NAME -->``
line is replaced by :data:`GENERATORS` ``[NAME]()``. tests/test_docs.py compares the README's
block between ``<!-- generated:checks-table -->`` and ``<!-- /generated -->`` with the same
function, so the README cannot drift from the catalogue either.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blackwell_doctor.ruledata.rules import CheckSpec, RemedyText, load_rule_data

MARKER = re.compile(r"^<!-- generated:([a-z-]+) -->$", re.MULTILINE)


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def checks_table() -> str:
    """One row per check: id (linked to its entry in the reference), severity, title."""
    rows = ["| check | severity | passes when |", "|---|---|---|"]
    for spec in load_rule_data().checks.values():
        rows.append(
            f"| [`{spec.id}`](docs/checks.md#{_anchor(spec.id)}) | {spec.severity.value} "
            f"| {_cell(spec.title)} |"
        )
    return "\n".join(rows)


def _anchor(check_id: str) -> str:
    return check_id.replace(".", "")


def _remedy(name: str, remedy: RemedyText) -> list[str]:
    step = f" (the node's step: `{remedy.action}`)" if remedy.action else ""
    out = [
        f"- **{name}**{step}: {' '.join(remedy.summary.split())}"
        if remedy.summary
        else f"- **{name}**{step}"
    ]
    out += [f"    - `{c}`" for c in remedy.commands]
    out += [f"    - <{link}>" for link in remedy.links]
    return out


def _check(spec: CheckSpec) -> list[str]:
    lines = [
        f"### `{spec.id}` {{#{_anchor(spec.id)}}}",
        "",
        f"{spec.title}.",
        "",
        f"- severity: **{spec.severity.value}**",
    ]
    if spec.requires:
        lines.append("- needs first: " + ", ".join(f"`{r}`" for r in spec.requires))
    if spec.source:
        lines.append(f"- source: {' '.join(spec.source.split())}")
    lines.append("")
    remedies: list[str] = []
    if spec.remedy is not None:
        remedies += _remedy("remedy", spec.remedy)
    for case, remedy in spec.cases.items():
        remedies += _remedy(f"case `{case}`", remedy)
    for name, commands in spec.command_sets.items():
        remedies.append(f"- **commands `{name}`**")
        remedies += [f"    - `{c}`" for c in commands]
    if remedies:
        lines += [
            "What it says, as the catalogue words it (`{name}` is filled from the host):",
            "",
            *remedies,
            "",
        ]
    return lines


def checks_reference() -> str:
    """Every check of the catalogue, by family, with its remedy per case."""
    rules = load_rule_data()
    lines: list[str] = []
    family = ""
    for spec in rules.checks.values():
        if spec.family != family:
            family = spec.family
            lines += [f"## {family}", ""]
        lines += _check(spec)
    lines += ["## What recommend makes of them", ""]
    lines += ["| order | action | for |", "|---|---|---|"]
    for action in sorted(rules.actions, key=lambda a: a.order):
        lines.append(
            f"| {action.order} | {_cell(action.title)} | "
            + ", ".join(f"`{c}`" for c in action.checks)
            + " |"
        )
    return "\n".join(lines) + "\n"


def command_options(name: str) -> list[str]:
    """Every option (long names) of command ``name``, as its ``--help`` lists them."""
    import typer

    from blackwell_doctor.cli import app

    group: Any = typer.main.get_command(app)
    command = group.commands[name]
    return sorted(
        opt
        for param in command.params
        for opt in (*param.opts, *param.secondary_opts)
        if opt.startswith("--")
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "checks-table": checks_table,
    "checks-reference": checks_reference,
}


def expand(markdown: str) -> str:
    """``markdown`` with every ``<!-- generated:NAME -->`` line replaced."""
    return MARKER.sub(
        lambda m: GENERATORS[m.group(1)]().replace("docs/checks.md", "checks.md"), markdown
    )


# A link from a page to a file of the repository outside docs/ (`../checks/x.toml`): it works
# where the Markdown is read in the repository; on the site it becomes the file's path as code,
# and a target that does not exist is a warning (which `mkdocs build --strict` fails on).
_OUTSIDE = re.compile(r"\[([^\]]+)\]\((\.\./[^)#\s]+)(#[^)]*)?\)")
_log = logging.getLogger("mkdocs.hooks.generated")


def outside_links(markdown: str, page_dir: Path, docs_dir: Path) -> str:
    """``markdown`` with its links to repository files outside ``docs_dir`` as code."""
    repo = docs_dir.resolve().parent

    def plain(m: re.Match[str]) -> str:
        text, target = m.group(1), m.group(2)
        path = (page_dir / target).resolve()
        if not path.is_relative_to(repo) or not path.exists():
            _log.warning("link %r: no such file in the repository", target)
            return m.group(0)
        shown = str(path.relative_to(repo))
        return text if shown in text else f"{text} (`{shown}`)"

    return _OUTSIDE.sub(plain, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:  # MkDocs hook
    docs_dir = Path(config["docs_dir"])
    page_dir = (docs_dir / page.file.src_uri).parent
    return outside_links(expand(markdown), page_dir, docs_dir)
