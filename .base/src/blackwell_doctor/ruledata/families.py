"""The model families ``model DIR`` counts (checks/model_families.toml): which config.json
``model_type`` values each covers, its layer layout, and how its publisher counts active
parameters. A model_type not listed is not modelled (collect.model.config says so)."""

from __future__ import annotations

import functools
from typing import Literal

import msgspec

from blackwell_doctor.ruledata.checkdata import CatalogueError, load_shipped, shipped_source

Layout = Literal["decoder", "nemotron_h", "granite_hybrid", "jamba", "falcon_h1"]
ActiveConvention = Literal["with-embedding", "without-embedding", "both", "unknown"]
QkNorm = Literal["none", "per-head", "per-layer"]
AttentionBias = Literal["qkvo", "qkv"]


class Family(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    model_types: list[str]
    layout: Layout
    active: ActiveConvention
    active_source: str
    source: str
    # The values the family's transformers config class fills in for fields its published
    # config.json leaves out (Gemma 3's text_config names no vocab_size or head_dim), and
    # where they come from. A config.json value always wins.
    defaults: dict[str, int | bool] = {}
    defaults_source: str = ""
    # Decoder-layer details the parameter count needs beyond the config's fields: RMS norms
    # per layer (Gemma: 4), the shape of the q/k norms when the config's use_qk_norm is true
    # (per head: head_dim each; per layer: over all heads), which projections
    # attention_bias puts a bias on, and whether the router has a score-correction bias.
    norms_per_layer: int = 2
    qk_norm: QkNorm = "none"
    attention_bias: AttentionBias = "qkvo"
    router_bias: bool = False


class FamilyData(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema_version: int
    family: list[Family]

    def by_model_type(self, model_type: str) -> Family | None:
        return next((f for f in self.family if model_type in f.model_types), None)

    def by_name(self, name: str) -> Family | None:
        return next((f for f in self.family if f.name == name), None)

    def known(self) -> list[str]:
        return sorted(t for f in self.family for t in f.model_types)


@functools.cache
def load_families() -> FamilyData:
    """checks/model_families.toml, validated (CatalogueError when malformed or when a
    model_type is listed twice)."""
    data = load_shipped("model_families.toml", FamilyData)
    seen: set[str] = set()
    for f in data.family:
        for t in f.model_types:
            if t in seen:
                raise CatalogueError(
                    f"{shipped_source('model_families.toml')}: model_type {t!r} is listed twice"
                )
            seen.add(t)
    return data
