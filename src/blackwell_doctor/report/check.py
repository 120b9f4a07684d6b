"""The report: results plus the verdict a CI gate acts on. Renderers read only this."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Literal, TypeVar

import msgspec

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.facts.document import Facts, NvmlFacts, PciFacts, ToolInfo
from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.results import FailOn, Result, Status

REPORT_SCHEMA_VERSION = 1


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    # Named "pass_" in Python, "pass" on the wire.
    pass_: int = msgspec.field(name="pass")
    warn: int
    fail: int
    skip: int
    error: int
    total: int


class HostLine(msgspec.Struct, frozen=True, kw_only=True):
    """One line about the host the report judged (for headers; never used by checks)."""

    hostname: str | None
    gpus: list[str]
    driver_version: str | None
    source: str  # "live" or the facts file path


class Section(msgspec.Struct, frozen=True, kw_only=True):
    """A detail section under a report's results: what a preset measured, laid out for a
    reader (the tile table, the peer-transfer matrix, log hits with their lines). Every
    text in it is one line; the renderers sanitise and place it. ``head`` and ``lines``
    are shown as they are, before and after the table (``numeric``: the columns aligned
    right); ``notes`` are prose."""

    title: str
    head: list[str] = msgspec.field(default_factory=list)
    columns: list[str] = msgspec.field(default_factory=list)
    numeric: frozenset[int] = frozenset()
    rows: list[list[str]] = msgspec.field(default_factory=list)
    lines: list[str] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)


NodeVerdictName = Literal["healthy", "degraded", "needs-reset", "needs-reboot", "needs-service"]


class NodeVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """One verdict on the node (issue 39) and the smallest step that addresses every
    finding: the largest step any finding asks (its remedy's ``action``), in the ladder's
    order restart the application < reset the GPU < reboot < service; findings that ask
    none leave the node ``degraded``; no finding, ``healthy``. Decided by the rules
    (:mod:`blackwell_doctor.rules.verdict`); ``step`` is its words (checks/health.toml)."""

    verdict: NodeVerdictName
    step: str
    # The findings that set the verdict (the largest step's), and every finding.
    because: list[str] = msgspec.field(default_factory=list)
    findings: list[str] = msgspec.field(default_factory=list)
    # Checks that could not be evaluated: a "healthy" with these is healthy as far as seen.
    not_evaluated: list[str] = msgspec.field(default_factory=list)


class Report(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    tool: ToolInfo
    host: HostLine
    fail_on: FailOn
    strict: bool
    results: list[Result]
    summary: Summary
    exit_code: int
    # The node verdict (issue 39); None where the command judges no node (fleet's).
    node: NodeVerdict | None = None
    facts: Facts | None = None


class PresetReport(Report, frozen=True, kw_only=True):
    """A check report on fresh measurements (``probe``, ``scan-logs``: presets of the check
    families they show, :mod:`blackwell_doctor.rules.presets`): ``preset`` names the command,
    ``subject`` says in one line what was judged, ``gate`` how its exit code was decided."""

    preset: str
    subject: str
    gate: str


R_co = TypeVar("R_co", bound=PresetReport, covariant=True)


class PresetDocument(msgspec.Struct, Generic[R_co], frozen=True, kw_only=True):
    """A preset's report with its detail sections, both built where the rules judged the
    measurements (:mod:`blackwell_doctor.rules.presets`): the JSON is ``report`` alone (its
    schema); the text formats place ``sections`` under the results, as they are."""

    report: R_co
    sections: list[Section] = msgspec.field(default_factory=list)


def gate_threshold(fail_on: FailOn, strict: bool) -> str:
    """What makes the exit code non-zero, said plainly: "non-zero on a failure", "non-zero
    on a warning or a failure, or a check not evaluated" (issue 40: "exit 0 (gate: fail)"
    read as "the gate failed"). Every view of check, fleet and the presets says it so."""
    found = "a warning or a failure" if fail_on == "warn" else "a failure"
    return f"non-zero on {found}" + (", or a check not evaluated" if strict else "")


def gate_words(report: Report) -> str:
    """How ``report``'s exit code was decided (:func:`gate_threshold`, or a preset's own
    words in the same form)."""
    if isinstance(report, PresetReport):
        return report.gate
    return gate_threshold(report.fail_on, report.strict)


def summarize(results: Sequence[Result]) -> Summary:
    counts = dict.fromkeys(Status, 0)
    for r in results:
        counts[r.status] += 1
    return Summary(
        pass_=counts[Status.PASS],
        warn=counts[Status.WARN],
        fail=counts[Status.FAIL],
        skip=counts[Status.SKIP],
        error=counts[Status.ERROR],
        total=len(results),
    )


def host_line(facts: Facts, source: str) -> HostLine:
    hostname = facts.platform.hostname if isinstance(facts.platform.hostname, str) else None
    gpus: list[str] = []
    driver: str | None = None
    if isinstance(facts.nvml, NvmlFacts):
        gpus = [g.name if isinstance(g.name, str) else f"GPU {g.index}" for g in facts.nvml.gpus]
        driver = facts.nvml.driver_version if isinstance(facts.nvml.driver_version, str) else None
    elif isinstance(facts.pci, PciFacts):
        gpus = [f"PCI {g.bdf} (10de:{_hex4(g.device_id)})" for g in facts.pci.gpus]
    if driver is None and isinstance(facts.platform.nvidia_kernel_module, str):
        driver = f"{facts.platform.nvidia_kernel_module} (kernel module)"
    return HostLine(hostname=hostname, gpus=gpus, driver_version=driver, source=source)


def _hex4(value: int | object) -> str:
    return f"{value:04x}" if isinstance(value, int) else "????"


def build_report(
    facts: Facts,
    results: Sequence[Result],
    *,
    fail_on: FailOn,
    strict: bool,
    source: str,
    embed_facts: bool,
    node: NodeVerdict | None = None,
) -> Report:
    return Report(
        schema_version=REPORT_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        host=host_line(facts, source),
        fail_on=fail_on,
        strict=strict,
        results=list(results),
        summary=summarize(results),
        exit_code=int(exitcodes.results_gate((r.status for r in results), fail_on, strict)),
        node=node,
        facts=facts if embed_facts else None,
    )
