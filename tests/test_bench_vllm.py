"""`bench` against a real vLLM (PyPI's CPU build) serving a tiny random Qwen3-MoE model.

.ci/run starts two servers (see tests/conftest.py): "main" with the qwen3 reasoning parser
and "slow", identical but with --max-num-seqs 1. Shapes are kept small so the whole file
runs in a few minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.ruledata.resources import schema_text
from tests.child import cli_child
from tests.conftest import skip_without

try:
    import jsonschema

    from blackwell_doctor.collect.bench.client import EARLY_CLOSE, UNREACHABLE
except ModuleNotFoundError as exc:
    skip_without(exc)

pytestmark = pytest.mark.vllm

# Ctrl-C to exit: bench/loop.py's 5 s grace, with room for a loaded 2-core machine.
SIGINT_BOUND_S = 30.0

# Small versions of the three shapes, plus a reasoning shape (see test_reasoning_split).
SMALL_SHAPES = """
[shape.tiny-short]
input_tokens = 64
output_tokens = 16
requests = 4
[shape.tiny-concurrent]
input_tokens = 64
output_tokens = 24
concurrency = 8
requests = 24
warmup = 2
"""


def bench(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_shape(url: str, shapes: Path, shape: str, out: Path, *more: str) -> list[str]:
    """`bench` arguments that measure one shape of a shapes file against ``url`` into ``out``."""
    return ["--url", url, "--shapes", str(shapes), "--shape", shape, "-o", str(out), *more]


def measured(once: str) -> Callable[[str], bool]:
    """A plain progress line of `bench` (one per tenth of a shape when piped) that shows
    ``once`` requests measured, none of them failed."""
    return lambda line: "measuring" in line and once in line and "failed" not in line


def load(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict)
    return doc


def validate(doc: dict[str, Any], schema: str) -> None:
    jsonschema.Draft202012Validator(json.loads(schema_text(schema))).validate(doc)


def shapes_file(tmp_path: Path, text: str = SMALL_SHAPES) -> Path:
    path = tmp_path / "shapes.toml"
    path.write_text(text)
    return path


def server_counter(url: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == name
        for s in f.samples
        if s.name == name + "_total"
    )


def test_every_builtin_shape_measures_what_the_server_counted(
    vllm_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "run.json"
    before = server_counter(vllm_url, "vllm:generation_tokens")
    r = bench("--url", vllm_url, "--requests", "6", "-o", str(out), "--format", "markdown")
    assert r.returncode == 0, r.stderr
    doc = load(out)
    validate(doc, "bench.schema.json")
    assert doc["server"]["model"] == "tiny-moe"  # discovered from /v1/models
    assert doc["server"]["max_model_len"] == 2048
    assert [s["name"] for s in doc["shapes"]] == ["short", "long", "concurrent"]
    total = 0
    for shape in doc["shapes"]:
        m = shape["metrics"]
        assert shape["completed"] == shape["requests"] == 6
        assert shape["errors"] == {}
        # ignore_eos: every request generates exactly max_tokens, counted by the server.
        assert m["output_tokens"] == 6 * shape["output_tokens_max"]
        assert m["token_source"] == "usage"
        # The client's count equals the server's own generation counter over the shape.
        assert m["server_generation_tokens"] == m["output_tokens"]
        assert m["reasoning_tokens"] + m["answer_tokens"] == m["output_tokens"]
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            s = m[key]
            assert 0 <= s["p50"] <= s["p90"] <= s["p95"] <= s["p99"], key
        assert m["ttft_ms"]["p50"] < m["e2e_ms"]["p50"]
        assert m["output_tokens_per_s"] > 0
        assert shape["input_size_source"] == "tokenize"
        assert len(shape["equivalence"]) == 3
        total += m["output_tokens"]
    short, long, concurrent = doc["shapes"]
    # Prompts are sized in the server's tokens (usage.prompt_tokens is the truth).
    assert abs(short["metrics"]["prompt_tokens_mean"] - 128) <= 128 * 0.1
    # The long shape asks 16k tokens; the server's max_model_len (2048) caps it.
    assert long["input_tokens"] < 2048 - 128
    assert any("capped" in n for n in long["notes"])
    assert long["metrics"]["prompt_tokens_mean"] > 1500
    assert concurrent["concurrency"] == 32
    # The markdown rendering on stdout carries the same figures.
    assert "### short: 6/6 requests ok" in r.stdout
    assert "| TTFT |" in r.stdout
    # Warm-up and equivalence requests generated tokens too, outside the measured window.
    assert server_counter(vllm_url, "vllm:generation_tokens") - before > total


def think_end_token(url: str) -> int:
    body = json.dumps({"model": "tiny-moe", "prompt": "</think>", "add_special_tokens": False})
    req = urllib.request.Request(
        f"{url}/tokenize", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        tokens = json.loads(r.read())["tokens"]
    assert len(tokens) == 1  # a special token of the recipe's tokenizer
    return int(tokens[0])


def test_reasoning_tokens_are_counted_apart_from_answer_tokens(
    vllm_url: str, tmp_path: Path
) -> None:
    # The qwen3 parser puts everything before </think> in `reasoning` deltas. A random
    # model rarely emits </think>, so a logit bias makes it likely within a few tokens
    # (sampled with a seed: reproducible), forcing a think block followed by an answer.
    token = think_end_token(vllm_url)
    shapes = shapes_file(
        tmp_path,
        f"""
[shape.think]
input_tokens = 32
output_tokens = 32
requests = 6
warmup = 0
[shape.think.extra_body]
temperature = 1.0
seed = 7  # reproducible sampling (one user, short prompts: no chunked prefill)
logit_bias = {{ "{token}" = 3.0 }}
""",
    )
    out = tmp_path / "think.json"
    r = bench(*one_shape(vllm_url, shapes, "think", out))
    # The bias that makes </think> likely makes it the greedy choice at every step: the
    # greedy answers (temperature 0) are "</think>" 31 times after the empty think block,
    # all of the answer. That is a degenerate answer, and the real detector says so on a
    # real server: a finding, exit 1 (the sampled answers, at temperature 1, are not).
    assert r.returncode == 1, r.stderr
    doc = load(out)
    assert doc["exit_code"] == 1
    assert doc["findings"] == [
        "think: 3 of 3 greedy answers degenerate (count: '</think>' repeated 31 times in a "
        "row (100% of the answer, whitespace removed))"
    ]
    assert all(e["degenerate"] for e in doc["shapes"][0]["equivalence"])
    assert not any(s.get("degenerate") for s in doc["shapes"][0]["samples"])
    assert "degenerate: greedy count: '</think>' repeated 31 times" in r.stdout
    m = doc["shapes"][0]["metrics"]
    assert m["reasoning_source"] == "usage"  # the server's completion_tokens_details
    assert m["reasoning_tokens"] > 0
    assert m["answer_tokens"] > 0
    assert m["reasoning_tokens"] + m["answer_tokens"] == m["output_tokens"] == 6 * 32
    assert m["server_generation_tokens"] == m["output_tokens"]
    for sample in doc["shapes"][0]["samples"]:
        assert 0 < sample["reasoning_tokens"] < sample["output_tokens"]
    # Answer tok/s never includes thinking.
    assert m["answer_tokens_per_s"] < m["output_tokens_per_s"]
    assert "reasoning" in r.stdout
    # The greedy equivalence prompts ran with the shape's body (its bias included).
    for e in doc["shapes"][0]["equivalence"]:
        assert e["ok"]
        assert e["output_tokens"] == 32
        assert e["text"] or e["reasoning"]


def split_interleaved(run: Path, even: Path, odd: Path) -> None:
    """Two run documents from one: the shape's even-numbered and odd-numbered requests."""
    import msgspec

    from blackwell_doctor.render.bench import encode
    from blackwell_doctor.report.bench import decode_run
    from blackwell_doctor.report.bench_metrics import shape_metrics

    doc = decode_run(run.read_bytes(), source=str(run))
    for path, part in ((even, 0), (odd, 1)):
        shapes = []
        for shape in doc.shapes:
            samples = shape.samples[part::2]
            metrics = shape_metrics(
                samples,
                duration_s=shape.duration_s,
                reasoning_estimates=[None] * len(samples),
                server_generation_tokens=None,
            )
            shapes.append(msgspec.structs.replace(shape, samples=samples, metrics=metrics))
        path.write_text(encode(msgspec.structs.replace(doc, shapes=shapes)))


def test_one_configuration_twice_is_no_significant_change(vllm_url: str, tmp_path: Path) -> None:
    # Two samples of one configuration taken interleaved: a run's even and odd requests.
    # On this shared 2-core machine (load averages near 10 while other CI jobs run) two
    # runs one after the other differ by tens of percent: that is the machine, not the
    # server. Interleaving gives both sides the same conditions, so any verdict here would
    # be a false alarm of the statistics themselves.
    shapes = shapes_file(
        tmp_path,
        "[shape.pair]\ninput_tokens = 64\noutput_tokens = 32\nconcurrency = 2\nrequests = 48\n",
    )
    run = tmp_path / "run.json"
    r = bench(*one_shape(vllm_url, shapes, "pair", run, "--format", "json"))
    assert r.returncode == 0, r.stderr
    split_interleaved(run, tmp_path / "even.json", tmp_path / "odd.json")
    r = bench(
        "--compare",
        str(tmp_path / "even.json"),
        str(tmp_path / "odd.json"),
        "--format",
        "json",
        "--fail-on-regression",
        "5",
    )
    assert r.returncode == 0, r.stdout
    doc = json.loads(r.stdout)
    validate(doc, "bench-compare.schema.json")
    verdicts = {c["metric"]: c["verdict"] for c in doc["comparisons"]}
    # 24 requests a side: fewer than 10 samples above a p99, so no verdict is claimed.
    for metric in ("ttft_ms.p99", "e2e_ms.p99", "itl_ms.p99"):
        assert verdicts.pop(metric) == "too few samples"
    # A latency below the 0.1 ms resolution (tokens read in one burst from this CPU server)
    # is "not comparable" (rules/compare.py): on a side, in which case no change is shown, or
    # in more resamples than one tail of the interval holds, which needs requests whose
    # figure is below it (CI on 03757f9: TPOT p50 2.27 vs 2.37 ms, a side's median resampled
    # into its burst requests). Every other row is no change.
    sides = [load(tmp_path / f"{side}.json")["shapes"][0]["samples"] for side in ("even", "odd")]
    for c in doc["comparisons"]:
        if verdicts.get(c["metric"]) == "not comparable":
            if min(c["before"], c["after"]) < 0.1:
                assert c["change_pct"] is None, c
            else:
                assert any(_below_resolution(c["metric"], s) for s in sides), c
            verdicts.pop(c["metric"])
    assert set(verdicts.values()) == {"no significant change"}, doc["comparisons"]
    for c in doc["comparisons"]:
        if c["ci_low_pct"] is not None:
            assert c["ci_low_pct"] <= c["change_pct"] <= c["ci_high_pct"]
    assert doc["scorecard"]["overall"] == "no significant change"
    assert doc["per_comparison_confidence"] == pytest.approx(1 - 0.05 / 8)


def _below_resolution(metric: str, samples: list[dict[str, Any]]) -> bool:
    """Whether a request of a side measured ``metric``'s statistic (a request's TTFT, TPOT or
    E2E, or one of its token gaps) below the compare's 0.1 ms resolution: only then can a
    resample of that side's percentile fall below it."""
    ok = [s for s in samples if s["ok"]]
    if metric.startswith("itl_ms"):
        return any(g < 0.1 for s in ok for g in s.get("itl_ms", []))
    if metric.startswith("tpot_ms"):  # vLLM's TPOT (report/bench_metrics.py: tpot_s)
        tokens = [(s, s.get("output_tokens") or len(s.get("itl_ms", [])) + 1) for s in ok]
        return any((s["e2e_ms"] - s["ttft_ms"]) / (n - 1) < 0.1 for s, n in tokens if n > 1)
    key = metric.split(".")[0]
    return any(s[key] is not None and s[key] < 0.1 for s in ok)


def test_the_same_server_twice_gives_the_same_greedy_outputs(vllm_url: str, tmp_path: Path) -> None:
    shapes = shapes_file(tmp_path)
    runs = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in runs:
        r = bench(*one_shape(vllm_url, shapes, "tiny-short", path, "--format", "json"))
        assert r.returncode == 0, r.stderr
    r = bench("--compare", str(runs[0]), str(runs[1]), "--format", "json")
    doc = json.loads(r.stdout)
    (eq,) = doc["equivalence"]
    drift = eq.pop("logprobs")
    assert eq == {
        "shape": "tiny-short",
        "prompts": 3,
        "exact_match_rate": 1.0,
        "first_divergence": {},
        "verdict": "equivalent",
        "numerics": "identical",
    }
    assert [(d["prompt_id"], d["tokens"], d["verdict"]) for d in drift] == [
        ("count", 16, "identical"),
        ("explain", 16, "identical"),
        ("planets", 16, "identical"),
    ]
    assert doc["scorecard"]["equivalence"] == "equivalent"
    assert doc["scorecard"]["numerics"] == "identical"
    outputs = [load(p)["shapes"][0]["equivalence"] for p in runs]
    assert outputs[0] == outputs[1]
    assert all(e["ok"] and e["output_tokens"] == 16 for e in outputs[0])


def test_logprob_drift_is_zero_against_itself_and_not_against_float32(
    vllm_url: str, vllm_f32_url: str, tmp_path: Path
) -> None:
    # Issue 21: numerical drift, measured. The greedy prompts ask for each token's
    # log-probability and the top 5 of its step; one server twice gives the same numbers,
    # and the same model in float32 (the main server runs bfloat16) does not.
    shapes = shapes_file(
        tmp_path, "[shape.greedy]\ninput_tokens = 32\noutput_tokens = 48\nrequests = 2\n"
    )
    runs = {}
    for name, url in (("a", vllm_url), ("b", vllm_url), ("f32", vllm_f32_url)):
        runs[name] = tmp_path / f"{name}.json"
        r = bench(*one_shape(url, shapes, "greedy", runs[name]))
        assert r.returncode == 0, r.stderr
        for e in load(runs[name])["shapes"][0]["equivalence"]:
            assert e["ok"]
            assert len(e["logprobs"]) == e["output_tokens"] == 48
            assert all(len(t["top"]) >= 5 for t in e["logprobs"])

    def drift(before: Path, after: Path, name: str) -> tuple[dict[str, Any], str]:
        out = tmp_path / f"{name}.cmp.json"
        r = bench("--compare", str(before), str(after), "-o", str(out), "--format", "markdown")
        doc = load(out)
        validate(doc, "bench-compare.schema.json")
        assert r.returncode == doc["exit_code"] == 0, r.stdout
        (eq,) = doc["equivalence"]
        assert [d["prompt_id"] for d in eq["logprobs"]] == ["count", "explain", "planets"]
        return doc, r.stdout

    same, shown = drift(runs["a"], runs["b"], "same")
    assert same["scorecard"]["numerics"] == "identical"
    for d in same["equivalence"][0]["logprobs"]:
        assert d["verdict"] == "identical", d
        assert d["first_divergent_token"] is None
        assert d["mean_abs_logprob_diff"] == d["max_abs_logprob_diff"] == 0.0
        assert d["topk_kl_mean"] == d["topk_kl_max"] == 0.0
    assert "| greedy | count | 48 | - | 0 | 0 | 0 | 0 | identical |" in shown
    other, shown = drift(runs["a"], runs["f32"], "f32")
    rows = other["equivalence"][0]["logprobs"]
    for d in rows:
        figures = ("first_divergent_token", "mean_abs_logprob_diff", "max_abs_logprob_diff")
        print("bf16 -> float32:", d["prompt_id"], *(d[k] for k in figures), d["topk_kl_mean"])
    # Every prompt's shared prefix differs in its log-probabilities; a divergence, where
    # there is one, is a near-tie broken the other way (each token in the other's top 5).
    assert all(d["max_abs_logprob_diff"] > 0 for d in rows)
    assert all(d["verdict"] == "within tolerance" for d in rows), rows
    assert other["scorecard"]["numerics"] == "within tolerance"
    assert "greedy log-probabilities" in shown


def test_one_sequence_at_a_time_is_worse_under_concurrency(
    vllm_url: str, vllm_slow_url: str, tmp_path: Path
) -> None:
    # 16 users, 64 tokens each: one server batches them, the other (--max-num-seqs 1)
    # serves them one after the other, so its median user waits for ~8 answers first.
    # (8 users and 32 requests were too few beside two busy loops: both servers starved,
    # TTFT p50 +43% [-24%, +174%], "no significant change".)
    shapes = shapes_file(
        tmp_path,
        "[shape.tiny-concurrent]\ninput_tokens = 64\noutput_tokens = 64\nconcurrency = 16\n"
        "requests = 64\nwarmup = 2\n",
    )
    fast, slow = tmp_path / "fast.json", tmp_path / "slow.json"
    for url, path in ((vllm_url, fast), (vllm_slow_url, slow)):
        r = bench(*one_shape(url, shapes, "tiny-concurrent", path, "--format", "json"))
        assert r.returncode == 0, r.stderr
    r = bench(
        "--compare",
        str(fast),
        str(slow),
        "--fail-on-regression",
        "10",
        "-o",
        str(tmp_path / "cmp.json"),
    )
    assert r.returncode == 1, r.stdout  # the CI gate
    doc = load(tmp_path / "cmp.json")
    rows = {c["metric"]: c for c in doc["comparisons"]}
    # 8 users queued behind one sequence: waiting shows in TTFT and E2E, and throughput
    # drops; each interval excludes zero.
    for metric in ("ttft_ms.p50", "e2e_ms.p50"):
        assert rows[metric]["verdict"] == "worse"
        assert rows[metric]["ci_low_pct"] > 0
    assert rows["output_tokens_per_s"]["verdict"] == "worse"
    assert rows["output_tokens_per_s"]["ci_high_pct"] < 0
    # Same model, same greedy prompts: the outputs do not depend on batching here.
    assert doc["scorecard"]["equivalence"] == "equivalent"
    assert doc["scorecard"]["overall"] in ("worse", "mixed: not a win")
    assert any("ttft_ms.p50" in reg for reg in doc["regressions"])
    assert "regression:" in r.stdout


# The A/A shape: 16 users of 64 tokens, three runs a side (0 false alarms in 10 at load
# 10-16, issue 21).
REPEAT_SHAPE = (
    "[shape.concurrent]\ninput_tokens = 64\noutput_tokens = 64\nconcurrency = 16\n"
    "requests = 64\nwarmup = 2\n"
)
# The A/B shape (issue 32): 32 users asking for 128 tokens each, all at once. The default
# server batches them; --max-num-seqs 1 answers them one after the other, so its median user
# waits for ~16 whole answers. Measured on this 2-core VM beside a CI run (load 26-41), two
# of them with two busy loops too, three runs a side: TTFT p50 +3,082% and +3,141% (a
# 32-fold wait; default runs 242-1,506 ms, one-sequence runs 8,158-14,032 ms), E2E p50
# +235% and +311%, output tokens/s 6.3-6.5 times lower (1,117-1,920 against 195-265 tok/s;
# 11.4 times at load 30 without the loops). The noise floors the same runs measured: TTFT
# p50 108% (a ratio of 2.1), tokens/s 40-60%. A default run that the host starved five-fold
# (1,506 ms against 286 and 372) is still a fifth of the fastest one-sequence run: a
# resample that draws it every time cannot reach the other side. (The shape before it, 16
# users of 64 tokens, moved TTFT only 7-10 fold under such load, and one starved default run
# of five reached the other side's level: CI on 6aa425d, TTFT p50 2,477 against 2,446 ms.)
ONE_AT_A_TIME_SHAPE = (
    "[shape.queued]\ninput_tokens = 16\noutput_tokens = 128\nconcurrency = 32\n"
    "requests = 32\nwarmup = 2\n"
)


def test_repeated_runs_of_one_server_are_no_change_and_one_at_a_time_is_worse(
    vllm_url: str, vllm_slow_url: str, tmp_path: Path
) -> None:
    # Issue 21: one run a side, two runs of this unchanged server were "worse" in 18 of 30
    # A/A compares on this 2-core host (tokens/s, TTFT, and ITL p50, which the CPU build's
    # bursts make bimodal). Three runs a side, taking turns, with the two-stage bootstrap:
    # 0 of 10. Below, the A/A takes ~15 s and the A/B ~90-120 s at load 26-41.
    shapes = shapes_file(tmp_path, REPEAT_SHAPE)
    common = ["--shapes", str(shapes), "--shape", "concurrent", "--repeat", "3"]
    gate = ["--fail-on-regression", "10"]
    same = tmp_path / "aa.json"
    r = bench("--compare-urls", vllm_url, vllm_url, *common, *gate, "-o", str(same))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = load(same)
    validate(doc, "bench-compare.schema.json")
    assert doc["runs"] == {"before": 3, "after": 3}
    assert doc["noise_floor_source"] == "measured"
    # No "worse" (the gate's concern). A false "better" is possible: once in 8 tries here,
    # beside the whole fast suite, E2E p50 -59% [-82%, -12%] past a floor of 64%.
    assert not [c for c in doc["comparisons"] if c["verdict"] == "worse"], doc["comparisons"]
    assert doc["regressions"] == []
    for side in ("before", "after"):
        run = load(tmp_path / f"aa.{side}.json")
        validate(run, "bench.schema.json")
        assert len(run["repeats"]) == 2
        assert run["calibration"]["runs"] == 3
    # The same test run: the one-sequence server against the default, measured once (no
    # second try), three runs a side, is worse.
    queued = tmp_path / "queued.toml"
    queued.write_text(ONE_AT_A_TIME_SHAPE)
    slower = tmp_path / "ab.json"
    argv = ["--shapes", str(queued), "--shape", "queued", "--repeat", "3", *gate]
    r = bench("--compare-urls", vllm_url, vllm_slow_url, *argv, "-o", str(slower))
    doc = load(slower)
    rows = {c["metric"]: c for c in doc["comparisons"]}
    print("A/B:", *(f"{m} {c['change_pct']} {c['verdict']}" for m, c in rows.items()), sep="\n")
    assert r.returncode == 1, r.stdout + r.stderr
    assert doc["scorecard"]["overall"] in ("worse", "mixed: not a win")
    # The queue shows in the wait and the throughput, each interval clear of zero.
    assert rows["ttft_ms.p50"]["verdict"] == "worse", rows["ttft_ms.p50"]
    assert rows["ttft_ms.p50"]["ci_low_pct"] > 0.0
    assert rows["output_tokens_per_s"]["verdict"] == "worse", rows["output_tokens_per_s"]
    assert rows["output_tokens_per_s"]["ci_high_pct"] < 0.0


def test_a_wrong_model_name_is_a_named_4xx_error(vllm_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bad.json"
    shapes = shapes_file(tmp_path)
    r = bench(*one_shape(vllm_url, shapes, "tiny-short", out, "--model", "no-such-model"))
    assert r.returncode == 1
    shape = load(out)["shapes"][0]
    assert shape["errors"] == {"http_4xx": 4}
    assert shape["samples"][0]["detail"].startswith("HTTP 404")


def test_ctrl_c_writes_the_partial_result_and_exits_130(vllm_slow_url: str, tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    shapes = shapes_file(
        tmp_path,
        "[shape.slowish]\ninput_tokens = 64\noutput_tokens = 64\nrequests = 200\nwarmup = 0\n",
    )
    with cli_child("bench", *one_shape(vllm_slow_url, shapes, "slowish", out)) as child:
        child.wait_for_line(measured(" 20/200"), deadline_s=240)
        child.interrupt()
        code, _, err = child.finish(timeout_s=60)
    print(f"bench: exit {code} {child.exited_after_sigint_s:.2f} s after SIGINT")
    assert code == 130, err
    assert child.exited_after_sigint_s is not None
    assert child.exited_after_sigint_s < SIGINT_BOUND_S
    doc = load(out)
    assert doc["interrupted"] is True
    assert doc["complete"] is False
    assert doc["exit_code"] == 130
    shape = doc["shapes"][0]
    assert shape["complete"] is False
    assert 20 <= shape["completed"] < 200
    assert shape["metrics"]["output_tokens"] == 64 * shape["completed"]


def test_a_port_that_never_answers_is_stalled_not_a_hang(tmp_path: Path) -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # accepts (the kernel completes the handshake) and never answers
    port = listener.getsockname()[1]
    out = tmp_path / "stalled.json"
    started = time.monotonic()
    try:
        r = bench(
            "--url",
            f"http://127.0.0.1:{port}",
            "--model",
            "m",
            "--shape",
            "short",
            "--requests",
            "2",
            "--request-timeout",
            "1",
            "--no-equivalence",
            "-o",
            str(out),
            timeout=250,
        )
    finally:
        listener.close()
    # The two 1 s request deadlines (~2 s, plus the command's start: seconds on a loaded
    # machine), not the default 300 s one; an ignored deadline fails at run()'s 250 s.
    assert time.monotonic() - started < 120
    assert r.returncode == 1
    doc = load(out)
    validate(doc, "bench.schema.json")
    assert any("did not answer within 1 s" in f for f in doc["findings"])
    assert doc["shapes"][0]["errors"] == {"stalled": 2}


def test_an_unreachable_url_is_a_one_line_usage_error(tmp_path: Path) -> None:
    """Issue 40: one line on stderr with the URL to try, exit 2, nothing written."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    out = tmp_path / "down.json"
    r = bench("--url", f"http://127.0.0.1:{port}", "-o", str(out))
    assert r.returncode == 2
    assert not out.exists()
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1
    assert f"--url http://127.0.0.1:{port}: nothing answers there (cannot connect" in r.stderr
    assert f"Try: curl -sS http://127.0.0.1:{port}/v1/models" in r.stderr


@pytest.mark.kills_server
def test_a_server_killed_mid_run_gives_named_errors_and_a_partial_result(
    vllm_slow_url: str, vllm_slow_pidfile: str, tmp_path: Path
) -> None:
    out = tmp_path / "killed.json"
    shapes = shapes_file(
        tmp_path,
        "[shape.victim]\ninput_tokens = 64\noutput_tokens = 64\nconcurrency = 2\n"
        "requests = 40\nwarmup = 0\n",
    )
    argv = one_shape(vllm_slow_url, shapes, "victim", out, "--request-timeout", "20")
    with cli_child("bench", *argv) as child:
        child.wait_for_line(measured(" 4/40"), deadline_s=240)
        pid = int(Path(vllm_slow_pidfile).read_text())
        os.killpg(pid, signal.SIGKILL)  # the API server and its engine core, without warning
        code, _, err = child.finish(timeout_s=120)
    assert code == 1, err
    doc = load(out)
    validate(doc, "bench.schema.json")
    shape = doc["shapes"][0]
    assert shape["completed"] >= 4
    # In-flight streams were cut (early close); later requests found no server.
    assert shape["errors"].get(EARLY_CLOSE, 0) >= 1
    assert shape["errors"].get(UNREACHABLE, 0) >= 1
    assert shape["completed"] + sum(shape["errors"].values()) == 40
    assert shape["metrics"]["output_tokens"] == 64 * shape["completed"]
