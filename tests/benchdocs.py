"""Bench run documents built in tests: one constructor for the fields every test leaves at
their plain values (tool, server, completion), so a test names only what it is about."""

from __future__ import annotations

from typing import Any

from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.report.bench import BenchRun, ServerInfo, ShapeResult


def bench_run(
    *shapes: ShapeResult,
    schema_version: int = 1,
    url: str = "",
    server_error: str | None = None,
    **fields: Any,
) -> BenchRun:
    """A complete run of ``shapes`` against model ``m`` (``fields``: any other BenchRun
    field, e.g. ``repeats``)."""
    return BenchRun(
        schema_version=schema_version,
        tool=ToolInfo(name="t", version="0"),
        started_at="",
        seed=0,
        server=ServerInfo(
            url=url,
            model="m",
            models=["m"],
            max_model_len=None,
            metrics_endpoint=False,
            tokenize_endpoint=False,
            error=server_error,
        ),
        complete=True,
        interrupted=False,
        findings=[],
        shapes=list(shapes),
        exit_code=0,
        **fields,
    )
