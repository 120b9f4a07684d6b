"""One entry point for every command that takes a model directory: read it, find the GPUs
in the facts, size it."""

from __future__ import annotations

from pathlib import Path

from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.facts.document import Facts
from blackwell_doctor.facts.model import ModelFacts
from blackwell_doctor.report.model import ModelReport, build_report
from blackwell_doctor.rules.fit import FitResult, PoolError, fit, gpu_pool


def size(
    model: ModelFacts, facts: Facts | None, *, utilization: float | None = None
) -> tuple[FitResult | None, str | None]:
    """The fit on the facts' GPUs, or None and why not."""
    if model.arch is None:
        return None, "config.json is missing or unusable"
    if facts is None:
        return None, "no facts about GPUs"
    try:
        pool = gpu_pool(facts)
    except PoolError as exc:
        return None, str(exc)
    result = fit(model, pool, utilization=utilization)
    if result is None:
        return None, "neither the weights nor config.json give the model's size"
    return result, None


def inspect_model(
    path: Path, facts: Facts | None, *, utilization: float | None = None
) -> ModelReport:
    model = read_model_dir(path)
    result, note = size(model, facts, utilization=utilization)
    return build_report(model, result, note)
