"""``--example NAME`` on check, recommend, apply, model, fleet and bench: the example's shipped
files in place of this host's (facts, logs, bench run, model directory, compare pair, fleet),
and the ``examples`` listing. A name or a part that does not exist is a UserError."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackwell_doctor.facts.errors import UserError
from blackwell_doctor.ruledata.examples import (
    Example,
    ExampleCatalogue,
    example_path,
    load_examples,
)

if TYPE_CHECKING:
    from blackwell_doctor.facts.document import Facts

# Each part an example can have, and the command option or argument it stands in for.
PARTS = ("facts", "logs", "bench", "model", "compare", "soak", "fleet", "trace")


@dataclass(frozen=True)
class ExampleInputs:
    """What a command reads for ``--example``: paths on disk, None where the example has no
    such part."""

    name: str
    facts: Path | None
    logs: tuple[str, ...]
    bench: Path | None
    model: Path | None
    compare: tuple[Path, Path] | None
    # fleet --example: the host examples judged as nodes (a host example: itself alone).
    nodes: tuple[ExampleInputs, ...]
    trace: Path | None = None
    # bench --example: a run document shown as it is (a soak: soak-60s; issue 40).
    soak: Path | None = None


def find(name: str, *, part: str, command: str) -> ExampleInputs:
    """The example ``name``, which must have ``part`` (one of :data:`PARTS`) for
    ``command``."""
    catalogue = load_examples()
    words = catalogue.words
    example = catalogue.named(name)
    if example is None:
        names = ", ".join(e.name for e in catalogue.example)
        raise UserError(words.unknown.format(name=name, names=names))
    if not _has(example, part):
        names = ", ".join(e.name for e in catalogue.example if _has(e, part))
        raise UserError(
            words.missing_part.format(name=name, part=part, command=command, names=names)
        )
    return _inputs(example)


def replace_options(
    name: str,
    params: Mapping[str, Any],
    *,
    part: str,
    command: str,
    conflicting: Sequence[str],
) -> ExampleInputs:
    """The example ``name`` for ``command``, refusing (UserError) the options it replaces
    when they were given too: ``conflicting`` are option names whose parameter (``--facts``
    is ``facts_file``) is set in ``params``."""
    given = [o for o in conflicting if params.get(_param(o)) not in (None, False, [], ())]
    if given:
        raise UserError(load_examples().words.conflicts.format(name=name, options=", ".join(given)))
    return find(name, part=part, command=command)


def has_part(name: str, part: str) -> bool:
    """Whether the example ``name`` exists and has ``part``."""
    example = load_examples().named(name)
    return example is not None and _has(example, part)


def node_facts(node: ExampleInputs) -> Facts:
    """A host example's facts as ``check --example NAME`` obtains them: its facts file with
    its logs scanned in, its bench run and its model (``fleet --example``)."""
    import os
    import sys

    from blackwell_doctor.app.obtain import FactsRequest, LogRequest, obtain_facts

    request = FactsRequest(
        facts_file=node.facts,
        logs=LogRequest(paths=node.logs),
        bench_file=node.bench,
        model_dir=node.model,
        label=f"example {node.name}",
    )
    return obtain_facts(request, environ=os.environ, stdin=sys.stdin.buffer).facts


def no_gpu_hint(command: str) -> str:
    """The sentence that points a host without a GPU to an example of ``command``."""
    catalogue = load_examples()
    part = {"model": "model", "apply": "model"}.get(command, "facts")
    name = next(
        (e.name for e in catalogue.example if _has(e, part) and _has(e, "facts")),
        catalogue.example[0].name,
    )
    return catalogue.words.no_gpu.format(command=command, name=name)


def apply_plan_only() -> str:
    return load_examples().words.apply_plan_only


def catalogue() -> ExampleCatalogue:
    return load_examples()


def _param(option: str) -> str:
    return {"--facts": "facts_file", "DIR": "model_dir", "INPUTS": "inputs"}.get(
        option, option.lstrip("-").replace("-", "_")
    )


def _has(example: Example, part: str) -> bool:
    if part == "fleet":  # a host example is a fleet of one node
        return bool(example.nodes or example.facts)
    return bool(getattr(example, part))


def _inputs(example: Example, catalogue: ExampleCatalogue | None = None) -> ExampleInputs:
    def path(name: str | None) -> Path | None:
        return None if name is None else example_path(name)

    compare = None
    if example.compare is not None:
        before, after = example.compare
        compare = (example_path(before), example_path(after))
    host = ExampleInputs(
        name=example.name,
        facts=path(example.facts),
        logs=tuple(str(example_path(f)) for f in example.logs),
        bench=path(example.bench),
        model=path(example.model),
        compare=compare,
        nodes=(),
        trace=path(example.trace),
        soak=path(example.soak),
    )
    if example.nodes:
        cat = catalogue or load_examples()
        nodes = [cat.named(n) for n in example.nodes]
        return replace(host, nodes=tuple(_inputs(n, cat) for n in nodes if n is not None))
    return replace(host, nodes=(host,) if example.facts else ())


# How the examples folder is written in what an --example command prints (issue 40: the
# outputs carried this machine's site-packages path), and how each format writes it.
SHOWN = "<examples>"
_ESCAPED = {"html": "&lt;examples&gt;", "junit": "&lt;examples&gt;"}
_COMMAND_FORMATS = ("rich", "markdown", "shell", "compose")
_COMMENTED = ("shell", "compose")


def _roots() -> list[str]:
    """The examples folder as a path may spell it (as found, and resolved), longest first."""
    root = example_path("")
    return sorted({str(root), str(root.resolve())}, key=len, reverse=True)


def _in_markdown(text: str, root: str) -> str:
    """``root`` written as <examples> in Markdown: as typed in a code span or a fenced block,
    escaped elsewhere (CommonMark 6.6: ``<examples>`` alone is a raw HTML tag, which a
    ticket would drop)."""
    from blackwell_doctor.render.markdown import prose

    # Outside code, Markdown prose escapes the path as it escapes any text (an installed
    # package's ".../blackwell_doctor/_data/examples" reads "\\_data" there).
    escaped = prose(root)
    out = []
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            line = line.replace(root, SHOWN)
        elif root in line or escaped in line:
            parts = line.split("`")  # odd parts are inside a code span
            line = "`".join(
                p.replace(root, SHOWN)
                if i % 2
                else p.replace(root, "\\" + SHOWN).replace(escaped, "\\" + SHOWN)
                for i, p in enumerate(parts)
            )
        out.append(line)
    return "\n".join(out)


def _escaped_in(root: str, text: str) -> bool:
    from blackwell_doctor.render.markdown import prose

    return prose(root) in text


def shown(text: str, fmt: str, *, command: bool = False) -> str:
    """What an ``--example`` command prints, with the examples folder's absolute path
    written as <examples> (display only: the facts judged and a launch's mounts keep the
    real path), escaped as ``fmt`` (a format's value: rich, json, markdown, html, ...)
    needs. Where a command to paste is shown (``command``), one line says what <examples>
    stands for (a comment in a script or a compose file)."""
    found = False
    for root in _roots():
        if root not in text and not (fmt == "markdown" and _escaped_in(root, text)):
            continue
        found = True
        if fmt == "markdown":
            text = _in_markdown(text, root)
        else:
            text = text.replace(root, _ESCAPED.get(fmt, SHOWN))
    if found and command and fmt in _COMMAND_FORMATS:
        line = load_examples().words.stands_for
        if fmt in _COMMENTED:
            line = "# " + line
        elif fmt == "markdown":
            # A paragraph of its own; it starts with <examples>, raw HTML in Markdown.
            line = "\n\\" + line
        text = text.rstrip("\n") + "\n" + line + "\n"
    return text


def shown_pieces(pieces: Iterator[str], fmt: str) -> Iterator[str]:
    """:func:`shown` of each piece of a streamed document (fleet's JSON: a path is inside
    one node's piece)."""
    for piece in pieces:
        yield shown(piece, fmt)
