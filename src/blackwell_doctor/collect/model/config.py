"""config.json → ArchFacts, and parameter counts computed from it alone.

Field names follow the Hugging Face configs of the families this tool sizes: Llama/Qwen
(``num_key_value_heads``, ``head_dim``), Qwen MoE (``num_experts``, ``decoder_sparse_step``,
``mlp_only_layers``, ``shared_expert_intermediate_size``), DeepSeek V2/V3/R1
(``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``, ``moe_layer_freq``,
MLA ``kv_lora_rank``/``q_lora_rank``), Mixtral/gpt-oss (``num_local_experts``,
``experts_per_token``, ``layer_types`` with sliding windows), Llama 4
(``interleave_moe_layer_step``), Qwen3-Next/3.5 (``layer_types`` with linear attention).
Multimodal checkpoints nest the language model in ``text_config``.

Hybrid layouts (checks/model_families.toml names each family's): Nemotron-H's
``hybrid_override_pattern`` / ``layers_block_type``, Granite 4.0-H's ``layer_types`` of
mamba/attention, Jamba's ``attn_layer_period``/``expert_layer_period``, Falcon-H1's parallel
attention + Mamba-2 in every layer. A model_type the catalogue does not list, or a pattern
this module does not understand, raises :class:`NotModelled`: no count is better than a
confident wrong one.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from blackwell_doctor.facts.model import (
    ArchFacts,
    EstimateFacts,
    MambaFacts,
    MlaFacts,
    MoeFacts,
    ParamFacts,
)
from blackwell_doctor.ruledata.concepts import ConceptName, all_concept_keys, concept_keys
from blackwell_doctor.ruledata.families import Family, load_families


class ConfigError(Exception):
    """config.json lacks what sizing needs; the message is one line."""


class NotModelled(ConfigError):
    """config.json describes an architecture this tool does not count (an unknown
    model_type, a layer pattern it does not understand); the message says what is missing."""


# The counts that size a model: one given (not null) that is no whole number of at least 0
# (a float such as 1e18, a negative, a string, true) is a corrupt config, never skipped
# (skipped, ``num_experts: 1e18`` sized the model as dense, with no word of it).
# Every spelling of these concepts (checks/model_concepts.toml) is such a count.
_SIZING: tuple[ConceptName, ...] = (
    *("hidden_size", "num_layers", "num_attention_heads", "num_kv_heads", "head_dim"),
    *("vocab_size", "experts", "experts_per_token", "shared_experts"),
)


@functools.cache
def _counts() -> frozenset[str]:
    return frozenset(k for c in _SIZING for k in K(c))


def K(concept: ConceptName) -> tuple[str, ...]:
    """The config.json keys of ``concept``, in the order they are tried."""
    return concept_keys()[concept]


def _shown(value: object) -> str:
    """A config value as a message quotes it: its repr, cut at 40 characters."""
    return repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."


def _int(cfg: dict[str, Any], *names: str, default: int | None = None) -> int | None:
    for name in names:
        value = cfg.get(name)
        if type(value) is int and value >= 0:
            return value
        if value is not None and name in _counts():
            raise ConfigError(f"config.json has {name} = {_shown(value)}: not a count (corrupt)")
    return default


# What a real config can hold, with room to spare: past these a value is a corrupt or
# hostile config.json, not a model (the largest published: hidden 25,600 and 163,840 positions
# aside, 512 experts, 128 heads, 262,144-token vocabularies, 126 layers).
LIMITS = {
    "hidden_size": 1 << 20,
    "num_hidden_layers": 10_000,
    "num_attention_heads": 1 << 14,
    "num_key_value_heads": 1 << 14,
    "head_dim": 1 << 14,
    "vocab_size": 1 << 24,
    "num_experts": 1 << 16,
    "num_experts_per_tok": 1 << 16,
    "n_shared_experts": 1 << 16,
}


def _bounded(name: str, value: int) -> int:
    if value > LIMITS[name]:
        raise ConfigError(
            f"config.json has {name} = {value}, above the {LIMITS[name]:,} any model has "
            "(corrupt or not a model's config)"
        )
    return value


def _flag(cfg: dict[str, Any], concept: ConceptName) -> bool:
    """The first key of a flag concept the config gives, true or not."""
    return next((cfg[k] is True for k in K(concept) if k in cfg), False)


def _tied(cfg: dict[str, Any], raw: dict[str, Any], *, absent: bool = False) -> bool:
    """tie_word_embeddings of the language model's config, else of the outer config, else
    ``absent``."""
    for doc in (cfg, raw):
        for k in K("tied_embeddings"):
            if k in doc:
                return doc[k] is True
    return absent


def _need(cfg: dict[str, Any], *names: str) -> int:
    value = _int(cfg, *names)
    if value is None:
        raise ConfigError(f"config.json has no usable {names[0]}")
    return value


def text_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The language model's config: the nested config of a multimodal checkpoint when there
    is one (``text_config``, InternVL's ``llm_config``, DeepSeek-VL2's ``language_config``)."""
    for key in K("nested_config"):
        inner = cfg.get(key)
        if isinstance(inner, dict) and any(k in inner for k in K("hidden_size")):
            return inner, True
    return cfg, False


def _with_defaults(cfg: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """The config with its family's config-class defaults under it (checks/model_families.toml
    ``defaults``): what transformers fills in for the fields a published config.json omits."""
    family = _catalogued(cfg, raw)
    if family is None or not family.defaults:
        return cfg
    return {**family.defaults, **cfg}


def _moe_layers(cfg: dict[str, Any], layers: int) -> list[int]:
    kinds = cfg.get("mlp_layer_types")  # transformers 5: "dense" / "sparse" per layer
    if isinstance(kinds, list) and len(kinds) == layers:
        return [i for i, k in enumerate(kinds) if k == "sparse"]
    if "moe_layer_start_index" in cfg or "moe_layer_interval" in cfg:  # ERNIE 4.5
        start = _int(cfg, "moe_layer_start_index", default=0) or 0
        end = cfg.get("moe_layer_end_index")
        last = end if type(end) is int and 0 <= end < layers else layers - 1
        step = _int(cfg, "moe_layer_interval", default=1) or 1
        return [i for i in range(start, last + 1) if (i - start) % step == 0]
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:  # DeepSeek
        first = _int(cfg, "first_k_dense_replace", default=0) or 0
        freq = _int(cfg, "moe_layer_freq", default=1) or 1
        return [i for i in range(layers) if i >= first and i % freq == 0]
    if "interleave_moe_layer_step" in cfg:  # Llama 4
        step = _int(cfg, "interleave_moe_layer_step", default=1) or 1
        return [i for i in range(layers) if (i + 1) % step == 0]
    only = cfg.get("mlp_only_layers")
    dense = {i for i in only if type(i) is int} if isinstance(only, list) else set()
    step = _int(cfg, "decoder_sparse_step", default=1) or 1
    return [i for i in range(layers) if i not in dense and (i + 1) % step == 0]


def layer_kinds(cfg: dict[str, Any], layers: int) -> list[str] | None:
    """Each decoder layer's attention kind: ``layer_types`` as given, Qwen3-Next's
    ``full_attention_interval`` (every n-th layer full attention, the others linear), or
    Gemma's ``sliding_window_pattern`` (every n-th layer full attention, the others sliding:
    transformers' Gemma2/Gemma3 configs build their layer_types so)."""
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list) and len(kinds) == layers:
        return [str(k) for k in kinds]
    interval = _int(cfg, "full_attention_interval")
    if interval:
        return [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(layers)
        ]
    pattern = _int(cfg, "sliding_window_pattern")
    if pattern:
        return [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
            for i in range(layers)
        ]
    return None


def _gated_attention(cfg: dict[str, Any]) -> bool:
    """Qwen3-Next/3.5 attention: q_proj also produces a per-head output gate."""
    kind = str(cfg.get("model_type", ""))
    return bool(cfg.get("attn_output_gate", kind.startswith(("qwen3_next", "qwen3_5"))))


class _Layout(TypedDict, total=False):
    """The ArchFacts fields that each layout (decoder, hybrid) reads its own way."""

    max_position_embeddings: int | None
    tie_word_embeddings: bool
    sliding_window_layers: int
    sliding_window: int | None
    linear_attention_layers: int
    linear_state_bytes_per_layer: int
    moe: MoeFacts | None
    mla: MlaFacts | None
    mamba: MambaFacts | None
    family: str | None
    layer_pattern: str | None
    estimate: EstimateFacts | None


@dataclass(frozen=True)
class _Dims:
    """What every layout reads alike: the config (and the outer one of a multimodal
    checkpoint), the architecture's name, and its widths, heads and vocabulary."""

    raw: dict[str, Any]
    cfg: dict[str, Any]
    nested: bool
    architecture: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    def arch(self, layers: int, full_attention_layers: int, **layout: Unpack[_Layout]) -> ArchFacts:
        cfg, raw = self.cfg, self.raw
        dtype = cfg.get("torch_dtype") or cfg.get("dtype") or raw.get("torch_dtype")
        return ArchFacts(
            architecture=self.architecture,
            model_type=str(cfg.get("model_type") or raw.get("model_type") or "") or None,
            hidden_size=self.hidden,
            num_layers=layers,
            num_attention_heads=self.heads,
            num_kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab,
            dtype=dtype if isinstance(dtype, str) else None,
            text_config=self.nested,
            full_attention_layers=full_attention_layers,
            **layout,
        )


def arch_from_config(raw: dict[str, Any]) -> ArchFacts:
    cfg, nested = text_config(raw)
    cfg = _with_defaults(cfg, raw)
    archs = raw.get("architectures") or cfg.get("architectures")
    architecture = (
        archs[0]
        if isinstance(archs, list) and archs and isinstance(archs[0], str)
        else str(cfg.get("model_type") or raw.get("model_type") or "unknown")
    )
    hidden = _need(cfg, *K("hidden_size"))
    layers = _need(cfg, *K("num_layers"))
    heads = _need(cfg, *K("num_attention_heads"))
    if hidden == 0 or layers == 0 or heads == 0:
        raise ConfigError("config.json has a zero hidden_size, layer count or head count")
    _bounded("hidden_size", hidden)
    _bounded("num_hidden_layers", layers)
    _bounded("num_attention_heads", heads)
    kv_heads = _int(cfg, *K("num_kv_heads"), default=1 if _flag(cfg, "multi_query") else heads)
    if kv_heads == 0:
        raise ConfigError("config.json has 0 KV heads: attention needs at least one")
    assert kv_heads is not None
    _bounded("num_key_value_heads", kv_heads)
    if heads % kv_heads:
        raise ConfigError(
            f"config.json has {heads} attention heads and {kv_heads} KV heads: the attention "
            "heads must be a whole multiple of the KV heads (each KV head serves a group)"
        )
    head_dim = _bounded("head_dim", _int(cfg, *K("head_dim"), default=None) or hidden // heads)
    vocab = _bounded("vocab_size", _need(cfg, *K("vocab_size")))
    dims = _Dims(raw, cfg, nested, architecture, hidden, heads, kv_heads, head_dim, vocab)
    family = _catalogued(cfg, raw)
    if family is not None and family.layout != "decoder":
        return _hybrid_arch(dims, family, hybrid_layers(cfg, family, layers))
    experts = _int(cfg, *K("experts"), default=0) or 0
    _bounded("num_experts", experts)
    moe: MoeFacts | None = None
    if experts > 0:
        per_token = _int(cfg, *K("experts_per_token"))
        if per_token is None or per_token == 0:
            raise ConfigError(f"config.json names {experts} experts but no num_experts_per_tok")
        if per_token > experts:
            raise ConfigError(
                f"config.json routes each token to {per_token} experts of {experts}: more "
                "than there are"
            )
        shared = _int(cfg, *K("shared_experts"), default=0) or 0
        _bounded("n_shared_experts", shared)
        if shared == 0 and (_int(cfg, *K("shared_expert_intermediate_size"), default=0) or 0):
            shared = 1
        moe = MoeFacts(
            experts=experts,
            experts_per_token=per_token,
            shared_experts=shared,
            moe_layers=_moe_layers(cfg, layers),
            expert_intermediate_size=_int(
                cfg, *K("expert_intermediate_size"), *K("intermediate_size")
            ),
        )
    mla: MlaFacts | None = None
    kv_lora = _int(cfg, "kv_lora_rank")
    if kv_lora:
        mla = MlaFacts(kv_lora_rank=kv_lora, qk_rope_head_dim=_int(cfg, "qk_rope_head_dim") or 0)
    kinds = layer_kinds(cfg, layers)
    full, sliding, linear = layers, 0, 0
    window = _int(cfg, *K("sliding_window"))
    if kinds is not None:
        for i, k in enumerate(kinds):
            if k not in ("full_attention", "sliding_attention", "linear_attention", "attention"):
                raise _pattern_error(
                    "layer_types", k, i, "full_attention, sliding_attention, linear_attention"
                )
        sliding = sum(1 for k in kinds if k == "sliding_attention")
        linear = sum(1 for k in kinds if k == "linear_attention")
        full = layers - sliding - linear
        if sliding and not window:
            raise ConfigError("config.json has sliding_attention layers but no sliding_window")
    foreign = [f for f in _HYBRID_FIELDS if cfg.get(f) is not None and not _all_softmax(f, cfg[f])]
    estimate: EstimateFacts | None = None
    if family is None:  # after the checks above: a corrupt config is said so first
        estimate = _estimate(cfg, raw, foreign, linear)
    elif foreign:
        raise NotModelled(
            f"config.json ({family.name}) has {', '.join(foreign)}: a layer pattern the "
            f"{family.layout} layout does not read, so the model is not modelled"
        )
    return dims.arch(
        layers,
        full,
        max_position_embeddings=_int(cfg, *K("max_positions")),
        # No family: a config.json written by transformers 4.x's save_pretrained leaves
        # tie_word_embeddings out only when it is true (to_diff_dict drops a value equal to
        # PretrainedConfig's default, True, and to the class's own).
        tie_word_embeddings=_tied(cfg, raw, absent=estimate is not None),
        sliding_window_layers=sliding,
        sliding_window=window if sliding else None,
        linear_attention_layers=linear,
        linear_state_bytes_per_layer=_linear_state_bytes(cfg) if linear else 0,
        moe=moe,
        mla=mla,
        family=family.name if family is not None else None,
        estimate=estimate,
    )


def _linear_dims(cfg: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """Gated DeltaNet's (Qwen3-Next) key heads, value heads, key and value head dims and
    causal-conv kernel width."""
    nk = _int(cfg, "linear_num_key_heads", default=0) or 0
    nv = _int(cfg, "linear_num_value_heads", default=0) or 0
    dk = _int(cfg, "linear_key_head_dim", default=0) or 0
    dv = _int(cfg, "linear_value_head_dim", default=0) or 0
    conv = _int(cfg, "linear_conv_kernel_dim", default=4) or 4
    return nk, nv, dk, dv, conv


def _linear_state_bytes(cfg: dict[str, Any]) -> int:
    """Gated DeltaNet state per sequence and layer (Qwen3-Next): the recurrent state
    (value heads x key dim x value dim) and the causal-conv window, 2 bytes each."""
    nk, nv, dk, dv, conv = _linear_dims(cfg)
    return 2 * (nv * dk * dv + (2 * nk * dk + nv * dv) * (conv - 1))


def params_from_config(raw: dict[str, Any], arch: ArchFacts) -> ParamFacts:
    """Parameters computed from config.json alone (labelled ``source="config"``).

    Counts every weight matrix, bias the config declares and norm; rotary tables and
    buffers are not parameters."""
    cfg, _ = text_config(raw)
    if arch.layer_pattern is not None:
        return _hybrid_params(raw, cfg, arch)
    cfg = _with_defaults(cfg, raw)
    family = _catalogued(cfg, raw)
    h, nh, kvh, hd = arch.hidden_size, arch.num_attention_heads, arch.num_kv_heads, arch.head_dim
    generic = arch.estimate is not None  # no family: the concepts alone
    bias = _flag(cfg, "attention_bias") if generic else bool(cfg.get("attention_bias", False))
    if arch.mla is not None:
        ql = _int(cfg, "q_lora_rank")
        nope = _int(cfg, "qk_nope_head_dim", default=hd) or 0
        rope = arch.mla.qk_rope_head_dim
        vd = _int(cfg, "v_head_dim", default=hd) or 0
        kl = arch.mla.kv_lora_rank
        q = h * ql + ql + ql * nh * (nope + rope) if ql else h * nh * (nope + rope)
        attn = q + h * (kl + rope) + kl + kl * nh * (nope + vd) + nh * vd * h
    else:
        attn = h * nh * hd + 2 * h * kvh * hd + nh * hd * h
        if bias:  # GLM-4.5: q, k and v only
            if generic:  # qkv_bias / use_qkv_bias: q, k and v; attention_bias / bias: all four
                o_bias = any(cfg.get(k) is True for k in ("attention_bias", "use_bias", "bias"))
            else:
                o_bias = family is None or family.attention_bias == "qkvo"
            attn += nh * hd + 2 * kvh * hd + (h if o_bias else 0)
        if generic and _flag(cfg, "qk_norm"):
            attn += 2 * hd  # per-head q/k norms (Qwen3, OLMo 2 keep them per layer: close)
        elif str(cfg.get("model_type", "")).startswith("qwen3"):
            attn += 2 * hd  # q_norm, k_norm
        elif family is not None and cfg.get("use_qk_norm") is True:
            if family.qk_norm == "per-head":  # GLM-4.5, Gemma 3
                attn += 2 * hd
            elif family.qk_norm == "per-layer":  # MiniMax-M2: over all heads
                attn += nh * hd + kvh * hd
        if _gated_attention(cfg):
            attn += h * nh * hd  # the output gate's half of q_proj
        if str(cfg.get("model_type", "")) == "gpt_oss":
            attn += nh  # attention sinks
    linear_attn = 0
    if arch.linear_attention_layers:
        nk, nv, dk, dv, conv = _linear_dims(cfg)
        qkv = 2 * nk * dk + nv * dv
        linear_attn = h * (qkv + nv * dv) + h * 2 * nv + qkv * conv + nv * dv * h + 2 * nv + dv
    inter = _int(cfg, "intermediate_size", default=0) or 0
    width = 3  # gate, up, down
    if generic:
        inter = _int(cfg, *K("intermediate_size"), default=0) or 0
        if not inter and any(k in cfg and cfg[k] is None for k in K("intermediate_size")):
            inter = 4 * h  # GPT-2's n_inner: null
        act = next((cfg[k] for k in K("activation") if isinstance(cfg.get(k), str)), "silu")
        width = 3 if _gated_activation(act) else 2
    dense_mlp = width * h * inter
    experts = _NO_EXPERTS
    moe = arch.moe
    if moe is not None:
        mi = moe.expert_intermediate_size or inter
        per_expert = width * h * mi
        expert_bias = str(cfg.get("model_type", "")) == "gpt_oss"
        if expert_bias:
            per_expert += 2 * mi + h
        router = h * moe.experts + (moe.experts if expert_bias else 0)
        if cfg.get("topk_method") == "noaux_tc" or (family is not None and family.router_bias):
            router += moe.experts  # DeepSeek V3's (GLM-4.5's, MiniMax-M2's) e_score_correction_bias
        shared_inter = _int(cfg, *K("shared_expert_intermediate_size"), default=0) or 0
        # Qwen MoE: one shared expert of its own size and its gate; DeepSeek: n_shared.
        shared = width * h * shared_inter + h if shared_inter else moe.shared_experts * per_expert
        experts = _MoeWeights(per_expert, shared, router)
    norms = (family.norms_per_layer if family is not None else 2) * h
    moe_set = set(moe.moe_layers) if moe is not None else set()
    kinds = layer_kinds(cfg, arch.num_layers)
    layers = []
    for i in range(arch.num_layers):
        mixer = linear_attn if kinds is not None and kinds[i] == "linear_attention" else attn
        layers.append((mixer + norms, None if i in moe_set else dense_mlp))
    return _counted(arch, layers, experts)


@dataclass(frozen=True)
class _MoeWeights:
    """One MoE block's weights: a routed expert's, the shared experts' and the router's."""

    per_expert: int
    shared: int
    router: int


_NO_EXPERTS = _MoeWeights(0, 0, 0)


def _counted(
    arch: ArchFacts, layers: list[tuple[int, int | None]], experts: _MoeWeights
) -> ParamFacts:
    """The parameters of a model whose decoder layers each have ``(own, dense)`` weights:
    its mixer, norms and always-on blocks, and its dense MLP (None: an MoE layer, whose
    feed-forward is ``experts``); then the embedding table, the LM head unless tied, and the
    final norm."""
    h, moe = arch.hidden_size, arch.moe
    total = active = routed_all = 0
    for own, dense in layers:
        total += own
        active += own
        if dense is not None:
            total += dense
            active += dense
        elif moe is not None:
            routed = moe.experts * experts.per_expert
            total += routed + experts.shared + experts.router
            active += moe.experts_per_token * experts.per_expert + experts.shared + experts.router
            routed_all += routed
    embedding = arch.vocab_size * h
    head = 0 if arch.tie_word_embeddings else embedding
    total += embedding + head + h
    active += embedding + head + h
    return ParamFacts(
        source="config",
        total=total,
        active=active if moe is not None else total,
        embedding=embedding,
        routed_experts=routed_all,
    )


# ----------------------------------------------------------------------------- estimates

ESTIMATED = "estimated: family not verified"

# Keys that hold no parameter whatever the model (transformers' PreTrainedConfig fields and the
# configuration classes' training, rotary, tokenizer and routing-policy settings): a key
# matching none of these nor a concept is listed as ignored.
_PARAMETER_FREE = re.compile(
    r"^_|^(architectures|model_type|auto_map|transformers_version|torch_dtype|dtype|"
    r"use_cache|tokenizer_class|task_specific_params|pretraining_tp|max_window_layers|"
    r"use_sliding_window|quantization_config|topk_method|scoring_func|n_group|topk_group|"
    r"norm_topk_prob|routed_scaling_factor|num_nextn_predict_layers|hidden_act|"
    r"partial_rotary_factor|rotary_dim|rotary_pct|rotary_emb_base|position_embedding_type|"
    r"parallel_attn|use_parallel_residual|new_decoder_architecture|alibi|"
    r"scale_attn_weights|multi_query|ep_size|seq_length|model_max_length|"
    r"attention_softmax_in_fp32|scale_attention_softmax_in_fp32|use_mrope|"
    r"sliding_window_size|max_sequence_length|n_ctx|mlp_bias)$"
    r"|dropout|pdrop|_eps$|epsilon|token_id|token_index|^rope|initializer|^summary_|"
    r"^output_|loss|aux_|_coef|^is_|^return_|^use_return|theta|_scale$|scaling|"
    r"multiplier|^scale_|^norm_|_norm_type$|^layer_norm|^rms_norm|^torchscript|"
    r"^id2label|^label2id|^problem_type|^finetuning|^tie_|^chunk_size_feed|"
    r"^prefix|^bad_words|^begin_suppress|^decoder_start|^forced_|^max_length|"
    r"^min_length|^num_beams|^do_sample|^temperature|^top_[kp]$|^repetition|"
    r"^length_penalty|^no_repeat|^early_stopping|^diversity|^num_return|^typical_p|"
    r"^cross_attention_hidden|^add_cross|^is_decoder|^use_flash|^use_fast|flash_|"
    r"^fused_|_fusion$|^pad_vocab|^embedding_multiplier|^attn_logit|softcapping|"
    r"^final_logit|^query_pre_attn|^router_|^moe_(aux|z|router|norm)|^output_router|"
    r"^mlp_only_layers$|^qk_layernorm$|^attention_out_bias$"
)


def _looks_like_a_size(value: object) -> bool:
    return (type(value) is int and value > 1) or isinstance(value, (list, dict))


def _estimate(
    cfg: dict[str, Any], raw: dict[str, Any], foreign: list[str], linear: int
) -> EstimateFacts:
    """What the count of a model_type no family covers rests on: the concept keys it read,
    the keys it did not account for, and what it had to assume."""
    shown = _unmodelled(cfg, raw) + " no family in checks/model_families.toml covers it, and"
    if foreign:  # Mamba / lightning-attention layers: counted as attention, a wrong number
        raise NotModelled(
            f"{shown} its {', '.join(foreign)} (a hybrid layer pattern) is not a concept the "
            "decoder count reads: its parameter count and KV cache would be a guess"
        )
    intermediate = next((k for k in K("intermediate_size") if k in cfg), None)
    experts = _int(cfg, *K("experts"), default=0) or 0
    if intermediate is None and not (
        experts and any(k in cfg for k in K("expert_intermediate_size"))
    ):
        raise NotModelled(
            f"{shown} the decoder count needs the MLP's inner width (intermediate_size: one "
            f"of {', '.join(K('intermediate_size'))}), which config.json does not give"
        )
    known = all_concept_keys()
    used = sorted(k for k in cfg if k in known and cfg[k] is not None)
    ignored = sorted(k for k in cfg if k not in known and not _PARAMETER_FREE.search(k))
    assumptions = []
    act = next((cfg[k] for k in K("activation") if isinstance(cfg.get(k), str)), None)
    if act is None:
        assumptions.append("no activation named: the MLP is taken as gated (gate, up, down)")
    elif not _gated_activation(act):
        assumptions.append(
            f"activation {act[:40]!r}: the MLP is taken as two matrices (up, down) without a "
            "gate, as in GPT-2 and GPT-NeoX"
        )
    if intermediate is not None and cfg.get(intermediate) is None:
        assumptions.append(f"{intermediate} is null: 4 x hidden size, as GPT-2's config class")
    if not any(k in cfg or k in raw for k in K("tied_embeddings")):
        assumptions.append(
            "tie_word_embeddings not given: tied (transformers 4.x writes the key only when it "
            "differs from PretrainedConfig's default, true)"
        )
    may_be_low = bool(linear) or any(_looks_like_a_size(cfg[k]) for k in ignored)
    return EstimateFacts(
        label=ESTIMATED,
        keys_used=used,
        keys_ignored=ignored,
        may_be_low=may_be_low,
        assumptions=assumptions,
    )


# transformers' ACT2FN names whose MLP is gated in the models that use them (LlamaMLP,
# MistralMLP, Qwen2MLP: act(gate) * up); GPT-2, GPT-J, GPT-NeoX, Phi, StarCoder 2 use GELU
# on one up-projection.
_GATED_ACTIVATIONS = frozenset({"silu", "swish", "swiglu", "geglu", "reglu"})


def _gated_activation(name: str) -> bool:
    return name.lower() in _GATED_ACTIVATIONS


# ----------------------------------------------------------------------------- families


def _catalogued(cfg: dict[str, Any], raw: dict[str, Any]) -> Family | None:
    model_type = cfg.get("model_type") or raw.get("model_type")
    return load_families().by_model_type(model_type) if isinstance(model_type, str) else None


def _unmodelled(cfg: dict[str, Any], raw: dict[str, Any]) -> str:
    """The start of the NotModelled message of a model_type no family covers, up to its
    reason: "model_type 'x' is not modelled:"."""
    model_type = cfg.get("model_type") or raw.get("model_type")
    shown = (
        f"model_type {str(model_type)[:60]!r} is"
        if model_type
        else "config.json names no model_type, so the architecture is"
    )
    return f"{shown} not modelled:"


def family_of(cfg: dict[str, Any], raw: dict[str, Any]) -> Family:
    """The catalogue family of this config's model_type; NotModelled when there is none."""
    family = _catalogued(cfg, raw)
    if family is None:
        raise NotModelled(
            f"{_unmodelled(cfg, raw)} checks/model_families.toml has no layer layout for it "
            f"(modelled: {', '.join(load_families().known())}); its parameter count and KV "
            "cache would be a guess"
        )
    return family


# ----------------------------------------------------------------------------- hybrids


@dataclass(frozen=True)
class HybridLayers:
    """Per decoder layer: the sequence mixer ("attention", "mamba2", "mamba1",
    "attention+mamba2" or "none") and the feed-forward block ("mlp", "moe" or "none")."""

    mixers: list[str]
    ffns: list[str]
    source: str  # the config field the layout was read from


# Layer-pattern fields of hybrid layouts: in a config counted as a plain decoder they would
# be silently ignored, so their presence there is "not modelled".
_HYBRID_FIELDS = (
    "hybrid_override_pattern",
    "layers_block_type",
    "attn_layer_period",
    "expert_layer_period",
    "attn_layer_indices",
    "attn_type_list",
    "block_configs",
)


def _all_softmax(field: str, value: object) -> bool:
    """MiniMax-M2's ``attn_type_list`` of all 1s: softmax attention in every layer (0 is
    MiniMax-Text-01's lightning attention), which the decoder layout counts."""
    return (
        field == "attn_type_list"
        and isinstance(value, list)
        and bool(value)
        and all(type(v) is int and v == 1 for v in value)
    )


_NEMOTRON = {"M": ("mamba2", "none"), "*": ("attention", "none"), "-": ("none", "mlp")}
_NEMOTRON["E"] = ("none", "moe")
_NEMOTRON_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _pattern_error(field: str, value: object, where: int, known: str) -> NotModelled:
    return NotModelled(
        f"config.json {field} has {_shown(value)} at layer {where}: not a layer kind this tool "
        f"counts ({known}); the model is not modelled"
    )


def _nemotron_layers(cfg: dict[str, Any], layers: int) -> HybridLayers:
    pattern = cfg.get("hybrid_override_pattern")
    blocks = cfg.get("layers_block_type")
    field = "hybrid_override_pattern"
    if isinstance(pattern, str):
        chars = list(pattern)
    elif isinstance(blocks, list):
        field = "layers_block_type"
        chars = []
        for i, b in enumerate(blocks):
            if not isinstance(b, str) or b not in _NEMOTRON_BLOCKS:
                raise _pattern_error(field, b, i, "mamba, attention, mlp, moe")
            chars.append(_NEMOTRON_BLOCKS[b])
    else:
        raise NotModelled(
            "config.json (nemotron_h) has neither hybrid_override_pattern nor "
            "layers_block_type: which layers are Mamba-2, attention, MLP or MoE is unknown, "
            "so the model is not modelled"
        )
    if len(chars) != layers:
        raise NotModelled(
            f"config.json {field} names {len(chars)} layers but num_hidden_layers is "
            f"{layers}: the layout is not modelled"
        )
    mixers, ffns = [], []
    for i, c in enumerate(chars):
        kind = _NEMOTRON.get(c)
        if kind is None:
            raise _pattern_error(field, c, i, "M Mamba-2, * attention, - MLP, E MoE")
        mixers.append(kind[0])
        ffns.append(kind[1])
    return HybridLayers(mixers, ffns, field)


def _granite_layers(cfg: dict[str, Any], layers: int) -> HybridLayers:
    kinds = cfg.get("layer_types")
    if not isinstance(kinds, list) or len(kinds) != layers:
        raise NotModelled(
            "config.json (granitemoehybrid) has no layer_types list of num_hidden_layers "
            "entries: which layers are Mamba-2 and which attention is unknown, so the model "
            "is not modelled"
        )
    experts = _int(cfg, "num_local_experts", default=0) or 0
    mixers = []
    for i, k in enumerate(kinds):
        if k not in ("mamba", "attention"):
            raise _pattern_error("layer_types", k, i, "mamba, attention")
        mixers.append("mamba2" if k == "mamba" else "attention")
    return HybridLayers(mixers, ["moe" if experts else "none"] * layers, "layer_types")


def _jamba_layers(cfg: dict[str, Any], layers: int) -> HybridLayers:
    names = ("attn_layer_period", "attn_layer_offset", "expert_layer_period", "expert_layer_offset")
    values = [_int(cfg, n) for n in names]
    missing = [n for n, v in zip(names, values, strict=True) if v is None]
    if missing:
        raise NotModelled(
            f"config.json (jamba) has no {', '.join(missing)}: which layers are attention and "
            "which MoE is unknown, so the model is not modelled"
        )
    ap, ao, ep, eo = (v or 0 for v in values)
    if ap == 0 or ep == 0:
        raise NotModelled("config.json (jamba) has a layer period of 0: not modelled")
    experts = _int(cfg, "num_experts", default=0) or 0
    mixers = ["attention" if i % ap == ao else "mamba1" for i in range(layers)]
    ffns = ["moe" if experts > 1 and i % ep == eo else "mlp" for i in range(layers)]
    return HybridLayers(mixers, ffns, "attn_layer_period/offset, expert_layer_period/offset")


def _falcon_layers(cfg: dict[str, Any], layers: int) -> HybridLayers:
    if cfg.get("attn_layer_indices") is not None:
        raise NotModelled(
            "config.json (falcon_h1) sets attn_layer_indices: attention in some layers only "
            "is not modelled (every released Falcon-H1 has it null)"
        )
    return HybridLayers(["attention+mamba2"] * layers, ["mlp"] * layers, "every layer")


def hybrid_layers(cfg: dict[str, Any], family: Family, layers: int) -> HybridLayers:
    match family.layout:
        case "nemotron_h":
            return _nemotron_layers(cfg, layers)
        case "granite_hybrid":
            return _granite_layers(cfg, layers)
        case "jamba":
            return _jamba_layers(cfg, layers)
        case "falcon_h1":
            return _falcon_layers(cfg, layers)
        case "decoder":
            raise AssertionError("decoder layouts are read by arch_from_config itself")


def _mamba_need(cfg: dict[str, Any], family: Family, *names: str) -> int:
    value = _int(cfg, *names)
    if not value:
        raise NotModelled(
            f"config.json ({family.name.split(' (')[0]}) has no usable {names[0]}: its Mamba "
            "layers cannot be counted, so the model is not modelled"
        )
    return value


# Each hybrid layout's config.json keys of the Mamba SSM state size, the causal-conv kernel
# and (Mamba-2) the B/C groups; Jamba's Mamba (1) layers have no groups.
_MAMBA_KEYS = {
    "jamba": ("mamba_d_state", "mamba_d_conv", None),
    "nemotron_h": ("ssm_state_size", "conv_kernel", "n_groups"),
    "falcon_h1": ("mamba_d_state", "mamba_d_conv", "mamba_n_groups"),
    "granite_hybrid": ("mamba_d_state", "mamba_d_conv", "mamba_n_groups"),
}


def _mamba_facts(cfg: dict[str, Any], family: Family, hidden: int, layers: int) -> MambaFacts:
    state_key, conv_key, groups_key = _MAMBA_KEYS[family.layout]
    if family.layout == "jamba":
        nh = hd = 0
        d_inner = _mamba_need(cfg, family, "mamba_expand") * hidden
    elif family.layout == "nemotron_h":
        nh = _mamba_need(cfg, family, "mamba_num_heads")
        hd = _mamba_need(cfg, family, "mamba_head_dim")
        d_inner = nh * hd
    else:  # Falcon-H1, Granite 4.0-H
        nh = _mamba_need(cfg, family, "mamba_n_heads")
        hd = _int(cfg, "mamba_d_head") or 0
        d_inner = _int(cfg, "mamba_d_ssm") or 0
        if not d_inner:
            d_inner = nh * hd if hd else _mamba_need(cfg, family, "mamba_expand") * hidden
        if not hd:
            hd = d_inner // nh
    dtype = cfg.get("mamba_ssm_cache_dtype")
    return MambaFacts(
        kind="mamba2" if groups_key else "mamba1",
        layers=layers,
        d_inner=d_inner,
        state_size=_mamba_need(cfg, family, state_key),
        conv_kernel=_mamba_need(cfg, family, conv_key),
        num_heads=nh,
        head_dim=hd,
        n_groups=_mamba_need(cfg, family, groups_key) if groups_key else 0,
        ssm_cache_dtype=dtype if groups_key and isinstance(dtype, str) else None,
    )


_MIXER_NAMES = {
    "mamba2": "Mamba-2",
    "mamba1": "Mamba",
    "attention": "attention",
    "attention+mamba2": "attention + Mamba-2 side by side",
}


def _pattern_text(h: HybridLayers) -> str:
    parts = []
    for kind, name in _MIXER_NAMES.items():
        n = h.mixers.count(kind)
        if n:
            parts.append(f"{n} {name}")
    for kind, name in (("moe", "MoE"), ("mlp", "MLP")):
        n = h.ffns.count(kind)
        if n:
            parts.append(f"{n} {name}")
    return f"{', '.join(parts)} of {len(h.mixers)} layers ({h.source})"


def _hybrid_arch(dims: _Dims, family: Family, hybrid: HybridLayers) -> ArchFacts:
    cfg = dims.cfg
    layers = len(hybrid.mixers)
    mamba_layers = sum(1 for m in hybrid.mixers if "mamba" in m)
    attention_layers = sum(1 for m in hybrid.mixers if "attention" in m)
    moe_layers = [i for i, f in enumerate(hybrid.ffns) if f == "moe"]
    moe: MoeFacts | None = None
    if moe_layers:
        experts = _bounded(
            "num_experts",
            _int(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0,
        )
        per_token = _int(cfg, "num_experts_per_tok", default=0) or 0
        if experts == 0 or per_token == 0 or per_token > experts:
            raise ConfigError(
                f"config.json has MoE layers but {experts} experts and {per_token} per token"
            )
        shared = _int(cfg, "n_shared_experts", default=0) or 0
        if family.layout == "granite_hybrid":
            shared = 0  # the shared MLP is its own block (shared_intermediate_size)
        moe = MoeFacts(
            experts=experts,
            experts_per_token=per_token,
            shared_experts=shared,
            moe_layers=moe_layers,
            expert_intermediate_size=_int(cfg, "moe_intermediate_size", "intermediate_size"),
        )
    return dims.arch(
        layers,
        attention_layers,
        max_position_embeddings=_int(cfg, "max_position_embeddings"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        moe=moe,
        mamba=_mamba_facts(cfg, family, dims.hidden, mamba_layers) if mamba_layers else None,
        family=family.name,
        layer_pattern=_pattern_text(hybrid),
    )


def _mamba_params(cfg: dict[str, Any], family: Family, m: MambaFacts, h: int) -> int:
    """One Mamba mixer's weights, as vLLM's MambaMixer / MambaMixer2 create them."""
    conv_bias = bool(cfg.get("use_conv_bias", cfg.get("mamba_conv_bias", True)))
    proj_bias = bool(cfg.get("mamba_proj_bias", cfg.get("use_bias", False)))
    di, ds, k = m.d_inner, m.state_size, m.conv_kernel
    if m.kind == "mamba1":
        rank = _int(cfg, "mamba_dt_rank") or math.ceil(h / 16)
        return (
            h * 2 * di
            + (2 * di if proj_bias else 0)
            + di * k
            + (di if conv_bias else 0)
            + di * (rank + 2 * ds)  # x_proj
            + rank * di
            + di  # dt_proj and its bias
            + di * ds
            + di  # A_log, D
            + di * h
            + (h if proj_bias else 0)
            + rank
            + 2 * ds  # Jamba's dt, B and C RMS norms
        )
    conv_dim = di + 2 * m.n_groups * ds
    in_out = 2 * di + 2 * m.n_groups * ds + m.num_heads
    norm = family.layout != "falcon_h1" or bool(cfg.get("mamba_rms_norm", False))
    return (
        h * in_out
        + (in_out if proj_bias else 0)
        + conv_dim * k
        + (conv_dim if conv_bias else 0)
        + 3 * m.num_heads  # A_log, D, dt_bias
        + (di if norm else 0)  # the gated RMS norm
        + di * h
        + (h if proj_bias else 0)
    )


def _hybrid_params(raw: dict[str, Any], cfg: dict[str, Any], arch: ArchFacts) -> ParamFacts:
    family = family_of(cfg, raw)
    layout = hybrid_layers(cfg, family, arch.num_layers)
    h, nh, kvh, hd = arch.hidden_size, arch.num_attention_heads, arch.num_kv_heads, arch.head_dim
    attn = h * nh * hd + 2 * h * kvh * hd + nh * hd * h
    if cfg.get("attention_bias", False):
        attn += nh * hd + 2 * kvh * hd + h
    mamba = _mamba_params(cfg, family, arch.mamba, h) if arch.mamba is not None else 0
    inter = _int(cfg, "intermediate_size", default=0) or 0
    gated = family.layout != "nemotron_h"  # Nemotron-H: relu2 up/down, no gate
    width = 3 if gated else 2
    mlp = width * h * inter
    experts = _NO_EXPERTS
    moe = arch.moe
    if moe is not None:
        mi = moe.expert_intermediate_size or inter
        router = h * moe.experts
        shared = 0
        if family.layout == "nemotron_h":
            router += moe.experts  # e_score_correction_bias
            si = _int(cfg, "moe_shared_expert_intermediate_size", default=0) or 0
            shared = moe.shared_experts * width * h * si
        experts = _MoeWeights(width * h * mi, shared, router)
    # Granite 4.0-H: a shared (always-on) gated MLP in every layer beside the MoE block.
    shared_mlp = 3 * h * (_int(cfg, "shared_intermediate_size", default=0) or 0)
    if family.layout != "granite_hybrid":
        shared_mlp = 0
    norms = h if family.layout == "nemotron_h" else 2 * h
    mixer_params = {"attention": attn, "mamba2": mamba, "mamba1": mamba, "none": 0}
    mixer_params["attention+mamba2"] = attn + mamba
    dense_of = {"moe": None, "mlp": mlp, "none": 0}
    layers = [
        (mixer_params[mixer] + norms + shared_mlp, dense_of[ffn])
        for mixer, ffn in zip(layout.mixers, layout.ffns, strict=True)
    ]
    return _counted(arch, layers, experts)
