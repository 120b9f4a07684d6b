"""Degenerate answers (issue 21): an empty answer, or one unit repeated (the ``!!!!`` of
FlashInfer #4841 under CUDA graphs), fail ``bench`` and the ``apply --verify`` gate; the
tiny random model CI serves is not called degenerate on its own loops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.report.bench import decode_run
from blackwell_doctor.ruledata.resources import schema_text
from blackwell_doctor.rules import degenerate, gate
from tests.conftest import skip_without

try:
    import jsonschema
    from aiohttp import web
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    from tests import hostile_http as h
except ModuleNotFoundError as exc:
    skip_without(exc)

FIXTURE = Path(__file__).parent / "fixtures" / "bench" / "tiny-moe-vllm-cpu.json"


def test_a_run_of_one_character_or_token_is_degenerate() -> None:
    why = degenerate.judge("!" * 64, "", tokens_asked=True)
    assert why is not None
    assert "'!' repeated 64 times" in why
    assert degenerate.judge("", "token " * 40, tokens_asked=True) is not None
    # A normal start, then the breakdown: still most of the answer.
    assert degenerate.judge("The answer is " + "!" * 100, "", tokens_asked=True) is not None


def test_an_empty_answer_is_degenerate_when_tokens_were_asked() -> None:
    assert degenerate.judge("", "", tokens_asked=True) == "empty answer (no text and no reasoning)"
    assert degenerate.judge("  \n", "", tokens_asked=True) is not None
    assert degenerate.judge("", "", tokens_asked=False) is None


def test_ordinary_text_and_short_loops_are_not_degenerate() -> None:
    assert degenerate.judge("Paris is the capital of France.", "", tokens_asked=True) is None
    assert degenerate.judge("!!!!", "", tokens_asked=True) is None  # below min_repeats
    assert degenerate.judge("x = 1\n" + " " * 200 + "y = 2", "", tokens_asked=True) is None


def test_the_tiny_random_model_of_ci_is_not_degenerate() -> None:
    """The real vLLM's tiny random MoE loops on its own ("manual" six times in a row) and
    answers in reasoning: none of its recorded answers is degenerate."""
    run = decode_run(FIXTURE.read_bytes(), source=str(FIXTURE))
    answers = [(e.text, e.reasoning) for s in run.shapes for e in s.equivalence]
    assert answers
    assert any("manualmanual" in r for _, r in answers)
    for text, reasoning in answers:
        assert degenerate.judge(text, reasoning, tokens_asked=True) is None
    assert all(degenerate.shape_findings(s) == [] for s in run.shapes)
    assert gate.errors_of(run) == []


def test_longest_repeat_finds_the_unit() -> None:
    assert degenerate.longest_repeat("xmanualmanualmanualy", 8) == ("manual", 3)
    assert degenerate.longest_repeat("!!!!!!", 8) == ("!", 6)
    assert degenerate.longest_repeat("", 8) == ("", 0)


def walked_repeat(text: str, max_unit: int) -> tuple[str, int]:
    """longest_repeat's definition, walked character by character (its first version)."""
    best_unit, best_repeats, best_cover = "", 0, 0
    n = len(text)
    for u in range(1, min(max_unit, n) + 1):
        start, j = 0, u
        while j <= n:
            if j < n and text[j] == text[j - u]:
                j += 1
                continue
            repeats = (j - start) // u
            if repeats >= 2 and repeats * u > best_cover:
                best_unit, best_repeats, best_cover = text[start : start + u], repeats, repeats * u
            start = max(j - u + 1, start + 1)
            j = start + u
    if not best_unit and text:
        return text[0], 1
    return best_unit, best_repeats


@settings(deadline=None)  # the shared CI machine is slow at times: no time is asserted
@given(
    st.lists(
        st.one_of(st.text(alphabet="ab é", max_size=6), st.just("tok "), st.just("!")),
        max_size=30,
    ).map("".join),
    st.integers(min_value=1, max_value=10),
)
def test_longest_repeat_is_the_walked_definition(text: str, max_unit: int) -> None:
    assert degenerate.longest_repeat(text, max_unit) == walked_repeat(text, max_unit)


def walked_judge(text: str) -> str | None:
    """judge's verdict with the walked definition and no quick test."""
    rules = degenerate.load_rules()
    joined = "".join(text.split())
    if not joined:
        return "empty"
    unit, repeats = walked_repeat(joined, rules.max_unit_chars)
    share = len(unit) * repeats / len(joined)
    return None if repeats < rules.min_repeats or share < rules.min_share else unit


@settings(deadline=None)
@given(
    st.lists(
        st.one_of(st.text(alphabet="ab é", max_size=4), st.just("tok "), st.just("!")),
        max_size=60,
    ).map("".join)
)
@example("!" * 20)
@example("tok " * 40)
@example("start " + "manual" * 20)
@example("manual" * 20 + "x" * 31)  # a cover just under 80%
@example("manual" * 20 + "x" * 30)  # exactly 80%
def test_the_quick_test_never_spares_a_degenerate_answer(text: str) -> None:
    verdict = degenerate.judge(text, "", tokens_asked=True)
    assert (verdict is None) == (walked_judge(text) is None)


def _bang_stream(request_count: list[int]) -> h.Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        request_count.append(1)
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(24):
            await response.write(b"data: " + h.chunk(content="!!") + b"\n\n")
        await response.write(b"data: " + h.usage(24, 5) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    return handler


def _validate(doc: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(json.loads(schema_text("bench.schema.json"))).validate(doc)


def test_bench_fails_on_a_server_that_answers_bangs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shapes = tmp_path / "s.toml"
    shapes.write_text(
        "[shape.one]\ninput_tokens = 8\noutput_tokens = 64\nrequests = 3\nwarmup = 0\n"
    )
    seen: list[int] = []
    out_path = tmp_path / "run.json"
    with h.serving({("POST", "/v1/chat/completions"): _bang_stream(seen)}) as url:
        args = ["bench", "--shapes", str(shapes), "--shape", "one", "--url", url]
        code = main([*args, "--request-timeout", "20", "-o", str(out_path), "-f", "json"])
    capsys.readouterr()
    assert code == 1
    doc = json.loads(out_path.read_text())
    _validate(doc)
    assert doc["exit_code"] == 1
    shape = doc["shapes"][0]
    assert all("'!' repeated 48 times" in s["degenerate"] for s in shape["samples"])
    assert shape["equivalence"]
    assert all(e["degenerate"] for e in shape["equivalence"])
    assert any(f.startswith("one: 3 of 3 answers degenerate") for f in doc["findings"])
    assert any("greedy answers degenerate" in f for f in doc["findings"])
    run = decode_run(out_path.read_bytes(), source="run.json")
    assert any("answers degenerate" in line for line in gate.errors_of(run))


def test_bench_text_shows_degenerate_requests(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shapes = tmp_path / "s.toml"
    shapes.write_text(
        "[shape.one]\ninput_tokens = 8\noutput_tokens = 64\nrequests = 2\nwarmup = 0\n"
    )
    with h.serving({("POST", "/v1/chat/completions"): _bang_stream([])}) as url:
        code = main(
            ["bench", "--shapes", str(shapes), "--shape", "one", "--url", url, "--no-equivalence"]
        )
    out = capsys.readouterr().out
    assert code == 1
    assert "finding: one: 2 of 2 answers degenerate" in out
    assert "degenerate: request 1: '!' repeated 48 times" in out
