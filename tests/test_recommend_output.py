"""recommend: actions, formats, catalogue validation and the CLI contract."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from blackwell_doctor import cli
from blackwell_doctor.checkdata import CatalogueError
from blackwell_doctor.cli.recommend import register
from blackwell_doctor.evaluate import evaluate
from blackwell_doctor.facts import decode_facts
from blackwell_doctor.recommend import validate
from blackwell_doctor.recommend.catalogue import load_catalogue, parse_catalogue
from blackwell_doctor.recommend.launch import docker_run_argv
from blackwell_doctor.recommend.plan import LaunchOptions, build_recommendation
from blackwell_doctor.recommend.render import RecommendFormat, render_recommendation
from tests.conftest import FACTS_FIXTURES

RTXPRO = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"
SM120 = FACTS_FIXTURES / "sm120-driver580.json"
SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"


def _main(args: list[str]) -> int:
    if not any(
        c.name == "recommend" or getattr(c.callback, "__name__", "") == "recommend"
        for c in cli.app.registered_commands
    ):
        register(cli.app)
    return cli.main(args)


def _build(fixture: Path, model_dir: str | None, **kw: object):  # type: ignore[no-untyped-def]
    facts = decode_facts(fixture.read_bytes())
    options = LaunchOptions(model_dir=model_dir, **kw)  # type: ignore[arg-type]
    return build_recommendation(facts, evaluate(facts), load_catalogue(), options)


def test_driver_upgrade_is_one_action_for_both_driver_findings() -> None:
    rec, _ = _build(SM120, None)
    driver = [a for a in rec.actions if "driver.version" in a.why or "driver.cuda_version" in a.why]
    assert len(driver) == 1
    assert driver[0].why == ["driver.version", "driver.cuda_version"]
    assert driver[0].verify == [
        "blackwell-doctor check --select driver.version --select driver.cuda_version"
    ]
    assert len(driver[0].commands) == len(set(driver[0].commands))


def test_actions_are_ordered_platform_before_runtime() -> None:
    rec, _ = _build(RTXPRO, None)
    assert [a.id for a in rec.actions] == ["iommu", "acs", "runtime"]
    runtime = rec.actions[-1]
    assert "probe.tiles" in runtime.why
    assert runtime.effect.source
    assert runtime.effect.confidence


def test_upstream_runtime_preferred_and_unpinned_said() -> None:
    rec, _ = _build(RTXPRO, None)
    assert rec.launch is not None
    assert rec.launch.runtime.id == "vllm-upstream"
    assert not rec.launch.runtime.pinned
    assert any("unpinned" in n for n in rec.launch.notes)


def test_k64_runtime_needs_driver_595() -> None:
    rec, _ = _build(SM120, "/srv/models/m", runtime_id="vllm-blackwell-k64")
    assert rec.launch is not None
    assert any("needs driver 595.45.04" in n for n in rec.launch.notes)
    assert any("unverified" in n or "not verified" in n for n in rec.launch.notes)


def test_no_speedup_promised_in_any_format() -> None:
    rec, spec = _build(RTXPRO, "/srv/models/m")
    for fmt in RecommendFormat:
        text = render_recommendation(rec, fmt, spec).lower()
        for claim in ("2x", "faster", "283 tok/s", "doubles"):
            assert claim not in text, (fmt, claim)
    assert (
        "no speed-up is promised"
        in render_recommendation(rec, RecommendFormat.markdown, spec).lower()
    )


def test_secrets_never_rendered() -> None:
    rec, spec = _build(
        RTXPRO, "/srv/models/m", extra_env=(("HF_TOKEN", SECRET), ("MY_URL", SECRET))
    )
    assert spec is not None
    assert spec.env["HF_TOKEN"] == SECRET
    for fmt in RecommendFormat:
        assert SECRET not in render_recommendation(rec, fmt, spec), fmt


def test_json_has_schema_version_and_actions() -> None:
    rec, spec = _build(RTXPRO, "/srv/models/m")
    doc = json.loads(render_recommendation(rec, RecommendFormat.json, spec))
    assert doc["schema_version"] == 1
    assert doc["actions"][0]["why"] == ["pci.iommu"]
    assert doc["launch"]["tensor_parallel_size"] == 4
    assert doc["launch"]["docker_run"][:2] == ["docker", "run"]


def test_shell_exports_then_docker_run() -> None:
    rec, spec = _build(RTXPRO, "/srv/models/m", bind="0.0.0.0", port=9000)
    assert spec is not None
    text = render_recommendation(rec, RecommendFormat.shell, spec)
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert "export OMP_NUM_THREADS=12" in lines
    assert shlex.split(lines[-1]) == docker_run_argv(spec)
    argv = docker_run_argv(spec)
    assert argv[argv.index("--publish") + 1] == "0.0.0.0:9000:8000"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert "type=bind,source=/srv/models/m,target=/model,readonly" in mounts
    assert any(m.startswith("type=volume,source=blackwell-doctor-jit-") for m in mounts)
    assert argv[argv.index("--ipc") + 1] == "host"
    assert "--tensor-parallel-size" in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert argv[argv.index("--moe-backend") + 1] == "flashinfer_cutlass"


def test_port_binds_loopback_by_default() -> None:
    _, spec = _build(RTXPRO, "/srv/models/m")
    assert spec is not None
    assert spec.published == "127.0.0.1:8000:8000"


def _yaml_load(text: str) -> object:
    import yaml  # a dev dependency: the compose file must parse with a real YAML parser

    loaded: object = yaml.safe_load(text)
    return loaded


def test_compose_parses_as_yaml_with_escaped_dollars() -> None:
    rec, spec = _build(
        RTXPRO, "/srv/models/m", extra_env=(("GREETING", 'a$b "q" #x'), ("HF_TOKEN", SECRET))
    )
    assert spec is not None
    doc = _yaml_load(render_recommendation(rec, RecommendFormat.compose, spec))
    assert isinstance(doc, dict)
    svc = doc["services"]["vllm"]
    assert svc["image"] == spec.image
    assert svc["command"] == spec.command
    assert svc["environment"]["GREETING"] == 'a$$b "q" #x'  # compose reads $$ as $
    assert svc["environment"]["HF_TOKEN"] == "${HF_TOKEN:?set HF_TOKEN}"
    assert svc["environment"]["OMP_NUM_THREADS"] == "12"
    assert svc["ports"] == ["127.0.0.1:8000:8000"]
    assert svc["volumes"][0] == {
        "type": "bind",
        "source": "/srv/models/m",
        "target": "/model",
        "read_only": True,
    }
    assert svc["ipc"] == "host"
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_shipped_catalogue_is_valid_and_upstream_first() -> None:
    cat = load_catalogue()
    ids = [r.id for r in cat.ordered()]
    assert ids[0] == "vllm-upstream"
    k64 = cat.by_id("vllm-blackwell-k64")
    assert k64.image == "docker.io/verdictai/vllm-blackwell-k64:latest"
    assert k64.min_driver == "595.45.04"
    assert k64.cuda == "13.2"
    assert not k64.verified
    assert k64.digest == ""
    assert cat.by_id("vllm-upstream").flashinfer == ">=0.6.11"


_GOOD = """
schema_version = 1
[[runtime]]
id = "x"
title = "t"
preference = 1
image = "{image}"
digest = "{digest}"
command = {command}
source = "s"
effect = "e"
confidence = "c"
"""


@pytest.mark.parametrize(
    ("image", "digest", "command", "error"),
    [
        ("UPPER/case", "", "[]", "not a valid image reference"),
        ("ok/image:tag;rm -rf /", "", "[]", "not a valid image reference"),
        ("ok/image", "sha256:123", "[]", "not a sha256 digest"),
        ("ok/image", "", '["--x={tp}"]', "placeholders are whole arguments"),
        ("ok/image", "", '["{nope}"]', "placeholders are whole arguments"),
    ],
)
def test_catalogue_rejects_bad_values(image: str, digest: str, command: str, error: str) -> None:
    text = _GOOD.format(image=image, digest=digest, command=command)
    with pytest.raises(CatalogueError, match=error):
        parse_catalogue(text, source="mine.toml")


def test_catalogue_unknown_field_is_an_error() -> None:
    text = _GOOD.format(image="a/b", digest="", command="[]") + 'colour = "red"\n'
    with pytest.raises(CatalogueError, match=r"mine\.toml"):
        parse_catalogue(text, source="mine.toml")


@pytest.mark.parametrize(
    "ref",
    [
        "busybox",
        "docker.io/vllm/vllm-openai:v0.11.0",
        "localhost:5000/a/b_c:1",
        "a/b@sha256:" + "0" * 64,
    ],
)
def test_valid_image_references(ref: str) -> None:
    assert validate.image_reference(ref) == ref


@pytest.mark.parametrize("name", ["-x", "a", "a b", "a/b", "x" * 101, "name;rm"])
def test_invalid_container_names(name: str) -> None:
    with pytest.raises(validate.ValidationError):
        validate.container_name(name)


@pytest.mark.parametrize("path", ["relative/dir", "/a:b", "/a,b", "/a/../b", "/a$HOME"])
def test_invalid_model_paths(path: str) -> None:
    with pytest.raises(validate.ValidationError):
        validate.host_path(path)


# --------------------------------------------------------------------------- CLI


def test_cli_markdown_from_facts(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["recommend", "--facts", str(SM120)]) == 0
    out = capsys.readouterr().out
    assert "Upgrade the NVIDIA driver" in out
    assert "`driver.version`" in out


def test_cli_shell_needs_model_dir(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["recommend", "--facts", str(SM120), "--format", "shell"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--model-dir" in err


def test_cli_compose_for_a_gpu_less_host_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = _main(
        [
            "recommend",
            "--facts",
            str(FACTS_FIXTURES / "no-gpu.json"),
            "--format",
            "compose",
            "--model-dir",
            str(tmp_path),
        ]
    )
    assert code == 2
    assert "no GPU" in capsys.readouterr().err


def test_cli_bad_catalogue_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cat.toml"
    bad.write_text("schema_version = 1\n[[runtime]]\nid = 3\n")
    assert _main(["recommend", "--facts", str(SM120), "--catalogue", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("blackwell-doctor: error:")
    assert str(bad) in err
    assert err.count("\n") == 1


def test_cli_unknown_runtime_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["recommend", "--facts", str(SM120), "--runtime", "nope"]) == 2
    assert "no runtime 'nope'" in capsys.readouterr().err


def test_cli_env_secret_from_environment_not_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    args = ["recommend", "--facts", str(SM120), "--model-dir", str(tmp_path), "-e", "HF_TOKEN"]
    for fmt in ("markdown", "json", "shell", "compose"):
        assert _main([*args, "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert SECRET not in out
        assert "HF_TOKEN" in out


def test_cli_invalid_bind_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _main(
        ["recommend", "--facts", str(SM120), "--model-dir", str(tmp_path), "--bind", "localhost"]
    )
    assert code == 2
    assert "--bind must be an IP address" in capsys.readouterr().err


def test_recommend_for_another_node_takes_that_nodes_model_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from blackwell_doctor.cli import main
    from tests.conftest import FACTS_FIXTURES

    facts = str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json")
    # the directory exists on that node, not here: the run command still uses it, read-only
    assert main(
        ["recommend", "--facts", facts, "--model-dir", "/srv/models/qwen35", "-f", "shell"]
    ) in (0, 1)
    out = capsys.readouterr().out
    assert "source=/srv/models/qwen35,target=/model,readonly" in out
    assert main(["recommend", "--facts", facts, "--model-dir", "models/qwen35"]) == 2
    assert "absolute path on that host" in capsys.readouterr().err
