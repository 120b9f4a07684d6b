"""The options and words every command shares, declared once (typer ``Annotated`` aliases):
``--format``, ``--output``, the judging options (``--fail-on``, ``--strict``, ``--select``,
``--ignore``: :func:`judging_options`), ``--verbose``, ``--example``, the option groups'
machinery (:func:`grouped`) and each command's line and examples in ``--help``.

Importing this module costs typer and the standard library only and declares eight
options: ``scan-logs``, ``fleet``, ``probe`` and ``examples`` import it alone, not
:mod:`blackwell_doctor.cli.options` (the ~50 options of the commands that read a host,
launch a runtime or bench: ~13M instructions of each start-up, issue 36).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar

import typer

# ``--fail-on``: the lowest status (check) or severity (scan-logs) that makes exit 1; one
# definition, the documents' (typer offers a Literal's values as the choices).
from blackwell_doctor.report.status import FailOn as FailOn

if TYPE_CHECKING:
    from blackwell_doctor.app.obtain import Obtained
    from blackwell_doctor.report.check import Report


def split(values: list[str] | None) -> list[str]:
    """Repeatable options that also take comma-separated lists (``--select a,b``)."""
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


@contextmanager
def selection_errors() -> Iterator[None]:
    """A --select/--ignore that names no check is a usage error (one line, exit 2)."""
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.rules.engine import SelectionError

    try:
        yield
    except SelectionError as exc:
        raise UserError(str(exc)) from None


class Judging(NamedTuple):
    """How a command chooses and judges checks, as given (:data:`CheckJudging` and the
    groups like it), typed: --fail-on, --strict and, where the command takes them,
    --select/--ignore."""

    fail_on: FailOn
    strict: bool
    select: list[str] | None = None
    ignore: list[str] | None = None


def judge(obtained: Obtained, judging: Judging, *, embed_facts: bool = False) -> Report:
    """The report on the facts a command obtained, with its judging options as given."""
    from blackwell_doctor.rules.evaluate import evaluate

    with selection_errors():
        return evaluate(
            obtained.facts,
            select=split(judging.select),
            ignore=split(judging.ignore),
            fail_on=judging.fail_on,
            strict=judging.strict,
            source=obtained.source,
            embed_facts=embed_facts,
        )


# How check, slurm-health and fleet choose and judge checks. slurm-health words --fail-on and
# --strict by what they do there (drain the node), fleet says what --strict adds: those take
# the option from the factories below with their own help.
def fail_on_option(help: str = "Lowest status that makes the exit code 1.") -> Any:
    return typer.Option("--fail-on", help=help)


def strict_option(help: str = "Exit 3 when a check could not be evaluated.") -> Any:
    return typer.Option("--strict", help=help)


# Every command's --format, over the command's own format enum (render/formats.py).
def format_option(help: str = "Output format.", *, show_default: bool = True) -> Any:
    return typer.Option("--format", "-f", help=help, show_default=show_default)


FailOnStatus = Annotated[FailOn, fail_on_option()]
Strict = Annotated[bool, strict_option()]


Select = Annotated[
    list[str] | None,
    typer.Option(
        "--select", metavar="ID", help="Only these check ids or families (prefixes, repeatable)."
    ),
]
Ignore = Annotated[
    list[str] | None,
    typer.Option(
        "--ignore", metavar="ID", help="Skip these check ids or families (prefixes, repeatable)."
    ),
]

# check and audit: the evidence of the checks that passed too (fleet words its own).
Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Show evidence for passing checks too.")
]
Output = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write to this file instead of standard output."),
]


ExampleName = Annotated[
    str | None,
    typer.Option(
        "--example",
        metavar="NAME",
        help="Use a shipped example (a real captured or reconstructed host, its logs, bench "
        "runs, model) instead of this host: no GPU needed. `blackwell-doctor examples` "
        "lists them.",
    ),
]


# Options several commands declare alike, in the same order: declared once here and read
# into one typed value. A command names the group by a keyword-only parameter annotated
# with one of the aliases below (``facts: HostFacts``); :func:`grouped` puts the group's
# options in that parameter's place (so --help lists them there) and hands the command
# the value built from them.
_R = TypeVar("_R")


class OptionGroup(NamedTuple):
    """The class ``build`` made from ``options``: (its field, the field's ``Annotated``
    option alias, default)."""

    build: type
    options: tuple[tuple[str, Any, object], ...]

    def check_fields(self) -> None:
        """Each option is a field of ``build`` of the option's type: a row and a field that
        disagree fail where the command is declared, not when a user gives the option."""
        import typing

        fields = typing.get_type_hints(self.build)
        for name, alias, _ in self.options:
            wanted = typing.get_args(alias)[0]
            if fields.get(name) != wanted:
                raise TypeError(f"{self.build.__name__} has no field {name} of type {wanted}")


def grouped(command: Callable[..., _R]) -> Callable[..., _R]:
    """``command`` as typer reads it: each parameter annotated ``Annotated[T, OptionGroup]``
    becomes the group's options, and the command gets the group's ``T``."""
    signature = inspect.signature(command, eval_str=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, OptionGroup] = {}
    for param in signature.parameters.values():
        metadata = getattr(param.annotation, "__metadata__", ())
        group = next((m for m in metadata if isinstance(m, OptionGroup)), None)
        if group is None:
            params.append(param)
            continue
        group.check_fields()
        groups[param.name] = group
        params.extend(
            inspect.Parameter(name, param.kind, default=default, annotation=alias)
            for name, alias, default in group.options
        )

    @functools.wraps(command)
    def read_groups(**kwargs: Any) -> _R:
        for name, group in groups.items():
            kwargs[name] = group.build(**{opt: kwargs.pop(opt) for opt, _, _ in group.options})
        return command(**kwargs)

    read_groups.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    read_groups.__annotations__ = {p.name: p.annotation for p in params}
    read_groups.__annotations__["return"] = signature.return_annotation
    return read_groups


# How check, audit, fleet and slurm-health choose and judge checks: --fail-on and --strict,
# then (bar audit, which judges the stack checks only) --select and --ignore.
_SELECTION: tuple[tuple[str, Any, object], ...] = (
    ("select", Select, None),
    ("ignore", Ignore, None),
)


def judging_options(
    fail_on: Any = FailOnStatus, strict: Any = Strict, *, selects: bool = True
) -> OptionGroup:
    """The group of a command's judging options: ``fail_on`` and ``strict``, its aliases
    (the commands that word them by what they do there give their own)."""
    options = (("fail_on", fail_on, "fail"), ("strict", strict, False))
    return OptionGroup(Judging, options + (_SELECTION if selects else ()))


CheckJudging = Annotated[Judging, judging_options()]


# --help's words that are not an option's (issue 40): each command's line in the command
# list (a sentence that fits beside its name at 80 columns: click cuts a longer one
# mid-sentence) and its examples, one command a line, shown under its options.
SUMMARIES = {
    "check": "Judge this host (or a facts file) and report: the CI gate.",
    "collect": "Write this host's facts document, to judge anywhere.",
    "probe": "Measure the GPU's limits and run the tile probes.",
    "scan-logs": "Scan logs for fallback and failure signatures.",
    "recommend": "Ordered fixes and a runtime launch for this host.",
    "apply": "Run the recommended runtime via Docker, or plan it.",
    "model": "What a model is and whether it fits these GPUs.",
    "fleet": "Judge many nodes' facts at once, grouped by finding.",
    "slurm-health": "Drain or resume this Slurm node by its findings.",
    "bench": "Measure a serving endpoint; compare runs.",
    "audit": "Audit the Python GPU stack's kernels for this GPU.",
    "examples": "List the shipped examples (no GPU needed).",
}

EXAMPLES = {
    "check": """
blackwell-doctor check
blackwell-doctor check --fail-on warn -f junit -o report.xml
blackwell-doctor check --facts node7.json --select driver,platform
blackwell-doctor check --example wsl2-rtxpro6000x4
""",
    "collect": """
blackwell-doctor collect -o facts.json --redact
blackwell-doctor check --facts facts.json
""",
    "probe": """
blackwell-doctor probe
blackwell-doctor probe --p2p -f json -o probe.json
""",
    "scan-logs": """
blackwell-doctor scan-logs vllm.log
docker logs vllm 2>&1 | blackwell-doctor scan-logs -
blackwell-doctor scan-logs --container vllm --fail-on warn
""",
    "recommend": """
blackwell-doctor recommend --example wsl2-rtxpro6000x4
blackwell-doctor recommend -f markdown > ticket.md
blackwell-doctor recommend --model-dir /models/qwen -f compose
""",
    "apply": """
blackwell-doctor apply --model-dir /models/qwen
blackwell-doctor apply --model-dir /models/qwen --yes --verify
blackwell-doctor apply --example wsl2-rtxpro6000x4
""",
    "model": """
blackwell-doctor model /models/qwen
blackwell-doctor model openai/gpt-oss-120b --hub
blackwell-doctor model --example dgx-spark
""",
    "fleet": """
blackwell-doctor fleet facts/*.json
blackwell-doctor fleet facts/ -f markdown > fleet.md
blackwell-doctor fleet --example lab
""",
    "slurm-health": """
blackwell-doctor slurm-health --facts node7.json --fail-on warn
blackwell-doctor slurm-health --no-probe --fail-on fail
""",
    "bench": """
blackwell-doctor bench --url http://127.0.0.1:8000 -o before.json
blackwell-doctor bench --compare before.json after.json
blackwell-doctor bench --url http://127.0.0.1:8000 --rate sweep
blackwell-doctor bench --example max-num-seqs-1 -f html > compare.html
""",
    "audit": """
blackwell-doctor audit
blackwell-doctor audit --python /opt/venv/bin/python
blackwell-doctor audit --image vllm/vllm-openai:latest
""",
    "examples": """
blackwell-doctor examples
blackwell-doctor check --example h200x2
""",
}
