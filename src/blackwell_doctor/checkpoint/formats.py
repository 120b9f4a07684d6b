"""Output formats of the ``model`` document (imported by the CLI at start-up: enum only)."""

from __future__ import annotations

import enum


class ModelFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"
    MARKDOWN = "markdown"
