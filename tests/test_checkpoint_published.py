"""Published config.json files of real large models (tests/fixtures/models, sources in its
README): parameters against the publishers' figures, and fit verdicts on four real host
shapes that a reviewer can redo by hand (the arithmetic is in each verdict's reason)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.ruledata.fit import load_fit_data
from blackwell_doctor.rules.fit import GIB, fit, gpu_pool

MODELS = Path(__file__).parent / "fixtures" / "models"
HOSTS = Path(__file__).parent / "fixtures" / "facts"


def _facts(host: str):  # type: ignore[no-untyped-def]
    return decode_facts((HOSTS / f"{host}.json").read_bytes())


# (model, published total, published active, which active the publisher counts, tolerance)
PUBLISHED = [
    # Model card: "235B in total and 22B activated" (embeddings included).
    ("qwen3-235b-a22b", 235e9, 22e9, "active", 0.01),
    # Model card: 116.83B total, 5.13B active; that active figure leaves out the input
    # embedding table (a lookup, not a matrix product).
    ("gpt-oss-120b", 116.83e9, 5.13e9, "active_without_embedding", 0.01),
    # Hugging Face model page: 70.6B parameters; dense, so active = total.
    ("llama-3.3-70b-instruct", 70.6e9, 70.6e9, "active", 0.01),
    # Model card: 671B total, 37B activated. 37B is rounded to the billion; the exact count
    # from the architecture is 37.55B (8 of 256 routed experts + 1 shared expert in 58 MoE
    # layers, MLA attention, 3 dense layers, embedding and head), 1.5% above the rounded
    # figure, so that one figure is held to its rounding (+-0.5B) plus 1%.
    ("deepseek-r1", 671e9, 37e9, "active", 0.01 + 0.5 / 37),
]


@pytest.mark.parametrize(("model", "total", "active", "which", "tol"), PUBLISHED)
def test_computed_parameters_match_the_published_figures(
    model: str, total: float, active: float, which: str, tol: float
) -> None:
    p = read_model_dir(MODELS / model).parameters
    assert p is not None
    assert p.source == "config"
    assert abs(p.total - total) / total <= 0.01
    assert p.active is not None
    mine = p.active if which == "active" else p.active - p.embedding
    assert abs(mine - active) / active <= tol


def test_deepseek_r1_total_is_within_a_tenth_of_a_percent() -> None:
    p = read_model_dir(MODELS / "deepseek-r1").parameters
    assert p is not None
    assert p.total == 671_026_419_200


def test_llama_total_is_the_exact_parameter_count() -> None:
    """70,553,706,496: 80 x (attention 150,994,944 + MLP 704,643,072 + 2 norms of 8,192)
    + embedding and LM head 2 x 128,256 x 8,192 + final norm 8,192."""
    p = read_model_dir(MODELS / "llama-3.3-70b-instruct").parameters
    assert p is not None
    assert p.total == 80 * (150_994_944 + 704_643_072 + 2 * 8192) + 2 * 128_256 * 8192 + 8192


HOST_NAMES = {
    "rtxpro6000x4-threadripper-iommu": "4x RTX PRO 6000 96 GB",
    "rtx5090-wsl2": "1x RTX 5090 32 GB",
    "dgx-spark-gb10": "GB10 128 GB unified",
    "b200-x8": "8x B200",
}

# Verdict per tensor-parallel size: None = does not fit, else the max context in tokens.
EXPECTED: dict[tuple[str, str], dict[int, int | None]] = {
    ("llama-3.3-70b-instruct", "rtxpro6000x4-threadripper-iommu"): {
        1: None,
        2: 106_989,
        4: 131_072,
    },
    ("llama-3.3-70b-instruct", "rtx5090-wsl2"): {1: None},
    ("llama-3.3-70b-instruct", "dgx-spark-gb10"): {1: None},
    ("llama-3.3-70b-instruct", "b200-x8"): {1: 84_341, 2: 131_072, 4: 131_072, 8: 131_072},
    ("gpt-oss-120b", "rtxpro6000x4-threadripper-iommu"): {1: 131_072, 2: 131_072, 4: 131_072},
    ("gpt-oss-120b", "rtx5090-wsl2"): {1: None},
    ("gpt-oss-120b", "dgx-spark-gb10"): {1: 131_072},
    ("gpt-oss-120b", "b200-x8"): {1: 131_072, 2: 131_072, 4: 131_072, 8: 131_072},
    ("deepseek-r1", "rtxpro6000x4-threadripper-iommu"): {1: None, 2: None, 4: None},
    ("deepseek-r1", "rtx5090-wsl2"): {1: None},
    ("deepseek-r1", "dgx-spark-gb10"): {1: None},
    ("deepseek-r1", "b200-x8"): {1: None, 2: None, 4: 7_461, 8: 163_840},
    ("qwen3-235b-a22b", "rtxpro6000x4-threadripper-iommu"): {1: None, 2: None, 4: None},
    ("qwen3-235b-a22b", "b200-x8"): {1: None, 2: None, 4: 40_960, 8: 40_960},
    ("qwen3-235b-a22b-fp4", "rtxpro6000x4-threadripper-iommu"): {1: None, 2: 40_960, 4: 40_960},
    ("qwen3-235b-a22b-fp4", "rtx5090-wsl2"): {1: None},
    ("qwen3-235b-a22b-fp4", "dgx-spark-gb10"): {1: None},
    ("qwen3-235b-a22b-fp4", "b200-x8"): {1: 40_960, 2: 40_960, 4: 40_960, 8: 40_960},
}


@pytest.mark.parametrize(("model", "host"), list(EXPECTED), ids=[f"{m}@{h}" for m, h in EXPECTED])
def test_fit_verdicts(model: str, host: str) -> None:
    result = fit(read_model_dir(MODELS / model), gpu_pool(_facts(host)))
    assert result is not None
    got = {e.tensor_parallel: (e.max_context if e.fits else None) for e in result.entries}
    assert got == EXPECTED[(model, host)], HOST_NAMES[host]
    for e in result.entries:
        assert f"/ {e.tensor_parallel}) - " in e.reason
        assert "usable" in e.reason
        assert "runtime overhead" in e.reason


def test_llama_on_four_rtx_pro_6000_by_hand() -> None:
    """The TP 2 verdict, redone here from the published numbers:
    usable   = 0.9 x 102,641,958,912 B (NVML total of one RTX PRO 6000) = 92,377,763,020 B
    weights  = 70,553,706,496 parameters x 2 B (BF16) / 2 ranks           = 70,553,706,496 B
    overhead = (1 + 2 + 1) GiB (checks/model_fit.toml)                     =  4,294,967,296 B
    KV/token = 2 (K and V) x 8 KV heads / 2 ranks x 128 x 2 B x 80 layers  =        163,840 B
    context  = (92,377,763,020 - 70,553,706,496 - 4,294,967,296) / 163,840 = 106,989 tokens"""
    data = load_fit_data()
    assert (data.fit.gpu_memory_utilization, data.overhead.bytes) == (0.9, 4 * GIB)
    result = fit(
        read_model_dir(MODELS / "llama-3.3-70b-instruct"),
        gpu_pool(_facts("rtxpro6000x4-threadripper-iommu")),
    )
    assert result is not None
    tp2 = next(e for e in result.entries if e.tensor_parallel == 2)
    assert tp2.usable_bytes == 92_377_763_020
    assert tp2.weights_per_gpu_bytes == 70_553_706_496
    assert tp2.kv_bytes_per_token == 163_840
    assert tp2.max_context == (92_377_763_020 - 70_553_706_496 - 4_294_967_296) // 163_840
    assert "163,840 B/token: 106,989 tokens" in tp2.reason


def test_deepseek_mla_cache_is_the_compressed_latent_on_every_rank() -> None:
    """(kv_lora_rank 512 + rope 64) x 2 B x 61 layers = 70,272 B per token, not divided by
    TP: every rank keeps the whole latent (vs 2 x 128 heads x 192 x 2 B x 61 = 5.99 MB for
    uncompressed K/V)."""
    result = fit(read_model_dir(MODELS / "deepseek-r1"), gpu_pool(_facts("b200-x8")))
    assert result is not None
    assert {e.kv_bytes_per_token for e in result.entries} == {70_272}


def test_gb10_uses_the_stated_unified_pool_explicitly() -> None:
    facts = _facts("dgx-spark-gb10")
    pool = gpu_pool(facts)
    assert pool.unified
    assert pool.memory_bytes == 128_000_000_000
    assert "unified" in pool.source
    result = fit(read_model_dir(MODELS / "gpt-oss-120b"), pool)
    assert result is not None
    (entry,) = result.entries
    assert "unified memory" in entry.reason
    assert "OS" in entry.reason


def test_a_lower_utilization_shrinks_the_context() -> None:
    model = read_model_dir(MODELS / "llama-3.3-70b-instruct")
    pool = gpu_pool(_facts("b200-x8"))
    full = fit(model, pool)
    low = fit(model, pool, utilization=0.8)
    assert full is not None
    assert low is not None
    assert low.entries[0].max_context is not None
    assert full.entries[0].max_context is not None
    assert low.entries[0].max_context < full.entries[0].max_context
    json.dumps([e.reason for e in low.entries])
