"""The ``model`` section of the facts document: what was read from a model directory
(config.json, the quantization description, safetensors headers), never a verdict.

Kept in its own module so that facts.py only gains one optional field. Every count carries
where it came from: ``"tensors"`` (read from the safetensors headers) or ``"config"``
(computed from config.json, e.g. before the weights are downloaded).
"""

# Annotations are evaluated here, not kept as strings (no `from __future__ import
# annotations`): msgspec would otherwise eval every struct's strings when a decoder is
# built, ~4 ms of each command that reads facts.
from typing import Literal

import msgspec

QuantMethod = Literal[
    "nvfp4",  # NVFP4: E2M1 weights, E4M3 scales per 16 elements (ModelOpt or compressed-tensors)
    "mxfp4",  # MXFP4: E2M1 weights, E8M0 scales per 32 elements (gpt-oss)
    "fp8",  # FP8 E4M3 weights (per tensor, channel or 128x128 block)
    "w4a16",  # 4-bit integer weights, 16-bit activations (AWQ, GPTQ, compressed-tensors)
    "unquantized",  # BF16/FP16/FP32 weights
    "unknown",  # a description this tool does not recognise
]
ParamSource = Literal["tensors", "config"]


class MoeFacts(msgspec.Struct, frozen=True, kw_only=True):
    experts: int  # routed experts per MoE layer
    experts_per_token: int
    shared_experts: int = 0  # always-active experts per MoE layer
    moe_layers: list[int] = msgspec.field(default_factory=list)  # decoder layer indices
    expert_intermediate_size: int | None = None


class MlaFacts(msgspec.Struct, frozen=True, kw_only=True):
    """DeepSeek-style multi-head latent attention: the cache holds one compressed latent
    (kv_lora_rank) plus the shared RoPE key (qk_rope_head_dim) per token and layer."""

    kv_lora_rank: int
    qk_rope_head_dim: int


class MambaFacts(msgspec.Struct, frozen=True, kw_only=True):
    """The state-space (Mamba) layers of a hybrid model: each keeps a fixed-size state per
    sequence (a causal-conv window and the SSM state) instead of a per-token KV cache.
    Field names follow vLLM's ``MambaStateShapeCalculator`` (mamba1/mamba2_state_shape)."""

    kind: Literal["mamba2", "mamba1"]
    layers: int
    d_inner: int  # the mixer's inner width (Mamba-2: num_heads x head_dim)
    state_size: int  # ssm_state_size / mamba_d_state
    conv_kernel: int
    num_heads: int = 0  # Mamba-2 heads
    head_dim: int = 0
    n_groups: int = 0  # Mamba-2 B/C groups
    ssm_cache_dtype: str | None = None  # config.json's mamba_ssm_cache_dtype, if it names one


class EstimateFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A count of a model_type no family in checks/model_families.toml covers: the decoder
    count applied to the concepts (checks/model_concepts.toml) its config.json names. The
    parameters and the KV cache it gives are estimates, labelled so everywhere they appear."""

    label: str  # "estimated: family not verified"
    keys_used: list[str] = msgspec.field(default_factory=list)  # config.json keys counted
    # config.json keys no concept accounts for and not known to hold no parameters
    keys_ignored: list[str] = msgspec.field(default_factory=list)
    # an ignored key looks like a size (a whole number, a list, an object), or a layer
    # pattern of a hybrid (Mamba, linear attention) was not read: the count may be low
    may_be_low: bool = False
    assumptions: list[str] = msgspec.field(default_factory=list)  # what the config did not say


class ArchFacts(msgspec.Struct, frozen=True, kw_only=True):
    architecture: str  # architectures[0], or model_type
    model_type: str | None = None
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int | None = None
    dtype: str | None = None  # torch_dtype / dtype as config.json says
    tie_word_embeddings: bool = False
    text_config: bool = False  # read from a nested text_config (multimodal checkpoints)
    # Layers that keep a per-token KV cache for the whole context, and those that keep at
    # most ``sliding_window`` tokens; linear-attention layers keep a fixed-size state.
    full_attention_layers: int
    sliding_window_layers: int = 0
    sliding_window: int | None = None
    linear_attention_layers: int = 0
    linear_state_bytes_per_layer: int = 0  # per sequence, at the model dtype
    moe: MoeFacts | None = None
    mla: MlaFacts | None = None
    mamba: MambaFacts | None = None  # hybrid models: the state-space layers
    # The family in checks/model_families.toml this config was counted as, and for hybrid
    # layouts the layers of each kind ("23 Mamba-2, 6 attention, 23 MoE of 52").
    family: str | None = None
    layer_pattern: str | None = None
    # Set when no family covers the model_type: the counts are estimates (see EstimateFacts).
    estimate: EstimateFacts | None = None


class QuantFacts(msgspec.Struct, frozen=True, kw_only=True):
    method: QuantMethod
    format: str  # e.g. "modelopt NVFP4", "compressed-tensors nvfp4-pack-quantized", "awq gemm"
    group_size: int | None = None
    weight_bits: int | None = None
    kv_cache_dtype: str | None = None  # "fp8" when the checkpoint quantizes the KV cache
    # Where the verdict comes from: description keys and tensors that agree (or disagree).
    evidence: list[str] = msgspec.field(default_factory=list)


class ParamFacts(msgspec.Struct, frozen=True, kw_only=True):
    source: ParamSource
    total: int
    # Parameters one token uses: every non-expert tensor, the shared experts, and
    # experts_per_token of the routed experts. Includes the input embedding table, as
    # Hugging Face, Qwen, DeepSeek and Mistral count it.
    active: int | None
    embedding: int = 0  # the input embedding table (gpt-oss counts active without it)
    routed_experts: int = 0  # parameters in routed experts (all of them)
    mtp: int = 0  # multi-token-prediction layers past num_hidden_layers (not in active)
    # How the family's publisher counts active parameters (checks/model_families.toml):
    # "with-embedding", "without-embedding", "both" or "unknown", and where that is said.
    publisher_active: str | None = None
    publisher_active_source: str | None = None


class ModelProblem(msgspec.Struct, frozen=True, kw_only=True):
    """Something in the directory that stops a complete reading, or that the runtime will
    trip over: a bad header, a missing shard, a symlink leaving the directory."""

    kind: str  # config, not-modelled, quantization, header, index, missing-shard, symlink
    path: str  # relative to the model directory
    detail: str


class IndexFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What ``model.safetensors.index.json`` says when its shards were not read (not there,
    or not all readable): the exact bytes (``metadata.total_size``) and the counts its
    ``weight_map`` names give, as vLLM and transformers name tensors
    (``model.layers.N.``, ``.experts.E.``). A count more than 3% from config.json's is also
    a problem (kind ``index``)."""

    path: str  # the index file, relative to the model directory
    total_size: int | None  # metadata.total_size: bytes of tensor data; None if not stated
    tensors: int  # entries of weight_map
    shards: int  # distinct shard files it names
    shards_present: int  # of those, files present in the directory
    # Distinct decoder-layer indices N in the language model's ``layers.N.`` names (vision,
    # audio and multi-token-prediction towers left out), and of those, the layers that hold
    # per-expert tensors; None: no such name.
    layers: int | None = None
    moe_layers: int | None = None
    # Distinct expert indices E in ``.experts.E.`` names; None: no per-expert name (a dense
    # model, or experts fused into one tensor per layer, as gpt-oss and Llama 4 store them).
    experts: int | None = None


class ModelSource(msgspec.Struct, frozen=True, kw_only=True):
    """Where a model named ORG/NAME[@REVISION] was read from: the local Hugging Face cache
    (``hf-cache``: its snapshot folder) or the Hub over HTTP (``hub``: config, index and
    headers by range requests)."""

    kind: Literal["hf-cache", "hub"]
    repo: str  # ORG/NAME
    revision: str  # as asked ("main" when none was given)
    commit: str  # the commit the revision resolved to
    # hf-cache: the snapshot folder read; hub: the endpoint's scheme and host (HF_ENDPOINT,
    # else the library's default), never its credentials.
    location: str


class ModelFacts(msgspec.Struct, frozen=True, kw_only=True, tag_field="status", tag="ok"):
    path: str
    arch: ArchFacts | None  # None: config.json missing or unusable (see problems)
    quantization: QuantFacts
    parameters: ParamFacts | None
    weights_bytes: int | None  # sum of tensor data in the headers; None without weights
    bytes_by_dtype: dict[str, int] = msgspec.field(default_factory=dict)
    shards: int = 0
    tensors: int = 0
    problems: list[ModelProblem] = msgspec.field(default_factory=list)
    index: IndexFacts | None = None  # the index, when its shards were not all read
    source: ModelSource | None = None  # None: a directory named by its path
