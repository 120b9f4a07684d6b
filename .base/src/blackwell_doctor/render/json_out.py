"""``--format json``: the report as msgspec encodes it (schema: schemas/report.schema.json)."""

from __future__ import annotations

from blackwell_doctor.render.common import json_document
from blackwell_doctor.report.check import Report


def render_json(report: Report) -> str:
    return json_document(report)
