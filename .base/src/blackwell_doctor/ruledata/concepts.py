"""The config.json keys each concept of the decoder count goes by (checks/model_concepts.toml,
written by tools/modelconcepts.py from transformers' configuration files): experts are
``num_experts`` in Qwen's configs, ``n_routed_experts`` in DeepSeek's, ``num_local_experts``
in Mixtral's and ``moe_num_experts`` in ERNIE's. collect.model.config reads a concept through
its keys, never through one spelling, so a new model that names a known concept its own
(known) way is still counted."""

from __future__ import annotations

import functools
from typing import Literal

import msgspec

from blackwell_doctor.ruledata.checkdata import CatalogueError, load_shipped, shipped_source

ConceptName = Literal[
    "hidden_size",
    "num_layers",
    "num_attention_heads",
    "num_kv_heads",
    "multi_query",
    "head_dim",
    "vocab_size",
    "intermediate_size",
    "expert_intermediate_size",
    "shared_expert_intermediate_size",
    "experts",
    "experts_per_token",
    "shared_experts",
    "dense_placement",
    "layer_types",
    "sliding_window",
    "tied_embeddings",
    "nested_config",
    "activation",
    "attention_bias",
    "qk_norm",
    "mla",
    "max_positions",
]
ConceptKind = Literal["count", "flag", "list", "nested", "activation", "placement", "layer-kinds"]


class ConceptKey(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    key: str
    source: str  # the configuration file (or publisher config.json) that uses the key


class Concept(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: ConceptName
    kind: ConceptKind
    what: str
    keys: list[ConceptKey]


class ConceptData(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema_version: int
    source: str
    concept: list[Concept]


@functools.cache
def concept_keys() -> dict[str, tuple[str, ...]]:
    """Each concept's keys, in the order the count tries them."""
    return {c.name: tuple(k.key for k in c.keys) for c in load_concepts().concept}


@functools.cache
def all_concept_keys() -> frozenset[str]:
    return frozenset(k for keys in concept_keys().values() for k in keys)


@functools.cache
def load_concepts() -> ConceptData:
    """checks/model_concepts.toml, validated (:func:`validate`)."""
    data = load_shipped("model_concepts.toml", ConceptData)
    validate(data, shipped_source("model_concepts.toml"))
    return data


def validate(data: ConceptData, where: str) -> None:
    """CatalogueError unless every concept the count names is there once, with at least one
    key, each with a source, and no key belongs to two concepts."""
    names = [c.name for c in data.concept]
    missing = sorted(set(ConceptName.__args__) - set(names))  # type: ignore[attr-defined]
    if missing or len(names) != len(set(names)):
        raise CatalogueError(f"{where}: concepts missing ({', '.join(missing)}) or listed twice")
    seen: dict[str, str] = {}
    for c in data.concept:
        if not c.keys:
            raise CatalogueError(f"{where}: concept {c.name!r} has no key")
        for k in c.keys:
            if not k.source.strip():
                raise CatalogueError(f"{where}: key {k.key!r} of {c.name!r} has no source")
            if k.key in seen:
                raise CatalogueError(
                    f"{where}: key {k.key!r} is in both {seen[k.key]!r} and {c.name!r}"
                )
            seen[k.key] = c.name
