"""The ``bench --compare A B C ...`` document (three runs or more): a ladder of steps, each
run against the one before it, and the cumulative change of the first against the last
(JSON schema: schemas/bench-ladder.schema.json). Each step is a whole compare document, so
a step reads exactly as ``bench --compare`` of its two runs would, at the ladder's
confidence."""

from __future__ import annotations

import msgspec

from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.report.bench import CompareDocument

LADDER_SCHEMA_VERSION = 1


class LadderDocument(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    tool: ToolInfo
    runs: list[str]  # the run files, in the order given
    # Of every interval of every step and of the cumulative change together (family-wise):
    # each of the len(runs) compares is taken at 1 - (1 - confidence) / len(runs).
    confidence: float
    per_compare_confidence: float
    steps: list[CompareDocument]  # runs[i] -> runs[i + 1]
    cumulative: CompareDocument  # runs[0] -> runs[-1]
    # What regressed past --fail-on-regression: "step 2 (b.json -> c.json): ...".
    regressions: list[str]
    exit_code: int
