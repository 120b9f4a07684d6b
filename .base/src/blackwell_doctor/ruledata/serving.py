"""The data of the ``serving.*`` checks (checks/serving.toml): throughput expectations per
model, GPU, GPU count and concurrency, each figure with its public source and how sure it
is; the latency-tail and error thresholds with their reasoning. Validated at load, like
every file under checks/ (checkdata.py)."""

# Annotations are evaluated at class creation (no `from __future__ import annotations`):
# msgspec would otherwise eval every struct's strings when the catalogue is converted.
import functools
from typing import Annotated

import msgspec

from blackwell_doctor.ruledata.checkdata import load_shipped

Positive = Annotated[float, msgspec.Meta(gt=0.0)]
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class Figure(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A throughput figure: output tokens/s of the whole server at the shape's concurrency."""

    output_tokens_per_s: Positive
    source: str
    confidence: str


class Expectation(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one model serves at on one kind of GPU host, at one concurrency.

    A bench shape matches when the served model's name contains one of ``model_names``
    (case-insensitive), every GPU of the facts is named like ``gpu`` and there are
    ``gpu_count`` of them, the shape runs ``concurrency`` users and asks for at most
    ``max_input_tokens`` (longer prompts spend their time in prefill, which these
    figures do not cover)."""

    id: str
    model: str  # as the report names it
    model_names: list[str]
    gpu: str
    gpu_count: Annotated[int, msgspec.Meta(ge=1)]
    concurrency: Annotated[int, msgspec.Meta(ge=1)]
    max_input_tokens: Annotated[int, msgspec.Meta(ge=1)]
    # Below the floor the server is on a slow path; at or above typical it serves as the
    # best public controlled figure did.
    floor: Figure
    typical: Figure


class LatencyTail(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # ITL p99 / p50 above which a shape's decode steps stalled: one user, and several.
    itl_p99_over_p50_one_user: Positive
    itl_p99_over_p50_concurrent: Positive
    # An ITL p50 below this (ms) is tokens reaching the client in bursts, not one step
    # at a time: the ratio then measures nothing, and the bursts are the finding.
    min_itl_p50_ms: Positive
    # Gaps a p99 needs (10 above it, the rule `bench --compare` uses).
    min_itl_samples: Annotated[int, msgspec.Meta(ge=1)]
    source: str


class ErrorThresholds(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # Failed requests at or above this fraction of a shape's make serving.errors fail (and
    # block the figures); fewer are a warning.
    fail_fraction: Fraction
    source: str


class ServingData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    expectation: list[Expectation]
    latency_tail: LatencyTail
    errors: ErrorThresholds


@functools.cache
def load_serving_data() -> ServingData:
    return load_shipped("serving.toml", ServingData)
