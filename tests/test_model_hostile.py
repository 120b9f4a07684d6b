"""Malformed checkpoints a user may point `model`, `check --model-dir` and `recommend
--model-dir` at: bytes that are not UTF-8 in config.json or in a tensor name, a tensor named
twice in a header, counts no model has (10^18 experts), heads that do not split among the KV
heads. Each is a problem in the report (or, with neither a usable config nor a shard, one
line and exit 2), never a crash (exit 4) and never silently accepted."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from blackwell_doctor.collect.model.scan import read_model_dir
from tests.cli import run
from tests.conftest import FACTS_FIXTURES
from tests.modeldirs import base_config, make_model

TR = str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json")


def raw_shard(path: Path, header: bytes, data_bytes: int) -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data_bytes)


def config_bytes(**changes: object) -> bytes:
    cfg = base_config(moe=True)
    cfg.update(changes)
    return json.dumps(cfg).encode()


# --------------------------------------------------------------------------- not UTF-8


def test_a_config_that_is_not_utf8_is_a_config_problem(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True)
    (root / "config.json").write_bytes(config_bytes().replace(b"Qwen3", b"Qwen\xff", 1))
    facts = read_model_dir(root)
    (problem,) = [p for p in facts.problems if p.kind == "config"]
    assert problem.detail.startswith("not valid JSON: not UTF-8 (byte 0xff at offset ")
    assert facts.parameters is not None  # the tensors still count
    assert facts.parameters.source == "tensors"


def test_a_tensor_name_that_is_not_utf8_is_a_header_problem(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False)
    raw_shard(
        root / "model.safetensors",
        b'{"a\xff.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
        8,
    )
    facts = read_model_dir(root)
    (problem,) = facts.problems
    assert (problem.kind, problem.path) == ("header", "model.safetensors")
    assert problem.detail == "header is not valid JSON: not UTF-8 (byte 0xff at offset 3)"


@pytest.mark.parametrize("where", ["config", "header", "metadata"])
@pytest.mark.parametrize(
    "argv",
    [
        ["model", "{root}", "--facts", TR],
        ["model", "{root}", "--facts", TR, "-f", "json"],
        ["check", "--facts", TR, "--model-dir", "{root}"],
        ["recommend", "--facts", TR, "--model-dir", "{root}"],
    ],
    ids=["model", "model json", "check --model-dir", "recommend --model-dir"],
)
def test_not_utf8_through_every_command_is_no_crash(
    where: str, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_model(tmp_path / "m", moe=False)
    if where == "config":
        (root / "config.json").write_bytes(b'{"architectures": ["\xff"], "hidden_size": 64}')
    elif where == "metadata":  # issue 19 (audit): a __metadata__ value crashed, exit 4
        raw_shard(
            root / "model.safetensors",
            b'{"__metadata__": {"k": "\xc3\x28"}, '
            b'"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
            8,
        )
    else:
        raw_shard(
            root / "model.safetensors",
            b'{"\xff": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
            8,
        )
    code, out, err = run([a.format(root=root) for a in argv], capsys)
    assert code in (0, 1, 3), err  # a report, with the problem in it
    assert "Traceback" not in err
    assert "internal error" not in err
    assert "not UTF-8" in out or argv[0] != "model"


# --------------------------------------------------------------------------- duplicates


def test_a_tensor_named_twice_is_a_header_problem(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False)
    first = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    second = {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}
    header = f'{{"a.weight": {json.dumps(first)}, "a.weight": {json.dumps(second)}}}'
    raw_shard(root / "model.safetensors", header.encode(), 16)
    facts = read_model_dir(root)
    (problem,) = facts.problems
    assert (problem.kind, problem.path) == ("header", "model.safetensors")
    assert problem.detail.startswith("'a.weight' is named twice in the header: malformed")
    assert facts.tensors == 0  # before: 1 tensor, 8 bytes of 16, and no word about it


def test_data_offsets_as_a_metadata_value_is_no_duplicate(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False)
    header = (
        '{"__metadata__": {"note": "data_offsets"}, '
        '"a.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
    )
    raw_shard(root / "model.safetensors", header.encode(), 8)
    facts = read_model_dir(root)
    assert [p for p in facts.problems if p.kind == "header"] == []
    assert facts.tensors == 1


# --------------------------------------------------------------------------- counts


@pytest.mark.parametrize(
    ("changes", "detail"),
    [
        ({"num_experts": 10**18}, "num_experts = 1000000000000000000, above the 65,536"),
        ({"num_attention_heads": 64, "num_key_value_heads": 3}, "64 attention heads and 3 KV"),
        ({"num_attention_heads": 4, "num_key_value_heads": 8}, "4 attention heads and 8 KV"),
        ({"num_experts_per_tok": 9}, "routes each token to 9 experts of 8"),
        ({"num_hidden_layers": 10**9}, "num_hidden_layers = 1000000000, above"),
        ({"hidden_size": 10**12}, "hidden_size = 1000000000000, above"),
        ({"vocab_size": 10**15}, "vocab_size = 1000000000000000, above"),
        ({"num_attention_heads": 1 << 20}, "num_attention_heads = 1048576, above"),
        ({"n_shared_experts": 10**18}, "n_shared_experts = 1000000000000000000, above"),
        # Issue 19 (audit): these were skipped, with no word (dense; KV heads = heads).
        ({"num_experts": 1e18}, "num_experts = 1e+18: not a count"),
        ({"num_experts": -8}, "num_experts = -8: not a count"),
        ({"num_experts": "8"}, "num_experts = '8': not a count"),
        ({"num_key_value_heads": True}, "num_key_value_heads = True: not a count"),
        ({"num_key_value_heads": 0}, "0 KV heads"),
    ],
)
def test_counts_no_model_has_are_a_config_problem(
    tmp_path: Path, changes: dict[str, object], detail: str
) -> None:
    root = make_model(tmp_path / "m", moe=True)
    (root / "config.json").write_bytes(config_bytes(**changes))
    facts = read_model_dir(root)
    assert facts.arch is None
    (problem,) = [p for p in facts.problems if p.kind == "config"]
    assert detail in problem.detail


def test_the_model_command_says_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_model(tmp_path / "m", moe=True)
    (root / "config.json").write_bytes(config_bytes(num_experts=10**18))
    code, out, err = run(["model", str(root), "--facts", TR], capsys)
    assert code in (0, 1), err
    assert "problem (config) config.json: config.json has num_experts = " in out
