"""``audit``: will this Python GPU stack run, natively, on this GPU? Before serving starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from blackwell_doctor.cli.basics import (
    EXAMPLES,
    SUMMARIES,
    Judging,
    OptionGroup,
    Output,
    Verbose,
    format_option,
    grouped,
    judge,
    judging_options,
)
from blackwell_doctor.cli.options import HOST, AuditModelDir, FactsOptions, StackImage, StackPython
from blackwell_doctor.cli.output import text_style, write
from blackwell_doctor.render.formats import Format

# The checks audit runs.
_JUDGED = ("stack",)
# --fail-on and --strict; no --select/--ignore (audit judges the stack checks only).
_AuditJudging = Annotated[Judging, judging_options(selects=False)]
# The stack audited, the model and the facts file beside it; then the host read, as check
# reads it, and the scan cache.
_Stack = Annotated[
    FactsOptions,
    OptionGroup(
        FactsOptions,
        (
            ("python", StackPython, None),
            ("image", StackImage, None),
            ("model_dir", AuditModelDir, None),
            (
                "facts_file",
                Annotated[
                    Path | None,
                    typer.Option(
                        "--facts",
                        help="Judge against the GPUs and driver of this facts file (`collect`; "
                        "- for stdin) instead of this host's.",
                    ),
                ],
                None,
            ),
        ),
    ),
]
_Host = Annotated[
    FactsOptions,
    OptionGroup(
        FactsOptions,
        (
            *HOST,
            (
                "no_cache",
                Annotated[
                    bool,
                    typer.Option(
                        "--no-cache", help="Read every shared object again (no scan cache)."
                    ),
                ],
                False,
            ),
        ),
    ),
]


@grouped
def audit(
    *,
    stack: _Stack,
    fmt: Annotated[Format, format_option()] = Format.RICH,
    output: Output = None,
    judging: _AuditJudging,
    host: _Host,
    embed_facts: Annotated[
        bool, typer.Option("--embed-facts", help="Include the audited facts in JSON output.")
    ] = False,
    verbose: Verbose = False,
) -> None:
    """Audit the Python GPU stack: the kernels each package carries for this GPU (native, JIT
    at start, none), Triton's ptxas, FlashInfer's precompiled kernels (--image: of an image's
    files, without running it); with --model-dir, the
    MoE and attention backend the runtime will select for that checkpoint (checks/backends.toml).
    An environment with no GPU package to audit is a usage error (exit 2)."""
    from blackwell_doctor.app.obtain import obtain_facts, require_something_to_audit
    from blackwell_doctor.render import render

    embed = embed_facts or fmt is Format.NFD
    request = stack._replace(
        # The host as it is read, beside the stack the command audits.
        host_root=host.host_root,
        gpu_timeout=host.gpu_timeout,
        no_cache=host.no_cache,
        no_probe=True,
        stack=True,
        # A live audit reads what the stack checks and the report's header read (no GPU
        # health, no AER counters: issue 36); all of it when the facts go into the output.
        select=None if embed else list(_JUDGED),
    ).request()
    obtained = obtain_facts(request, environ=os.environ, stdin=sys.stdin.buffer)
    require_something_to_audit(obtained.facts)
    report = judge(obtained, judging._replace(select=list(_JUDGED)), embed_facts=embed)
    color, width = text_style(output)
    text = render(report, fmt, color=color and fmt is Format.RICH, verbose=verbose, width=width)
    write(text, output)
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command(short_help=SUMMARIES["audit"], epilog=EXAMPLES["audit"])(audit)
