"""``model``: read a model directory (config, quantization, safetensors headers; never the
weights) and size it against the GPUs of this host or of ``--facts``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from blackwell_doctor.cli.basics import EXAMPLES, SUMMARIES, ExampleName, Output, format_option
from blackwell_doctor.cli.options import GpuTimeoutBrief, ModelHub
from blackwell_doctor.cli.output import terminal_width, write
from blackwell_doctor.render.formats import ModelFormat

GpuMemoryUtilization = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        metavar="FRACTION",
        help="Share of each GPU's memory the runtime may take (vLLM's option; default 0.9).",
    ),
]


def model(
    model_dir: Annotated[
        Path | None,
        typer.Argument(
            help="The model directory (config.json, hf_quant_config.json, *.safetensors), or "
            "ORG/NAME[@REVISION] from the local Hugging Face cache (HF_HOME, HF_HUB_CACHE; "
            "offline) or with --hub from the Hub; not with --example.",
            show_default=False,
        ),
    ] = None,
    hub: ModelHub = False,
    facts_file: Annotated[
        Path | None,
        typer.Option(
            "--facts",
            help="Size against the GPUs of a facts file written by `collect` (- for stdin) "
            "instead of this host's.",
        ),
    ] = None,
    fmt: Annotated[ModelFormat, format_option()] = ModelFormat.RICH,
    output: Output = None,
    utilization: GpuMemoryUtilization = None,
    gpu_timeout: GpuTimeoutBrief = None,
    example: ExampleName = None,
) -> None:
    """Read a model directory (config, quantization, safetensors headers; never the weights)
    and say whether it fits on these GPUs per tensor-parallel size, with the arithmetic.
    Exit 1 when it fits at no tensor-parallel size."""
    from blackwell_doctor.app.model import ModelRequest
    from blackwell_doctor.app.model import model as model_flow
    from blackwell_doctor.render.model import render_model

    if example is not None:
        from blackwell_doctor.app.examples import replace_options

        given = {"model_dir": model_dir, "facts_file": facts_file}
        ex = replace_options(
            example, given, part="model", command="model", conflicting=("DIR", "--facts")
        )
        model_dir, facts_file = ex.model, ex.facts
    if model_dir is None:
        from blackwell_doctor.facts.errors import UserError

        raise UserError(
            "model needs DIR, the model directory, or ORG/NAME[@REVISION] (or --example NAME)"
        )
    report = model_flow(
        ModelRequest(
            model_dir=model_dir,
            hub=hub,
            facts_file=facts_file,
            gpu_timeout_s=gpu_timeout,
            utilization=utilization,
        )
    )
    text = render_model(report, fmt, width=terminal_width(output))
    if example is not None:  # the examples folder as <examples>, not this machine's path
        from blackwell_doctor.app.examples import shown

        text = shown(text, fmt.value)
    write(text, output)
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command("model", short_help=SUMMARIES["model"], epilog=EXAMPLES["model"])(model)
