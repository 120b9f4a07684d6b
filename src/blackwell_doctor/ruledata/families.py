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


class Family(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    model_types: list[str]
    layout: Layout
    active: ActiveConvention
    active_source: str
    source: str


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
