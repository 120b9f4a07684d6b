"""The formats of the ``bench`` documents (apart from the renderers, so that the CLI
declares ``--format`` without importing the client)."""

from __future__ import annotations

import enum


class BenchFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"
    MARKDOWN = "markdown"
