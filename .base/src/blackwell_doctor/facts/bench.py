"""The ``bench`` section of the facts document: what a ``bench`` run measured on the server
(``collect --bench run.json``), never a verdict.

The ``serving.*`` checks judge it with the expectations and thresholds of the tool that
reads the facts (checks/serving.toml), so ``check --facts`` on an old capture gives today's
verdicts. Kept in its own module so that facts.py gains one optional field; its types are
the facts document's own contract, apart from the bench run document's (bench.schema.json):
:func:`blackwell_doctor.report.bench_facts.from_run` copies the measurements over and leaves out
the per-request samples (their counts are kept) and the greedy outputs.
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import
# annotations`): msgspec would otherwise eval every struct's strings when a decoder is
# built, ~4 ms of each command that reads facts.
from typing import Annotated

import msgspec

# A bench run's figures: finite and not negative (a facts file is untrusted input).
Ms = Annotated[float, msgspec.Meta(ge=0.0, le=1e9)]
Rate = Annotated[float, msgspec.Meta(ge=0.0, le=1e12)]
Tokens = Annotated[int, msgspec.Meta(ge=0, le=1 << 50)]
MAX_SHAPES = 256


class BenchStats(msgspec.Struct, frozen=True, kw_only=True):
    """Mean and percentiles (``vllm bench serve``'s definitions); null without samples."""

    mean: Ms | None = None
    p50: Ms | None = None
    p90: Ms | None = None
    p95: Ms | None = None
    p99: Ms | None = None


class BenchShapeFacts(msgspec.Struct, frozen=True, kw_only=True):
    """One shape of a bench run: its load, what happened to its requests, its figures."""

    name: str
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)]
    input_tokens: Tokens  # asked for, after the server's cap
    output_tokens_max: Tokens
    requests: Tokens  # measured requests sent (finished or failed)
    completed: Tokens
    # Failed requests by kind (bench's names: stalled, early_close, http_5xx, ...).
    errors: dict[str, Tokens] = msgspec.field(default_factory=dict)
    duration_s: Annotated[float, msgspec.Meta(ge=0.0, le=1e9)]
    # False when the run was interrupted or --duration stopped it before all requests.
    complete: bool
    ttft_ms: BenchStats = msgspec.field(default_factory=BenchStats)
    tpot_ms: BenchStats = msgspec.field(default_factory=BenchStats)
    itl_ms: BenchStats = msgspec.field(default_factory=BenchStats)
    e2e_ms: BenchStats = msgspec.field(default_factory=BenchStats)
    # Inter-token gaps the ITL figures pool (every successful request's), so a reader can
    # tell whether a p99 rests on enough samples.
    itl_samples: Tokens = 0
    # usage.completion_tokens summed over successful requests: answer + reasoning.
    output_tokens: Tokens
    reasoning_tokens: Tokens
    answer_tokens: Tokens
    output_tokens_per_s: Rate | None = None
    answer_tokens_per_s: Rate | None = None
    output_tokens_per_s_per_user: BenchStats = msgspec.field(default_factory=BenchStats)
    requests_per_s: Rate | None = None
    # "usage": the server's usage; "estimated": no usage, this client's count of chunks.
    token_source: str
    # "usage", "estimated" (the client's count of the reasoning text) or "none".
    reasoning_source: str
    # The server's own /metrics over the run: generation tokens and its ITL histogram mean.
    server_generation_tokens: Rate | None = None
    server_itl_mean_ms: Ms | None = None
    server_preemptions: Rate | None = None


class BenchFacts(msgspec.Struct, frozen=True, kw_only=True):
    """One ``bench`` run against the server this host serves from."""

    source: str  # the run file as given to --bench
    started_at: str
    tool: str  # "blackwell-doctor 0.1.0": the bench that measured it
    url: str  # without credentials; the host part hidden by --redact
    # The served model's name (bench --model, else the one /v1/models lists); None when
    # the server could not be asked.
    model: str | None
    max_model_len: Tokens | None = None
    server_error: str | None = None  # why the server could not be asked (unreachable...)
    complete: bool
    interrupted: bool
    shapes: Annotated[list[BenchShapeFacts], msgspec.Meta(max_length=MAX_SHAPES)] = msgspec.field(
        default_factory=list
    )
