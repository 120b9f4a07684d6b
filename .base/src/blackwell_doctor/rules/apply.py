"""apply's verdicts: the Docker engine's answer to starting a GPU container, and the new
container's log.

The log is judged as ``check --logs``/``--container`` judges one (the ``logs`` checks, run
by :func:`blackwell_doctor.rules.evaluate.evaluate`) with the model context apply knows (the
model directory's facts): the same log gives the same verdict in ``check`` and in
``apply``. The words come from checks/catalogue.toml (``[finding.<id>]``) and
checks/log_signatures.toml.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from blackwell_doctor.facts.document import LogFacts, Unavailable
from blackwell_doctor.facts.model import ModelFacts
from blackwell_doctor.report.results import Result, Status
from blackwell_doctor.ruledata.rules import RuleData, fill, load_rule_data
from blackwell_doctor.rules.engine import Engine
from blackwell_doctor.rules.evaluate import evaluate
from blackwell_doctor.rules.logs import judge_findings
from blackwell_doctor.rules.presets import LOG_CHECKS, logs_only_facts
from blackwell_doctor.rules.view import marlin_expected

NVIDIA_RUNTIME = "docker.nvidia_runtime"
# The engine's words when no runtime can give a container GPUs (docker run --gpus all on an
# engine without the NVIDIA Container Toolkit configured).
_NO_GPU_DRIVER = "could not select device driver"


def start_finding(
    engine_error: str, *, shown: str | None = None, rules: RuleData | None = None
) -> str | None:
    """The finding when the engine refused to start the container for want of a GPU runtime
    (``docker.nvidia_runtime: <summary>. Remedy: <commands>``); None for any other error.
    ``shown``: the engine's message as the finding quotes it (one line, redacted)."""
    if _NO_GPU_DRIVER not in engine_error:
        return None
    words = (rules or load_rule_data()).findings[NVIDIA_RUNTIME]
    summary = fill(words.summary, {"reason": engine_error if shown is None else shown})
    return f"{NVIDIA_RUNTIME}: {summary}. Remedy: " + " && ".join(words.commands)


@dataclass(frozen=True)
class LogVerdict:
    """The new container's log, judged: the ``logs`` checks' results, and the signatures
    behind them (``<signature> x<count>: <excerpt>``) at fail and at warn."""

    results: list[Result]
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(r.status is Status.FAIL for r in self.results)

    @property
    def note(self) -> str:
        return (
            f"log scanned: {len(self.failures)} failure and {len(self.warnings)} "
            "warning signature(s)"
        )


def judge_container_log(
    logs: LogFacts,
    model: ModelFacts | Unavailable | None = None,
    *,
    engine: Engine | None = None,
) -> LogVerdict:
    """The ``logs`` checks on ``logs`` with ``model`` (``--model-dir``'s facts) beside them,
    as ``check --logs LOG --model-dir DIR`` runs them."""
    facts = msgspec.structs.replace(logs_only_facts(logs), model=model)
    report = evaluate(facts, select=LOG_CHECKS, source="logs", engine=engine)
    judged = judge_findings(logs, w4a16_checkpoint=marlin_expected(facts))
    failing = {r.id for r in report.results if r.status is Status.FAIL}
    warning = {r.id for r in report.results if r.status is Status.WARN}
    return LogVerdict(
        results=report.results,
        failures=[
            f"{f.signature} x{f.count}: {f.excerpt}"
            for f in judged
            if f.severity == "fail" and f.check in failing
        ],
        warnings=[
            f"{f.signature} x{f.count}: {f.excerpt}"
            for f in judged
            if f.severity == "warn" and f.check in warning | failing
        ],
    )
