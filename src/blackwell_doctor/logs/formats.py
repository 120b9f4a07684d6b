"""The formats of the ``scan-logs`` document (apart from the renderers, so that the CLI
declares ``--format`` without importing the log scanner)."""

from __future__ import annotations

import enum


class ScanLogsFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"
