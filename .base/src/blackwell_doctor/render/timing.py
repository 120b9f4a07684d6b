"""When a run started and how long it took: for the formats that report it (prometheus,
nfd), kept apart so that asking for it imports no renderer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunTiming:
    """When the run started (Unix seconds) and how long collecting and judging took."""

    started_at: float
    duration_s: float
