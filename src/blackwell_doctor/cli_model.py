"""The ``model`` command (issue 12). ``cli.py`` calls :func:`register`; the work is in
``blackwell_doctor.checkpoint``."""

from __future__ import annotations

import math
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class ModelFormat(StrEnum):
    rich = "rich"
    json = "json"
    markdown = "markdown"


def register(app: typer.Typer) -> None:
    """Add ``model`` to ``app``."""

    @app.command("model")
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
                help="Size against the GPUs of a facts file written by `collect` (- for "
                "stdin) instead of this host's.",
            ),
        ] = None,
        fmt: Annotated[
            ModelFormat, typer.Option("--format", "-f", help="Output format.")
        ] = ModelFormat.rich,
        output: Annotated[
            Path | None,
            typer.Option("--output", "-o", help="Write to this file instead of standard output."),
        ] = None,
        utilization: Annotated[
            float | None,
            typer.Option(
                "--gpu-memory-utilization",
                help="Share of each GPU's memory the runtime may take (vLLM's option; "
                "default 0.9).",
            ),
        ] = None,
        gpu_timeout: Annotated[
            float | None,
            typer.Option(
                "--gpu-timeout", min=1.0, max=3600.0, help="Seconds NVML/CUDA get to answer."
            ),
        ] = None,
    ) -> None:
        """Read a model directory (config, quantization, safetensors headers; never the
        weights) and say whether it fits on these GPUs, per tensor-parallel size, with the
        arithmetic. Exit 1 when it fits at no tensor-parallel size."""
        from blackwell_doctor import cli
        from blackwell_doctor.checkpoint.inspect import inspect_model
        from blackwell_doctor.checkpoint.report import render_json, render_text
        from blackwell_doctor.facts import FactsError, decode_facts

        if utilization is not None and (
            not math.isfinite(utilization) or not 0.0 < utilization <= 1.0
        ):
            raise cli.UserError(
                f"--gpu-memory-utilization must be above 0 and at most 1, got {utilization}"
            )
        if not model_dir.is_dir():
            raise cli.UserError(f"model directory {model_dir} is not a directory")
        if facts_file is not None:
            if gpu_timeout is not None:
                raise cli.UserError("--gpu-timeout applies to this host, not to --facts")
            try:
                facts = decode_facts(cli._read_facts(facts_file), source=str(facts_file))
            except FactsError as exc:
                raise cli.UserError(str(exc)) from None
        else:
            from blackwell_doctor.collect import collect_facts

            facts = collect_facts(
                host_root=Path("/"),
                environ=os.environ,
                gpu_timeout_s=cli._gpu_timeout(gpu_timeout),
                probes=False,
            )
        report = inspect_model(model_dir, facts, utilization=utilization)
        if report.model.architecture is None and report.shards == 0:
            detail = next((p.detail for p in report.problems if p.kind == "config"), "missing")
            raise cli.UserError(
                f"{model_dir}: no usable config.json ({detail}) and no safetensors weights"
            )
        if fmt is ModelFormat.json:
            text = render_json(report)
        else:
            text = render_text(report, markdown=fmt is ModelFormat.markdown)
        cli._write(text, output)
        raise typer.Exit(report.exit_code)
