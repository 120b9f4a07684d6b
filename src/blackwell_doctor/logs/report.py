"""The ``scan-logs`` document and its text rendering."""

from __future__ import annotations

import msgspec

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.exitcodes import ExitCode
from blackwell_doctor.facts import LogFacts, LogSource, ToolInfo
from blackwell_doctor.logs.catalogue import SEVERITY_RANK, load_catalogue
from blackwell_doctor.logs.collect import readable
from blackwell_doctor.render.common import json_safe, sanitize_line, scrub
from blackwell_doctor.rules.logs import JudgedFinding, judge_findings

SCAN_SCHEMA_VERSION = 1

_MARK = {"fail": "[✗]", "warn": "[!]", "info": "[i]"}


class ScanReport(msgspec.Struct, frozen=True, kw_only=True):
    """``scan-logs --format json``: written whole whatever the outcome."""

    schema_version: int
    tool: ToolInfo
    sources: list[LogSource]
    findings: list[JudgedFinding]  # judged by the rules (rules/logs.py), worst first
    exit_code: int


def build_report(facts: LogFacts, *, fail_on: str) -> ScanReport:
    """Exit 2 when inputs were named and none could be read; 1 when a finding is at or above
    ``fail_on``; else 0."""
    gate = SEVERITY_RANK[fail_on]
    findings = judge_findings(facts)
    if facts.sources and not any(readable(s) for s in facts.sources):
        code = ExitCode.USAGE
    elif any(SEVERITY_RANK[f.severity] >= gate for f in findings):
        code = ExitCode.FINDINGS
    else:
        code = ExitCode.OK
    return ScanReport(
        schema_version=SCAN_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        sources=list(facts.sources),
        findings=findings,
        exit_code=int(code),
    )


def render_json(report: ScanReport) -> str:
    report = scrub(report, json_safe)  # file names may hold undecodable bytes
    return (msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n").decode("utf-8")


# Sources listed one by one up to this many (per signature, and in "Sources:").
_LISTED = 20


def render_text(report: ScanReport) -> str:
    # File names and log lines are other people's text: one line each, nothing a terminal
    # would act on.
    report = scrub(report, sanitize_line)
    catalogue = load_catalogue()
    out: list[str] = []
    groups: dict[str, list[JudgedFinding]] = {}
    for finding in report.findings:
        groups.setdefault(finding.signature, []).append(finding)
    ordered = sorted(
        groups.items(), key=lambda kv: (-max(SEVERITY_RANK[f.severity] for f in kv[1]), kv[0])
    )
    for sig_id, findings in ordered:
        worst = max((f.severity for f in findings), key=SEVERITY_RANK.__getitem__)
        total = sum(f.count for f in findings)
        sig = catalogue.entry(sig_id)
        check = findings[0].check
        out.append(f"{_MARK[worst]} {sig_id} ({worst}, {check}): {total} occurrence(s)")
        for f in findings[:_LISTED]:
            if f.line == 0:  # input.unreadable: nothing was read
                where = "not read"
            elif f.line == f.last_line:
                where = f"line {f.line}"
            else:
                where = f"lines {f.line}-{f.last_line}"
            out.append(f"    {f.path}: {where}, {f.count}x, {f.severity}")
            out.append(f"      | {f.excerpt}")
        if len(findings) > _LISTED:
            rest = findings[_LISTED:]
            out.append(
                f"    ... and {len(rest)} more sources ({sum(f.count for f in rest)} "
                "occurrences; --format json lists them all)"
            )
        if sig is not None:
            out.append(f"    What it means: {sig.meaning}")
            for step in sig.remedy:
                out.append(f"    Fix: {step}")
            out.append(f"    Source: {sig.source}")
        out.append("")
    out.append("Sources:")
    failed = [s for s in report.sources if s.error]
    fine = [s for s in report.sources if not s.error]
    for s in failed[:_LISTED] if len(report.sources) > _LISTED else report.sources:
        state = f"error: {s.error}" if s.error else "ok"
        out.append(f"    {s.name} ({s.kind}): {s.lines} lines, {s.bytes} bytes, {state}")
    if len(report.sources) > _LISTED:
        # A scan of thousands of files: the ones that need attention, then a count.
        if len(failed) > _LISTED:
            out.append(f"    ... and {len(failed) - _LISTED} more that could not be read")
        out.append(
            f"    {len(fine)} sources read: {sum(s.lines for s in fine)} lines, "
            f"{sum(s.bytes for s in fine)} bytes, ok (--format json lists them all)"
        )
    # Signatures, each counted once under its worst severity: the numbers add up.
    worst_of: list[str] = [
        max((f.severity for f in fs), key=SEVERITY_RANK.__getitem__) for fs in groups.values()
    ]
    counts = {sev: worst_of.count(sev) for sev in _MARK}
    if not report.findings:
        out.append("No signatures found.")
    else:
        out.append(
            f"Found {len(groups)} signature(s): {counts['fail']} fail, {counts['warn']} warn, "
            f"{counts['info']} info (exit {report.exit_code})."
        )
    return "\n".join(out) + "\n"
