"""The `model` command's document (JSON, versioned, with a shipped schema; rendered by
``render.model``)."""

from __future__ import annotations

import msgspec

from blackwell_doctor.facts.model import (
    EstimateFacts,
    IndexFacts,
    MambaFacts,
    MlaFacts,
    ModelFacts,
    ModelProblem,
    ModelSource,
    MoeFacts,
    ParamFacts,
    QuantFacts,
)
from blackwell_doctor.report import exitcodes

MODEL_SCHEMA_VERSION = 1


class FitEntry(msgspec.Struct, frozen=True, kw_only=True):
    tensor_parallel: int
    expert_parallel: bool | None  # MoE: experts divide evenly over the ranks; None: dense
    fits: bool
    max_context: int | None  # tokens of one sequence; None when it does not fit at all
    reason: str  # the arithmetic, in words
    usable_bytes: int
    weights_per_gpu_bytes: int
    overhead_bytes: int
    kv_budget_bytes: int
    kv_bytes_per_token: int  # attention layers only (hybrid models: Mamba layers keep none)
    # Fixed-size per-sequence state on one GPU: Mamba layers (padded to the attention page
    # as vLLM allocates it) and linear-attention layers; 0 for plain transformers.
    state_bytes_per_sequence: int = 0
    # How many sequences of max_context tokens fit at once (KV + state each).
    sequences_at_max_context: int | None = None


class FitResult(msgspec.Struct, frozen=True, kw_only=True):
    gpus: str  # "4x NVIDIA RTX PRO 6000 ..." as sized
    gpu_count: int
    memory_per_gpu_bytes: int
    memory_source: str
    unified_memory: bool
    gpu_memory_utilization: float
    weights_bytes: int
    # "safetensors headers", the index's metadata.total_size, or how it was estimated
    weights_source: str
    overhead_source: str
    entries: list[FitEntry] = msgspec.field(default_factory=list)


class ModelSummary(msgspec.Struct, frozen=True, kw_only=True):
    architecture: str | None
    model_type: str | None
    quantization: QuantFacts
    moe: MoeFacts | None
    mla: MlaFacts | None
    num_layers: int | None
    hidden_size: int | None
    num_attention_heads: int | None
    num_kv_heads: int | None
    head_dim: int | None
    max_position_embeddings: int | None
    dtype: str | None
    mamba: MambaFacts | None = None  # hybrid models: the state-space layers
    family: str | None = None  # the checks/model_families.toml family counted as
    layer_pattern: str | None = None  # hybrid models: layers of each kind
    # No family covers the model_type: parameters and KV bytes are estimates, this says
    # which keys were counted and which ignored ("estimated: family not verified").
    estimate: EstimateFacts | None = None


class ModelReport(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    path: str
    model: ModelSummary
    parameters: ParamFacts | None
    weights_bytes: int | None  # read from the headers; None before the weights are there
    bytes_by_dtype: dict[str, int]
    shards: int
    tensors: int
    problems: list[ModelProblem]
    fit: list[FitEntry]  # one verdict per tensor-parallel size
    sizing: FitResult | None  # the GPUs and stated data behind ``fit``
    fit_note: str | None = None  # why there is no fit (no GPU in the facts, no config)
    exit_code: int = 0
    # model.safetensors.index.json when its shards were not all read: its total_size and the
    # layers and experts its names give (a count >3% from config.json's is in problems).
    index: IndexFacts | None = None
    # ORG/NAME[@REVISION]: the Hugging Face cache snapshot or the Hub commit read; None for a
    # directory named by its path.
    source: ModelSource | None = None


# Every field of the summary but the quantization is the config's (ArchFacts) field of the
# same name, None where no config was read; and the report's fields that the model facts
# hold under the same name are theirs as read. Copied by name: a field added to both is
# carried without a line here.
_ARCH_FIELDS = tuple(name for name in ModelSummary.__struct_fields__ if name != "quantization")
_MODEL_FIELDS = tuple(
    name
    for name in ModelReport.__struct_fields__
    if name in ModelFacts.__struct_fields__ and name != "model"
)


def build_report(model: ModelFacts, result: FitResult | None, note: str | None) -> ModelReport:
    a = model.arch
    fits_any = result is not None and any(e.fits for e in result.entries)
    return ModelReport(
        schema_version=MODEL_SCHEMA_VERSION,
        model=ModelSummary(
            quantization=model.quantization,
            **{name: getattr(a, name) if a else None for name in _ARCH_FIELDS},
        ),
        fit=list(result.entries) if result is not None else [],
        sizing=result,
        fit_note=note,
        **{name: getattr(model, name) for name in _MODEL_FIELDS},
        exit_code=int(
            exitcodes.gate(  # fits at no tensor-parallel size: the finding
                findings=result is not None and bool(result.entries) and not fits_any,
                not_evaluated=False,
                strict=False,
            )
        ),
    )
