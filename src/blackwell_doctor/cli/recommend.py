"""``recommend``: the findings as ordered actions and a runtime launch derived from the
facts."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from blackwell_doctor.cli.basics import (
    EXAMPLES,
    SUMMARIES,
    ExampleName,
    Output,
    format_option,
    grouped,
)
from blackwell_doctor.cli.options import BenchFile, Launch, LaunchFacts, LaunchFactsFile, ModelDir
from blackwell_doctor.cli.output import on_terminal, terminal_width, text_style, write
from blackwell_doctor.render.formats import RecommendFormat


@grouped
def recommend(
    *,
    facts_file: LaunchFactsFile = None,
    fmt: Annotated[
        RecommendFormat | None,
        format_option(
            "Output format (default: rich on a terminal, markdown in a pipe or a file).",
            show_default=False,
        ),
    ] = None,
    output: Output = None,
    model_dir: ModelDir = None,
    launch: Launch,
    facts: LaunchFacts,
    bench: BenchFile = None,
    example: ExampleName = None,
) -> None:
    """Turn the findings into ordered actions and a runtime launch derived from this host
    (rich, markdown, json, shell, compose). Never promises a speed-up: measure after."""
    from blackwell_doctor.app.advise import advise
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.recommend.options import launch_options
    from blackwell_doctor.render.recommend import NeedsLaunch, render_recommendation

    # The model directory is the runtime's mount: one not downloaded yet gives a launch
    # that is not sized (a note says so), not a usage error.
    facts = facts._replace(
        facts_file=facts_file, model_dir=model_dir, model_mount=True, bench=bench
    ).with_example(example, command="recommend", conflicting=("--facts", "--host-root"))
    options = launch_options(
        launch.request(facts.model_dir), environ=os.environ, on_this_host=facts.facts_file is None
    )
    request = facts.request()
    advice = advise(
        request, options, catalogue=launch.catalogue, environ=os.environ, stdin=sys.stdin.buffer
    )
    color, _ = text_style(output)
    width = terminal_width(output)
    if fmt is None:  # the terminal's view on a terminal; Markdown for a pipe or a ticket
        fmt = RecommendFormat.RICH if on_terminal(output) else RecommendFormat.MARKDOWN
    try:
        text = render_recommendation(
            advice.recommendation, fmt, advice.spec, color=color, width=width
        )
    except NeedsLaunch as exc:
        hint = ""
        if advice.recommendation.launch is None:  # no GPU in the facts
            from blackwell_doctor.app.examples import no_gpu_hint

            hint = "; " + no_gpu_hint(f"recommend -f {fmt.value}")
        raise UserError(f"--format {fmt.value}: {exc}{hint}") from None
    if example is not None:  # the examples folder as <examples>, not this machine's path
        from blackwell_doctor.app.examples import shown

        text = shown(text, fmt.value, command=True)
    write(text, output)


def register(app: typer.Typer) -> None:
    app.command(short_help=SUMMARIES["recommend"], epilog=EXAMPLES["recommend"])(recommend)
