"""The formats of the fleet document (imported by the CLI at start-up: no renderer here)."""

from __future__ import annotations

import enum


class FleetFormat(enum.StrEnum):
    RICH = "rich"
    MARKDOWN = "markdown"
    JSON = "json"
    PROMETHEUS = "prometheus"
