"""The environment pin against the real vLLM (ci/vllm-cpu-server.sh; issue 21): what the
run document records is what the server itself answers, read independently here."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import skip_without

try:
    from tests.test_bench_vllm import bench, load, one_shape, shapes_file, validate
except ModuleNotFoundError as exc:
    skip_without(exc)

pytestmark = pytest.mark.vllm


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def test_a_run_pins_the_servers_version_config_hash_model_and_cache_config(
    vllm_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "run.json"
    proc = bench(*one_shape(vllm_url, shapes_file(tmp_path), "tiny-short", out))
    assert proc.returncode == 0, proc.stderr
    doc = load(out)
    validate(doc, "bench.schema.json")
    env = doc["environment"]
    assert env["server_version"] == json.loads(_get(f"{vllm_url}/version"))["version"]
    # vLLM's fingerprint: vllm-<version>-<8 hex of its config hash> (one CPU process).
    assert env["system_fingerprints"] == [f"vllm-{env['server_version']}-{env['config_hash']}"]
    assert re.fullmatch(r"[0-9a-f]{8}", env["config_hash"])
    model = json.loads(_get(f"{vllm_url}/v1/models"))["data"][0]
    assert env["model"]["id"] == model["id"]
    assert env["model"]["root"] == model["root"]
    assert env["model"]["max_model_len"] == model["max_model_len"]
    config = env["server_config"]
    metrics = _get(f"{vllm_url}/metrics")
    block = re.search(r'vllm:cache_config_info\{[^}]*\bblock_size="(\d+)"', metrics)
    assert block is not None
    assert config["vllm:cache_config_info.block_size"] == block.group(1)
    assert "vllm:cache_config_info.engine" not in config
    assert config["python_info.version"].startswith("3.")
    # A loopback server: the host half is this host's, and its launch arguments are read
    # from the process listening on the port (issue 40; ci/vllm-cpu-server.sh starts it as
    # this user). vLLM may retitle its process (setproctitle), so only the source is pinned
    # here, and the port where the command line still has it.
    assert env["host"]["source"] == "this host"
    args = env.get("server_args")
    assert args is not None, env["server_unavailable"]
    assert args["source"].startswith("process "), args
    assert args["argv"], args
    from blackwell_doctor.report.bench_env import launch_flags

    port = launch_flags(args["argv"])[1].get("--port")
    assert port in (None, vllm_url.rsplit(":", 1)[1]), args
    # Two runs of the unchanged server: nothing recorded differs.
    again = tmp_path / "again.json"
    proc = bench(*one_shape(vllm_url, shapes_file(tmp_path), "tiny-short", again))
    assert proc.returncode == 0, proc.stderr
    proc = bench("--compare", str(out), str(again), "-f", "json")
    compared = json.loads(proc.stdout)
    assert compared["environment"]["verdict"] == "same", compared["environment"]
