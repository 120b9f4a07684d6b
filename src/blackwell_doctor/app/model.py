"""The ``model`` command's flow: the model directory and the GPUs obtained as every command
obtains its facts (:mod:`blackwell_doctor.app.obtain`, as ``check --model-dir``), sized by
the fit verdict of the ``model.fit`` check (``rules.checkpoint.model_fit_result``)."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import msgspec

from blackwell_doctor.app.obtain import FactsRequest, obtain_facts, read_model_arg, with_model
from blackwell_doctor.facts.document import Facts
from blackwell_doctor.facts.errors import UserError
from blackwell_doctor.facts.model import ModelFacts
from blackwell_doctor.report.model import ModelReport, build_report
from blackwell_doctor.rules.checkpoint import model_fit_result


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """``model DIR``'s options: the model (a directory, or a Hub repo id), where the GPUs'
    facts come from (``--facts`` FILE, else this host without probes), the share of GPU
    memory the runtime may take."""

    model_dir: Path  # a directory, or ORG/NAME[@REVISION] (the Hugging Face cache, --hub)
    hub: bool = False
    facts_file: Path | None = None
    gpu_timeout_s: float | None = None
    utilization: float | None = None


def model(request: ModelRequest) -> ModelReport:
    """The ``model`` document; UserError for bad options or a directory with neither a
    usable config.json nor safetensors weights (:func:`read_model_arg`)."""
    util = request.utilization
    if util is not None and (not math.isfinite(util) or not 0.0 < util <= 1.0):
        raise UserError(f"--gpu-memory-utilization must be above 0 and at most 1, got {util}")
    # The model first (a bad argument is said before the GPUs are read), required here
    # even beside --facts: it is what the command sizes.
    model_facts = read_model_arg(request.model_dir, hub=request.hub, required=True)
    assert model_facts is not None
    facts = obtain_facts(
        FactsRequest(
            facts_file=request.facts_file,
            gpu_timeout_s=request.gpu_timeout_s,
            probes=False,
        ),
        environ=os.environ,
        stdin=sys.stdin.buffer,
    ).facts
    facts = msgspec.structs.replace(facts, model=model_facts)
    # A directory with neither a usable config.json nor weights was refused by
    # read_model_arg, as `check --model-dir` refuses it.
    return judge_model(facts, utilization=util)


def judge_model(facts: Facts, *, utilization: float | None = None) -> ModelReport:
    """The document of the model ``facts`` carry, sized on their GPUs by the verdict the
    ``model.fit`` check gives."""
    m = facts.model
    assert isinstance(m, ModelFacts)  # read from a directory
    result = model_fit_result(facts, utilization=utilization)
    if isinstance(result, str):
        return build_report(m, None, result)
    return build_report(m, result, None)


def inspect_model(path: Path, facts: Facts, *, utilization: float | None = None) -> ModelReport:
    """The document of the model at ``path`` on the GPUs of ``facts`` (benchmarks)."""
    return judge_model(with_model(facts, path, required=True), utilization=utilization)
