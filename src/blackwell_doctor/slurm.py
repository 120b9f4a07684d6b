"""Slurm health-check mode: drain this node on findings, resume it only if we drained it.

Modelled on LBNL NHC's contract with Slurm: the node's *reason* says who drained it. We
drain with ``Reason="blackwell-doctor: <check ids>"`` and, when the node is healthy again,
resume it only while its reason still starts with that prefix. A node drained or downed
with any other reason (an admin's maintenance, Slurm's own "Not responding") is never
touched, neither resumed nor re-drained (re-draining would replace the admin's reason with
ours, and a later healthy run would then resume it).

Slurm is driven through its own commands, ``sinfo`` and ``scontrol``, each with a deadline;
nothing parses slurm.conf. Arguments are passed as a list (no shell).
"""

from __future__ import annotations

import enum
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from blackwell_doctor.report import Report
from blackwell_doctor.rules.model import GATE_STATUSES, Status

REASON_PREFIX = "blackwell-doctor:"
# scontrol keeps long reasons, but sinfo's default column and most dashboards show ~40-80
# characters: name the first ids and count the rest.
REASON_MAX = 80
COMMAND_TIMEOUT_S = 30.0


class SlurmError(Exception):
    """sinfo or scontrol failed, timed out, or is missing: one line."""


class Action(enum.StrEnum):
    DRAIN = "drain"  # findings: drain with our reason (or update our reason)
    RESUME = "resume"  # healthy and drained by us: give the node back
    KEEP = "keep"  # nothing to change
    LEAVE = "leave"  # someone else's drain/down: not ours to touch


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # sinfo's %T: idle, drained, draining, down, ... (suffix flags stripped)
    reason: str  # empty when none

    @property
    def drained(self) -> bool:
        return self.state in ("drained", "draining", "drain")

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str  # the drain reason we want (empty when healthy)
    why: str  # one line for the log


def failing_ids(report: Report) -> list[str]:
    """The check ids that make this run fail: findings at or above the gate, and under
    --strict the checks that could not be evaluated."""
    gate = GATE_STATUSES[report.fail_on]
    ids = [r.id for r in report.results if r.status in gate]
    if report.strict and not ids:
        ids = [r.id for r in report.results if r.status is Status.ERROR]
    return ids


def drain_reason(ids: Sequence[str]) -> str:
    """``blackwell-doctor: driver.version, pci.acs`` (+N more past REASON_MAX characters)."""
    shown: list[str] = []
    for i, check_id in enumerate(ids):
        rest = len(ids) - i - 1
        candidate = f"{REASON_PREFIX} {', '.join([*shown, check_id])}"
        more = f" +{rest} more" if rest else ""
        if len(candidate + more) > REASON_MAX and shown:
            return f"{REASON_PREFIX} {', '.join(shown)} +{len(ids) - len(shown)} more"
        shown.append(check_id)
    return f"{REASON_PREFIX} {', '.join(shown)}"


def decide(node: NodeState, report: Report) -> Decision:
    ids = failing_ids(report)
    if node.reason and not node.ours:
        return Decision(
            Action.LEAVE, "", f"{node.state} with another reason ({node.reason!r}): not touched"
        )
    if ids:
        reason = drain_reason(ids)
        if node.drained and node.reason == reason:
            return Decision(Action.KEEP, reason, f"already drained: {reason}")
        return Decision(Action.DRAIN, reason, f"drain: {reason}")
    if node.drained and node.ours:
        return Decision(Action.RESUME, "", f"healthy again: resume (was {node.reason!r})")
    return Decision(Action.KEEP, "", f"healthy, {node.state}: nothing to do")


def _run(argv: list[str]) -> str:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found (is this a Slurm node?)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S:.0f}s") from None
    if proc.returncode != 0:
        detail = " ".join((proc.stderr or proc.stdout).split()) or f"exit {proc.returncode}"
        raise SlurmError(f"{' '.join(argv[:2])} failed: {detail}")
    return proc.stdout


def node_state(name: str) -> NodeState:
    """The node's state and reason as slurmctld has them (``sinfo``, one line per partition:
    the first is enough, state and reason are per node)."""
    out = _run(["sinfo", "--noheader", f"--nodes={name}", "--format=%T|%E"])
    line = out.splitlines()[0] if out.strip() else ""
    if "|" not in line:
        raise SlurmError(f"sinfo knows no node {name!r}")
    state, _, reason = line.partition("|")
    state = state.strip().rstrip("*~#!%$@^-").lower()
    reason = reason.strip()
    return NodeState(name=name, state=state, reason="" if reason == "none" else reason)


def apply_decision(name: str, decision: Decision) -> None:
    match decision.action:
        case Action.DRAIN:
            _run(
                [
                    "scontrol",
                    "update",
                    f"NodeName={name}",
                    "State=DRAIN",
                    f"Reason={decision.reason}",
                ]
            )
        case Action.RESUME:
            _run(["scontrol", "update", f"NodeName={name}", "State=RESUME"])
        case Action.KEEP | Action.LEAVE:
            pass
