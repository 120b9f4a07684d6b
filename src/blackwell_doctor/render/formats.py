"""Every document's output formats, one enum per document (the CLI declares ``--format``
from here without importing a renderer)."""

from __future__ import annotations

import enum


class BenchFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"
    MARKDOWN = "markdown"


class ModelFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"
    MARKDOWN = "markdown"


class FleetFormat(enum.StrEnum):
    RICH = "rich"
    MARKDOWN = "markdown"
    JSON = "json"
    PROMETHEUS = "prometheus"


class ScanLogsFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"


class ProbeFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"


class RecommendFormat(enum.StrEnum):
    markdown = "markdown"
    json = "json"
    shell = "shell"
    compose = "compose"
