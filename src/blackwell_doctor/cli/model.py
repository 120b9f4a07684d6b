"""``model``: read a model directory (config, quantization, safetensors headers; never the
weights) and size it against the GPUs of this host or of ``--facts``."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from blackwell_doctor.cli.options import GpuTimeoutBrief, Output
from blackwell_doctor.cli.output import write
from blackwell_doctor.render.formats import ModelFormat

GpuMemoryUtilization = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        help="Share of each GPU's memory the runtime may take (vLLM's option; default 0.9).",
    ),
]


def checked_utilization(value: float | None) -> float | None:
    from blackwell_doctor.facts.errors import UserError

    if value is not None and (not math.isfinite(value) or not 0.0 < value <= 1.0):
        raise UserError(f"--gpu-memory-utilization must be above 0 and at most 1, got {value}")
    return value


def model(
    model_dir: Annotated[
        Path,
        typer.Argument(
            help="The model directory (config.json, hf_quant_config.json, *.safetensors).",
            show_default=False,
        ),
    ],
    facts_file: Annotated[
        Path | None,
        typer.Option(
            "--facts",
            help="Size against the GPUs of a facts file written by `collect` (- for stdin) "
            "instead of this host's.",
        ),
    ] = None,
    fmt: Annotated[
        ModelFormat, typer.Option("--format", "-f", help="Output format.")
    ] = ModelFormat.RICH,
    output: Output = None,
    utilization: GpuMemoryUtilization = None,
    gpu_timeout: GpuTimeoutBrief = None,
) -> None:
    """Read a model directory (config, quantization, safetensors headers; never the weights)
    and say whether it fits on these GPUs per tensor-parallel size, with the arithmetic.
    Exit 1 when it fits at no tensor-parallel size."""
    from blackwell_doctor.app.model import inspect_model
    from blackwell_doctor.app.obtain import FactsRequest, obtain_facts
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.render.model import render_model

    util = checked_utilization(utilization)
    if not model_dir.is_dir():
        raise UserError(f"model directory {model_dir} is not a directory")
    request = FactsRequest(facts_file=facts_file, gpu_timeout_s=gpu_timeout, probes=False)
    facts = obtain_facts(request, environ=os.environ, stdin=sys.stdin.buffer).facts
    report = inspect_model(model_dir, facts, utilization=util)
    if report.model.architecture is None and report.shards == 0:
        detail = next((p.detail for p in report.problems if p.kind == "config"), "missing")
        raise UserError(f"{model_dir}: no usable config.json ({detail}) and no safetensors weights")
    write(render_model(report, fmt), output)
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command("model")(model)
