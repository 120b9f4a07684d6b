"""The recommend output formats (kept apart so the CLI declares them without importing the
renderers)."""

from __future__ import annotations

import enum


class RecommendFormat(enum.StrEnum):
    markdown = "markdown"
    json = "json"
    shell = "shell"
    compose = "compose"
