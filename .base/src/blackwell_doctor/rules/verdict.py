"""The node verdict (issue 39): one word for the node and the smallest step that addresses
every finding, from the results the checks gave.

Each warn or fail result's remedy may name a step (``Remedy.action``, from the catalogue's
``action`` or what the check read: an Xid's resolution bucket, NVML's recovery action).
Steps are ordered as checks/health.toml's ladder: restart the application, reset the GPU,
reboot, service the hardware; the largest one any finding asks is the node's, because it
also takes care of the smaller ones (a reboot resets every GPU; service powers the node
off). A finding that asks no step is fixed by its own remedy: the node is ``degraded``.
"""

from __future__ import annotations

from collections.abc import Sequence

from blackwell_doctor.report.check import NodeVerdict
from blackwell_doctor.report.results import Result, Status
from blackwell_doctor.ruledata.health import ACTIONS, VERDICT_OF, load_health_data

_FINDING = (Status.WARN, Status.FAIL)


def node_verdict(results: Sequence[Result]) -> NodeVerdict:
    findings = [r for r in results if r.status in _FINDING]
    unjudged = [r.id for r in results if r.status is Status.ERROR]
    ladder = load_health_data().ladder
    if not findings:
        return NodeVerdict(verdict="healthy", step=ladder["healthy"], not_evaluated=unjudged)
    asked = [r.remedy.action for r in findings if r.remedy is not None and r.remedy.action]
    if not asked:
        because = [r.id for r in findings]
        return NodeVerdict(
            verdict="degraded",
            step=ladder["degraded"].replace("{checks}", ", ".join(because)),
            because=because,
            findings=[r.id for r in findings],
            not_evaluated=unjudged,
        )
    top = max(asked, key=ACTIONS.index)
    because = [r.id for r in findings if r.remedy is not None and r.remedy.action == top]
    return NodeVerdict(
        verdict=VERDICT_OF[top],
        step=ladder[top].replace("{checks}", ", ".join(because)),
        because=because,
        findings=[r.id for r in findings],
        not_evaluated=unjudged,
    )
