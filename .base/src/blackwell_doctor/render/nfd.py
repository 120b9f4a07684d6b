"""``--format nfd``: a Node Feature Discovery feature file (nfd-worker's ``local`` source).

nfd-worker reads every file in ``/etc/kubernetes/node-feature-discovery/features.d/`` and
turns each ``name=value`` line into the node label ``feature.node.kubernetes.io/name=value``
(the default namespace, allowed without any nfd-master flag). A ``# +expiry-time=`` line
makes NFD drop the labels when the file is not rewritten in time, so a node whose checks
stopped running does not keep advertising an old verdict. Values are valid label values
(at most 63 characters of ``[A-Za-z0-9._-]``, alphanumeric at both ends).

Labels: ``blackwell-doctor.verdict`` (ok, findings, not-evaluated), ``blackwell-doctor.node``
(the node verdict, issue 39: healthy, degraded, needs-reset, needs-reboot, needs-service),
``blackwell-doctor.sm``
(the GPUs' compute capability, e.g. ``12.0``; ``mixed`` when they differ; absent when
unknown or when the report carries no facts), ``blackwell-doctor.failed`` and
``.warnings`` (counts), and ``blackwell-doctor.check.<check id>`` with each check's status
(pass, warn, fail, skip, error). A pod can then require
``feature.node.kubernetes.io/blackwell-doctor.verdict: ok`` in its node affinity.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING

from blackwell_doctor.facts.document import Facts, NvmlFacts
from blackwell_doctor.report.check import Report
from blackwell_doctor.report.exitcodes import ExitCode

if TYPE_CHECKING:
    from blackwell_doctor.render.timing import RunTiming

PREFIX = "blackwell-doctor"
# How long nfd-worker keeps the labels after the run that wrote them (the DaemonSet and the
# documented timer rewrite the file every 10 minutes).
EXPIRY = dt.timedelta(hours=1)

_VERDICT = {
    ExitCode.OK: "ok",
    ExitCode.FINDINGS: "findings",
    ExitCode.NOT_EVALUATED: "not-evaluated",
}
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


def sm_label(facts: Facts | None) -> str | None:
    """``12.0`` when every GPU NVML saw has that compute capability, ``mixed`` when they
    differ, None when none is known."""
    if facts is None or not isinstance(facts.nvml, NvmlFacts):
        return None
    ccs = {g.compute_capability for g in facts.nvml.gpus if isinstance(g.compute_capability, tuple)}
    if not ccs:
        return None
    if len(ccs) > 1:
        return "mixed"
    major, minor = next(iter(ccs))
    return f"{major}.{minor}"


def render_nfd(report: Report, timing: RunTiming | None = None) -> str:
    lines = [f"# {report.tool.name} {report.tool.version}: check --format nfd (rewritten each run)"]
    if timing is not None:
        expires = dt.datetime.fromtimestamp(timing.started_at, dt.UTC) + EXPIRY
        lines.append(f"# +expiry-time={expires.strftime('%Y-%m-%dT%H:%M:%SZ')}")
    labels: list[tuple[str, str]] = [
        ("verdict", _VERDICT.get(ExitCode(report.exit_code), "unknown")),
    ]
    if report.node is not None:
        labels.append(("node", report.node.verdict))
    sm = sm_label(report.facts)
    if sm is not None:
        labels.append(("sm", sm))
    labels.append(("failed", str(report.summary.fail)))
    labels.append(("warnings", str(report.summary.warn)))
    labels.extend((f"check.{r.id}", r.status.value) for r in report.results)
    for name, value in labels:
        full = f"{PREFIX}.{name}"
        # Check ids and counts are ours; the guard keeps a future id from breaking the file.
        if _LABEL_NAME.match(full) and _LABEL_VALUE.match(value):
            lines.append(f"{full}={value}")
    return "\n".join(lines) + "\n"
