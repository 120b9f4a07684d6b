"""Concepts, not key names (issue 34, items 2 and 3): the decoder count reads each concept
through every key checks/model_concepts.toml lists for it (written by tools/modelconcepts.py
from transformers' configuration files), and a model_type no family covers is counted from
those concepts, labelled "estimated: family not verified", with the keys it used and those it
ignored, instead of "not modelled"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tools import modelconcepts

from blackwell_doctor.collect.model.config import (
    ESTIMATED,
    NotModelled,
    arch_from_config,
    params_from_config,
)
from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.ruledata.checkdata import CatalogueError
from blackwell_doctor.ruledata.concepts import ConceptData, load_concepts, validate
from tests.cli import run
from tests.conftest import FACTS_FIXTURES

MODELS = Path(__file__).parent / "fixtures" / "models"
TR = str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json")


def _config(model: str, **changes: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((MODELS / model / "config.json").read_text())
    cfg.update(changes)
    return cfg


def _count(cfg: dict[str, Any]) -> tuple[int, int | None]:
    arch = arch_from_config(cfg)
    p = params_from_config(cfg, arch)
    return p.total, p.active


# ----------------------------------------------------------------------------- the table


def test_every_key_has_a_source_and_one_concept() -> None:
    data = load_concepts()
    keys = [k.key for c in data.concept for k in c.keys]
    assert len(keys) == len(set(keys))
    assert all(k.source for c in data.concept for k in c.keys)
    experts = next(c for c in data.concept if c.name == "experts_per_token")
    assert {"num_experts_per_tok", "moe_k", "moe_topk", "top_k_experts"} <= {
        k.key for k in experts.keys
    }


def test_a_key_listed_under_two_concepts_is_refused() -> None:
    data = load_concepts()
    doubled = msgspec.structs.replace(
        data,
        concept=[
            msgspec.structs.replace(c, keys=[*c.keys, data.concept[0].keys[0]])
            if c.name == "vocab_size"
            else c
            for c in data.concept
        ],
    )
    with pytest.raises(CatalogueError, match="'hidden_size' is in both"):
        validate(doubled, "checks/model_concepts.toml")


def test_the_tool_cites_the_file_that_declares_a_key(tmp_path: Path) -> None:
    """tools/modelconcepts.py on a two-file transformers tree: a key declared as an
    annotated attribute or an attribute_map alias gets that file; one no file declares and
    no publisher config names stops the run."""
    models = tmp_path / "models"
    for name, body in {
        "llama": "class LlamaConfig:\n    hidden_size: int = 1\n    vocab_size: int = 2\n",
        "gpt2": "class GPT2Config:\n    attribute_map = {'hidden_size': 'n_embd'}\n",
    }.items():
        (models / name).mkdir(parents=True)
        (models / name / f"configuration_{name}.py").write_text(body)
    (tmp_path / "__init__.py").write_text('__version__ = "9.9"\n')
    found = modelconcepts.declarations(tmp_path)
    assert found["n_embd"] == ["gpt2"]
    assert found["hidden_size"] == ["llama"]
    with pytest.raises(SystemExit, match="no source for"):
        modelconcepts.render(tmp_path)


# ----------------------------------------------------------------------------- aliases


@pytest.mark.parametrize("alias", ["moe_topk", "moe_k", "top_k_experts", "num_experts_per_token"])
def test_experts_per_token_under_another_key_counts_the_same(alias: str) -> None:
    cfg = _config("qwen3-235b-a22b")
    renamed = {alias if k == "num_experts_per_tok" else k: v for k, v in cfg.items()}
    assert _count(renamed) == _count(cfg)


def test_experts_under_ernie_keys_and_layer_range() -> None:
    """ERNIE 4.5's names (transformers models/ernie4_5_moe): moe_num_experts, moe_k,
    moe_num_shared_experts, MoE layers from moe_layer_start_index on."""
    cfg = _config("qwen3-235b-a22b", model_type="ernie_like")
    for old, new in (
        ("num_experts", "moe_num_experts"),
        ("num_experts_per_tok", "moe_k"),
    ):
        cfg[new] = cfg.pop(old)
    cfg.update(moe_layer_start_index=1, moe_layer_end_index=93, moe_layer_interval=1)
    arch = arch_from_config(cfg)
    assert arch.moe is not None
    assert (arch.moe.experts, arch.moe.experts_per_token) == (128, 8)
    assert arch.moe.moe_layers == list(range(1, 94))


def test_a_nested_llm_config_is_the_language_model() -> None:
    inner = _config("llama-3.3-70b-instruct")
    outer = {"model_type": "internvl_chat", "llm_config": inner, "vision_config": {}}
    assert _count(outer) == _count(inner)


# ----------------------------------------------------------------------------- estimates


def test_a_derivative_of_a_known_dense_model_is_estimated_and_labelled() -> None:
    llama = _config("llama-3.3-70b-instruct")
    new = _config("llama-3.3-70b-instruct", model_type="newlab_llm")
    arch = arch_from_config(new)
    assert arch.family is None
    assert arch.estimate is not None
    assert arch.estimate.label == ESTIMATED == "estimated: family not verified"
    assert "num_key_value_heads" in arch.estimate.keys_used
    assert arch.estimate.may_be_low is False
    assert _count(new) == _count(llama)  # the same concepts, the same count
    assert arch_from_config(llama).estimate is None  # verified families keep their label


def test_a_key_no_concept_accounts_for_is_listed_and_may_make_it_low() -> None:
    new = _config("llama-3.3-70b-instruct", model_type="newlab_llm", adapter_rank=64)
    arch = arch_from_config(new)
    assert arch.estimate is not None
    assert "adapter_rank" in arch.estimate.keys_ignored
    assert arch.estimate.may_be_low is True
    assert "rms_norm_eps" not in arch.estimate.keys_ignored  # holds no parameter


def test_a_missing_needed_concept_is_not_modelled_and_named() -> None:
    cfg = {k: v for k, v in _config("llama-3.3-70b-instruct").items() if k != "intermediate_size"}
    cfg["model_type"] = "newlab_llm"
    with pytest.raises(NotModelled, match="needs the MLP's inner width \\(intermediate_size"):
        arch_from_config(cfg)


def test_a_gelu_mlp_is_two_matrices_and_said_so() -> None:
    cfg = _config("llama-3.3-70b-instruct", model_type="newlab_llm", hidden_act="gelu")
    arch = arch_from_config(cfg)
    assert arch.estimate is not None
    assert any("without a gate" in a for a in arch.estimate.assumptions)
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    assert _count(_config("llama-3.3-70b-instruct"))[0] - _count(cfg)[0] == layers * h * inter


def test_the_model_command_labels_total_active_and_kv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "m"
    root.mkdir()
    cfg = _config("qwen3-235b-a22b", model_type="qwen9_moe")
    (root / "config.json").write_text(json.dumps(cfg))
    code, out, err = run(["model", str(root), "--facts", TR], capsys)
    assert code in (0, 1), err
    assert "computed from config.json, estimated: family not verified" in out
    assert "keys used: " in out
    assert "(estimated: family not verified)" in out.split("fit on", 1)[1]
    code, out, err = run(["model", str(root), "--facts", TR, "-f", "json"], capsys)
    doc = json.loads(out)
    assert doc["model"]["estimate"]["label"] == "estimated: family not verified"
    assert "num_experts_per_tok" in doc["model"]["estimate"]["keys_used"]
    assert doc["model"]["family"] is None
    assert doc["parameters"]["active"] is not None
    assert all("estimated: family not verified" in e["reason"] for e in doc["fit"] if e["fits"])


def test_the_facts_carry_the_estimate_through_replay(tmp_path: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_text(
        json.dumps(_config("llama-3.3-70b-instruct", model_type="newlab_llm"))
    )
    facts = read_model_dir(root)
    assert facts.arch is not None
    again = msgspec.json.decode(msgspec.json.encode(facts.arch), type=type(facts.arch))
    assert again.estimate == facts.arch.estimate


def test_the_shipped_table_decodes_as_its_struct() -> None:
    assert isinstance(load_concepts(), ConceptData)
