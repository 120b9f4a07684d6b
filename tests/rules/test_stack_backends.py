"""The backend forecast (stack.backends, checks/backends.toml) on reconstructed SM 12.x
hosts: the RTX PRO 6000 facts (sm120-driver580, 12.0) and DGX Spark's (12.1), with the
published configs of tests/fixtures/models (no weights) and a stack as the audit reads it.
Each expectation is the row read in vLLM's source at that release (the row's sources)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.facts.document import Facts, decode_facts
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


def test_every_row_cites_the_runtime_source_at_its_release() -> None:
    for row in load_stack_data().backends.forecast:
        first = row.sources[0]
        assert first.startswith(f"https://github.com/vllm-project/{row.runtime}/blob/v"), row.id
        release = first.split("/blob/v", 1)[1].split("/", 1)[0]
        assert row.versions.startswith(f">={release},"), (row.id, release)


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
