"""Issue 34, item 5: ``model.safetensors.index.json`` without its shards gives the exact
bytes (``metadata.total_size``) and the layers and experts its ``weight_map`` names give; a
count more than 3% from config.json's is a problem in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.ruledata.resources import schema_text
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, skip_without
from tests.modeldirs import make_model

try:
    import jsonschema
except ModuleNotFoundError as exc:
    skip_without(exc)

TR = str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json")
INDEX = "model.safetensors.index.json"


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return make_model(tmp_path / "src", moe=True, fmt="ct-nvfp4", shards=3)


def test_the_index_without_its_shards_gives_the_exact_bytes_and_the_counts(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = read_model_dir(checkpoint)
    for shard in checkpoint.glob("*.safetensors"):
        shard.unlink()
    facts = read_model_dir(checkpoint)
    index = facts.index
    assert index is not None
    # The index's total_size is the shards' tensor bytes: what the headers summed.
    assert index.total_size == full.weights_bytes
    assert (index.shards, index.shards_present, index.layers, index.experts) == (3, 0, 2, 8)
    assert index.moe_layers == 2
    assert [p.kind for p in facts.problems] == ["missing-shard"]  # one, not one a shard
    code, out, _ = run(["model", str(checkpoint), "--facts", TR, "-f", "json"], capsys)
    doc = json.loads(out)
    jsonschema.Draft202012Validator(json.loads(schema_text("model.schema.json"))).validate(doc)
    assert code == 0
    assert doc["sizing"]["weights_bytes"] == full.weights_bytes
    assert doc["sizing"]["weights_source"].startswith(f"{INDEX} metadata.total_size")
    assert doc["index"]["total_size"] == full.weights_bytes
    _, text, _ = run(["model", str(checkpoint), "--facts", TR], capsys)
    assert f"weights: not here: {INDEX} names 3 shard(s)" in text
    assert "the index's names give 2 decoder layers, 2 MoE layers, 8 experts" in text


def _rewrite(root: Path, name: str, edit: dict[str, object]) -> None:
    doc = json.loads((root / name).read_text())
    doc.update(edit)
    (root / name).write_text(json.dumps(doc))


def test_counts_more_than_3_percent_from_the_config_are_shown(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for shard in checkpoint.glob("*.safetensors"):
        shard.unlink()
    _rewrite(checkpoint, "config.json", {"num_hidden_layers": 3, "num_experts": 16})
    code, out, _ = run(["model", str(checkpoint), "--facts", TR, "-f", "json"], capsys)
    assert code == 0
    details = [p["detail"] for p in json.loads(out)["problems"] if p["kind"] == "index"]
    assert details == [
        "the weight_map's names give 2 decoder layers, config.json 3 (33% apart): the "
        "checkpoint and its config.json disagree",
        "the weight_map's names give 8 experts, config.json 16 (50% apart): the checkpoint "
        "and its config.json disagree",
        "the weight_map's names give 2 MoE layers, config.json 3 (33% apart): the checkpoint "
        "and its config.json disagree",
    ]
    _, text, _ = run(["model", str(checkpoint), "--facts", TR], capsys)
    assert f"problem (index) {INDEX}: the weight_map's names give 8 experts, config.json 16" in text


def test_a_declared_mtp_layer_and_a_vision_tower_are_no_disagreement(checkpoint: Path) -> None:
    for shard in checkpoint.glob("*.safetensors"):
        shard.unlink()
    doc = json.loads((checkpoint / INDEX).read_text())
    wmap = doc["weight_map"]
    shard = next(iter(wmap.values()))
    wmap["model.layers.2.mlp.experts.0.up_proj.weight"] = shard  # DeepSeek's layer 61 of 61
    for i in range(27):  # a vision encoder deeper than the 2-layer language model
        wmap[f"model.vision_tower.vision_model.encoder.layers.{i}.mlp.fc1.weight"] = shard
        wmap[f"mtp.layers.{i}.mlp.experts.{i + 8}.up_proj.weight"] = shard  # Qwen3-Next's MTP
    (checkpoint / INDEX).write_text(json.dumps(doc))
    _rewrite(checkpoint, "config.json", {"num_nextn_predict_layers": 1})
    facts = read_model_dir(checkpoint)
    assert facts.index is not None
    assert (facts.index.layers, facts.index.experts) == (3, 8)
    assert [p.kind for p in facts.problems] == ["missing-shard"]
    _rewrite(checkpoint, "config.json", {"num_nextn_predict_layers": 0})
    assert "2 decoder layers" not in str(read_model_dir(checkpoint).problems)
    assert "give 3 decoder layers, config.json 2" in str(read_model_dir(checkpoint).problems)
