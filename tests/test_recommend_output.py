"""recommend: actions, formats, catalogue validation and the CLI contract."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor import cli
from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.recommend.launch import docker_run_argv, model_name
from blackwell_doctor.recommend.plan import LaunchOptions, build_recommendation
from blackwell_doctor.render.recommend import RecommendFormat, render_recommendation
from blackwell_doctor.ruledata import validate
from blackwell_doctor.ruledata.checkdata import CatalogueError
from blackwell_doctor.ruledata.runtimes import load_catalogue, parse_catalogue
from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import FACTS_FIXTURES, optional

RTXPRO = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"
SM120 = FACTS_FIXTURES / "sm120-driver580.json"
SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"


# Every command is registered when blackwell_doctor.cli is imported.
_main = cli.main


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
        in render_recommendation(rec, RecommendFormat.MARKDOWN, spec).lower()
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
    doc = json.loads(render_recommendation(rec, RecommendFormat.JSON, spec))
    assert doc["schema_version"] == 1
    assert doc["actions"][0]["why"] == ["pci.iommu"]
    assert doc["launch"]["tensor_parallel_size"] == 4
    assert doc["launch"]["docker_run"][:2] == ["docker", "run"]


def test_shell_exports_then_docker_run() -> None:
    rec, spec = _build(RTXPRO, "/srv/models/m", bind="0.0.0.0", port=9000)
    assert spec is not None
    text = render_recommendation(rec, RecommendFormat.SHELL, spec)
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
    # A dev dependency: the compose file must parse with a real YAML parser.
    loaded: object = optional("yaml").safe_load(text)
    return loaded


def test_compose_parses_as_yaml_with_escaped_dollars() -> None:
    rec, spec = _build(
        RTXPRO, "/srv/models/m", extra_env=(("GREETING", 'a$b "q" #x'), ("HF_TOKEN", SECRET))
    )
    assert spec is not None
    doc = _yaml_load(render_recommendation(rec, RecommendFormat.COMPOSE, spec))
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


THREADRIPPER = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"


def _shell_without_model_dir(capsys: pytest.CaptureFixture[str]) -> str:
    assert _main(["recommend", "--facts", str(THREADRIPPER), "--format", "shell"]) == 0
    return capsys.readouterr().out


def test_shell_without_model_dir_lists_host_actions_in_order_as_comments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The host actions (iommu=pt, ACS) are in the script as comments, in the plan's order,
    and nothing of them runs: every line before `set -eu` is a comment."""
    script = _shell_without_model_dir(capsys)
    head, _, _ = script.partition("\nset -eu\n")
    assert all(line.startswith("#") for line in head.splitlines())
    rec, _ = _build(THREADRIPPER, None)
    host = [a for a in rec.actions if a.id != "runtime"]
    assert [a.why for a in host] == [["pci.iommu"], ["pci.acs"]]
    at = [head.index(f"# {n}. {a.title}") for n, a in enumerate(host, 1)]
    assert at == sorted(at)
    for a in host:
        for command in a.commands:
            assert f"#      {command}" in head


def test_shell_without_model_dir_runs_only_with_model_dir_set(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without --model-dir the script carries a MODEL_DIR placeholder: run by sh, it stops
    before docker when MODEL_DIR is unset, and with it set, docker gets the directory
    (read-only) and its base name as the served model (a stand-in docker records argv)."""
    import subprocess

    script = tmp_path / "launch.sh"
    script.write_text(_shell_without_model_dir(capsys), encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv_file = tmp_path / "argv"
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_file}\n', encoding="utf-8")
    docker.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    unset = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert unset.returncode != 0
    assert "MODEL_DIR" in unset.stderr
    assert not argv_file.exists()
    model = tmp_path / "models" / "qwen3 moe"
    model.mkdir(parents=True)
    ok = subprocess.run(
        ["sh", str(script)], env={**env, "MODEL_DIR": str(model)}, capture_output=True, timeout=30
    )
    assert ok.returncode == 0, ok.stderr
    argv = argv_file.read_text(encoding="utf-8").splitlines()
    assert f"type=bind,source={model},target=/model,readonly" in argv
    assert argv[argv.index("--served-model-name") + 1] == "qwen3 moe"


def test_compose_without_model_dir_asks_for_model_dir(
    capsys: pytest.CaptureFixture[str],
) -> None:
    yaml = optional("yaml")
    assert _main(["recommend", "--facts", str(THREADRIPPER), "--format", "compose"]) == 0
    out = capsys.readouterr().out
    service = yaml.safe_load(out)["services"]["vllm"]
    bind = next(v for v in service["volumes"] if v["type"] == "bind")
    assert bind["source"].startswith("${MODEL_DIR:?")
    assert bind["read_only"] is True
    assert service["command"][service["command"].index("--served-model-name") + 1].startswith(
        "${MODEL_NAME:?"
    )
    assert "# Host action 1, before this (root; not done by compose): Put the IOMMU" in out


def test_json_carries_the_host_actions_without_model_dir(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _main(["recommend", "--facts", str(THREADRIPPER), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    actions = {a["id"]: a for a in doc["actions"]}
    assert {"iommu", "acs", "runtime"} <= set(actions)
    assert any("iommu=pt" in c for c in actions["iommu"]["commands"])
    assert doc["launch"]["docker_run"] is None  # no placeholder leaks into JSON


def test_apply_flow_refuses_the_model_dir_placeholder() -> None:
    """Only recommend's shell and compose use the MODEL_DIR placeholder: the apply flow
    turns a spec built without a model directory into a usage error, never a container."""
    import io

    from blackwell_doctor.app.apply import launch_spec
    from blackwell_doctor.app.obtain import FactsRequest
    from blackwell_doctor.facts.errors import UserError

    with pytest.raises(UserError, match="--model-dir"):
        launch_spec(
            FactsRequest(facts_file=THREADRIPPER),
            LaunchOptions(model_dir=None),
            catalogue=None,
            facts_from_another_host=True,
            environ={},
            stdin=io.BytesIO(),
        )


def test_a_model_directory_name_with_a_trailing_newline_is_served_as_model() -> None:
    """Issue 32: the served-model-name check ("$" matches before a final newline) let a
    directory's name end in a newline onto the command line."""
    assert model_name("/srv/models/qwen3") == "qwen3"
    assert model_name("/srv/models/qwen3\n") == "model"


@pytest.mark.parametrize(
    ("check", "value"),
    [
        (validate.image_reference, "docker.io/vllm/vllm-openai:latest"),
        (validate.digest, "sha256:" + "0" * 64),
        (validate.container_name, "vllm"),
        (validate.volume_name, "blackwell-doctor-jit-vllm"),
        (validate.env_name, "HF_HOME"),
        (validate.shm_size, "16g"),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_every_validator_refuses_a_trailing_newline(check: Any, value: str) -> None:
    """Issue 32: each pattern ended in "$", which matches before a final newline."""
    assert check(value) == value
    with pytest.raises(validate.ValidationError):
        check(value + "\n")
