"""Every document's output formats, one enum per document (the CLI declares ``--format``
from here without importing a renderer)."""

from __future__ import annotations

import enum
from typing import assert_never


class Format(enum.StrEnum):
    """The formats of the check report (``check --format``)."""

    RICH = "rich"
    JSON = "json"
    JUNIT = "junit"
    MARKDOWN = "markdown"
    PROMETHEUS = "prometheus"
    NFD = "nfd"

    @property
    def extension(self) -> str:
        """The file extension a document in this format is saved with (goldens, --output)."""
        match self:
            case Format.RICH:
                return "txt"
            case Format.JSON:
                return "json"
            case Format.JUNIT:
                return "xml"
            case Format.MARKDOWN:
                return "md"
            case Format.PROMETHEUS:
                return "prom"
            case Format.NFD:
                return "nfd"
            case _:
                assert_never(self)


class BenchFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"
    MARKDOWN = "markdown"
    HTML = "html"


class ModelFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"
    MARKDOWN = "markdown"


class FleetFormat(enum.StrEnum):
    RICH = "rich"
    MARKDOWN = "markdown"
    JSON = "json"
    PROMETHEUS = "prometheus"
    HTML = "html"


class ScanLogsFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"


class ProbeFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"


class RecommendFormat(enum.StrEnum):
    """``recommend --format``; without it, rich on a terminal and Markdown otherwise."""

    RICH = "rich"
    MARKDOWN = "markdown"
    JSON = "json"
    SHELL = "shell"
    COMPOSE = "compose"
