"""The fleet document (``fleet --format json``; schema: schemas/fleet.schema.json)."""

from __future__ import annotations

import msgspec

from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.report.results import FailOn, Finding, Remedy

FLEET_SCHEMA_VERSION = 1


class FleetGroup(Finding, frozen=True, kw_only=True):
    """One finding shared by ``nodes``: the same check, status, summary and remedy."""

    remedy: Remedy | None
    nodes: list[str]


class FleetBenchShape(msgspec.Struct, frozen=True, kw_only=True):
    """One shape of a node's bench run, as measured (figures in ms and tokens/s)."""

    name: str
    concurrency: int
    requests: int
    failed: int
    output_tokens_per_s: float | None
    answer_tokens_per_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None


class FleetBench(msgspec.Struct, frozen=True, kw_only=True):
    """The bench run a node's facts carry (collect --bench): what was measured, when."""

    model: str | None
    started_at: str
    shapes: list[FleetBenchShape]


class FleetNode(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One judged node: its name (hostname, or the file's name when redacted or missing),
    the facts file, and what ``check --facts`` on that file would have exited with; its
    bench figures when its facts carry a run (absent otherwise)."""

    name: str
    source: str
    exit_code: int
    fail: int
    warn: int
    error: int
    bench: FleetBench | None = None


class Unjudged(msgspec.Struct, frozen=True, kw_only=True):
    """An input that could not be judged: unreadable, malformed, or from a future schema."""

    source: str
    reason: str


class FleetSummary(msgspec.Struct, frozen=True, kw_only=True):
    nodes: int  # judged
    ok: int  # exit 0
    findings: int  # exit 1
    not_evaluated: int  # exit 3 (--strict)
    unjudged: int
    # Nodes by their worst status, whatever the gate: a node with warnings is not "ok"
    # (issue 23). A node with neither fail nor warn counts as ok here.
    worst_fail: int = 0
    worst_warn: int = 0
    worst_ok: int = 0


class FleetReport(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    tool: ToolInfo
    fail_on: FailOn
    strict: bool
    summary: FleetSummary
    groups: list[FleetGroup]  # worst first
    unjudged: list[Unjudged]
    nodes: list[FleetNode]
    exit_code: int
