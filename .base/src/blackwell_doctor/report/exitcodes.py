"""Process exit codes: a contract with CI users, documented in the README, never renumbered
(a new outcome gets a new number).

The one outcome -> exit-code policy of every command: each command states its outcome (what
was found, what could not be judged, what failed) and one function here chooses the code.
Nothing else chooses an exit code; the CLI's error boundary maps what escapes a command
(bad input, Ctrl-C, a crash) to USAGE, INTERRUPTED and INTERNAL.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from blackwell_doctor.report.status import GATE_STATUSES, FailOn, Status


class ExitCode(enum.IntEnum):
    OK = 0  # nothing at or above the --fail-on gate
    FINDINGS = 1  # findings at or above --fail-on
    USAGE = 2  # bad flags, malformed facts, unreadable input
    NOT_EVALUATED = 3  # --strict and some check could not be evaluated
    INTERNAL = 4  # a bug in blackwell-doctor; a crash log path is printed
    APPLY_FAILED = 5  # apply or its verification failed (what was rolled back is said)
    SLURM_FAILED = 6  # slurm-health: sinfo/scontrol failed or do not know the node
    INTERRUPTED = 130  # Ctrl-C


def gate(*, findings: bool, not_evaluated: bool, strict: bool) -> ExitCode:
    """A judgement (``check``, ``fleet``, ``scan-logs``, ``probe``, a ``bench --compare``,
    a ``model`` fit): findings at or above the gate win over "not evaluated", which counts
    only under ``--strict``: a known problem is the news."""
    if findings:
        return ExitCode.FINDINGS
    if strict and not_evaluated:
        return ExitCode.NOT_EVALUATED
    return ExitCode.OK


def results_gate(statuses: Iterable[Status], fail_on: FailOn, strict: bool) -> ExitCode:
    """:func:`gate` over the statuses of a report's results: a finding is a status at or
    above ``fail_on``, "not evaluated" an ERROR."""
    seen = set(statuses)
    return gate(
        findings=bool(seen & GATE_STATUSES[fail_on]),
        not_evaluated=Status.ERROR in seen,
        strict=strict,
    )


def fleet_gate(*, nodes: int, findings: bool, not_evaluated: bool, strict: bool) -> ExitCode:
    """``fleet``: :func:`gate` over the nodes (not judged counts as not evaluated); USAGE
    when not one node could be judged (nothing was evaluated, like an unreadable --facts)."""
    if nodes == 0:
        return ExitCode.USAGE
    return gate(findings=findings, not_evaluated=not_evaluated, strict=strict)


def unreadable_input() -> ExitCode:
    """Inputs were named and not one could be read (``scan-logs``): USAGE, as for an
    unreadable --facts, whatever the checks said of the empty result."""
    return ExitCode.USAGE


def run(*, interrupted: bool, findings: bool) -> ExitCode:
    """``bench`` and ``bench --soak``: INTERRUPTED after Ctrl-C (the partial result is still
    written), else FINDINGS when the run failed, was incomplete or found something."""
    if interrupted:
        return ExitCode.INTERRUPTED
    return ExitCode.FINDINGS if findings else ExitCode.OK


def action(*, failed: bool, interrupted: bool) -> ExitCode:
    """``apply`` (and its ``--verify``): APPLY_FAILED when it failed (what was rolled back
    is said), INTERRUPTED after Ctrl-C (every change undone)."""
    if interrupted:
        return ExitCode.INTERRUPTED
    return ExitCode.APPLY_FAILED if failed else ExitCode.OK


def slurm_failed() -> ExitCode:
    """``slurm-health`` when ``sinfo``/``scontrol`` failed or do not know the node."""
    return ExitCode.SLURM_FAILED


def ladder(*, steps: Iterable[ExitCode | int], cumulative: ExitCode | int) -> ExitCode:
    """``bench --compare`` of three runs or more (a ladder): FINDINGS when any step or the
    first-to-last change regressed past ``--fail-on-regression`` (a step's regression that
    later steps made up for is still one), else what each compare's own gate said."""
    codes = [*steps, cumulative]
    return gate(
        findings=any(c == ExitCode.FINDINGS for c in codes), not_evaluated=False, strict=False
    )
