"""recommend and apply with --model-dir: the tensor-parallel size from the model's fit,
--max-model-len from its KV budget, the MoE backend from its quantization, and a one-line
refusal (exit 2) for a model that fits nowhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackwell_doctor import cli
from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.rules.fit import fit, gpu_pool
from tests.conftest import FACTS_FIXTURES, FIXTURES
from tests.modeldirs import make_model

MODELS = FIXTURES / "models"
PRO4 = str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json")
B200 = str(FACTS_FIXTURES / "b200-x8.json")
SM120 = str(FACTS_FIXTURES / "sm120-driver580.json")


def _launch(facts: str, model: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = cli.main(["recommend", "--facts", facts, "--model-dir", str(model), "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    launch = json.loads(out)["launch"]
    assert isinstance(launch, dict)
    return launch


def _settings(launch: dict[str, object]) -> dict[str, str]:
    settings = launch["settings"]
    assert isinstance(settings, list)
    return {s["name"]: s["value"] for s in settings}


def _command(launch: dict[str, object]) -> list[str]:
    container = launch["container"]
    assert isinstance(container, dict)
    return list(container["command"])


def _arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_tp_comes_from_the_fit_not_only_the_gpu_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 GPUs, but the tiny model has 4 attention heads: TP 8 is impossible, TP 4 is the
    largest size that divides its heads (the GPU count alone would say 8)."""
    root = make_model(tmp_path / "m", moe=False)
    launch = _launch(B200, root, capsys)
    assert launch["tensor_parallel_size"] == 4
    assert _arg(_command(launch), "--tensor-parallel-size") == "4"
    settings = launch["settings"]
    assert isinstance(settings, list)
    why = next(s["why"] for s in settings if s["name"] == "tensor_parallel_size")
    assert "model.fit: TP 1, 2, 4" in why


def test_max_model_len_is_the_kv_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model whose position limit is far away: the budget decides, rounded down to 1024."""
    root = make_model(tmp_path / "m", moe=False)
    cfg = json.loads((root / "config.json").read_text())
    cfg["max_position_embeddings"] = 1 << 40
    (root / "config.json").write_text(json.dumps(cfg))
    launch = _launch(SM120, root, capsys)
    result = fit(read_model_dir(root), gpu_pool(decode_facts(Path(SM120).read_bytes())))
    assert result is not None
    budget = result.entries[-1].max_context
    assert budget is not None
    length = int(_arg(_command(launch), "--max-model-len"))
    assert length % 1024 == 0
    assert budget - 1024 < length <= budget
    assert _settings(launch)["max_model_len"] == str(length)
    assert _arg(_command(launch), "--gpu-memory-utilization") == "0.9"


def test_max_model_len_is_capped_by_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    launch = _launch(B200, MODELS / "deepseek-r1", capsys)
    command = _command(launch)
    assert _arg(command, "--tensor-parallel-size") == "8"
    assert _arg(command, "--max-model-len") == "163840"


@pytest.mark.parametrize(
    ("fmt", "backend"),
    [("modelopt-nvfp4", "flashinfer_cutlass"), ("awq", "marlin"), ("fp8-block", "auto")],
)
def test_moe_backend_follows_the_quantization(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, backend: str
) -> None:
    root = make_model(tmp_path / fmt, moe=True, fmt=fmt)
    launch = _launch(SM120, root, capsys)
    assert _arg(_command(launch), "--moe-backend") == backend


def test_without_a_model_the_launch_has_no_sizing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty directory (a model not downloaded yet, no config.json): the launch is the
    GPU-count one, without --max-model-len, and says why."""
    launch = _launch(B200, tmp_path, capsys)
    command = _command(launch)
    assert "--max-model-len" not in command
    assert "--gpu-memory-utilization" not in command
    assert _arg(command, "--tensor-parallel-size") == "8"
    notes = launch["notes"]
    assert isinstance(notes, list)
    assert any("the model was not sized" in n for n in notes)


@pytest.mark.parametrize("command", ["recommend", "apply"])
def test_a_model_that_cannot_fit_is_refused_in_one_line(
    command: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    args = [command, "--facts", PRO4, "--model-dir", str(MODELS / "deepseek-r1")]
    if command == "apply":
        args.append("--facts-from-another-host")
    code = cli.main(args)
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "refusing to launch DeepseekV3ForCausalLM" in err
    assert "does not fit on 4x NVIDIA RTX PRO 6000" in err


def test_an_mxfp4_moe_gets_the_runtimes_own_backend_not_the_nvfp4_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # gpt-oss-120b (MXFP4) on 4x RTX PRO 6000: the runtime catalogue's SM 12.x default,
    # flashinfer_cutlass, selects an MXFP4 kernel that only SM 9.0 accepts in vLLM 0.32-0.33
    # (checks/backends.toml vllm-0.32-mxfp4-moe); without a stack to forecast from, the
    # launch leaves the choice to the runtime, which starts (Marlin) and says why.
    launch = _launch(PRO4, MODELS / "gpt-oss-120b", capsys)
    assert _arg(_command(launch), "--moe-backend") == "auto"
    assert "MXFP4" in str(launch)
