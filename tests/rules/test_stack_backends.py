"""The backend forecast (stack.backends, checks/backends.toml) on reconstructed SM 12.x
hosts: the RTX PRO 6000 facts (sm120-driver580, 12.0) and DGX Spark's (12.1), with the
published configs of tests/fixtures/models (no weights) and a stack as the audit reads it.
Each expectation is the row read in vLLM's source at that release (the row's sources)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.facts.document import Facts, Unavailable, decode_facts
from blackwell_doctor.facts.stack import GpuPackage, StackFacts
from blackwell_doctor.report.results import Outcome, Status
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.ruledata.stack import load_stack_data
from blackwell_doctor.rules.stack import forecast, stack_backends

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RTX_PRO = "sm120-driver580"  # compute capability 12.0
SPARK = "dgx-spark-gb10"  # 12.1


def _stack(*packages: tuple[str, str], env: dict[str, str] | None = None) -> StackFacts:
    pkgs = [
        GpuPackage(name=n, version=v, cuda="12.8" if n == "torch" else None) for n, v in packages
    ]
    return StackFacts(
        python="/venv/bin/python",
        python_version="3.12.3",
        site_dirs=["/venv/lib/python3.12/site-packages"],
        packages=pkgs,
        environment=env or {},
    )


def _facts(host: str, model: str, stack: StackFacts) -> Facts:
    facts = decode_facts((FIXTURES / "facts" / f"{host}.json").read_bytes())
    return msgspec.structs.replace(
        facts, stack=stack, model=read_model_dir(FIXTURES / "models" / model)
    )


def _judge(facts: Facts) -> Outcome:
    return stack_backends(facts, load_rule_data())


def _vllm(version: str, *extra: tuple[str, str], torch_cuda: str = "12.8") -> StackFacts:
    s = _stack(("vllm", version), *extra)
    torch = GpuPackage(name="torch", version="2.9.0", cuda=torch_cuda)
    return msgspec.structs.replace(s, packages=[*s.packages, torch])


@pytest.mark.parametrize("host", [RTX_PRO, SPARK])
def test_vllm_013_gpt_oss_mxfp4_falls_back_to_marlin(host: str) -> None:
    out = _judge(_facts(host, "gpt-oss-120b", _vllm("0.13.0")))
    assert out.status is Status.WARN
    assert "moe on 12." in out.summary
    assert "MARLIN (weight-only FP4) (fallback)" in out.summary
    assert "attention on 12." in out.summary
    assert "FLASH_ATTN (native)" in out.summary
    assert out.case == "fallback"
    assert "b12x" in out.remedy_vars["fixes"]
    sources = " ".join(str(v) for v in out.evidence.values())
    assert "blob/v0.13.0/vllm/model_executor/layers/quantization/mxfp4.py" in sources


def test_vllm_013_nvfp4_moe_is_native_cutlass_with_cuda_128() -> None:
    out = _judge(_facts(RTX_PRO, "qwen3-235b-a22b-fp4", _vllm("0.13.0")))
    assert out.status is Status.PASS, out.summary
    assert "vLLM CUTLASS NVFP4 MoE" in out.summary


def test_vllm_013_nvfp4_moe_on_a_cuda_126_torch_is_marlin() -> None:
    out = _judge(_facts(RTX_PRO, "qwen3-235b-a22b-fp4", _vllm("0.13.0", torch_cuda="12.6")))
    assert out.status is Status.WARN
    assert "MARLIN" in out.summary
    assert "CUDA 12.8 or newer" in out.remedy_vars["fixes"]


def test_vllm_033_nvfp4_moe_flashinfer_cutlass_or_vllm_cutlass() -> None:
    with_fi = _vllm("0.33.0", ("flashinfer-python", "0.6.11"))
    out = _judge(_facts(SPARK, "qwen3-235b-a22b-fp4", with_fi))
    assert out.status is Status.PASS
    assert "FLASHINFER_CUTLASS (native)" in out.summary
    out = _judge(_facts(SPARK, "qwen3-235b-a22b-fp4", _vllm("0.33.0")))
    assert "VLLM_CUTLASS (native)" in out.summary


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_vllm_032_033_mxfp4_is_marlin_with_b12x_as_the_opt_in(version: str) -> None:
    stack = _vllm(version, ("flashinfer-python", "0.6.11"))
    out = _judge(_facts(RTX_PRO, "gpt-oss-120b", stack))
    assert out.status is Status.WARN
    assert "moe on 12.0 -> MARLIN (weight-only FP4) (fallback)" in out.summary
    assert "--moe-backend b12x" in out.remedy_vars["fixes"]


def test_deepseek_mla_gets_triton_mla_and_a_forced_sm100_kernel_fails() -> None:
    out = _judge(_facts(RTX_PRO, "deepseek-r1", _vllm("0.13.0")))
    # FP8 MoE has no row: the MoE layer is said to be not covered, attention is forecast.
    assert out.status is Status.WARN
    assert "attention on 12.0 -> TRITON_MLA (fallback)" in out.summary
    assert "not covered: moe on 12.0" in out.summary
    forced = _vllm("0.13.0")
    forced = msgspec.structs.replace(forced, environment={"VLLM_ATTENTION_BACKEND": "CUTLASS_MLA"})
    out = _judge(_facts(RTX_PRO, "deepseek-r1", forced))
    assert out.status is Status.FAIL
    assert "CUTLASS_MLA (forced) (fails)" in out.summary
    assert out.case == "fails"
    assert "Unset VLLM_ATTENTION_BACKEND" in out.remedy_vars["fixes"]


def test_a_release_without_rows_is_not_covered_never_guessed() -> None:
    out = _judge(_facts(RTX_PRO, "gpt-oss-120b", _vllm("0.20.0")))
    assert out.status is Status.SKIP
    assert out.summary.startswith("not covered")
    sglang = _judge(_facts(RTX_PRO, "gpt-oss-120b", _stack(("sglang", "0.5.4"))))
    assert sglang.status is Status.SKIP
    assert "not covered" in sglang.summary


def test_without_a_model_or_a_runtime_it_is_skipped() -> None:
    facts = _facts(RTX_PRO, "gpt-oss-120b", _stack(("torch", "2.9.0")))
    assert "no serving runtime" in _judge(facts).summary
    no_model = msgspec.structs.replace(facts, model=None)
    assert "--model-dir" in _judge(no_model).summary


def test_a_dense_model_has_no_moe_layer_to_forecast() -> None:
    facts = _facts(RTX_PRO, "llama-3.3-70b-instruct", _vllm("0.33.0"))
    got = forecast(facts.stack, facts.model, [(12, 0)], load_stack_data())  # type: ignore[arg-type]
    assert [(f.layer, f.backend) for f in got] == [("attention", "FLASH_ATTN")]


REPOS = {"vllm": "vllm-project/vllm", "sglang": "sgl-project/sglang"}


def test_every_row_cites_the_runtime_source_at_its_release() -> None:
    """Each row's sources start with the runtime's own files at a release tag; every tag
    cited lies in the row's versions, and the lowest release of the range is one of them."""
    for row in load_stack_data().backends.forecast:
        prefix = f"https://github.com/{REPOS[row.runtime]}/blob/v"
        assert row.sources[0].startswith(prefix), row.id
        cited = {u.removeprefix(prefix).split("/")[0] for u in row.sources if u.startswith(prefix)}
        assert all(Version(c) in SpecifierSet(row.versions) for c in cited), (row.id, cited)
        lowest = row.versions.split(",", 1)[0].removeprefix(">=")
        assert lowest in cited, (row.id, lowest, cited)


def test_recommend_launches_with_the_forecasts_moe_backend() -> None:
    """The runtime catalogue's SM 12.x default (--moe-backend flashinfer_cutlass) fails to
    start an MXFP4 checkpoint on vLLM 0.32/0.33 (the row's fix): recommend takes the row's
    value instead, with the row named in why."""
    from blackwell_doctor.recommend.settings import forecast_moe_backend

    facts = _facts(RTX_PRO, "gpt-oss-120b", _vllm("0.33.0", ("flashinfer-python", "0.6.11")))
    got = forecast_moe_backend(facts)
    assert got is not None
    assert got[0] == "auto"
    assert "vllm-0.32-mxfp4-moe" in got[1]
    assert "MARLIN" in got[1]
    nvfp4 = _facts(RTX_PRO, "qwen3-235b-a22b-fp4", _vllm("0.32.0"))
    got = forecast_moe_backend(nvfp4)
    assert got is not None
    assert got[0] == "cutlass"
    # vLLM 0.13 has no --moe-backend: nothing to launch with.
    assert forecast_moe_backend(_facts(RTX_PRO, "gpt-oss-120b", _vllm("0.13.0"))) is None


# ----------------------------------------------------------------------------- SGLang
# The rows read in SGLang 0.5.22 and 0.5.23 (the PyPI wheels): per architecture, because its
# model overrides choose per architecture.


def _sglang(version: str, *extra: tuple[str, str], torch_cuda: str = "12.8") -> StackFacts:
    s = _stack(("sglang", version), ("sglang-kernel", "0.4.10"), *extra)
    torch = GpuPackage(name="torch", version="2.14.1", cuda=torch_cuda)
    return msgspec.structs.replace(s, packages=[*s.packages, torch])


FI = ("flashinfer-python", "0.7.2")


@pytest.mark.parametrize("version", ["0.5.22", "0.5.23"])
@pytest.mark.parametrize("host", [RTX_PRO, SPARK])
def test_sglang_nvfp4_qwen3_moe_auto_takes_sm100_only_trtllm(version: str, host: str) -> None:
    """Qwen3-MoE's override fills --quantization only on SM100, so on SM 12.x the NVFP4 MoE
    stays auto and create_moe_runner takes FLASHINFER_TRTLLM: a start that fails, with the
    flags that select flashinfer_cutlass."""
    out = _judge(_facts(host, "qwen3-235b-a22b-fp4", _sglang(version, FI)))
    assert out.status is Status.FAIL, out.summary
    assert "moe on 12." in out.summary
    assert "flashinfer_trtllm (SM100-only trtllm-gen kernels) (fails)" in out.summary
    assert "attention on 12." in out.summary
    assert "flashinfer (native)" in out.summary
    assert out.case == "fails"
    assert "--quantization modelopt_fp4" in out.remedy_vars["fixes"]
    assert "--moe-runner-backend flashinfer_cutlass" in out.remedy_vars["fixes"]
    sources = " ".join(str(v) for v in out.evidence.values())
    assert "sgl-project/sglang/blob/v0.5.23/python/sglang/srt/layers/quantization" in sources


def test_sglang_nvfp4_nemotron_h_gets_flashinfer_cutlass() -> None:
    """NemotronH's override fills modelopt_fp4 on every GPU and sets flashinfer_cutlass off
    SM100: native. Its (hybrid) attention has no row: said to be not covered."""
    out = _judge(_facts(SPARK, "nemotron-3-nano-30b-a3b-nvfp4", _sglang("0.5.23", FI)))
    assert out.status is Status.PASS, out.summary
    assert "moe on 12.1 -> flashinfer_cutlass (native)" in out.summary
    assert "not covered: attention on 12.1" in out.summary


def test_sglang_compressed_tensors_nvfp4_is_not_the_modelopt_row() -> None:
    facts = _facts(RTX_PRO, "qwen3-235b-a22b-fp4", _sglang("0.5.23", FI))
    model = facts.model
    assert model is not None
    assert not isinstance(model, Unavailable)
    quant = msgspec.structs.replace(
        model.quantization, format="compressed-tensors nvfp4-pack-quantized"
    )
    other = msgspec.structs.replace(facts, model=msgspec.structs.replace(model, quantization=quant))
    got = forecast(other.stack, other.model, [(12, 0)], load_stack_data())  # type: ignore[arg-type]
    assert [(f.layer, f.row is None) for f in got] == [("moe", True), ("attention", False)]


@pytest.mark.parametrize("host", [RTX_PRO, SPARK])
def test_sglang_gpt_oss_mxfp4_is_native_flashinfer_with_triton_attention(host: str) -> None:
    out = _judge(_facts(host, "gpt-oss-120b", _sglang("0.5.22", FI)))
    assert out.status is Status.WARN, out.summary
    assert "flashinfer_mxfp4 (FlashInfer CUTLASS MXFP8 x MXFP4, cutlass_sm120) (native)" in (
        out.summary
    )
    assert "attention on 12." in out.summary
    assert "-> triton (fallback)" in out.summary
    assert "trtllm_mha" in out.remedy_vars["fixes"]


def test_sglang_deepseek_mla_is_triton_and_fp8_moe_not_covered() -> None:
    out = _judge(_facts(RTX_PRO, "deepseek-r1", _sglang("0.5.23", FI)))
    assert out.status is Status.WARN
    assert "attention on 12.0 -> triton (fallback)" in out.summary
    assert "not covered: moe on 12.0" in out.summary


def test_sglang_dense_attention_is_flashinfer_or_triton_without_it() -> None:
    out = _judge(_facts(RTX_PRO, "llama-3.3-70b-instruct", _sglang("0.5.23", FI)))
    assert out.status is Status.PASS
    assert out.summary.endswith("attention on 12.0 -> flashinfer (native)")
    out = _judge(_facts(RTX_PRO, "llama-3.3-70b-instruct", _sglang("0.5.23")))
    assert out.status is Status.WARN
    assert "attention on 12.0 -> triton (fallback)" in out.summary
    assert "Install flashinfer-python" in out.remedy_vars["fixes"]


def test_sglang_rows_need_a_cuda_128_torch_and_a_read_release() -> None:
    """is_sm120 (the MoE overrides' test) needs torch built for CUDA 12.8+: with a cu126
    torch the MoE has no row, while the attention choice does not depend on it; a release
    that was not read (0.5.4, 0.5.24) has no row at all."""
    out = _judge(_facts(RTX_PRO, "gpt-oss-120b", _sglang("0.5.23", FI, torch_cuda="12.6")))
    assert out.summary.endswith("attention on 12.0 -> triton (fallback); not covered: moe on 12.0")
    for stack in (_sglang("0.5.4", FI), _sglang("0.5.24", FI)):
        out = _judge(_facts(RTX_PRO, "gpt-oss-120b", stack))
        assert out.status is Status.SKIP, out.summary
        assert out.summary.startswith("not covered")
        assert "sglang >=0.5.22,<0.5.24" in out.summary  # the releases that have rows


def test_vllm_and_sglang_side_by_side_are_named_per_runtime() -> None:
    stack = _sglang("0.5.23", FI, ("vllm", "0.33.0"))
    out = _judge(_facts(RTX_PRO, "gpt-oss-120b", stack))
    assert "vllm moe on 12.0 -> MARLIN (weight-only FP4) (fallback)" in out.summary
    assert "sglang moe on 12.0 -> flashinfer_mxfp4" in out.summary
    assert out.evidence["runtime"] == "sglang 0.5.23, vllm 0.33.0"


def test_tensorrt_llm_is_recognised_and_not_covered() -> None:
    out = _judge(_facts(RTX_PRO, "gpt-oss-120b", _stack(("tensorrt-llm", "1.2.0"))))
    assert out.status is Status.SKIP
    assert out.summary.startswith("not covered: checks/backends.toml has no forecast for")
    assert "tensorrt-llm 1.2.0" in out.summary
