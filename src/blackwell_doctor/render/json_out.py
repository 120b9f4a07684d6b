"""``--format json``: the report as msgspec encodes it (schema: schemas/report.schema.json)."""

from __future__ import annotations

import msgspec

from blackwell_doctor.report.check import Report


def render_json(report: Report) -> str:
    # Fields stay in declaration order (schema_version first) so diffs of saved reports and
    # goldens are stable; the trailing newline keeps `cat` and POSIX tools happy.
    return msgspec.json.format(msgspec.json.encode(report), indent=2).decode("utf-8") + "\n"
