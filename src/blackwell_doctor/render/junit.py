"""``--format junit``: one testcase per check, for CI test-report views (GitLab, Jenkins, ...).

Written with ``xml.etree.ElementTree`` from the standard library rather than a JUnit package:
the ``junit-xml`` package is unmaintained and only wraps the same few elements ElementTree
builds directly, so it would be a dependency that adds nothing.

Mapping (the de-facto schema Jenkins and GitLab read; there is no official one):
fail -> <failure type="fail">; warn -> <failure type="warn"> when the gate is ``--fail-on
warn``, else a passing case whose <system-out> starts with "WARN:" (the gate decides what
is red in CI, as it decides the exit code); error -> <error>; skip -> <skipped>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import assert_never

from blackwell_doctor.render.common import (
    FINDING_STATUSES,
    NOT_EVALUATED,
    evidence_text,
    group_by_family,
    sanitize,
    title_as_shown,
)
from blackwell_doctor.report.check import Report
from blackwell_doctor.report.results import Result, Status


def render_junit(report: Report) -> str:
    warn_fails = report.fail_on == "warn"
    root = ET.Element("testsuites", name=report.tool.name)
    for n, (family, results) in enumerate(group_by_family(report.results)):
        suite = ET.SubElement(root, "testsuite", name=sanitize(family))
        if n == 0 and report.node is not None:
            # The node verdict (issue 39), once, as the first suite's <properties>: JUnit
            # readers keep a suite's properties; <testsuites> has no place for them.
            props = ET.SubElement(suite, "properties")
            ET.SubElement(props, "property", name="node.verdict", value=report.node.verdict)
            ET.SubElement(props, "property", name="node.step", value=sanitize(report.node.step))
        for result in results:
            _testcase(suite, result, warn_fails=warn_fails)
        _set_counts(suite, results, warn_fails=warn_fails)
    _set_counts(root, report.results, warn_fails=warn_fails)
    ET.indent(root, space="  ")
    body = ET.tostring(root, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'


def _set_counts(element: ET.Element, results: Sequence[Result], *, warn_fails: bool) -> None:
    statuses = [r.status for r in results]
    failed = statuses.count(Status.FAIL) + (statuses.count(Status.WARN) if warn_fails else 0)
    element.set("tests", str(len(statuses)))
    element.set("failures", str(failed))
    element.set("errors", str(statuses.count(Status.ERROR)))
    element.set("skipped", str(statuses.count(Status.SKIP)))


def _testcase(suite: ET.Element, result: Result, *, warn_fails: bool) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        classname=f"blackwell_doctor.{sanitize(result.family)}",
        name=sanitize(result.id),
    )
    summary = sanitize(result.summary)
    match result.status:
        case Status.FAIL:
            failure = ET.SubElement(case, "failure", message=summary, type="fail")
            failure.text = _details(result)
        case Status.WARN if warn_fails:
            failure = ET.SubElement(case, "failure", message=summary, type="warn")
            failure.text = _details(result)
        case Status.WARN:
            ET.SubElement(case, "system-out").text = f"WARN: {_details(result)}"
        case Status.ERROR:
            error = ET.SubElement(case, "error", message=summary, type=NOT_EVALUATED)
            error.text = _details(result)
        case Status.SKIP:
            ET.SubElement(case, "skipped", message=summary)
        case Status.PASS:
            ET.SubElement(case, "system-out").text = summary
        case _:
            assert_never(result.status)


def _details(result: Result) -> str:
    """What a CI log needs to act without the terminal report: title, summary, evidence, fix."""
    lines = [
        f"{title_as_shown(result.status, result.title)}; found: {result.summary}"
        if result.status in FINDING_STATUSES
        else f"{result.title}: {result.summary}",
        f"severity: {result.severity}",
    ]
    lines += [f"{key}: {evidence_text(value)}" for key, value in result.evidence.items()]
    if result.remedy is not None:
        lines.append(f"Fix: {result.remedy.summary}")
        lines += [f"  $ {command}" for command in result.remedy.commands]
        lines += [f"See: {link}" for link in result.remedy.links]
    return sanitize("\n".join(lines))
