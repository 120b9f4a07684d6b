"""`blackwell-doctor model DIR`: the JSON contract, the renderings, exit codes, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from blackwell_doctor.ruledata.resources import schema_text
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, skip_without
from tests.modeldirs import expected_parameters, make_model

try:
    import jsonschema
except ModuleNotFoundError as exc:
    skip_without(exc)

TR = str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json")
NO_GPU = str(FACTS_FIXTURES / "no-gpu.json")
MODELS = Path(__file__).parent / "fixtures" / "models"


def test_json_contract_on_a_real_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_model(tmp_path / "m", moe=True, fmt="ct-nvfp4", shards=2)
    code, out, err = run(["model", str(root), "--facts", TR, "-f", "json"], capsys)
    assert (code, err) == (0, "")
    doc = json.loads(out)
    jsonschema.Draft202012Validator(json.loads(schema_text("model.schema.json"))).validate(doc)
    assert doc["schema_version"] == 1
    assert doc["model"]["architecture"] == "Qwen3MoeForCausalLM"
    assert doc["model"]["quantization"]["method"] == "nvfp4"
    assert doc["model"]["moe"]["experts"] == 8
    total, active = expected_parameters(moe=True)
    assert doc["parameters"] == doc["parameters"] | {
        "source": "tensors",
        "total": total,
        "active": active,
    }
    assert isinstance(doc["weights_bytes"], int)
    assert doc["weights_bytes"] > 0
    assert [e["tensor_parallel"] for e in doc["fit"]] == [1, 2, 4]
    for e in doc["fit"]:
        assert e["fits"] is True
        assert e["max_context"] == 32768
        assert e["reason"]


def test_config_only_is_labelled_computed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["model", str(MODELS / "gpt-oss-120b"), "--facts", TR, "-f", "json"], capsys)
    doc = json.loads(out)
    assert code == 0
    assert doc["parameters"]["source"] == "config"
    assert doc["weights_bytes"] is None
    assert doc["sizing"]["weights_source"].startswith("estimated:")


def test_rich_and_markdown_show_the_arithmetic(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["model", str(MODELS / "llama-3.3-70b-instruct"), "--facts", TR], capsys)
    assert code == 0
    assert "computed from config.json" in out
    assert "TP 2: fits, max context 106,989 tokens" in out
    assert "0.9 x 95.59 GiB = 86.03 GiB usable - 65.71 GiB weights" in out
    _, md, _ = run(
        ["model", str(MODELS / "llama-3.3-70b-instruct"), "--facts", TR, "-f", "markdown"], capsys
    )
    assert md.startswith("## ")
    assert "- TP 1: does NOT fit" in md


def test_exit_1_when_it_fits_nowhere(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["model", str(MODELS / "deepseek-r1"), "--facts", TR, "-f", "json"], capsys)
    assert code == 1
    assert not any(e["fits"] for e in json.loads(out)["fit"])


def test_no_gpu_in_the_facts_is_a_note_not_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["model", str(MODELS / "deepseek-r1"), "--facts", NO_GPU, "-f", "json"], capsys
    )
    doc = json.loads(out)
    assert code == 0
    assert doc["fit"] == []
    assert "no GPU" in doc["fit_note"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model", "/nonexistent-model-dir", "--facts", TR], "is not a directory"),
        (["model", str(MODELS), "--facts", TR], "no usable config.json"),
        (
            [
                "model",
                str(MODELS / "deepseek-r1"),
                "--facts",
                TR,
                "--gpu-memory-utilization",
                "1.5",
            ],
            "at most 1",
        ),
        (
            [
                "model",
                str(MODELS / "deepseek-r1"),
                "--facts",
                TR,
                "--gpu-memory-utilization",
                "nan",
            ],
            "at most 1",
        ),
        (["model", str(MODELS / "deepseek-r1"), "--facts", "/nonexistent.json"], "cannot read"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = run(args, capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert message in err


def test_a_lying_header_is_a_problem_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_model(tmp_path / "m", moe=False)
    shard = root / "model.safetensors"
    shard.write_bytes((1 << 40).to_bytes(8, "little") + shard.read_bytes()[8:])
    code, out, err = run(["model", str(root), "--facts", TR], capsys)
    assert code == 0
    assert err == ""
    assert "problem (header) model.safetensors: header length 1099511627776 bytes exceeds" in out


def test_the_installed_command_runs(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True, fmt="modelopt-nvfp4")
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "model", str(root), "--facts", TR, "-f", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"]["quantization"]["format"] == "modelopt NVFP4"


def test_hostile_names_in_config_reach_no_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_model(tmp_path / "m", moe=False)
    cfg = json.loads((root / "config.json").read_text())
    cfg["architectures"] = ["Evil\x1b[2J\n## Forged heading\u202e"]
    (root / "config.json").write_text(json.dumps(cfg))
    for fmt in ("rich", "markdown"):
        code, out, _ = run(["model", str(root), "--facts", TR, "-f", fmt], capsys)
        assert code == 0
        assert "\x1b" not in out
        assert "\u202e" not in out
        assert "\n## Forged heading" not in out
    code, out, _ = run(["model", str(root), "--facts", TR, "-f", "json"], capsys)
    assert json.loads(out)["model"]["architecture"].startswith("Evil\x1b")
