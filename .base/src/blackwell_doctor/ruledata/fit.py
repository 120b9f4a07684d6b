"""The model-fit data (checks/model_fit.toml): the runtime's memory overheads and the
unified-memory GPUs, read through the one TOML decoder. The verdict is rules/fit.py."""

# Annotations are evaluated at class creation (no `from __future__ import annotations`):
# msgspec would otherwise eval every struct's strings when the catalogue is converted.
import functools

import msgspec

from blackwell_doctor.ruledata.checkdata import load_shipped

GIB = 1 << 30


class _Fit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    gpu_memory_utilization: float
    min_context_tokens: int
    default_kv_bytes: int
    mamba_states_per_sequence: int
    source: str


class _Overhead(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    non_torch_gib: float
    activation_peak_gib: float
    cuda_graphs_gib: float
    source: str

    @property
    def bytes(self) -> int:
        return int((self.non_torch_gib + self.activation_peak_gib + self.cuda_graphs_gib) * GIB)


class _Unified(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    match: str
    memory_bytes: int
    os_reserve_gib: float
    source: str


class FitData(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema_version: int
    fit: _Fit
    overhead: _Overhead
    unified: list[_Unified] = msgspec.field(default_factory=list)


@functools.cache
def load_fit_data() -> FitData:
    """checks/model_fit.toml, validated (CatalogueError when it is malformed: a packaging or
    editing bug)."""
    return load_shipped("model_fit.toml", FitData)
