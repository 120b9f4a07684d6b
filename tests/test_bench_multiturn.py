"""`bench --multi-turn N`: conversations whose turns carry the history (each earlier user
message and the server's answer to it), a failed turn ending its conversation, and the
server's prefix-cache counters read from /metrics. Against tests/benchfake.py's server; the
real-vLLM conversation is in tests/test_bench_trace_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.cli import main
from tests.conftest import REPO, skip_without

try:
    from blackwell_doctor.app.multiturn import fit
    from blackwell_doctor.collect.bench.server_metrics import delta, parse
    from blackwell_doctor.ruledata.shapes import Shape
    from tests.benchfake import Fake, fake  # noqa: F401 (fake: a fixture)
except ModuleNotFoundError as exc:
    skip_without(exc)

SHAPE = "[shape.chat]\ninput_tokens = 30\noutput_tokens = 2\nconcurrency = 2\nwarmup = 0\n"


def conversation_bench(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, Any]]:
    shapes = tmp_path / "shapes.toml"
    shapes.write_text(SHAPE)
    argv = ["bench", "--url", fake.url, "--shapes", str(shapes), "--shape", "chat"]
    code = main([*argv, "--no-equivalence", "-f", "json", *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, json.loads(captured.out)


def test_each_turn_carries_the_earlier_turns_and_the_servers_answers(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = conversation_bench(fake, tmp_path, capsys, "--multi-turn", "3", "--requests", "7")
    assert code == 0
    (shape,) = doc["shapes"]
    assert shape["turns"] == 3
    assert shape["completed"] == 7
    # 7 requests: conversations of turns 1-3, 1-3 and 1.
    assert sorted(s["turn"] for s in shape["samples"]) == [1, 1, 1, 2, 2, 3, 3]
    by_length: dict[int, list[list[dict[str, str]]]] = {}
    for chat in fake.chats:
        by_length.setdefault(len(chat["messages"]), []).append(chat["messages"])
    assert sorted(by_length) == [1, 3, 5]  # turn k: 2k - 1 messages
    assert len(by_length[1]) == 3
    for third in by_length[5]:
        roles = [m["role"] for m in third]
        assert roles == ["user", "assistant", "user", "assistant", "user"]
        # The answers carried are the server's ("x" per token, 2 tokens), and the turns
        # before are those that were sent: the second turn is a prefix of the third.
        assert third[1]["content"] == third[3]["content"] == "xx"
        assert third[:3] in by_length[3]
        assert [third[0]] in by_length[1]
    assert any(n.startswith("TTFT p50 by turn: 1: ") for n in shape["notes"])


def test_a_failed_turn_ends_its_conversation(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.fail = lambda body: len(body["messages"]) == 3  # every second turn fails
    code, doc = conversation_bench(fake, tmp_path, capsys, "--multi-turn", "3", "--requests", "6")
    assert code == 1
    (shape,) = doc["shapes"]
    assert len(fake.chats) == 4  # two first turns, two failing second turns
    assert shape["errors"] == {"http_5xx": 2}
    assert "2 turns not sent: an earlier turn of their conversation failed" in shape["notes"]


def test_turns_are_capped_so_that_the_last_fits_the_context() -> None:
    shape = Shape(name="s", input_tokens=1000, output_tokens=100)
    capped, why = fit(shape, 4, 2048)
    # 4 prompts and 4 answers of 100 in 90% of 2048 tokens.
    assert capped.input_tokens == (int(2048 * 0.9) - 400) // 4
    assert why is not None
    assert "capped from 1000" in why
    assert fit(shape, 4, None) == (shape, None)
    assert fit(Shape(name="s", input_tokens=10, output_tokens=10), 4, 2048)[1] is None


def test_multi_turn_goes_with_shapes_only(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n')
    code = main(["bench", "--url", fake.url, "--trace", str(trace), "--multi-turn", "2"])
    assert code == 2
    assert "does not take --multi-turn" in capsys.readouterr().err
    assert fake.chats == []


def test_the_prefix_cache_hit_rate_is_the_servers_counters_over_the_run() -> None:
    # vLLM 0.32.0's own /metrics (the CPU build, tests/fixtures/bench), then the same with
    # 1,000 more prompt tokens queried of which 600 were found cached.
    text = (REPO / "tests/fixtures/bench/vllm-0.32.0-cpu/metrics.txt").read_text()
    before = parse(text, model="tiny-moe")
    assert before.counters["prefix_cache_queries"] == 11.0
    assert before.counters["prefix_cache_hits"] == 0.0
    later = text.replace(
        'vllm:prefix_cache_queries_total{engine="0",model_name="tiny-moe"} 11.0',
        'vllm:prefix_cache_queries_total{engine="0",model_name="tiny-moe"} 1011.0',
    ).replace(
        'vllm:prefix_cache_hits_total{engine="0",model_name="tiny-moe"} 0.0',
        'vllm:prefix_cache_hits_total{engine="0",model_name="tiny-moe"} 600.0',
    )
    side = delta(before, parse(later, model="tiny-moe"), [])
    assert (side.prefix_cache_queries, side.prefix_cache_hits) == (1000.0, 600.0)
    assert side.prefix_cache_hit_rate == pytest.approx(0.6)
    # Nothing queried: no rate (not 0%).
    assert delta(before, before, []).prefix_cache_hit_rate is None
    # A server without the counters (SGLang, or an older vLLM): null, not 0.
    bare = parse("# TYPE x counter\nx_total 1\n", model=None)
    assert delta(bare, bare, []).prefix_cache_queries is None
