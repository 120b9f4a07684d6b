"""`bench --trace` and `bench --multi-turn` against a real vLLM (PyPI's CPU build) serving the
tiny random Qwen3-MoE model (tests/test_bench_vllm.py says how CI starts it): the prompts
are the trace's lengths in the server's own count, the client's output tokens are the
server's generation counter, and the prefix cache finds the blocks the requests share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_bench_vllm import bench, load, validate

pytestmark = pytest.mark.vllm

# Blocks of 128 tokens (vLLM's CPU build caches prefixes in blocks of 128: its
# cache_config_info, tests/fixtures/bench/vllm-0.32.0-cpu/metrics.txt), so that a shared
# block is a cached block. Every input_length ends in its last block, as in Mooncake's.
ROWS: list[dict[str, Any]] = [
    {"timestamp": 0, "input_length": 500, "output_length": 8, "hash_ids": [1, 2, 3, 4]},
    {"timestamp": 200, "input_length": 400, "output_length": 8, "hash_ids": [1, 2, 5, 6]},
    {"timestamp": 400, "input_length": 300, "output_length": 8, "hash_ids": [1, 2, 7]},
    {"timestamp": 400, "input_length": 200, "output_length": 8, "hash_ids": [8, 9]},
    {"timestamp": 600, "input_length": 500, "output_length": 8, "hash_ids": [1, 2, 3, 4]},
    {"timestamp": 800, "input_length": 140, "output_length": 4, "hash_ids": [8, 9]},
]


def test_a_replay_asks_the_trace_lengths_and_the_cache_finds_its_blocks(
    vllm_url: str, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "replay.json"
    args = ["--url", vllm_url, "--trace", str(trace), "--trace-block-tokens", "128"]
    r = bench(*args, "--time-scale", "0.5", "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = load(out)
    validate(doc, "bench.schema.json")
    t: dict[str, Any] = doc["trace"]
    assert (t["requests"], t["sent"], t["size_source"]) == (6, 6, "tokenize")
    assert t["span_s"] == pytest.approx(0.4)
    assert t["lateness_ms"]["p99"] is not None
    (shape,) = doc["shapes"]
    assert shape["completed"] == 6
    # Each prompt is the trace's input length, in the server's count (usage.prompt_tokens).
    assert [s["prompt_tokens"] for s in shape["samples"]] == [r["input_length"] for r in ROWS]
    assert [s["output_tokens"] for s in shape["samples"]] == [r["output_length"] for r in ROWS]
    m = shape["metrics"]
    assert m["output_tokens"] == sum(r["output_length"] for r in ROWS)
    assert m["server_generation_tokens"] == m["output_tokens"]
    server = shape["server"]
    assert server["prefix_cache_queries"] >= sum(r["input_length"] for r in ROWS) - 500
    # The fifth request repeats the first's four blocks; the second and third share two.
    assert server["prefix_cache_hits"] >= 3 * 128
    assert server["prefix_cache_hit_rate"] > 0.1
    assert t["reusable_prompt_tokens"] > 0


def test_conversations_carry_their_history_into_the_prefix_cache(
    vllm_url: str, tmp_path: Path
) -> None:
    shapes = tmp_path / "shapes.toml"
    shapes.write_text(
        "[shape.chat]\ninput_tokens = 160\noutput_tokens = 8\nconcurrency = 2\nrequests = 6\n"
        "warmup = 0\n"
    )
    out = tmp_path / "chat.json"
    r = bench(
        "--url", vllm_url, "--shapes", str(shapes), "--shape", "chat", "--multi-turn", "3",
        "--no-equivalence", "-o", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = load(out)
    validate(doc, "bench.schema.json")
    (shape,) = doc["shapes"]
    assert shape["turns"] == 3
    assert sorted(s["turn"] for s in shape["samples"]) == [1, 1, 2, 2, 3, 3]
    m = shape["metrics"]
    assert m["server_generation_tokens"] == m["output_tokens"] == 6 * 8
    # A later turn's prompt holds the earlier turns: longer than the first's.
    by_turn = {s["turn"]: s["prompt_tokens"] for s in shape["samples"]}
    assert by_turn[1] < by_turn[2] < by_turn[3]
    # The conversation so far is found in the prefix cache (blocks of 128 tokens).
    assert shape["server"]["prefix_cache_hits"] >= 2 * 128
