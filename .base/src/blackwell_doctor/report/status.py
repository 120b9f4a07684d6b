"""The closed sets of a check's result (status, severity) and the ``--fail-on`` gate: no
msgspec, so the CLI declares its options and the error boundary its exit codes without it.
:mod:`blackwell_doctor.report.results` re-exports them beside the result structs."""

from __future__ import annotations

import enum
from typing import Literal


class Status(enum.StrEnum):
    PASS = "pass"  # noqa: S105 (a status, not a password)
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # not applicable, with the reason
    ERROR = "error"  # could not be evaluated, with the reason


class Severity(enum.StrEnum):
    """How much a check matters when it does not pass (orders the report)."""

    INFO = "info"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


# --fail-on: which statuses make the gate fail.
FailOn = Literal["warn", "fail"]
GATE_STATUSES: dict[str, frozenset[Status]] = {
    "warn": frozenset({Status.WARN, Status.FAIL}),
    "fail": frozenset({Status.FAIL}),
}
