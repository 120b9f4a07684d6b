"""Enough samples by design (issue 21): a shape that does not set ``requests`` measures what
its quantiles need, by the rule ``bench --compare`` judges percentiles with
(checks/bench_samples.toml), and a ``--duration`` run says the count it reached."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.report.bench import RequestSample, ShapeResult
from blackwell_doctor.report.bench_metrics import shape_metrics
from blackwell_doctor.ruledata import samples
from blackwell_doctor.ruledata.shapes import BUILTIN_SHAPES, ShapeError, parse_shapes
from blackwell_doctor.rules.compare import TOO_FEW, compare
from tests import hostile_http as h
from tests.benchdocs import bench_run


def test_the_rule_gives_hundreds_for_a_p99() -> None:
    rules = samples.load_sample_rules()
    assert rules.beyond_quantile == 10
    assert rules.quantiles == [50.0, 99.0]
    assert [samples.samples_for(q) for q in (50, 90, 95, 99, 99.9)] == [20, 100, 200, 1000, 10000]
    assert samples.needed([50, 99]) == (99, 1000)
    assert samples.label(99.9) == "p99.9"


@pytest.mark.parametrize("q", [50.0, 90.0, 95.0, 99.0, 99.9])
def test_the_default_count_is_exactly_what_the_compare_needs(q: float) -> None:
    # The compare's test: samples beyond the percentile in each run, n * (1 - q/100).
    n = samples.samples_for(q)
    assert samples.tail_samples_enough(n * (1.0 - q / 100.0))
    assert not samples.tail_samples_enough((n - 1) * (1.0 - q / 100.0))


def test_a_shape_without_requests_measures_what_its_quantiles_need() -> None:
    shapes = parse_shapes(
        "[shape.default]\ninput_tokens = 8\noutput_tokens = 8\n"
        "[shape.median]\ninput_tokens = 8\noutput_tokens = 8\nquantiles = [50]\n"
        "[shape.tail]\ninput_tokens = 8\noutput_tokens = 8\nquantiles = [50, 99.9]\n"
        "[shape.fixed]\ninput_tokens = 8\noutput_tokens = 8\nrequests = 7\n"
        "[shape.huge]\ninput_tokens = 8\noutput_tokens = 1000000\n",
        source="s.toml",
    )
    planned = {name: shapes[name].planned_requests() for name in shapes}
    assert planned["default"] == 1000  # p50 and p99: 10 beyond the p99
    assert planned["median"] == 20
    assert planned["tail"] == 10000
    assert planned["fixed"] == 7
    # What the client may hold (20,000,000 tokens' times) caps a derived count.
    assert planned["huge"] == 20
    # The built-in shapes state their quantiles: a p99 only where 1,000 requests are cheap.
    assert planned["short"] == BUILTIN_SHAPES["short"].planned_requests() == 100
    assert planned["long"] == 20
    assert planned["concurrent"] == 1000


@pytest.mark.parametrize("bad", ["[0]", "[100]", "[50, -1]", "['x']"])
def test_a_quantile_that_is_not_a_percentile_is_refused(bad: str) -> None:
    with pytest.raises(ShapeError, match=r"s\.toml: shape\.x"):
        parse_shapes(
            f"[shape.x]\ninput_tokens = 8\noutput_tokens = 8\nquantiles = {bad}\n", source="s.toml"
        )


def _shape(n: int, level: float, seed: int) -> ShapeResult:
    rng = random.Random(seed)
    reqs = [
        RequestSample(
            ok=True,
            ttft_ms=level * rng.uniform(0.5, 1.5),
            e2e_ms=10 * level * rng.uniform(0.9, 1.1),
            itl_ms=[level] * 3,
            output_tokens=4,
        )
        for _ in range(n)
    ]
    metrics = shape_metrics(
        reqs, duration_s=1.0, reasoning_estimates=[None] * n, server_generation_tokens=None
    )
    return ShapeResult(
        name="s",
        description="",
        concurrency=1,
        input_tokens=8,
        input_tokens_requested=8,
        input_size_source="tokenize",
        output_tokens_max=4,
        requests=n,
        completed=n,
        errors={},
        duration_s=1.0,
        complete=True,
        metrics=metrics,
        server=None,
        equivalence=[],
        samples=reqs,
        notes=[],
    )


def test_the_compare_judges_a_p99_from_the_default_count_and_not_one_request_less() -> None:
    def rows(n: int) -> dict[str, str]:
        doc = compare(
            bench_run(_shape(n, 10.0, 1)),
            bench_run(_shape(n, 20.0, 2)),
            before_name="a",
            after_name="b",
            resamples=200,
        )
        return {r.metric: r.verdict for r in doc.comparisons}

    enough = rows(samples.samples_for(99))
    assert enough["ttft_ms.p99"] != TOO_FEW
    assert enough["e2e_ms.p99"] != TOO_FEW
    fewer = rows(samples.samples_for(99) - 1)
    assert fewer["ttft_ms.p99"] == fewer["e2e_ms.p99"] == TOO_FEW
    assert fewer["ttft_ms.p50"] != TOO_FEW


def test_a_duration_run_reports_the_count_it_reached(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shapes = tmp_path / "s.toml"
    shapes.write_text("[shape.one]\ninput_tokens = 8\noutput_tokens = 7\nwarmup = 0\n")
    out = tmp_path / "run.json"
    with h.serving({("POST", "/v1/chat/completions"): h.good_stream()}) as url:
        args = ["bench", "--url", url, "--shapes", str(shapes), "--shape", "one"]
        code = main([*args, "--duration", "0.2", "--no-equivalence", "-o", str(out)])
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    shape = doc["shapes"][0]
    assert shape["requests_planned"] == 1000
    assert shape["quantiles"] == [50.0, 99.0]
    assert shape["requests_needed"] == 1000
    n = shape["completed"]
    assert 0 < n < 1000
    assert code == 1  # stopped short: not complete
    assert any(f"--duration 0.2 s reached: {n} of 1000 requests sent" in x for x in shape["notes"])
    short = "p50, p99 need" if n < 20 else "p99 needs"
    assert (
        f"{n} requests measured (of 1000 planned); {short} at least 1,000 (10 beyond p99, "
        "checks/bench_samples.toml): bench --compare calls them too few samples"
    ) in shape["notes"]
    assert f"{n} requests measured (of 1000 planned)" in text


def test_enough_requests_leave_no_note(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    shapes = tmp_path / "s.toml"
    shapes.write_text("[shape.one]\ninput_tokens = 8\noutput_tokens = 7\nwarmup = 0\n")
    out = tmp_path / "run.json"
    with h.serving({("POST", "/v1/chat/completions"): h.good_stream()}) as url:
        args = ["bench", "--url", url, "--shapes", str(shapes), "--shape", "one"]
        assert main([*args, "--requests", "20", "--no-equivalence", "-o", str(out)]) == 0
    capsys.readouterr()
    shape = json.loads(out.read_text())["shapes"][0]
    assert shape["requests_planned"] == 20
    assert [n for n in shape["notes"] if "requests measured" in n] == [
        "20 requests measured (of 20 planned); p99 needs at least 1,000 (10 beyond p99, "
        "checks/bench_samples.toml): bench --compare calls them too few samples"
    ]
