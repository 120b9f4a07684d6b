"""Issue 34, items 5 and 6: the weight index without its shards, and models as users hold
them: ``model ORG/NAME[@REVISION]`` from the local Hugging Face cache (built here by the
unmodified ``huggingface_hub`` downloading from a local Hub) and with ``--hub`` from that Hub
over HTTP range requests (tests/hubserver.py: a real server on 127.0.0.1, every request it
sees counted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FACTS_FIXTURES, skip_without
from tests.hubserver import HubServer, Repo, serve
from tests.modeldirs import DTYPES, make_model, write_safetensors

try:
    from huggingface_hub import hf_hub_download, snapshot_download
except ModuleNotFoundError as exc:
    skip_without(exc)

from blackwell_doctor.collect.model.hfcache import parse_repo_spec, resolve_cached
from blackwell_doctor.collect.model.hub import FIRST_RANGE, read_hub_model
from blackwell_doctor.collect.model.scan import read_model_dir

REPO = Path(__file__).resolve().parents[1]
TR = str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json")
TOKEN = "hf_TESTtokenNEVERprinted0123456789"
INDEX = "model.safetensors.index.json"


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The installed command in its own process: huggingface_hub reads HF_* as it starts."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    return subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env={**base, "PYTHONPATH": str(REPO / "src"), **env},
    )


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return make_model(tmp_path / "src", moe=True, fmt="ct-nvfp4", shards=3)


@pytest.fixture
def hub(checkpoint: Path) -> Iterator[HubServer]:
    with serve(HubServer({"org/moe": Repo(_files(checkpoint))})) as server:
        yield server


def _download(hub: HubServer, cache: Path, *names: str) -> None:
    """Files of org/moe into ``cache`` as `hf download` puts them (the library itself)."""
    for name in names:
        hf_hub_download("org/moe", name, cache_dir=cache, endpoint=hub.url, token=False)


# ------------------------------------------------------------------ the cache (6)


def test_org_name_from_the_cache_reads_nothing_over_the_network(
    hub: HubServer, checkpoint: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "hf" / "hub"
    _download(hub, cache, "config.json", INDEX)
    before = len(hub.requests())
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url}
    proc = _cli(["model", "org/moe", "--facts", TR, "-f", "json"], env)
    assert proc.returncode == 0, proc.stderr
    assert len(hub.requests()) == before  # offline by default: the cache alone
    doc = json.loads(proc.stdout)
    commit = hub.repos["org/moe"].commit
    assert doc["source"] == {
        "kind": "hf-cache",
        "repo": "org/moe",
        "revision": "main",
        "commit": commit,
        "location": str(cache / "models--org--moe" / "snapshots" / commit),
    }
    assert doc["path"] == "org/moe@main"
    assert doc["sizing"]["weights_bytes"] == read_model_dir(checkpoint).weights_bytes
    assert doc["problems"][0]["kind"] == "missing-shard"
    # A revision by commit, and the text form.
    proc = _cli(["model", f"org/moe@{commit}", "--facts", TR], env)
    assert proc.returncode == 0, proc.stderr
    assert f"read from the Hugging Face cache, snapshot {cache}" in proc.stdout
    assert f"org/moe revision {commit} = commit {commit}" in proc.stdout


def test_a_complete_snapshot_is_read_from_its_blobs_as_the_directory_is(
    hub: HubServer, checkpoint: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    folder = snapshot_download("org/moe", cache_dir=cache, endpoint=hub.url, token=False)
    spec = parse_repo_spec("org/moe")
    assert spec is not None
    snapshot = resolve_cached(spec, cache)
    # The folder the library itself resolves, offline, for the same repo.
    assert str(snapshot.folder) == snapshot_download(
        "org/moe", cache_dir=cache, local_files_only=True
    )
    assert str(snapshot.folder) == folder
    assert (snapshot.folder / "config.json").is_symlink()  # into ../../blobs
    from blackwell_doctor.collect.model.scan import DirectoryFiles, read_model

    cached = read_model(
        DirectoryFiles(snapshot.folder, confine=snapshot.repo_folder), label="org/moe"
    )
    direct = read_model_dir(checkpoint)
    assert cached.parameters == direct.parameters
    assert cached.weights_bytes == direct.weights_bytes
    assert cached.problems == []  # links into the repo's blobs are no symlink problem


def _cache_with_blobs(hub: HubServer, tmp_path: Path) -> Path:
    cache = tmp_path / "hf" / "hub"
    _download(hub, cache, "config.json", INDEX)
    return cache


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr


def test_a_hostile_cache_is_one_line_and_exit_2(hub: HubServer, tmp_path: Path) -> None:
    cache = _cache_with_blobs(hub, tmp_path)
    env = {"HF_HOME": str(tmp_path / "hf")}
    repo = cache / "models--org--moe"
    commit = hub.repos["org/moe"].commit
    snapshot = repo / "snapshots" / commit
    args = ["model", "org/moe", "--facts", TR]
    # A link out of the cache.
    (snapshot / "hf_quant_config.json").symlink_to("/etc/passwd")
    _one_line_exit_2(_cli(args, env), "hf_quant_config.json", "is a link to /etc/passwd")
    (snapshot / "hf_quant_config.json").unlink()
    # A 2 GB index (sparse: no disk spent), as a blob the snapshot links to.
    blob = repo / "blobs" / "huge"
    with blob.open("wb") as f:
        f.truncate(2 << 30)
    (snapshot / INDEX).unlink()
    (snapshot / INDEX).symlink_to(os.path.relpath(blob, snapshot))
    _one_line_exit_2(_cli(args, env), "is 2,147,483,648 bytes, above the")
    blob.unlink()
    # A ref naming a snapshot that is not there.
    (repo / "refs" / "main").write_text("f" * 40)
    _one_line_exit_2(_cli(args, env), "refs/main", f"names commit {'f' * 40} but snapshots/")
    # A ref that is no commit (a 1 MB file).
    (repo / "refs" / "main").write_bytes(b"a" * (1 << 20))
    _one_line_exit_2(_cli(args, env), "refs/main", "not a commit hash")
    # A revision or a repo that is not cached.
    _one_line_exit_2(_cli(["model", "org/moe@v2", "--facts", TR], env), "revision 'v2'")
    _one_line_exit_2(_cli(["model", "org/other", "--facts", TR], env), "not in the Hugging Face")


# ------------------------------------------------------------------ --hub (6)


def test_hub_reads_config_index_and_one_range_request_a_shard(
    hub: HubServer, checkpoint: Path, tmp_path: Path
) -> None:
    hub.token = TOKEN
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    # The library's own once-a-day GET /api/agent-harnesses (utils/_detect_agent.py, for its
    # user agent) is left out as its users leave it out: HF_HUB_DISABLE_TELEMETRY.
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    proc = _cli(["model", "org/moe", "--hub", "--facts", TR, "-f", "json"], env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    direct = read_model_dir(checkpoint)
    assert doc["parameters"]["source"] == "tensors"
    assert doc["parameters"]["total"] == direct.parameters.total  # type: ignore[union-attr]
    assert doc["weights_bytes"] == direct.weights_bytes
    assert doc["source"]["kind"] == "hub"
    assert doc["source"]["location"] == hub.url
    assert doc["source"]["commit"] == hub.repos["org/moe"].commit
    paths = [s.path.rsplit("/", 1)[-1] for s in hub.requests()]
    shards = sorted(n for n in hub.repos["org/moe"].files if n.endswith(".safetensors"))
    # One model-info request, config and index once each, one range request a shard.
    assert sorted(paths) == sorted(["main", "config.json", INDEX, *shards])
    for name in shards:
        (seen,) = hub.file_requests(name)
        assert seen.range is not None
        assert seen.range.startswith("bytes=0-")
    assert {s.authorization for s in hub.requests()} == {f"Bearer {TOKEN}"}
    assert TOKEN not in proc.stdout + proc.stderr


def _wide_checkpoint(root: Path, shards: int, per_shard: int, data_mb: int) -> dict[str, bytes]:
    """A dense checkpoint whose headers are ~``per_shard`` x 100 bytes and whose shards
    carry ``data_mb`` MB of tensor data each (zeros)."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": shards * per_shard,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "intermediate_size": 128,
                "vocab_size": 256,
                "max_position_embeddings": 4096,
                "torch_dtype": "bfloat16",
            }
        )
    )
    weight_map: dict[str, str] = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {
            f"model.layers.{s * per_shard + i}.input_layernorm.weight": ("BF16", [64])
            for i in range(per_shard)
        }
        tensors["padding"] = ("U8", [data_mb << 20])  # data, not a parameter
        write_safetensors(root / name, tensors, {"format": "pt"})
        weight_map |= dict.fromkeys(tensors, name)
    total = shards * (per_shard * 64 * DTYPES["BF16"][1] + (data_mb << 20))
    (root / INDEX).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    return _files(root)


def test_headers_past_the_first_range_take_two_requests_once(tmp_path: Path) -> None:
    files = _wide_checkpoint(tmp_path / "wide", shards=6, per_shard=1500, data_mb=1)
    with serve(HubServer({"org/wide": Repo(files)})) as hub:
        spec = parse_repo_spec("org/wide")
        assert spec is not None
        facts = read_hub_model(spec, endpoint=hub.url)
        assert facts.shards == 6
        assert facts.problems == []
        counts = [len(hub.file_requests(n)) for n in sorted(files) if n.endswith("tensors")]
        header = int.from_bytes(files["model-00002-of-00006.safetensors"][:8], "little")
        assert header > FIRST_RANGE  # each header is longer than the library's first range
        # The first shard: the library's 100,000 bytes, then the rest; the others: one
        # request each, sized by the first header.
        assert counts == [2, 1, 1, 1, 1, 1]
        for name in files:
            if name.endswith(".safetensors"):
                assert hub.body_bytes(name) < 2 * (header + 8) < len(files[name]) // 2


def test_a_server_that_ignores_range_sends_no_weights(tmp_path: Path) -> None:
    files = _wide_checkpoint(tmp_path / "big", shards=2, per_shard=10, data_mb=64)
    with serve(HubServer({"org/big": Repo(files)}, ranges=False)) as hub:
        spec = parse_repo_spec("org/big")
        assert spec is not None
        facts = read_hub_model(spec, endpoint=hub.url)
        assert facts.shards == 2
        assert facts.weights_bytes is not None
        for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
            # The response is left after the header: the 64 MB of data is not sent (what
            # the socket buffers held when the client closed, at most a few MB). The server
            # records it when its write fails, which may be after the client returned.
            (seen,) = hub.file_requests(name)
            assert 0 < seen.body_bytes < 16 << 20


def test_the_token_never_reaches_the_output(hub: HubServer, tmp_path: Path) -> None:
    hub.token = "hf_the_right_one"
    hub.echo_auth = True  # every refusal repeats the Authorization header it got
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    proc = _cli(["model", "org/moe", "--hub", "--facts", TR, "-f", "json"], env)
    _one_line_exit_2(proc, "org/moe: no such model repository on http://127.0.0.1")
    assert TOKEN not in proc.stdout + proc.stderr
    assert {s.authorization for s in hub.requests()} == {f"Bearer {TOKEN}"}  # it was sent


def test_a_shard_cut_short_on_the_hub_is_a_problem_and_the_token_is_in_no_fact(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # read by the library at each request
    del hub.repos["org/moe"].files["model-00002-of-00003.safetensors"]
    files = hub.repos["org/moe"].files
    hub.repos["org/moe"] = Repo({**files, "model-00002-of-00003.safetensors": b""})
    hub.echo_auth = True
    spec = parse_repo_spec("org/moe")
    assert spec is not None
    facts = read_hub_model(spec, endpoint=hub.url)
    (problem,) = [p for p in facts.problems if p.path == "model-00002-of-00003.safetensors"]
    assert problem.detail == "truncated: 0 bytes, shorter than the 8-byte length"
    assert TOKEN not in repr(facts)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("org/none", "org/none: no such model repository on http://127.0.0.1"),
        ("org/moe@v9", "org/moe: no revision 'v9' on http://127.0.0.1"),
        ("not a repo", "--hub reads ORG/NAME[@REVISION] from the Hub, not not a repo"),
    ],
)
def test_hub_errors_are_one_line_and_exit_2(
    hub: HubServer, tmp_path: Path, spec: str, needle: str
) -> None:
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url}
    _one_line_exit_2(_cli(["model", spec, "--hub", "--facts", TR], env), needle)


def test_check_model_dir_takes_the_same_forms(hub: HubServer, tmp_path: Path) -> None:
    _cache_with_blobs(hub, tmp_path)
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url}
    for extra in ([], ["--hub"]):
        proc = _cli(
            [
                "check",
                "--facts",
                TR,
                "--model-dir",
                "org/moe",
                *extra,
                "-f",
                "json",
                "--embed-facts",
            ],
            env,
        )
        assert proc.returncode in (0, 1), proc.stderr
        model = json.loads(proc.stdout)["facts"]["model"]
        assert model["source"]["kind"] == ("hub" if extra else "hf-cache")
        assert model["source"]["repo"] == "org/moe"


def test_model_dir_imports_no_hub_library(checkpoint: Path) -> None:
    from tests.test_import_cost import _imported

    assert "huggingface_hub" not in _imported(
        ["-m", "blackwell_doctor", "model", str(checkpoint), "--facts", TR, "-f", "json"]
    )
