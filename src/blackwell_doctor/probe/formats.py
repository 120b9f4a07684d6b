"""The formats of the ``probe`` document (apart from the renderers, so that the CLI
declares ``--format`` without importing the probes)."""

from __future__ import annotations

import enum


class ProbeFormat(enum.StrEnum):
    RICH = "rich"
    JSON = "json"
