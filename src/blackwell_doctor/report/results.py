"""Results of checks: closed sets as enums, results as frozen structs."""

from __future__ import annotations

from typing import Literal

import msgspec

# The closed sets and the gate live apart, without msgspec: the CLI imports them at start-up.
from blackwell_doctor.report.status import GATE_STATUSES as GATE_STATUSES
from blackwell_doctor.report.status import FailOn as FailOn
from blackwell_doctor.report.status import Severity as Severity
from blackwell_doctor.report.status import Status as Status

EvidenceValue = str | int | float | bool | list[str] | None
Evidence = dict[str, EvidenceValue]


# The step a finding asks of the node, smallest first (issue 39; checks/health.toml's
# ladder): restart the application, reset the GPU, reboot the node, service the hardware.
RemedyAction = Literal["restart-app", "reset-gpu", "reboot", "service"]


class Remedy(msgspec.Struct, frozen=True, kw_only=True):
    """What fixes it: the why in one sentence, commands to paste, and where to read more;
    ``action``: the step it asks of the node (None: its remedy alone, the node serves)."""

    summary: str
    commands: list[str] = msgspec.field(default_factory=list)
    links: list[str] = msgspec.field(default_factory=list)
    action: RemedyAction | None = None


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    # A check's result as every document names it: the check (id, family, title), its
    # status and severity, and the one-line summary (a Result's, a fleet group's). A plain
    # comment, not a docstring: a docstring is a schema's description.

    id: str
    family: str
    status: Status
    severity: Severity
    title: str
    summary: str


class Result(Finding, frozen=True, kw_only=True):
    evidence: dict[str, EvidenceValue] = msgspec.field(default_factory=dict)
    remedy: Remedy | None = None


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a check function returns; the engine adds id, family, title, severity, remedy.

    ``case`` names the remedy words in the check's catalogue entry ([check.cases.<case>];
    None: its [check.remedy]); ``command_set`` adds the commands of one of its
    [check.command_sets] (e.g. the host's package manager's); ``remedy_vars`` fill the
    placeholders of both; ``commands`` are extra commands the check filled itself (e.g. one
    setpci line per bridge, from its own command template); ``action`` the step the finding
    asks of the node where the check read it from the facts (an Xid's action).
    """

    status: Status
    summary: str
    evidence: dict[str, EvidenceValue] = msgspec.field(default_factory=dict)
    case: str | None = None
    remedy_vars: dict[str, str] = msgspec.field(default_factory=dict)
    command_set: str | None = None
    commands: list[str] = msgspec.field(default_factory=list)
    # The step the finding asks of the node when the check read it from the facts (an
    # Xid's, NVML's recovery action); None: the catalogue's for the case, if any.
    action: RemedyAction | None = None


def passed(summary: str, **evidence: EvidenceValue) -> Outcome:
    return Outcome(status=Status.PASS, summary=summary, evidence=evidence)


def skipped(reason: str, **evidence: EvidenceValue) -> Outcome:
    return Outcome(status=Status.SKIP, summary=reason, evidence=evidence)


def not_evaluated(reason: str, **evidence: EvidenceValue) -> Outcome:
    return Outcome(status=Status.ERROR, summary=f"not evaluated: {reason}", evidence=evidence)
