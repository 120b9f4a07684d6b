"""Write the JSON Schemas shipped in this folder from the msgspec types they describe.

    python -m blackwell_doctor.schemas.generate          # rewrite the files
    python -m blackwell_doctor.schemas.generate --check  # exit 1 when a file is stale

The types are the single source of truth; tests/test_render.py fails when a shipped file
differs from what this module generates, so the schemas can never drift from the code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from blackwell_doctor.facts.document import SCHEMA_VERSION as FACTS_SCHEMA_VERSION
from blackwell_doctor.facts.document import Facts
from blackwell_doctor.recommend.plan import RECOMMENDATION_SCHEMA_VERSION, Recommendation
from blackwell_doctor.report.bench import (
    BENCH_SCHEMA_VERSION,
    COMPARE_SCHEMA_VERSION,
    BenchRun,
    CompareDocument,
)
from blackwell_doctor.report.bench_ladder import LADDER_SCHEMA_VERSION, LadderDocument
from blackwell_doctor.report.check import REPORT_SCHEMA_VERSION, Report
from blackwell_doctor.report.fleet import FLEET_SCHEMA_VERSION, FleetReport
from blackwell_doctor.report.model import MODEL_SCHEMA_VERSION, ModelReport
from blackwell_doctor.rules.presets import (
    PROBE_SCHEMA_VERSION,
    SCAN_SCHEMA_VERSION,
    ProbeReport,
    ScanReport,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = Path(__file__).resolve().parent


def _schema(kind: str, version: int, type_: type[Any]) -> dict[str, Any]:
    # A URN, not a URL: nothing is served at any address, and a URN cannot be mistaken for
    # one. The document version is in it, so a consumer can tell which schema it holds.
    return {
        "$schema": DRAFT,
        "$id": f"urn:blackwell-doctor:schema:{kind}:v{version}",
        **msgspec.json.schema(type_),
    }


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "report.schema.json": lambda: _schema("report", REPORT_SCHEMA_VERSION, Report),
    "facts.schema.json": lambda: _schema("facts", FACTS_SCHEMA_VERSION, Facts),
    "probe.schema.json": lambda: _schema("probe", PROBE_SCHEMA_VERSION, ProbeReport),
    "scan-logs.schema.json": lambda: _schema("scan-logs", SCAN_SCHEMA_VERSION, ScanReport),
    "fleet.schema.json": lambda: _schema("fleet", FLEET_SCHEMA_VERSION, FleetReport),
    "recommend.schema.json": lambda: _schema(
        "recommend", RECOMMENDATION_SCHEMA_VERSION, Recommendation
    ),
    "model.schema.json": lambda: _schema("model", MODEL_SCHEMA_VERSION, ModelReport),
    "bench.schema.json": lambda: _schema("bench", BENCH_SCHEMA_VERSION, BenchRun),
    "bench-compare.schema.json": lambda: _schema(
        "bench-compare", COMPARE_SCHEMA_VERSION, CompareDocument
    ),
    "bench-ladder.schema.json": lambda: _schema(
        "bench-ladder", LADDER_SCHEMA_VERSION, LadderDocument
    ),
}


def schema_file_text(name: str) -> str:
    """The exact text the shipped file ``name`` must have."""
    return json.dumps(SCHEMAS[name](), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m blackwell_doctor.schemas.generate")
    parser.add_argument(
        "--check", action="store_true", help="only report stale files (exit 1), write nothing"
    )
    args = parser.parse_args(argv)
    stale = []
    for name in SCHEMAS:
        path = SCHEMA_DIR / name
        text = schema_file_text(name)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(text, encoding="utf-8")
    for name in stale:
        print(f"{'stale' if args.check else 'wrote'}: {SCHEMA_DIR / name}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
