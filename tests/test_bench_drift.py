"""Numerical drift of the greedy prompts (issue 21): their log-probabilities asked for,
kept, and compared by ``bench --compare`` (rules/drift.py, checks/drift.toml). The real
vLLM's figures are in tests/test_bench_vllm.py (one server against itself and against the
same model in float32)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.report.bench import TokenLogprob, TopLogprob
from blackwell_doctor.ruledata.resources import schema_text
from blackwell_doctor.rules import drift
from tests.conftest import skip_without

try:
    import jsonschema
    from aiohttp import web

    from blackwell_doctor.collect.bench import client
    from tests import hostile_http as h
except ModuleNotFoundError as exc:
    skip_without(exc)

WORDS = [f"w{i} " for i in range(16)]


def step(token: str, lp: float, *others: tuple[str, float]) -> TokenLogprob:
    top = sorted([(token, lp), *others], key=lambda x: -x[1])
    return TokenLogprob(
        token=token, logprob=lp, top=[TopLogprob(token=t, logprob=v) for t, v in top]
    )


def answer(shift: float = 0.0, flip_at: int | None = None, far: bool = False) -> list[TokenLogprob]:
    """Four tokens, each the best of three candidates; ``shift`` moves every chosen
    log-probability; at ``flip_at`` the runner-up (or, ``far``, an unlisted token) wins."""
    out = []
    for i in range(4):
        chosen, second = f"t{i}", f"u{i}"
        if flip_at == i:
            chosen, second = ("zz", "t{i}") if far else (second, chosen)
        out.append(step(chosen, -0.5 + shift, (second, -1.0), (f"v{i}", -3.0)))
    return out


def test_one_answer_against_itself_is_identical() -> None:
    d = drift.prompt_drift("p", answer(), answer())
    assert d.verdict == drift.IDENTICAL
    assert d.first_divergent_token is None
    assert d.tokens == 4
    assert d.mean_abs_logprob_diff == d.max_abs_logprob_diff == 0.0
    assert d.topk_kl_mean == d.topk_kl_max == 0.0


def test_shifted_log_probabilities_are_measured_within_tolerance() -> None:
    d = drift.prompt_drift("p", answer(), answer(shift=-0.01))
    assert d.verdict == drift.WITHIN
    assert d.first_divergent_token is None
    assert d.mean_abs_logprob_diff == pytest.approx(0.01)
    assert d.max_abs_logprob_diff == pytest.approx(0.01)
    assert d.topk_kl_mean is not None
    assert d.topk_kl_mean > 0


def test_a_near_tie_broken_the_other_way_is_within_tolerance() -> None:
    # vLLM's check_logprobs_close: each run's token among the other's top-k.
    d = drift.prompt_drift("p", answer(), answer(flip_at=2))
    assert d.verdict == drift.WITHIN
    assert d.first_divergent_token == 2
    assert (d.token_before, d.token_after) == ("t2", "u2")
    # The shared prefix (tokens 0 and 1) agrees; the divergent step's KL is counted.
    assert d.max_abs_logprob_diff == 0.0
    assert d.topk_kl_max is not None
    assert d.topk_kl_max > 0


def test_a_token_outside_the_other_top_k_is_beyond_tolerance() -> None:
    d = drift.prompt_drift("p", answer(), answer(flip_at=1, far=True))
    assert d.verdict == drift.BEYOND
    assert d.first_divergent_token == 1
    assert "'zz' is not in the before run's top 5" in d.why
    assert "'t1' is not in the after run's top 5" in d.why


def test_the_top_k_kl_estimate() -> None:
    p = step("a", math.log(0.6), ("b", math.log(0.3)))
    assert drift.topk_kl(p, p) == 0.0
    q = step("a", math.log(0.3), ("b", math.log(0.6)))
    # Both sum to 0.9: the rest buckets (0.1 each) add nothing.
    expected = 0.6 * math.log(0.6 / 0.3) + 0.3 * math.log(0.3 / 0.6)
    assert drift.topk_kl(p, q) == pytest.approx(expected)
    # A token missing from q's top-k is given q's smallest top-k probability (a: 0.4),
    # and each rest bucket what is left (p: 0.1, q: 1 - 0.4 - 0.4).
    r = step("c", math.log(0.5), ("b", math.log(0.4)))
    expected = 0.6 * math.log(0.6 / 0.4) + 0.3 * math.log(0.3 / 0.4) + 0.1 * math.log(0.1 / 0.2)
    assert drift.topk_kl(p, r) == pytest.approx(expected)
    assert drift.topk_kl(TokenLogprob(token="a"), p) is None
    assert drift.worst([drift.IDENTICAL, drift.BEYOND, drift.WITHIN]) == drift.BEYOND
    assert drift.worst([]) == drift.NOT_MEASURED


def test_the_greedy_request_asks_for_logprobs() -> None:
    body = json.loads(
        client.request_body(
            model="m", prompt="x", max_tokens=4, ignore_eos=True, greedy=True, top_logprobs=5
        )
    )
    assert body["logprobs"] is True
    assert body["top_logprobs"] == 5
    assert body["temperature"] == 0.0
    plain = json.loads(client.request_body(model="m", prompt="x", max_tokens=4, ignore_eos=True))
    assert "logprobs" not in plain


def _logprob_stream(
    shift: float, asked: list[dict[str, Any]], refuse: bool = False, words: list[str] = WORDS
) -> h.Handler:
    """A server that answers WORDS, with each token's log-probability and three candidates
    when asked (OpenAI's chunk shape, as vLLM sends it); ``refuse``: HTTP 400 when asked."""

    async def handler(request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        asked.append(body)
        if refuse and body.get("logprobs"):
            return web.json_response({"error": "logprobs are not supported"}, status=400)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, word in enumerate(words):
            choice: dict[str, Any] = {"index": 0, "delta": {"content": word}}
            if body.get("logprobs"):
                top = [(word, -0.5 + shift), ("x", -1.0), ("y", -2.0)]
                choice["logprobs"] = {
                    "content": [
                        {
                            "token": word,
                            "logprob": -0.5 + shift * (i % 2),
                            "bytes": list(word.encode()),
                            "top_logprobs": [{"token": t, "logprob": v} for t, v in top],
                        }
                    ]
                }
            await response.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
        await response.write(b"data: " + h.usage(len(WORDS), 5) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    return handler


SHAPES = "[shape.one]\ninput_tokens = 8\noutput_tokens = 16\nrequests = 2\nwarmup = 0\n"


def _bench(url: str, tmp_path: Path, name: str) -> dict[str, Any]:
    shapes = tmp_path / "s.toml"
    shapes.write_text(SHAPES)
    out = tmp_path / f"{name}.json"
    args = ["bench", "--shapes", str(shapes), "--shape", "one", "--url", url, "-o", str(out)]
    assert main([*args, "--request-timeout", "20", "-f", "json"]) == 0
    doc = json.loads(out.read_text())
    jsonschema.Draft202012Validator(json.loads(schema_text("bench.schema.json"))).validate(doc)
    assert isinstance(doc, dict)
    return doc


def test_compare_reports_the_drift_of_each_greedy_prompt(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    asked: list[dict[str, Any]] = []
    for name, shift in (("a", 0.0), ("b", 0.0), ("c", -0.02)):
        with h.serving({("POST", "/v1/chat/completions"): _logprob_stream(shift, asked)}) as url:
            doc = _bench(url, tmp_path, name)
        for e in doc["shapes"][0]["equivalence"]:
            assert len(e["logprobs"]) == 16
            assert e["logprobs"][0]["top"][0] == {"token": "w0 ", "logprob": -0.5 + shift}
    greedy = [b for b in asked if b.get("temperature") == 0.0]
    assert greedy
    assert all(b["logprobs"] is True and b["top_logprobs"] == 5 for b in greedy)
    # Only the greedy prompts ask: the measured requests are timed as vllm bench serve's.
    assert not any("logprobs" in b for b in asked if b.get("temperature") != 0.0)
    capsys.readouterr()
    a, b, c = (str(tmp_path / f"{n}.json") for n in "abc")
    assert main(["bench", "--compare", a, b, "-o", str(tmp_path / "ab.json")]) == 0
    same = json.loads((tmp_path / "ab.json").read_text())
    assert same["scorecard"]["numerics"] == "identical"
    capsys.readouterr()
    assert main(["bench", "--compare", a, c, "-o", str(tmp_path / "ac.json")]) == 0
    text = capsys.readouterr().out
    doc = json.loads((tmp_path / "ac.json").read_text())
    jsonschema.Draft202012Validator(json.loads(schema_text("bench-compare.schema.json"))).validate(
        doc
    )
    (eq,) = doc["equivalence"]
    assert eq["numerics"] == "within tolerance"
    assert doc["scorecard"]["numerics"] == "within tolerance"
    for d in eq["logprobs"]:
        assert d["first_divergent_token"] is None
        assert d["mean_abs_logprob_diff"] == pytest.approx(0.01)
        assert d["max_abs_logprob_diff"] == pytest.approx(0.02)
    assert "greedy log-probabilities (nats; tolerance: checks/drift.toml):" in text
    line = next(row for row in text.splitlines() if row.startswith("one") and "count" in row)
    assert line.split()[:6] == ["one", "count", "16", "-", "0.01", "0.02"]
    assert line.endswith("within tolerance")
    assert main(["bench", "--compare", a, c, "-f", "markdown"]) == 0
    assert "| one | count | 16 | - | 0.01 | 0.02 |" in capsys.readouterr().out


def test_a_server_that_refuses_logprobs_is_compared_by_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    asked: list[dict[str, Any]] = []
    handler = _logprob_stream(0.0, asked, refuse=True)
    with h.serving({("POST", "/v1/chat/completions"): handler}) as url:
        doc = _bench(url, tmp_path, "a")
    shape = doc["shapes"][0]
    assert all(e["ok"] and e["logprobs"] is None for e in shape["equivalence"])
    assert any("refused logprobs" in n for n in shape["notes"])
    # Asked once with logprobs, then without for every prompt.
    greedy = [b for b in asked if b.get("temperature") == 0.0]
    assert [bool(b.get("logprobs")) for b in greedy] == [True, False, False, False]
    capsys.readouterr()
    a = str(tmp_path / "a.json")
    assert main(["bench", "--compare", a, a, "-o", str(tmp_path / "aa.json")]) == 0
    doc = json.loads((tmp_path / "aa.json").read_text())
    assert doc["scorecard"]["numerics"] == "not measured"
    assert doc["equivalence"][0]["logprobs"] == []


def test_a_token_the_other_run_never_considered_fails_the_gate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    other = [*WORDS[:3], "q3 ", *WORDS[4:]]
    for name, words in (("a", WORDS), ("b", other)):
        handler = _logprob_stream(0.0, [], words=words)
        with h.serving({("POST", "/v1/chat/completions"): handler}) as url:
            _bench(url, tmp_path, name)
    capsys.readouterr()
    a, b = (str(tmp_path / f"{n}.json") for n in "ab")
    out = tmp_path / "ab.json"
    code = main(["bench", "--compare", a, b, "--fail-on-regression", "10", "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 1
    doc = json.loads(out.read_text())
    assert doc["scorecard"]["numerics"] == "beyond tolerance"
    d = doc["equivalence"][0]["logprobs"][0]
    assert (d["first_divergent_token"], d["token_before"], d["token_after"]) == (3, "w3 ", "q3 ")
    assert d["max_abs_logprob_diff"] == 0.0  # the shared prefix agrees
    assert (
        "greedy log-probabilities drifted beyond tolerance (checks/drift.toml)"
        in (doc["regressions"])
    )
    assert "numerics one count: token 3 differs: 'w3 ' is not in the after run's top 5" in text


def test_an_odd_logprobs_field_fails_no_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word in WORDS:
            choice = {"index": 0, "delta": {"content": word}, "logprobs": "odd"}
            await response.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
        await response.write(b"data: " + h.usage(len(WORDS), 5) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    with h.serving({("POST", "/v1/chat/completions"): handler}) as url:
        doc = _bench(url, tmp_path, "a")
    capsys.readouterr()
    shape = doc["shapes"][0]
    assert shape["completed"] == 2
    assert all(e["ok"] and e["logprobs"] is None for e in shape["equivalence"])
