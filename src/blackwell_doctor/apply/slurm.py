"""Slurm health-check mode: drain this node on findings, resume it only if we drained it.

Modelled on LBNL NHC's contract with Slurm: the node's *reason* says who drained it. We
drain with ``Reason="blackwell-doctor: <step>: <check ids>"`` (the step: the node verdict,
issue 39: needs-reset, needs-reboot, needs-service, degraded) and, when the node is healthy again,
resume it only while its reason is exactly one we write (:data:`OUR_REASON`). A node
drained or downed with any other reason (an admin's maintenance, Slurm's own "Not
responding", an admin's reason that is literally ``none``) or with none we can see is never
touched, neither resumed nor re-drained (re-draining would replace the admin's reason with
ours, and a later healthy run would then resume it).

One node only: the facts judged are this host's, so a node list (``n1,n2``,
``gpu[001-128]``) is refused before Slurm is asked anything, and sinfo's answer must be
about that node alone.

Slurm is driven through its own commands, ``sinfo`` and ``scontrol``, each with a deadline;
nothing parses slurm.conf. Arguments are passed as a list (no shell).
"""

from __future__ import annotations

import enum
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from blackwell_doctor.report.check import Report
from blackwell_doctor.report.results import GATE_STATUSES, Status
from blackwell_doctor.ruledata.rules import load_rule_data

REASON_PREFIX = "blackwell-doctor:"
# The node verdicts a reason may lead with (issue 39): the step the node needs, then the
# check ids ("blackwell-doctor: needs-reset: health.memory_reset_needed").
STEPS = ("degraded", "needs-reset", "needs-reboot", "needs-service")
# A reason is ours only when it is exactly what drain_reason writes: an admin's reason that
# merely starts with the prefix ("blackwell-doctor: keep out until the PSU swap") is not. A
# reason without a step is one an earlier version wrote: still ours.
OUR_REASON = re.compile(
    re.escape(REASON_PREFIX)
    + r"(?: (?:"
    + "|".join(STEPS)
    + r"):)? [a-z0-9][a-z0-9_.-]*(?:, [a-z0-9][a-z0-9_.-]*)*"
    r"(?: \+[1-9][0-9]* more)?"
)
# Characters that make a NodeName a node list or an expression for sinfo/scontrol
# (``n1,n2``, ``gpu[001-128]``, ``n1 n2``), besides whitespace and control characters.
_NODE_LIST_CHARS = frozenset(",[]")
# scontrol keeps long reasons, but sinfo's default column and most dashboards show ~40-80
# characters: name the first ids and count the rest.
REASON_MAX = 80
COMMAND_TIMEOUT_S = 30.0


class SlurmError(Exception):
    """sinfo or scontrol failed, timed out, or is missing: one line."""


def node_name_problem(name: str) -> str | None:
    """Why ``name`` is not one node's name (None when it is). A list or range would make
    sinfo answer for many nodes and scontrol change them all, on this host's facts."""
    if not name:
        return "an empty node name"
    for ch in name:
        if ch in _NODE_LIST_CHARS:
            return load_rule_data().word("slurm", "node_list", char=repr(ch))
        if ch.isspace() or not ch.isprintable():
            return f"{ch!r} is not allowed in a node name"
    return None


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
    def out_of_service(self) -> bool:
        """Drained, draining, down or failing: taken out by someone (sinfo's %T, possibly
        combined, e.g. ``down+drain``)."""
        return any(word in self.state for word in ("drain", "down", "fail"))

    @property
    def ours(self) -> bool:
        return OUR_REASON.fullmatch(self.reason) is not None


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


def drain_reason(ids: Sequence[str], step: str | None = None) -> str:
    """``blackwell-doctor: needs-reset: health.memory_reset_needed, pci.acs`` (+N more past
    REASON_MAX characters): the node verdict's step (issue 39), then the check ids."""
    head = f"{REASON_PREFIX} {step}:" if step in STEPS else REASON_PREFIX
    shown: list[str] = []
    for i, check_id in enumerate(ids):
        rest = len(ids) - i - 1
        candidate = f"{head} {', '.join([*shown, check_id])}"
        more = f" +{rest} more" if rest else ""
        if len(candidate + more) > REASON_MAX and shown:
            return f"{head} {', '.join(shown)} +{len(ids) - len(shown)} more"
        shown.append(check_id)
    return f"{head} {', '.join(shown)}"


def decide(node: NodeState, report: Report) -> Decision:
    ids = failing_ids(report)
    if not node.ours and (node.reason or node.out_of_service):
        # Another's reason, or out of service with no reason we can see (Slurm asks one of
        # every drain): not ours to touch either way.
        said = f"another reason ({node.reason!r})" if node.reason else "no reason of ours"
        return Decision(Action.LEAVE, "", f"{node.state} with {said}: not touched")
    if ids:
        # The step first, then the ids: the node verdict's own order (the ids that set it).
        step = report.node.verdict if report.node is not None else None
        if report.node is not None:
            ids = [*[i for i in report.node.because if i in ids], *ids]
            ids = list(dict.fromkeys(ids))
        reason = drain_reason(ids, step)
        if node.drained and node.reason == reason:
            return Decision(Action.KEEP, reason, f"already drained: {reason}")
        was = f" (was {node.reason!r})" if node.reason else ""
        return Decision(Action.DRAIN, reason, f"{reason}{was}")
    if node.drained and node.ours:
        return Decision(Action.RESUME, "", f"healthy again (was {node.reason!r})")
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


# One line per node and partition (-N): the name, the state, when the reason was set, the
# reason (last: it is free text and may hold the separator).
_SINFO_FORMAT = "%N|%T|%H|%E"


def node_state(name: str) -> NodeState:
    """The node's state and reason as slurmctld has them (``sinfo``)."""
    out = _run(["sinfo", "--noheader", "--Node", f"--nodes={name}", f"--format={_SINFO_FORMAT}"])
    return parse_sinfo(name, out)


def parse_sinfo(name: str, out: str) -> NodeState:
    """sinfo's lines for ``name``: one per partition, which must all be about that node and
    agree. A line that is not a record of it continues the reason before it (a reason may
    hold a newline; an admin wrote it, and with it the reason is not ours); sinfo's first
    line must be one.

    sinfo prints ``none`` for a node with no reason, and also for a reason that is
    literally ``none``; only the first has no time (``Unknown``): an admin's ``none`` is a
    reason like any other."""
    records: list[list[str]] = []
    for line in out.splitlines():
        node, sep, rest = line.partition("|")
        state, sep2, rest = rest.partition("|")
        when, sep3, reason = rest.partition("|")
        if sep and sep2 and sep3 and node == name:
            records.append([state, when, reason])
        elif records:
            records[-1][2] += "\n" + line
        else:
            raise SlurmError(f"unexpected sinfo output for node {name!r}: {line[:80]!r}")
    seen: set[tuple[str, str]] = set()
    for state, when, reason in records:
        if reason == "none" and when.strip() == "Unknown":
            reason = ""
        seen.add((state.strip().rstrip("*~#!%$@^-").lower(), reason))
    if not seen:
        raise SlurmError(f"sinfo knows no node {name!r}")
    if len(seen) > 1:
        raise SlurmError(f"sinfo gave node {name!r} different states or reasons: {sorted(seen)}")
    ((state, reason),) = seen
    return NodeState(name=name, state=state, reason=reason)


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
