"""checks/preflight.toml: the thresholds and stated figures of the host pre-flight checks
(link.*, bar1.*, module.*, collective.*, memory.*; issue 26)."""

# Annotations are evaluated at class creation (no `from __future__ import annotations`):
# msgspec would otherwise eval every struct's strings when the catalogue is converted.
import functools

import msgspec

from blackwell_doctor.ruledata.checkdata import load_shipped


class LinkData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    gbps_per_lane: dict[str, float]
    source: str

    def link_gbps(self, gen: int, width: int) -> float | None:
        """One direction's usable rate of a gen x width link; None for an unknown gen."""
        per_lane = self.gbps_per_lane.get(str(gen))
        return None if per_lane is None else per_lane * width


class Bar1Data(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    legacy_bytes: int
    source: str


class ModuleData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    open_required_from_major: int
    open_required_from_device_id: int
    source: str


class CollectiveData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    size_bytes: int = msgspec.field(default=64 << 20)
    iterations: int = 5
    run_timeout_s: float = 15.0
    min_busbw_vs_link: float = 0.5
    symm_mem_ccs: list[str] = msgspec.field(default_factory=list)
    source: str = ""

    def uses_symm_mem(self, cc: tuple[int, int] | None) -> bool:
        """Whether vLLM's symmetric-memory all-reduce sets up its buffers on this GPU."""
        return cc is not None and f"{cc[0]}.{cc[1]}" in self.symm_mem_ccs


class MemoryData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    unified_ccs: list[str]
    margin: float
    min_utilization: float
    source: str

    def is_unified(self, cc: tuple[int, int] | None) -> bool:
        return cc is not None and f"{cc[0]}.{cc[1]}" in self.unified_ccs


class PreflightData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    link: LinkData
    bar1: Bar1Data
    module: ModuleData
    collective: CollectiveData
    memory: MemoryData


@functools.cache
def load_preflight() -> PreflightData:
    return load_shipped("preflight.toml", PreflightData)
