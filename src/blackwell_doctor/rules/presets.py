"""Presets: the commands that show a few check families on fresh measurements.

``probe`` and ``scan-logs`` measure (probe kernels, peer transfers, a log scan), put what
they measured into facts, and judge those facts with the same checks as ``check``: the
``probe`` family (``probe.smem_limit``, ``probe.tiles``), ``p2p.transfer`` or the ``logs``
family. Their reports are the check report (:class:`~blackwell_doctor.report.check.Report`)
plus what the preset measured; each comes in a
:class:`~blackwell_doctor.report.check.PresetDocument` with its detail sections (the tile
table, the peer-transfer matrix, the log hits: :mod:`blackwell_doctor.rules.details`), built
here with the verdicts, which the shared renderers place under the results. Pure like
:mod:`blackwell_doctor.rules.evaluate`: no I/O, no collection.

Exit codes are the ones these commands always had:

- ``probe``: 0 when everything was measured, 1 when a measurement contradicts the driver or
  the arithmetic (:func:`~blackwell_doctor.rules.probe.probe_findings`), 3 when the probes
  could not run;
- ``probe --p2p``: the gate ``warn``, strict, over ``p2p.transfer`` (1: a pair broken or
  slower than host staging; 3: a pair that could not be tested), 3 when the test could not
  run at all, 0 on one GPU;
- ``probe --plan``: 0 (arithmetic, no verdict);
- ``scan-logs``: ``--fail-on`` over the ``logs`` checks (a finding's severity is its check's
  status), 2 when no input could be read.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.facts.document import (
    SCHEMA_VERSION,
    ContainerFacts,
    CudaFacts,
    Facts,
    LogFacts,
    LogSource,
    NvmlFacts,
    P2PProbeFacts,
    PciFacts,
    PlatformFacts,
    ProbeFacts,
    SkipReason,
    TileProbe,
    ToolInfo,
    Unavailable,
    WslFacts,
)
from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.check import (
    HostLine,
    PresetDocument,
    PresetReport,
    Report,
    gate_threshold,
    host_line,
    summarize,
)
from blackwell_doctor.report.exitcodes import ExitCode
from blackwell_doctor.report.results import FailOn
from blackwell_doctor.rules import details
from blackwell_doctor.rules.evaluate import evaluate
from blackwell_doctor.rules.logs import JudgedFinding, judge_findings

# 3: the check report's fields (results, summary, gate) with what was measured beside them;
# version 2 carried its own verdict fields (``p2p_verdicts``, top-level smem limits).
PROBE_SCHEMA_VERSION = 3
# 2: the check report's fields beside the scan's sources and judged findings (version 1:
# sources, findings and exit code alone).
SCAN_SCHEMA_VERSION = 2

# The checks each preset shows (prefixes, as --select takes them).
PROBE_CHECKS = ("probe",)
P2P_CHECKS = ("p2p.transfer",)
LOG_CHECKS = ("logs",)

ProbeMode = Literal["plan", "measured", "p2p"]


class ProbeReport(PresetReport, frozen=True, kw_only=True):
    """``probe --format json``: the results of the probe checks, and what was measured (or,
    with ``--plan``, computed)."""

    mode: ProbeMode
    # plan: the limit given and CUTLASS's arithmetic per tile.
    smem_limit: int | None = None
    tiles: list[TileProbe] = msgspec.field(default_factory=list)
    # measured: every device's limits and tiles (or why the probes could not run).
    probes: ProbeFacts | Unavailable | None = None
    # p2p: the verified peer-transfer test per GPU pair (or why it could not run).
    p2p: P2PProbeFacts | Unavailable | None = None


class ScanReport(PresetReport, frozen=True, kw_only=True):
    """``scan-logs --format json``: the logs checks' results, every source, and every
    finding as the rules judged it (worst first); written whole whatever the outcome."""

    sources: list[LogSource]
    findings: list[JudgedFinding]
    # What a directory scan skipped, by reason (collect/logs/walk.py): directories (VCS,
    # virtual environments, caches, pseudo filesystems, the tool's own data) and files
    # (not named like a log, binary).
    skipped: dict[SkipReason, int] = msgspec.field(default_factory=dict)


def assembled_facts(
    *,
    platform: PlatformFacts,
    pci: PciFacts | Unavailable,
    nvml: NvmlFacts | Unavailable,
    cuda: CudaFacts | Unavailable,
    env: dict[str, str] | None = None,
    logs: LogFacts | None = None,
) -> Facts:
    """Facts this process puts together from the parts it read, not a collection of a host
    (``scan-logs``, ``bench``'s live host): no collection time, host root ``/``, not
    redacted."""
    return Facts(
        schema_version=SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        collected_at="",
        host_root="/",
        redacted=False,
        platform=platform,
        pci=pci,
        nvml=nvml,
        cuda=cuda,
        env=env or {},
        logs=logs,
    )


def logs_only_facts(logs: LogFacts) -> Facts:
    """Facts that hold a log scan and nothing else (``scan-logs`` reads no host): every
    other part unavailable, ``not-collected``."""
    none = Unavailable("not-collected")
    return assembled_facts(
        platform=PlatformFacts(
            hostname=none,
            kernel_release=none,
            kernel_version=none,
            kernel_cmdline=none,
            os_release=none,
            wsl=WslFacts(kind="unknown"),
            container=ContainerFacts(in_container=False),
            cpu=none,
            nvidia_kernel_module=none,
        ),
        pci=none,
        nvml=none,
        cuda=none,
        logs=logs,
    )


def _probe_report(
    facts: Facts | None,
    judged: Report | None,
    *,
    exit_code: ExitCode,
    preset: str,
    subject: str,
    gate: str,
    mode: ProbeMode,
    smem_limit: int | None = None,
    tiles: list[TileProbe] | None = None,
    probes: ProbeFacts | Unavailable | None = None,
    p2p: P2PProbeFacts | Unavailable | None = None,
) -> ProbeReport:
    host = (
        host_line(facts, "live")
        if facts is not None
        else HostLine(hostname=None, gpus=[], driver_version=None, source="none")
    )
    # The gate is the one the checks were judged with; nothing judged (--plan): the default.
    results = [] if judged is None else judged.results
    return ProbeReport(
        schema_version=PROBE_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        host=host,
        fail_on="fail" if judged is None else judged.fail_on,
        strict=False if judged is None else judged.strict,
        results=list(results),
        summary=summarize(results),
        exit_code=int(exit_code),
        preset=preset,
        subject=subject,
        gate=gate,
        mode=mode,
        smem_limit=smem_limit,
        tiles=tiles or [],
        probes=probes,
        p2p=p2p,
    )


def judge_probe(host: Facts, probes: ProbeFacts | Unavailable) -> PresetDocument[ProbeReport]:
    """``probe``: the probe checks on ``host`` (this host's facts) with ``probes`` just
    measured."""
    facts = _with(host, probes=probes)
    report = evaluate(facts, select=PROBE_CHECKS, fail_on="warn", strict=True, source="live")
    if isinstance(probes, Unavailable) or not probes.devices:
        code = exitcodes.gate(findings=False, not_evaluated=True, strict=True)
        why = probes.reason if isinstance(probes, Unavailable) else "no device probed"
        subject = f"probes could not run: {why}"
    else:
        from blackwell_doctor.rules.probe import probe_findings

        wrong = [f for d in probes.devices for f in probe_findings(d)]
        code = exitcodes.gate(findings=bool(wrong), not_evaluated=False, strict=True)
        nvrtc = probes.nvrtc_version if isinstance(probes.nvrtc_version, str) else "unavailable"
        subject = (
            f"measured on this host (NVRTC {nvrtc}, kernel cache {probes.cache}, "
            f"{probes.wall_s:.2f} s)"
        )
    probe_report = _probe_report(
        facts,
        report,
        exit_code=code,
        preset="probe",
        subject=subject,
        gate="non-zero on a measurement the driver or the arithmetic contradicts",
        mode="measured",
        probes=probes,
    )
    return PresetDocument(report=probe_report, sections=details.probe_sections(probes))


def judge_p2p(host: Facts, transfers: P2PProbeFacts | Unavailable) -> PresetDocument[ProbeReport]:
    """``probe --p2p``: ``p2p.transfer`` on ``host`` with ``transfers`` just measured."""
    facts = _with(host, p2p_transfers=transfers)
    report = evaluate(facts, select=P2P_CHECKS, fail_on="warn", strict=True, source="live")
    code = ExitCode(report.exit_code)
    if isinstance(transfers, Unavailable):
        skipped = transfers.reason.startswith("skipped:")
        # The test did not run: "not evaluated", whatever blocked the check.
        code = exitcodes.gate(findings=False, not_evaluated=not skipped, strict=True)
        what = "not applicable" if skipped else "the test did not run"
        subject = f"GPU peer-to-peer: {what} ({transfers.reason.removeprefix('skipped:')})"
    else:
        subject = (
            f"GPU peer-to-peer transfers measured on this host ({len(transfers.pairs)} "
            f"pair(s), {transfers.wall_s:.1f} s)"
        )
    p2p_report = _probe_report(
        facts,
        report,
        exit_code=code,
        preset="probe --p2p",
        subject=subject,
        gate=gate_threshold("warn", strict=True),
        mode="p2p",
        p2p=transfers,
    )
    return PresetDocument(report=p2p_report, sections=details.p2p_sections(transfers))


def judge_plan(smem_limit: int, tiles: list[TileProbe]) -> PresetDocument[ProbeReport]:
    """``probe --plan``: CUTLASS's arithmetic for ``smem_limit``; nothing measured, nothing
    judged."""
    plan_report = _probe_report(
        None,
        None,
        exit_code=ExitCode.OK,  # nothing judged
        preset="probe --plan",
        subject=(
            f"PLAN for a {smem_limit:,} B shared-memory limit: CUTLASS's arithmetic only, "
            "nothing was launched"
        ),
        gate="arithmetic only",
        mode="plan",
        smem_limit=smem_limit,
        tiles=tiles,
    )
    return PresetDocument(report=plan_report, sections=details.plan_sections(smem_limit, tiles))


def judge_logs(logs: LogFacts, *, fail_on: FailOn) -> PresetDocument[ScanReport]:
    """``scan-logs``: the logs checks on a scan. Exit 2 when inputs were named and none
    could be read; else ``fail_on`` over the checks."""
    facts = logs_only_facts(logs)
    report = evaluate(facts, select=LOG_CHECKS, fail_on=fail_on, source="logs")
    code = report.exit_code
    # Read at least in part (an error after some bytes still counts as read).
    if logs.sources and not any(s.error is None or s.bytes > 0 for s in logs.sources):
        code = int(exitcodes.unreadable_input())
    n, lines = len(logs.sources), sum(s.lines for s in logs.sources)
    findings = judge_findings(logs)
    scan_report = ScanReport(
        schema_version=SCAN_SCHEMA_VERSION,
        tool=report.tool,
        host=HostLine(hostname=None, gpus=[], driver_version=None, source="logs"),
        fail_on=fail_on,
        strict=False,
        results=report.results,
        summary=report.summary,
        exit_code=code,
        node=report.node,
        preset="scan-logs",
        subject=f"{n} log source{'s' if n != 1 else ''}, {lines:,} lines scanned",
        gate=gate_threshold(fail_on, strict=False),
        sources=list(logs.sources),
        findings=findings,
        skipped=dict(logs.skipped),
    )
    return PresetDocument(
        report=scan_report,
        sections=details.log_sections(scan_report.sources, findings, logs.skipped),
    )


def _with(
    host: Facts,
    *,
    probes: ProbeFacts | Unavailable | None = None,
    p2p_transfers: P2PProbeFacts | Unavailable | None = None,
) -> Facts:
    """``host`` with what was just measured in place of what its collection recorded."""
    changes: dict[str, object] = {}
    if probes is not None:
        changes["probes"] = probes
    if p2p_transfers is not None:
        changes["p2p_transfers"] = p2p_transfers
    return msgspec.structs.replace(host, **changes)


__all__ = [
    "PROBE_SCHEMA_VERSION",
    "SCAN_SCHEMA_VERSION",
    "ProbeReport",
    "ScanReport",
    "assembled_facts",
    "judge_logs",
    "judge_p2p",
    "judge_plan",
    "judge_probe",
    "logs_only_facts",
]
