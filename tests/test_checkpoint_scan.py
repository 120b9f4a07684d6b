"""Reading a model directory: real checkpoints written with the safetensors library in the
layouts of published exports; parameters agree three ways (counted by hand, computed from
config.json, read from the tensors); only headers are read."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from blackwell_doctor.collect.model.config import arch_from_config, params_from_config
from blackwell_doctor.collect.model.scan import ModelDirError, read_model_dir
from tests.modeldirs import EXPERTS, TOPK, expected_parameters, make_model, write_safetensors

FORMATS = {
    "bf16": ("unquantized", None),
    "modelopt-nvfp4": ("nvfp4", 16),
    "ct-nvfp4": ("nvfp4", 16),
    "fp8-block": ("fp8", None),
    "awq": ("w4a16", 32),
    "gptq": ("w4a16", 32),
}


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_parameters_agree_three_ways(tmp_path: Path, fmt: str, moe: bool) -> None:
    root = make_model(tmp_path / "m", moe=moe, fmt=fmt, shards=3)
    facts = read_model_dir(root)
    total, active = expected_parameters(moe=moe)
    raw = json.loads((root / "config.json").read_text())
    computed = params_from_config(raw, arch_from_config(raw))
    assert facts.parameters is not None
    assert facts.parameters.source == "tensors"
    assert (facts.parameters.total, facts.parameters.active) == (total, active)
    assert (computed.total, computed.active) == (total, active)
    assert facts.problems == []
    method, group = FORMATS[fmt]
    assert facts.quantization.method == method
    assert facts.quantization.group_size == group
    assert facts.shards == 3


def test_weights_bytes_are_the_shards_minus_their_headers(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True, fmt="modelopt-nvfp4", shards=2)
    facts = read_model_dir(root)
    on_disk = 0
    for f in root.glob("*.safetensors"):
        data = f.read_bytes()
        on_disk += len(data) - 8 - int.from_bytes(data[:8], "little")
    assert facts.weights_bytes == on_disk
    assert sum(facts.bytes_by_dtype.values()) == on_disk
    assert set(facts.bytes_by_dtype) == {"BF16", "F32", "F8_E4M3", "U8"}


def test_nvfp4_evidence_names_the_tensors_and_the_block_size(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True, fmt="modelopt-nvfp4")
    q = read_model_dir(root).quantization
    assert q.format == "modelopt NVFP4"
    assert q.evidence[0].startswith("hf_quant_config.json: producer modelopt")
    assert any("U8 weights" in e and "1 per 16 weights" in e for e in q.evidence)


def test_moe_structure(tmp_path: Path) -> None:
    facts = read_model_dir(make_model(tmp_path / "m", moe=True))
    assert facts.arch is not None
    assert facts.arch.moe is not None
    moe = facts.arch.moe
    assert (moe.experts, moe.experts_per_token, moe.shared_experts) == (EXPERTS, TOPK, 0)
    assert moe.moe_layers == [0, 1]


def test_only_headers_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_model(tmp_path / "m", moe=True, fmt="bf16", shards=4)
    allowed = sum(
        8 + int.from_bytes(f.read_bytes()[:8], "little") for f in root.glob("*.safetensors")
    ) + sum(f.stat().st_size for f in root.glob("*.json"))
    weights = sum(f.stat().st_size for f in root.glob("*.safetensors")) - allowed
    read: list[int] = []
    real = os.read

    def counting(fd: int, n: int) -> bytes:
        data = real(fd, n)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counting)
    facts = read_model_dir(root)
    assert facts.weights_bytes is not None
    assert facts.weights_bytes > 0
    assert weights > 100_000
    assert sum(read) <= allowed


def test_config_only_directory_gives_computed_parameters(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True)
    for f in root.glob("*.safetensors"):
        f.unlink()
    facts = read_model_dir(root)
    assert facts.parameters is not None
    assert facts.parameters.source == "config"
    assert facts.parameters.total == expected_parameters(moe=True)[0]
    assert facts.weights_bytes is None


def test_nested_text_config(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True)
    inner = json.loads((root / "config.json").read_text())
    outer = {
        "architectures": ["Qwen3VLMoeForConditionalGeneration"],
        "text_config": inner,
        "vision_config": {"hidden_size": 32},
    }
    del inner["architectures"]
    (root / "config.json").write_text(json.dumps(outer))
    facts = read_model_dir(root)
    assert facts.arch is not None
    assert facts.arch.text_config is True
    assert facts.arch.architecture == "Qwen3VLMoeForConditionalGeneration"
    assert facts.arch.moe is not None
    assert facts.arch.moe.experts == EXPERTS


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (None, "missing"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"hidden_size": 64}', "no usable num_hidden_layers"),
        (
            '{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
            '"vocab_size": 9, "num_experts": 4}',
            "no num_experts_per_tok",
        ),
    ],
)
def test_a_bad_config_is_a_problem_not_a_crash(
    tmp_path: Path, content: str | None, detail: str
) -> None:
    root = make_model(tmp_path / "m", moe=False)
    if content is None:
        (root / "config.json").unlink()
    else:
        (root / "config.json").write_text(content)
    facts = read_model_dir(root)
    assert facts.arch is None
    (problem,) = [p for p in facts.problems if p.kind == "config"]
    assert detail in problem.detail
    # The tensors are still read: parameters come from the shapes.
    assert facts.parameters is not None
    assert facts.parameters.source == "tensors"


def test_a_lying_header_is_a_problem_and_sizes_fall_back_to_config(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False, shards=2)
    shard = sorted(root.glob("*.safetensors"))[0]
    data = bytearray(shard.read_bytes())
    data[:8] = (len(data) * 4).to_bytes(8, "little")
    shard.write_bytes(bytes(data))
    facts = read_model_dir(root)
    (problem,) = facts.problems
    assert (problem.kind, problem.path) == ("header", shard.name)
    assert "runs past the end" in problem.detail
    assert facts.weights_bytes is None
    assert facts.parameters is not None
    assert facts.parameters.source == "config"


def test_missing_shard_and_index_that_escapes_the_directory(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False, shards=2)
    index = json.loads((root / "model.safetensors.index.json").read_text())
    first = sorted(root.glob("*.safetensors"))[0].name
    first_tensor = next(k for k, v in index["weight_map"].items() if v == first)
    (root / first).unlink()
    index["weight_map"]["evil"] = "../../etc/passwd"
    index["weight_map"][first_tensor] = first
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    facts = read_model_dir(root)
    kinds = {(p.kind, p.path) for p in facts.problems}
    assert ("missing-shard", first) in kinds
    assert any(
        k == "index" and "../../etc/passwd" in p.detail for p in facts.problems for k in [p.kind]
    )
    assert facts.shards == 1


def test_symlinked_shards(tmp_path: Path) -> None:
    """Inside the directory (the Hugging Face cache layout links snapshots to blobs in the
    same tree): fine. Outside: read, but named, since a container that mounts only the
    directory sees a dangling link."""
    outside = tmp_path / "blobs"
    outside.mkdir()
    root = make_model(tmp_path / "m", moe=False)
    inner = root / "blobs"
    inner.mkdir()
    shutil.move(root / "model.safetensors", inner / "abc")
    (root / "model.safetensors").symlink_to("blobs/abc")
    assert read_model_dir(root).problems == []
    shutil.move(inner / "abc", outside / "abc")
    (root / "model.safetensors").unlink()
    (root / "model.safetensors").symlink_to(outside / "abc")
    facts = read_model_dir(root)
    (problem,) = facts.problems
    assert problem.kind == "symlink"
    assert "outside the model directory" in problem.detail
    assert facts.parameters is not None
    assert facts.parameters.source == "tensors"


def test_unknown_quantization_is_a_problem(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False)
    cfg = json.loads((root / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "hqq", "nbits": 3}
    (root / "config.json").write_text(json.dumps(cfg))
    facts = read_model_dir(root)
    assert facts.quantization.method == "unknown"
    assert any(p.kind == "quantization" and "hqq" in p.detail for p in facts.problems)


def test_description_that_the_tensors_contradict(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True, fmt="bf16")
    (root / "hf_quant_config.json").write_text(
        json.dumps(
            {
                "producer": {"name": "modelopt"},
                "quantization": {"quant_algo": "NVFP4", "group_size": 16},
            }
        )
    )
    facts = read_model_dir(root)
    assert facts.quantization.method == "nvfp4"
    assert any("no tensor in the headers has that layout" in p.detail for p in facts.problems)


def test_wrong_block_size_is_caught(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True, fmt="modelopt-nvfp4")
    hq = json.loads((root / "hf_quant_config.json").read_text())
    hq["quantization"]["group_size"] = 32
    (root / "hf_quant_config.json").write_text(json.dumps(hq))
    facts = read_model_dir(root)
    assert any("one value per 16 weights" in p.detail for p in facts.problems)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelDirError):
        read_model_dir(tmp_path / "nope")


def test_fused_experts_with_leading_expert_dimension(tmp_path: Path) -> None:
    """gpt-oss/Llama 4 store all experts of a layer in one tensor: [experts, ...]."""
    root = make_model(tmp_path / "m", moe=True)
    (root / "model.safetensors").unlink()
    cfg = json.loads((root / "config.json").read_text())
    h, e, i = cfg["hidden_size"], cfg["num_experts"], cfg["moe_intermediate_size"]
    write_safetensors(
        root / "model.safetensors",
        {
            "model.layers.0.mlp.experts.gate_up_proj": ("BF16", [e, h, 2 * i]),
            "model.layers.0.mlp.experts.down_proj": ("BF16", [e, i, h]),
            "model.layers.0.self_attn.q_proj.weight": ("BF16", [h, h]),
        },
    )
    p = read_model_dir(root).parameters
    assert p is not None
    routed = e * 3 * h * i
    assert p.routed_experts == routed
    assert p.active == h * h + routed * TOPK // e


def test_an_entry_that_lies_about_its_size_is_a_problem(tmp_path: Path) -> None:
    """Header length honest, one tensor's offsets not: the shard is a problem and nothing
    of it is counted."""
    root = make_model(tmp_path / "m", moe=False, shards=2)
    shard = sorted(root.glob("*.safetensors"))[1]
    data = shard.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin, end + 1]
    raw = json.dumps(header).encode()
    shard.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + n :])
    facts = read_model_dir(root)
    (problem,) = facts.problems
    assert (problem.kind, problem.path) == ("header", shard.name)
    assert "offsets span" in problem.detail
    assert facts.shards == 1
    assert facts.weights_bytes is None


def test_hybrid_linear_attention_counts_agree(tmp_path: Path) -> None:
    """Qwen3-Next/3.5 layout: every 2nd layer full (gated) attention, the others Gated
    DeltaNet; MoE with a shared expert and its gate. Tensor names and shapes follow
    transformers' Qwen3Next modules; config.json names only full_attention_interval."""
    h, layers, nh, kvh, hd = 64, 4, 4, 2, 16
    nk, nv, dk, dv, conv = 2, 4, 8, 8, 4
    e, k, mi, si, vocab = 8, 2, 16, 32, 128
    cfg = {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "hidden_size": h,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": kvh,
        "head_dim": hd,
        "intermediate_size": 4 * h,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "full_attention_interval": 2,
        "linear_num_key_heads": nk,
        "linear_num_value_heads": nv,
        "linear_key_head_dim": dk,
        "linear_value_head_dim": dv,
        "linear_conv_kernel_dim": conv,
        "num_experts": e,
        "num_experts_per_tok": k,
        "moe_intermediate_size": mi,
        "shared_expert_intermediate_size": si,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    root = tmp_path / "next"
    root.mkdir()
    (root / "config.json").write_text(json.dumps(cfg))
    t: dict[str, tuple[str, list[int]]] = {
        "model.embed_tokens.weight": ("BF16", [vocab, h]),
        "model.norm.weight": ("BF16", [h]),
        "lm_head.weight": ("BF16", [vocab, h]),
    }
    qkv = 2 * nk * dk + nv * dv
    for i in range(layers):
        p = f"model.layers.{i}"
        t[f"{p}.input_layernorm.weight"] = ("BF16", [h])
        t[f"{p}.post_attention_layernorm.weight"] = ("BF16", [h])
        if (i + 1) % 2 == 0:
            t[f"{p}.self_attn.q_proj.weight"] = ("BF16", [nh * hd * 2, h])
            t[f"{p}.self_attn.k_proj.weight"] = ("BF16", [kvh * hd, h])
            t[f"{p}.self_attn.v_proj.weight"] = ("BF16", [kvh * hd, h])
            t[f"{p}.self_attn.o_proj.weight"] = ("BF16", [h, nh * hd])
            t[f"{p}.self_attn.q_norm.weight"] = ("BF16", [hd])
            t[f"{p}.self_attn.k_norm.weight"] = ("BF16", [hd])
        else:
            t[f"{p}.linear_attn.in_proj_qkvz.weight"] = ("BF16", [qkv + nv * dv, h])
            t[f"{p}.linear_attn.in_proj_ba.weight"] = ("BF16", [2 * nv, h])
            t[f"{p}.linear_attn.conv1d.weight"] = ("BF16", [qkv, 1, conv])
            t[f"{p}.linear_attn.dt_bias"] = ("BF16", [nv])
            t[f"{p}.linear_attn.A_log"] = ("F32", [nv])
            t[f"{p}.linear_attn.norm.weight"] = ("F32", [dv])
            t[f"{p}.linear_attn.out_proj.weight"] = ("BF16", [h, nv * dv])
        t[f"{p}.mlp.gate.weight"] = ("BF16", [e, h])
        t[f"{p}.mlp.shared_expert_gate.weight"] = ("BF16", [1, h])
        for name, out, inp in (("gate_proj", si, h), ("up_proj", si, h), ("down_proj", h, si)):
            t[f"{p}.mlp.shared_expert.{name}.weight"] = ("BF16", [out, inp])
        for x in range(e):
            for name, out, inp in (("gate_proj", mi, h), ("up_proj", mi, h), ("down_proj", h, mi)):
                t[f"{p}.mlp.experts.{x}.{name}.weight"] = ("BF16", [out, inp])
    write_safetensors(root / "model.safetensors", t)
    facts = read_model_dir(root)
    assert facts.arch is not None
    computed = params_from_config(cfg, facts.arch)
    assert facts.parameters is not None
    assert (facts.parameters.total, facts.parameters.active) == (computed.total, computed.active)
    assert (facts.arch.full_attention_layers, facts.arch.linear_attention_layers) == (2, 2)
    assert facts.arch.linear_state_bytes_per_layer == 2 * (nv * dk * dv + qkv * (conv - 1))


@pytest.mark.parametrize(
    ("algo", "method", "bits", "group"),
    [
        ("NVFP4", "nvfp4", 4, 16),
        ("nvfp4_awq", "nvfp4", 4, 16),
        ("W4A16_AWQ", "w4a16", 4, 16),
        ("W4A8_AWQ", "w4a16", 4, 16),
        ("INT4_AWQ", "w4a16", 4, 16),
        ("FP8", "fp8", 8, None),  # per tensor: no group size, whatever the file says
        ("FP8_PB_WO", "fp8", 8, None),
        ("INT8_SQ", "unknown", None, None),
    ],
)
def test_modelopt_quant_algo_decides_the_method(
    algo: str, method: str, bits: int | None, group: int | None
) -> None:
    from blackwell_doctor.collect.model.quant import describe

    described = describe(
        None,
        {
            "producer": {"name": "modelopt"},
            "quantization": {"quant_algo": algo, "group_size": 16, "kv_cache_quant_algo": "FP8"},
        },
    )
    q, problem = described
    assert (q.method, q.weight_bits, q.group_size) == (method, bits, group)
    assert q.format == f"modelopt {algo.upper()}"
    assert (problem is None) == (method != "unknown")
    assert q.kv_cache_dtype == ("fp8" if method != "unknown" else None)
    # The same description inside config.json decides the same way.
    assert (
        describe({"quant_method": "modelopt", "quant_algo": algo, "group_size": 16}, None)[0].method
        == method
    )
