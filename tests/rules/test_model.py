"""The model family: model.fit, model.kernel_path, model.w4a16, judged from facts that carry
a real model directory (published configs and checkpoints written with safetensors)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.facts.document import Facts, decode_facts
from blackwell_doctor.facts.model import ModelFacts
from blackwell_doctor.report.results import Result, Status
from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import FACTS_FIXTURES, FIXTURES
from tests.modeldirs import make_model

MODELS = FIXTURES / "models"
PRO4 = "rtxpro6000x4-threadripper-iommu"


def _facts(host: str, model: Path | None) -> Facts:
    facts = decode_facts((FACTS_FIXTURES / f"{host}.json").read_bytes())
    if model is None:
        return facts
    return msgspec.structs.replace(facts, model=read_model_dir(model))


def _results(host: str, model: Path | None) -> dict[str, Result]:
    return {r.id: r for r in evaluate(_facts(host, model), select=["model"]).results}


def test_without_a_model_directory_every_model_check_skips() -> None:
    results = _results("b200-x8", None)
    assert set(results) == {"model.fit", "model.kernel_path", "model.w4a16"}
    for r in results.values():
        assert r.status is Status.SKIP
        assert "--model-dir" in r.summary


def test_fit_passes_with_the_verdict_per_tp() -> None:
    r = _results("b200-x8", MODELS / "deepseek-r1")["model.fit"]
    assert r.status is Status.PASS
    assert r.summary.startswith("fits at tensor-parallel size 4, 8; at TP 8")
    assert "163,840 tokens" in r.summary
    assert "weights do not fit" in str(r.evidence["TP 2"])


def test_fit_fails_when_no_tp_fits() -> None:
    r = _results(PRO4, MODELS / "deepseek-r1")["model.fit"]
    assert r.status is Status.FAIL
    assert "does not fit on 4x NVIDIA RTX PRO 6000" in r.summary
    assert r.remedy is not None
    assert "smaller quantization" in r.remedy.summary


def test_fit_warns_when_a_shard_leaves_the_directory(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=True, fmt="modelopt-nvfp4")
    (tmp_path / "elsewhere").mkdir()
    shutil.move(root / "model.safetensors", tmp_path / "elsewhere" / "model.safetensors")
    (root / "model.safetensors").symlink_to(tmp_path / "elsewhere" / "model.safetensors")
    r = _results(PRO4, root)["model.fit"]
    assert r.status is Status.WARN
    assert "outside the model directory" in r.summary


def test_fit_is_not_evaluated_without_a_usable_config(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False)
    (root / "config.json").write_text("{")
    r = _results(PRO4, root)["model.fit"]
    assert r.status is Status.ERROR
    assert "config.json is unusable" in r.summary


def test_gb10_is_sized_from_the_unified_pool() -> None:
    r = _results("dgx-spark-gb10", MODELS / "gpt-oss-120b")["model.fit"]
    assert r.status is Status.PASS
    assert "unified" in str(r.evidence["gpus"]) or "unified" in str(r.evidence["TP 1"])


@pytest.mark.parametrize(
    ("host", "model", "status", "words"),
    [
        (PRO4, MODELS / "qwen3-235b-a22b-fp4", Status.WARN, "runtime advice of `recommend`"),
        ("b200-x8", MODELS / "qwen3-235b-a22b-fp4", Status.PASS, "not SM 12.x"),
        (PRO4, MODELS / "deepseek-r1", Status.PASS, "fp8 MoE GEMMs do not use"),
        (PRO4, MODELS / "llama-3.3-70b-instruct", Status.PASS, "dense model"),
    ],
)
def test_kernel_path(host: str, model: Path, status: Status, words: str) -> None:
    r = _results(host, model)["model.kernel_path"]
    assert r.status is status
    assert words in r.summary
    if status is Status.PASS:
        assert "no patched runtime is needed" in r.summary


def test_kernel_path_dense_nvfp4_on_sm12x(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m", moe=False, fmt="modelopt-nvfp4")
    r = _results("sm120-driver580", root)["model.kernel_path"]
    assert r.status is Status.PASS
    assert "dense model" in r.summary


def _write_facts(tmp_path: Path, host: str) -> Path:
    path = tmp_path / "facts.json"
    path.write_bytes((FACTS_FIXTURES / f"{host}.json").read_bytes())
    return path


def test_w4a16_checkpoint_makes_marlin_in_the_log_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same log, the same host: Marlin chosen for MoE is a warning for an NVFP4
    checkpoint and information for a W4A16 (AWQ) one."""
    log = str(FIXTURES / "logs" / "composed-vllm-marlin-auto.log")
    facts = str(_write_facts(tmp_path, "sm120-driver580"))
    verdicts = {}
    for fmt in ("modelopt-nvfp4", "awq"):
        root = make_model(tmp_path / fmt, moe=True, fmt=fmt)
        code = main(
            [
                "check",
                "--facts",
                facts,
                "--model-dir",
                str(root),
                "--logs",
                log,
                "--select",
                "logs.moe_kernels,model.w4a16",
                "-f",
                "json",
            ]
        )
        doc = json.loads(capsys.readouterr().out)
        assert code in (0, 1)
        verdicts[fmt] = {r["id"]: r for r in doc["results"]}
    assert verdicts["modelopt-nvfp4"]["logs.moe_kernels"]["status"] == "warn"
    assert verdicts["awq"]["logs.moe_kernels"]["status"] == "pass"
    assert (
        "Marlin (weight-only 4-bit GEMM) is the expected kernel"
        in (verdicts["awq"]["model.w4a16"]["summary"])
    )


def test_check_model_dir_must_exist_on_a_live_run(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "--model-dir", "/nonexistent-model", "--no-probe", "--gpu-timeout", "5"])
    assert code == 2
    assert "--model-dir /nonexistent-model is not a directory" in capsys.readouterr().err


def test_collect_records_the_model_and_check_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """collect --model-dir on the node, check --facts anywhere: the model section travels."""
    root = make_model(tmp_path / "m", moe=True, fmt="ct-nvfp4")
    facts = _facts(PRO4, root)
    path = tmp_path / "node.json"
    from blackwell_doctor.facts.document import encode_facts

    path.write_bytes(encode_facts(facts))
    shutil.rmtree(root)
    code = main(
        ["check", "--facts", str(path), "--model-dir", str(root), "--select", "model", "-f", "json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    statuses = {r["id"]: r["status"] for r in doc["results"]}
    assert statuses == {"model.fit": "pass", "model.kernel_path": "warn", "model.w4a16": "pass"}


def test_collect_redact_hides_the_home_directory_in_the_model_path(tmp_path: Path) -> None:
    from blackwell_doctor.facts.redact import redact_identity

    root = make_model(tmp_path / "m", moe=False)
    facts = _facts(PRO4, root)
    assert isinstance(facts.model, ModelFacts)
    home = msgspec.structs.replace(facts.model, path="/home/alice/models/qwen")
    redacted = redact_identity(msgspec.structs.replace(facts, model=home))
    assert isinstance(redacted.model, ModelFacts)
    assert redacted.model.path == "/home/<redacted>/models/qwen"
