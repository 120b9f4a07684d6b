"""Real model directories for the tests, written with the ``safetensors`` library.

Tiny shapes, real layouts: the tensor names, dtypes and shape relations of Llama/Qwen3-MoE
checkpoints and of the published quantized exports (ModelOpt NVFP4, compressed-tensors
nvfp4-pack-quantized, DeepSeek FP8 blocks, AWQ and GPTQ W4A16); the quantization
descriptions are in the formats documented in tests/fixtures/models/README.md. Data bytes are
zeros: only the headers matter, and the tests check they are all that is read.
"""

from __future__ import annotations

import ctypes
import json
import math
from pathlib import Path
from typing import Any

from tests.conftest import skip_without

try:
    import safetensors._safetensors_rust as st  # type: ignore[import-not-found]
except ModuleNotFoundError as exc:
    skip_without(exc)

# Header dtype -> (library dtype name, bytes per stored element).
DTYPES: dict[str, tuple[str, int]] = {
    "BF16": ("bfloat16", 2),
    "F16": ("float16", 2),
    "F32": ("float32", 4),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "U8": ("uint8", 1),
    "I32": ("int32", 4),
    "I64": ("int64", 8),
}

Tensors = dict[str, tuple[str, list[int]]]


def write_safetensors(path: Path, tensors: Tensors, metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (name -> (header dtype, shape)) with the safetensors library."""
    buffers = []
    specs = {}
    for name, (dtype, shape) in tensors.items():
        lib, size = DTYPES[dtype]
        nbytes = math.prod(shape) * size
        buf = ctypes.create_string_buffer(max(nbytes, 1))
        buffers.append(buf)
        specs[name] = st.TensorSpec(
            dtype=lib, shape=list(shape), data_ptr=ctypes.addressof(buf), data_len=nbytes
        )
    st.serialize_file(specs, str(path), metadata)


# A Qwen3-like decoder: hidden 64, 4 heads of 16, 2 KV heads, 2 layers, vocab 256.
H, HEADS, KV, HD, LAYERS, VOCAB, INTER = 64, 4, 2, 16, 2, 256, 128
EXPERTS, TOPK, MOE_INTER = 8, 2, 32


def base_config(*, moe: bool) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"],
        "model_type": "qwen3_moe" if moe else "qwen3",
        "hidden_size": H,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV,
        "head_dim": HD,
        "intermediate_size": INTER,
        "vocab_size": VOCAB,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if moe:
        cfg |= {
            "num_experts": EXPERTS,
            "num_experts_per_tok": TOPK,
            "moe_intermediate_size": MOE_INTER,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "norm_topk_prob": True,
        }
    return cfg


Linear = tuple[str, int, int]  # name, out, in


def _linears(moe: bool) -> tuple[list[Linear], list[Linear]]:
    """(dense linears, routed-expert linears) of the whole model, without embeddings."""
    dense: list[Linear] = []
    experts: list[Linear] = []
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        dense += [
            (f"{p}.self_attn.q_proj", HEADS * HD, H),
            (f"{p}.self_attn.k_proj", KV * HD, H),
            (f"{p}.self_attn.v_proj", KV * HD, H),
            (f"{p}.self_attn.o_proj", H, HEADS * HD),
        ]
        if moe:
            dense.append((f"{p}.mlp.gate", EXPERTS, H))
            for e in range(EXPERTS):
                q = f"{p}.mlp.experts.{e}"
                experts += [
                    (f"{q}.gate_proj", MOE_INTER, H),
                    (f"{q}.up_proj", MOE_INTER, H),
                    (f"{q}.down_proj", H, MOE_INTER),
                ]
        else:
            dense += [
                (f"{p}.mlp.gate_proj", INTER, H),
                (f"{p}.mlp.up_proj", INTER, H),
                (f"{p}.mlp.down_proj", H, INTER),
            ]
    return dense, experts


def _small(moe: bool) -> Tensors:
    """Embeddings, norms, LM head: BF16 in every format."""
    t: Tensors = {
        "model.embed_tokens.weight": ("BF16", [VOCAB, H]),
        "model.norm.weight": ("BF16", [H]),
        "lm_head.weight": ("BF16", [VOCAB, H]),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        t[f"{p}.input_layernorm.weight"] = ("BF16", [H])
        t[f"{p}.post_attention_layernorm.weight"] = ("BF16", [H])
        t[f"{p}.self_attn.q_norm.weight"] = ("BF16", [HD])
        t[f"{p}.self_attn.k_norm.weight"] = ("BF16", [HD])
    return t


def _quantized(name: str, out: int, inp: int, fmt: str) -> Tensors:
    if fmt == "bf16":
        return {f"{name}.weight": ("BF16", [out, inp])}
    if fmt == "modelopt-nvfp4":  # ModelOpt export: packed E2M1 pairs + E4M3 block scales
        return {
            f"{name}.weight": ("U8", [out, inp // 2]),
            f"{name}.weight_scale": ("F8_E4M3", [out, inp // 16]),
            f"{name}.weight_scale_2": ("F32", []),
            f"{name}.input_scale": ("F32", []),
        }
    if fmt == "ct-nvfp4":  # compressed-tensors nvfp4-pack-quantized
        return {
            f"{name}.weight_packed": ("U8", [out, inp // 2]),
            f"{name}.weight_scale": ("F8_E4M3", [out, inp // 16]),
            f"{name}.weight_global_scale": ("F32", [1]),
            f"{name}.input_global_scale": ("F32", [1]),
        }
    if fmt == "fp8-block":  # DeepSeek-V3/R1: E4M3 weights, one F32 inverse scale per 128x128
        return {
            f"{name}.weight": ("F8_E4M3", [out, inp]),
            f"{name}.weight_scale_inv": ("F32", [-(-out // 128), -(-inp // 128)]),
        }
    if fmt == "awq":  # AutoAWQ GEMM: qweight [in, out/8], per-group zeros and scales
        g = 32
        return {
            f"{name}.qweight": ("I32", [inp, out // 8]),
            f"{name}.qzeros": ("I32", [inp // g, out // 8]),
            f"{name}.scales": ("F16", [inp // g, out]),
        }
    if fmt == "gptq":  # GPTQ: qweight [in/8, out], g_idx per input channel
        g = 32
        return {
            f"{name}.qweight": ("I32", [inp // 8, out]),
            f"{name}.qzeros": ("I32", [inp // g, out // 8]),
            f"{name}.scales": ("F16", [inp // g, out]),
            f"{name}.g_idx": ("I32", [inp]),
        }
    raise ValueError(fmt)


QUANT_DESCRIPTIONS: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {
    # (config.json quantization_config, hf_quant_config.json)
    "bf16": (None, None),
    "modelopt-nvfp4": (
        None,
        {
            "producer": {"name": "modelopt", "version": "0.29.0"},
            "quantization": {
                "quant_algo": "NVFP4",
                "kv_cache_quant_algo": None,
                "group_size": 16,
                "exclude_modules": [
                    "lm_head",
                    "model.layers.*.self_attn*",
                    "model.layers.*.mlp.gate",
                ],
            },
        },
    ),
    "ct-nvfp4": (
        {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "quantization_status": "compressed",
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*mlp.gate$"],
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 4,
                        "type": "float",
                        "strategy": "tensor_group",
                        "group_size": 16,
                        "symmetric": True,
                        "dynamic": False,
                    },
                    "input_activations": {
                        "num_bits": 4,
                        "type": "float",
                        "strategy": "tensor_group",
                        "group_size": 16,
                        "symmetric": True,
                        "dynamic": "local",
                    },
                }
            },
            "kv_cache_scheme": None,
        },
        None,
    ),
    "fp8-block": (
        {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
        },
        None,
    ),
    "awq": (
        {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"},
        None,
    ),
    "gptq": (
        {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": 32,
            "desc_act": False,
            "sym": True,
            "checkpoint_format": "gptq",
        },
        None,
    ),
}


def make_model(
    root: Path, *, moe: bool, fmt: str = "bf16", shards: int = 1, quant_experts_only: bool = True
) -> Path:
    """A complete model directory; ``shards`` > 1 writes an index as HF does."""
    root.mkdir(parents=True, exist_ok=True)
    cfg = base_config(moe=moe)
    cq, hfq = QUANT_DESCRIPTIONS[fmt]
    if cq is not None:
        cfg["quantization_config"] = cq
    (root / "config.json").write_text(json.dumps(cfg, indent=2))
    if hfq is not None:
        (root / "hf_quant_config.json").write_text(json.dumps(hfq, indent=2))
    dense, experts = _linears(moe)
    tensors = _small(moe)
    for name, out, inp in dense:
        keep = quant_experts_only and fmt in ("modelopt-nvfp4", "ct-nvfp4") and moe
        tensors |= _quantized(name, out, inp, "bf16" if keep else fmt)
    for name, out, inp in experts:
        tensors |= _quantized(name, out, inp, fmt)
    write_shards(root, tensors, shards)
    return root


def write_shards(root: Path, tensors: Tensors, shards: int) -> list[str]:
    names = list(tensors)
    if shards == 1:
        write_safetensors(root / "model.safetensors", tensors, {"format": "pt"})
        return ["model.safetensors"]
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    weight_map: dict[str, str] = {}
    for i, f in enumerate(files):
        part = {n: tensors[n] for n in names[i::shards]}
        write_safetensors(root / f, part, {"format": "pt"})
        weight_map |= dict.fromkeys(part, f)
    total = sum(math.prod(s) * DTYPES[d][1] for d, s in tensors.values())
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    return files


def expected_parameters(*, moe: bool) -> tuple[int, int]:
    """(total, active) counted by hand from the shapes above."""
    attn = H * HEADS * HD + 2 * H * KV * HD + HEADS * HD * H + 2 * HD
    norms = 2 * H
    if moe:
        expert = 3 * H * MOE_INTER
        layer_total = attn + norms + H * EXPERTS + EXPERTS * expert
        layer_active = attn + norms + H * EXPERTS + TOPK * expert
    else:
        layer_total = layer_active = attn + norms + 3 * H * INTER
    edge = 2 * VOCAB * H + H
    return LAYERS * layer_total + edge, LAYERS * layer_active + edge
