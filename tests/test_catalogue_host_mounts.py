"""A catalogue runtime's `host_mounts`: host directories mounted READ-ONLY at the same path
(how the apply --verify tests run the CI's CPU vLLM venv inside the Docker engine)."""

from __future__ import annotations

import json

import pytest

from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.recommend.launch import Mount, build_launch, docker_run_argv
from blackwell_doctor.recommend.settings import derive
from blackwell_doctor.ruledata.checkdata import CatalogueError
from blackwell_doctor.ruledata.runtimes import parse_catalogue
from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import FACTS_FIXTURES

RUNTIME = """
schema_version = 1
[[runtime]]
id = "local"
title = "a runtime kept on the host"
preference = 1
image = "local:latest"
command = ["serve", "{model}"]
host_mounts = {mounts}
source = "tests"
effect = "none"
confidence = "test"
"""


def _parse(mounts: list[str]) -> object:
    return parse_catalogue(RUNTIME.replace("{mounts}", json.dumps(mounts)), source="c.toml")


def test_host_mounts_are_read_only_binds_at_the_same_path() -> None:
    [runtime] = _parse(["/usr", "/opt/venv/"]).runtime  # type: ignore[attr-defined]
    facts = decode_facts((FACTS_FIXTURES / "sm120-driver580.json").read_bytes())
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    spec = build_launch(runtime, derived, model_dir="/srv/m")
    assert Mount(type="bind", source="/usr", target="/usr", read_only=True) in spec.mounts
    assert Mount(type="bind", source="/opt/venv", target="/opt/venv", read_only=True) in spec.mounts
    argv = docker_run_argv(spec)
    assert "type=bind,source=/usr,target=/usr,readonly" in argv


@pytest.mark.parametrize(
    "path", ["/", "//", "/model", "/model/x", "/proc", "relative", "/a,b", "/a/../b"]
)
def test_a_host_mount_over_the_container_itself_or_a_misread_path_is_refused(path: str) -> None:
    with pytest.raises(CatalogueError, match="host_mounts"):
        _parse([path])
