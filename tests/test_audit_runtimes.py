"""``audit --model-dir`` recognising the serving runtime from package metadata, the way pip
installs it (a ``.dist-info`` with METADATA and RECORD; nothing imported): SGLang 0.5.23
with its own pins (sglang-kernel, flashinfer-python, torch: the Requires-Dist lines of the
sglang-0.5.23 wheel on PyPI) and a torch whose ``torch/version.py`` says CUDA 12.8, then
TensorRT-LLM, which is recognised and has no rows. The rows themselves are unit-tested in
tests/rules/test_stack_backends.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run
from tests.conftest import FACTS_FIXTURES, REPO

MODELS = REPO / "tests" / "fixtures" / "models"

# The head of sglang-0.5.23.dist-info/METADATA (PyPI wheel), with the pins that matter here.
SGLANG_METADATA = """Metadata-Version: 2.4
Name: sglang
Version: 0.5.23
Summary: SGLang is a fast serving framework for large language models and vision language models.
Requires-Dist: flashinfer_python[cu13]==0.7.2
Requires-Dist: sglang-kernel==0.4.10
Requires-Dist: torch==2.14.1
"""


@pytest.fixture(autouse=True)
def _own_scan_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _install(
    site: Path, name: str, version: str, files: dict[str, str], metadata: str = ""
) -> None:
    """A distribution as pip leaves it: its files, METADATA and a RECORD listing them."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        metadata or f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    )
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    rows = [f"{rel},," for rel in files] + [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def _python(tmp_path: Path, site: Path) -> Path:
    """A real venv whose site-packages adds ``site`` (a .pth file), for --python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (pure,) = venv.glob("lib/python*/site-packages")
    (pure / "site.pth").write_text(str(site) + "\n")
    return venv / "bin" / "python"


def _backends(
    python: Path, facts: str, model: str, capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    argv = ["audit", "--python", str(python), "--facts", str(FACTS_FIXTURES / facts)]
    r = run([*argv, "--model-dir", str(MODELS / model), "-f", "json", "--embed-facts"], capsys)
    doc = json.loads(r.out)
    got = {x["id"]: x for x in doc["results"]}
    return got["stack.backends"], doc["facts"]["stack"]


def test_sglang_from_its_metadata_picks_the_sglang_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"
    _install(site, "sglang", "0.5.23", {"sglang/__init__.py": ""}, SGLANG_METADATA)
    _install(site, "sglang-kernel", "0.4.10", {"sgl_kernel/__init__.py": ""})
    _install(site, "flashinfer-python", "0.7.2", {"flashinfer/__init__.py": ""})
    _install(
        site,
        "torch",
        "2.14.1",
        {"torch/__init__.py": "", "torch/version.py": "cuda: Optional[str] = '12.8'\n"},
    )
    python = _python(tmp_path, site)
    # gpt-oss on an RTX PRO 6000: FlashInfer's CUTLASS MXFP4 MoE, Triton attention.
    result, stack = _backends(python, "sm120-driver580.json", "gpt-oss-120b", capsys)
    names = {p["name"]: p["version"] for p in stack["packages"]}
    assert names["sglang"] == "0.5.23"
    assert names["sglang-kernel"] == "0.4.10"
    assert [p["cuda"] for p in stack["packages"] if p["name"] == "torch"] == ["12.8"]
    assert result["status"] == "warn", result["summary"]
    assert result["summary"].startswith("sglang 0.5.23 x mxfp4 checkpoint: moe on 12.0 -> ")
    assert "flashinfer_mxfp4" in result["summary"]
    assert "attention on 12.0 -> triton (fallback)" in result["summary"]
    # Qwen3-MoE NVFP4 (ModelOpt) on a GB10: auto lands on the SM100-only trtllm-gen MoE.
    result, _ = _backends(python, "dgx-spark-gb10.json", "qwen3-235b-a22b-fp4", capsys)
    assert result["status"] == "fail", result["summary"]
    assert "flashinfer_trtllm (SM100-only trtllm-gen kernels) (fails)" in result["summary"]
    assert "--quantization modelopt_fp4" in result["remedy"]["summary"]


def test_tensorrt_llm_from_its_metadata_is_not_covered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"
    _install(site, "tensorrt_llm", "1.2.0", {"tensorrt_llm/__init__.py": ""})
    python = _python(tmp_path, site)
    result, stack = _backends(python, "sm120-driver580.json", "gpt-oss-120b", capsys)
    assert [p["name"] for p in stack["packages"]] == ["tensorrt-llm"]
    assert result["status"] == "skip"
    assert result["summary"].startswith(
        "not covered: checks/backends.toml has no forecast for tensorrt-llm 1.2.0 x mxfp4"
    )
