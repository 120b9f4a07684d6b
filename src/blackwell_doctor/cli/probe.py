"""``probe``: measure what this GPU grants (shared memory, block-scaled tiles, P2P), or the
tile arithmetic alone (``--plan``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from blackwell_doctor.cli.basics import EXAMPLES, SUMMARIES, Output, format_option
from blackwell_doctor.cli.output import text_style, write_outcome
from blackwell_doctor.render.formats import ProbeFormat
from blackwell_doctor.report.exitcodes import ExitCode

if TYPE_CHECKING:
    from blackwell_doctor.facts.document import Facts
    from blackwell_doctor.report.check import PresetDocument, PresetReport

# Bounds for --smem-limit: below the 48 KB default nothing is interesting; no GPU grants 1 MiB.
_SMEM_LIMIT_RANGE = (1024, 1 << 20)


def probe(
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Arithmetic only, no GPU needed: what CUTLASS would choose and need for each "
            "tile under --smem-limit.",
        ),
    ] = False,
    smem_limit: Annotated[
        int | None,
        typer.Option(
            "--smem-limit",
            metavar="BYTES",
            help="Shared memory per block for --plan, in bytes: 101376 for SM 12.x, 232448 for "
            "SM 9.0/10.x.",
        ),
    ] = None,
    fmt: Annotated[ProbeFormat, format_option()] = ProbeFormat.RICH,
    output: Output = None,
    p2p: Annotated[
        bool,
        typer.Option(
            "--p2p",
            help="Test peer-to-peer between every GPU pair: verified copies and peer writes, "
            "bandwidth against a copy staged through host memory.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            min=1.0,
            max=3600.0,
            help="Seconds each probe child gets; a hang is a named failure.",
        ),
    ] = 60.0,
) -> None:
    """Measure this GPU's shared-memory limit and run the block-scaled tile probes.

    The probe checks (probe.smem_limit, probe.tiles; with --p2p, p2p.transfer) judge what
    was measured, as `check` judges them. Exit 0: everything was measured; 1: something
    measured wrong; 3: the probes could not run.
    """
    from blackwell_doctor.app.obtain import finite_seconds
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.ruledata.tiles import plan_catalogue
    from blackwell_doctor.rules import presets

    if p2p:
        if plan or smem_limit is not None:
            raise UserError("--p2p measures transfers; it does not combine with --plan")
        from blackwell_doctor.collect.probe.p2p import run_p2p_probes

        seconds = finite_seconds("--timeout", timeout)
        host = _host_facts()
        document = presets.judge_p2p(host, run_p2p_probes(timeout_s=seconds))
    elif plan:
        if smem_limit is None:
            raise UserError(
                "--plan needs --smem-limit BYTES (101376 for SM 12.x, 232448 for SM 9.0/10.x)"
            )
        low, high = _SMEM_LIMIT_RANGE
        if not low <= smem_limit <= high:
            raise UserError(f"--smem-limit {smem_limit} is outside {low}..{high} bytes")
        document = presets.judge_plan(smem_limit, plan_catalogue(smem_limit))
    else:
        if smem_limit is not None:
            raise UserError("--smem-limit applies to --plan; a measured probe uses the GPU's own")
        from blackwell_doctor.collect.probe.runner import run_probes
        from blackwell_doctor.ruledata.tiles import load_catalogue

        seconds = finite_seconds("--timeout", timeout)
        host = _host_facts()
        _, tiles = load_catalogue()
        document = presets.judge_probe(host, run_probes(tiles=tiles, timeout_s=seconds))
    write_outcome(_rendered(document, fmt, output), output, failed=_not_run(document.report))
    raise typer.Exit(document.report.exit_code)


def _host_facts() -> Facts:
    """This host's facts without the probes (they are measured here, with --timeout):
    the GPUs, driver and shared-memory attributes the probe checks are judged beside."""
    from blackwell_doctor.app.obtain import FactsRequest, obtain_facts

    return obtain_facts(
        FactsRequest(probes=False), environ=os.environ, stdin=sys.stdin.buffer
    ).facts


def _rendered(document: PresetDocument[PresetReport], fmt: ProbeFormat, output: Path | None) -> str:
    """The probe's report and detail sections (the tile table, the transfer matrix) through
    the shared renderers, sanitised at their boundary like every report."""
    from blackwell_doctor.render import render_probe

    color, width = text_style(output)
    return render_probe(document, fmt, color=color, width=width)


def _not_run(report: PresetReport) -> str | None:
    """Why the probes measured nothing (exit 3), else None."""
    if report.exit_code != ExitCode.NOT_EVALUATED:
        return None
    return "the probes could not run (exit 3)"


def register(app: typer.Typer) -> None:
    app.command(short_help=SUMMARIES["probe"], epilog=EXAMPLES["probe"])(probe)
